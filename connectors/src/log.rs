//! The embedded log: [`LogSource`] reads a topic, [`LogSink`] appends to one.
//!
//! # Reading
//!
//! [`LogSource::json`] reads the records of a topic of a [`brook_log::Log`], decoding
//! each value from JSON into `T`; a record's timestamp becomes its event time. The
//! splits are the topic's partitions (as they are when the job starts), so subtask `i`
//! of `p` reads partitions `i, i + p, i + 2p, ...`, each in offset order. A reader
//! tracks the next offset to read per partition ([`LogReader::positions`]).
//!
//! Reading starts at the [`StartingOffsets`] (default: the earliest stored record).
//! By default a source reads committed records only ([`LogSource::isolation`],
//! [`IsolationLevel::ReadCommitted`], as Kafka's `read_committed`): up to each
//! partition's last stable offset, without records of aborted transactions; bounded
//! sources end at the last stable offsets, and [`StartingOffsets::Latest`] starts
//! there.
//! A [`bounded`](LogSource::bounded) source reads up to the log end offsets captured
//! when each reader starts (or restarts, after a restore), then ends; otherwise it waits for new records, woken by
//! the partitions' end-offset notifications rather than by polling.
//!
//! # Checkpoints
//!
//! A partition's checkpointed position is the next offset to read: a version byte (1)
//! then the offset as a `u64`, little endian; the split id is `topic/partition`. A
//! restored reader resumes each partition at its checkpointed offset (partitions
//! without one start at the [`StartingOffsets`]); an offset retention has deleted
//! meanwhile (below the log start offset) fails the job, naming the topic, the
//! partition and both offsets, rather than silently skipping records.
//!
//! A value that does not decode follows the [`BadRecords`] policy; its position is
//! `topic/partition@offset`.
//!
//! # Writing
//!
//! [`LogSink::json`] appends each record's value as JSON, with the record's timestamp
//! (or the log's clock when it has none) and, with [`LogSink::key_by`], a key that
//! routes it to `toPositive(murmur2(key)) % partitions` as Kafka's default
//! partitioner ([`brook_log::partitioner::partition_for_key`]); keyless records of one
//! batch go to one partition, the next batch to the next (Kafka's sticky partitioner,
//! [`brook_log::partitioner::StickyPartitioner`]). In a job without checkpoints each batch is one
//! [`Topic::append`](brook_log::Topic::append), visible at once (at least once: a
//! restarted job writes again what it wrote before).
//!
//! ## Exactly once (jobs with checkpoints)
//!
//! In a job that checkpoints, each subtask writes inside a transaction of the log
//! ([`brook_log::txn`], Kafka's design) under the stable transactional id
//! `{prefix}.{sink}.{subtask}`: the prefix is [`LogSink::transactional_id_prefix`]
//! (the job's name in `brook run`; default the topic's name), `sink` the sink's name
//! with characters outside `[A-Za-z0-9._-]` replaced by `_`. What arrives between two
//! barriers is one transaction: at a barrier it is *prepared* (fsynced, recorded as
//! prepared) and its handle is the committable that goes into the checkpoint; when the
//! checkpoint completes it is *committed* (commit markers written), and read-committed
//! readers (the default) see it. A barrier with nothing written since the last one
//! gives no committable. At the end of the input everything pending is committed.
//!
//! A writer starts a new session of its transactional id, which fences any older
//! writer of the same id (a zombie of a failed attempt gets
//! [`LogError::ProducerFenced`](brook_log::LogError::ProducerFenced)) and aborts the
//! transaction it left open. On restore the writer commits the restored checkpoint's
//! transactions (again: committing a committed one is a no-op) and aborts every other
//! prepared transaction of the id (written after the restored checkpoint); the aborted
//! records stay in the topic, visible only to read-uncommitted readers. Restored at a
//! lower parallelism, subtask `i` does the same for the ids of former subtasks `j`
//! with `j % parallelism == i`. Two sinks (of different jobs) with the same prefix and
//! sink name share transactional ids and fence each other: give each job its own
//! prefix.
//!
//! Each session has a `transaction.timeout.ms` ([`LogSink::transaction_timeout_ms`],
//! default [`LOG_SINK_TRANSACTION_TIMEOUT_MS`], 15 minutes): a transaction still
//! undecided that long after its first record is aborted by the log
//! ([`brook_log::txn`]), so a job killed mid-transaction holds the topic's last
//! stable offset (and every read-committed reader) back at most that long. Prepared
//! transactions expire too, as Kafka's coordinator aborts a Flink `KafkaSink`'s: a
//! restore after the timeout fails, naming the transaction
//! ([`LogError::TransactionTimedOut`]),
//! rather than losing its records silently. So keep the timeout well above the
//! checkpoint interval plus the time a restore may take, as Flink advises.
//!
//! As with Kafka, a transaction committed after the restored checkpoint (by a newer
//! checkpoint that is then not restored, or by the end of input of a job that failed
//! elsewhere) cannot be taken back: its records appear again when the restored job
//! writes them. Restore from the latest complete checkpoint to avoid this.
//!
//! Committable: a [`TxnCommittable::Prepared`] (version byte 1, then the
//! [`TransactionHandle`] as JSON: `transactional_id`, `producer_id`, `epoch`,
//! `sequence`). A checkpoint taken through a broker holds the Kafka sink's
//! [`TxnCommittable::Records`] instead (semantics §1a): restored here, the records of
//! each checkpoint above the transactional id's marker (the committed offset of group
//! [`marker_group`] on partition 0 of the topic) are written in one transaction that
//! moves the marker to that checkpoint, so a checkpoint restores exactly once in
//! either mode. Bytes of neither kind fail the restore, naming the topic.
//!
//! # Example
//! ```
//! use brook_connectors::{LogSink, LogSource};
//! use brook_engine::{JobConfig, StreamEnvironment};
//! use brook_engine::testing::{CollectSink, VecSource};
//! use brook_log::{Log, LogOptions, TopicConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default()).unwrap();
//! log.create_topic("numbers", 2, TopicConfig::default()).unwrap();
//!
//! let env = StreamEnvironment::new(JobConfig::default());
//! env.source(VecSource::new(vec![1i64, 2, 3]))
//!     .sink(LogSink::json(&log, "numbers").key_by(|n: &i64| n.to_string()));
//! env.execute("write").unwrap();
//!
//! let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
//! let out = CollectSink::new();
//! env.source(LogSource::json::<i64>(&log, "numbers").bounded(true)).sink(out.clone());
//! env.execute("read").unwrap();
//! let mut got = out.values();
//! got.sort();
//! assert_eq!(got, vec![1, 2, 3]);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use brook_core::checkpoint::CheckpointId;
use brook_core::element::Batch;
use brook_core::names::validate_name;
use brook_core::operator::{OpResult, OperatorError, Output, SubtaskInfo};
use brook_core::sink::{JsonEncoder, Messages, Sink, SinkWriter, ValueEncoder};
use brook_core::source::{
    decode_offset_position, encode_offset_position, value_decoders, InputStatus, JsonValues,
    MakeValueDecoder, MessageAt, Source, SourceOptions, SourceReader, Split, SplitProgress,
    TopicPartitionSplit, ValueDecoder,
};
use brook_core::txn_committable::{marker_group, CheckpointRecords, PreparedTxn, TxnCommittable};
use brook_log::{
    IsolationLevel, Log, LogError, Partition, ProducerRecord, ReadLimit, Record, Topic,
    TopicPartition, TransactionHandle, TransactionalProducer,
};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use brook_core::bad_record::BadRecords;

