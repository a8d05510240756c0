//! [`KafkaSource`]: each partition of a topic is a split (see the [crate docs](crate)).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use brook_core::bad_record::BadRecords;
use brook_core::checkpoint::CheckpointId;
use brook_core::operator::{OpResult, OperatorError, Output, SubtaskInfo};
use brook_core::source::{
    decode_offset_position, encode_offset_position, value_decoders, InputStatus, JsonValues,
    MakeValueDecoder, MessageAt, Source, SourceOptions, SourceReader, Split, SplitProgress,
    TopicPartitionSplit, ValueDecoder,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::de::DeserializeOwned;

use crate::connect;
use crate::group::OffsetCommitter;
use crate::{Conn, KafkaConnectorError, TIMEOUT};

/// Records per `poll_next` at most.
const BATCH: usize = 4096;

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

/// A source reading a Kafka topic (see the [crate docs](crate)).
pub struct KafkaSource<T> {
    conn: Conn,
    group: Option<String>,
    start: KafkaStart,
    options: SourceOptions,
    /// Only these partitions (all when `None`).
    partitions: Option<Vec<i32>>,
    /// Commits offsets for the group instead of the reader's own consumer.
    committer: Option<Arc<dyn OffsetCommitter>>,
    decoder: Arc<MakeValueDecoder<T>>,
}

impl<T> fmt::Debug for KafkaSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("bootstrap", &self.conn.bootstrap)
            .field("topic", &self.conn.topic)
            .field("group", &self.group)
            .field("start", &self.start)
            .field("bounded", &self.options.bounded)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            conn: self.conn.clone(),
            group: self.group.clone(),
            start: self.start,
            options: self.options.clone(),
            partitions: self.partitions.clone(),
            committer: self.committer.clone(),
            decoder: Arc::clone(&self.decoder),
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
        KafkaSource::with_decoder(bootstrap, topic, JsonValues::<T>::default)
    }

    /// Reads `topic` on the brokers `bootstrap`, each value decoded by a
    /// [`ValueDecoder`] of each reader's own, made by `make` (for records serde does not
    /// make one by one, such as Arrow batches). The reader flushes it before a message
    /// of another partition and at the end of every poll.
    pub fn with_decoder<D, F>(
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
        make: F,
    ) -> KafkaSource<D::Out>
    where
        D: ValueDecoder + 'static,
        D::Out: Send + 'static,
        F: Fn() -> D + Send + Sync + 'static,
    {
        KafkaSource {
            conn: Conn::new(bootstrap.into(), topic.into()),
            group: None,
            start: KafkaStart::default(),
            options: SourceOptions::default(),
            partitions: None,
            committer: None,
            decoder: value_decoders(make),
        }
    }
}

impl<T: Send + 'static> KafkaSource<T> {
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
        self.options.bounded = bounded;
        self
    }

    /// A librdkafka property (security settings, tuning), passed as it is.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conn.properties.insert(key.into(), value.into());
        self
    }

    /// How long the source waits for a broker at `bootstrap` to answer when the job
    /// starts, warning every few seconds, before it fails (ms; default
    /// [`DEFAULT_CONNECT_TIMEOUT_MS`](crate::DEFAULT_CONNECT_TIMEOUT_MS); see [`connect`]).
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        self.conn.connect_timeout_ms = ms;
        self
    }

    brook_core::source_option_methods!();

    /// Reads only these partitions of the topic (default: all). A partition the topic
    /// does not have fails the job when it starts.
    pub fn partitions(mut self, partitions: Vec<i32>) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// Commits a completed checkpoint's offsets through `committer` (a
    /// [`GroupMember`](crate::GroupMember) of the group) rather than the reader's own
    /// consumer, which an active group would refuse. Implies committing.
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
            bounded: self.options.bounded,
            commit: match (&self.committer, self.group.is_some()) {
                (Some(c), _) => Commit::Through(Arc::clone(c)),
                (None, true) => Commit::Own,
                (None, false) => Commit::No,
            },
            bad: self.options.bad_records.clone(),
            pending: None,
            snapshots: VecDeque::new(),
            decoder: (self.decoder)(),
        })
    }
}

/// One partition of a [`KafkaSource`]'s topic; its split id is `topic/partition`.
pub type KafkaSplit = TopicPartitionSplit<i32>;

impl<T: Send + 'static> Source for KafkaSource<T> {
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
        self.options.bounded
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
pub(crate) struct ReaderContext;

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
    decoder: Box<dyn ValueDecoder<Out = T>>,
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

    fn handle(&mut self, m: &OwnedMessage, out: &mut Output<T>) -> OpResult {
        let Some(p) = self.parts.iter_mut().find(|p| p.partition == m.partition()) else {
            return Ok(());
        };
        p.position = m.offset() as u64 + 1;
        p.read_any = true;
        p.high = p.high.max(p.position);
        if p.split != out.split() {
            // What the decoder holds came from another partition.
            self.decoder.flush(&self.bad, out)?;
        }
        out.set_split(p.split);
        let at = MessageAt {
            topic: &self.topic,
            partition: m.partition(),
            offset: m.offset() as u64,
        };
        let value = m.payload().unwrap_or_default();
        self.decoder
            .value(value, m.timestamp().to_millis(), at, &self.bad, out)?;
        Ok(())
    }

    /// Reads about a batch of messages (see [`SourceReader::poll_next`]); the decoder
    /// may still hold some.
    fn read(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let mut got = 0;
        match self.pending.take() {
            Some(Polled::Message(m)) => {
                self.handle(&m, out)?;
                got += 1;
            }
            Some(Polled::Eof(p)) => self.eof(p, out)?,
            None => {}
        }
        while got < BATCH && !self.is_finished() {
            let m = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => m.detach(),
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    self.eof(p, out)?;
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

    fn eof(&mut self, partition: i32, out: &mut Output<T>) -> OpResult {
        // What the decoder holds is emitted before its split may be finished.
        self.decoder.flush(&self.bad, out)?;
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
        Ok(())
    }

    fn is_finished(&self) -> bool {
        self.bounded && self.parts.iter().all(|p| p.finished)
    }
}

impl<T: Send + 'static> SourceReader for KafkaReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let status = self.read(out)?;
        // Everything read is emitted before a checkpoint can snapshot the positions.
        self.decoder.flush(&self.bad, out)?;
        Ok(status)
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
