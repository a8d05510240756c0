//! Log benchmark: append and sequential-read throughput of the embedded log, each
//! beside a plain-file baseline measured in the same run.
//!
//! Run with `cargo bench --bench log`. See `benches/README.md` for what is measured and
//! the latest results. Environment:
//!
//! - `BROOK_BENCH_SCALE` (default 1.0) multiplies the record counts (use 0.1 for a
//!   quick smoke run);
//! - `BROOK_BENCH_REPS` (default 5) is how many times each measurement and its
//!   baseline run, interleaved; the table shows medians;
//! - `BROOK_BENCH_DIR` is where the data goes (default: a temporary directory);
//! - `BROOK_BENCH_INTERVAL_MS` (default 250) is the `interval` fsync policy measured;
//! - `BROOK_BENCH_ONLY=append|read` runs only that part (for profiling);
//!   `read_into` or `read_with` runs only the reads with that API.
//!
//! All records have a 100-byte value, no key, no headers. MB/s counts payload bytes
//! (100 per record) on both sides, so the log's framing overhead is its own cost.
#![allow(clippy::disallowed_methods)] // measuring time is the point: Instant::now
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::hint::black_box;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brook_log::{FsyncPolicy, Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};

const VALUE_LEN: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fsync {
    Never,
    /// fsync every this many ms.
    Interval(i64),
}

impl Fsync {
    fn policy(self) -> FsyncPolicy {
        match self {
            Fsync::Never => FsyncPolicy::Never,
            Fsync::Interval(ms) => FsyncPolicy::Interval(ms),
        }
    }
    fn name(self) -> String {
        match self {
            Fsync::Never => "never".into(),
            Fsync::Interval(ms) => format!("interval={ms}ms"),
        }
    }
}

fn payload() -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    for (i, b) in v.iter_mut().enumerate() {
        *b = b'a' + (i % 26) as u8;
    }
    v
}

fn log_options(fsync: FsyncPolicy) -> LogOptions {
    LogOptions {
        fsync,
        ..Default::default()
    }
}

/// Appends `records` 100-byte records in batches of `batch` to a fresh one-partition
/// topic; times the appends only (closing the log is not part of an append).
fn log_append(dir: &Path, fsync: Fsync, batch: usize, records: usize) -> Duration {
    let _ = std::fs::remove_dir_all(dir);
    let log = Log::open(dir, log_options(fsync.policy())).unwrap();
    let topic = log
        .create_topic("bench", 1, TopicConfig::default())
        .unwrap();
    let part = topic.partition(0).unwrap();
    // Clones share the value's buffer.
    let batch_records = vec![ProducerRecord::new(payload().to_vec()); batch];
    let batches = records / batch;
    let start = Instant::now();
    for _ in 0..batches {
        black_box(part.append(&batch_records).unwrap());
    }
    let elapsed = start.elapsed();
    assert_eq!(part.log_end_offset(), (batches * batch) as u64);
    // Drop the data without waiting for a final fsync of hundreds of MB.
    drop(part);
    drop(topic);
    drop(log);
    let _ = std::fs::remove_dir_all(dir);
    elapsed
}

/// Writes the same payloads with a `BufWriter` to a plain file, flushing at the end;
/// under `interval`, also flushes and fsyncs whenever the interval has passed since the
/// last fsync (or the start; checked every 1000 records), as the log does.
fn baseline_append(path: &Path, fsync: Fsync, records: usize) -> Duration {
    let _ = std::fs::remove_file(path);
    let file = File::create(path).unwrap();
    let p = payload();
    let interval = match fsync {
        Fsync::Interval(ms) => Some(Duration::from_millis(ms as u64)),
        Fsync::Never => None,
    };
    let start = Instant::now();
    let mut last_sync = start;
    let mut w = BufWriter::new(file);
    for i in 0..records {
        w.write_all(black_box(&p)).unwrap();
        if i % 1000 == 999 && interval.is_some_and(|iv| last_sync.elapsed() >= iv) {
            w.flush().unwrap();
            w.get_ref().sync_data().unwrap();
            last_sync = Instant::now();
        }
    }
    w.flush().unwrap();
    let elapsed = start.elapsed();
    drop(w);
    let _ = std::fs::remove_file(path);
    elapsed
}

