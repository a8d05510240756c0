//! One partition: an ordered list of segments, the last of which is active.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use brook_core::time::SharedClock;
use bytes::Bytes;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::error::{IoContext, LogError, Result};
use crate::format::{self, BatchHeader, FormatError, RecordRef};
use crate::options::{FsyncPolicy, TopicConfig};
use crate::record::{ProducerRecord, Record};
use crate::segment::{ReadProgress, Segment, SegmentView};

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

/// What a [`Partition::read_with`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSummary {
    /// How many records were passed on.
    pub records: usize,
    /// The offset to read from next: after the last record passed on, or the offset
    /// read from when there was none.
    pub next_offset: u64,
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
}

#[derive(Debug)]
struct State {
    segments: Vec<Segment>,
    last_sync_ms: i64,
    unsynced: bool,
    buf: Vec<u8>,
    closed: bool,
}

/// One partition of a topic. Appends are serialised by a lock; reads take the lock
/// only to find their segments and then read the files without it.
#[derive(Debug)]
pub struct Partition {
    topic: Arc<str>,
    id: u32,
    dir: PathBuf,
    config: Arc<TopicConfig>,
    fsync: FsyncPolicy,
    clock: SharedClock,
    state: Mutex<State>,
    end: watch::Sender<u64>,
}

