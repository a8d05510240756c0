//! Log compaction (`cleanup.policy=compact`, as Kafka's): the latest record per key
//! kept with its offset, tombstones removed after `delete.retention.ms` (injected
//! clock), readers moving on densely over removed offsets, transactions' records
//! handled as Kafka's cleaner does, and a pass interrupted at each step (as by a
//! crash) losing nothing.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use brook_core::time::ManualClock;
use brook_log::{
    CleanerFault, CleanupPolicy, FsyncPolicy, IsolationLevel, Log, LogError, LogOptions, Partition,
    ProducerRecord, ReadLimit, TopicConfig,
};

const DAY_MS: i64 = 86_400_000;
const T0: i64 = 1_700_000_000_000;

fn options(clock: &ManualClock) -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Never,
        clock: clock.shared(),
        maintenance_interval_ms: None,
    }
}

fn compacted() -> TopicConfig {
    TopicConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: 1024,
        index_interval_bytes: 64,
        ..Default::default()
    }
}

/// Every record of a partition as (offset, key, value or `None` for a tombstone),
/// read a few at a time, checking each read moves on.
fn read_all(p: &Partition) -> Vec<(u64, String, Option<String>)> {
    let mut at = p.log_start_offset();
    let mut out = Vec::new();
    while at < p.log_end_offset() {
        let mut recs = Vec::new();
        let s = p
            .read_into_isolated(
                at,
                ReadLimit::records(3),
                IsolationLevel::ReadCommitted,
                &mut recs,
            )
            .unwrap();
        assert!(s.next_offset > at, "a read from {at} did not move on");
        for r in recs {
            let key = String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap();
            let value = r
                .value_opt()
                .map(|v| String::from_utf8(v.to_vec()).unwrap());
            out.push((r.offset, key, value));
        }
        at = s.next_offset;
    }
    out
}

/// Appends `versions` versions of keys k0..k{keys}, one record per append, then
/// tombstones for `deleted` keys; returns the model: key → (offset, value) of its
/// latest record.
fn fill(
    p: &Partition,
    keys: usize,
    versions: usize,
    deleted: &[usize],
) -> BTreeMap<String, (u64, Option<String>)> {
    let mut model = BTreeMap::new();
    for v in 0..versions {
        for k in 0..keys {
            let key = format!("k{k}");
            let value = format!("{key}-v{v}-{}", "x".repeat(40));
            let info = p
                .append(&[ProducerRecord::keyed(key.clone(), value.clone())])
                .unwrap();
            model.insert(key, (info.base_offset, Some(value)));
        }
    }
    for k in deleted {
        let key = format!("k{k}");
        let info = p.append(&[ProducerRecord::tombstone(key.clone())]).unwrap();
        model.insert(key, (info.base_offset, None));
    }
    model
}

fn expected(model: &BTreeMap<String, (u64, Option<String>)>) -> Vec<(u64, String, Option<String>)> {
    let mut v: Vec<_> = model
        .iter()
        .map(|(k, (o, val))| (*o, k.clone(), val.clone()))
        .collect();
    v.sort();
    v
}

fn no_cleaned_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().all(|e| {
        !e.unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".cleaned")
    })
}

#[test]
fn compaction_keeps_the_latest_record_per_key_at_its_offset_and_drops_tombstones_later() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let topic = log.create_topic("classes", 1, compacted()).unwrap();
    let p = topic.partition(0).unwrap();
    let model = fill(&p, 8, 5, &[0, 1]);
    let end = p.log_end_offset();
    p.roll().unwrap();
    assert!(p.info().segments > 3, "small segments: {:?}", p.info());
    let before = read_all(&p).len();

    let stats = p.compact().unwrap().expect("a pass is due");
    assert!(stats.records_removed > 0, "{stats:?}");
    // Latest per key at its original offset; the tombstones stay readable for now.
    let got = read_all(&p);
    assert_eq!(got, expected(&model));
    assert!(got.len() < before);
    assert!(
        got.iter().any(|(_, _, v)| v.is_none()),
        "tombstones kept: {got:?}"
    );
    assert_eq!(p.log_end_offset(), end, "offsets are never reused");
    assert_eq!(p.log_start_offset(), 0);

    // Reading from a compacted-away offset gives the next record.
    let first_kept = got[0].0;
    assert!(first_kept > 0);
    let recs = p.read(0, ReadLimit::records(1)).unwrap();
    assert_eq!(recs[0].offset, first_kept);
    // Nothing new to clean: no pass.
    assert_eq!(p.compact().unwrap(), None);

    // delete.retention.ms after the first clean, the tombstones go.
    clock.advance(DAY_MS - 1);
    assert_eq!(p.compact().unwrap(), None);
    clock.advance(1);
    p.compact().unwrap().expect("tombstones are due");
    let mut want = model.clone();
    want.retain(|_, (_, v)| v.is_some());
    assert_eq!(read_all(&p), expected(&want));
    // A reader starting where the tombstones were moves on to the end.
    let mut recs = Vec::new();
    let s = p
        .read_into_isolated(
            end - 1,
            ReadLimit::records(10),
            IsolationLevel::ReadCommitted,
            &mut recs,
        )
        .unwrap();
    assert!(recs.is_empty());
    assert_eq!(
        s.next_offset, end,
        "the position moves on densely over removed offsets"
    );

    // The same after a clean reopen and after an unclean one with lost indexes.
    drop((p, topic));
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let p = log.topic("classes").unwrap().partition(0).unwrap();
    assert_eq!(read_all(&p), expected(&want));
    assert_eq!(p.log_end_offset(), end);
    drop(p);
    drop(log);
    std::fs::remove_file(dir.path().join(".clean-shutdown")).unwrap();
    let pdir = dir.path().join("topics/classes/0");
    for e in std::fs::read_dir(&pdir).unwrap() {
        let path = e.unwrap().path();
        if path
            .extension()
            .is_some_and(|x| x == "index" || x == "timeindex")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let p = log.topic("classes").unwrap().partition(0).unwrap();
    assert_eq!(read_all(&p), expected(&want));
    assert_eq!(p.log_end_offset(), end);
    // Appends go on at the end.
    let info = p.append(&[ProducerRecord::keyed("k3", "new")]).unwrap();
    assert_eq!(info.base_offset, end);
}