use crate::error::ConnectorError;
use crate::split::restored_position;
use crate::BATCH;

/// Where a [`LogSource`] starts reading each partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StartingOffsets {
    /// The log start offset: the oldest record still stored. The default.
    #[default]
    Earliest,
    /// The log end offset when the reader starts (the last stable offset when reading
    /// committed records): only records appended after it.
    Latest,
    /// These offsets per partition; partitions not listed start at the earliest. An
    /// offset outside the stored range fails the job when it starts.
    Offsets(BTreeMap<u32, u64>),
}

/// A source reading a topic of the embedded log (see the [module docs](self)).
pub struct LogSource<T> {
    log: Log,
    topic: String,
    start: StartingOffsets,
    isolation: IsolationLevel,
    options: SourceOptions,
    decoder: Arc<MakeValueDecoder<T>>,
}

impl<T> fmt::Debug for LogSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogSource")
            .field("log", &self.log.dir())
            .field("topic", &self.topic)
            .field("start", &self.start)
            .field("isolation", &self.isolation)
            .field("bounded", &self.options.bounded)
            .field("bad_records", &self.options.bad_records)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for LogSource<T> {
    fn clone(&self) -> Self {
        LogSource {
            log: self.log.clone(),
            topic: self.topic.clone(),
            start: self.start.clone(),
            isolation: self.isolation,
            options: self.options.clone(),
            decoder: Arc::clone(&self.decoder),
        }
    }
}

/// The constructor names the record type: `LogSource::json::<T>(&log, topic)` (the
/// `()` is only a place for it).
impl LogSource<()> {
    /// Reads `topic`, decoding each record's value from JSON into `T`.
    pub fn json<T: DeserializeOwned + Send + 'static>(
        log: &Log,
        topic: impl Into<String>,
    ) -> LogSource<T> {
        LogSource::with_decoder(log, topic, JsonValues::<T>::default)
    }

    /// Reads `topic`, each record's value decoded by a [`ValueDecoder`] of each
    /// reader's own, made by `make` (for records serde does not make one by one, such
    /// as Arrow batches). The reader flushes it after each partition's run of records.
    pub fn with_decoder<D, F>(log: &Log, topic: impl Into<String>, make: F) -> LogSource<D::Out>
    where
        D: ValueDecoder + 'static,
        D::Out: Send + 'static,
        F: Fn() -> D + Send + Sync + 'static,
    {
        LogSource {
            log: log.clone(),
            topic: topic.into(),
            start: StartingOffsets::default(),
            isolation: IsolationLevel::default(),
            options: SourceOptions::default(),
            decoder: value_decoders(make),
        }
    }
}

