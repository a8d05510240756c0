#![allow(clippy::unwrap_used)]
//! The log source and sink through the engine: every record exactly once in partition
//! order, starting offsets, following new appends, bad records, key routing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use brook_connectors::{LogSink, LogSource, StartingOffsets};
use brook_core::bad_record::BadRecords;
use brook_core::operator::{Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source, SourceReader};
use brook_core::time::Stopwatch;
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{EngineError, JobConfig, StreamEnvironment};
use brook_log::partitioner::partition_for_key;
use brook_log::{Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Ev {
    p: u32,
    seq: u64,
}

fn open() -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    (dir, log)
}

/// Appends `per` events to each partition `p` of `topic`, in batches of 100, with
/// timestamp `seq * 10`.
fn fill(log: &Log, topic: &str, first: u64, per: u64) {
    let t = log.topic(topic).unwrap();
    for p in 0..t.partition_count() {
        let part = t.partition(p).unwrap();
        let evs: Vec<u64> = (first..first + per).collect();
        for chunk in evs.chunks(100) {
            let recs: Vec<ProducerRecord> = chunk
                .iter()
                .map(|&seq| {
                    ProducerRecord::new(serde_json::to_vec(&Ev { p, seq }).unwrap())
                        .with_timestamp(seq as i64 * 10)
                })
                .collect();
            part.append(&recs).unwrap();
        }
    }
}

fn run(source: LogSource<Ev>, parallelism: u32) -> Vec<(Ev, Option<i64>)> {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let out = CollectSink::new();
    env.source(source).sink(out.clone());
    env.execute("read log").unwrap();
    out.records()
        .into_iter()
        .map(|r| (r.value, r.timestamp))
        .collect()
}

/// Checks every partition's events are `first..first+per`, in order, exactly once.
fn check_partition_order(got: &[(Ev, Option<i64>)], partitions: u32, first: u64, per: u64) {
    let mut by_p: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (e, ts) in got {
        assert_eq!(
            *ts,
            Some(e.seq as i64 * 10),
            "the log timestamp is the event time"
        );
        by_p.entry(e.p).or_default().push(e.seq);
    }
    assert_eq!(by_p.len() as u32, partitions);
    for (p, seqs) in by_p {
        assert_eq!(
            seqs,
            (first..first + per).collect::<Vec<_>>(),
            "partition {p}"
        );
    }
}

#[test]
fn three_partitions_at_parallelism_2_read_exactly_once_in_order() {
    let (_dir, log) = open();
    log.create_topic("events", 3, TopicConfig::default())
        .unwrap();
    fill(&log, "events", 0, 2_500);
    let got = run(LogSource::json(&log, "events").bounded(true), 2);
    assert_eq!(got.len(), 7_500);
    check_partition_order(&got, 3, 0, 2_500);
}

fn info(index: u32, parallelism: u32) -> SubtaskInfo {
    SubtaskInfo {
        name: "source".into(),
        index,
        parallelism,
        max_parallelism: 128,
    }
}

#[test]
fn splits_are_partitions_and_readers_track_positions() {
    let (_dir, log) = open();
    log.create_topic("events", 3, TopicConfig::default())
        .unwrap();
    fill(&log, "events", 0, 40);
    let src = LogSource::json::<Ev>(&log, "events").bounded(true);
    let splits = src.enumerate_splits(2).unwrap();
    let ids: Vec<u32> = splits.iter().map(|s| s.partition).collect();
    assert_eq!(ids, vec![0, 1, 2]);
    // Subtask 0 of 2 gets partitions 0 and 2.
    let mine = vec![splits[0].clone(), splits[2].clone()];
    let mut reader = src.reader(&info(0, 2), mine).unwrap();
    assert_eq!(reader.positions(), BTreeMap::from([(0, 0), (2, 0)]));
    let mut out = Output::new();
    let mut polls = 0;
    while reader.poll_next(&mut out).unwrap() != InputStatus::End {
        polls += 1;
        assert!(polls < 100);
    }
    assert_eq!(out.take().len(), 80);
    assert_eq!(reader.positions(), BTreeMap::from([(0, 40), (2, 40)]));
}

