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
//! of `T` follows the [`BadRecords`] policy (default: fail, naming
//! `topic/partition@offset`).
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
//! offset of partition 0 of the topic in the consumer group `{transactional id}` (a
//! marker, atomic with the records). On restore the writer reads the marker and
//! writes, one transaction each, the restored committables of later checkpoints: a
//! transaction is never written twice, and none is lost when the process died between
//! a checkpoint's completion and its commit (librdkafka cannot resume another
//! process's open transaction, so the records themselves are in the checkpoint).
//! Readers with `isolation.level=read_committed` see only committed transactions.
//! Output is thus delayed by one checkpoint interval and held in memory until then.
//!
//! Committable format: JSON `{"v":1,"id":"<transactional id>","checkpoint":N,
//! "records":[[key or null, value, timestamp ms or null], ...]}`.
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

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brook_core::bad_record::BadRecords;
use brook_core::checkpoint::CheckpointId;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError, Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{
    decode_offset_position, encode_offset_position, InputStatus, Source, SourceReader, Split,
    SplitProgress,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub mod admin;
pub mod connect;
pub mod group;

pub use connect::DEFAULT_CONNECT_TIMEOUT_MS;

pub use group::{GroupListener, GroupMember, OffsetCommitter};

/// The librdkafka bindings this connector uses (for tools and tests).
pub use rdkafka;

/// Records per `poll_next` at most.
const BATCH: usize = 4096;
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

/// Where a [`KafkaSource`] starts a partition that has no checkpointed position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KafkaStart {
    /// The group's committed offset (needs a group); earliest where it has none.
    Committed,
    /// The oldest stored record. The default.
    #[default]
    Earliest,
    /// Only records written after the reader starts.
    Latest,
    /// The first record whose timestamp is at or after this (ms since the epoch); the
    /// end of the partition when there is none.
    Timestamp(i64),
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

/// A source reading a Kafka topic (see the [crate docs](crate)).
pub struct KafkaSource<T> {
    conn: Conn,
    group: Option<String>,
    start: KafkaStart,
    bounded: bool,
    bad: BadRecords,
    /// Only these partitions (all when `None`).
    partitions: Option<Vec<i32>>,
    /// Commits offsets for the group instead of the reader's own consumer.
    committer: Option<Arc<dyn OffsetCommitter>>,
    _out: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for KafkaSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("bootstrap", &self.conn.bootstrap)
            .field("topic", &self.conn.topic)
            .field("group", &self.group)
            .field("start", &self.start)
            .field("bounded", &self.bounded)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            conn: self.conn.clone(),
            group: self.group.clone(),
            start: self.start,
            bounded: self.bounded,
            bad: self.bad.clone(),
            partitions: self.partitions.clone(),
            committer: self.committer.clone(),
            _out: PhantomData,
        }
    }
}