impl<T: Send + 'static> LogSource<T> {
    /// Where to start in each partition. Default [`StartingOffsets::Earliest`].
    pub fn starting_offsets(mut self, start: StartingOffsets) -> Self {
        self.start = start;
        self
    }

    /// Which records are read (default [`IsolationLevel::ReadCommitted`]: up to the
    /// last stable offset, without records of aborted transactions; see
    /// [`brook_log::txn`]).
    pub fn isolation(mut self, isolation: IsolationLevel) -> Self {
        self.isolation = isolation;
        self
    }

    /// Ends at the log end offsets captured when each reader starts (true), or waits
    /// for new records forever (false, the default).
    pub fn bounded(mut self, bounded: bool) -> Self {
        self.options.bounded = bounded;
        self
    }

    brook_core::source_option_methods!();

    fn open_topic(&self) -> Result<Arc<Topic>, ConnectorError> {
        self.log
            .topic(&self.topic)
            .map_err(|e| ConnectorError::log(format!("read topic {:?}", self.topic), e))
    }

    /// The reader of one subtask, as [`Source::create_reader`] makes it, typed so that
    /// its [`LogReader::positions`] can be seen.
    ///
    /// # Errors
    /// An unknown topic or partition, a starting offset out of range.
    pub fn reader(&self, info: &SubtaskInfo, splits: Vec<LogSplit>) -> OpResult<LogReader<T>> {
        self.restored_reader(info, splits, &HashMap::new())
    }

    /// The reader of one subtask resuming from checkpointed `positions` (see
    /// [`Source::restore_reader`]), typed.
    ///
    /// # Errors
    /// As [`LogSource::reader`]; a checkpointed position that is not one this source
    /// wrote, or that is no longer stored (retention deleted it) or beyond the log end.
    pub fn restored_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<LogSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<LogReader<T>> {
        let topic = self.open_topic()?;
        let mut cursors = Vec::with_capacity(splits.len());
        for split in splits {
            let partition = topic
                .partition(split.partition)
                .map_err(|e| ConnectorError::log(format!("read topic {:?}", self.topic), e))?;
            // Subscribe before reading the end offset, so no append goes unnoticed.
            let changes = partition.subscribe_end(self.isolation);
            let (first, end) = (partition.log_start_offset(), partition.log_end_offset());
            // Where this reader's records end now: the last stable offset when reading
            // committed records.
            let readable = partition.end_offset(self.isolation);
            let restored = restored_position(positions, &split.split_id(), decode_offset_position)?;
            let position = match (restored, &self.start) {
                (Some(o), _) if o < first => {
                    return Err(ConnectorError::config(
                        "restore",
                        format!(
                            "cannot resume {}/{} at checkpointed offset {o}: the partition now \
                             starts at offset {first} (retention deleted offsets {o}..{first}), \
                             its end is {end}",
                            self.topic, split.partition
                        ),
                    )
                    .into())
                }
                (Some(o), _) if o > end => {
                    return Err(ConnectorError::config(
                        "restore",
                        format!(
                            "cannot resume {}/{} at checkpointed offset {o}: the partition ends \
                             at offset {end} (was the topic deleted and created again?)",
                            self.topic, split.partition
                        ),
                    )
                    .into())
                }
                (Some(o), _) => o,
                (None, StartingOffsets::Earliest) => first,
                (None, StartingOffsets::Latest) => readable,
                (None, StartingOffsets::Offsets(offsets)) => {
                    match offsets.get(&split.partition).copied() {
                        None => first,
                        Some(o) if (first..=end).contains(&o) => o,
                        Some(o) => {
                            return Err(ConnectorError::config(
                                "starting_offsets",
                                format!(
                                    "offset {o} of {}/{} is out of range: the partition holds \
                                     offsets {first}..{end}",
                                    self.topic, split.partition
                                ),
                            )
                            .into())
                        }
                    }
                }
            };
            cursors.push(Cursor {
                split: cursors.len() as u32,
                finished: false,
                id: split.partition,
                partition,
                position,
                end: self.options.bounded.then_some(readable),
                changes,
            });
        }
        Ok(LogReader {
            topic: self.topic.clone(),
            isolation: self.isolation,
            cursors,
            bad: self.options.bad_records.clone(),
            records: Vec::new(),
            runtime: None,
            decoder: (self.decoder)(),
        })
    }
}

/// One partition of a [`LogSource`]'s topic; its split id is `topic/partition`.
pub type LogSplit = TopicPartitionSplit<u32>;

impl<T: Send + 'static> Source for LogSource<T> {
    type Out = T;
    type Split = LogSplit;

    fn enumerate_splits(&self, _parallelism: u32) -> OpResult<Vec<LogSplit>> {
        let n = self.open_topic()?.partition_count();
        if let StartingOffsets::Offsets(offsets) = &self.start {
            if let Some(p) = offsets.keys().find(|p| **p >= n) {
                return Err(ConnectorError::config(
                    "starting_offsets",
                    format!("topic {:?} has no partition {p} (it has {n})", self.topic),
                )
                .into());
            }
        }
        Ok((0..n)
            .map(|partition| LogSplit {
                topic: self.topic.clone(),
                partition,
            })
            .collect())
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<LogSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(self.reader(info, splits)?))
    }

    fn is_bounded(&self) -> bool {
        self.options.bounded
    }

    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<LogSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(self.restored_reader(info, splits, positions)?))
    }
}

