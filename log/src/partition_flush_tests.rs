//! The `interval` fsync policy: appends never fsync, the maintenance's fsync runs
//! without the partition's lock and loses no unsynced append; a roll's flush runs
//! without the lock too, and a crash before it is recovered ([`crate::flush`]).

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use brook_core::time::{Clock as _, ManualClock};

use super::{Partition, ReadLimit};
use crate::format::ProducerMark;
use crate::options::{ConfigCell, FsyncPolicy, TopicConfig};
use crate::record::ProducerRecord;

fn open(dir: &std::path::Path, clock: &ManualClock) -> Partition {
    open_with(dir, clock, FsyncPolicy::Interval(1_000), false)
}

/// Segments roll after every batch of [`append`]: each is larger than half of this.
const SEGMENT_BYTES: u64 = 100;

fn open_with(
    dir: &std::path::Path,
    clock: &ManualClock,
    fsync: FsyncPolicy,
    recover: bool,
) -> Partition {
    let config = Arc::new(ConfigCell::new(TopicConfig {
        segment_bytes: SEGMENT_BYTES,
        ..TopicConfig::default()
    }));
    let opened = Partition::open(
        Arc::from("t"),
        0,
        dir.join("0"),
        config,
        fsync,
        clock.shared(),
        recover,
    );
    opened.expect("open a partition")
}

fn unsynced(p: &Partition) -> bool {
    p.lock().expect("open partition").unsynced
}

fn append(p: &Partition) {
    p.append(&[ProducerRecord::new(vec![b'v'; 40])])
        .expect("append");
}

/// Appends one record as batch `sequence` of producer 7.
fn append_produced(p: &Partition, sequence: i32) {
    let producer = ProducerMark {
        producer_id: 7,
        epoch: 0,
        base_sequence: sequence,
    };
    p.append_with_producer(&[ProducerRecord::new(vec![b'v'; 40])], producer)
        .expect("append");
}

/// The batches the partition remembers of producer 7.
fn remembered(p: &Partition) -> usize {
    p.with_producer_state(7, |e| e.map_or(0, |e| e.batches.len()))
        .expect("open partition")
}

fn snapshot_file(dir: &std::path::Path, offset: u64) -> std::path::PathBuf {
    dir.join("0")
        .join(crate::segment::segment_stem(offset) + crate::producer_snapshot::SUFFIX)
}

fn values(p: &Partition) -> usize {
    p.read(0, ReadLimit::records(100)).expect("read").len()
}

fn index_file(dir: &std::path::Path, base: u64) -> std::path::PathBuf {
    dir.join("0")
        .join(crate::segment::segment_stem(base) + ".timeindex")
}

/// A roll's flush (the closed segment's fsync and index files) runs without the
/// partition's lock: while it is held in its hook, reads go on under either policy,
/// and appends under `interval` (under `always` an append waits for the flush before
/// it is acknowledged, but not for the lock). Before, the roll ran it under the lock,
/// so the reader waited for the fsync and every produce request behind it too.
#[test]
fn a_roll_flushes_the_closed_segment_without_holding_the_partition() {
    for policy in [FsyncPolicy::Interval(1_000), FsyncPolicy::Always] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(10_000);
        let p = Arc::new(open_with(dir.path(), &clock, policy, false));
        append(&p);
        let (entered, in_flush) = mpsc::channel::<()>();
        let (release, held) = mpsc::channel::<()>();
        let held = Mutex::new(held);
        *p.roll_flush_hook.0.lock().expect("hook") = Some(Box::new(move || {
            let _ = entered.send(());
            let _ = held.lock().expect("held").recv();
        }));
        let roller = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                // Rolls, and runs the flush (the append itself under `always`).
                append(&p);
                p.flush_rolled().expect("flush the roll");
            })
        };
        in_flush
            .recv_timeout(Duration::from_secs(10))
            .expect("the roll's flush started");
        let (done, finished) = mpsc::channel();
        let other = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                let read = values(&p);
                if policy != FsyncPolicy::Always {
                    append(&p);
                }
                let _ = done.send(read);
            })
        };
        let read = finished.recv_timeout(Duration::from_secs(10));
        release.send(()).expect("release the flush");
        // Later flushes (the other thread's roll) pass the hook.
        drop(release);
        roller.join().expect("roller");
        other.join().expect("reader");
        assert_eq!(
            read,
            Ok(2),
            "{policy}: the reader waited for the roll's flush"
        );
        assert!(
            index_file(dir.path(), 0).exists(),
            "{policy}: the flush wrote the indexes"
        );
    }
}