#[test]
fn a_checkpointed_position_it_did_not_write_fails_the_restore_naming_the_split() {
    let (_dir, log) = open();
    log.create_topic("events", 2, TopicConfig::default())
        .unwrap();
    let src = LogSource::json::<Ev>(&log, "events");
    let splits = src.enumerate_splits(1).unwrap();
    // Partition 0's position is not an offset; partition 1 has none (starts as new).
    let positions = HashMap::from([("events/0".to_string(), vec![9, 9])]);
    let err = match src.restore_reader(&info(0, 1), splits, &positions) {
        Ok(_) => panic!("a position this source did not write was restored"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err,
        "invalid restore: the checkpointed position of events/0 is not one this source wrote"
    );
}

#[test]
fn starting_offsets_latest_and_explicit() {
    let (_dir, log) = open();
    log.create_topic("events", 2, TopicConfig::default())
        .unwrap();
    fill(&log, "events", 0, 20);

    let latest = run(
        LogSource::json(&log, "events")
            .bounded(true)
            .starting_offsets(StartingOffsets::Latest),
        2,
    );
    assert!(latest.is_empty());

    let explicit = run(
        LogSource::json(&log, "events")
            .bounded(true)
            .starting_offsets(StartingOffsets::Offsets(BTreeMap::from([(1, 15)]))),
        1,
    );
    let seqs: BTreeSet<(u32, u64)> = explicit.iter().map(|(e, _)| (e.p, e.seq)).collect();
    let want: BTreeSet<(u32, u64)> = (0..20)
        .map(|s| (0, s))
        .chain((15..20).map(|s| (1, s)))
        .collect();
    assert_eq!(seqs, want);

    let env = StreamEnvironment::new(JobConfig::default());
    env.source(
        LogSource::json::<Ev>(&log, "events")
            .starting_offsets(StartingOffsets::Offsets(BTreeMap::from([(0, 21)]))),
    )
    .sink(CollectSink::new());
    let err = env.execute("out of range").unwrap_err();
    assert!(err.to_string().contains("offset 21 of events/0"), "{err}");

    let env = StreamEnvironment::new(JobConfig::default());
    env.source(LogSource::json::<Ev>(&log, "nope"))
        .sink(CollectSink::new());
    let err = env.execute("unknown topic").unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let watch = Stopwatch::start();
    while !cond() {
        assert!(
            watch.elapsed_nanos() < 10_000_000_000,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn unbounded_source_reads_new_appends_until_cancelled() {
    let (_dir, log) = open();
    log.create_topic("events", 3, TopicConfig::default())
        .unwrap();
    fill(&log, "events", 0, 10);
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    let out = CollectSink::new();
    env.source(LogSource::json::<Ev>(&log, "events"))
        .sink(out.clone());
    let job = env.start("follow log").unwrap();
    wait_for("the first records", || out.records().len() == 30);
    std::thread::sleep(Duration::from_millis(30));
    fill(&log, "events", 10, 500);
    wait_for("the appended records", || out.records().len() == 1_530);
    assert!(!job.is_finished());
    job.cancel();
    assert!(matches!(job.join(), Err(EngineError::Cancelled)));
    let got: Vec<(Ev, Option<i64>)> = out
        .records()
        .into_iter()
        .map(|r| (r.value, r.timestamp))
        .collect();
    check_partition_order(&got, 3, 0, 510);
}

#[test]
fn bad_values_follow_the_policy() {
    let (dir, log) = open();
    let t = log
        .create_topic("mixed", 2, TopicConfig::default())
        .unwrap();
    let good = |seq: u64| ProducerRecord::new(serde_json::to_vec(&Ev { p: 1, seq }).unwrap());
    t.partition(1)
        .unwrap()
        .append(&[good(0), good(1), ProducerRecord::new("not json"), good(3)])
        .unwrap();

    let env = StreamEnvironment::new(JobConfig::default());
    env.source(LogSource::json::<Ev>(&log, "mixed").bounded(true))
        .sink(CollectSink::new());
    let err = env.execute("fail").unwrap_err();
    assert!(err.to_string().contains("mixed/1@2"), "{err}");

    let src = LogSource::json::<Ev>(&log, "mixed")
        .bounded(true)
        .on_bad_record(BadRecords::skip());
    let counter = src.bad_record_counter();
    let seqs: Vec<u64> = run(src, 2).into_iter().map(|(e, _)| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 3]);
    assert_eq!(counter.skipped(), 1);

    let dlq = dir.path().join("dead.jsonl");
    let src = LogSource::json::<Ev>(&log, "mixed")
        .bounded(true)
        .on_bad_record(BadRecords::dead_letter_file(&dlq).unwrap());
    let counter = src.bad_record_counter();
    assert_eq!(run(src, 1).len(), 3);
    assert_eq!(counter.dead_lettered(), 1);
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&dlq).unwrap().trim_end()).unwrap();
    assert_eq!(line["raw"], "not json");
    assert_eq!(line["position"], "mixed/1@2");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    user: String,
    amount: i64,
}

#[test]
fn log_sink_routes_keys_by_the_log_partitioner() {
    let (_dir, log) = open();
    let topic = log
        .create_topic("orders", 4, TopicConfig::default())
        .unwrap();
    let orders: Vec<(Order, i64)> = (0..400)
        .map(|i| {
            (
                Order {
                    user: format!("user-{}", i % 37),
                    amount: i,
                },
                1_000 + i,
            )
        })
        .collect();
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    env.source(VecSource::with_timestamps(orders.clone()))
        .sink(LogSink::json(&log, "orders").key_by(|o: &Order| o.user.clone()));
    env.execute("write orders").unwrap();

    let mut seen = Vec::new();
    for p in 0..4 {
        let recs = topic
            .partition(p)
            .unwrap()
            .read(0, ReadLimit::records(1_000))
            .unwrap();
        for r in recs {
            let key = r.key.clone().unwrap();
            assert_eq!(partition_for_key(&key, 4), p, "key {key:?}");
            let o: Order = serde_json::from_slice(&r.value).unwrap();
            assert_eq!(key.as_ref(), o.user.as_bytes());
            assert_eq!(r.timestamp, 1_000 + o.amount, "the event time is kept");
            seen.push(o.amount);
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..400).collect::<Vec<_>>());

    // Keyless records are spread over the partitions.
    log.create_topic("spread", 4, TopicConfig::default())
        .unwrap();
    let env = StreamEnvironment::new(JobConfig::default());
    env.source(VecSource::new((0..100i64).collect()))
        .sink(LogSink::json(&log, "spread"));
    env.execute("write spread").unwrap();
    let info = log.describe_topic("spread").unwrap();
    let ends: Vec<u64> = info.partitions.iter().map(|p| p.log_end_offset).collect();
    assert_eq!(ends.iter().sum::<u64>(), 100);

    let env = StreamEnvironment::new(JobConfig::default());
    env.source(VecSource::new(vec![1i64]))
        .sink(LogSink::json(&log, "missing"));
    let err = env.execute("unknown topic").unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn waiting_blocks_until_an_append_wakes_the_reader() {
    let (_dir, log) = open();
    log.create_topic("events", 2, TopicConfig::default())
        .unwrap();
    let src = LogSource::json::<Ev>(&log, "events");
    let splits = src.enumerate_splits(1).unwrap();
    let mut reader = src.reader(&info(0, 1), splits).unwrap();
    let mut out = Output::new();
    assert_eq!(
        reader.poll_next(&mut out).unwrap(),
        InputStatus::NothingAvailable
    );

    // Nothing comes: the wait lasts its timeout.
    let watch = Stopwatch::start();
    reader.wait_for_data(100);
    let ms = watch.elapsed_nanos() / 1_000_000;
    assert!(ms >= 90, "returned after {ms} ms without data");

    // An append to partition 1 wakes it well before the timeout.
    let appender = {
        let log = log.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            fill(&log, "events", 0, 1);
        })
    };
    let watch = Stopwatch::start();
    reader.wait_for_data(5_000);
    let ms = watch.elapsed_nanos() / 1_000_000;
    appender.join().unwrap();
    assert!(ms < 2_000, "woke after {ms} ms");
    assert_eq!(
        reader.poll_next(&mut out).unwrap(),
        InputStatus::MoreAvailable
    );
    assert_eq!(out.take().len(), 2);
    assert_eq!(reader.positions(), BTreeMap::from([(0, 1), (1, 1)]));
}