/// Reading position in one partition.
#[derive(Debug)]
struct Cursor {
    /// Index of the split among the reader's splits (for per-split watermarks).
    split: u32,
    /// A bounded cursor reached its end offset (reported once).
    finished: bool,
    id: u32,
    partition: Arc<Partition>,
    /// The next offset to read.
    position: u64,
    /// Where a bounded reader stops.
    end: Option<u64>,
    /// The partition's log end offset, as it changes.
    changes: watch::Receiver<u64>,
}

/// Offsets per read turn of one partition (see `poll_next`).
const CHUNK: u64 = 1024;

/// Reads some partitions of a topic for one subtask of a [`LogSource`].
pub struct LogReader<T> {
    topic: String,
    isolation: IsolationLevel,
    cursors: Vec<Cursor>,
    bad: BadRecords,
    records: Vec<Record>,
    /// Waits for new records; created on the first wait.
    runtime: Option<tokio::runtime::Runtime>,
    decoder: Box<dyn ValueDecoder<Out = T>>,
}

impl<T> fmt::Debug for LogReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader")
            .field("topic", &self.topic)
            .field("positions", &self.positions())
            .finish_non_exhaustive()
    }
}

impl<T> LogReader<T> {
    /// The next offset to read, per partition of this reader.
    pub fn positions(&self) -> BTreeMap<u32, u64> {
        self.cursors.iter().map(|c| (c.id, c.position)).collect()
    }

    /// Whether a bounded reader has read all it will read.
    pub fn is_finished(&self) -> bool {
        self.cursors
            .iter()
            .all(|c| c.end.is_some_and(|end| c.position >= end))
    }
}

impl<T: Send + 'static> SourceReader for LogReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let mut emitted = 0;
        let mut read_any = false;
        while emitted < BATCH {
            // Partitions are read in chunks of CHUNK offsets, always the partition
            // whose chunk comes first (by chunk number, then partition): the order of
            // records over partitions, and with it every watermark and lateness
            // decision, is then a function of the offsets alone, the same in a run
            // restored from a checkpoint as in one without failures (when the data is
            // all there, as in a replay).
            let mut best: Option<(u64, u32, usize, u64)> = None;
            for (i, c) in self.cursors.iter_mut().enumerate() {
                let until = match c.end {
                    Some(end) => end,
                    // Mark the current end as seen: `wait_for_data` wakes on the next one.
                    None => *c.changes.borrow_and_update(),
                };
                if c.position >= until {
                    if c.end.is_some() && !c.finished {
                        c.finished = true;
                        out.finish_split(c.split);
                    }
                    continue;
                }
                let key = (c.position / CHUNK, c.id, i, until);
                if best.is_none_or(|b| (key.0, key.1) < (b.0, b.1)) {
                    best = Some(key);
                }
            }
            let Some((chunk, _, i, until)) = best else {
                break;
            };
            let c = &mut self.cursors[i];
            out.set_split(c.split);
            let stop = ((chunk + 1) * CHUNK).min(until);
            let limit = ReadLimit {
                max_records: usize::try_from(stop - c.position).unwrap_or(usize::MAX),
                max_bytes: 8 << 20,
            };
            self.records.clear();
            let summary = c
                .partition
                .read_into_isolated(c.position, limit, self.isolation, &mut self.records)
                .map_err(|e| {
                    ConnectorError::log(
                        format!("read {}/{} at offset {}", self.topic, c.id, c.position),
                        e,
                    )
                })?;
            if summary.next_offset == c.position {
                break;
            }
            // Records passed over (markers, aborted transactions) do not count against
            // the limit, so a read may reach beyond the chunk: keep the chunk's records
            // only, so the order over partitions stays a function of the offsets.
            self.records.retain(|r| r.offset < stop);
            // Past markers and aborted records too (the chunk may hold no record).
            let next = summary.next_offset.min(stop);
            for record in self.records.drain(..) {
                c.position = record.offset + 1;
                read_any = true;
                let at = MessageAt {
                    topic: &self.topic,
                    partition: i32::try_from(c.id).unwrap_or(i32::MAX),
                    offset: record.offset,
                };
                emitted += self.decoder.value(
                    &record.value,
                    Some(record.timestamp),
                    at,
                    &self.bad,
                    out,
                )?;
            }
            // A chunk is one partition's: what the decoder holds is emitted as its split,
            // and before a checkpoint can snapshot the positions.
            self.decoder.flush(&self.bad, out)?;
            if next > c.position {
                c.position = next;
                read_any = true;
            }
        }
        Ok(if self.is_finished() {
            InputStatus::End
        } else if read_any {
            InputStatus::MoreAvailable
        } else {
            InputStatus::NothingAvailable
        })
    }

    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        Some(
            self.cursors
                .iter()
                .map(|c| {
                    (
                        format!("{}/{}", self.topic, c.id),
                        encode_offset_position(c.position),
                    )
                })
                .collect(),
        )
    }

    fn split_progress(&self) -> Vec<(String, SplitProgress)> {
        self.cursors
            .iter()
            .map(|c| {
                // A bounded reader's end is where it stops; a following one's is what
                // it could read now.
                let end = c
                    .end
                    .unwrap_or_else(|| c.partition.end_offset(self.isolation));
                let progress = SplitProgress {
                    offset: c.position,
                    lag: Some(end.saturating_sub(c.position)),
                };
                (format!("{}/{}", self.topic, c.id), progress)
            })
            .collect()
    }

    fn wait_for_data(&mut self, timeout_ms: u64) {
        let timeout = Duration::from_millis(timeout_ms);
        let fallback = timeout.min(Duration::from_millis(10));
        if self.cursors.iter().any(|c| c.end.is_some()) {
            // Bounded: nothing to wait for (only after a read that found nothing).
            std::thread::sleep(fallback);
            return;
        }
        if self.runtime.is_none() {
            self.runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .ok();
        }
        let Some(rt) = &self.runtime else {
            std::thread::sleep(fallback);
            return;
        };
        let changes: Vec<_> = self
            .cursors
            .iter_mut()
            .map(|c| Box::pin(c.changes.changed()))
            .collect();
        if changes.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        let closed = rt.block_on(async move {
            matches!(
                tokio::time::timeout(timeout, futures::future::select_all(changes)).await,
                Ok((Err(_), _, _))
            )
        });
        if closed {
            // The partition is gone (the log closed): nothing will wake us.
            std::thread::sleep(fallback);
        }
    }
}

