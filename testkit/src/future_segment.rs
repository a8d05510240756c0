//! A data directory whose log has a segment that time retention would delete but keeps,
//! because it holds a record stamped in the future (as Kafka: retention goes by a
//! segment's newest timestamp), for the tests of the warning and the gauge.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use brook_core::time::{Clock, SystemClock};
use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};

/// Creates topic `topic` (one partition, `retention.ms` one hour) in the log of
/// `data_dir`: segment 0 holds one record stamped ten hours ahead and its file says it
/// was written two hours ago; segment 1 (active) holds one record of now. The log's
/// next retention pass keeps segment 0 only for its future timestamp, and counts it in
/// `segments_held_by_future_timestamps`.
///
/// # Panics
/// If the log cannot be written (a test failure).
pub fn segment_held_by_a_future_timestamp(data_dir: &Path, topic: &str) {
    let now_ms = SystemClock.now_ms();
    let log = Log::open(data_dir, LogOptions::default()).expect("open the log");
    let config = TopicConfig {
        retention_ms: Some(3_600_000),
        ..TopicConfig::default()
    };
    let p = log
        .create_topic(topic, 1, config)
        .expect("create the topic")
        .partition(0)
        .expect("partition 0");
    let future = now_ms + 10 * 3_600_000;
    p.append(&[ProducerRecord::new("ahead").with_timestamp(future)])
        .expect("append");
    p.roll().expect("roll");
    p.append(&[ProducerRecord::new("now")]).expect("append");
    log.close().expect("close the log");
    // Written two hours ago, as far as the file system can tell.
    let seg = data_dir.join(format!("topics/{topic}/0/00000000000000000000.log"));
    std::fs::File::options()
        .write(true)
        .open(&seg)
        .expect("open segment 0")
        .set_modified(UNIX_EPOCH + Duration::from_millis((now_ms - 2 * 3_600_000) as u64))
        .expect("set its modification time");
}
