//! brook: a dataflow stream-processing engine in one binary, with an embedded
//! partitioned log as its default source and sink.
//!
//! This crate re-exports brook's public API and provides the `brook` binary:
//!
//! - [`core`]: shared vocabulary (time, configuration values, names);
//! - [`log`]: the embedded, Kafka-like partitioned log with consumer groups.
//!
//! The crates below it own the rest as it is built: `brook-state` (keyed state),
//! `brook-operators`, `brook-connectors` and `brook-engine` (the runtime).

pub use brook_core as core;
pub use brook_log as log;
