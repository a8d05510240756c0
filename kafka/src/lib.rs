//! brook's Kafka connector: [`KafkaSource`] reads a topic of a Kafka-compatible broker,
//! [`KafkaSink`] writes one, both through librdkafka (the `rdkafka` crate). It lives in
//! its own crate so that only what needs librdkafka links it.
//!
//! # Reading
//!
//! The splits are the topic's partitions (as they are when the job starts): subtask
//! `i` of `p` reads partitions `i, i + p, ...`, assigned by brook itself (no consumer
//! group rebalancing; Flink's Kafka source does the same). Each record's value is
//! decoded from JSON into `T`; its Kafka timestamp becomes its event time. Every
//! partition is a split of its own, so event-time watermarks and idleness are per
//! partition, exactly as for the embedded log's source.
//!
//! A partition's checkpointed position is the next offset to read (a version byte 1,
//! then the offset as a `u64`, little endian; split id `topic/partition`): a restored
//! job resumes each partition there, whatever the consumer group says. With a
//! [`group`](KafkaSource::group), the positions of a completed checkpoint are also
//! committed to the group (only for monitoring and lag tools: brook never reads them
//! back, except for [`KafkaStart::Committed`] on a fresh start).
//!
//! Records are read with `isolation.level=read_committed` unless the properties say
//! otherwise. A [`bounded`](KafkaSource::bounded) source ends when it has reached the
//! end of every partition (librdkafka's partition EOF, once past the end offset seen
//! when the reader started); otherwise it follows the topic. A value that is not JSON
//! of `T` follows the [`BadRecords`](brook_core::bad_record::BadRecords) policy
//! (default: fail, naming `topic/partition@offset`).
//!
//! Partitions are read in the order librdkafka delivers them, which differs from run
//! to run: with event-time watermarks (the minimum over partitions) results are the
//! same in every run, but which records count as late can differ when a partition's
//! own disorder exceeds the watermark's bound.
//!
//! Scale-out (several brook processes sharing a topic through one consumer group,
//! each partition handed over with its state): see [`group`]. For it a source can be
//! restricted to some [`partitions`](KafkaSource::partitions) and commit its offsets
//! [through the group's member](KafkaSource::commit_offsets_through).
//!
//! A topic can also be read as a lookup table: [`KafkaTable`] reads every partition
//! from its start to its end, then follows it (see [`KafkaTable::load`]).
//!
//! # Writing
//!
//! Each record's value is written as JSON; with [`KafkaSink::key_by`] it gets a key and
//! Kafka's default partitioner (`murmur2`, as the Java client) picks its partition;
//! keyless records are spread. Without checkpoints the producer is idempotent
//! (`enable.idempotence=true`): at least once, no duplicates from retries.
//!
//! ## Exactly once (jobs with checkpoints)
//!
//! Each subtask owns the stable transactional id `{prefix}.{sink}.{subtask}`; starting
//! a writer calls `init_transactions`, which fences any older producer of the same id
//! (a zombie of a failed attempt) and aborts its open transaction. The records a
//! subtask receives between two barriers are kept by the writer and, at the barrier,
//! go into the checkpoint as the committable. When the checkpoint completes they are
//! written in one Kafka transaction, which also commits the checkpoint's id as the
//! offset of partition 0 of the topic in the consumer group
//! `brook-txn-marker.{transactional id}` ([`marker_group`](brook_core::txn_committable::marker_group):
//! a marker, atomic with the records). On restore the writer reads the marker and
//! writes, one transaction each, the restored committables of later checkpoints: a
//! transaction is never written twice, and none is lost when the process died between
//! a checkpoint's completion and its commit (librdkafka cannot resume another
//! process's open transaction, so the records themselves are in the checkpoint).
//! Readers with `isolation.level=read_committed` see only committed transactions.
//! Output is thus delayed by one checkpoint interval and held in memory until then.
//!
//! Committable: a [`TxnCommittable::Records`](brook_core::txn_committable::TxnCommittable),
//! JSON `{"v":1,"id":"<transactional id>","checkpoint":N, "records":[[key or null,
//! value, timestamp ms or null], ...]}`. A checkpoint taken by brook's log sink
//! in-process holds prepared log transactions instead
//! ([`TxnCommittable::Prepared`](brook_core::txn_committable::TxnCommittable)): restored
//! through the brook broker of that log, each is committed first by an EndTxn that
//! resumes it ([`resume`]), before the writer's sessions start (a new session aborts
//! the prepared transactions left, as Kafka's InitProducerId). Bytes of neither kind
//! fail the restore, naming the topic.
//!
//! # Settings
//!
//! Properties given with [`KafkaSource::property`] / [`KafkaSink::property`] (from YAML:
//! `properties:`) go to librdkafka as they are: security settings
//! (`security.protocol`, `sasl.mechanism`, `sasl.username`, `ssl.ca.location`, ...)
//! and tuning.
//!
//! When a source enumerates its partitions, and when a sink's writer starts, it waits
//! for a broker at `bootstrap` for at most its [`connect_timeout`](KafkaSource::connect_timeout)
//! (default 60 s), warning every 5 s, then fails naming the address (see [`connect`]).

