//! SIGKILL `brook broker` (with `--fsync always`) while librdkafka producers append
//! with acks=all, again and again: every record the broker acknowledged is in the log
//! after the last restart, at the offset it was acknowledged with and with its value,
//! and every partition's offsets stay dense (no gap, no offset used twice).
//!
//! 200 kills by default (issue 17); `BROOK_BROKER_KILLS=N` runs more (or fewer).
//! Where each kill lands is random, from a seed printed at the start
//! (`BROOK_BROKER_KILL_SEED=S` repeats a run).

// Kills land after a random pause; the final read waits with a deadline.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use brook::log::{Log, LogOptions, ReadLimit, TopicConfig};
use brook_testkit::broker::BrokerProcess;
use rand::{Rng, SeedableRng};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;

const TOPIC: &str = "acked";
const PARTITIONS: u32 = 3;

/// What the broker acknowledged: (partition, offset) → value.
type Acked = BTreeMap<(i32, i64), String>;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// One broker life: start it, produce from one rdkafka producer (acks=all, no
/// retries beyond librdkafka's own, no idempotence) until a random moment, SIGKILL the
/// broker, and return what was acknowledged before the kill.
fn one_life(dir: &Path, life: u64, kill_after: Duration) -> Acked {
    // The killed broker's address file is stale; the new one writes its own.
    let _ = std::fs::remove_file(brook_broker::address_file(dir));
    let broker = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), dir, &[]);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "5000")
        .set("socket.timeout.ms", "5000")
        .create()
        .expect("producer");
    let started = Instant::now();
    let mut pending = Vec::new();
    let mut i = 0u64;
    while started.elapsed() < kill_after {
        let value = format!("life {life} record {i}");
        let partition = (i % u64::from(PARTITIONS)) as i32;
        match producer.send_result(
            FutureRecord::<(), _>::to(TOPIC)
                .partition(partition)
                .payload(&value),
        ) {
            Ok(delivery) => pending.push((value, delivery)),
            // The local queue is full: let deliveries catch up.
            Err((_, _)) => std::thread::sleep(Duration::from_millis(1)),
        }
        i += 1;
        if pending.len() % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(broker); // SIGKILL, reaped
                  // Whatever librdkafka has not seen acknowledged by now fails at once; an answer
                  // read before the purge still counts as acknowledged, and must be on disk.
    producer.purge(PurgeConfig::default().queue().inflight());
    let mut acked = Acked::new();
    for (value, delivery) in pending {
        if let Ok(Ok(delivered)) = futures::executor::block_on(delivery) {
            acked.insert((delivered.partition, delivered.offset), value);
        }
    }
    let _ = producer.flush(Timeout::After(Duration::ZERO));
    acked
}

#[test]
fn no_acknowledged_record_is_lost_over_many_broker_kills() {
    let kills = env_u64("BROOK_BROKER_KILLS").unwrap_or(200);
    let seed = env_u64("BROOK_BROKER_KILL_SEED").unwrap_or_else(rand::random);
    eprintln!("{kills} kills, seed {seed} (BROOK_BROKER_KILL_SEED={seed} repeats the run)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open log");
        log.create_topic(TOPIC, PARTITIONS, TopicConfig::default())
            .expect("create topic");
        log.close().expect("close log");
    }
    let mut acked = Acked::new();
    for life in 0..kills {
        let kill_after = Duration::from_millis(rng.gen_range(20..250));
        for (at, value) in one_life(dir.path(), life, kill_after) {
            if let Some(before) = acked.insert(at, value.clone()) {
                panic!(
                    "offset {at:?} acknowledged twice: {before:?} and then {value:?} (seed {seed})"
                );
            }
        }
    }
    assert!(
        acked.len() as u64 > kills,
        "only {} records acknowledged over {kills} lives: the test did not produce",
        acked.len()
    );

    let log =
        Log::open(dir.path(), LogOptions::default()).expect("open the log after the last kill");
    let topic = log.topic(TOPIC).expect("topic");
    let mut found = Acked::new();
    for p in 0..PARTITIONS {
        let partition = topic.partition(p).expect("partition");
        assert_eq!(partition.log_start_offset(), 0, "partition {p}");
        let end = partition.log_end_offset();
        let mut next = 0u64;
        while next < end {
            let records = partition.read(next, ReadLimit::default()).expect("read");
            assert!(
                !records.is_empty(),
                "partition {p}: nothing read at {next} < end {end}"
            );
            for r in records {
                assert_eq!(
                    r.offset, next,
                    "partition {p}: offsets not dense (seed {seed})"
                );
                next += 1;
                found.insert(
                    (p as i32, r.offset as i64),
                    String::from_utf8(r.value.to_vec()).expect("utf-8"),
                );
            }
        }
    }
    let mut lost = Vec::new();
    for (at, value) in &acked {
        match found.get(at) {
            Some(v) if v == value => {}
            other => lost.push(format!("{at:?}: acknowledged {value:?}, found {other:?}")),
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records lost or changed over {kills} kills (seed {seed}):\n{}",
        lost.len(),
        acked.len(),
        lost.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "{} acknowledged records all found over {kills} kills; {} records in the log",
        acked.len(),
        found.len()
    );
}