/// The constructor names the record type: `KafkaSource::json::<T>(bootstrap, topic)`.
impl KafkaSource<()> {
    /// Reads `topic` on the brokers `bootstrap` (`host:port[,host:port...]`), decoding
    /// each value from JSON into `T`.
    pub fn json<T: DeserializeOwned + Send + 'static>(
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
    ) -> KafkaSource<T> {
        KafkaSource {
            conn: Conn::new(bootstrap.into(), topic.into()),
            group: None,
            start: KafkaStart::default(),
            bounded: false,
            bad: BadRecords::fail(),
            partitions: None,
            committer: None,
            _out: PhantomData,
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> KafkaSource<T> {
    /// The consumer group whose offsets are committed on checkpoint completion (for
    /// monitoring) and read by [`KafkaStart::Committed`].
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Where partitions without a checkpointed position start. Default earliest.
    pub fn start(mut self, start: KafkaStart) -> Self {
        self.start = start;
        self
    }

    /// Ends once every partition's end is reached (true), or follows the topic
    /// (false, the default).
    pub fn bounded(mut self, bounded: bool) -> Self {
        self.bounded = bounded;
        self
    }

    /// A librdkafka property (security settings, tuning), passed as it is.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conn.properties.insert(key.into(), value.into());
        self
    }

    /// How long the source waits for a broker at `bootstrap` to answer when the job
    /// starts, warning every few seconds, before it fails (ms; default
    /// [`DEFAULT_CONNECT_TIMEOUT_MS`]; see [`connect`]).
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        self.conn.connect_timeout_ms = ms;
        self
    }

    /// What to do with a value that does not decode (semantics.md §5); its position
    /// is `topic/partition@offset`. Default: fail.
    pub fn on_bad_record(mut self, bad: BadRecords) -> Self {
        self.bad = bad;
        self
    }

    /// Reads only these partitions of the topic (default: all). A partition the topic
    /// does not have fails the job when it starts.
    pub fn partitions(mut self, partitions: Vec<i32>) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// Commits a completed checkpoint's offsets through `committer` (a
    /// [`GroupMember`] of the group) rather than the reader's own consumer, which an
    /// active group would refuse. Implies committing.
    pub fn commit_offsets_through(mut self, committer: Arc<dyn OffsetCommitter>) -> Self {
        self.committer = Some(committer);
        self
    }

    fn consumer(&self, info: Option<&SubtaskInfo>) -> OpResult<BaseConsumer<ReaderContext>> {
        let mut c = self.conn.client_config();
        // A group id is required by librdkafka even with manual assignment; brook
        // never subscribes, so it only matters for committed offsets.
        let group = self.group.clone().unwrap_or_else(|| {
            format!("brook-{}-{}", self.conn.topic, info.map_or(0, |i| i.index))
        });
        c.set("group.id", group);
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

    fn partition_count(&self, consumer: &BaseConsumer<ReaderContext>) -> OpResult<i32> {
        let topic = &self.conn.topic;
        let md = connect::topic_metadata(
            consumer.client(),
            &self.conn.bootstrap,
            Some(topic),
            self.conn.connect_timeout_ms,
        )
        .map_err(OperatorError::other)?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .ok_or_else(|| {
                KafkaConnectorError::config("topic", format!("{topic:?} does not exist"))
            })?;
        if let Some(e) = t.error() {
            return Err(KafkaConnectorError::config(
                "topic",
                format!("{topic:?}: {:?}", RDKafkaErrorCode::from(e)),
            ));
        }
        if t.partitions().is_empty() {
            return Err(KafkaConnectorError::config(
                "topic",
                format!("{topic:?} does not exist"),
            ));
        }
        Ok(t.partitions().len() as i32)
    }

    /// The reader of one subtask, resuming from `positions` (split id → checkpointed
    /// position) where it has one.
    ///
    /// # Errors
    /// The broker cannot be reached, the topic does not exist, a position is not one
    /// this source wrote.
    pub fn restored_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<KafkaSplit>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<KafkaReader<T>> {
        let consumer = self.consumer(Some(info))?;
        let topic = self.conn.topic.clone();
        // Every partition starts at an explicit offset, so its position is known (and
        // can be checkpointed) before its first record.
        let committed = match (self.start, self.group.is_some()) {
            (KafkaStart::Committed, true) => {
                let mut t = TopicPartitionList::new();
                for s in &splits {
                    t.add_partition(&topic, s.partition);
                }
                Some(consumer.committed_offsets(t, TIMEOUT).map_err(|e| {
                    KafkaConnectorError::kafka(format!("committed offsets of {topic:?}"), e)
                })?)
            }
            (KafkaStart::Committed, false) => {
                return Err(KafkaConnectorError::config(
                    "start",
                    "starting at committed offsets needs a group",
                ))
            }
            _ => None,
        };
        let by_time = match self.start {
            KafkaStart::Timestamp(ts) => {
                let mut t = TopicPartitionList::new();
                for s in &splits {
                    t.add_partition_offset(&topic, s.partition, Offset::Offset(ts))
                        .map_err(|e| KafkaConnectorError::kafka("offsets for times", e))?;
                }
                Some(consumer.offsets_for_times(t, TIMEOUT).map_err(|e| {
                    KafkaConnectorError::kafka(format!("offsets for times of {topic:?}"), e)
                })?)
            }
            _ => None,
        };
        let mut tpl = TopicPartitionList::new();
        let mut parts = Vec::with_capacity(splits.len());
        for (i, s) in splits.iter().enumerate() {
            let (low, high) = consumer
                .fetch_watermarks(&topic, s.partition, TIMEOUT)
                .map_err(|e| {
                    KafkaConnectorError::kafka(format!("offsets of {topic}/{}", s.partition), e)
                })?;
            let (low, high) = (low.max(0) as u64, high.max(0) as u64);
            let found = |l: &Option<TopicPartitionList>| {
                l.as_ref()
                    .and_then(|l| l.find_partition(&topic, s.partition))
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) if o >= 0 => Some(o as u64),
                        _ => None,
                    })
            };
            let position = match positions.get(&s.split_id()) {
                Some(b) => {
                    let o = decode_offset_position(b).ok_or_else(|| {
                        KafkaConnectorError::config(
                            "restore",
                            format!(
                                "the checkpointed position of {}/{} is not one this source wrote",
                                topic, s.partition
                            ),
                        )
                    })?;
                    if o < low || o > high {
                        return Err(KafkaConnectorError::config(
                            "restore",
                            format!(
                                "cannot resume {topic}/{} at checkpointed offset {o}: the \
                                 partition holds offsets {low}..{high} (retention, or the topic \
                                 was created again)",
                                s.partition
                            ),
                        ));
                    }
                    o
                }
                None => match self.start {
                    KafkaStart::Committed => found(&committed).unwrap_or(low).clamp(low, high),
                    KafkaStart::Earliest => low,
                    KafkaStart::Latest => high,
                    KafkaStart::Timestamp(_) => found(&by_time).unwrap_or(high).clamp(low, high),
                },
            };
            tpl.add_partition_offset(&topic, s.partition, Offset::Offset(position as i64))
                .map_err(|e| {
                    KafkaConnectorError::kafka(format!("assign {topic}/{}", s.partition), e)
                })?;
            parts.push(Part {
                split: i as u32,
                partition: s.partition,
                position,
                finished: false,
                high,
                end: high,
                read_any: false,
            });
        }
        consumer.assign(&tpl).map_err(|e| {
            KafkaConnectorError::kafka(format!("assign partitions of {topic:?}"), e)
        })?;
        Ok(KafkaReader {
            topic,
            consumer,
            parts,
            bounded: self.bounded,
            commit: match (&self.committer, self.group.is_some()) {
                (Some(c), _) => Commit::Through(Arc::clone(c)),
                (None, true) => Commit::Own,
                (None, false) => Commit::No,
            },
            bad: self.bad.clone(),
            pending: None,
            snapshots: VecDeque::new(),
            _out: PhantomData,
        })
    }
}

