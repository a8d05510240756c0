//! One segment of a partition: a data file plus its offset index and time index.
//!
//! Files, named by the segment's base offset (20 digits, as Kafka):
//! - `<base>.log`: the batches (see [`crate::format`]).
//! - `<base>.index`: sparse offset index, entries `(relative offset u32, position u32)`
//!   little-endian, one per `index_interval_bytes` of data, at batch starts.
//! - `<base>.timeindex`: entries `(max timestamp before i64, relative offset u32,
//!   position u32)`: every record before `position` has a timestamp `<=` the entry's,
//!   so a search for the first record with timestamp `>= t` can start at the last entry
//!   whose timestamp is `< t`. The last entry (the footer) sits at the end of the data,
//!   so it carries the segment's largest timestamp and next offset.
//!
//! After compaction ([`crate::cleaner`]) a closed segment has gaps: its batches' base
//! offsets may jump forward, and its next offset (kept in the time index's footer, or
//! else the next segment's base offset) may lie past its last record.
//!
//! Index files are derived data: they are kept in memory while the segment is active and
//! written when it is closed (rolled, or the log shut down cleanly). After an unclean
//! shutdown, or when they do not match the data file, they are rebuilt by a scan that
//! also checks every batch's CRC.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tracing::warn;

use crate::error::{IoContext, LogError, Result};
use crate::flush::{ClosedSegment, DueSync};
use crate::format::{self, BatchHeader, EncodedBatch, FormatError, MIN_BATCH_LEN};
use crate::prealloc::Reserve;

/// Reads fetch at most this many bytes at a time (more only for a bigger batch), so
/// that a chunk is checked and decoded while it is still in the CPU cache.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// A small process-wide pool of read buffers. Records share the buffer they were read
/// into, so a buffer can be reused only once no record refers to it any more; the pool
/// keeps a reference to the last few chunk-sized buffers and reuses the first one that
/// has become free. This saves allocating, zeroing and page-faulting a fresh buffer
/// for every chunk of a sequential read. At most `MAX` buffers of `READ_CHUNK_BYTES`
/// stay allocated because of the pool.
mod read_buffers {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use bytes::{Bytes, BytesMut};

    use super::READ_CHUNK_BYTES;

    const MAX: usize = 16;
    /// Smaller reads get a buffer of their own size, outside the pool.
    const MIN_POOLED: usize = 64 << 10;

    static POOL: Mutex<VecDeque<Bytes>> = Mutex::new(VecDeque::new());

    fn pooled(len: usize) -> bool {
        (MIN_POOLED..=READ_CHUNK_BYTES).contains(&len)
    }

    /// A buffer of `len` initialised bytes.
    pub(super) fn take(len: usize) -> BytesMut {
        if !pooled(len) {
            return BytesMut::zeroed(len);
        }
        if let Ok(mut pool) = POOL.lock() {
            for _ in 0..pool.len() {
                let Some(b) = pool.pop_front() else { break };
                match b.try_into_mut() {
                    Ok(mut buf) if buf.capacity() >= len => {
                        // Its bytes are initialised up to its old length: zero only
                        // what lies beyond.
                        if buf.len() >= len {
                            buf.truncate(len);
                        } else {
                            buf.resize(len, 0);
                        }
                        return buf;
                    }
                    Ok(_) => {}
                    Err(b) => pool.push_back(b),
                }
            }
        }
        let mut buf = BytesMut::zeroed(READ_CHUNK_BYTES);
        buf.truncate(len);
        buf
    }

    /// Remembers a buffer from [`take`] for reuse once its records are gone.
    pub(super) fn give_back(chunk: &Bytes) {
        if !pooled(chunk.len()) {
            return;
        }
        if let Ok(mut pool) = POOL.lock() {
            if pool.len() >= MAX {
                pool.pop_front();
            }
            pool.push_back(chunk.clone());
        }
    }
}

const INDEX_ENTRY: usize = 8;
const TIME_ENTRY: usize = 16;

/// The file name stem of a segment with this base offset.
pub(crate) fn segment_stem(base_offset: u64) -> String {
    format!("{base_offset:020}")
}

/// Suffix of a compacted segment written aside, before it replaces the original.
pub(crate) const CLEANED_SUFFIX: &str = ".log.cleaned";

