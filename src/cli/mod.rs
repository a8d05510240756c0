//! The `brook` binary's commands, one module per group: the embedded log's (`topic`,
//! `produce`, `consume`, `group`), `brook broker` (the log over the Kafka protocol), `brook run` (in the foreground, or as a member of a
//! Kafka consumer group) with its metrics endpoint, `brook verify` (a job killed and
//! restored against a clean run), `brook nexmark` (a Nexmark query's throughput), and `brook runner` with its clients. `src/main.rs`
//! parses the command line and dispatches; the library (`brook::spec`,
//! `brook::runner`, `brook::verify`) is in `src/lib.rs`.

pub(crate) mod broker_cli;
pub(crate) mod group_worker;
pub(crate) mod log_access;
pub(crate) mod log_cli;
pub(crate) mod metrics_http;
pub(crate) mod nexmark;
pub(crate) mod nexmark_recovery;
pub(crate) mod remote_log;
pub(crate) mod remote_reader;
pub(crate) mod remote_reset;
pub(crate) mod remote_writer;
pub(crate) mod run;
pub(crate) mod runner_cli;
pub(crate) mod totals;
pub(crate) mod verify;