#[test]
fn the_active_segment_and_young_records_are_not_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let config = TopicConfig {
        min_compaction_lag_ms: 60_000,
        segment_bytes: 1 << 20,
        ..compacted()
    };
    let p = log
        .create_topic("t", 1, config)
        .unwrap()
        .partition(0)
        .unwrap();
    let model = fill(&p, 4, 3, &[]);
    // Everything is in the active segment.
    assert_eq!(p.compact().unwrap(), None);
    p.roll().unwrap();
    // Closed, but younger than min.compaction.lag.ms.
    assert_eq!(p.compact().unwrap(), None);
    assert_eq!(read_all(&p).len(), 12);
    clock.advance(60_000);
    p.compact().unwrap().expect("old enough now");
    assert_eq!(read_all(&p), expected(&model));
}

/// The cleaner reads the topic's current configuration: a `delete` topic altered to
/// `compact` (with a lag) is compacted from the next pass on, by the altered lag.
#[test]
fn an_altered_topic_is_compacted_by_its_new_config() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let config = TopicConfig {
        cleanup_policy: CleanupPolicy::Delete,
        segment_bytes: 1 << 20,
        ..compacted()
    };
    let p = log
        .create_topic("t", 1, config.clone())
        .unwrap()
        .partition(0)
        .unwrap();
    let model = fill(&p, 4, 3, &[]);
    p.roll().unwrap();
    assert_eq!(
        p.compact().unwrap(),
        None,
        "a delete topic is not compacted"
    );
    let mut altered = config;
    altered.set("cleanup.policy", "compact").unwrap();
    altered.set("min.compaction.lag.ms", "60000").unwrap();
    log.alter_topic("t", altered).unwrap();
    assert_eq!(p.compact().unwrap(), None, "younger than the altered lag");
    clock.advance(60_000);
    p.compact()
        .unwrap()
        .expect("compacted by the altered config");
    assert_eq!(read_all(&p), expected(&model));
}

#[test]
fn keyless_records_are_refused_by_compacted_topics() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let topic = log.create_topic("t", 2, compacted()).unwrap();
    let e = topic
        .append(vec![
            ProducerRecord::keyed("k", "v"),
            ProducerRecord::new("no key"),
        ])
        .unwrap_err();
    assert!(matches!(e, LogError::InvalidRecord { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("needs a key"), "{e}");
    // Nothing of the request was written.
    assert!(topic.partitions().iter().all(|p| p.log_end_offset() == 0));
    let e = topic
        .partition(0)
        .unwrap()
        .append(&[ProducerRecord::new("x")])
        .unwrap_err();
    assert!(matches!(e, LogError::InvalidRecord { index: 0, .. }), "{e}");
}

#[test]
fn a_compact_only_topic_ignores_time_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let config = TopicConfig {
        retention_ms: Some(1000),
        ..compacted()
    };
    let p = log
        .create_topic("t", 1, config.clone())
        .unwrap()
        .partition(0)
        .unwrap();
    let model = fill(&p, 10, 1, &[]);
    p.roll().unwrap();
    clock.advance(10 * DAY_MS);
    assert_eq!(p.apply_retention(clock.shared().now_ms()).unwrap(), 0);
    assert_eq!(read_all(&p), expected(&model));
    // compact,delete applies both.
    let both = TopicConfig {
        cleanup_policy: CleanupPolicy::CompactDelete,
        ..config
    };
    let q = log
        .create_topic("u", 1, both)
        .unwrap()
        .partition(0)
        .unwrap();
    fill(&q, 10, 1, &[]);
    q.roll().unwrap();
    clock.advance(10 * DAY_MS);
    assert!(q.apply_retention(clock.shared().now_ms()).unwrap() > 0);
}