type KeyFn<T> = Arc<dyn Fn(&T) -> Bytes + Send + Sync>;

/// A [`LogSink`]'s `transaction.timeout.ms` when none is given (ms): 900000 (15
/// minutes), the largest the log accepts
/// ([`brook_log::MAX_TRANSACTION_TIMEOUT_MS`], Kafka's broker default
/// `transaction.max.timeout.ms`). Flink's `KafkaSink` uses 1 hour and asks users to
/// raise the broker's maximum to match; brook keeps Kafka's maximum and uses all of
/// it, far above usual checkpoint intervals.
pub const LOG_SINK_TRANSACTION_TIMEOUT_MS: u64 = brook_log::MAX_TRANSACTION_TIMEOUT_MS;

/// A sink appending JSON values to a topic of the embedded log (see the
/// [module docs](self)).
pub struct LogSink<T> {
    log: Log,
    topic: String,
    key: Option<KeyFn<T>>,
    encoder: Arc<MakeValueEncoder<T>>,
    txn_prefix: Option<String>,
    txn_timeout_ms: u64,
}

/// Makes each writer's encoder.
type MakeValueEncoder<T> = dyn Fn() -> Box<dyn ValueEncoder<In = T>> + Send + Sync;

impl<T> fmt::Debug for LogSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogSink")
            .field("log", &self.log.dir())
            .field("topic", &self.topic)
            .field("keyed", &self.key.is_some())
            .field("transactional_id_prefix", &self.txn_prefix)
            .field("transaction_timeout_ms", &self.txn_timeout_ms)
            .finish()
    }
}

impl<T> Clone for LogSink<T> {
    fn clone(&self) -> Self {
        LogSink {
            log: self.log.clone(),
            topic: self.topic.clone(),
            key: self.key.clone(),
            encoder: Arc::clone(&self.encoder),
            txn_prefix: self.txn_prefix.clone(),
            txn_timeout_ms: self.txn_timeout_ms,
        }
    }
}

impl<T: Serialize + Send + 'static> LogSink<T> {
    /// Appends each record's value, as JSON, to `topic` (which must exist).
    pub fn json(log: &Log, topic: impl Into<String>) -> Self {
        LogSink::with_encoder(log, topic, JsonEncoder::<T>::default)
    }
}

impl LogSink<()> {
    /// Appends the messages a [`ValueEncoder`] of each writer's own (made by `make`)
    /// makes of the records, keys included, to `topic` (which must exist): for
    /// records that are not one JSON value each, such as Arrow batches of rows.
    pub fn with_encoder<E, F>(log: &Log, topic: impl Into<String>, make: F) -> LogSink<E::In>
    where
        E: ValueEncoder + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        LogSink {
            log: log.clone(),
            topic: topic.into(),
            key: None,
            encoder: Arc::new(move || -> Box<dyn ValueEncoder<In = E::In>> { Box::new(make()) }),
            txn_prefix: None,
            txn_timeout_ms: LOG_SINK_TRANSACTION_TIMEOUT_MS,
        }
    }
}

