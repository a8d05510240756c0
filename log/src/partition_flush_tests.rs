//! The `interval` fsync policy: appends never fsync, the maintenance's fsync runs
//! without the partition's lock and loses no unsynced append ([`crate::flush`]).

use std::sync::Arc;

use brook_core::time::{Clock as _, ManualClock};

use super::Partition;
use crate::options::{ConfigCell, FsyncPolicy, TopicConfig};
use crate::record::ProducerRecord;

fn open(dir: &std::path::Path, clock: &ManualClock) -> Partition {
    let config = Arc::new(ConfigCell::new(TopicConfig::default()));
    let opened = Partition::open(
        Arc::from("t"),
        0,
        dir.join("0"),
        config,
        FsyncPolicy::Interval(1_000),
        clock.shared(),
        false,
    );
    opened.expect("open a partition in a fresh directory")
}

fn unsynced(p: &Partition) -> bool {
    p.lock().expect("open partition").unsynced
}

fn append(p: &Partition) {
    p.append(&[ProducerRecord::new("v")]).expect("append");
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