/// One partition of a [`KafkaSource`]'s topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSplit {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

impl Split for KafkaSplit {
    fn split_id(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

impl<T: DeserializeOwned + Send + 'static> Source for KafkaSource<T> {
    type Out = T;
    type Split = KafkaSplit;

    fn enumerate_splits(&self, _parallelism: u32) -> OpResult<Vec<KafkaSplit>> {
        let consumer = self.consumer(None)?;
        let n = self.partition_count(&consumer)?;
        let chosen: Vec<i32> = match &self.partitions {
            Some(list) => {
                if let Some(p) = list.iter().find(|p| !(0..n).contains(*p)) {
                    return Err(KafkaConnectorError::config(
                        "partitions",
                        format!(
                            "topic {:?} has no partition {p} (it has {n})",
                            self.conn.topic
                        ),
                    ));
                }
                list.clone()
            }
            None => (0..n).collect(),
        };
        Ok(chosen
            .into_iter()
            .map(|partition| KafkaSplit {
                topic: self.conn.topic.clone(),
                partition,
            })
            .collect())
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<KafkaSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(self.restored_reader(
            info,
            splits,
            &std::collections::HashMap::new(),
        )?))
    }

    fn is_bounded(&self) -> bool {
        self.bounded
    }

    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<KafkaSplit>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(self.restored_reader(info, splits, positions)?))
    }
}