impl<T: Send + 'static> LogSink<T> {
    /// Gives each record a key (a `String`, `Vec<u8>`, `Bytes`, ...), which chooses
    /// its partition. Its key replaces the encoder's; it needs an encoder that writes
    /// one message per record, as [`LogSink::json`]'s (another fails the writer).
    pub fn key_by<K, F>(mut self, key: F) -> Self
    where
        K: Into<Bytes>,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        self.key = Some(Arc::new(move |t| key(t).into()));
        self
    }

    /// The first part of the transactional ids of the exactly-once writers, as
    /// Flink's `setTransactionalIdPrefix`: use the job's name. Default: the topic's
    /// name. Two jobs whose sinks have the same prefix and sink name fence each other
    /// (the older one fails); see the [module docs](self).
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.txn_prefix = Some(prefix.into());
        self
    }

    /// The `transaction.timeout.ms` of the exactly-once writers' sessions (ms, Kafka's
    /// name; default [`LOG_SINK_TRANSACTION_TIMEOUT_MS`]): the log aborts a
    /// transaction still undecided that long after its first record, prepared ones
    /// included (see the [module docs](self)). Between 1 and
    /// [`brook_log::MAX_TRANSACTION_TIMEOUT_MS`]; otherwise starting the writer fails
    /// with [`LogError::InvalidTransactionTimeout`].
    pub fn transaction_timeout_ms(mut self, ms: u64) -> Self {
        self.txn_timeout_ms = ms;
        self
    }

    /// The transactional ids of this sink's subtasks start with this (the prefix,
    /// the sink's name with characters other than `[A-Za-z0-9._-]` replaced by `_`,
    /// and a dot); the subtask index follows.
    fn txn_id_base(&self, info: &SubtaskInfo) -> String {
        let prefix = self.txn_prefix.as_deref().unwrap_or(&self.topic);
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
        format!("{prefix}.{sink}.")
    }

    /// A writer's encoding.
    fn encoding(&self) -> Encoding<T> {
        Encoding {
            key: self.key.clone(),
            encoder: (self.encoder)(),
            written: 0,
        }
    }

    fn open_topic(&self) -> Result<Arc<Topic>, ConnectorError> {
        self.log
            .topic(&self.topic)
            .map_err(|e| ConnectorError::log(format!("write topic {:?}", self.topic), e))
    }

    /// The exactly-once writer of subtask `info`: first commits `committables` (a
    /// restore) and aborts what earlier attempts left (see the [module docs](self)).
    fn transactional_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<TxnLogWriter<T>> {
        let topic = self.open_topic()?;
        let base = self.txn_id_base(info);
        let own = format!("{base}{}", info.index);
        validate_name("transactional id", &own).map_err(|e| {
            ConnectorError::config(
                "transactional_id_prefix",
                format!("the log sink's transactional id cannot be made: {e}"),
            )
        })?;
        // A checkpoint taken through a broker (semantics §1a) holds the Kafka sink's
        // committables, the records of each checkpoint: they are written here, in
        // the log's transactions, as the Kafka sink would have.
        let mut by_id: BTreeMap<String, Vec<TransactionHandle>> = BTreeMap::new();
        let mut records_by_id: BTreeMap<String, Vec<CheckpointRecords>> = BTreeMap::new();
        for bytes in &committables {
            match TxnCommittable::decode(bytes) {
                Ok(TxnCommittable::Prepared(p)) => {
                    by_id
                        .entry(p.transactional_id.clone())
                        .or_default()
                        .push(handle_of(p));
                }
                Ok(TxnCommittable::Records(r)) => {
                    records_by_id.entry(r.id.clone()).or_default().push(r);
                }
                Err(e) => {
                    return Err(OperatorError::failed(format!(
                        "topic {:?}: {e}",
                        self.topic
                    )));
                }
            }
        }
        let txn_err =
            |what: String, e: LogError| -> OperatorError { ConnectorError::log(what, e).into() };
        // Ids of former subtasks that now fall to this one: ids in the checkpoint, and
        // ids of this sink with an index `j >= parallelism` and `j % parallelism ==
        // index` (a run at a higher parallelism that left transactions behind).
        let mut others: Vec<String> = by_id
            .keys()
            .chain(records_by_id.keys())
            .filter(|id| **id != own)
            .cloned()
            .collect();
        others.sort();
        others.dedup();
        for id in self.log.transactional_ids() {
            let former = id
                .strip_prefix(&base)
                .and_then(|rest| rest.parse::<u32>().ok())
                .is_some_and(|j| j >= info.parallelism && j % info.parallelism == info.index);
            if former && !others.contains(&id) {
                others.push(id);
            }
        }
        for id in others {
            let mut session = self
                .log
                .init_transactions_with_timeout(&id, self.txn_timeout_ms)
                .map_err(|e| txn_err(format!("start transactional id {id:?}"), e))?;
            finish_restored(
                &self.log,
                &mut session,
                &self.topic,
                by_id.get(&id).map_or(&[][..], |v| v),
                records_by_id.get(&id).map_or(&[][..], |v| v),
            )?;
        }
        let mut producer = self
            .log
            .init_transactions_with_timeout(&own, self.txn_timeout_ms)
            .map_err(|e| txn_err(format!("start transactional id {own:?}"), e))?;
        finish_restored(
            &self.log,
            &mut producer,
            &self.topic,
            by_id.get(&own).map_or(&[][..], |v| v),
            records_by_id.get(&own).map_or(&[][..], |v| v),
        )?;
        Ok(TxnLogWriter {
            topic,
            enc: self.encoding(),
            producer,
            pending: Vec::new(),
            finished: false,
        })
    }
}

