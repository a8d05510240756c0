//! `brook verify`'s decisions, as pure functions (the processes it starts and kills are
//! in the binary, `src/cli/verify.rs`):
//! - [`schedule`]: when each attempt of the killed run is killed, and at which
//!   parallelism it runs, from a seed;
//! - [`compare`]: a sink's committed rows against the reference run's, as multisets,
//!   and the report of what is missing or doubled;
//! - [`order`]: whether the output may depend on arrival order (then a difference is
//!   not a violation of exactly-once), from the spec.

pub mod compare;
pub mod order;
pub mod schedule;
