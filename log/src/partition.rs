//! One partition: an ordered list of segments, the last of which is active.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brook_core::time::SharedClock;
use bytes::Bytes;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::aborted::{self, AbortedTransaction};
use crate::compaction::{self, SegmentFacts};
use crate::error::{IoContext, LogError, Result};
use crate::flush::{self, DueSync, RollFlush};
use crate::format::{
    self, BatchHeader, ControlType, FormatError, ProducerMark, RecordRef, TxnMark,
};
use crate::options::{ConfigCell, FsyncPolicy, TopicConfig};
use crate::producer_snapshot::{self, RollSnapshot};
use crate::producer_state::{ProducerEntry, ProducerStates};
use crate::record::{ProducerRecord, Record};
use crate::segment::{LastBatch, ReadProgress, Segment, SegmentView};

/// Limits for one read, as Kafka's `max.poll.records` and `fetch.max.bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    /// At most this many records.
    pub max_records: usize,
    /// At most about this many bytes of batches; at least one batch is returned when
    /// one is available, even if it is bigger.
    pub max_bytes: usize,
}

impl Default for ReadLimit {
    fn default() -> Self {
        ReadLimit {
            max_records: 500,
            max_bytes: 1 << 20,
        }
    }
}

impl ReadLimit {
    /// At most `n` records (and 64 MiB).
    pub fn records(n: usize) -> Self {
        ReadLimit {
            max_records: n,
            max_bytes: 64 << 20,
        }
    }
}

/// Which records a reader sees, as Kafka's `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum IsolationLevel {
    /// Records up to the last stable offset, without those of aborted transactions
    /// (Kafka's `read_committed`). The default.
    #[default]
    ReadCommitted,
    /// Every data record up to the log end offset, including those of open and
    /// aborted transactions (Kafka's `read_uncommitted`).
    ReadUncommitted,
}

impl IsolationLevel {
    /// `read_committed` or `read_uncommitted` (Kafka's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::ReadCommitted => "read_committed",
            IsolationLevel::ReadUncommitted => "read_uncommitted",
        }
    }
}

impl std::fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for IsolationLevel {
    type Err = LogError;
    /// Parses `read_committed` or `read_uncommitted` (also with `-` for `_`).
    fn from_str(s: &str) -> Result<Self> {
        match s.replace('-', "_").as_str() {
            "read_committed" => Ok(IsolationLevel::ReadCommitted),
            "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
            _ => Err(LogError::InvalidConfig {
                field: "isolation",
                reason: format!("{s:?} is not one of read_committed, read_uncommitted"),
            }),
        }
    }
}

/// What a [`Partition::read_with`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSummary {
    /// How many records were passed on.
    pub records: usize,
    /// The offset to read from next: after the last record passed on or passed over
    /// (control records and records of aborted transactions are passed over), or the
    /// offset read from when there was none.
    pub next_offset: u64,
}

/// What a [`Partition::read_stored`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRead {
    /// How many records (control records included) were passed on, and the offset
    /// to read from next.
    pub summary: ReadSummary,
    /// The aborted transactions whose ranges (first offset ..= abort marker) meet the
    /// offsets read, in the order of their markers: Kafka's aborted-transactions list
    /// of a read_committed fetch.
    pub aborted: Vec<AbortedTransaction>,
}

/// What [`Partition::read_batches`] hands on.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// What a brook reader of this isolation level sees.
    Isolated(IsolationLevel),
    /// Every batch up to the last stable offset, as stored (see
    /// [`Partition::read_stored`]).
    Stored,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Partition the records went to.
    pub partition: u32,
    /// Offset of the first record.
    pub base_offset: u64,
    /// Offset of the last record.
    pub last_offset: u64,
}

/// Facts about a partition, for `describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub partition: u32,
    /// The oldest offset still stored.
    pub log_start_offset: u64,
    /// The offset the next record will get.
    pub log_end_offset: u64,
    /// Bytes stored in segment files.
    pub size_bytes: u64,
    /// Number of segments (closed and active).
    pub segments: usize,
    /// The last stable offset: the first offset of the earliest open transaction, or
    /// the log end offset when none is open (as Kafka's LSO).
    pub last_stable_offset: u64,
    /// Closed segments that time retention keeps only because they hold a record
    /// stamped in the future (as of the last retention pass; see
    /// [`Partition::apply_retention`]).
    pub segments_held_by_future_timestamps: usize,
}

/// A transaction that has written (or may write) to a partition and is not decided.
#[derive(Debug, Clone, Copy)]
struct OpenTxn {
    /// The log end offset when the transaction was added to the partition: its
    /// records are at or after it.
    first_offset: u64,
    /// Whether appends are accepted (false once prepared, or after a restart).
    accepting: bool,
}

/// An aborted transaction's range in a partition, as Kafka's aborted-transaction
/// index: its records are those of the transaction between `first_offset` and
/// `last_offset` (the abort marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AbortedTxn {
    pub(crate) producer_id: u64,
    pub(crate) sequence: u64,
    pub(crate) first_offset: u64,
    pub(crate) last_offset: u64,
}

impl AbortedTxn {
    pub(crate) fn covers(&self, mark: &TxnMark, offset: u64) -> bool {
        self.producer_id == mark.producer_id
            && self.sequence == mark.sequence
            && (self.first_offset..=self.last_offset).contains(&offset)
    }
}

/// Key of a transaction in a partition: producer id and transaction number.
pub(crate) type TxnKey = (u64, u64);

/// Name of a partition's aborted-transaction index file.
const ABORTED_INDEX: &str = "aborted.txnindex";
/// Bytes per entry of the aborted-transaction index: producer id, sequence, first
/// offset, last offset (`u64` LE each), CRC32C of those 32 bytes (`u32` LE).
const ABORTED_ENTRY: usize = 36;

/// The transaction state of a partition.
#[derive(Debug, Default)]
struct Txns {
    open: BTreeMap<TxnKey, OpenTxn>,
    /// In the order of their abort markers (so sorted by `last_offset`).
    aborted: Vec<AbortedTxn>,
}

impl Txns {
    fn stable_offset(&self, end: u64) -> u64 {
        self.open
            .values()
            .map(|t| t.first_offset)
            .min()
            .map_or(end, |first| first.min(end))
    }
}

#[derive(Debug)]
struct State {
    segments: Vec<Segment>,
    last_sync_ms: i64,
    unsynced: bool,
    buf: Vec<u8>,
    closed: bool,
    txns: Txns,
    /// See [`PartitionInfo::segments_held_by_future_timestamps`].
    held_by_future: usize,
    /// The idempotent and transactional producers' state, updated with every append
    /// of a producer's batch.
    producers: ProducerStates,
    /// Flushes of rolls not yet taken to run ([`Partition::flush_rolled`]), oldest
    /// first.
    rolled: Vec<RollFlush>,
}

impl State {
    fn end_offset(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.next_offset)
    }
}

fn encode_aborted(a: &AbortedTxn) -> [u8; ABORTED_ENTRY] {
    let mut e = [0u8; ABORTED_ENTRY];
    e[0..8].copy_from_slice(&a.producer_id.to_le_bytes());
    e[8..16].copy_from_slice(&a.sequence.to_le_bytes());
    e[16..24].copy_from_slice(&a.first_offset.to_le_bytes());
    e[24..32].copy_from_slice(&a.last_offset.to_le_bytes());
    let crc = crc32c::crc32c(&e[..32]);
    e[32..].copy_from_slice(&crc.to_le_bytes());
    e
}