/// Commits the restored checkpoint's transactions of one transactional id (again:
/// committing twice is harmless), writes the restored checkpoints' records that a
/// Kafka sink had not committed yet (one transaction each, with its marker), and
/// aborts every other prepared transaction (written after the restored checkpoint).
/// Open ones were aborted when the session started.
fn finish_restored(
    log: &Log,
    session: &mut TransactionalProducer,
    topic: &str,
    handles: &[TransactionHandle],
    records: &[CheckpointRecords],
) -> OpResult {
    let id = session.transactional_id().to_string();
    let fail = |what: &str, h: &TransactionHandle, e: LogError| -> OperatorError {
        ConnectorError::log(format!("{what} transaction {} of {id:?}", h.sequence), e).into()
    };
    let mut ordered = handles.to_vec();
    ordered.sort_by_key(|h| (h.producer_id, h.sequence));
    for h in &ordered {
        session
            .commit(h)
            .map_err(|e| fail("commit restored", h, e))?;
    }
    commit_checkpoint_records(log, session, topic, records)?;
    let leftovers = session
        .prepared()
        .map_err(|e| ConnectorError::log(format!("list transactions of {id:?}"), e))?;
    for h in &leftovers {
        session.abort(h).map_err(|e| fail("abort leftover", h, e))?;
    }
    Ok(())
}

/// A checkpoint taken through a broker, restored in-process: writes the records of
/// each restored checkpoint above the id's marker (the last checkpoint the Kafka sink
/// committed, an offset of [`marker_group`]) in one log transaction that moves the
/// marker to that checkpoint, as the Kafka sink's restore does; so each is committed
/// exactly once, also when this restore is interrupted and repeated.
fn commit_checkpoint_records(
    log: &Log,
    session: &mut TransactionalProducer,
    topic: &str,
    restored: &[CheckpointRecords],
) -> OpResult {
    if restored.is_empty() {
        return Ok(());
    }
    let id = session.transactional_id().to_string();
    let group = marker_group(&id);
    let marker = TopicPartition::new(topic, 0);
    let fail = |what: String, e: LogError| -> OperatorError {
        ConnectorError::log(format!("{what} (transactional id {id:?})"), e).into()
    };
    let done: CheckpointId = log.committed_offset(&group, &marker).unwrap_or(0);
    let mut ordered: Vec<&CheckpointRecords> =
        restored.iter().filter(|c| c.checkpoint > done).collect();
    ordered.sort_by_key(|c| c.checkpoint);
    for c in ordered {
        let records: Vec<ProducerRecord> = c
            .records
            .iter()
            .map(|r| ProducerRecord {
                key: r.0.clone().map(Bytes::from),
                value: Bytes::from(r.1.clone()),
                timestamp: r.2,
                headers: Vec::new(),
                tombstone: false,
            })
            .collect();
        let what = format!("write checkpoint {}'s records", c.checkpoint);
        session.begin().map_err(|e| fail(what.clone(), e))?;
        if !records.is_empty() {
            session
                .send(topic, records)
                .map_err(|e| fail(what.clone(), e))?;
        }
        session
            .send_offsets(&group, &[(marker.clone(), c.checkpoint)])
            .and_then(|()| session.commit_transaction())
            .map_err(|e| fail(what, e))?;
    }
    Ok(())
}

/// The log's name for a prepared transaction.
fn handle_of(p: PreparedTxn) -> TransactionHandle {
    TransactionHandle {
        transactional_id: p.transactional_id,
        producer_id: p.producer_id,
        epoch: p.epoch,
        sequence: p.sequence,
    }
}

/// A committable: the prepared transaction, as a [`TxnCommittable::Prepared`].
fn encode_committable(h: &TransactionHandle) -> Vec<u8> {
    PreparedTxn {
        transactional_id: h.transactional_id.clone(),
        producer_id: h.producer_id,
        epoch: h.epoch,
        sequence: h.sequence,
    }
    .encode()
}

fn decode_committable(bytes: &[u8]) -> Option<TransactionHandle> {
    match TxnCommittable::decode(bytes) {
        Ok(TxnCommittable::Prepared(p)) => Some(handle_of(p)),
        _ => None,
    }
}

impl<T: Send + 'static> Sink for LogSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(LogWriter {
            topic: self.open_topic()?,
            enc: self.encoding(),
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

/// A writer's encoder, with the sink's key function and the messages' buffer.
struct Encoding<T> {
    key: Option<KeyFn<T>>,
    encoder: Box<dyn ValueEncoder<In = T>>,
    /// Messages written so far, for error positions.
    written: u64,
}