#[derive(Debug)]
struct Part {
    split: u32,
    partition: i32,
    /// The next offset to read.
    position: u64,
    /// A bounded reader reached the partition's end (reported once).
    finished: bool,
    /// The partition's high watermark when last seen, for lag.
    high: u64,
    /// The high watermark when the reader started (where a bounded reader may end).
    end: u64,
    /// A record was read since the reader started.
    read_any: bool,
}

/// A reader's client context: a partition's end also comes as a client-wide error
/// event, which librdkafka's default context logs as an error; the reader handles it
/// from its poll, so only other errors are logged (as warnings).
struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            tracing::warn!(error = %error, reason, "kafka client");
        }
    }
}

impl ConsumerContext for ReaderContext {}

/// Where a reader commits completed checkpoints' offsets.
enum Commit {
    No,
    /// With its own consumer (the group has no active members: brook assigns).
    Own,
    /// Through the member of an active group.
    Through(Arc<dyn OffsetCommitter>),
}

/// What a wait for data received.
#[derive(Debug)]
enum Polled {
    Message(OwnedMessage),
    Eof(i32),
}

/// Reads some partitions of a topic for one subtask of a [`KafkaSource`].
pub struct KafkaReader<T> {
    topic: String,
    consumer: BaseConsumer<ReaderContext>,
    parts: Vec<Part>,
    bounded: bool,
    commit: Commit,
    bad: BadRecords,
    /// What a wait for data received, handed out by the next poll.
    pending: Option<Polled>,
    /// Positions snapshotted per checkpoint, committed to the group on completion.
    snapshots: VecDeque<(CheckpointId, Vec<(i32, u64)>)>,
    _out: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for KafkaReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaReader")
            .field("topic", &self.topic)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

impl<T> KafkaReader<T> {
    /// The next offset to read per partition (those known so far).
    pub fn positions(&self) -> BTreeMap<i32, u64> {
        self.parts
            .iter()
            .map(|p| (p.partition, p.position))
            .collect()
    }

    fn part(&mut self, partition: i32) -> Option<&mut Part> {
        self.parts.iter_mut().find(|p| p.partition == partition)
    }

    fn handle(&mut self, m: &OwnedMessage, out: &mut Output<T>) -> OpResult
    where
        T: DeserializeOwned,
    {
        let topic = self.topic.clone();
        let Some(p) = self.part(m.partition()) else {
            return Ok(());
        };
        p.position = m.offset() as u64 + 1;
        p.read_any = true;
        p.high = p.high.max(p.position);
        out.set_split(p.split);
        let value = m.payload().unwrap_or_default();
        match serde_json::from_slice::<T>(value) {
            Ok(v) => out.collect(v, m.timestamp().to_millis()),
            Err(e) => self.bad.handle(
                &String::from_utf8_lossy(value),
                &format!("{topic}/{}@{}", m.partition(), m.offset()),
                &format!("invalid JSON: {e}"),
            )?,
        }
        Ok(())
    }

    fn eof(&mut self, partition: i32, out: &mut Output<T>) {
        let bounded = self.bounded;
        if let Some(p) = self.part(partition) {
            // An end reached before the start's end offset (a fetch that raced the
            // broker's high watermark) is not the end: only after a record was read,
            // or at the end offset captured when the reader started.
            if bounded && !p.finished && (p.read_any || p.position >= p.end) {
                p.finished = true;
                out.finish_split(p.split);
            }
        }
    }