/// Reads the whole partition with `Partition::read_into`, `limit` per call, as a
/// consumer would (each call's records are dropped before the next), touching every
/// value.
fn log_read(log: &Log, records: usize, limit: ReadLimit) -> Duration {
    let part = log.topic("bench").unwrap().partition(0).unwrap();
    let mut out = Vec::with_capacity(limit.max_records.min(1 << 20));
    let start = Instant::now();
    let mut offset = 0u64;
    let mut bytes = 0usize;
    loop {
        out.clear();
        let n = part.read_into(offset, limit, &mut out).unwrap();
        if n == 0 {
            break;
        }
        for r in &out {
            bytes += black_box(r.value.len());
        }
        offset += n as u64;
    }
    out.clear();
    let elapsed = start.elapsed();
    assert_eq!(offset as usize, records);
    assert_eq!(bytes, records * VALUE_LEN);
    elapsed
}

/// Reads the whole partition with `Partition::read_with` (borrowed records, no owned
/// `Record` per record), `limit` per call, touching every value as `log_read` does.
fn log_read_with(log: &Log, records: usize, limit: ReadLimit) -> Duration {
    let part = log.topic("bench").unwrap().partition(0).unwrap();
    let start = Instant::now();
    let mut offset = 0u64;
    let mut bytes = 0usize;
    loop {
        let s = part
            .read_with(offset, limit, |r| bytes += black_box(r.value).len())
            .unwrap();
        if s.records == 0 {
            break;
        }
        offset = s.next_offset;
    }
    let elapsed = start.elapsed();
    assert_eq!(offset as usize, records);
    assert_eq!(bytes, records * VALUE_LEN);
    elapsed
}

/// Reads the plain file in 100-byte records through a `BufReader`.
fn baseline_read(path: &Path, records: usize) -> Duration {
    let file = File::open(path).unwrap();
    let start = Instant::now();
    let mut r = BufReader::new(file);
    let mut buf = [0u8; VALUE_LEN];
    let mut n = 0usize;
    let mut sum = 0usize;
    while r.read_exact(&mut buf).is_ok() {
        sum += usize::from(black_box(&buf)[0]);
        n += 1;
    }
    let elapsed = start.elapsed();
    black_box(sum);
    assert_eq!(n, records);
    elapsed
}

