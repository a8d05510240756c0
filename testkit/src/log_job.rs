//! The windowed job over a log topic shared by the crash tests (tests/kill_restore.rs,
//! tests/runner.rs): its input, its spec, and how its outputs are read back.

use std::path::{Path, PathBuf};

use brook_log::{IsolationLevel, Log, LogOptions, ProducerRecord, ReadLimit, Record, TopicConfig};

use crate::files::file_rows;

/// `events` events of 50 keys over the 2 partitions of topic `events` (and an empty
/// topic `out` of 3 partitions for the log sink); event time mostly increasing by 1 ms
/// per event with some disorder, and every 997th event an hour late.
pub fn produce(data: &Path, events: i64) {
    let log = Log::open(data, LogOptions::default()).expect("open the log");
    log.create_topic("events", 2, TopicConfig::default())
        .expect("create events");
    log.create_topic("out", 3, TopicConfig::default())
        .expect("create out");
    let t = log.topic("events").expect("events");
    let mut batch: [Vec<ProducerRecord>; 2] = [Vec::new(), Vec::new()];
    for i in 0..events {
        let key = (i * 7919) % 50;
        let mut ts = 1_000_000 + i - (i % 13) * 7;
        if i % 997 == 0 {
            ts -= 3_600_000;
        }
        let v = serde_json::json!({ "key": format!("k{key}"), "value": i % 100, "ts": ts });
        let p = (key % 2) as usize;
        let bytes = serde_json::to_vec(&v).expect("JSON");
        batch[p].push(ProducerRecord::new(bytes).with_timestamp(ts));
        if batch[p].len() == 500 {
            let part = t.partition(p as u32).expect("partition");
            part.append(&batch[p]).expect("append");
            batch[p].clear();
        }
    }
    for (p, b) in batch.iter().enumerate() {
        if !b.is_empty() {
            let part = t.partition(p as u32).expect("partition");
            part.append(b).expect("append");
        }
    }
}

/// Writes `dir/job.yaml`: tumbling windows with late rows to a file, session windows,
/// two-phase-commit file sinks and a transactional log sink, checkpoints every
/// `checkpoint_interval` (`40ms`), on `state_backend` when given (else the default).
///
/// One source subtask reads both partitions in an order fixed by their offsets, and
/// each window subtask has that one input: the run is deterministic, so a restored
/// run can be compared with a clean one row for row.
pub fn spec(dir: &Path, checkpoint_interval: &str, state_backend: Option<&str>) -> PathBuf {
    let backend = state_backend.map_or(String::new(), |b| format!("state_backend: {b}\n"));
    let yaml = format!(
        r#"
name: windows
checkpoint_interval: {checkpoint_interval}
{backend}sources:
  - name: events
    connector: log
    parallelism: 1
    topic: events
    event_time: ts
    watermark: {{ out_of_orderness: 100ms, interval: 0 }}
steps:
  - key_by: [key]
  - name: per-second
    window: {{ kind: tumbling, size: 1s }}
    aggregate: {{ n: count(), total: sum(value) }}
    late_output: late
  - name: sessions
    input: events
    key_by: [key]
  - name: session-windows
    window: {{ kind: session, gap: 30ms }}
    aggregate: {{ n: count(), first: first(value), last: last(value) }}
sinks:
  - {{ name: out, connector: file, path: out/per_second.jsonl, input: per-second }}
  - {{ name: late, connector: file, path: out/late.jsonl }}
  - {{ name: sess, connector: file, path: out/sessions.jsonl, input: session-windows }}
  - {{ name: logout, connector: log, topic: out, input: per-second }}
"#
    );
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).expect("write the spec");
    path
}

/// The records of the log topic `out` as a reader of `isolation` sees them, sorted.
pub fn topic_rows(data: &Path, isolation: IsolationLevel) -> Vec<String> {
    let options = LogOptions {
        maintenance_interval_ms: None,
        ..LogOptions::default()
    };
    let log = Log::open(data, options).expect("open the log");
    let mut rows: Vec<String> = topic_records(&log, "out", isolation)
        .iter()
        .map(|r| String::from_utf8(r.value.to_vec()).expect("UTF-8 rows"))
        .collect();
    rows.sort();
    rows
}

/// Every record of `topic` of `log` as a reader of `isolation` sees them, partition
/// after partition.
pub fn topic_records(log: &Log, topic: &str, isolation: IsolationLevel) -> Vec<Record> {
    let mut recs = Vec::new();
    for p in log.topic(topic).expect("topic").partitions() {
        let mut at = p.log_start_offset();
        while at < p.end_offset(isolation) {
            at = p
                .read_into_isolated(at, ReadLimit::default(), isolation, &mut recs)
                .expect("read")
                .next_offset;
        }
    }
    recs
}

/// The rows of each output (over the files of all subtasks: `per_second.jsonl`, or
/// `per_second-<i>.jsonl` at parallelism > 1, then the log topic read committed),
/// sorted: rows fired by one watermark come in no particular order, so runs are
/// compared as multisets.
pub fn outputs(dir: &Path, data: &Path) -> Vec<Vec<String>> {
    let mut all: Vec<Vec<String>> = ["per_second", "late", "sessions"]
        .iter()
        .map(|stem| file_rows(&dir.join("out"), stem))
        .collect();
    all.push(topic_rows(data, IsolationLevel::ReadCommitted));
    all
}

/// How many offsets of the log topic `out` lie beyond its partitions' last stable
/// offsets (summed over the partitions): 0 when every transaction is decided, more
/// while one that wrote records is neither committed nor aborted, as a run killed
/// in the middle of a transaction leaves it until a restore decides it.
pub fn undecided_records(data: &Path) -> u64 {
    let options = LogOptions {
        maintenance_interval_ms: None,
        ..LogOptions::default()
    };
    let log = Log::open(data, options).expect("open the log");
    log.topic("out")
        .expect("out")
        .partitions()
        .iter()
        .map(|p| {
            p.end_offset(IsolationLevel::ReadUncommitted)
                - p.end_offset(IsolationLevel::ReadCommitted)
        })
        .sum()
}
