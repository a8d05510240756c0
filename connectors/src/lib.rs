//! brook's connectors: sources and sinks.
//!
//! Owns (as the runtime grows, see issues 3 and 9): the adapters that turn the embedded
//! log ([`brook_log`]), files and later Kafka into brook `Source`s and `Sink`s, with
//! their split, offset and pre-commit state.
//!
//! Must not know about: the engine's tasks and channels, or any operator.
//!
//! The connectors, one module each:
//!
//! - [`generator`]: [`GeneratorSource`], deterministic synthetic [`GeneratorEvent`]s,
//!   as fast as possible or at a given rate.
//! - [`numbered`]: [`NumberedSource`], events `0..n` each computed from its number
//!   ([`NumberedEvents`]), in splits independent of the parallelism; the generator's
//!   and the Nexmark generator's (brook-nexmark) splits, positions and rate.
//! - [`file`](mod@file): [`FileSource`] reading JSON lines or CSV with a header (plain
//!   or gzip) from files and directories, optionally following a growing file;
//!   [`FileSink`] writing JSON lines or CSV.
//! - [`stdout`]: [`StdoutSink`], one JSON line per record.
//! - [`log`]: [`LogSource`] reading a topic of the embedded log, one split per
//!   partition, and [`LogSink`] appending JSON values to a topic, routed by key.
//!
//! Sources take a [`brook_core::bad_record::BadRecords`] handler for records that do
//! not parse (semantics.md §5); [`ConnectorError`] names the file, topic or setting at
//! fault.

mod bad_record;
mod error;
pub mod file;
pub mod generator;
pub mod log;
pub mod numbered;
mod split;
pub mod stdout;

pub use error::ConnectorError;
pub use file::{
    csv_row_to_json, CsvRow, FileDecoder, FileInput, FileSink, FileSource, RecordAt, SerdeDecoder,
};
pub use generator::{GeneratorBuilder, GeneratorEvent, GeneratorSource};
pub use log::{LogReader, LogSink, LogSource, StartingOffsets, LOG_SINK_TRANSACTION_TIMEOUT_MS};
pub use numbered::{NumberedEvents, NumberedSource, NumberedSplit, ScheduleStart};
pub use stdout::StdoutSink;

/// Records per batch a source emits (the engine's default batch size).
const BATCH: usize = 4096;