/// Loads the aborted-transaction index. A torn or damaged tail (an entry cut short or
/// failing its CRC at the end) is ignored: the entry is written again when the abort
/// is redone on open (the transaction is still `Aborting` in the coordinator's state).
fn load_aborted(path: &Path) -> Result<Vec<AbortedTxn>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(LogError::Io {
                op: "read",
                path: path.to_path_buf(),
                source: e,
            })
        }
    };
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ABORTED_ENTRY);
    let u64_at = |c: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&c[at..at + 8]);
        u64::from_le_bytes(a)
    };
    for (i, c) in bytes.chunks(ABORTED_ENTRY).enumerate() {
        let ok = c.len() == ABORTED_ENTRY
            && crc32c::crc32c(&c[..32]) == u32::from_le_bytes([c[32], c[33], c[34], c[35]]);
        if !ok {
            if (i + 1) * ABORTED_ENTRY >= bytes.len() {
                warn!(path = %path.display(), entry = i, "ignoring a torn entry at the end of the aborted-transaction index");
                break;
            }
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                position: (i * ABORTED_ENTRY) as u64,
                reason: "aborted-transaction index entry fails its CRC".into(),
            });
        }
        let a = AbortedTxn {
            producer_id: u64_at(c, 0),
            sequence: u64_at(c, 8),
            first_offset: u64_at(c, 16),
            last_offset: u64_at(c, 24),
        };
        // An abort redone after a crash may have written the entry twice.
        match out
            .iter_mut()
            .find(|o| (o.producer_id, o.sequence) == (a.producer_id, a.sequence))
        {
            Some(o) => {
                o.first_offset = o.first_offset.min(a.first_offset);
                o.last_offset = o.last_offset.max(a.last_offset);
            }
            None => out.push(a),
        }
    }
    out.sort_by_key(|a| a.last_offset);
    Ok(out)
}

/// Rewrites the aborted-transaction index at `path` without the entries whose abort
/// marker lies below `log_start` (their records are deleted: retention removed the
/// segments holding them, as Kafka deletes a segment's transaction index with it).
/// Written aside, fsynced and renamed into place (fsyncs skipped when not `durable`),
/// so a crash leaves the old index or the new one; the caller holds the index file's
/// lock, so no entry appended meanwhile is lost.
fn prune_aborted_file(path: &Path, log_start: u64, durable: bool) -> Result<()> {
    let kept: Vec<u8> = load_aborted(path)?
        .iter()
        .filter(|a| a.last_offset >= log_start)
        .flat_map(encode_aborted)
        .collect();
    let tmp = path.with_extension("txnindex.tmp");
    {
        let mut f = fs::File::create(&tmp).ctx("create", &tmp)?;
        f.write_all(&kept).ctx("write", &tmp)?;
        if durable {
            f.sync_data().ctx("fsync", &tmp)?;
        }
    }
    fs::rename(&tmp, path).ctx("rename", &tmp)?;
    if durable {
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
    }
    Ok(())
}

/// One partition of a topic. Appends are serialised by a lock; reads take the lock
/// only to find their segments and then read the files without it.
#[derive(Debug)]
pub struct Partition {
    topic: Arc<str>,
    id: u32,
    dir: PathBuf,
    config: Arc<ConfigCell>,
    fsync: FsyncPolicy,
    clock: SharedClock,
    state: Mutex<State>,
    end: watch::Sender<u64>,
    stable: watch::Sender<u64>,
    /// The batch the last read stopped inside, where the next read of a sequential
    /// reader starts (see [`LastBatch`]). Its own lock, taken twice per read.
    last_batch: Mutex<Option<LastBatch>>,
    /// Held while flushes of rolls run (taken before `state`, never after): one runs
    /// at a time, in order, and retention and compaction wait for it before they
    /// delete or replace a segment.
    flush_lock: Mutex<()>,
    /// Rolls whose flush has not finished (queued in `State::rolled` or running):
    /// an append under `always` waits for them only when there are any.
    rolls_unflushed: AtomicUsize,
    /// Held while the aborted-transaction index file is appended to (under the
    /// partition's lock) or rewritten by retention's pruning (without it), so a
    /// rewrite never drops an entry appended meanwhile.
    aborted_file: Mutex<()>,
    #[cfg(test)]
    roll_flush_hook: flush::FlushHook,
}

