//! The `brook` binary's commands that run jobs: `brook run` (in the foreground, or as a
//! member of a Kafka consumer group) with its metrics endpoint, and `brook runner` with
//! its clients. Binary-only: the library (`brook::spec`, `brook::runner`) is in
//! `src/lib.rs`; the log commands (`topic`, `produce`, `consume`, `group`) are in
//! `src/main.rs`.

pub(crate) mod group_worker;
pub(crate) mod metrics_http;
pub(crate) mod run;
pub(crate) mod runner_cli;
