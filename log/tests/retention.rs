//! Segment age and time retention as Kafka's (`docs/semantics.md` §1): segments roll by
//! `segment.ms` measured on record timestamps, so appends by short-lived processes
//! (each opening the log anew) roll and retention deletes their old data.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use brook_core::time::{Clock as _, ManualClock};
use brook_log::{FsyncPolicy, Log, LogOptions, ProducerRecord, TopicConfig};

const T0: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

fn open(dir: &Path, clock: &ManualClock) -> Log {
    Log::open(
        dir,
        LogOptions {
            fsync: FsyncPolicy::Never,
            clock: clock.shared(),
            maintenance_interval_ms: None,
        },
    )
    .unwrap()
}

fn config() -> TopicConfig {
    TopicConfig {
        segment_ms: Some(HOUR),
        retention_ms: Some(2 * HOUR),
        ..TopicConfig::default()
    }
}

/// Each append comes from a new "process" (the log is closed and opened again, or
/// dropped without a clean close), an hour and a bit after the last: every append
/// after the first rolls, and time retention deletes the old segments.
#[test]
fn segments_roll_by_record_time_across_reopens_and_retention_follows() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        open(dir.path(), &clock)
            .create_topic("t", 1, config())
            .unwrap();
        for i in 0..4 {
            let log = open(dir.path(), &clock);
            let p = log.topic("t").unwrap().partition(0).unwrap();
            p.append(&[ProducerRecord::new(format!("r{i}"))]).unwrap();
            assert_eq!(
                p.info().segments,
                i + 1,
                "append {i} (clean close: {clean})"
            );
            if clean {
                log.close().unwrap();
            } else {
                // As a SIGKILLed process: no clean-shutdown marker, the next open scans.
                drop(log);
                std::fs::remove_file(dir.path().join(".clean-shutdown")).unwrap();
            }
            clock.advance(HOUR + 1);
        }
        // Now T0 + 4h: the three closed segments' records are more than 2h old.
        let log = open(dir.path(), &clock);
        assert_eq!(log.run_maintenance().unwrap(), 3);
        let p = log.topic("t").unwrap().partition(0).unwrap();
        assert_eq!((p.log_start_offset(), p.log_end_offset()), (3, 4));
    }
}

/// The age is measured on the records' timestamps (the first batch's against the new
/// batch's), exactly as Kafka: not more than `segment.ms` apart stays, more rolls.
#[test]
fn segment_age_is_measured_on_record_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let p = log
        .create_topic("t", 1, config())
        .unwrap()
        .partition(0)
        .unwrap();
    let at = |ts: i64| ProducerRecord::new("v").with_timestamp(ts);
    p.append(&[at(T0 - 5 * HOUR)]).unwrap();
    p.append(&[at(T0 - 4 * HOUR)]).unwrap();
    assert_eq!(p.info().segments, 1, "exactly segment.ms apart: no roll");
    p.append(&[at(T0 - 4 * HOUR + 1)]).unwrap();
    assert_eq!(p.info().segments, 2, "more than segment.ms apart: roll");
    // The wall clock alone does not roll a segment whose records are recent.
    clock.advance(10 * HOUR);
    p.append(&[at(T0 - 4 * HOUR + 2)]).unwrap();
    assert_eq!(p.info().segments, 2);
}

/// The warnings a closure logs, as text.
fn warnings_of(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || out.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let text = buf.0.lock().unwrap().clone();
    String::from_utf8(text).unwrap()
}

/// A segment whose records were all written more than `retention.ms` ago but which
/// holds a record stamped in the future stays (as Kafka: retention goes by the newest
/// timestamp), and says so: a warning naming topic, partition and segment, once (not
/// on every maintenance pass), and a count in the partition's info.
#[test]
fn a_segment_kept_by_a_future_timestamp_is_reported_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let t = log.create_topic("orders", 2, config()).unwrap();
    let p = t.partition(1).unwrap();
    // Segment 0: a record of now. Segment 1: a record stamped 10 hours ahead.
    p.append(&[ProducerRecord::new("now")]).unwrap();
    p.roll().unwrap();
    p.append(&[ProducerRecord::new("future").with_timestamp(T0 + 10 * HOUR)])
        .unwrap();
    p.roll().unwrap();
    p.append(&[ProducerRecord::new("active")]).unwrap();
    let held = |log: &Log| {
        log.describe_topic("orders").unwrap().partitions[1].segments_held_by_future_timestamps
    };

    // Within the retention nothing is held.
    let w = warnings_of(|| assert_eq!(log.run_maintenance().unwrap(), 0));
    assert_eq!(held(&log), 0);
    assert!(w.is_empty(), "{w}");

    // 3 hours on (retention 2 hours): segment 0 goes, segment 1 is held.
    clock.advance(3 * HOUR);
    let w = warnings_of(|| assert_eq!(log.run_maintenance().unwrap(), 1));
    assert_eq!(held(&log), 1);
    let lines: Vec<&str> = w.lines().collect();
    assert_eq!(lines.len(), 1, "{w}");
    for part in [
        "stamped in the future",
        "topic=orders",
        "partition=1",
        "segment=1",
    ] {
        assert!(lines[0].contains(part), "{part:?} in {w}");
    }
    // Later passes keep counting it but do not warn again.
    let w = warnings_of(|| assert_eq!(log.run_maintenance().unwrap(), 0));
    assert!(w.is_empty(), "{w}");
    assert_eq!(held(&log), 1);
    assert_eq!(p.log_start_offset(), 1);

    // Once its future record is older than the retention too, it is deleted.
    clock.advance(10 * HOUR);
    assert_eq!(log.run_maintenance().unwrap(), 1);
    assert_eq!(held(&log), 0);
    assert_eq!(p.log_start_offset(), 2);
}