impl Partition {
    /// Opens (or creates) the partition stored in `dir`.
    pub(crate) fn open(
        topic: Arc<str>,
        id: u32,
        dir: PathBuf,
        config: Arc<ConfigCell>,
        fsync: FsyncPolicy,
        clock: SharedClock,
        recover: bool,
    ) -> Result<Self> {
        let index_interval_bytes = config.get().index_interval_bytes;
        fs::create_dir_all(&dir).ctx("create directory", &dir)?;
        let now = clock.now_ms();
        let mut bases = Vec::new();
        for entry in fs::read_dir(&dir).ctx("list", &dir)? {
            let entry = entry.ctx("list", &dir)?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<u64>() {
                    bases.push(base);
                }
            } else if name.ends_with(crate::segment::CLEANED_SUFFIX) {
                // A compacted copy whose swap a crash interrupted: the original is
                // still in place (the swap is one rename), so the copy is dropped.
                let path = entry.path();
                warn!(path = %path.display(), "removing an unfinished compacted segment");
                fs::remove_file(&path).ctx("remove", &path)?;
            }
        }
        bases.sort_unstable();
        // Whether compaction may have left gaps between segments: the topic compacts,
        // or it did once (the cleaner's state is kept).
        let compacted = config.get().cleanup_policy.compacts()
            || dir.join(crate::cleaner::CLEANER_STATE).exists();
        let mut segments = Vec::with_capacity(bases.len().max(1));
        for (i, &base) in bases.iter().enumerate() {
            let is_last = i + 1 == bases.len();
            let seg = Segment::open(&dir, base, index_interval_bytes, recover, is_last, now)?;
            if let Some(prev) = segments.last_mut() {
                let prev: &mut Segment = prev;
                // Compaction may have removed a closed segment's last records; when its
                // index (which keeps its next offset) was lost, the gap ends where the
                // next segment starts.
                if prev.next_offset < seg.base_offset && compacted {
                    prev.next_offset = seg.base_offset;
                }
                if prev.next_offset != seg.base_offset {
                    return Err(LogError::Corrupt {
                        path: dir.join(crate::segment::segment_stem(base) + ".log"),
                        position: 0,
                        reason: format!(
                            "segment starts at offset {} but the previous one ends at {}",
                            seg.base_offset, prev.next_offset
                        ),
                    });
                }
            }
            let cut = seg.tail_truncated && !is_last;
            segments.push(seg);
            if cut {
                // A machine crash before the roll's flush (crate::flush::RollFlush) tore
                // a closed segment: what came after its tear is gone as a torn tail
                // is, so the segments after it go too (Kafka's recovery truncates at
                // the first bad batch past the recovery point the same way).
                for &later in &bases[i + 1..] {
                    warn!(dir = %dir.display(), base_offset = later, "removing a segment after a torn closed segment");
                    crate::segment::remove_files(&dir, later)?;
                }
                sync_dir(&dir)?;
                break;
            }
        }
        match segments.last() {
            // The active segment's index files are rewritten when it is closed again.
            Some(last) => last.remove_index_files(),
            None => {
                segments.push(Segment::create(&dir, 0, index_interval_bytes, now)?);
                sync_dir(&dir)?;
            }
        }
        let end_offset = segments.last().map_or(0, |s| s.next_offset);
        let producers = rebuild_producers(&dir, &segments, end_offset, now)?;
        let (end, _) = watch::channel(end_offset);
        let (stable, _) = watch::channel(end_offset);
        let aborted = load_aborted(&dir.join(ABORTED_INDEX))?;
        Ok(Partition {
            topic,
            id,
            dir,
            config,
            fsync,
            clock,
            state: Mutex::new(State {
                segments,
                last_sync_ms: now,
                unsynced: false,
                buf: Vec::new(),
                closed: false,
                held_by_future: 0,
                producers,
                txns: Txns {
                    open: BTreeMap::new(),
                    aborted,
                },
                rolled: Vec::new(),
            }),
            end,
            stable,
            last_batch: Mutex::new(None),
            flush_lock: Mutex::new(()),
            rolls_unflushed: AtomicUsize::new(0),
            aborted_file: Mutex::new(()),
            #[cfg(test)]
            roll_flush_hook: flush::FlushHook::default(),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        // A poisoned lock means a panic while appending; the segment state may be half
        // updated, so refuse further use rather than guess.
        let st = self.state.lock().map_err(|_| LogError::Closed)?;
        if st.closed {
            return Err(LogError::Closed);
        }
        Ok(st)
    }

    /// The partition number.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// What an append of no records reports: the end offset, and nothing written.
    fn nothing_appended(&self) -> AppendInfo {
        let end = self.log_end_offset();
        AppendInfo {
            partition: self.id,
            base_offset: end,
            last_offset: end.wrapping_sub(1),
        }
    }

    /// Appends `records` as one batch and returns their offsets. Records without a
    /// timestamp get the clock's time. The batch is durable according to the fsync
    /// policy when this returns.
    ///
    /// # Errors
    /// [`LogError::RecordTooLarge`] (nothing is written), I/O errors, [`LogError::Closed`].
    pub fn append(&self, records: &[ProducerRecord]) -> Result<AppendInfo> {
        if records.is_empty() {
            return Ok(self.nothing_appended());
        }
        let total = self.check_sizes(records, format::BATCH_HEADER_LEN)?;
        let now = self.clock.now_ms();
        let info =
            self.append_locked(&mut *self.lock()?, records, total, now, Batch::Plain(None))?;
        self.after_append()?;
        Ok(info)
    }

    /// After an append, with the partition's lock released: under `always` the append
    /// is acknowledged durable, so it waits for the flush of any roll before it (its
    /// segment's directory entry; [`crate::flush`]).
    fn after_append(&self) -> Result<()> {
        if flush::append_syncs(self.fsync) {
            self.await_rolls()?;
        }
        Ok(())
    }

    /// Runs or waits for the flushes of every roll so far, when there are any.
    fn await_rolls(&self) -> Result<()> {
        if self.rolls_unflushed.load(Ordering::SeqCst) > 0 {
            self.flush_rolled()?;
        }
        Ok(())
    }

    /// Runs the flushes of rolled segments ([`RollFlush`]) without the partition's
    /// lock. Returns once every roll made before the call is flushed: one another
    /// thread is running is waited for (the flush lock).
    ///
    /// # Errors
    /// I/O errors (the failed flush and those after it stay queued for the next call),
    /// [`LogError::Closed`].
    pub(crate) fn flush_rolled(&self) -> Result<()> {
        let _flushing = self
            .flush_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Closed: closing ran them.
        let Ok(mut st) = self.lock() else {
            return Ok(());
        };
        let rolled = std::mem::take(&mut st.rolled);
        drop(st);
        let mut rest = rolled.into_iter();
        while let Some(f) = rest.next() {
            #[cfg(test)]
            self.roll_flush_hook.call();
            if let Err(e) = f.run() {
                if let Ok(mut st) = self.state.lock() {
                    let mut again: Vec<RollFlush> = std::iter::once(f).chain(rest).collect();
                    again.append(&mut st.rolled);
                    st.rolled = again;
                }
                return Err(e);
            }
            self.rolls_unflushed.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Appends `records` as one batch of an idempotent producer: stored with its
    /// producer id, epoch and base sequence (format version 3), and the partition's
    /// producer state ([`Partition::with_producer_state`]) updated in the same step,
    /// so that the state rebuilt when the partition is opened again is the one the
    /// appends left. Whether the batch should be appended (a retry, a gap) is the
    /// caller's decision, taken on that state.
    ///
    /// # Errors
    /// As [`Partition::append`].
    pub fn append_with_producer(
        &self,
        records: &[ProducerRecord],
        producer: ProducerMark,
    ) -> Result<AppendInfo> {
        if records.is_empty() {
            return Ok(self.nothing_appended());
        }
        let total = self.check_sizes(records, format::PRODUCER_BATCH_HEADER_LEN)?;
        let now = self.clock.now_ms();
        let info = self.append_locked(
            &mut *self.lock()?,
            records,
            total,
            now,
            Batch::Plain(Some(producer)),
        )?;
        self.after_append()?;
        Ok(info)
    }

    /// Calls `f` with what the partition remembers of `producer_id` (its epoch and
    /// last batches), under the partition's lock.
    ///
    /// # Errors
    /// [`LogError::Closed`].
    pub fn with_producer_state<R>(
        &self,
        producer_id: u64,
        f: impl FnOnce(Option<&ProducerEntry>) -> R,
    ) -> Result<R> {
        let st = self.lock()?;
        Ok(f(st.producers.get(producer_id)))
    }

    /// A copy of the producers' state (for tests and tools).
    ///
    /// # Errors
    /// [`LogError::Closed`].
    pub fn producer_states(&self) -> Result<ProducerStates> {
        Ok(self.lock()?.producers.clone())
    }

    /// Checks the sizes of `records` (at least one) in a batch whose header has
    /// `header_len` bytes; returns the batch's encoded size.
    fn check_sizes(&self, records: &[ProducerRecord], header_len: usize) -> Result<usize> {
        let config = self.config.get();
        let max = config.max_record_bytes as usize;
        let mut total = header_len;
        let compacted = config.cleanup_policy.compacts();
        for (index, r) in records.iter().enumerate() {
            if compacted && r.key.is_none() {
                // Compaction keeps the latest record per key: a keyless one has no
                // place in it (Kafka refuses it with INVALID_RECORD).
                return Err(LogError::InvalidRecord {
                    topic: self.topic.to_string(),
                    index,
                    reason: format!(
                        "the topic is compacted (cleanup.policy={}), so every record needs a key",
                        config.cleanup_policy
                    ),
                });
            }
            let size = format::record_len(r);
            if size > max
                || r.headers.len() > usize::from(u16::MAX)
                || r.headers
                    .iter()
                    .any(|h| h.key.len() > usize::from(u16::MAX))
            {
                return Err(LogError::RecordTooLarge { index, size, max });
            }
            total += size;
        }
        if total as u64 > crate::options::MAX_SEGMENT_BYTES {
            return Err(LogError::RecordTooLarge {
                index: records.len() - 1,
                size: total,
                max,
            });
        }
        Ok(total)
    }

    /// Appends one batch under the lock, syncs by the fsync policy and publishes the
    /// new end and stable offsets.
    fn append_locked(
        &self,
        st: &mut State,
        records: &[ProducerRecord],
        total: usize,
        now: i64,
        kind: Batch,
    ) -> Result<AppendInfo> {
        // The batch's largest timestamp, as the encoder will write it (a marker carries
        // the time it is written).
        let batch_max_ts = match kind {
            Batch::Control(..) => now,
            _ => records
                .iter()
                .map(|r| r.timestamp.unwrap_or(now))
                .max()
                .unwrap_or(now),
        };
        // A marker never rolls a segment by time: it carries the writer's clock, not the
        // records' time, and records stamped long ago (event time) followed by a marker
        // stamped now would roll at every transaction, and the rolled segments, old by
        // their records' time, would fall to time retention at once.
        let roll_ts = match kind {
            Batch::Control(..) => None,
            _ => Some(batch_max_ts),
        };
        self.maybe_roll(st, total as u64, records.len() as u64, now, roll_ts)?;
        let mut buf = std::mem::take(&mut st.buf);
        buf.clear();
        let active = st.segments.last_mut().ok_or(LogError::Closed)?;
        let base_offset = active.next_offset;
        let enc = match kind {
            Batch::Plain(None) => format::encode_batch(&mut buf, base_offset, records, now),
            Batch::Txn(mark, None) => {
                format::encode_txn_batch(&mut buf, base_offset, records, now, mark)
            }
            Batch::Plain(Some(p)) => {
                format::encode_producer_batch(&mut buf, base_offset, records, now, p, None)
            }
            Batch::Txn(mark, Some(p)) => {
                format::encode_producer_batch(&mut buf, base_offset, records, now, p, Some(mark))
            }
            Batch::Control(mark, control) => {
                format::encode_control_batch(&mut buf, base_offset, mark, control, now)
            }
        };
        let res = active.append(&buf, &enc, self.config.get().segment_bytes);
        active.last_write_ms = now;
        // Keep the buffer for the next batch unless it grew unusually large.
        if buf.capacity() <= 8 << 20 {
            st.buf = buf;
        }
        res?;
        // The batch is in the file: the state follows it, so a retry of it is known
        // as one even when the fsync below fails.
        if let Batch::Plain(Some(p)) | Batch::Txn(_, Some(p)) = kind {
            st.producers
                .appended(&p, enc.record_count, base_offset, now);
        }
        st.unsynced = true;
        // Under `interval` the maintenance syncs, without this lock (crate::flush).
        if flush::append_syncs(self.fsync) {
            self.sync_locked(st, now)?;
        }
        let next = base_offset + u64::from(enc.record_count);
        self.publish(st);
        Ok(AppendInfo {
            partition: self.id,
            base_offset,
            last_offset: next - 1,
        })
    }

    /// Publishes the end and stable offsets (under the lock, so that they never go
    /// back).
    fn publish(&self, st: &State) {
        let end = st.end_offset();
        self.end.send_replace(end);
        let stable = st.txns.stable_offset(end);
        self.stable.send_if_modified(|s| {
            let changed = *s != stable;
            *s = stable;
            changed
        });
    }

    // ---- transactions ----------------------------------------------------------

    /// Adds a transaction to the partition (its records will come at or after the
    /// current log end offset) and returns that first offset; an already added one
    /// keeps its first offset.
    pub(crate) fn add_txn(&self, key: TxnKey) -> Result<u64> {
        let mut st = self.lock()?;
        let end = st.end_offset();
        let first = st
            .txns
            .open
            .entry(key)
            .or_insert(OpenTxn {
                first_offset: end,
                accepting: true,
            })
            .first_offset;
        self.publish(&st);
        Ok(first)
    }

    /// Forgets a transaction added by [`Partition::add_txn`] that never got to write
    /// (its addition could not be stored).
    pub(crate) fn forget_txn(&self, key: TxnKey) {
        if let Ok(mut st) = self.lock() {
            st.txns.open.remove(&key);
            self.publish(&st);
        }
    }

    /// On open: a transaction the coordinator's state says is undecided here. It
    /// accepts no appends (its writer is gone).
    pub(crate) fn restore_txn(&self, key: TxnKey, first_offset: u64) -> Result<()> {
        let mut st = self.lock()?;
        let end = st.end_offset();
        st.txns.open.insert(
            key,
            OpenTxn {
                first_offset: first_offset.min(end),
                accepting: false,
            },
        );
        self.publish(&st);
        Ok(())
    }

    /// Stops a transaction's appends (it is being prepared).
    pub(crate) fn seal_txn(&self, key: TxnKey) -> Result<()> {
        let mut st = self.lock()?;
        if let Some(t) = st.txns.open.get_mut(&key) {
            t.accepting = false;
        }
        Ok(())
    }

    /// Appends records of transaction `mark` as one transactional batch. The check
    /// that the transaction still accepts appends and the append happen under the
    /// partition's lock, so a writer fenced or aborted meanwhile cannot slip records
    /// in after the marker.
    ///
    /// With `producer` (a Kafka producer's base sequence, through the broker; its
    /// producer id and epoch are the transaction's), the batch is stored with it and
    /// the producer state updated, as [`Partition::append_with_producer`].
    ///
    /// # Errors
    /// [`LogError::TransactionNotOpen`] when the transaction is not open for appends
    /// here (aborted, prepared, or never added); as [`Partition::append`].
    pub(crate) fn append_txn(
        &self,
        records: &[ProducerRecord],
        mark: TxnMark,
        producer: Option<ProducerMark>,
    ) -> Result<AppendInfo> {
        if records.is_empty() {
            return Ok(self.nothing_appended());
        }
        let header_len = if producer.is_some() {
            format::PRODUCER_TXN_BATCH_HEADER_LEN
        } else {
            format::TXN_BATCH_HEADER_LEN
        };
        let total = self.check_sizes(records, header_len)?;
        let now = self.clock.now_ms();
        let mut st = self.lock()?;
        let key = (mark.producer_id, mark.sequence);
        if !st.txns.open.get(&key).is_some_and(|t| t.accepting) {
            return Err(LogError::TransactionNotOpen {
                producer_id: mark.producer_id,
                sequence: mark.sequence,
                topic: self.topic.to_string(),
                partition: self.id,
            });
        }
        let info = self.append_locked(&mut st, records, total, now, Batch::Txn(mark, producer))?;
        drop(st);
        self.after_append()?;
        Ok(info)
    }

    /// Ends transaction `mark` in this partition: appends its commit or abort marker
    /// (a control batch), fsyncs, and for an abort adds it to the aborted-transaction
    /// index (fsynced). Returns the marker's offset, or `None` when the transaction
    /// is not undecided here (already ended: ending is idempotent).
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub(crate) fn end_txn(&self, mark: TxnMark, control: ControlType) -> Result<Option<u64>> {
        let now = self.clock.now_ms();
        let mut guard = self.lock()?;
        let st = &mut *guard;
        let key = (mark.producer_id, mark.sequence);
        let Some(open) = st.txns.open.get(&key).copied() else {
            return Ok(None);
        };
        // The control record: 18 fixed bytes and a 4-byte key.
        let total = format::TXN_BATCH_HEADER_LEN + 18 + 4;
        let info = self.append_locked(st, &[], total, now, Batch::Control(mark, control))?;
        self.sync_locked(st, now)?;
        if control == ControlType::Abort {
            let a = AbortedTxn {
                producer_id: mark.producer_id,
                sequence: mark.sequence,
                first_offset: open.first_offset,
                last_offset: info.base_offset,
            };
            let path = self.dir.join(ABORTED_INDEX);
            let _file = self
                .aborted_file
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .ctx("open", &path)?;
            f.write_all(&encode_aborted(&a)).ctx("write", &path)?;
            f.sync_data().ctx("fsync", &path)?;
            st.txns.aborted.push(a);
        }
        st.txns.open.remove(&key);
        self.publish(st);
        drop(guard);
        // The marker is fsynced whatever the policy: its segment's directory entry too.
        self.await_rolls()?;
        Ok(Some(info.base_offset))
    }

    /// The last stable offset: the first offset of the earliest undecided transaction,
    /// or the log end offset when there is none (as Kafka's LSO). Read-committed
    /// readers read up to it.
    pub fn last_stable_offset(&self) -> u64 {
        *self.stable.borrow()
    }

    /// Where a reader of `isolation` stops: the last stable offset for
    /// [`IsolationLevel::ReadCommitted`], the log end offset otherwise.
    pub fn end_offset(&self, isolation: IsolationLevel) -> u64 {
        match isolation {
            IsolationLevel::ReadCommitted => self.last_stable_offset(),
            IsolationLevel::ReadUncommitted => self.log_end_offset(),
        }
    }

    /// A receiver of the offset where readers of `isolation` stop
    /// ([`Partition::end_offset`]), to wait for new readable records without polling.
    pub fn subscribe_end(&self, isolation: IsolationLevel) -> watch::Receiver<u64> {
        match isolation {
            IsolationLevel::ReadCommitted => self.stable.subscribe(),
            IsolationLevel::ReadUncommitted => self.end.subscribe(),
        }
    }

    fn sync_locked(&self, st: &mut State, now: i64) -> Result<()> {
        if let Some(active) = st.segments.last() {
            active.sync()?;
        }
        st.last_sync_ms = now;
        st.unsynced = false;
        Ok(())
    }

    fn maybe_roll(
        &self,
        st: &mut State,
        batch_bytes: u64,
        batch_records: u64,
        now: i64,
        batch_max_ts: Option<i64>,
    ) -> Result<()> {
        let Some(active) = st.segments.last() else {
            return Ok(());
        };
        if active.size == 0 {
            return Ok(());
        }
        let config = self.config.get();
        let too_big = active.size + batch_bytes > config.segment_bytes;
        // Kafka's `segment.ms` rule (`LogSegment.shouldRoll`): the new batch's time is
        // more than `segment.ms` after the segment's first batch. Record time, not the
        // life of this process, so appends by short-lived processes roll too.
        let too_old = match (config.segment_ms, batch_max_ts) {
            (Some(ms), Some(ts)) => active.time_waited_for_roll(now, ts) > ms,
            _ => false,
        };
        let too_many =
            active.next_offset - active.base_offset + batch_records > u64::from(u32::MAX);
        if too_big || too_old || too_many {
            self.roll_locked(st, now)?;
        }
        Ok(())
    }

    fn roll_locked(&self, st: &mut State, now: i64) -> Result<()> {
        let Some(active) = st.segments.last() else {
            return Ok(());
        };
        if active.size == 0 {
            return Ok(());
        }
        let durable = self.fsync != FsyncPolicy::Never;
        // The closed segment's fsync and index files, and the directory's fsync, run
        // after the lock is released (crate::flush::RollFlush).
        let closed = active.closed_flush();
        let next = active.next_offset;
        // Before the new segment exists: a segment at `next` implies its snapshot
        // when there is producer state (after a process crash; after a machine crash
        // once the roll's flush ran), which bounds the rebuild on open to the active
        // segment (see `rebuild_producers`). Placed without fsync: the roll's flush
        // fsyncs it without the lock (crate::flush).
        let snapshot = if st.producers.is_empty() {
            None
        } else {
            let path = producer_snapshot::place(&self.dir, next, &st.producers, false)?;
            Some(RollSnapshot { offset: next, path })
        };
        debug!(topic = %self.topic, partition = self.id, base_offset = next, "rolling to a new segment");
        st.segments.push(Segment::create(
            &self.dir,
            next,
            self.config.get().index_interval_bytes,
            now,
        )?);
        st.rolled
            .push(RollFlush::new(closed, snapshot, self.dir.clone(), durable));
        self.rolls_unflushed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Closes the active segment and starts a new one (no-op when it is empty).
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn roll(&self) -> Result<()> {
        let now = self.clock.now_ms();
        self.roll_locked(&mut *self.lock()?, now)?;
        self.flush_rolled()
    }

    /// Forces appended data to stable storage.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn flush(&self) -> Result<()> {
        let now = self.clock.now_ms();
        self.sync_locked(&mut *self.lock()?, now)?;
        self.flush_rolled()
    }

    /// Flushes under the `interval` policy when it is due, holding the partition's
    /// lock only to see what to sync and to record it: appends and reads go on during
    /// the fsync ([`crate::flush`]).
    /// First it runs the flushes of rolls made since the last call.
    pub(crate) fn flush_if_due(&self, now: i64) -> Result<()> {
        self.await_rolls()?;
        let Some(due) = self.due_sync(now)? else {
            return Ok(());
        };
        due.run()?;
        self.synced(&due);
        Ok(())
    }

    /// The fsync under `interval` that is due at `now`, if any.
    fn due_sync(&self, now: i64) -> Result<Option<DueSync>> {
        let st = self.lock()?;
        if !flush::interval_due(self.fsync, st.unsynced, st.last_sync_ms, now) {
            return Ok(None);
        }
        let end = st.end_offset();
        Ok(st.segments.last().map(|active| active.due_sync(end, now)))
    }

    /// Records a finished [`DueSync`]: the partition is synced unless records were
    /// appended after it was taken (they wait for the next one).
    fn synced(&self, due: &DueSync) {
        // Closed meanwhile: closing synced everything.
        let Ok(mut st) = self.lock() else { return };
        st.last_sync_ms = st.last_sync_ms.max(due.now);
        if st.end_offset() == due.end_offset {
            st.unsynced = false;
        }
    }

    /// The oldest offset still stored.
    pub fn log_start_offset(&self) -> u64 {
        self.state
            .lock()
            .ok()
            .and_then(|st| st.segments.first().map(|s| s.base_offset))
            .unwrap_or(0)
    }

    /// The offset the next appended record will get.
    pub fn log_end_offset(&self) -> u64 {
        *self.end.borrow()
    }

    /// A receiver of the log end offset, to wait for new records without polling.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.end.subscribe()
    }

    /// Start and end offsets, size and segment count.
    pub fn info(&self) -> PartitionInfo {
        let st = self.state.lock();
        let (start, size, segments, held) = match &st {
            Ok(st) => (
                st.segments.first().map_or(0, |s| s.base_offset),
                st.segments.iter().map(|s| s.size).sum(),
                st.segments.len(),
                st.held_by_future,
            ),
            Err(_) => (0, 0, 0, 0),
        };
        PartitionInfo {
            partition: self.id,
            log_start_offset: start,
            log_end_offset: self.log_end_offset(),
            size_bytes: size,
            segments,
            last_stable_offset: self.last_stable_offset(),
            segments_held_by_future_timestamps: held,
        }
    }

    fn out_of_range(&self, requested: u64, st: &State) -> LogError {
        LogError::OffsetOutOfRange {
            topic: self.topic.to_string(),
            partition: self.id,
            requested,
            log_start: st.segments.first().map_or(0, |s| s.base_offset),
            log_end: st.segments.last().map_or(0, |s| s.next_offset),
        }
    }

    /// Reads committed records from `offset` on, within `limit`, appending them to
    /// `out`; returns how many were read. This is [`Partition::read_into_isolated`]
    /// with [`IsolationLevel::ReadCommitted`]: it stops at the last stable offset and
    /// passes over control records and records of aborted transactions, so the offset
    /// to read from next is not always the last record's offset + 1 (use
    /// [`Partition::read_into_isolated`] to learn it). On a partition without
    /// transactions it reads every record up to the log end offset. Reading at the end
    /// returns 0. Keys and values share the buffer they were read into;
    /// [`Partition::read_with`] reads without building a [`Record`] per record.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] below the log start offset or past the log end
    /// offset (naming both), [`LogError::Corrupt`] if a batch fails its CRC.
    pub fn read_into(&self, offset: u64, limit: ReadLimit, out: &mut Vec<Record>) -> Result<usize> {
        let summary = self.read_into_isolated(offset, limit, IsolationLevel::ReadCommitted, out)?;
        Ok(summary.records)
    }

    /// Reads records from `offset` on as a reader of `isolation` sees them, within
    /// `limit`, appending them to `out`. Read committed: up to the last stable offset,
    /// without records of aborted transactions; read uncommitted: every data record up
    /// to the log end offset. Control records (transaction markers) are never
    /// returned. Returns how many records were read and the offset to read from next.
    ///
    /// # Errors
    /// As [`Partition::read_into`].
    pub fn read_into_isolated(
        &self,
        offset: u64,
        limit: ReadLimit,
        isolation: IsolationLevel,
        out: &mut Vec<Record>,
    ) -> Result<ReadSummary> {
        self.read_batches(offset, limit, Pass::Isolated(isolation), |batch, h, max| {
            format::decode_records(batch, h, offset, max, out)
        })
        .map(|(summary, _)| summary)
    }

    /// Reads committed records from `offset` on, within `limit`, as
    /// [`Partition::read_into`] (same records, limits and errors), but calls `f` with
    /// each record borrowed from the read buffer instead of building an owned
    /// [`Record`]: no allocation or reference count per record.
    /// [`RecordRef::to_record`] makes an owned copy of one.
    ///
    /// Returns how many records were passed to `f` and the offset to read from next.
    /// Reading at the end passes none.
    ///
    /// # Errors
    /// As [`Partition::read_into`]. On an error `f` may already have been called for
    /// records before the failing batch.
    pub fn read_with<F>(&self, offset: u64, limit: ReadLimit, f: F) -> Result<ReadSummary>
    where
        F: FnMut(RecordRef<'_>),
    {
        self.read_with_isolated(offset, limit, IsolationLevel::ReadCommitted, f)
    }

    /// [`Partition::read_with`] as a reader of `isolation` (see
    /// [`Partition::read_into_isolated`]).
    ///
    /// # Errors
    /// As [`Partition::read_into`].
    pub fn read_with_isolated<F>(
        &self,
        offset: u64,
        limit: ReadLimit,
        isolation: IsolationLevel,
        mut f: F,
    ) -> Result<ReadSummary>
    where
        F: FnMut(RecordRef<'_>),
    {
        self.read_batches(offset, limit, Pass::Isolated(isolation), |batch, h, max| {
            format::for_each_record(batch, h, offset, max, &mut f)
        })
        .map(|(summary, _)| summary)
    }

    /// [`Partition::read_with_isolated`], with the buffer each record borrows from
    /// passed beside it: a caller keeps what it needs of a record as
    /// [`Bytes::slice_ref`] of that buffer, without copying it or building a
    /// [`Record`] first (the broker's fetch turns records into Kafka's this way).
    ///
    /// # Errors
    /// As [`Partition::read_into`].
    pub fn read_shared_isolated<F>(
        &self,
        offset: u64,
        limit: ReadLimit,
        isolation: IsolationLevel,
        mut f: F,
    ) -> Result<ReadSummary>
    where
        F: FnMut(&Bytes, RecordRef<'_>),
    {
        self.read_batches(offset, limit, Pass::Isolated(isolation), |batch, h, max| {
            format::for_each_record(batch, h, offset, max, |r| f(batch, r))
        })
        .map(|(summary, _)| summary)
    }

    /// Reads from `offset` on, within `limit`, what a read-committed *Kafka* reader is
    /// sent (Kafka's fetch at `read_committed`): every batch up to the last stable
    /// offset as stored — records of aborted transactions and the control records
    /// (markers) included — calling `f` with the buffer each record borrows from (as
    /// [`Partition::read_shared_isolated`]) and its batch's header (transaction,
    /// producer fields, control bit). The client drops aborted records itself, by the
    /// returned list of the aborted transactions whose ranges meet the offsets read.
    /// brook's own readers use [`Partition::read_shared_isolated`], which leaves them
    /// out here.
    ///
    /// # Errors
    /// As [`Partition::read_into`].
    pub fn read_stored<F>(&self, offset: u64, limit: ReadLimit, mut f: F) -> Result<StoredRead>
    where
        F: FnMut(&Bytes, &BatchHeader, RecordRef<'_>),
    {
        let (summary, index) =
            self.read_batches(offset, limit, Pass::Stored, |batch, h, max| {
                format::for_each_record(batch, h, offset, max, |r| f(batch, h, r))
            })?;
        let aborted = aborted::overlapping(&index, offset, summary.next_offset)
            .map(AbortedTransaction::from)
            .collect();
        Ok(StoredRead { summary, aborted })
    }

    /// The read path shared by the read methods: checks `offset`, finds the segments
    /// and hands each batch the reader sees to `decode` (see [`SegmentView::read`]).
    /// [`Pass::Isolated`]: control batches and (read committed) batches of aborted
    /// transactions are passed over; [`Pass::Stored`]: every batch up to the last
    /// stable offset. Also returns the aborted transactions whose ranges meet the
    /// offsets the read could reach (read committed and stored; none otherwise).
    fn read_batches<F>(
        &self,
        offset: u64,
        limit: ReadLimit,
        pass: Pass,
        mut decode: F,
    ) -> Result<(ReadSummary, Vec<AbortedTxn>)>
    where
        F: FnMut(&Bytes, &BatchHeader, usize) -> std::result::Result<usize, FormatError>,
    {
        let (isolation, stored) = match pass {
            Pass::Isolated(isolation) => (isolation, false),
            Pass::Stored => (IsolationLevel::ReadCommitted, true),
        };
        let none = ReadSummary {
            records: 0,
            next_offset: offset,
        };
        // A poisoned lock only loses the kept batch.
        let last = self.last_batch.lock().ok().and_then(|mut l| l.take());
        let (views, until, aborted, last) = {
            let st = self.lock()?;
            let start = st.segments.first().map_or(0, |s| s.base_offset);
            let end = st.end_offset();
            if offset < start || offset > end {
                return Err(self.out_of_range(offset, &st));
            }
            let until = match isolation {
                IsolationLevel::ReadCommitted => st.txns.stable_offset(end),
                IsolationLevel::ReadUncommitted => end,
            };
            if offset >= until || limit.max_records == 0 {
                return Ok((none, Vec::new()));
            }
            // The aborted transactions whose ranges overlap the offsets this read can
            // reach (as the aborted-transaction list of a Kafka fetch response).
            let aborted: Vec<AbortedTxn> = match isolation {
                IsolationLevel::ReadCommitted => {
                    aborted::overlapping(&st.txns.aborted, offset, until)
                        .copied()
                        .collect()
                }
                IsolationLevel::ReadUncommitted => Vec::new(),
            };
            let i = st
                .segments
                .partition_point(|s| s.base_offset <= offset)
                .saturating_sub(1);
            // The batch the last read stopped inside, if this read starts in it.
            let last = last.filter(|l| st.segments.get(i).is_some_and(|s| l.holds(s, offset)));
            let mut views: Vec<SegmentView> = Vec::with_capacity(st.segments.len() - i);
            for (j, seg) in st.segments[i..].iter().enumerate() {
                if seg.base_offset >= until {
                    break;
                }
                views.push(if j == 0 {
                    // Size the first read by the records asked for, not just the bytes.
                    let enough = offset.saturating_add(limit.max_records as u64);
                    let start = match &last {
                        Some(l) => l.pos + l.batch.len() as u64,
                        None => seg.position_for_offset(offset),
                    };
                    seg.view_until(start, seg.position_covering(enough))
                } else {
                    seg.view(0)
                });
            }
            (views, until, aborted, last)
        };
        let mut decode = |batch: &Bytes, h: &BatchHeader, max: usize| {
            if stored {
                return decode(batch, h, max);
            }
            if h.is_control() {
                return Ok(0);
            }
            if let Some(mark) = &h.txn {
                if aborted.iter().any(|a| a.covers(mark, h.base_offset)) {
                    return Ok(0);
                }
            }
            decode(batch, h, max)
        };
        let mut progress = ReadProgress {
            next_offset: offset,
            ..Default::default()
        };
        if let (Some(last), Some(v)) = (last, views.first()) {
            v.read_last(last, offset, limit.max_records, &mut progress, &mut decode)?;
        }
        for v in &views {
            if progress.records >= limit.max_records {
                break;
            }
            if !v.read(
                offset,
                until,
                limit.max_records,
                limit.max_bytes,
                &mut progress,
                &mut decode,
            )? {
                break;
            }
            // Read to its end, every record of every batch taken (a record limit can
            // stop inside the last batch): the offsets compaction removed at the
            // segment's end are passed too, so a reader's position moves on densely
            // (as over a Kafka batch whose last records were cleaned away).
            if progress.records < limit.max_records {
                progress.next_offset = progress.next_offset.max(v.next_offset.min(until));
            }
        }
        if let Some(stopped) = progress.stopped_inside.take() {
            if let Ok(mut slot) = self.last_batch.lock() {
                *slot = Some(stopped);
            }
        }
        Ok((
            ReadSummary {
                records: progress.records,
                next_offset: progress.next_offset,
            },
            aborted,
        ))
    }

    /// Reads records from `offset` on, within `limit`. See [`Partition::read_into`].
    ///
    /// # Errors
    /// As [`Partition::read_into`].
    pub fn read(&self, offset: u64, limit: ReadLimit) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        self.read_into(offset, limit, &mut out)?;
        Ok(out)
    }

    /// The first offset whose record has a timestamp `>= ts` (as Kafka's
    /// `offsetsForTimes`), or `None` if no stored record has.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Corrupt`].
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<u64>> {
        let views: Vec<(u64, SegmentView)> = {
            let st = self.lock()?;
            let Some(i) = st.segments.iter().position(|s| s.max_timestamp >= ts) else {
                return Ok(None);
            };
            st.segments[i..]
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    (
                        s.base_offset,
                        s.view(if j == 0 {
                            s.position_for_timestamp(ts)
                        } else {
                            0
                        }),
                    )
                })
                .collect()
        };
        let mut out = Vec::new();
        for (base, v) in views {
            let mut view = v;
            loop {
                out.clear();
                let mut progress = ReadProgress::default();
                // No record limit: whole batches are decoded, so `progress.bytes` is where to go on.
                let done = view.read(
                    base,
                    u64::MAX,
                    usize::MAX,
                    4 << 20,
                    &mut progress,
                    &mut |batch, h, max| {
                        // Markers carry the time they were written, not data time.
                        if h.is_control() {
                            return Ok(0);
                        }
                        format::decode_records(batch, h, base, max, &mut out)
                    },
                )?;
                if let Some(r) = out.iter().find(|r| r.timestamp >= ts) {
                    return Ok(Some(r.offset));
                }
                if done || progress.bytes == 0 {
                    break;
                }
                // Continue after the records read so far (their batches are whole).
                view.start += progress.bytes as u64;
            }
        }
        Ok(None)
    }

    /// Applies retention at time `now` (ms), unless the topic's `cleanup.policy` is
    /// `compact` alone: deletes closed segments, oldest first,
    /// while the oldest one's newest record is older than `retention_ms` or the
    /// partition is bigger than `retention_bytes` without it. Never deletes the active
    /// segment. Returns how many segments were deleted.
    ///
    /// A closed segment that stays only because it holds a record stamped in the
    /// future (its last append is older than `retention_ms`, its newest timestamp is
    /// not) is counted in [`PartitionInfo::segments_held_by_future_timestamps`] and
    /// reported with a warning naming topic, partition and segment, once per segment.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn apply_retention(&self, now: i64) -> Result<usize> {
        let config = self.config.get();
        // A `compact` topic keeps its segments however old or big (Kafka's
        // cleanup.policy: only `delete` and `compact,delete` delete by retention).
        if !config.cleanup_policy.deletes() {
            return Ok(0);
        }
        // No roll's flush runs while segments are deleted (it would write the index
        // files of a deleted one).
        let _flushing = self
            .flush_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut st = self.lock()?;
        let mut total: u64 = st.segments.iter().map(|s| s.size).sum();
        let mut deleted = 0;
        while st.segments.len() > 1 {
            let oldest = &st.segments[0];
            let expired = config
                .retention_ms
                .is_some_and(|ms| oldest.max_timestamp < now.saturating_sub(ms));
            let oversized = config
                .retention_bytes
                .is_some_and(|max| total - oldest.size >= max);
            if !(expired || oversized) {
                break;
            }
            oldest.delete()?;
            let base = oldest.base_offset;
            for f in &mut st.rolled {
                f.forget_segment(base);
            }
            let oldest = &st.segments[0];
            total -= oldest.size;
            info!(
                topic = %self.topic,
                partition = self.id,
                base_offset = oldest.base_offset,
                next_offset = oldest.next_offset,
                reason = if expired { "retention.ms" } else { "retention.bytes" },
                "deleted segment"
            );
            st.segments.remove(0);
            deleted += 1;
        }
        // The aborted transactions whose markers were in the deleted segments: their
        // records are gone too (the file is rewritten below, without the lock).
        let log_start = st.segments.first().map_or(0, |s| s.base_offset);
        let indexed = st.txns.aborted.len();
        st.txns.aborted.retain(|a| a.last_offset >= log_start);
        let pruned = st.txns.aborted.len() < indexed;
        let mut held = 0;
        if let Some(ms) = config.retention_ms {
            let closed = st.segments.len().saturating_sub(1);
            for seg in &mut st.segments[..closed] {
                if !seg.held_by_future_timestamp(now, ms) {
                    continue;
                }
                held += 1;
                if !seg.future_hold_reported {
                    seg.future_hold_reported = true;
                    warn!(
                        topic = %self.topic,
                        partition = self.id,
                        segment = seg.base_offset,
                        max_timestamp = seg.max_timestamp,
                        last_write_ms = seg.last_write_ms,
                        retention_ms = ms,
                        kept_until = seg.max_timestamp.saturating_add(ms),
                        "segment kept past its time retention: it holds a record stamped in the future"
                    );
                }
            }
        }
        st.held_by_future = held;
        drop(st);
        if pruned {
            let _file = self
                .aborted_file
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            prune_aborted_file(
                &self.dir.join(ABORTED_INDEX),
                log_start,
                self.fsync != FsyncPolicy::Never,
            )?;
        }
        Ok(deleted)
    }

    // ---- compaction (the cleaner's edges; see crate::cleaner) -------------------

    /// What the cleaner may compact at `now` with `min_compaction_lag_ms` (the pass's
    /// configuration): the cleanable closed segments
    /// ([`compaction::cleanable_count`]) and the aborted transactions.
    pub(crate) fn cleanable(&self, now: i64, min_compaction_lag_ms: i64) -> Result<Cleanable> {
        let st = self.lock()?;
        let stable = st.txns.stable_offset(st.end_offset());
        let closed = &st.segments[..st.segments.len().saturating_sub(1)];
        let facts: Vec<SegmentFacts> = closed
            .iter()
            .map(|s| SegmentFacts {
                next_offset: s.next_offset,
                max_timestamp: s.max_timestamp,
            })
            .collect();
        let n = compaction::cleanable_count(&facts, stable, now, min_compaction_lag_ms);
        Ok(Cleanable {
            segments: closed[..n]
                .iter()
                .map(|s| CleanableSegment {
                    base_offset: s.base_offset,
                    next_offset: s.next_offset,
                    size: s.size,
                    view: s.view(0),
                })
                .collect(),
            aborted: st.txns.aborted.clone(),
        })
    }

    /// Replaces the closed segment at `new.base_offset` by its compacted copy `new`
    /// (opened by [`Segment::open_cleaned`]), if that segment is still there with
    /// `size` bytes (retention may have deleted it meanwhile); otherwise drops the
    /// copy. The swap is one rename over the original, so a crash leaves either the
    /// original or the copy, never a mix; the old index files go first, so they can
    /// never describe the copy. `interrupt` stops right after the rename (a test's
    /// simulated crash). Returns whether the copy is in place.
    pub(crate) fn swap_cleaned(
        &self,
        mut new: Segment,
        size: u64,
        interrupt: bool,
    ) -> Result<bool> {
        let cleaned = crate::segment::cleaned_path(&self.dir, new.base_offset);
        // No roll's flush runs meanwhile (it would write the original's index files).
        let _flushing = self
            .flush_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut st = self.lock()?;
        let last = st.segments.len().saturating_sub(1);
        let Some(i) = st.segments[..last]
            .iter()
            .position(|s| s.base_offset == new.base_offset && s.size == size)
        else {
            drop(st);
            fs::remove_file(&cleaned).ctx("remove", &cleaned)?;
            return Ok(false);
        };
        new.keep_last_write(
            st.segments[i].last_write_ms,
            st.segments[i].future_hold_reported,
        );
        st.segments[i].remove_index_files();
        for f in &mut st.rolled {
            f.forget_segment(new.base_offset);
        }
        let path = self
            .dir
            .join(crate::segment::segment_stem(new.base_offset) + ".log");
        fs::rename(&cleaned, &path).ctx("rename", &cleaned)?;
        sync_dir(&self.dir)?;
        if interrupt {
            return Err(LogError::Internal(
                "compaction interrupted after the swap (injected)".into(),
            ));
        }
        new.write_indexes(true)?;
        st.segments[i] = new;
        Ok(true)
    }

    /// The topic's current configuration (as last altered).
    pub(crate) fn config(&self) -> Arc<TopicConfig> {
        self.config.get()
    }

    /// The clock.
    pub(crate) fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Flushes and writes the active segment's indexes; no use is possible after.
    pub(crate) fn close(&self) -> Result<()> {
        let _flushing = self
            .flush_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Ok(mut st) = self.state.lock() else {
            return Ok(());
        };
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        for f in std::mem::take(&mut st.rolled) {
            f.run()?;
            self.rolls_unflushed.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(active) = st.segments.last_mut() {
            active.give_back_reserve()?;
            active.sync()?;
            active.write_indexes(true)?;
        }
        // A clean close leaves nothing to scan on the next open.
        let durable = self.fsync != FsyncPolicy::Never;
        let active_base = st.segments.last().map_or(0, |s| s.base_offset);
        producer_snapshot::write(
            &self.dir,
            st.end_offset(),
            &st.producers,
            durable,
            active_base,
        )?;
        Ok(())
    }

    /// The partition's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The closed segments the cleaner may compact, oldest first, and the partition's
/// aborted transactions (whose records it removes).
#[derive(Debug)]
pub(crate) struct Cleanable {
    pub(crate) segments: Vec<CleanableSegment>,
    pub(crate) aborted: Vec<AbortedTxn>,
}

/// One cleanable segment, as seen when the pass started.
#[derive(Debug)]
pub(crate) struct CleanableSegment {
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
    pub(crate) size: u64,
    pub(crate) view: SegmentView,
}

/// What kind of batch [`Partition::append_locked`] writes.
#[derive(Debug, Clone, Copy)]
enum Batch {
    /// A plain (non-transactional) batch, of a producer when given.
    Plain(Option<ProducerMark>),
    /// Records of a transaction, of a producer's sequence when given.
    Txn(TxnMark, Option<ProducerMark>),
    /// A transaction's marker (the records given are ignored: the encoder makes the
    /// control record).
    Control(TxnMark, ControlType),
}

/// Bytes read at a time by the producer-state rebuild.
const REBUILD_CHUNK_BYTES: usize = 1 << 20;

/// The producers' state of a partition being opened (its segments recovered, ending
/// at `end_offset`): the newest snapshot at or below the end, then every producer's
/// batch after it, as Kafka's `ProducerStateManager` loads it. A roll writes a
/// snapshot whenever there is producer state, before it creates the new segment, so
/// when the newest snapshot lies before the active segment (or there is none: a log
/// without producer batches) there was no state when the active segment began: the
/// rebuild then reads the active segment alone, from an empty state. Either way it
/// reads at most the active segment, and the closed segments whose roll's flush did
/// not run (a machine crash: their snapshots may be lost). Batches after the snapshot count as appended at
/// `now` (see [`ProducerEntry::last_append_ms`]).
fn rebuild_producers(
    dir: &Path,
    segments: &[Segment],
    end_offset: u64,
    now: i64,
) -> Result<ProducerStates> {
    // A roll's snapshot is durable once the roll's flush ran, which writes the
    // closed segment's index files last (crate::flush::RollFlush): after a machine
    // crash the flushes of the last rolls may not have, and their snapshots may be
    // lost, so a missing snapshot means "no state" only from the first segment after
    // the last closed one whose index files were found (normally the active one).
    let mut first = segments.len().saturating_sub(1);
    while first > 0 && !segments[first - 1].indexes_found {
        first -= 1;
    }
    let trusted_base = segments.get(first).map_or(0, |s| s.base_offset);
    let (from, mut states) = match producer_snapshot::load_latest(dir, end_offset)? {
        Some((offset, states)) if offset >= trusted_base => (offset, states),
        _ => (trusted_base, ProducerStates::default()),
    };
    for seg in segments.iter().filter(|s| s.next_offset > from) {
        // Snapshots are taken at batch boundaries, so this is the start of a batch.
        let mut view = seg.view(seg.position_for_offset(from));
        loop {
            let mut progress = ReadProgress::default();
            // From offset 0, so that every batch read counts in `progress.bytes`
            // (where the next chunk starts); those before `from` are passed over.
            let done = view.read(
                0,
                u64::MAX,
                usize::MAX,
                REBUILD_CHUNK_BYTES,
                &mut progress,
                &mut |_, h: &BatchHeader, _| {
                    if let Some(p) = h.producer.filter(|_| h.base_offset >= from) {
                        states.appended(&p, h.record_count, h.base_offset, now);
                    }
                    Ok(0)
                },
            )?;
            if done || progress.bytes == 0 {
                break;
            }
            view.start += progress.bytes as u64;
        }
    }
    states.expire(now);
    if from < end_offset {
        debug!(dir = %dir.display(), from, end_offset, producers = states.len(), "rebuilt the producer state");
    }
    Ok(states)
}

/// fsyncs a directory so that created, renamed or deleted entries are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("fsync", dir)
}

#[cfg(test)]
#[path = "partition_flush_tests.rs"]
mod flush_tests;