impl<T> Encoding<T> {
    /// `batch` as producer records: the encoder's messages (their keys replaced by
    /// the key function's, if the sink has one), all sharing one buffer.
    fn records(&mut self, batch: &Batch<T>, topic: &str) -> OpResult<Vec<ProducerRecord>> {
        let mut messages = Messages::default();
        self.encoder
            .encode(batch, &mut messages)
            .map_err(|e| OperatorError::BadRecord {
                position: Some(format!(
                    "topic {topic:?} record {}",
                    self.written + e.record as u64 + 1
                )),
                reason: e.reason,
            })?;
        if self.key.is_some() && messages.len() != batch.len() {
            return Err(OperatorError::failed(format!(
                "topic {topic:?}: the sink's key function needs one message per record, \
                 its encoder wrote {} for {}",
                messages.len(),
                batch.len()
            )));
        }
        self.written += messages.len() as u64;
        let (bytes, spans) = messages.into_parts();
        let bytes = Bytes::from(bytes);
        let records = spans
            .into_iter()
            .enumerate()
            .map(|(i, m)| ProducerRecord {
                key: match &self.key {
                    Some(k) => Some(k(&batch[i].value)),
                    None => m.key.map(|r| bytes.slice(r)),
                },
                value: bytes.slice(m.value),
                timestamp: m.timestamp,
                headers: Vec::new(),
                tombstone: false,
            })
            .collect();
        Ok(records)
    }
}

/// The at-least-once writer (jobs without checkpoints): plain appends.
struct LogWriter<T> {
    topic: Arc<Topic>,
    enc: Encoding<T>,
}

impl<T: Send + 'static> SinkWriter for LogWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        let records = self.enc.records(&batch, self.topic.name())?;
        let n = records.len();
        self.topic.append(records).map_err(|e| {
            ConnectorError::log(
                format!("append {n} records to topic {:?}", self.topic.name()),
                e,
            )
        })?;
        Ok(())
    }
}

/// The exactly-once writer of a [`LogSink`] subtask: one transaction per checkpoint.
struct TxnLogWriter<T> {
    topic: Arc<Topic>,
    enc: Encoding<T>,
    producer: TransactionalProducer,
    /// Prepared, not yet committed.
    pending: Vec<TransactionHandle>,
    finished: bool,
}

impl<T> TxnLogWriter<T> {
    fn err(&self, what: String, e: LogError) -> OperatorError {
        ConnectorError::log(
            format!(
                "{what} (topic {:?}, transactional id {:?})",
                self.topic.name(),
                self.producer.transactional_id()
            ),
            e,
        )
        .into()
    }

    /// Prepares the open transaction, if there is one.
    fn prepare(&mut self) -> OpResult<Option<TransactionHandle>> {
        if self.producer.current().is_none() {
            return Ok(None);
        }
        let h = self
            .producer
            .prepare()
            .map_err(|e| self.err("prepare the transaction".into(), e))?;
        self.pending.push(h.clone());
        Ok(Some(h))
    }

    fn commit_handle(&mut self, h: &TransactionHandle) -> OpResult {
        self.producer
            .commit(h)
            .map_err(|e| self.err(format!("commit transaction {}", h.sequence), e))?;
        self.pending.retain(|p| p != h);
        Ok(())
    }
}

impl<T: Send + 'static> SinkWriter for TxnLogWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        if self.finished {
            return Err(OperatorError::failed(format!(
                "topic {:?}: written to after the sink finished",
                self.topic.name()
            )));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let records = self.enc.records(&batch, self.topic.name())?;
        let n = records.len();
        if self.producer.current().is_none() {
            self.producer
                .begin()
                .map_err(|e| self.err("begin a transaction".into(), e))?;
        }
        let topic = self.topic.name().to_string();
        self.producer
            .send(&topic, records)
            .map_err(|e| self.err(format!("append {n} records"), e))?;
        Ok(())
    }

    /// Records become visible when their transaction commits: nothing to do.
    fn flush(&mut self) -> OpResult {
        Ok(())
    }

    /// Prepares the transaction of the records since the last barrier (fsynced,
    /// recorded as prepared) and returns its handle; `None` when nothing was written.
    fn prepare_commit(&mut self, _checkpoint: CheckpointId) -> OpResult<Option<Vec<u8>>> {
        match self.prepare()? {
            Some(h) => Ok(Some(encode_committable(&h))),
            None => Ok(None),
        }
    }

    fn commit(&mut self, _checkpoint: CheckpointId, committables: Vec<Vec<u8>>) -> OpResult {
        for bytes in committables {
            let h = decode_committable(&bytes).ok_or_else(|| {
                OperatorError::failed(format!(
                    "topic {:?}: a committable this sink did not write",
                    self.topic.name()
                ))
            })?;
            self.commit_handle(&h)?;
        }
        Ok(())
    }

    /// End of input: commits everything, including what came after the last barrier.
    fn finish(&mut self) -> OpResult {
        if self.finished {
            return Ok(());
        }
        self.prepare()?;
        for h in std::mem::take(&mut self.pending) {
            self.commit_handle(&h)?;
        }
        self.finished = true;
        Ok(())
    }

    /// A job that stops without finishing (canceled, failed) aborts the transaction
    /// it had open: no checkpoint holds it, so nothing could ever commit it, and left
    /// open it would hold the topic's last stable offset, and every read-committed
    /// reader, back. Prepared transactions stay for the restore that commits them.
    fn close(&mut self) {
        if self.finished || self.producer.current().is_none() {
            return;
        }
        if let Err(e) = self.producer.abort_transaction() {
            tracing::warn!(
                topic = self.topic.name(),
                transactional_id = self.producer.transactional_id(),
                error = %e,
                "cannot abort the open transaction"
            );
        }
    }
}
