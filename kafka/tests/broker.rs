//! The Kafka connector against a real broker (`BROOK_KAFKA_BOOTSTRAP`, e.g.
//! `127.0.0.1:9092`): the tests are ignored unless asked for (`-- --ignored`;
//! `scripts/test.sh` starts a broker and runs them).

use std::collections::HashMap;

use brook_core::element::StreamRecord;
use brook_core::operator::SubtaskInfo;
use brook_core::sink::Sink;
use brook_engine::testing::CollectSink;
use brook_engine::{JobConfig, StreamEnvironment};
use brook_kafka::admin::{create_topic, produce, read_to_end};
use brook_kafka::{KafkaSink, KafkaSource, KafkaStart};
use brook_testkit::kafka::{base_ms, bootstrap, unique};

fn info(name: &str, index: u32, parallelism: u32) -> SubtaskInfo {
    SubtaskInfo {
        name: name.into(),
        index,
        parallelism,
        max_parallelism: 128,
    }
}

fn committed_values(b: &str, topic: &str) -> Vec<i64> {
    let mut v: Vec<i64> = read_to_end(b, topic, true)
        .expect("read the topic")
        .iter()
        .map(|r| r.value.parse().expect("a number"))
        .collect();
    v.sort_unstable();
    v
}

#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test -p brook-kafka --test broker -- --ignored`"]
fn transactions_commit_on_checkpoint_completion_restore_once_and_fence_zombies() {
    let b = bootstrap();
    let topic = unique("txn");
    create_topic(&b, &topic, 3).expect("create the topic");
    let sink = KafkaSink::<i64>::json(b.clone(), topic.clone())
        .transactional_id_prefix(unique("job"))
        .key_by(|n| n.to_string());
    let i = info("out", 0, 1);
    let mut w = sink.create_committing_writer(&i).expect("a writer");
    w.write_batch((0..10).map(StreamRecord::new).collect())
        .expect("write");
    let c1 = w
        .prepare_commit(1)
        .expect("prepare 1")
        .expect("a committable");
    assert!(
        committed_values(&b, &topic).is_empty(),
        "nothing before completion"
    );
    w.commit(1, vec![c1]).expect("commit 1");
    assert_eq!(committed_values(&b, &topic), (0..10).collect::<Vec<_>>());

    // Checkpoint 2 completes but the process dies before committing it.
    w.write_batch((10..20).map(StreamRecord::new).collect())
        .expect("write");
    let c2 = w
        .prepare_commit(2)
        .expect("prepare 2")
        .expect("a committable");
    w.write_batch((20..25).map(StreamRecord::new).collect())
        .expect("write");
    let _c3 = w
        .prepare_commit(3)
        .expect("prepare 3")
        .expect("a committable");
    // The restored writer commits checkpoint 2 (not 3: it was not complete) and fences
    // the old one.
    let mut w2 = sink
        .restore_writer(&i, vec![c2.clone()])
        .expect("a restored writer");
    assert_eq!(committed_values(&b, &topic), (0..20).collect::<Vec<_>>());
    let zombie = w.commit(3, Vec::new());
    assert!(zombie.is_err(), "the zombie must be fenced");
    // Restoring the same checkpoint again commits nothing twice.
    drop(w2);
    w2 = sink.restore_writer(&i, vec![c2]).expect("restored again");
    assert_eq!(committed_values(&b, &topic), (0..20).collect::<Vec<_>>());
    w2.write_batch((20..25).map(StreamRecord::new).collect())
        .expect("write");
    w2.finish().expect("finish");
    assert_eq!(committed_values(&b, &topic), (0..25).collect::<Vec<_>>());

    // Keys are routed by murmur2 (Kafka's default partitioner): the same key always
    // lands in the same partition.
    let recs = read_to_end(&b, &topic, true).expect("read");
    let mut by_key: HashMap<String, i32> = HashMap::new();
    for r in &recs {
        let k = r.key.clone().expect("keyed");
        assert_eq!(*by_key.entry(k).or_insert(r.partition), r.partition);
    }
    assert!(
        by_key
            .values()
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 1
    );
}

#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test -p brook-kafka --test broker -- --ignored`"]
fn source_reads_every_partition_and_resumes_at_checkpointed_offsets() {
    let b = bootstrap();
    let topic = unique("in");
    create_topic(&b, &topic, 4).expect("create the topic");
    // Timestamps of an hour ago: brokers delete older records (retention, 7 days).
    let t0 = base_ms();
    produce(
        &b,
        &topic,
        (0..400i64).map(|i| ((i % 4) as i32, None, i.to_string(), Some(t0 + i))),
    )
    .expect("produce");

    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    let out = CollectSink::new();
    env.source(KafkaSource::json::<i64>(b.clone(), topic.clone()).bounded(true))
        .sink(out.clone());
    env.execute("read").expect("the job runs");
    let mut got: Vec<i64> = out.values();
    got.sort_unstable();
    assert_eq!(got, (0..400).collect::<Vec<_>>());
    // Kafka timestamps are the event times.
    assert!(out
        .records()
        .iter()
        .all(|r| r.timestamp == Some(t0 + r.value)));

    // Resuming partition 1 at offset 90 (its 90th record is 361): 10 records left.
    use brook_core::source::Source;
    let src = KafkaSource::json::<i64>(b.clone(), topic.clone()).bounded(true);
    let splits: Vec<_> = src
        .enumerate_splits(1)
        .expect("splits")
        .into_iter()
        .filter(|s| s.partition == 1)
        .collect();
    let mut pos = HashMap::new();
    let mut p = vec![1u8];
    p.extend_from_slice(&90u64.to_le_bytes());
    pos.insert(format!("{topic}/1"), p);
    let mut reader = src
        .restored_reader(&info("in", 0, 1), splits, &pos)
        .expect("a reader");
    let mut o = brook_core::operator::Output::with_capacity(100);
    let mut values = Vec::new();
    use brook_core::source::{InputStatus, SourceReader};
    for _ in 0..200 {
        let s = reader.poll_next(&mut o).expect("poll");
        values.extend(o.take().into_iter().map(|r| r.value));
        if s == InputStatus::End {
            break;
        }
        reader.wait_for_data(50);
    }
    assert_eq!(values, (90..100).map(|k| 1 + 4 * k).collect::<Vec<i64>>());
    assert_eq!(reader.positions().get(&1), Some(&100));

    // Starting at a timestamp: records at or after t0 + 396.
    let env = StreamEnvironment::new(JobConfig::default());
    let out = CollectSink::new();
    env.source(
        KafkaSource::json::<i64>(b.clone(), topic.clone())
            .bounded(true)
            .start(KafkaStart::Timestamp(t0 + 396)),
    )
    .sink(out.clone());
    env.execute("from a time").expect("the job runs");
    let mut got = out.values();
    got.sort_unstable();
    assert_eq!(got, vec![396, 397, 398, 399]);
}

#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test -p brook-kafka --test broker -- --ignored`"]
fn without_checkpoints_the_idempotent_producer_writes_everything() {
    let b = bootstrap();
    let topic = unique("plain");
    create_topic(&b, &topic, 2).expect("create the topic");
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    env.source(brook_engine::testing::VecSource::new((0..500i64).collect()))
        .sink(KafkaSink::json(b.clone(), topic.clone()));
    env.execute("write").expect("the job runs");
    assert_eq!(committed_values(&b, &topic), (0..500).collect::<Vec<_>>());
}
