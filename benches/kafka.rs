//! Kafka benchmark: throughput of brook's Kafka source and sink against the same
//! broker read and written by a plain rdkafka loop in the same run (the ratio is what
//! brook's connector and runtime cost on top of librdkafka).
//!
//! Run with `cargo bench --bench kafka` with `BROOK_KAFKA_BOOTSTRAP` set (e.g. after
//! `source scripts/kafka-broker.sh`); without it the benchmark says so and exits.
//! `BROOK_BENCH_SCALE` (default 1.0) multiplies the record count (200k);
//! `BROOK_BENCH_REPS` (default 3) is how many times each measurement and its baseline
//! run, interleaved; the table shows medians.
//!
//! Records: JSON objects of about 60 bytes, 4 partitions.
//! - sink: a bounded in-memory source of N rows → `KafkaSink` (idempotent producer, no
//!   checkpoints; then with checkpoints every 200 ms: Kafka transactions) against
//!   `BaseProducer::send` in a loop + flush;
//! - source: `KafkaSource` (bounded, read_committed) → a counting sink against a
//!   `BaseConsumer::poll` loop to the end of every partition.
#![allow(clippy::disallowed_methods)] // measuring time is the point: Instant::now
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use brook::engine::checkpoint::CheckpointConfig;
use brook::engine::testing::{CollectSink, VecSource};
use brook::engine::{JobConfig, StreamEnvironment};
use brook::kafka::admin::{create_topic, produce};
use brook::kafka::rdkafka::config::ClientConfig;
use brook::kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use brook::kafka::rdkafka::error::KafkaError;
use brook::kafka::rdkafka::{Offset, TopicPartitionList};
use brook::kafka::{KafkaSink, KafkaSource};
use serde::{Deserialize, Serialize};

const PARTITIONS: i32 = 4;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Event {
    key: String,
    value: i64,
    ts: i64,
}

fn unique(stem: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("bench-{stem}-{nanos}")
}

fn events(n: usize, t0: i64) -> Vec<Event> {
    (0..n as i64)
        .map(|i| Event {
            key: format!("k{}", i % 1000),
            value: i,
            ts: t0 + i,
        })
        .collect()
}

/// The plain loop: BaseConsumer::poll until every partition's end.
fn plain_read(bootstrap: &str, topic: &str) -> usize {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("plain"))
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let (mut n, mut eof) = (0, HashSet::new());
    while eof.len() < PARTITIONS as usize {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let e: Event =
                    serde_json::from_slice(brook::kafka::rdkafka::Message::payload(&m).unwrap())
                        .unwrap();
                std::hint::black_box(e);
                n += 1;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    }
    n
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn fmt(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else {
        format!("{:.0} k", r / 1e3)
    }
}

fn main() {
    let Ok(bootstrap) = std::env::var("BROOK_KAFKA_BOOTSTRAP") else {
        eprintln!("kafka bench: skipped: BROOK_KAFKA_BOOTSTRAP is not set (no Kafka broker)");
        return;
    };
    let scale: f64 = std::env::var("BROOK_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = ((200_000.0 * scale) as usize).max(1000);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let data = events(n, now - 3_600_000);
    let reps: usize = std::env::var("BROOK_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    // Per measurement: (brook rec/s, plain rec/s) of each repetition.
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
        ("sink, idempotent producer".into(), vec![], vec![]),
        (
            "sink, transactions (checkpoint 200 ms)".into(),
            vec![],
            vec![],
        ),
        ("source, read_committed".into(), vec![], vec![]),
    ];
    for _ in 0..reps {
        // Sink: the plain producer loop.
        let plain_topic = unique("plain-out");
        create_topic(&bootstrap, &plain_topic, PARTITIONS).unwrap();
        let t = Instant::now();
        produce(
            &bootstrap,
            &plain_topic,
            data.iter().map(|e| {
                let v = serde_json::to_string(e).unwrap();
                ((e.value % PARTITIONS as i64) as i32, None, v, Some(e.ts))
            }),
        )
        .unwrap();
        let plain_sink = rate(n, t.elapsed());
        for (row, checkpoints) in [(0, false), (1, true)] {
            let topic = unique("out");
            create_topic(&bootstrap, &topic, PARTITIONS).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let mut config = JobConfig::default();
            if checkpoints {
                config.checkpoint = Some(CheckpointConfig::new(dir.path(), 200));
            }
            let env = StreamEnvironment::new(config);
            env.source(VecSource::new(data.clone())).sink(
                KafkaSink::json(bootstrap.clone(), topic.clone())
                    .transactional_id_prefix(unique("bench"))
                    .key_by(|e: &Event| e.key.clone()),
            );
            let t = Instant::now();
            env.execute("kafka sink bench").unwrap();
            rows[row].1.push(rate(n, t.elapsed()));
            rows[row].2.push(plain_sink);
        }
        // Source: read the plain loop's topic both ways.
        let t = Instant::now();
        assert_eq!(plain_read(&bootstrap, &plain_topic), n);
        rows[2].2.push(rate(n, t.elapsed()));
        let env = StreamEnvironment::new(JobConfig::default());
        let out = CollectSink::new();
        env.source(
            KafkaSource::json::<Event>(bootstrap.clone(), plain_topic.clone()).bounded(true),
        )
        .sink(out.clone());
        let t = Instant::now();
        env.execute("kafka source bench").unwrap();
        rows[2].1.push(rate(n, t.elapsed()));
        assert_eq!(out.values().len(), n);
    }
    println!(
        "| measurement | records | brook rec/s | plain rdkafka rec/s | ratio (median of {reps}) |"
    );
    println!("|---|---|---|---|---|");
    for (name, brook, plain) in rows {
        let mut ratios: Vec<f64> = brook.iter().zip(&plain).map(|(b, p)| b / p).collect();
        println!(
            "| {name} | {n} | {} | {} | {:.2} |",
            fmt(median(brook)),
            fmt(median(plain)),
            median(std::mem::take(&mut ratios))
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
