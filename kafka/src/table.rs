//! [`KafkaTable`]: a topic read as a lookup table (as a Kafka Streams `GlobalKTable`'s
//! global consumer): every partition, from its start to its end when the table loads,
//! then followed. No consumer group: the reader assigns all partitions itself and
//! commits nothing, since a table is always rebuilt from the start.
//!
//! What the records mean (rows, tombstones) is the caller's: the reader hands each
//! record's key and value (`None`: a null value, a tombstone) to a callback.

use std::fmt;
use std::time::Duration;

use brook_core::operator::{OpResult, OperatorError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::connect;
use crate::source::ReaderContext;
use crate::{Conn, KafkaConnectorError};

/// How long a load may go without a record or a partition's end before it fails
/// (ms): a broker that stopped answering, rather than a long table.
const LOAD_IDLE_TIMEOUT_MS: u64 = 30_000;

/// The longest single wait of a load (ms).
const LOAD_POLL_MS: u64 = 100;

/// One record of a table topic.
#[derive(Debug, Clone, Copy)]
pub struct TableRecord<'a> {
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The record key.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for a null value (a tombstone).
    pub value: Option<&'a [u8]>,
}

/// A topic to read as a table (every partition from its start, then followed):
/// settings only, cheap to clone; [`KafkaTable::load`] connects.
#[derive(Debug, Clone)]
pub struct KafkaTable {
    conn: Conn,
}

impl KafkaTable {
    /// The topic `topic` on the brokers `bootstrap` (`host:port[,host:port...]`).
    pub fn new(bootstrap: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaTable {
            conn: Conn::new(bootstrap.into(), topic.into()),
        }
    }

    /// How long [`load`](KafkaTable::load) waits for a broker at `bootstrap` to answer
    /// (ms; default [`DEFAULT_CONNECT_TIMEOUT_MS`](crate::DEFAULT_CONNECT_TIMEOUT_MS)).
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        self.conn.connect_timeout_ms = ms;
        self
    }

    /// A librdkafka property (security settings, tuning), passed as it is. Records
    /// are read `read_committed` unless `isolation.level` says otherwise.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conn.properties.insert(key.into(), value.into());
        self
    }

    /// Reads every partition from its start (the oldest record retention and
    /// compaction left) to its end, handing each record to `on_record` in offset
    /// order per partition, and returns the reader that follows the topic from there.
    ///
    /// The end is each partition's end when librdkafka reports it (partition EOF): for
    /// `read_committed`, the last stable offset of that fetch. A single broker (brook's)
    /// reports it only there, so the load holds at least every record committed before
    /// it began.
    ///
    /// # Errors
    /// The broker cannot be reached within the connect timeout, the topic does not
    /// exist, a read fails, nothing arrives for 30 s before the ends are reached, or
    /// `on_record` fails (its error is returned as it is).
    pub fn load(
        &self,
        mut on_record: impl FnMut(TableRecord<'_>) -> OpResult,
    ) -> OpResult<TableFollower> {
        let topic = self.conn.topic.clone();
        let consumer = self.consumer()?;
        let md = connect::topic_metadata(
            consumer.client(),
            &self.conn.bootstrap,
            Some(&topic),
            self.conn.connect_timeout_ms,
        )
        .map_err(OperatorError::other)?;
        let partitions = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        if partitions == 0 {
            return Err(KafkaConnectorError::config(
                "topic",
                format!("{topic:?} does not exist"),
            ));
        }
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .map_err(|e| KafkaConnectorError::kafka(format!("assign {topic}/{p}"), e))?;
        }
        consumer.assign(&tpl).map_err(|e| {
            KafkaConnectorError::kafka(format!("assign partitions of {topic:?}"), e)
        })?;
        let mut at_end = vec![false; partitions as usize];
        // Polls that found nothing, counted in their length (a count, not a clock read,
        // as admin::read_to_end): an empty poll waits out its timeout.
        let mut idle_ms = 0;
        while at_end.iter().any(|e| !e) {
            if idle_ms >= LOAD_IDLE_TIMEOUT_MS {
                return Err(KafkaConnectorError::config(
                    "topic",
                    format!(
                        "{topic:?}: nothing read for {} s before the end of every partition",
                        LOAD_IDLE_TIMEOUT_MS / 1000
                    ),
                ));
            }
            match consumer.poll(Duration::from_millis(LOAD_POLL_MS)) {
                None => idle_ms += LOAD_POLL_MS,
                Some(Ok(m)) => {
                    idle_ms = 0;
                    on_record(TableRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key(),
                        value: m.payload(),
                    })?;
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    idle_ms = 0;
                    if let Some(e) = usize::try_from(p).ok().and_then(|p| at_end.get_mut(p)) {
                        *e = true;
                    }
                }
                Some(Err(e)) => {
                    return Err(KafkaConnectorError::kafka(format!("read {topic:?}"), e))
                }
            }
        }
        Ok(TableFollower { topic, consumer })
    }

    fn consumer(&self) -> OpResult<BaseConsumer<ReaderContext>> {
        let mut c = self.conn.client_config();
        // librdkafka wants a group id even with manual assignment; nothing is
        // committed under it.
        c.set("group.id", format!("brook-table-{}", self.conn.topic));
        c.set("enable.auto.commit", "false");
        c.set("enable.auto.offset.store", "false");
        c.set("enable.partition.eof", "true");
        c.set("auto.offset.reset", "earliest");
        if !self.conn.properties.contains_key("isolation.level") {
            c.set("isolation.level", "read_committed");
        }
        c.create_with_context(ReaderContext).map_err(|e| {
            KafkaConnectorError::kafka(format!("consumer of topic {:?}", self.conn.topic), e)
        })
    }
}

/// A loaded table's reader: follows the topic (see [`KafkaTable::load`]).
pub struct TableFollower {
    topic: String,
    consumer: BaseConsumer<ReaderContext>,
}

impl fmt::Debug for TableFollower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableFollower")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl TableFollower {
    /// Hands every record read since the load or the last `poll` to `on_record`,
    /// without waiting: cheap when nothing is new (librdkafka fetches in the
    /// background; this only empties its queue).
    ///
    /// # Errors
    /// A read fails, or `on_record` fails.
    pub fn poll(&mut self, mut on_record: impl FnMut(TableRecord<'_>) -> OpResult) -> OpResult {
        loop {
            match self.consumer.poll(Duration::ZERO) {
                None => return Ok(()),
                Some(Ok(m)) => on_record(TableRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key(),
                    value: m.payload(),
                })?,
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    return Err(KafkaConnectorError::kafka(
                        format!("read {:?}", self.topic),
                        e,
                    ))
                }
            }
        }
    }
}