    fn is_finished(&self) -> bool {
        self.bounded && self.parts.iter().all(|p| p.finished)
    }
}

impl<T: DeserializeOwned + Send + 'static> SourceReader for KafkaReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let mut got = 0;
        match self.pending.take() {
            Some(Polled::Message(m)) => {
                self.handle(&m, out)?;
                got += 1;
            }
            Some(Polled::Eof(p)) => self.eof(p, out),
            None => {}
        }
        while got < BATCH && !self.is_finished() {
            let m = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => m.detach(),
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    self.eof(p, out);
                    continue;
                }
                Some(Err(e)) => {
                    return Err(KafkaConnectorError::kafka(
                        format!("read {:?}", self.topic),
                        e,
                    ))
                }
            };
            self.handle(&m, out)?;
            got += 1;
        }
        Ok(if self.is_finished() {
            InputStatus::End
        } else if got > 0 {
            InputStatus::MoreAvailable
        } else {
            InputStatus::NothingAvailable
        })
    }

    fn wait_for_data(&mut self, timeout_ms: u64) {
        if self.pending.is_some() {
            return;
        }
        match self
            .consumer
            .poll(Duration::from_millis(timeout_ms.min(100)))
        {
            Some(Ok(m)) => self.pending = Some(Polled::Message(m.detach())),
            Some(Err(KafkaError::PartitionEOF(p))) => self.pending = Some(Polled::Eof(p)),
            Some(Err(e)) => tracing::warn!(topic = %self.topic, error = %e, "kafka poll"),
            None => {}
        }
    }

    fn checkpoint_started(&mut self, checkpoint: CheckpointId) {
        let pos = self
            .parts
            .iter()
            .map(|p| (p.partition, p.position))
            .collect();
        self.snapshots.push_back((checkpoint, pos));
    }

    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        Some(
            self.parts
                .iter()
                .map(|p| {
                    (
                        format!("{}/{}", self.topic, p.partition),
                        encode_offset_position(p.position),
                    )
                })
                .collect(),
        )
    }

    fn checkpoint_complete(&mut self, checkpoint: CheckpointId) -> OpResult {
        let mut last = None;
        while self
            .snapshots
            .front()
            .is_some_and(|(id, _)| *id <= checkpoint)
        {
            last = self.snapshots.pop_front();
        }
        let Some((_, pos)) = last else {
            return Ok(());
        };
        match &self.commit {
            Commit::No => return Ok(()),
            Commit::Own => {}
            Commit::Through(c) => {
                c.commit(&self.topic, &pos);
                return Ok(());
            }
        }
        let mut tpl = TopicPartitionList::new();
        for (p, o) in pos {
            if tpl
                .add_partition_offset(&self.topic, p, Offset::Offset(o as i64))
                .is_err()
            {
                continue;
            }
        }
        // For monitoring only: a failed commit does not fail the job.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(topic = %self.topic, error = %e, "kafka offset commit");
        }
        Ok(())
    }

    fn split_progress(&self) -> Vec<(String, SplitProgress)> {
        self.parts
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", self.topic, p.partition),
                    SplitProgress {
                        offset: p.position,
                        // The highest end seen (at the start, or read since).
                        lag: Some(p.high.saturating_sub(p.position)),
                    },
                )
            })
            .collect()
    }

    fn close(&mut self) {
        let _ = self.consumer.unassign();
    }
}

/// Delivery errors of a producer, kept until the writer checks them.
#[derive(Default)]
struct Deliveries {
    error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
            g.get_or_insert_with(|| e.to_string());
        }
    }
}

/// A producer that keeps its first delivery error.
type CheckedProducer = BaseProducer<Deliveries>;

/// Computes a record's key.
type KeyFn<T> = Arc<dyn Fn(&T) -> String + Send + Sync>;

/// A sink writing JSON records to a Kafka topic (see the [crate docs](crate)).
pub struct KafkaSink<T> {
    conn: Conn,
    key: Option<KeyFn<T>>,
    txn_prefix: Option<String>,
}

impl<T> fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("bootstrap", &self.conn.bootstrap)
            .field("topic", &self.conn.topic)
            .field("keyed", &self.key.is_some())
            .field("transactional_id_prefix", &self.txn_prefix)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            conn: self.conn.clone(),
            key: self.key.clone(),
            txn_prefix: self.txn_prefix.clone(),
        }
    }
}

