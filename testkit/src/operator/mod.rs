//! An operator test harness, as Flink's `KeyedOneInputStreamOperatorTestHarness`: one
//! [`Operator`](brook_core::operator::Operator) subtask driven the way the engine's
//! task drives it, without threads or a job.
//!
//! - [`harness`]: [`OperatorHarness`] pushes records (with event times), watermarks,
//!   idleness, barriers and the end of input into the operator, moves its
//!   [`ManualClock`](brook_core::time::ManualClock) and fires the processing-time
//!   callback the operator asked for, collects what the operator emits (with
//!   timestamps and the watermark in force), and snapshots the operator and restores
//!   the snapshots into a fresh harness, at another subtask and parallelism too.
//!   [`HarnessSetup`] names the subtask, the clock and the state backend.
//! - [`backend`]: [`TestBackend`], the keyed state backend a harness gives its
//!   operator (heap, serialized in memory, or RocksDB in a temporary directory).
//!
//! The harness calls the operator in the order of the engine's `OperatorLink`
//! (`engine/src/chain.rs`): `restore_state`, `open`, then records, watermarks,
//! processing-time callbacks and barriers, then `finish` and `close`. What the
//! operator emits is collected after each call, as the link passes it on.
//!
//! Side outputs: a brook operator emits its side outputs (late records of windows
//! and joins) as variants of its output type, so [`OperatorHarness::take_output`]
//! returns them with the main output, in emission order;
//! [`OperatorHarness::take_output_split`] separates them.
//!
//! Depends only on `brook-core` and `brook-state` (crates below `brook-operators`), so
//! that the operators' unit tests can use it as a dev-dependency.

pub mod backend;
pub mod harness;

pub use backend::TestBackend;
pub use harness::{Emitted, HarnessError, HarnessSetup, OperatorHarness};
