//! What the tests against a Kafka broker (kafka/tests/broker.rs,
//! tests/kafka_kill_restore.rs, tests/kafka_group.rs) share: the broker's address,
//! unique topic names, keyed input, and committed output read back.

use std::time::{SystemTime, UNIX_EPOCH};

use brook_kafka::admin::{produce, read_to_end};

/// The broker's address from `BROOK_KAFKA_BOOTSTRAP`. The tests that call this are
/// `#[ignore]`d and run on request (`-- --ignored`, as `scripts/test.sh` does after
/// starting a broker): without the variable they fail saying how to start one.
pub fn bootstrap() -> String {
    match std::env::var("BROOK_KAFKA_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => b,
        _ => panic!(
            "BROOK_KAFKA_BOOTSTRAP is not set: this test needs a Kafka broker. \
             `source scripts/kafka-broker.sh` starts one and sets it (or run scripts/test.sh)"
        ),
    }
}

fn now_ms() -> i64 {
    // Wall-clock time: topics must be unique on a shared broker, and brokers delete
    // records older than their retention.
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64
}

/// A topic name no other run uses: `stem-<pid>-<ms><counter>`.
pub fn unique(stem: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{stem}-{}-{}{n:03}", std::process::id(), now_ms())
}

/// A whole second an hour ago: event times of test input (recent enough for the
/// broker's retention, 7 days by default).
pub fn base_ms() -> i64 {
    let now = now_ms();
    now - now % 1000 - 3_600_000
}

/// Events `from..to` of `keys` keys: `{key: "k<n>", value: i % 100, ts}`; a key's
/// events all go to partition `key % partitions`; event time rises 1 ms per event
/// from `base`, with some disorder (at most 84 ms).
pub fn produce_events(
    bootstrap: &str,
    topic: &str,
    partitions: i64,
    keys: i64,
    base: i64,
    range: std::ops::Range<i64>,
) {
    produce(
        bootstrap,
        topic,
        range.map(|i| {
            let key = (i * 7919) % keys;
            let ts = base + i - (i % 13) * 7;
            let v = serde_json::json!({ "key": format!("k{key}"), "value": i % 100, "ts": ts });
            ((key % partitions) as i32, None, v.to_string(), Some(ts))
        }),
    )
    .expect("write the input");
}

/// The values of `topic` as a reader with `read_committed` (or not) sees them, sorted.
pub fn values(bootstrap: &str, topic: &str, committed: bool) -> Vec<String> {
    let mut v: Vec<String> = read_to_end(bootstrap, topic, committed)
        .expect("read the output")
        .into_iter()
        .map(|r| r.value)
        .collect();
    v.sort();
    v
}