/// Sequential read: one partition written in batches of 1000, and the same payloads
/// in a plain file; both are in the page cache (warm-up reads first). One row per
/// read limit and read API (`read_into`, `read_with`).
fn read_rows(
    log_dir: &Path,
    base_file: &Path,
    records: usize,
    reps: usize,
    only: &str,
) -> Vec<Row> {
    let _ = std::fs::remove_dir_all(log_dir);
    let log = Log::open(log_dir, log_options(FsyncPolicy::Never)).unwrap();
    {
        let part = log
            .create_topic("bench", 1, TopicConfig::default())
            .unwrap()
            .partition(0)
            .unwrap();
        let batch = vec![ProducerRecord::new(payload().to_vec()); 1000];
        for _ in 0..records / 1000 {
            part.append(&batch).unwrap();
        }
        let mut w = BufWriter::new(File::create(base_file).unwrap());
        for _ in 0..records {
            w.write_all(&payload()).unwrap();
        }
        w.flush().unwrap();
    }
    let limits = [
        ("10k records / 16 MiB", 10_000, 16 << 20),
        ("100k records / 64 MiB", 100_000, 64 << 20),
        ("500 records / 1 MiB (default)", 500, 1 << 20),
    ];
    type ReadFn = fn(&Log, usize, ReadLimit) -> Duration;
    let apis: [(&str, ReadFn); 2] = [("read_into", log_read), ("read_with", log_read_with)];
    let mut rows = Vec::new();
    for (name, max_records, max_bytes) in limits {
        let limit = ReadLimit {
            max_records,
            max_bytes,
        };
        for (api, read) in apis {
            if only.starts_with("read_") && only != api {
                continue;
            }
            let name = format!("read ({api}), {name} per call");
            eprintln!("{name}: {records} records x {reps}");
            read(&log, records, limit);
            baseline_read(base_file, records);
            let (l, b) = interleaved(
                reps,
                || read(&log, records, limit),
                || baseline_read(base_file, records),
            );
            rows.push(Row {
                name,
                records,
                log: l,
                base: b,
                target: Some(0.8),
            });
        }
    }
    drop(log);
    let _ = std::fs::remove_dir_all(log_dir);
    let _ = std::fs::remove_file(base_file);
    rows
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Row {
    name: String,
    records: usize,
    log: Duration,
    base: Duration,
    target: Option<f64>,
}

impl Row {
    fn rate(&self, d: Duration) -> (f64, f64) {
        let secs = d.as_secs_f64();
        let recs = self.records as f64 / secs;
        (recs, recs * VALUE_LEN as f64 / 1e6)
    }
}

/// Runs `log` and `base` `reps` times each, interleaved (alternating which goes first),
/// and returns their medians.
fn interleaved(
    reps: usize,
    mut log: impl FnMut() -> Duration,
    mut base: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    let (mut l, mut b) = (Vec::new(), Vec::new());
    for i in 0..reps {
        if i % 2 == 0 {
            b.push(base());
            l.push(log());
        } else {
            l.push(log());
            b.push(base());
        }
    }
    let ms = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.0}", d.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!("  runs (ms): log {}; baseline {}", ms(&l), ms(&b));
    (median(l), median(b))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number, not {s:?}"))
        })
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too with other
    // arguments, where a full run is not wanted.
    if !std::env::args().any(|a| a == "--bench") {
        println!("log benchmark: run with `cargo bench --bench log`");
        return;
    }
    let scale: f64 = env_or("BROOK_BENCH_SCALE", 1.0);
    let reps: usize = env_or("BROOK_BENCH_REPS", 5).max(1);
    let tmp;
    let root: PathBuf = match std::env::var_os("BROOK_BENCH_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).unwrap();
            PathBuf::from(d)
        }
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().to_path_buf()
        }
    };
    let scaled = |n: usize| ((n as f64 * scale) as usize).max(1000);
    let log_dir = root.join("log");
    let base_file = root.join("baseline.dat");
    let mut rows = Vec::new();

    let only = std::env::var("BROOK_BENCH_ONLY").unwrap_or_default();
    let interval = Fsync::Interval(env_or("BROOK_BENCH_INTERVAL_MS", 250));
    let appends = if only.is_empty() || only == "append" {
        vec![Fsync::Never, interval]
    } else {
        Vec::new()
    };
    for fsync in appends {
        // Runs of about a second (on a 2-core VM); under `interval`, a run spans several
        // intervals, so both sides fsync several times.
        let cases: [(usize, usize); 3] = match fsync {
            Fsync::Never => [(1, 500_000), (100, 5_000_000), (1000, 8_000_000)],
            Fsync::Interval(_) => [(1, 500_000), (100, 4_000_000), (1000, 6_000_000)],
        };
        for (batch, n) in cases {
            let records = scaled(n) / batch * batch;
            let name = format!("append batch={batch} fsync={}", fsync.name());
            eprintln!("{name}: {records} records x {reps}");
            let (log, base) = interleaved(
                reps,
                || log_append(&log_dir, fsync, batch, records),
                || baseline_append(&base_file, fsync, records),
            );
            rows.push(Row {
                name,
                records,
                log,
                base,
                target: (batch == 1000).then_some(0.7),
            });
        }
    }

    if only.is_empty() || only.starts_with("read") {
        let records = scaled(8_000_000) / 1000 * 1000;
        rows.extend(read_rows(&log_dir, &base_file, records, reps, &only));
    }

    println!();
    println!("median of {reps} interleaved runs; 100-byte values, no key; MB/s = payload bytes");
    println!();
    println!(
        "| {:<58} | {:>9} | {:>12} | {:>8} | {:>12} | {:>8} | {:>8} | {:<9} |",
        "measurement",
        "records",
        "log rec/s",
        "log MB/s",
        "base rec/s",
        "base MB/s",
        "log/base",
        "target"
    );
    println!(
        "|{:-<60}|{:-<11}|{:-<14}|{:-<10}|{:-<14}|{:-<10}|{:-<10}|{:-<11}|",
        "", "", "", "", "", "", "", ""
    );
    for r in &rows {
        let (lr, lm) = r.rate(r.log);
        let (br, bm) = r.rate(r.base);
        let ratio = lr / br;
        let target = match r.target {
            Some(t) if ratio >= t => format!(">= {t}: ok"),
            Some(t) => format!(">= {t}: MISS"),
            None => String::new(),
        };
        println!(
            "| {:<58} | {:>9} | {:>12.0} | {:>8.1} | {:>12.0} | {:>8.1} | {:>8.2} | {:<9} |",
            r.name, r.records, lr, lm, br, bm, ratio, target
        );
    }
}