#[test]
fn the_source_reads_committed_records_by_default_and_all_on_request() {
    let (_dir, log) = open();
    log.create_topic("events", 1, TopicConfig::default())
        .unwrap();
    let ev = |seq: u64| {
        vec![ProducerRecord::new(
            serde_json::to_vec(&Ev { p: 0, seq }).unwrap(),
        )]
    };
    let t = log.topic("events").unwrap();
    t.append(ev(0)).unwrap();
    let mut w = log.init_transactions("w").unwrap();
    w.begin().unwrap();
    w.send("events", ev(1)).unwrap();
    w.abort_transaction().unwrap();
    // Enough aborted records for reads of more than one chunk of offsets.
    w.begin().unwrap();
    for i in 0..30u64 {
        w.send(
            "events",
            (0..100).flat_map(|j| ev(1_000 + i * 100 + j)).collect(),
        )
        .unwrap();
    }
    w.abort_transaction().unwrap();
    w.begin().unwrap();
    w.send("events", ev(2)).unwrap();
    w.commit_transaction().unwrap();
    t.append(ev(3)).unwrap();
    w.begin().unwrap();
    w.send("events", ev(4)).unwrap();
    t.append(ev(5)).unwrap();
    let read = |src: LogSource<Ev>| -> (Vec<u64>, BTreeMap<u32, u64>) {
        let splits = src.enumerate_splits(1).unwrap();
        let mut reader = src.reader(&info(0, 1), splits).unwrap();
        let mut out = Output::new();
        let mut polls = 0;
        while reader.poll_next(&mut out).unwrap() != InputStatus::End {
            polls += 1;
            assert!(polls < 100);
        }
        (
            out.take().into_iter().map(|r| r.value.seq).collect(),
            reader.positions(),
        )
    };
    let stable = t.partition(0).unwrap().last_stable_offset();
    let (committed, pos) = read(LogSource::json::<Ev>(&log, "events").bounded(true));
    assert_eq!(committed, vec![0, 2, 3]);
    // Past the markers and aborted records, up to the open transaction.
    assert_eq!(pos, BTreeMap::from([(0, stable)]));
    let (all, _) = read(
        LogSource::json::<Ev>(&log, "events")
            .bounded(true)
            .isolation(brook_log::IsolationLevel::ReadUncommitted),
    );
    assert_eq!(all.len(), 3_006);
    assert_eq!(all[..2], [0, 1]);
    assert_eq!(all[all.len() - 4..], [2, 3, 4, 5]);
    w.commit_transaction().unwrap();
    let (committed, _) = read(LogSource::json::<Ev>(&log, "events").bounded(true));
    assert_eq!(committed, vec![0, 2, 3, 4, 5]);
}

