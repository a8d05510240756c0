//! brook's shared vocabulary, with no runtime in it.
//!
//! This crate owns the small types every other brook crate speaks in:
//!
//! - [`time`]: event time in milliseconds and the [`time::Clock`] through which every
//!   other crate reads wall-clock time, so that tests can drive time by hand.
//! - [`checkpoint`]: checkpoint barriers and the state snapshots operators, sources and
//!   sinks hand to a checkpoint.
//! - [`bad_record`]: the bad-record policy (fail, skip, dead-letter) of semantics.md §5.
//! - [`cancel`]: the job's cancel flag as long-running operator loops check it.
//! - [`config`]: parsing of the duration (`250ms`, `7d`) and size (`1GiB`) values that
//!   appear in job specs and on the command line.
//! - [`names`]: validation of user-given names (topics, groups, jobs) so that none can
//!   escape the data directory.
//! - [`element`]: [`element::StreamRecord`], batches and the in-band
//!   [`element::StreamElement`]s (records, watermarks, idleness, end of input).
//! - [`keys`]: key hashing and key groups, with Flink's arithmetic.
//! - [`partition`]: the [`partition::Partitioner`] of a job-graph edge.
//! - [`operator`]: the [`operator::Operator`] trait, its context and output.
//! - [`watermark`]: [`watermark::WatermarkStrategy`] and per-split watermark tracking.
//! - [`source`] and [`sink`]: the [`source::Source`] / [`source::SourceReader`] and
//!   [`sink::Sink`] / [`sink::SinkWriter`] traits connectors implement.
//! - [`txn_committable`]: what the transactional sinks on a Kafka-style log (the
//!   embedded log's, Kafka's) put into a checkpoint, readable by either.
//!
//! It must not know about the log, state backends, operators or the engine: those
//! depend on it, never the other way round. It has no tokio, no RocksDB and no I/O, and no
//! runtime: tasks, channels and scheduling live in `brook-engine`.

pub mod bad_record;
pub mod cancel;
pub mod checkpoint;
pub mod config;
pub mod element;
pub mod keys;
pub mod names;
pub mod operator;
pub mod partition;
pub mod sink;
pub mod source;
pub mod time;
pub mod txn_committable;
pub mod watermark;