/// An altered topic config takes effect on partitions already open (as Kafka's dynamic
/// topic configs): a smaller segment.ms rolls at the next append, a shorter retention
/// deletes at the next pass; the change is stored and survives a reopen.
#[test]
fn altered_configs_apply_to_open_partitions_and_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let t = log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let p = t.partition(0).unwrap();
    p.append(&[ProducerRecord::new("a")]).unwrap();
    clock.advance(2 * HOUR);
    p.append(&[ProducerRecord::new("b")]).unwrap();
    assert_eq!(p.info().segments, 1, "7 days by default");
    let mut c = (*t.config()).clone();
    c.set("segment.ms", "1h").unwrap();
    c.set("retention.ms", "1h").unwrap();
    log.alter_topic("t", c.clone()).unwrap();
    assert_eq!(*t.config(), c);
    clock.advance(2 * HOUR);
    p.append(&[ProducerRecord::new("c")]).unwrap();
    assert_eq!(p.info().segments, 2, "rolled by the new segment.ms");
    assert_eq!(
        log.run_maintenance().unwrap(),
        1,
        "deleted by the new retention.ms"
    );
    let bad = TopicConfig {
        segment_bytes: 1,
        ..c.clone()
    };
    assert!(log.alter_topic("t", bad).is_err());
    drop(log);
    let log = open(dir.path(), &clock);
    assert_eq!(*log.topic("t").unwrap().config(), c);
}

/// Records stamped long ago (event time far behind the clock) written in transactions:
/// each commit marker carries the clock's time, far more than `segment.ms` after the
/// records'. Markers do not roll segments by time (semantics §1 *Segments*), so the
/// records stay in the active segment and time retention does not delete them.
#[test]
fn transaction_markers_do_not_roll_segments_of_old_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    log.create_topic("t", 1, config()).unwrap();
    let mut writer = log.init_transactions("w").unwrap();
    for i in 0..3 {
        writer.begin().unwrap();
        writer
            .send(
                "t",
                vec![ProducerRecord::new(format!("r{i}")).with_timestamp(1_000_000 + i)],
            )
            .unwrap();
        writer.commit_transaction().unwrap();
    }
    let p = log.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(p.info().segments, 1, "a marker rolled the segment");
    assert_eq!(log.run_maintenance().unwrap(), 0);
    assert_eq!((p.log_start_offset(), p.log_end_offset()), (0, 6));
}

/// The aborted-transaction index (`aborted.txnindex`) loses the entries of the
/// transactions whose abort markers were in the segments retention deleted (as Kafka
/// deletes a segment's transaction index with it); the entry of an abort in a kept
/// segment stays. Before, the file kept every entry forever.
#[test]
fn retention_prunes_the_aborted_transaction_index() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    log.create_topic("t", 1, config()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    let index = p.dir().join("aborted.txnindex");
    let mut writer = log.init_transactions("w").unwrap();
    // An aborted transaction in the first segment, another in the second (each
    // segment starts an hour and a bit after the last: `segment.ms` rolls it).
    for i in 0..2 {
        let ts = clock.now_ms();
        p.append(&[ProducerRecord::new(format!("plain{i}")).with_timestamp(ts)])
            .unwrap();
        writer.begin().unwrap();
        writer
            .send(
                "t",
                vec![ProducerRecord::new(format!("aborted{i}")).with_timestamp(ts)],
            )
            .unwrap();
        writer.abort_transaction().unwrap();
        clock.advance(HOUR + 1);
    }
    assert_eq!(p.info().segments, 2);
    let entry = 36;
    assert_eq!(std::fs::metadata(&index).unwrap().len(), 2 * entry);
    // The first segment is past its retention (2 hours after its records), the
    // second not; an append rolls the second, so it may be deleted too.
    let ts = clock.now_ms();
    p.append(&[ProducerRecord::new("last").with_timestamp(ts)])
        .unwrap();
    assert_eq!(log.run_maintenance().unwrap(), 1, "one segment deleted");
    assert_eq!(p.log_start_offset(), 3);
    assert_eq!(
        std::fs::metadata(&index).unwrap().len(),
        entry,
        "the deleted segment's aborted transaction is still in the index"
    );
    // What is left is the second transaction's entry, and the log opens with it.
    drop((writer, p));
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), &clock);
    let p = log.topic("t").unwrap().partition(0).unwrap();
    let bytes = std::fs::read(&index).unwrap();
    let first_offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    assert_eq!(
        first_offset, 4,
        "the kept entry is the second transaction's"
    );
    assert_eq!(p.log_start_offset(), 3);
}