/// A checkpoint taken through a broker (the Kafka sink's committables: each
/// checkpoint's records) restored in-process (semantics §1a): the records of the
/// checkpoints above the transactional id's marker are written, one transaction each,
/// and the marker moves with them, so restoring again writes nothing twice.
#[test]
fn the_kafka_sinks_committables_restore_in_process_above_the_marker_once() {
    use brook_core::sink::Sink;
    use brook_core::txn_committable::{marker_group, CheckpointRecords, PendingRecord};
    use brook_log::{IsolationLevel, TopicPartition};

    let (_dir, log) = open();
    log.create_topic("out", 1, TopicConfig::default()).unwrap();
    let sink = LogSink::<Ev>::json(&log, "out").transactional_id_prefix("copy");
    let info = SubtaskInfo {
        name: "out".into(),
        index: 0,
        parallelism: 1,
        max_parallelism: 128,
    };
    let id = "copy.out.0";
    let checkpoint = |n: u64| {
        let r = |seq: u64| {
            let v = serde_json::to_string(&Ev { p: 0, seq }).unwrap();
            PendingRecord(Some(format!("k{seq}")), v, Some(seq as i64))
        };
        CheckpointRecords::new(id, n, vec![r(n * 10), r(n * 10 + 1)]).encode()
    };
    // The Kafka sink had committed checkpoint 3 before the process died.
    let mut w = log.init_transactions(id).unwrap();
    w.begin().unwrap();
    w.send_offsets(&marker_group(id), &[(TopicPartition::new("out", 0), 3)])
        .unwrap();
    w.commit_transaction().unwrap();

    for _ in 0..2 {
        let mut writer = sink
            .restore_writer(&info, vec![checkpoint(3), checkpoint(5), checkpoint(4)])
            .unwrap();
        writer.finish().unwrap();
    }
    let p = log.topic("out").unwrap().partition(0).unwrap();
    let mut recs = Vec::new();
    p.read_into_isolated(
        0,
        ReadLimit::default(),
        IsolationLevel::ReadCommitted,
        &mut recs,
    )
    .unwrap();
    let seqs: Vec<u64> = recs
        .iter()
        .map(|r| serde_json::from_slice::<Ev>(&r.value).unwrap().seq)
        .collect();
    assert_eq!(
        seqs,
        vec![40, 41, 50, 51],
        "checkpoints 4 and 5, once, in order"
    );
    assert_eq!(recs[0].timestamp, 40);
    assert_eq!(recs[0].key.as_deref(), Some(&b"k40"[..]));
    assert_eq!(
        log.committed_offset(&marker_group(id), &TopicPartition::new("out", 0)),
        Some(5)
    );
    // Bytes neither sink wrote fail the restore, naming the topic.
    let e = sink
        .restore_writer(&info, vec![b"junk".to_vec()])
        .err()
        .unwrap();
    assert!(e.to_string().contains("\"out\""), "{e}");
}