impl<T: Serialize + Send + 'static> KafkaSink<T> {
    /// Writes records as JSON to `topic` on the brokers `bootstrap`.
    pub fn json(bootstrap: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSink {
            conn: Conn::new(bootstrap.into(), topic.into()),
            key: None,
            txn_prefix: None,
        }
    }

    /// Gives each record a key; Kafka's default partitioner (murmur2) routes it.
    pub fn key_by<F>(mut self, key: F) -> Self
    where
        F: Fn(&T) -> String + Send + Sync + 'static,
    {
        self.key = Some(Arc::new(key));
        self
    }

    /// The first part of the transactional ids (use the job's name). Default: the
    /// topic's name. Two jobs with the same prefix and sink name fence each other.
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.txn_prefix = Some(prefix.into());
        self
    }

    /// A librdkafka property (security settings, tuning), passed as it is.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conn.properties.insert(key.into(), value.into());
        self
    }

    /// How long each writer waits for a broker at `bootstrap` to answer when it
    /// starts, warning every few seconds, before it fails (ms; default
    /// [`DEFAULT_CONNECT_TIMEOUT_MS`]; see [`connect`]).
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        self.conn.connect_timeout_ms = ms;
        self
    }

    fn txn_id(&self, info: &SubtaskInfo, index: u32) -> String {
        let prefix = self.txn_prefix.as_deref().unwrap_or(&self.conn.topic);
        let sink: String = info
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{prefix}.{sink}.{index}")
    }

    fn producer(&self, txn_id: Option<&str>) -> OpResult<CheckedProducer> {
        let mut c = self.conn.client_config();
        c.set("enable.idempotence", "true");
        if !self.conn.properties.contains_key("partitioner") {
            // The Java client's default partitioner (librdkafka's is CRC32).
            c.set("partitioner", "murmur2_random");
        }
        if let Some(id) = txn_id {
            c.set("transactional.id", id);
        }
        let p: CheckedProducer = c.create_with_context(Deliveries::default()).map_err(|e| {
            KafkaConnectorError::kafka(format!("producer for topic {:?}", self.conn.topic), e)
        })?;
        // A producer queues records for an unreachable broker without a word until
        // `message.timeout.ms` (5 minutes): make sure a broker answers first. Cluster
        // metadata, not the topic's: asking for a topic can create it.
        connect::topic_metadata(
            p.client(),
            &self.conn.bootstrap,
            None,
            self.conn.connect_timeout_ms,
        )
        .map_err(OperatorError::other)?;
        Ok(p)
    }

    fn encode(&self, v: &T, ts: Option<i64>) -> OpResult<Pending> {
        let value = serde_json::to_string(v).map_err(|e| OperatorError::BadRecord {
            position: None,
            reason: format!(
                "cannot encode a record as JSON for topic {:?}: {e}",
                self.conn.topic
            ),
        })?;
        Ok(Pending(self.key.as_ref().map(|k| k(v)), value, ts))
    }

    /// A transactional session of `id`: fences older producers of the id.
    fn session(&self, id: &str) -> OpResult<Session> {
        let producer = self.producer(Some(id))?;
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| KafkaConnectorError::kafka(format!("init transactions of {id:?}"), e))?;
        let mut c = self.conn.client_config();
        c.set("group.id", marker_group(id));
        c.set("enable.auto.commit", "false");
        let marker: BaseConsumer = c
            .create()
            .map_err(|e| KafkaConnectorError::kafka(format!("marker consumer of {id:?}"), e))?;
        Ok(Session {
            id: id.to_string(),
            topic: self.conn.topic.clone(),
            producer,
            marker,
        })
    }

    fn transactional_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<TxnWriter<T>> {
        let own = self.txn_id(info, info.index);
        let mut decoded: Vec<Committable> = Vec::with_capacity(committables.len());
        for b in &committables {
            let c: Committable = serde_json::from_slice(b)
                .ok()
                .filter(|c: &Committable| c.v == 1)
                .ok_or_else(|| {
                    KafkaConnectorError::config(
                        "restore",
                        format!(
                            "topic {:?}: a committable in the checkpoint is not one this sink wrote",
                            self.conn.topic
                        ),
                    )
                })?;
            decoded.push(c);
        }
        decoded.sort_by_key(|c| c.checkpoint);
        let mut by_id: BTreeMap<String, Vec<Committable>> = BTreeMap::new();
        for c in decoded {
            by_id.entry(c.id.clone()).or_default().push(c);
        }
        let mut session = self.session(&own)?;
        let restoring = !committables.is_empty();
        if !restoring {
            // A fresh start: reset the marker, so the checkpoint ids of an earlier run
            // of the job are not taken for this one's.
            session.commit(&[], Some(0))?;
        }
        for (id, list) in by_id {
            if id == own {
                session.commit_restored(&list)?;
            } else {
                // A former subtask's id (restored at another parallelism).
                let mut s = self.session(&id)?;
                s.commit_restored(&list)?;
            }
        }
        Ok(TxnWriter {
            sink: self.clone(),
            session,
            pending: Vec::new(),
            prepared: Vec::new(),
        })
    }
}