/// A machine crash before a roll's flush may leave the closed segment torn and without
/// index files: an unclean open cuts it at the tear, as it cuts the active segment,
/// and drops the segments after it (their records came after the lost ones).
#[test]
fn an_unclean_open_cuts_a_closed_segment_torn_before_its_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(10_000);
    let p = open(dir.path(), &clock);
    append(&p);
    append(&p);
    append(&p);
    // Three segments, the first two closed and not yet flushed; the crash image: the
    // second segment lost its last bytes.
    assert!(!index_file(dir.path(), 1).exists());
    drop(p);
    let second = dir
        .path()
        .join("0")
        .join(crate::segment::segment_stem(1) + ".log");
    let len = std::fs::metadata(&second).expect("segment").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&second)
        .and_then(|f| f.set_len(len - 3))
        .expect("tear the segment");
    let p = open_with(dir.path(), &clock, FsyncPolicy::Interval(1_000), true);
    assert_eq!(p.log_end_offset(), 1, "cut at the torn batch");
    assert_eq!(values(&p), 1);
    let third = dir
        .path()
        .join("0")
        .join(crate::segment::segment_stem(2) + ".log");
    assert!(!third.exists(), "the segment after the tear is dropped");
    append(&p);
    assert_eq!(values(&p), 2);
}

#[test]
fn an_append_after_the_interval_does_not_fsync_the_maintenance_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(10_000);
    let p = open(dir.path(), &clock);
    append(&p);
    clock.advance(1_500);
    // The interval has passed: an append that fsynced here would hold the partition's
    // lock (and every produce request behind it) for the fsync.
    append(&p);
    assert!(unsynced(&p), "the append fsynced under interval");
    p.flush_if_due(clock.now_ms()).expect("flush");
    assert!(!unsynced(&p), "the maintenance's flush synced");
}

#[test]
fn appends_during_an_interval_fsync_wait_for_the_next_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(10_000);
    let p = open(dir.path(), &clock);
    append(&p);
    clock.advance(1_000);
    let due = p
        .due_sync(clock.now_ms())
        .expect("open partition")
        .expect("an fsync is due");
    // Taken, not yet run: the lock is free, appends go on.
    append(&p);
    due.run().expect("fsync");
    p.synced(&due);
    assert!(
        unsynced(&p),
        "the append made during the fsync counts as synced"
    );
    p.flush_if_due(clock.now_ms()).expect("flush");
    assert!(unsynced(&p), "not due: an fsync just ran");
    clock.advance(1_000);
    p.flush_if_due(clock.now_ms()).expect("flush");
    assert!(!unsynced(&p));
}

