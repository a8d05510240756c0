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

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{IoContext as _, Result};
use crate::options::FsyncPolicy;

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
    /// was fsynced by the roll, and the file of a segment deleted since stays open
    /// through this handle).
    pub(crate) fn run(&self) -> Result<()> {
        self.file.sync_data().ctx("fsync", &self.path)
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
