//! The windowed job over a log topic shared by the crash tests (tests/kill_restore.rs,
//! tests/runner.rs): its input, its spec, and how its outputs are read back; and what
//! tests of a running `brook` child need: waiting, metrics, checkpoints.

// Each test binary uses what it needs of this module.
#![allow(dead_code)]

pub(crate) mod kafka;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::Duration;

use brook::core::time::Stopwatch;

use brook::log::{IsolationLevel, Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};

/// `events` events of 50 keys over the 2 partitions of topic `events` (and an empty
/// topic `out` of 3 partitions for the log sink); event time mostly increasing by 1 ms
/// per event with some disorder, and every 997th event an hour late.
pub(crate) fn produce(data: &Path, events: i64) {
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
pub(crate) fn spec(dir: &Path, checkpoint_interval: &str, state_backend: Option<&str>) -> PathBuf {
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
pub(crate) fn topic_rows(data: &Path, isolation: IsolationLevel) -> Vec<String> {
    let options = LogOptions {
        maintenance_interval_ms: None,
        ..LogOptions::default()
    };
    let log = Log::open(data, options).expect("open the log");
    let mut rows = Vec::new();
    for p in log.topic("out").expect("out").partitions() {
        let mut recs = Vec::new();
        let mut at = p.log_start_offset();
        while at < p.end_offset(isolation) {
            at = p
                .read_into_isolated(at, ReadLimit::default(), isolation, &mut recs)
                .expect("read")
                .next_offset;
        }
        rows.extend(
            recs.iter()
                .map(|r| String::from_utf8(r.value.to_vec()).expect("UTF-8 rows")),
        );
    }
    rows.sort();
    rows
}

/// The rows of each output (over the files of all subtasks: `per_second.jsonl`, or
/// `per_second-<i>.jsonl` at parallelism > 1, then the log topic read committed),
/// sorted: rows fired by one watermark come in no particular order, so runs are
/// compared as multisets.
pub(crate) fn outputs(dir: &Path, data: &Path) -> Vec<Vec<String>> {
    let mut all: Vec<Vec<String>> = ["per_second", "late", "sessions"]
        .iter()
        .map(|stem| file_rows(&dir.join("out"), stem))
        .collect();
    all.push(topic_rows(data, IsolationLevel::ReadCommitted));
    all
}

/// Polls `f` every 20 ms until it returns a value; fails the test after `timeout`.
pub(crate) fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Stopwatch::start();
    loop {
        if let Some(v) = f() {
            return v;
        }
        let elapsed = Duration::from_nanos(start.elapsed_nanos());
        assert!(elapsed < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An address on a free local port, for `--metrics-addr`.
pub(crate) fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    l.local_addr().expect("its address").to_string()
}

/// The body of `GET /metrics` at `addr`; `None` while nothing answers there.
pub(crate) fn scrape_metrics(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the Prometheus sample whose name and labels start with `series` (e.g.
/// `brook_late_records_total{operator="paid"`), summed over the subtasks.
pub(crate) fn metric(body: &str, series: &str) -> Option<f64> {
    let values: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The smallest value of the Prometheus samples whose name and labels start with
/// `series` (e.g. `brook_watermark_ms{operator="counts"`), over the subtasks: a
/// watermark every subtask has reached.
pub(crate) fn metric_min(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .reduce(f64::min)
}

/// The id of the newest complete checkpoint (`chk-<id>` with its `_metadata`) in
/// `dir`, if any.
pub(crate) fn latest_checkpoint(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().join("_metadata").exists())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
        .max()
}

/// The lines of every file sink output `{stem}*.jsonl` in `dir` (`stem.jsonl` of
/// parallelism 1 and `stem-<i>.jsonl` of the others, not the hidden part files),
/// sorted.
pub(crate) fn file_rows(dir: &Path, stem: &str) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && name.starts_with(stem) && name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(e.path()).expect("read an output");
            rows.extend(text.lines().map(str::to_string));
        }
    }
    rows.sort();
    rows
}

/// Waits up to `limit` for `child` to exit (polling every 50 ms: a count, not a clock
/// read), then collects what it wrote to its piped outputs: `Ok` when it exited in
/// time, `Err` when it was still running and was killed (SIGKILL) at the limit.
pub(crate) fn wait_bounded(mut child: Child, limit: Duration) -> Result<Output, Output> {
    for _ in 0..limit.as_millis().div_ceil(50) {
        if child.try_wait().expect("poll the child").is_some() {
            return Ok(child.wait_with_output().expect("collect the output"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    Err(child.wait_with_output().expect("collect the output"))
}

/// A child process killed (SIGKILL) and reaped when dropped, so a test that fails while
/// a `brook` that never ends on its own (a followed file, an unbounded topic) runs
/// does not leave it running for the rest of the suite.
pub(crate) struct KillOnDrop(pub(crate) Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