/// A roll with producer state places the producer-state snapshot under the lock (a
/// process crash keeps it) but fsyncs it in the roll's flush, without the lock: while
/// the flush is held in its hook, the snapshot is in place and reads and producers'
/// appends go on (under `always`, reads). Before, the roll fsynced the snapshot and
/// the directory under the partition's lock, and every produce request waited.
#[test]
fn a_roll_syncs_the_producer_snapshot_without_holding_the_partition() {
    for policy in [FsyncPolicy::Interval(1_000), FsyncPolicy::Always] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(10_000);
        let p = Arc::new(open_with(dir.path(), &clock, policy, false));
        append_produced(&p, 0);
        let (entered, in_flush) = mpsc::channel::<()>();
        let (release, held) = mpsc::channel::<()>();
        let held = Mutex::new(held);
        *p.roll_flush_hook.0.lock().expect("hook") = Some(Box::new(move || {
            let _ = entered.send(());
            let _ = held.lock().expect("held").recv();
        }));
        let roller = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                // Rolls (producer state: a snapshot at offset 1), then the flush.
                append_produced(&p, 1);
                p.flush_rolled().expect("flush the roll");
            })
        };
        in_flush
            .recv_timeout(Duration::from_secs(10))
            .expect("the roll's flush started");
        assert!(
            snapshot_file(dir.path(), 1).exists(),
            "{policy}: the roll placed its snapshot"
        );
        let (done, finished) = mpsc::channel();
        let other = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                let read = values(&p);
                if policy != FsyncPolicy::Always {
                    append_produced(&p, 2);
                }
                let _ = done.send(read);
            })
        };
        let read = finished.recv_timeout(Duration::from_secs(10));
        release.send(()).expect("release the flush");
        drop(release);
        roller.join().expect("roller");
        other.join().expect("reader");
        assert_eq!(
            read,
            Ok(2),
            "{policy}: the reader waited for the roll's snapshot"
        );
    }
}

/// A machine crash before a roll's flush may lose the snapshot the roll placed (it
/// was not fsynced yet): the closed segment has no index files then, and the rebuild
/// on open reads it too, from the snapshot before it (none here: no state when it
/// began), so the producer's batches in it are remembered.
#[test]
fn a_snapshot_lost_before_its_roll_flush_is_rebuilt_from_the_closed_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(10_000);
    let p = open(dir.path(), &clock);
    append_produced(&p, 0);
    append_produced(&p, 1);
    assert_eq!(remembered(&p), 2);
    // The crash image: the roll's flush (interval: the maintenance's) never ran,
    // and the snapshot's unsynced file is gone.
    assert!(!index_file(dir.path(), 0).exists());
    drop(p);
    std::fs::remove_file(snapshot_file(dir.path(), 1)).expect("lose the snapshot");
    let p = open_with(dir.path(), &clock, FsyncPolicy::Interval(1_000), true);
    assert_eq!(
        remembered(&p),
        2,
        "the batch in the closed segment was forgotten"
    );
}

/// Blocks reserved ahead of the appends ([`crate::prealloc`]) are given back: by a
/// rolled segment's flush, and by a clean close for the active segment. The files'
/// lengths are their data throughout.
#[cfg(target_os = "linux")]
#[test]
fn reserved_blocks_are_given_back_at_the_roll_and_at_close() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(0);
    let config = Arc::new(ConfigCell::new(TopicConfig {
        segment_bytes: 1 << 30,
        ..TopicConfig::default()
    }));
    let p = Partition::open(
        Arc::from("t"),
        0,
        dir.path().join("0"),
        config,
        FsyncPolicy::Interval(1_000),
        clock.shared(),
        false,
    )
    .expect("open a partition");
    let on_disk = |base: u64| {
        let meta = std::fs::metadata(dir.path().join("0").join(format!("{base:020}.log")))
            .expect("segment file");
        (meta.len(), meta.blocks() * 512)
    };
    append(&p);
    let (len, allocated) = on_disk(0);
    assert!(
        allocated >= len + crate::prealloc::MIN_RESERVE,
        "reserved ahead: {len} bytes of data, {allocated} allocated"
    );
    p.roll().expect("roll");
    let (len0, allocated0) = on_disk(0);
    assert_eq!(len0, len);
    assert!(
        allocated0 < crate::prealloc::MIN_RESERVE,
        "{allocated0} bytes still allocated"
    );
    append(&p);
    let (_, allocated1) = on_disk(1);
    assert!(allocated1 >= crate::prealloc::MIN_RESERVE, "{allocated1}");
    p.close().expect("close");
    let (_, allocated1) = on_disk(1);
    assert!(
        allocated1 < crate::prealloc::MIN_RESERVE,
        "{allocated1} bytes still allocated"
    );
}