use std::collections::BTreeMap;
use std::time::Duration;

use brook_core::operator::OperatorError;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use thiserror::Error;

pub mod admin;
pub mod alter_configs;
pub mod connect;
pub mod group;
pub mod resume;
mod sink;
mod source;
mod table;

pub use connect::DEFAULT_CONNECT_TIMEOUT_MS;

pub use group::{GroupListener, GroupMember, OffsetCommitter};

/// The librdkafka bindings this connector uses (for tools and tests).
pub use rdkafka;

pub use sink::KafkaSink;
pub use source::{KafkaReader, KafkaSource, KafkaSplit, KafkaStart};
pub use table::{KafkaTable, TableFollower, TableRecord};

/// How long metadata, offset and transaction calls may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong talking to Kafka, naming the topic and what was being done.
#[derive(Debug, Error)]
pub enum KafkaConnectorError {
    /// A librdkafka call failed.
    #[error("kafka {context}: {source}")]
    Kafka {
        /// What was being done (naming the topic, partition, transactional id).
        context: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// No broker at `bootstrap` answered within the connect timeout (see
    /// [`connect`]).
    #[error(
        "cannot reach Kafka at {bootstrap} within {} s (connect_timeout): {source}",
        timeout_ms.div_ceil(1000)
    )]
    Unreachable {
        /// The brokers tried, as configured.
        bootstrap: String,
        /// How long was waited (ms).
        timeout_ms: u64,
        /// librdkafka's last error.
        source: KafkaError,
    },
    /// A setting or a checkpoint does not fit.
    #[error("kafka {field}: {message}")]
    Config {
        /// The setting (or `restore`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl KafkaConnectorError {
    fn kafka(context: impl Into<String>, source: KafkaError) -> OperatorError {
        OperatorError::other(KafkaConnectorError::Kafka {
            context: context.into(),
            source,
        })
    }

    fn config(field: impl Into<String>, message: impl Into<String>) -> OperatorError {
        OperatorError::other(KafkaConnectorError::Config {
            field: field.into(),
            message: message.into(),
        })
    }
}

/// Connection settings shared by sources and sinks.
#[derive(Debug, Clone)]
struct Conn {
    bootstrap: String,
    topic: String,
    properties: BTreeMap<String, String>,
    /// How long to wait for the brokers when starting (ms; see [`connect`]).
    connect_timeout_ms: u64,
}

impl Conn {
    fn new(bootstrap: String, topic: String) -> Self {
        Conn {
            bootstrap,
            topic,
            properties: BTreeMap::new(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
        }
    }

    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}
