//! `cargo bench --bench yaml_arrow`: a filter + map job written in YAML, run through
//! `brook run`'s code path (spec::parse -> validate -> build -> execute), against the
//! same job written with the typed Rust API, in the same run (issue 18).
//!
//! The job: the generator's W1 events (key = i * 2654435761 mod 10000, ts = i, value =
//! i mod 100) -> `filter: "value % 4 <> 0"` (keeps 75%) -> `map: {dollars: "value /
//! 100.0", bucket: "key % 16"}` -> a sink that drops the rows (`blackhole`, Flink's), at
//! parallelism 1. Rows per CPU-second of the whole process (every thread, from
//! `/proc/self/stat`, 10 ms resolution) over all rounds, alternating which side goes
//! first, and the ratio YAML / typed. Both sides must deliver the same number of rows
//! to their sink.
//!
//! Knobs: `BROOK_BENCH_SCALE` (of 50 M rows: at 5 M a job's start, 0.1-0.2 s, was
//! half of the time), `BROOK_BENCH_REPS` (3). Run without
//! `--bench` (as `cargo test --all-targets` does) it only checks both jobs on a small
//! input.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use brook::core::time::process_cpu_secs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brook::connectors::{GeneratorEvent, GeneratorSource};
use brook::core::element::Batch;
use brook::core::operator::{OpResult, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::engine::{JobConfig, StreamEnvironment};

const KEYS: u64 = 10_000;

/// The typed job's output row.
type Out = (u64, i64, i64, f64, u64);

/// A job of `n` rows: the rows reaching its sink.
type Job = fn(u64) -> u64;

/// Counts what it receives, and drops it.
#[derive(Clone, Default)]
struct Discard {
    seen: Arc<AtomicU64>,
}

impl Sink for Discard {
    type In = Out;
    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = Out>>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for Discard {
    type In = Out;
    fn write_batch(&mut self, batch: Batch<Out>) -> OpResult {
        self.seen.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn yaml(n: u64) -> String {
    format!(
        r#"
name: filter-map
sources:
  - {{name: events, connector: generator, count: {n}, keys: {KEYS}}}
steps:
  - {{name: kept, filter: "value % 4 <> 0"}}
  - {{name: priced, map: {{dollars: "value / 100.0", bucket: "key % 16"}}}}
sinks:
  - {{name: out, connector: blackhole}}
"#
    )
}

/// The YAML job through `brook run`'s code path: rows reaching the sink.
fn yaml_job(n: u64) -> u64 {
    let spec = brook::spec::parse(&yaml(n)).unwrap();
    let valid = brook::spec::validate(spec).unwrap();
    let built = brook::spec::build(&valid, JobConfig::with_parallelism(1), None).unwrap();
    let result = built.env.execute("filter-map").unwrap();
    result
        .vertices
        .iter()
        .find(|(name, _)| name == "out")
        .map(|(_, t)| t.records_in)
        .unwrap()
}

/// The same job with typed records.
fn typed_job(n: u64) -> u64 {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let sink = Discard::default();
    let source = GeneratorSource::builder()
        .events(n)
        .keys(KEYS)
        .build()
        .unwrap();
    env.source(source)
        .filter(|e: &GeneratorEvent| e.value % 4 != 0)
        .map(|e: GeneratorEvent| (e.key, e.ts, e.value, e.value as f64 / 100.0, e.key % 16))
        .sink(sink.clone());
    env.execute("filter-map-typed").unwrap();
    sink.seen.load(Ordering::Relaxed)
}

/// Runs `job`: (CPU seconds, wall seconds, rows out).
fn timed(job: impl FnOnce() -> u64) -> (Option<f64>, f64, u64) {
    let cpu0 = process_cpu_secs();
    let t = Instant::now();
    let rows = job();
    let wall = t.elapsed().as_secs_f64();
    (cpu0.zip(process_cpu_secs()).map(|(a, b)| b - a), wall, rows)
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (n, reps) = if bench {
        (
            (50_000_000.0 * env_f64("BROOK_BENCH_SCALE", 1.0)) as u64,
            env_f64("BROOK_BENCH_REPS", 3.0) as usize,
        )
    } else {
        (20_000, 1)
    };
    let expected = (0..n).filter(|i| (i % 100) % 4 != 0).count() as u64;
    let (mut yaml_cpu, mut typed_cpu) = (0.0, 0.0);
    for rep in 0..reps {
        let mut run = |yaml_first: bool| {
            let sides: [(&str, Job); 2] = if yaml_first {
                [("yaml", yaml_job), ("typed", typed_job)]
            } else {
                [("typed", typed_job), ("yaml", yaml_job)]
            };
            for (name, job) in sides {
                let (cpu, wall, rows) = timed(|| job(n));
                assert_eq!(rows, expected, "{name}: rows reaching the sink");
                let cpu = cpu.unwrap_or(wall);
                eprintln!("round {rep} {name}: {wall:.3} s wall, {cpu:.2} s CPU");
                if name == "yaml" {
                    yaml_cpu += cpu;
                } else {
                    typed_cpu += cpu;
                }
            }
        };
        run(rep % 2 == 0);
    }
    if !bench {
        println!("yaml_arrow: both jobs deliver {expected} of {n} rows (smoke run)");
        return;
    }
    let rate = |cpu: f64| (n * reps as u64) as f64 / cpu.max(0.01);
    let (y, t) = (rate(yaml_cpu), rate(typed_cpu));
    println!(
        "yaml_arrow: {n} rows x {reps}, generator -> filter -> map -> blackhole, parallelism 1"
    );
    println!(
        "{:<26} {:>14} {:>14} {:>8}",
        "job", "YAML rows/CPU-s", "typed rows/CPU-s", "ratio"
    );
    println!(
        "{:<26} {:>14.0} {:>14.0} {:>8.2}",
        "filter + map",
        y,
        t,
        y / t
    );
}