fn marker_group(id: &str) -> String {
    format!("brook-txn-marker.{id}")
}

/// A record waiting for its transaction: key, JSON value, timestamp (ms).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending(Option<String>, String, Option<i64>);

/// What a barrier puts into the checkpoint (see the crate docs).
#[derive(Debug, Serialize, Deserialize)]
struct Committable {
    v: u8,
    id: String,
    checkpoint: CheckpointId,
    records: Vec<Pending>,
}

struct Session {
    id: String,
    topic: String,
    producer: CheckedProducer,
    marker: BaseConsumer,
}

impl Session {
    fn err(&self, what: &str, e: KafkaError) -> OperatorError {
        KafkaConnectorError::kafka(format!("{what} (transactional id {:?})", self.id), e)
    }

    /// The last checkpoint whose transaction this id committed (0: none).
    fn committed_checkpoint(&self) -> OpResult<u64> {
        let mut t = TopicPartitionList::new();
        t.add_partition(&self.topic, 0);
        let got = self
            .marker
            .committed_offsets(t, TIMEOUT)
            .map_err(|e| self.err("read the commit marker", e))?;
        Ok(got
            .find_partition(&self.topic, 0)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o as u64),
                _ => None,
            })
            .unwrap_or(0))
    }

    /// Commits restored committables not committed yet (by the marker).
    fn commit_restored(&mut self, list: &[Committable]) -> OpResult {
        let done = self.committed_checkpoint()?;
        for c in list.iter().filter(|c| c.checkpoint > done) {
            self.commit(&c.records, Some(c.checkpoint))?;
        }
        Ok(())
    }

    /// Writes `records` in one transaction, with the marker set to `checkpoint`.
    fn commit(&mut self, records: &[Pending], checkpoint: Option<CheckpointId>) -> OpResult {
        self.producer
            .begin_transaction()
            .map_err(|e| self.err("begin transaction", e))?;
        for r in records {
            let mut rec: BaseRecord<'_, String, String> = BaseRecord::to(&self.topic).payload(&r.1);
            if let Some(k) = &r.0 {
                rec = rec.key(k);
            }
            if let Some(ts) = r.2 {
                rec = rec.timestamp(ts);
            }
            send(&self.producer, rec).map_err(|e| self.err("send", e))?;
        }
        if let Some(cp) = checkpoint {
            let mut t = TopicPartitionList::new();
            t.add_partition_offset(&self.topic, 0, Offset::Offset(cp as i64))
                .map_err(|e| self.err("marker", e))?;
            let meta = self
                .marker
                .group_metadata()
                .ok_or_else(|| OperatorError::failed("kafka: no consumer group metadata"))?;
            self.producer
                .send_offsets_to_transaction(&t, &meta, TIMEOUT)
                .map_err(|e| self.err("commit marker", e))?;
        }
        self.producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| self.err("commit transaction", e))?;
        let failed = self
            .producer
            .context()
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(e) = failed {
            return Err(KafkaConnectorError::config(
                "send",
                format!("delivery failed: {e}"),
            ));
        }
        Ok(())
    }
}