/// Where the cleaner writes the compacted copy of the segment at `base_offset`.
pub(crate) fn cleaned_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(format!("{}{CLEANED_SUFFIX}", segment_stem(base_offset)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexEntry {
    rel: u32,
    pos: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimeEntry {
    ts: i64,
    rel: u32,
    pos: u32,
}

/// An open segment.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
    /// Bytes of valid data.
    pub(crate) size: u64,
    /// Largest timestamp in the segment, `i64::MIN` when empty.
    pub(crate) max_timestamp: i64,
    /// Wall-clock time (ms) the segment was created or opened; for rolling by age
    /// when the first batch's timestamp is not known.
    pub(crate) created_ms: i64,
    /// The largest timestamp of the segment's first batch (Kafka's
    /// `rollingBasedTimestamp`): segments roll by age measured from it, so the age
    /// survives a reopen by another process. `None` while empty or unread.
    pub(crate) first_batch_timestamp: Option<i64>,
    /// Time (ms) of the last append: the clock's when appended by this process, the
    /// data file's modification time when opened. For telling when a record stamped
    /// in the future keeps the segment past its time retention.
    pub(crate) last_write_ms: i64,
    /// Whether that was already reported (once per segment and process).
    pub(crate) future_hold_reported: bool,
    /// Whether opening it cut a torn or corrupt tail away ([`Segment::open`]).
    pub(crate) tail_truncated: bool,
    /// Whether opening it found its index files (a closed segment: its roll's flush
    /// ran to its end, [`crate::flush::RollFlush`]); false for a segment created or
    /// compacted by this process.
    pub(crate) indexes_found: bool,
    file: Arc<File>,
    path: PathBuf,
    index_path: PathBuf,
    time_index_path: PathBuf,
    index: Vec<IndexEntry>,
    time_index: Vec<TimeEntry>,
    bytes_since_index: u64,
    index_interval: u64,
    /// Blocks reserved ahead of the appends ([`crate::prealloc`]).
    reserve: Reserve,
}

/// Writes index files (paths and bytes), optionally fsyncing each.
pub(crate) fn write_index_files(files: &[(PathBuf, Vec<u8>)], sync: bool) -> Result<()> {
    for (path, bytes) in files {
        fs::write(path, bytes).ctx("write", path)?;
        if sync {
            File::open(path)
                .and_then(|f| f.sync_all())
                .ctx("fsync", path)?;
        }
    }
    Ok(())
}

/// Removes the files of the segment at `base_offset` (data and indexes).
pub(crate) fn remove_files(dir: &Path, base_offset: u64) -> Result<()> {
    let (path, index_path, time_index_path) = Segment::paths(dir, base_offset);
    fs::remove_file(&path).ctx("remove", &path)?;
    let _ = fs::remove_file(&index_path);
    let _ = fs::remove_file(&time_index_path);
    Ok(())
}

/// What a reader needs of a segment, taken under the partition lock and used without it.
#[derive(Debug, Clone)]
pub(crate) struct SegmentView {
    pub(crate) file: Arc<File>,
    pub(crate) path: PathBuf,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Reading up to here is enough for the records asked for (a batch start or the
    /// end): the first chunk read stops there rather than fetching a whole chunk.
    pub(crate) enough_at: u64,
    /// The segment's next offset: a reader that read to `end` has passed every offset
    /// below it (records, or gaps left by compaction).
    pub(crate) next_offset: u64,
}

impl Segment {
    fn paths(dir: &Path, base_offset: u64) -> (PathBuf, PathBuf, PathBuf) {
        let stem = segment_stem(base_offset);
        (
            dir.join(format!("{stem}.log")),
            dir.join(format!("{stem}.index")),
            dir.join(format!("{stem}.timeindex")),
        )
    }

    /// Creates a new, empty segment. Fails if its file already exists.
    pub(crate) fn create(
        dir: &Path,
        base_offset: u64,
        index_interval: u64,
        now_ms: i64,
    ) -> Result<Self> {
        let (path, index_path, time_index_path) = Self::paths(dir, base_offset);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx("create", &path)?;
        // Stale index files of an earlier segment at this offset would be misread.
        let _ = fs::remove_file(&index_path);
        let _ = fs::remove_file(&time_index_path);
        Ok(Segment {
            base_offset,
            next_offset: base_offset,
            size: 0,
            max_timestamp: i64::MIN,
            created_ms: now_ms,
            first_batch_timestamp: None,
            last_write_ms: now_ms,
            future_hold_reported: false,
            tail_truncated: false,
            indexes_found: false,
            file: Arc::new(file),
            path,
            index_path,
            time_index_path,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            index_interval,
            reserve: Reserve::new(0),
        })
    }

    /// Opens an existing segment.
    ///
    /// `recover`: the last shutdown was unclean. Then the active segment (`is_last`) is
    /// scanned and checked batch by batch, and a torn or corrupt final batch is
    /// truncated away (with a warning, [`Segment::tail_truncated`]). A closed segment's
    /// index files are trusted if they match the data file, else it is scanned as
    /// well; after an unclean shutdown such a scan truncates a torn tail too (its
    /// roll's flush, which fsyncs the data before writing the index files, had not run:
    /// [`crate::flush::RollFlush`]), and otherwise any bad batch is
    /// [`LogError::Corrupt`]. A closed segment may have gaps left by compaction; the
    /// active one never has.
    pub(crate) fn open(
        dir: &Path,
        base_offset: u64,
        index_interval: u64,
        recover: bool,
        is_last: bool,
        now_ms: i64,
    ) -> Result<Self> {
        let (path, index_path, time_index_path) = Self::paths(dir, base_offset);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .ctx("open", &path)?;
        let meta = file.metadata().ctx("stat", &path)?;
        let size = meta.len();
        let modified_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(now_ms, |d| d.as_millis() as i64);
        let mut seg = Segment {
            base_offset,
            next_offset: base_offset,
            size,
            max_timestamp: i64::MIN,
            created_ms: now_ms,
            first_batch_timestamp: None,
            last_write_ms: modified_ms,
            future_hold_reported: false,
            tail_truncated: false,
            indexes_found: false,
            file: Arc::new(file),
            path,
            index_path,
            time_index_path,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            index_interval,
            reserve: Reserve::new(size),
        };
        seg.indexes_found = !(recover && is_last) && size > 0 && seg.load_indexes()?;
        if !seg.indexes_found {
            seg.tail_truncated = seg.scan(!is_last, is_last || recover)?;
        } else if is_last {
            // The index files do not hold it; only the active segment needs it.
            seg.first_batch_timestamp = seg.read_first_batch_timestamp();
        }
        // A scan may have cut the tail.
        seg.reserve = Reserve::new(seg.size);
        Ok(seg)
    }

    /// Opens `<base>.log.cleaned`, a compacted copy of a closed segment written aside by
    /// the cleaner, scanning it to build its indexes; the segment's files are named as
    /// the final `<base>.log` (the caller renames the data file over the original and
    /// then writes the indexes). `next_offset` is the original segment's: the offsets
    /// it covered stay covered, gaps included.
    pub(crate) fn open_cleaned(
        dir: &Path,
        base_offset: u64,
        index_interval: u64,
        next_offset: u64,
        now_ms: i64,
    ) -> Result<Self> {
        let cleaned = cleaned_path(dir, base_offset);
        let (path, index_path, time_index_path) = Self::paths(dir, base_offset);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&cleaned)
            .ctx("open", &cleaned)?;
        let size = file.metadata().ctx("stat", &cleaned)?.len();
        let mut seg = Segment {
            base_offset,
            next_offset: base_offset,
            size,
            max_timestamp: i64::MIN,
            created_ms: now_ms,
            // Closed segments roll no more; the swap carries the original's last
            // write over ([`Segment::keep_last_write`]).
            first_batch_timestamp: None,
            last_write_ms: now_ms,
            future_hold_reported: false,
            tail_truncated: false,
            indexes_found: false,
            file: Arc::new(file),
            path: cleaned,
            index_path,
            time_index_path,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            index_interval,
            // Closed: never appended to.
            reserve: Reserve::new(size),
        };
        seg.scan(true, false)?;
        seg.path = path;
        seg.next_offset = seg.next_offset.max(next_offset);
        Ok(seg)
    }

    /// Takes over the last write time (ms) of the segment this compacted copy replaces,
    /// in memory and as the data file's modification time (read back on open), as
    /// Kafka's cleaner keeps a cleaned segment's `lastModified`: compaction is no
    /// write of new records, so it does not restart the future-timestamp hold.
    pub(crate) fn keep_last_write(&mut self, last_write_ms: i64, reported: bool) {
        self.last_write_ms = last_write_ms;
        self.future_hold_reported = reported;
        if let Ok(ms) = u64::try_from(last_write_ms) {
            let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            // Best effort: a failure only makes a reopen see the copy's own time.
            let _ = self.file.set_modified(time);
        }
    }

    /// Loads the index files; `Ok(false)` if they are missing or do not fit the data.
    fn load_indexes(&mut self) -> Result<bool> {
        let (Ok(idx), Ok(tidx)) = (fs::read(&self.index_path), fs::read(&self.time_index_path))
        else {
            return Ok(false);
        };
        if idx.len() % INDEX_ENTRY != 0 || tidx.len() % TIME_ENTRY != 0 || tidx.is_empty() {
            return Ok(false);
        }
        let u32_at =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let index: Vec<IndexEntry> = idx
            .chunks_exact(INDEX_ENTRY)
            .map(|c| IndexEntry {
                rel: u32_at(c, 0),
                pos: u32_at(c, 4),
            })
            .collect();
        let time_index: Vec<TimeEntry> = tidx
            .chunks_exact(TIME_ENTRY)
            .map(|c| {
                let mut ts = [0u8; 8];
                ts.copy_from_slice(&c[..8]);
                TimeEntry {
                    ts: i64::from_le_bytes(ts),
                    rel: u32_at(c, 8),
                    pos: u32_at(c, 12),
                }
            })
            .collect();
        let sorted_index = index
            .windows(2)
            .all(|w| w[0].rel < w[1].rel && w[0].pos < w[1].pos)
            && index.last().is_none_or(|e| u64::from(e.pos) < self.size);
        let sorted_time = time_index
            .windows(2)
            .all(|w| w[0].ts <= w[1].ts && w[0].rel < w[1].rel && w[0].pos < w[1].pos);
        // Splitting off the footer cannot fail: `tidx` is not empty (checked above).
        let Some(footer) = time_index.last().copied() else {
            return Ok(false);
        };
        // Both files get an entry at the same batch starts (`note_batch`), and the time
        // index's footer is checked against the data below: an offset index that disagrees
        // with the time index is stale or damaged.
        let paired = index.len() + 1 == time_index.len()
            && index
                .iter()
                .zip(&time_index)
                .all(|(i, t)| i.rel == t.rel && i.pos == t.pos);
        if !sorted_index
            || !sorted_time
            || !paired
            || u64::from(footer.pos) != self.size
            || footer.rel == 0
        {
            return Ok(false);
        }
        self.index = index;
        self.time_index = time_index;
        self.time_index.pop();
        self.next_offset = self.base_offset + u64::from(footer.rel);
        self.max_timestamp = footer.ts;
        self.bytes_since_index = self.size - self.index.last().map_or(0, |e| u64::from(e.pos));
        Ok(true)
    }

    /// Reads every batch, checking CRCs and offset continuity, and rebuilds the indexes.
    /// `gaps`: offsets may jump forward between batches (compaction's, in closed
    /// segments). `truncate`: a torn or corrupt tail is cut away (returns `true` then)
    /// rather than [`LogError::Corrupt`].
    fn scan(&mut self, gaps: bool, truncate: bool) -> Result<bool> {
        /// The largest next offset a segment's last record may leave: its relative
        /// offset (last - base) fits in a u32.
        const MAX_RELATIVE_END: u64 = u32::MAX as u64 + 1;
        self.index.clear();
        self.time_index.clear();
        self.next_offset = self.base_offset;
        self.max_timestamp = i64::MIN;
        self.first_batch_timestamp = None;
        self.bytes_since_index = 0;
        let file_len = self.size;
        let mut pos = 0u64;
        let mut buf = Vec::new();
        while pos < file_len {
            let remaining = file_len - pos;
            let bad = match self.check_batch_at(pos, remaining, &mut buf) {
                // The indexes hold offsets relative to the segment's base in 32 bits (as
                // Kafka's), and appends roll before passing that: a batch beyond is
                // damage, whatever gap compaction may have left before it. (Found by
                // the log_segment fuzz target: accepted here, such a segment reopened
                // from its index at another end offset after a clean close.)
                Ok(h) if h.next_offset().saturating_sub(self.base_offset) > MAX_RELATIVE_END => {
                    let reason = format!(
                        "batch offsets up to {} lie past what segment {} can index (32-bit relative offsets)",
                        h.next_offset() - 1,
                        self.base_offset
                    );
                    (reason, pos + h.total_len() as u64 == file_len)
                }
                // Compaction leaves gaps in closed segments, never in the active one.
                Ok(h)
                    if h.base_offset == self.next_offset
                        || (gaps && h.base_offset > self.next_offset) =>
                {
                    self.note_batch(pos, &h);
                    pos += h.total_len() as u64;
                    continue;
                }
                Ok(h) => {
                    let reason = format!(
                        "batch base offset {} where {} was expected",
                        h.base_offset, self.next_offset
                    );
                    (reason, pos + h.total_len() as u64 == file_len)
                }
                Err((e, ends_at_eof)) => (e.to_string(), ends_at_eof),
            };
            let (reason, is_tail) = bad;
            let is_tail = is_tail || (truncate && self.zeros_from(pos, file_len)?);
            if truncate && is_tail {
                warn!(
                    path = %self.path.display(),
                    position = pos,
                    dropped_bytes = remaining,
                    reason = %reason,
                    "truncating torn or corrupt tail of the log"
                );
                self.file.set_len(pos).ctx("truncate", &self.path)?;
                self.file.sync_all().ctx("fsync", &self.path)?;
                self.size = pos;
                return Ok(true);
            }
            return Err(LogError::Corrupt {
                path: self.path.clone(),
                position: pos,
                reason,
            });
        }
        self.size = pos;
        Ok(false)
    }

    /// Whether every byte from `pos` to `end` is zero, as when the file system extended
    /// the file for a write whose data never reached the disk. No batch starts with zeros
    /// (its format version is not 0), so nothing valid can be in or after such a region:
    /// it is a torn tail.
    fn zeros_from(&self, pos: u64, end: u64) -> Result<bool> {
        let mut buf = vec![0u8; (end - pos).min(1 << 16) as usize];
        let mut at = pos;
        while at < end {
            let n = (end - at).min(buf.len() as u64) as usize;
            self.file
                .read_exact_at(&mut buf[..n], at)
                .ctx("read", &self.path)?;
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    /// Checks the batch at `pos`. On error, also says whether the bad batch is the
    /// tail: it runs to (or past) the end of the file, so nothing valid can follow it.
    fn check_batch_at(
        &self,
        pos: u64,
        remaining: u64,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<BatchHeader, (FormatError, bool)> {
        let head_len = remaining.min(MIN_BATCH_LEN as u64) as usize;
        buf.resize(head_len, 0);
        let io_err =
            |e: std::io::Error| (FormatError::BadHeader(format!("read failed: {e}")), false);
        self.file.read_exact_at(buf, pos).map_err(io_err)?;
        if head_len < 12 {
            return Err((
                FormatError::Truncated {
                    needed: MIN_BATCH_LEN,
                    available: head_len,
                },
                true,
            ));
        }
        // The length field decides whether the bad batch is the tail, even if the rest
        // of the header is damaged.
        let total = 12 + u64::from(u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]));
        let is_tail = total >= remaining;
        let h = format::parse_header(buf).map_err(|e| (e, is_tail))?;
        if total > remaining {
            return Err((
                FormatError::Truncated {
                    needed: total as usize,
                    available: remaining as usize,
                },
                true,
            ));
        }
        buf.resize(h.total_len(), 0);
        self.file.read_exact_at(buf, pos).map_err(io_err)?;
        format::verify_crc(&h, buf).map_err(|e| (e, is_tail))?;
        Ok(h)
    }

    /// The largest timestamp of the first batch, read from its header; `None` if it
    /// cannot be read (rolling by age then falls back to the time of opening).
    fn read_first_batch_timestamp(&self) -> Option<i64> {
        let mut buf = vec![0u8; self.size.min(MIN_BATCH_LEN as u64) as usize];
        self.file.read_exact_at(&mut buf, 0).ok()?;
        format::parse_header(&buf).ok().map(|h| h.max_timestamp)
    }

    /// How long the segment has waited for a roll when a batch whose largest timestamp
    /// is `batch_max_ts` comes at `now` (both ms), as Kafka's
    /// `LogSegment.timeWaitedForRoll`: by record time since the first batch when its
    /// timestamp is known and not negative, else by wall-clock time since the segment
    /// was created or opened.
    pub(crate) fn time_waited_for_roll(&self, now: i64, batch_max_ts: i64) -> i64 {
        match self.first_batch_timestamp {
            Some(first) if first >= 0 => batch_max_ts.saturating_sub(first),
            _ => now.saturating_sub(self.created_ms),
        }
    }

    /// Whether time retention (`retention_ms`) keeps this segment at `now` only because
    /// of a record stamped in the future: by its newest timestamp it is not expired,
    /// but its last append is older than the retention, so every record in it was
    /// written more than `retention_ms` ago and a timestamp ahead of its writing keeps
    /// it (Kafka keeps such segments the same way, by the newest timestamp).
    pub(crate) fn held_by_future_timestamp(&self, now: i64, retention_ms: i64) -> bool {
        let limit = now.saturating_sub(retention_ms);
        self.max_timestamp >= limit && self.last_write_ms < limit
    }

    /// Records a batch written (or found) at `pos` in the in-memory indexes.
    fn note_batch(&mut self, pos: u64, h: &BatchHeader) {
        if pos == 0 {
            self.first_batch_timestamp = Some(h.max_timestamp);
        }
        if pos > 0 && self.bytes_since_index >= self.index_interval {
            let rel = (h.base_offset - self.base_offset) as u32;
            self.index.push(IndexEntry {
                rel,
                pos: pos as u32,
            });
            self.time_index.push(TimeEntry {
                ts: self.max_timestamp,
                rel,
                pos: pos as u32,
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_len() as u64;
        self.next_offset = h.next_offset();
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
    }

    /// Appends one encoded batch to a segment of at most `segment_bytes`, reserving
    /// blocks ahead of it first ([`crate::prealloc`]). On a failed write the file is
    /// cut back, so a partial batch never stays in front of later ones.
    pub(crate) fn append(
        &mut self,
        batch: &[u8],
        enc: &EncodedBatch,
        segment_bytes: u64,
    ) -> Result<()> {
        // Only the offsets, sizes and timestamps matter to the indexes.
        let pos = self.size;
        if let Some(range) = self.reserve.next(pos, batch.len() as u64, segment_bytes) {
            self.reserve.reserve(&self.file, range);
        }
        if let Err(e) = self.file.write_all_at(batch, pos) {
            let _ = self.file.set_len(pos);
            // Cutting back gave the reserved blocks back too.
            self.reserve.end = pos;
            return Err(LogError::Io {
                op: "write",
                path: self.path.clone(),
                source: e,
            });
        }
        let h = BatchHeader {
            base_offset: self.next_offset,
            batch_len: (enc.len - 12) as u32,
            crc: 0,
            record_count: enc.record_count,
            first_timestamp: 0,
            max_timestamp: enc.max_timestamp,
            attributes: 0,
            txn: None,
            producer: None,
        };
        self.note_batch(pos, &h);
        self.size += enc.len as u64;
        Ok(())
    }

    /// Gives back the blocks reserved past the data (at a clean close; a rolled
    /// segment's flush does it for a closed one).
    pub(crate) fn give_back_reserve(&mut self) -> Result<()> {
        if self.reserve.end > self.size {
            self.file.set_len(self.size).ctx("truncate", &self.path)?;
            self.reserve.end = self.size;
        }
        Ok(())
    }

    /// Flushes data to stable storage.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().ctx("fsync", &self.path)
    }

    /// The fsync of this segment's data up to `end_offset`, to run without the
    /// partition's lock.
    pub(crate) fn due_sync(&self, end_offset: u64, now: i64) -> DueSync {
        DueSync::new(Arc::clone(&self.file), self.path.clone(), end_offset, now)
    }

    /// Writes the index files (with the footer entry), optionally fsyncing them.
    pub(crate) fn write_indexes(&self, sync: bool) -> Result<()> {
        if self.size == 0 {
            return Ok(());
        }
        write_index_files(&self.index_files(), sync)
    }

    /// The flush of this segment once a roll has closed it, to run without the
    /// partition's lock: its data's fsync, then its index files (their bytes taken
    /// now, a copy of the in-memory indexes).
    pub(crate) fn closed_flush(&self) -> ClosedSegment {
        ClosedSegment {
            base_offset: self.base_offset,
            file: Arc::clone(&self.file),
            path: self.path.clone(),
            reserved_past: (self.reserve.end > self.size).then_some(self.size),
            index_files: if self.size == 0 {
                Vec::new()
            } else {
                self.index_files()
            },
        }
    }

    /// The index files' paths and bytes (with the footer entry).
    fn index_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut idx = Vec::with_capacity(self.index.len() * INDEX_ENTRY);
        for e in &self.index {
            idx.extend_from_slice(&e.rel.to_le_bytes());
            idx.extend_from_slice(&e.pos.to_le_bytes());
        }
        let mut tidx = Vec::with_capacity((self.time_index.len() + 1) * TIME_ENTRY);
        let footer = TimeEntry {
            ts: self.max_timestamp,
            rel: (self.next_offset - self.base_offset) as u32,
            pos: self.size as u32,
        };
        for e in self.time_index.iter().chain(std::iter::once(&footer)) {
            tidx.extend_from_slice(&e.ts.to_le_bytes());
            tidx.extend_from_slice(&e.rel.to_le_bytes());
            tidx.extend_from_slice(&e.pos.to_le_bytes());
        }
        vec![
            (self.index_path.clone(), idx),
            (self.time_index_path.clone(), tidx),
        ]
    }

    /// Removes the segment's index files (used when a closed segment is reopened for
    /// appending, so stale indexes cannot be trusted after a crash).
    pub(crate) fn remove_index_files(&self) {
        let _ = fs::remove_file(&self.index_path);
        let _ = fs::remove_file(&self.time_index_path);
    }

    /// Deletes the segment's files.
    pub(crate) fn delete(&self) -> Result<()> {
        fs::remove_file(&self.path).ctx("delete", &self.path)?;
        self.remove_index_files();
        Ok(())
    }

    /// Byte position from which to read to find `offset` (a batch start at or before it).
    pub(crate) fn position_for_offset(&self, offset: u64) -> u64 {
        let rel = offset.saturating_sub(self.base_offset);
        let i = self.index.partition_point(|e| u64::from(e.rel) <= rel);
        if i == 0 {
            0
        } else {
            u64::from(self.index[i - 1].pos)
        }
    }

    /// Byte position from which to scan for the first record with timestamp `>= ts`.
    pub(crate) fn position_for_timestamp(&self, ts: i64) -> u64 {
        let i = self.time_index.partition_point(|e| e.ts < ts);
        if i == 0 {
            0
        } else {
            u64::from(self.time_index[i - 1].pos)
        }
    }

    /// A position up to which reading surely covers every record below `offset`: the
    /// first indexed batch start at or after it, or the end of the data.
    pub(crate) fn position_covering(&self, offset: u64) -> u64 {
        let rel = offset.saturating_sub(self.base_offset);
        let i = self.index.partition_point(|e| u64::from(e.rel) < rel);
        self.index.get(i).map_or(self.size, |e| u64::from(e.pos))
    }

    /// A reader's view from `start`.
    pub(crate) fn view(&self, start: u64) -> SegmentView {
        self.view_until(start, self.size)
    }

    /// A reader's view from `start` that needs only the data before `enough_at`
    /// (see [`Segment::position_covering`]), but may read on.
    pub(crate) fn view_until(&self, start: u64, enough_at: u64) -> SegmentView {
        SegmentView {
            file: Arc::clone(&self.file),
            path: self.path.clone(),
            start,
            end: self.size,
            enough_at,
            next_offset: self.next_offset,
        }
    }
}

/// Where a read stopped.
#[derive(Debug, Default)]
pub(crate) struct ReadProgress {
    pub(crate) records: usize,
    pub(crate) bytes: usize,
    /// Batches passed over (control batches, aborted transactions).
    pub(crate) skipped: usize,
    /// The offset after the last record taken or batch skipped (unchanged while there
    /// was none).
    pub(crate) next_offset: u64,
    /// The batch the read stopped inside (a record limit reached before its last
    /// record), for the next read to start from without reading it again.
    pub(crate) stopped_inside: Option<LastBatch>,
}

/// A CRC-checked batch that a read stopped inside, at `pos` of the segment file
/// `file`. A reader taking fewer records per read than a batch holds (a consumer's
/// 500 of a producer's 10 000-record batch) otherwise read and checked the whole
/// batch again for every slice of it: 20 times the I/O, copies and CRC work per
/// record. A batch's bytes at a position never change while its file is the same
/// (segments are append-only; compaction writes new files), so the file's identity
/// and the position name it.
#[derive(Debug, Clone)]
pub(crate) struct LastBatch {
    pub(crate) file: Arc<File>,
    pub(crate) pos: u64,
    pub(crate) header: BatchHeader,
    /// Exactly the batch.
    pub(crate) batch: Bytes,
}

impl LastBatch {
    /// Whether this is the batch of `segment` that holds `offset`.
    pub(crate) fn holds(&self, segment: &Segment, offset: u64) -> bool {
        Arc::ptr_eq(&self.file, &segment.file)
            && self.header.base_offset <= offset
            && offset < self.header.next_offset()
    }
}

impl ReadProgress {
    /// Whether the read has got anywhere (taken a record or skipped a batch): only
    /// then may a byte budget stop it.
    fn any(&self) -> bool {
        self.records > 0 || self.skipped > 0
    }
}

impl SegmentView {
    /// Reads batches from `self.start`, handing each CRC-checked batch that holds
    /// records with offset `>= from` and starts before `until` to `decode` (the batch,
    /// its header and how many more records may be taken), within the remaining
    /// budgets. `decode` returns how many records it took: those from `from` on, at
    /// most the number given (as [`format::for_each_record`]); 0 means it passed the
    /// batch over (a control batch, an aborted transaction), and the read goes on after
    /// it. Returns `Ok(true)` when the segment's end was reached, `Ok(false)` when a
    /// budget or `until` stopped the read. At least one batch is read when nothing has
    /// been read yet, even if it is bigger than the byte budget (as Kafka's fetch).
    pub(crate) fn read<F>(
        &self,
        from: u64,
        until: u64,
        max_records: usize,
        max_bytes: usize,
        progress: &mut ReadProgress,
        decode: &mut F,
    ) -> Result<bool>
    where
        F: FnMut(&Bytes, &BatchHeader, usize) -> std::result::Result<usize, FormatError>,
    {
        let mut pos = self.start;
        while pos < self.end && progress.records < max_records {
            let budget = max_bytes.saturating_sub(progress.bytes);
            if budget == 0 && progress.any() {
                return Ok(false);
            }
            let remaining = (self.end - pos) as usize;
            let mut want = remaining
                .min(budget.max(MIN_BATCH_LEN))
                .min(READ_CHUNK_BYTES);
            if self.enough_at > pos {
                // A batch start: at least one whole batch.
                want = want.min((self.enough_at - pos) as usize);
            }
            let mut chunk = self.read_at(pos, want)?;
            // Make sure at least the first batch is complete.
            let first = format::parse_header(&chunk).map_err(|e| self.corrupt(pos, e))?;
            if first.base_offset >= until {
                return Ok(false);
            }
            if first.total_len() > chunk.len() {
                if progress.any() && progress.bytes + first.total_len() > max_bytes {
                    return Ok(false);
                }
                chunk = self.read_rest(chunk, pos, first.total_len().min(remaining))?;
            }
            let mut at = 0usize;
            while at < chunk.len() && progress.records < max_records {
                let h = match format::parse_header(&chunk[at..]) {
                    Ok(h) if at + h.total_len() <= chunk.len() => h,
                    Ok(_) | Err(FormatError::Truncated { .. }) if at > 0 => break,
                    Ok(h) => {
                        let e = FormatError::Truncated {
                            needed: h.total_len(),
                            available: chunk.len() - at,
                        };
                        return Err(self.corrupt(pos + at as u64, e));
                    }
                    Err(e) => return Err(self.corrupt(pos + at as u64, e)),
                };
                let len = h.total_len();
                if h.base_offset >= until {
                    return Ok(false);
                }
                if progress.any() && progress.bytes + len > max_bytes {
                    return Ok(false);
                }
                let batch = chunk.slice(at..at + len);
                format::verify_crc(&h, &batch).map_err(|e| self.corrupt(pos + at as u64, e))?;
                // A small batch is copied out of its chunk if it is kept, so that
                // keeping it does not keep a whole chunk alive.
                let shares_chunk = 2 * len < chunk.len();
                self.take(
                    pos + at as u64,
                    batch,
                    &h,
                    shares_chunk,
                    from,
                    max_records,
                    progress,
                    decode,
                )?;
                at += len;
            }
            pos += at as u64;
        }
        Ok(pos >= self.end)
    }

    /// Hands `last` (a batch of this segment a read stopped inside, holding `from`) to
    /// `decode` as [`SegmentView::read`] would, without reading or checking it again.
    /// The view then starts after it.
    pub(crate) fn read_last<F>(
        &self,
        last: LastBatch,
        from: u64,
        max_records: usize,
        progress: &mut ReadProgress,
        decode: &mut F,
    ) -> Result<()>
    where
        F: FnMut(&Bytes, &BatchHeader, usize) -> std::result::Result<usize, FormatError>,
    {
        let h = last.header;
        self.take(
            last.pos,
            last.batch,
            &h,
            false,
            from,
            max_records,
            progress,
            decode,
        )
    }

    /// Passes the checked `batch` at `pos` to `decode` if it holds records from `from`
    /// on, and counts what it took in `progress` (see [`SegmentView::read`]); if the
    /// record limit stopped inside it, it becomes `progress.stopped_inside` (a copy if
    /// `copy_if_kept`).
    #[allow(clippy::too_many_arguments)]
    fn take<F>(
        &self,
        pos: u64,
        batch: Bytes,
        h: &BatchHeader,
        copy_if_kept: bool,
        from: u64,
        max_records: usize,
        progress: &mut ReadProgress,
        decode: &mut F,
    ) -> Result<()>
    where
        F: FnMut(&Bytes, &BatchHeader, usize) -> std::result::Result<usize, FormatError>,
    {
        if h.next_offset() <= from {
            return Ok(());
        }
        let n =
            decode(&batch, h, max_records - progress.records).map_err(|e| self.corrupt(pos, e))?;
        progress.records += n;
        progress.bytes += batch.len();
        if n == 0 {
            progress.skipped += 1;
            progress.next_offset = h.next_offset();
            return Ok(());
        }
        progress.next_offset = from.max(h.base_offset) + n as u64;
        if progress.next_offset < h.next_offset() {
            progress.stopped_inside = Some(LastBatch {
                file: Arc::clone(&self.file),
                pos,
                header: *h,
                batch: if copy_if_kept {
                    Bytes::copy_from_slice(&batch)
                } else {
                    batch
                },
            });
        }
        Ok(())
    }

    /// Extends `head` (the bytes at `pos`) to `len` bytes by reading what follows it.
    fn read_rest(&self, head: Bytes, pos: u64, len: usize) -> Result<Bytes> {
        let mut buf = BytesMut::with_capacity(len);
        buf.extend_from_slice(&head);
        buf.resize(len, 0);
        self.file
            .read_exact_at(&mut buf[head.len()..], pos + head.len() as u64)
            .ctx("read", &self.path)?;
        Ok(buf.freeze())
    }

    fn read_at(&self, pos: u64, len: usize) -> Result<Bytes> {
        let mut buf = read_buffers::take(len);
        self.file
            .read_exact_at(&mut buf, pos)
            .ctx("read", &self.path)?;
        let chunk = buf.freeze();
        read_buffers::give_back(&chunk);
        Ok(chunk)
    }

    fn corrupt(&self, position: u64, e: FormatError) -> LogError {
        LogError::Corrupt {
            path: self.path.clone(),
            position,
            reason: e.to_string(),
        }
    }
}