#[test]
fn transactions_undecided_records_stay_aborted_ones_go_markers_stay() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let topic = log.create_topic("t", 1, compacted()).unwrap();
    let p = topic.partition(0).unwrap();
    let mut w = log.init_transactions("w").unwrap();
    // Committed: a is "a1" in the end; aborted: b's "b-aborted" never counts.
    w.begin().unwrap();
    w.send_to("t", 0, vec![ProducerRecord::keyed("a", "a0")])
        .unwrap();
    w.commit_transaction().unwrap();
    w.begin().unwrap();
    w.send_to("t", 0, vec![ProducerRecord::keyed("b", "b-aborted")])
        .unwrap();
    w.abort_transaction().unwrap();
    p.append(&[
        ProducerRecord::keyed("a", "a1"),
        ProducerRecord::keyed("b", "b0"),
    ])
    .unwrap();
    p.roll().unwrap();
    // An undecided transaction in a later closed segment: not cleaned.
    w.begin().unwrap();
    w.send_to("t", 0, vec![ProducerRecord::keyed("a", "a-open")])
        .unwrap();
    p.roll().unwrap();
    p.append(&[ProducerRecord::keyed("a", "a2")]).unwrap();
    p.roll().unwrap();
    let uncommitted_before = {
        let mut v = Vec::new();
        p.read_into_isolated(
            0,
            ReadLimit::records(100),
            IsolationLevel::ReadUncommitted,
            &mut v,
        )
        .unwrap();
        v.len()
    };
    p.compact()
        .unwrap()
        .expect("the first segment is cleanable");
    let mut v = Vec::new();
    p.read_into_isolated(
        0,
        ReadLimit::records(100),
        IsolationLevel::ReadUncommitted,
        &mut v,
    )
    .unwrap();
    let values: Vec<String> = v
        .iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect();
    // a0 superseded by a1, b-aborted removed; the open transaction's record and
    // everything after the last stable offset untouched.
    assert_eq!(values, ["a1", "b0", "a-open", "a2"], "{uncommitted_before}");
    // The markers are still there: reading on from the start skips exactly them.
    let s = p
        .read_into_isolated(
            0,
            ReadLimit::records(100),
            IsolationLevel::ReadCommitted,
            &mut Vec::new(),
        )
        .unwrap();
    assert!(s.next_offset <= p.last_stable_offset());
    w.commit_transaction().unwrap();
    let mut v = Vec::new();
    p.read_into_isolated(
        0,
        ReadLimit::records(100),
        IsolationLevel::ReadCommitted,
        &mut v,
    )
    .unwrap();
    let values: Vec<String> = v
        .iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect();
    assert_eq!(values, ["a1", "b0", "a-open", "a2"]);
}

/// A pass stopped after writing aside or right after a swap (as a crash would stop
/// it), then the log reopened without a clean shutdown: nothing is lost, no copy is
/// left over, and the next pass finishes the job.
#[test]
fn an_interrupted_pass_loses_nothing() {
    for fault in [CleanerFault::AfterWriteAside, CleanerFault::AfterSwap] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let log = Log::open(dir.path(), options(&clock)).unwrap();
        let p = log
            .create_topic("t", 1, compacted())
            .unwrap()
            .partition(0)
            .unwrap();
        let model = fill(&p, 6, 6, &[2]);
        p.roll().unwrap();
        let all_before = read_all(&p);
        let e = p.compact_interrupted(fault).unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        let pdir = p.dir().to_path_buf();
        drop(p);
        drop(log);
        std::fs::remove_file(dir.path().join(".clean-shutdown")).unwrap();

        let log = Log::open(dir.path(), options(&clock)).unwrap();
        let p = log.topic("t").unwrap().partition(0).unwrap();
        assert!(no_cleaned_files(&pdir), "{fault:?}: a copy was left over");
        let got = read_all(&p);
        match fault {
            // The original is untouched.
            CleanerFault::AfterWriteAside => assert_eq!(got, all_before),
            // The first segment is compacted, the rest not yet: every key's latest
            // record is there, at its offset.
            CleanerFault::AfterSwap => {
                for r in expected(&model) {
                    assert!(got.contains(&r), "{fault:?}: lost {r:?}");
                }
                assert!(got.len() < all_before.len());
            }
        }
        p.compact().unwrap().expect("the pass runs again");
        assert_eq!(read_all(&p), expected(&model), "{fault:?}");
    }
}