/// Sends one record, waiting while the producer's queue is full.
fn send(
    producer: &CheckedProducer,
    mut rec: BaseRecord<'_, String, String>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(rec) {
            Ok(()) => {
                producer.poll(Duration::ZERO);
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

impl<T: Serialize + Send + 'static> Sink for KafkaSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(PlainWriter {
            sink: self.clone(),
            producer: self.producer(None)?,
        }))
    }

    fn create_committing_writer(
        &self,
        info: &SubtaskInfo,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.transactional_writer(info, Vec::new())?))
    }

    fn restore_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.transactional_writer(info, committables)?))
    }
}

/// The at-least-once writer (idempotent producer) of jobs without checkpoints.
struct PlainWriter<T> {
    sink: KafkaSink<T>,
    producer: CheckedProducer,
}

impl<T: Serialize + Send + 'static> SinkWriter for PlainWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        for r in batch {
            let p = self.sink.encode(&r.value, r.timestamp)?;
            let mut rec: BaseRecord<'_, String, String> =
                BaseRecord::to(&self.sink.conn.topic).payload(&p.1);
            if let Some(k) = &p.0 {
                rec = rec.key(k);
            }
            if let Some(ts) = p.2 {
                rec = rec.timestamp(ts);
            }
            send(&self.producer, rec).map_err(|e| {
                KafkaConnectorError::kafka(format!("send to {:?}", self.sink.conn.topic), e)
            })?;
        }
        Ok(())
    }

    fn flush(&mut self) -> OpResult {
        self.producer.flush(TIMEOUT).map_err(|e| {
            KafkaConnectorError::kafka(format!("flush to {:?}", self.sink.conn.topic), e)
        })?;
        let failed = self
            .producer
            .context()
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match failed {
            Some(e) => Err(KafkaConnectorError::config(
                "send",
                format!("delivery to {:?} failed: {e}", self.sink.conn.topic),
            )),
            None => Ok(()),
        }
    }
}

/// The exactly-once writer (see the crate docs).
struct TxnWriter<T> {
    sink: KafkaSink<T>,
    session: Session,
    /// Records since the last barrier.
    pending: Vec<Pending>,
    /// Committables handed to checkpoints not yet complete.
    prepared: Vec<(CheckpointId, Vec<Pending>)>,
}

impl<T: Serialize + Send + 'static> SinkWriter for TxnWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        for r in batch {
            let p = self.sink.encode(&r.value, r.timestamp)?;
            self.pending.push(p);
        }
        Ok(())
    }

    fn flush(&mut self) -> OpResult {
        Ok(())
    }

    fn prepare_commit(&mut self, checkpoint: CheckpointId) -> OpResult<Option<Vec<u8>>> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let records = std::mem::take(&mut self.pending);
        let c = Committable {
            v: 1,
            id: self.session.id.clone(),
            checkpoint,
            records,
        };
        let bytes = serde_json::to_vec(&c).map_err(|e| {
            KafkaConnectorError::config("committable", format!("cannot encode: {e}"))
        })?;
        self.prepared.push((checkpoint, c.records));
        Ok(Some(bytes))
    }

    fn commit(&mut self, checkpoint: CheckpointId, _committables: Vec<Vec<u8>>) -> OpResult {
        // The records are kept here too: no need to decode the committables.
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.prepared)
            .into_iter()
            .partition(|(id, _)| *id <= checkpoint);
        self.prepared = later;
        for (id, records) in ready {
            self.session.commit(&records, Some(id))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> OpResult {
        let mut all: Vec<Pending> = Vec::new();
        for (_, r) in std::mem::take(&mut self.prepared) {
            all.extend(r);
        }
        all.append(&mut self.pending);
        if !all.is_empty() {
            self.session.commit(&all, None)?;
        }
        Ok(())
    }
}
