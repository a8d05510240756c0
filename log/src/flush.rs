//! When appended data is fsynced, and the fsync the `interval` policy runs without the
//! partition's lock.
//!
//! Under `always` an append fsyncs before it returns (it is acknowledged durable).
//! Under `interval=<ms>` appends never fsync: the log's background maintenance does,
//! once `ms` have passed since the last fsync, as Kafka's `flush.ms` is run by the log
//! manager's scheduler (`log.flush.scheduler.interval.ms`) and not by produce requests.
//! And it fsyncs without holding the partition's lock (as Kafka's `UnifiedLog.flush`,
//! which takes the lock only to record the flushed offset): an fsync of a second of
//! appends can take tens of ms, and an append waiting for it behind the lock made every
//! produce request arriving meanwhile wait too (the broker's p99 produce latency was
//! that stall: 56 ms at half load).
//!
//! A segment roll flushes the closed segment the same way ([`RollFlush`]): the roll
//! only creates the new segment (and places the producer-state snapshot, unsynced)
//! under the lock, and the closed segment's data fsync, the snapshot's fsync, the
//! closed segment's index files and the directory's fsync run after it, without the
//! lock, as Kafka's `UnifiedLog.roll` schedules `flush-log` for the rolled segment
//! and its producer snapshot. Under
//! `always` the append that rolled runs it before it returns, and so does every
//! append behind it until it has run (an acknowledged record's segment must be in the
//! directory for good); otherwise the maintenance runs it, and `flush` and `close`. The
//! data is fsynced before the index files are written, so a closed segment with index
//! files was on disk; one without is scanned on open after a crash, and a torn tail
//! (a machine crash before the flush) is cut there, with the segments after it.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{IoContext as _, Result};
use crate::options::FsyncPolicy;
use crate::producer_snapshot::RollSnapshot;
use crate::segment::write_index_files;

/// Whether an append fsyncs before it returns: under `always` only.
pub(crate) fn append_syncs(policy: FsyncPolicy) -> bool {
    policy == FsyncPolicy::Always
}

/// Whether an `interval` fsync is due at `now` (ms): appends are not yet synced and
/// the interval has passed since the last fsync. Never under `always` (each append
/// synced itself) or `never`.
pub(crate) fn interval_due(
    policy: FsyncPolicy,
    unsynced: bool,
    last_sync_ms: i64,
    now: i64,
) -> bool {
    match policy {
        FsyncPolicy::Interval(ms) => unsynced && now - last_sync_ms >= ms,
        FsyncPolicy::Always | FsyncPolicy::Never => false,
    }
}

/// A due fsync of a partition's active segment, taken under the partition's lock and
/// run without it.
#[derive(Debug)]
pub(crate) struct DueSync {
    file: Arc<File>,
    path: PathBuf,
    /// The log end offset when it was taken: the fsync covers the records before it.
    pub(crate) end_offset: u64,
    /// The time it was taken (ms), which becomes the last fsync's time.
    pub(crate) now: i64,
}

impl DueSync {
    pub(crate) fn new(file: Arc<File>, path: PathBuf, end_offset: u64, now: i64) -> Self {
        DueSync {
            file,
            path,
            end_offset,
            now,
        }
    }

    /// fsyncs the segment's data (appends may go on meanwhile: a segment rolled since
    /// is fsynced by its roll's [`RollFlush`], and the file of a segment deleted since stays open
    /// through this handle).
    pub(crate) fn run(&self) -> Result<()> {
        self.file.sync_data().ctx("fsync", &self.path)
    }
}

/// The flush of a roll, taken under the partition's lock when the segment rolled and
/// run without it (see the module's doc).
#[derive(Debug)]
pub(crate) struct RollFlush {
    /// The segment the roll closed; `None` once retention deleted it or compaction
    /// replaced it (nothing of it left to flush).
    closed: Option<ClosedSegment>,
    /// The partition's directory, fsynced last: the new segment's entry (and the
    /// closed one's index files) become durable.
    dir: PathBuf,
    /// Whether to fsync (any policy but `never`); the index files are written either
    /// way.
    durable: bool,
    /// The producer-state snapshot the roll placed at the new segment's base without
    /// fsync, when there was producer state.
    snapshot: Option<RollSnapshot>,
}

