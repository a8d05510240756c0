//! A job's `log` sources and sinks on a data directory that a broker serves (`brook
//! broker`, `brook runner`): the same topics, reached over the Kafka protocol with the
//! `brook-kafka` connectors instead of the log's files (docs/semantics.md §1a, "Jobs
//! on a served log"). Their guarantees are the in-process ones: the source reads
//! read_committed (unless the spec says `read_uncommitted`) with its partitions'
//! offsets in the checkpoint; the sink writes each checkpoint's records in one
//! transaction committed when the checkpoint completes, marker offsets in the same
//! transaction (the `KafkaSink`'s two-phase commit), under the transactional ids the
//! log sink uses, `<job>.<sink>.<subtask>`. An `enrich` step's log-topic table is read
//! read_committed too, every partition from its start, then followed (as in-process).

use std::net::SocketAddr;

use brook_core::source::ValueDecoder;
use brook_kafka::{KafkaSink, KafkaSource, KafkaStart, KafkaTable};
use brook_log::Log;

use super::{Isolation, StartPosition};

/// How long a served job's sources and sinks wait for the broker when they start (ms):
/// it answered moments before, when `brook run` chose it; a broker gone since then is
/// reported after this instead of the Kafka connector's minute.
const CONNECT_TIMEOUT_MS: u64 = 10_000;

/// Where a job's `log` sources, sinks and lookup tables find the data directory's log.
#[derive(Debug, Clone, Copy)]
pub enum JobLog<'a> {
    /// Open in this process (it holds the data directory's lock).
    Local(&'a Log),
    /// Held by a broker that serves it at this address (`<data-dir>/broker.addr`).
    Served(SocketAddr),
}

/// The reader of a `log` source on a served log: `topic` from `start` (for partitions
/// the checkpoint has no position for), ending at the partitions' ends when `bounded`.
/// Each record's value is decoded by a decoder `make` makes.
pub(crate) fn log_source<D, F>(
    addr: SocketAddr,
    topic: &str,
    start: StartPosition,
    bounded: bool,
    isolation: Isolation,
    make: F,
) -> KafkaSource<D::Out>
where
    D: ValueDecoder + 'static,
    D::Out: Send + 'static,
    F: Fn() -> D + Send + Sync + 'static,
{
    let start = match start {
        StartPosition::Earliest => KafkaStart::Earliest,
        StartPosition::Latest => KafkaStart::Latest,
    };
    let src = KafkaSource::with_decoder(addr.to_string(), topic, make)
        .connect_timeout(CONNECT_TIMEOUT_MS)
        .start(start)
        .bounded(bounded);
    // The Kafka source reads read_committed unless told otherwise.
    match isolation {
        Isolation::ReadCommitted => src,
        Isolation::ReadUncommitted => src.property("isolation.level", "read_uncommitted"),
    }
}

/// The writer of a `log` sink on a served log: transactional ids `<job>.<sink>.<subtask>`
/// (as the log sink's). Its `transaction_timeout` does not apply: the Kafka sink keeps a
/// checkpoint's records in the checkpoint and opens its transaction only to write and
/// commit them when the checkpoint completes, so no transaction stays open between
/// checkpoints (librdkafka's default `transaction.timeout.ms`, 60 s, bounds that step).
pub(crate) fn log_sink<T: Send + 'static>(sink: KafkaSink<T>, job: &str) -> KafkaSink<T> {
    sink.transactional_id_prefix(job)
        .connect_timeout(CONNECT_TIMEOUT_MS)
}

/// The reader of an `enrich` step's lookup table on topic `topic` of a served log
/// (read_committed, as the in-process table).
pub(crate) fn log_table(addr: SocketAddr, topic: &str) -> KafkaTable {
    KafkaTable::new(addr.to_string(), topic).connect_timeout(CONNECT_TIMEOUT_MS)
}