impl Partition {
    /// Opens (or creates) the partition stored in `dir`.
    pub(crate) fn open(
        topic: Arc<str>,
        id: u32,
        dir: PathBuf,
        config: Arc<TopicConfig>,
        fsync: FsyncPolicy,
        clock: SharedClock,
        recover: bool,
    ) -> Result<Self> {
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
            }
        }
        bases.sort_unstable();
        let mut segments = Vec::with_capacity(bases.len().max(1));
        for (i, &base) in bases.iter().enumerate() {
            let is_last = i + 1 == bases.len();
            let seg = Segment::open(
                &dir,
                base,
                config.index_interval_bytes,
                recover && is_last,
                is_last,
                now,
            )?;
            if let Some(prev) = segments.last() {
                let prev: &Segment = prev;
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
            segments.push(seg);
        }
        match segments.last() {
            // The active segment's index files are rewritten when it is closed again.
            Some(last) => last.remove_index_files(),
            None => {
                segments.push(Segment::create(&dir, 0, config.index_interval_bytes, now)?);
                sync_dir(&dir)?;
            }
        }
        let end_offset = segments.last().map_or(0, |s| s.next_offset);
        let (end, _) = watch::channel(end_offset);
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
            }),
            end,
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

    /// Appends `records` as one batch and returns their offsets. Records without a
    /// timestamp get the clock's time. The batch is durable according to the fsync
    /// policy when this returns.
    ///
    /// # Errors
    /// [`LogError::RecordTooLarge`] (nothing is written), I/O errors, [`LogError::Closed`].
    pub fn append(&self, records: &[ProducerRecord]) -> Result<AppendInfo> {
        if records.is_empty() {
            let end = self.log_end_offset();
            return Ok(AppendInfo {
                partition: self.id,
                base_offset: end,
                last_offset: end.wrapping_sub(1),
            });
        }
        let max = self.config.max_record_bytes as usize;
        let mut total = format::BATCH_HEADER_LEN;
        for (index, r) in records.iter().enumerate() {
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
        let now = self.clock.now_ms();
        let mut guard = self.lock()?;
        let st = &mut *guard;
        self.maybe_roll(st, total as u64, records.len() as u64, now)?;
        let mut buf = std::mem::take(&mut st.buf);
        buf.clear();
        let active = st.segments.last_mut().ok_or(LogError::Closed)?;
        let base_offset = active.next_offset;
        let enc = format::encode_batch(&mut buf, base_offset, records, now);
        let res = active.append(&buf, &enc);
        // Keep the buffer for the next batch unless it grew unusually large.
        if buf.capacity() <= 8 << 20 {
            st.buf = buf;
        }
        res?;
        st.unsynced = true;
        match self.fsync {
            FsyncPolicy::Always => self.sync_locked(st, now)?,
            FsyncPolicy::Interval(ms) if now - st.last_sync_ms >= ms => {
                self.sync_locked(st, now)?
            }
            _ => {}
        }
        let next = base_offset + u64::from(enc.record_count);
        drop(guard);
        self.end.send_replace(next);
        Ok(AppendInfo {
            partition: self.id,
            base_offset,
            last_offset: next - 1,
        })
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
    ) -> Result<()> {
        let Some(active) = st.segments.last() else {
            return Ok(());
        };
        if active.size == 0 {
            return Ok(());
        }
        let too_big = active.size + batch_bytes > self.config.segment_bytes;
        let too_old = self
            .config
            .segment_ms
            .is_some_and(|ms| now - active.created_ms >= ms);
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
        if durable {
            active.sync()?;
        }
        active.write_indexes(durable)?;
        let next = active.next_offset;
        debug!(topic = %self.topic, partition = self.id, base_offset = next, "rolling to a new segment");
        st.segments.push(Segment::create(
            &self.dir,
            next,
            self.config.index_interval_bytes,
            now,
        )?);
        if durable {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Closes the active segment and starts a new one (no-op when it is empty).
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn roll(&self) -> Result<()> {
        let now = self.clock.now_ms();
        let mut st = self.lock()?;
        self.roll_locked(&mut st, now)
    }

    /// Forces appended data to stable storage.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn flush(&self) -> Result<()> {
        let now = self.clock.now_ms();
        let mut st = self.lock()?;
        self.sync_locked(&mut st, now)
    }

    /// Flushes under the `interval` policy when it is due.
    pub(crate) fn flush_if_due(&self, now: i64) -> Result<()> {
        if let FsyncPolicy::Interval(ms) = self.fsync {
            let mut st = self.lock()?;
            if st.unsynced && now - st.last_sync_ms >= ms {
                self.sync_locked(&mut st, now)?;
            }
        }
        Ok(())
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
        let (start, size, segments) = match &st {
            Ok(st) => (
                st.segments.first().map_or(0, |s| s.base_offset),
                st.segments.iter().map(|s| s.size).sum(),
                st.segments.len(),
            ),
            Err(_) => (0, 0, 0),
        };
        PartitionInfo {
            partition: self.id,
            log_start_offset: start,
            log_end_offset: self.log_end_offset(),
            size_bytes: size,
            segments,
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

    /// Reads records from `offset` on, within `limit`, appending them to `out`; returns
    /// how many were read. Reading at the log end offset returns 0. Keys and values
    /// share the buffer they were read into; [`Partition::read_with`] reads without
    /// building a [`Record`] per record.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] below the log start offset or past the end
    /// (naming both), [`LogError::Corrupt`] if a batch fails its CRC.
    pub fn read_into(&self, offset: u64, limit: ReadLimit, out: &mut Vec<Record>) -> Result<usize> {
        let summary = self.read_batches(offset, limit, |batch, h, max| {
            format::decode_records(batch, h, offset, max, out)
        })?;
        Ok(summary.records)
    }

    /// Reads records from `offset` on, within `limit`, as [`Partition::read_into`]
    /// (same records, limits and errors), but calls `f` with each record borrowed from
    /// the read buffer instead of building an owned [`Record`]: no allocation or
    /// reference count per record. [`RecordRef::to_record`] makes an owned copy of
    /// one.
    ///
    /// Returns how many records were passed to `f` and the offset to read from next.
    /// Reading at the log end offset passes none.
    ///
    /// # Errors
    /// As [`Partition::read_into`]. On an error `f` may already have been called for
    /// records before the failing batch.
    pub fn read_with<F>(&self, offset: u64, limit: ReadLimit, mut f: F) -> Result<ReadSummary>
    where
        F: FnMut(RecordRef<'_>),
    {
        self.read_batches(offset, limit, |batch, h, max| {
            format::for_each_record(batch, h, offset, max, &mut f)
        })
    }

    /// The read path shared by [`Partition::read_into`] and [`Partition::read_with`]:
    /// checks `offset`, finds the segments and hands each batch to `decode` (see
    /// [`SegmentView::read`]).
    fn read_batches<F>(&self, offset: u64, limit: ReadLimit, mut decode: F) -> Result<ReadSummary>
    where
        F: FnMut(&Bytes, &BatchHeader, usize) -> std::result::Result<usize, FormatError>,
    {
        let none = ReadSummary {
            records: 0,
            next_offset: offset,
        };
        let views = {
            let st = self.lock()?;
            let start = st.segments.first().map_or(0, |s| s.base_offset);
            let end = st.segments.last().map_or(0, |s| s.next_offset);
            if offset < start || offset > end {
                return Err(self.out_of_range(offset, &st));
            }
            if offset == end || limit.max_records == 0 {
                return Ok(none);
            }
            let i = st
                .segments
                .partition_point(|s| s.base_offset <= offset)
                .saturating_sub(1);
            let mut views: Vec<SegmentView> = Vec::with_capacity(st.segments.len() - i);
            for (j, seg) in st.segments[i..].iter().enumerate() {
                views.push(if j == 0 {
                    // Size the first read by the records asked for, not just the bytes.
                    let enough = offset.saturating_add(limit.max_records as u64);
                    seg.view_until(
                        seg.position_for_offset(offset),
                        seg.position_covering(enough),
                    )
                } else {
                    seg.view(0)
                });
            }
            views
        };
        let mut progress = ReadProgress {
            next_offset: offset,
            ..Default::default()
        };
        for v in &views {
            if !v.read(
                offset,
                limit.max_records,
                limit.max_bytes,
                &mut progress,
                &mut decode,
            )? {
                break;
            }
        }
        Ok(ReadSummary {
            records: progress.records,
            next_offset: progress.next_offset,
        })
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
                    usize::MAX,
                    4 << 20,
                    &mut progress,
                    &mut |batch, h, max| format::decode_records(batch, h, base, max, &mut out),
                )?;
                if let Some(r) = out.iter().find(|r| r.timestamp >= ts) {
                    return Ok(Some(r.offset));
                }
                if done || out.is_empty() {
                    break;
                }
                // Continue after the records read so far (their batches are whole).
                view.start += progress.bytes as u64;
            }
        }
        Ok(None)
    }

    /// Applies retention at time `now` (ms): deletes closed segments, oldest first,
    /// while the oldest one's newest record is older than `retention_ms` or the
    /// partition is bigger than `retention_bytes` without it. Never deletes the active
    /// segment. Returns how many segments were deleted.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Closed`].
    pub fn apply_retention(&self, now: i64) -> Result<usize> {
        let mut st = self.lock()?;
        let mut total: u64 = st.segments.iter().map(|s| s.size).sum();
        let mut deleted = 0;
        while st.segments.len() > 1 {
            let oldest = &st.segments[0];
            let expired = self
                .config
                .retention_ms
                .is_some_and(|ms| oldest.max_timestamp < now.saturating_sub(ms));
            let oversized = self
                .config
                .retention_bytes
                .is_some_and(|max| total - oldest.size >= max);
            if !(expired || oversized) {
                break;
            }
            oldest.delete()?;
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
        Ok(deleted)
    }

    /// Flushes and writes the active segment's indexes; no use is possible after.
    pub(crate) fn close(&self) -> Result<()> {
        let Ok(mut st) = self.state.lock() else {
            return Ok(());
        };
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        if let Some(active) = st.segments.last() {
            active.sync()?;
            active.write_indexes(true)?;
        }
        Ok(())
    }

    /// The partition's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// fsyncs a directory so that created, renamed or deleted entries are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("fsync", dir)
}