/// What [`RollFlush`] does to the closed segment.
#[derive(Debug)]
pub(crate) struct ClosedSegment {
    pub(crate) base_offset: u64,
    pub(crate) file: Arc<File>,
    pub(crate) path: PathBuf,
    /// The data's length when blocks were reserved past it ([`crate::prealloc`]): the
    /// flush truncates the file to it to give them back.
    pub(crate) reserved_past: Option<u64>,
    /// Paths and bytes, taken at the roll.
    pub(crate) index_files: Vec<(PathBuf, Vec<u8>)>,
}

impl RollFlush {
    pub(crate) fn new(
        closed: ClosedSegment,
        snapshot: Option<RollSnapshot>,
        dir: PathBuf,
        durable: bool,
    ) -> Self {
        RollFlush {
            closed: Some(closed),
            dir,
            durable,
            snapshot,
        }
    }

    /// Drops the closed segment's part when it is the segment at `base_offset`, which
    /// retention or compaction is replacing (its index files must not be written
    /// after that); the directory's fsync stays.
    pub(crate) fn forget_segment(&mut self, base_offset: u64) {
        if self
            .closed
            .as_ref()
            .is_some_and(|c| c.base_offset == base_offset)
        {
            self.closed = None;
        }
    }

    /// fsyncs the closed segment's data and the producer-state snapshot (with the
    /// directory, so the snapshot's rename is durable), then writes the closed
    /// segment's index files (fsynced), then fsyncs the directory, then deletes the
    /// snapshots the new one replaces; without fsyncs when not durable. The index
    /// files come last: a closed segment with index files had its data and the
    /// snapshot at the next segment's base on disk (`rebuild_producers` relies on
    /// it after a machine crash).
    pub(crate) fn run(&self) -> Result<()> {
        if let Some(c) = &self.closed {
            if let Some(len) = c.reserved_past {
                c.file.set_len(len).ctx("truncate", &c.path)?;
            }
            if self.durable {
                c.file.sync_data().ctx("fsync", &c.path)?;
            }
        }
        if let Some(s) = &self.snapshot {
            s.sync(self.durable)?;
            if self.durable {
                crate::partition::sync_dir(&self.dir)?;
            }
        }
        if let Some(c) = &self.closed {
            write_index_files(&c.index_files, self.durable)?;
        }
        if self.durable {
            crate::partition::sync_dir(&self.dir)?;
        }
        if let Some(s) = &self.snapshot {
            s.prune_older(&self.dir)?;
        }
        Ok(())
    }
}

/// A test's hook, called before each [`RollFlush`] runs (to hold it there).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct FlushHook(pub(crate) std::sync::Mutex<Option<Box<dyn Fn() + Send>>>);

#[cfg(test)]
impl std::fmt::Debug for FlushHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushHook")
    }
}

#[cfg(test)]
impl FlushHook {
    pub(crate) fn call(&self) {
        if let Some(hook) = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            hook();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_always_syncs_on_append() {
        assert!(append_syncs(FsyncPolicy::Always));
        assert!(!append_syncs(FsyncPolicy::Interval(1_000)));
        assert!(!append_syncs(FsyncPolicy::Never));
    }

    #[test]
    fn an_interval_sync_is_due_after_the_interval_with_unsynced_appends() {
        let every = FsyncPolicy::Interval(1_000);
        assert!(!interval_due(every, true, 5_000, 5_999));
        assert!(interval_due(every, true, 5_000, 6_000));
        assert!(!interval_due(every, false, 5_000, 9_000), "nothing to sync");
        assert!(!interval_due(FsyncPolicy::Always, true, 0, 9_000));
        assert!(!interval_due(FsyncPolicy::Never, true, 0, 9_000));
    }
}
