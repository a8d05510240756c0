//! `cargo bench --bench yaml_arrow`: jobs written in YAML, run through `brook run`'s
//! code path (spec::parse -> validate -> build -> execute), against the same jobs
//! written with the typed Rust API, in the same run (issue 18).
//!
//! The jobs, at parallelism 1, in-memory state, each to a sink that drops the rows
//! (`blackhole`, Flink's):
//! - **filter + map**: the generator's W1 events (key = i * 2654435761 mod 10000, ts =
//!   i, value = i mod 100) -> `filter: "value % 4 <> 0"` (keeps 75%) -> `map: {dollars:
//!   "value / 100.0", bucket: "key % 16"}`.
//! - **W1-W4** of `../shared/docs/workloads.md`: the generator's events (W3: its
//!   `bursts` pattern) -> key_by key -> the workload's window -> count() and
//!   sum(value), watermarks with 0 ms out-of-orderness.
//!
//! Events per CPU-second of the whole process (every thread, from `/proc/self/stat`,
//! 10 ms resolution) over all rounds, alternating which side goes first, and the ratio
//! YAML / typed. Both sides must deliver the same number of rows to their sink, the
//! number workloads.md gives.
//!
//! - **file filter + map**, **file W1**: the same events as JSON lines in a file
//!   (`{"key": .., "ts": .., "value": ..}`, 4 M lines at scale 1), read by a file source
//!   with a declared `schema:` (straight into Arrow batches) -> the filter + map above /
//!   W1's window; the typed side reads the file with `FileSource::jsonl::<Event>`
//!   (serde). **log filter + map**, **log W1**: the same with the events as JSON values
//!   of a one-partition topic of a log open in the process (`LogSource::json::<Event>`
//!   on the typed side). With `BROOK_BENCH_ROW_PATH` also the YAML jobs without
//!   `schema:` (each record a JSON row first, the path before batches).
//!
//! - **enrich**: the generator's events -> `enrich` with a lookup table file of the
//!   10 000 keys (`{"key": k, "name": "key-k", "tier": k % 5}`, 9 000 of them: a
//!   tenth of the events miss and pass with nulls) -> `blackhole`; the typed side looks
//!   each event's key up in a `HashMap` of the same rows (`Arc<str>` names, so no
//!   allocation per event) in a `map`. With `BROOK_BENCH_ROW_PATH` also the YAML job
//!   with its enrich step on JSON rows (`ValidSpec::enrich_and_joins_on_rows`, the path before).
//! - **join**: two generators of the same events with 1,000 keys (each key once per
//!   second on each side) -> a window join on `key`, tumbling 1 s -> `blackhole`: one
//!   result per event pair; against the typed `window_join` of the same generators.
//!   Events are counted on both inputs. With `BROOK_BENCH_ROW_PATH` also the YAML join
//!   on JSON rows.
//!
//! With `BROOK_BENCH_STATE=rocksdb` both sides keep their keyed state in RocksDB and
//! take a checkpoint every second (for the windows; filter + map has no state).
//!
//! Knobs: `BROOK_BENCH_SCALE` (of 50 M rows for filter + map, 10 M events for W1 and
//! W3, 2 M for W2, 20 M for W4), `BROOK_BENCH_REPS` (3), `BROOK_BENCH_ONLY` (a
//! comma-separated list of `filter-map`, `W1`..`W4`, `W4-wide` (W4 with four aggregates), `file-filter-map`, `file-W1`, `file-filter-map-file`, `log-filter-map`, `log-W1`, `enrich`, `join`), `BROOK_BENCH_SIDE` (`yaml` or
//! `typed`: run one side only, for a profile), `BROOK_BENCH_ROW_PATH` (set: also each
//! window with a `late_output` on JSON rows, as before issue 18 step 4
//! (`ValidSpec::windows_on_rows`), and on typed state). Run
//! without `--bench` (as `cargo test --all-targets` does) it only checks each job on a
//! small input.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use brook::core::time::process_cpu_secs;
use brook::core::watermark::WatermarkStrategy;
use brook::operators::window::assigner::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows, WindowAssigner,
};
use brook::operators::window::{Count, Max, Min, Sum};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brook::connectors::{FileSource, GeneratorEvent, GeneratorSource};
use brook::core::element::Batch;
use brook::core::operator::{OpResult, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::engine::{CheckpointConfig, JobConfig, StateBackendFactory, StreamEnvironment};
use brook::state::RocksDbOptions;

const KEYS: u64 = 10_000;

/// The typed filter + map job's output row.
type Out = (u64, i64, i64, f64, u64);

/// The typed window jobs' output row.
type WindowOut = brook::operators::window::WindowResult<u64, (u64, i64)>;

/// Counts what it receives, and drops it.
struct Discard<T> {
    seen: Arc<AtomicU64>,
    _rows: std::marker::PhantomData<fn(T)>,
}

impl<T> Default for Discard<T> {
    fn default() -> Self {
        Discard {
            seen: Arc::default(),
            _rows: std::marker::PhantomData,
        }
    }
}

impl<T> Clone for Discard<T> {
    fn clone(&self) -> Self {
        Discard {
            seen: Arc::clone(&self.seen),
            _rows: std::marker::PhantomData,
        }
    }
}

impl<T: Send + 'static> Sink for Discard<T> {
    type In = T;
    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.clone()))
    }
}

impl<T: Send + 'static> SinkWriter for Discard<T> {
    type In = T;
    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
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

/// The YAML filter + map job through `brook run`'s code path: rows reaching the sink.
fn yaml_job(n: u64) -> u64 {
    run_yaml(&yaml(n))
}

/// The jobs' configuration: parallelism 1; with `BROOK_BENCH_STATE=rocksdb`, keyed state
/// in RocksDB (`RocksDbOptions::default()`, as `brook run`) and a checkpoint every
/// second, both under a fresh temporary directory (the same for the YAML and the typed
/// side).
fn config() -> (JobConfig, Option<tempfile::TempDir>) {
    let mut config = JobConfig::with_parallelism(1);
    if std::env::var("BROOK_BENCH_STATE").is_ok_and(|s| s == "rocksdb") {
        let dir = tempfile::tempdir().unwrap();
        config.state_backend =
            StateBackendFactory::rocksdb(dir.path().join("state"), RocksDbOptions::default());
        config.checkpoint = Some(CheckpointConfig::new(dir.path().join("checkpoints"), 1000));
        return (config, Some(dir));
    }
    (config, None)
}

/// A YAML job (its sink named `out`) through `brook run`'s code path: rows reaching
/// the sink.
fn run_yaml(yaml: &str) -> u64 {
    run_yaml_on(yaml, None)
}

/// [`run_yaml`] with its windows on JSON rows (the row path).
fn run_yaml_on_rows(yaml: &str) -> u64 {
    run_yaml_with(yaml, None, brook::spec::ValidSpec::windows_on_rows)
}

/// [`run_yaml`] with `log` open in the process (`log` sources read it).
fn run_yaml_on(yaml: &str, log: Option<&brook::log::Log>) -> u64 {
    run_yaml_with(yaml, log, |_| {})
}

/// Runs `yaml` after `plan` changes its validated plan (to put steps on JSON rows).
fn run_yaml_with(
    yaml: &str,
    log: Option<&brook::log::Log>,
    plan: impl FnOnce(&mut brook::spec::ValidSpec),
) -> u64 {
    let spec = brook::spec::parse(yaml).unwrap();
    let mut valid = brook::spec::validate(spec).unwrap();
    plan(&mut valid);
    let (config, _dir) = config();
    let built = brook::spec::build_on(&valid, config, log.map(brook::spec::JobLog::Local)).unwrap();
    rows_into_out(&built.env.execute("yaml").unwrap())
}

/// The rows a finished job's sink `out` received.
fn rows_into_out(result: &brook::engine::JobResult) -> u64 {
    result
        .vertices
        .iter()
        .find(|(name, _)| name == "out")
        .map(|(_, t)| t.records_in)
        .unwrap()
}

/// The filter + map job with typed records.
fn typed_job(n: u64) -> u64 {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let sink = Discard::<Out>::default();
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

/// W1-W4 of workloads.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    W1,
    W2,
    W3,
    W4,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
        }
    }

    /// Events per round at scale 1.
    fn events(self) -> f64 {
        match self {
            Workload::W1 | Workload::W3 => 10_000_000.0,
            Workload::W2 => 2_000_000.0,
            Workload::W4 => 20_000_000.0,
        }
    }

    fn keys(self) -> u64 {
        match self {
            Workload::W1 | Workload::W2 => 10_000,
            Workload::W3 => 1000,
            Workload::W4 => 100,
        }
    }

    /// The YAML window.
    fn window(self) -> &'static str {
        match self {
            Workload::W1 | Workload::W4 => "{kind: tumbling, size: 1000}",
            Workload::W2 => "{kind: hopping, size: 10000, slide: 1000}",
            Workload::W3 => "{kind: session, gap: 100}",
        }
    }

    fn assigner(self) -> WindowAssigner {
        match self {
            Workload::W1 | Workload::W4 => TumblingEventTimeWindows::of(1000).unwrap(),
            Workload::W2 => SlidingEventTimeWindows::of(10_000, 1000).unwrap(),
            Workload::W3 => EventTimeSessionWindows::with_gap(100).unwrap(),
        }
    }

    /// The rows workloads.md says a run of `n` events emits (`n` a multiple of 1000).
    fn rows(self, n: u64) -> u64 {
        match self {
            Workload::W1 => n,
            Workload::W2 => 10 * n,
            Workload::W3 => 1000 * n.div_ceil(100_000),
            Workload::W4 => n / 10,
        }
    }

    /// The YAML job; with `late_output`, its window sends late rows to a blackhole.
    fn yaml(self, n: u64, late_output: bool) -> String {
        let pattern = if self == Workload::W3 {
            ", pattern: bursts"
        } else {
            ""
        };
        let (late, late_sink) = if late_output {
            (
                ", late_output: late",
                "\n  - {name: late, connector: blackhole}",
            )
        } else {
            ("", "")
        };
        format!(
            r#"
name: {name}
sources:
  - {{name: events, connector: generator, count: {n}, keys: {keys}{pattern}, event_time: ts, watermark: {{out_of_orderness: 0}}}}
steps:
  - key_by: [key]
  - {{name: window, window: {window}, aggregate: {{count: count(), sum: sum(value)}}{late}}}
sinks:
  - {{name: out, connector: blackhole, input: window}}{late_sink}
"#,
            name = self.name(),
            keys = self.keys(),
            window = self.window(),
        )
    }

    /// The typed job on the same generator: rows reaching the sink.
    fn typed(self, n: u64) -> u64 {
        let (config, _dir) = config();
        let env = StreamEnvironment::new(config);
        let sink = Discard::<WindowOut>::default();
        let source = GeneratorSource::builder()
            .events(n)
            .keys(self.keys())
            .bursts(self == Workload::W3)
            .build()
            .unwrap();
        // The YAML source's strategy (`out_of_orderness: 0`, the default interval).
        let strategy = WatermarkStrategy::<GeneratorEvent>::for_bounded_out_of_orderness(0)
            .with_timestamp_assigner(|e: &GeneratorEvent, _| e.ts);
        env.from_source(source, strategy)
            .key_by(|e: &GeneratorEvent| e.key)
            .window(self.assigner())
            .aggregate((Count, Sum::of(|e: &GeneratorEvent| e.value)))
            .sink(sink.clone());
        env.execute(self.name()).unwrap();
        sink.seen.load(Ordering::Relaxed)
    }
}

/// W4 with four aggregates, three of them of `value`: more values than a row carries
/// inline, so the YAML window reads them from its rows.
fn wide_yaml(n: u64) -> String {
    Workload::W4.yaml(n, false).replace(
        "aggregate: {count: count(), sum: sum(value)}",
        "aggregate: {count: count(), sum: sum(value), lo: min(value), hi: max(value)}",
    )
}

/// The typed job of [`wide_yaml`].
fn wide_typed(n: u64) -> u64 {
    type Wide = brook::operators::window::WindowResult<u64, (u64, i64, Option<i64>, Option<i64>)>;
    let (config, _dir) = config();
    let env = StreamEnvironment::new(config);
    let sink = Discard::<Wide>::default();
    let source = GeneratorSource::builder()
        .events(n)
        .keys(Workload::W4.keys())
        .build()
        .unwrap();
    let strategy = WatermarkStrategy::<GeneratorEvent>::for_bounded_out_of_orderness(0)
        .with_timestamp_assigner(|e: &GeneratorEvent, _| e.ts);
    let value = |e: &GeneratorEvent| e.value;
    env.from_source(source, strategy)
        .key_by(|e: &GeneratorEvent| e.key)
        .window(Workload::W4.assigner())
        .aggregate((Count, Sum::of(value), Min::of(value), Max::of(value)))
        .sink(sink.clone());
    env.execute("W4-wide").unwrap();
    sink.seen.load(Ordering::Relaxed)
}

/// The enrich job's lookup table: every key but each tenth, as JSON lines.
fn write_table(path: &std::path::Path) {
    let text: String = (0..KEYS)
        .filter(|k| k % 10 != 3)
        .map(|k| {
            format!(
                "{{\"key\": {k}, \"name\": \"key-{k}\", \"tier\": {}}}\n",
                k % 5
            )
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

fn enrich_yaml(n: u64, table: &std::path::Path) -> String {
    format!(
        r#"
name: enrich
sources:
  - {{name: events, connector: generator, count: {n}, keys: {KEYS}}}
steps:
  - {{name: with-name, enrich: {{table: {{connector: file, path: {}}}, on: [key]}}}}
sinks:
  - {{name: out, connector: blackhole}}
"#,
        table.display()
    )
}

/// A YAML job on its path (`rows`: its enrich and join steps on JSON rows).
fn run_enrich_yaml(yaml: &str, rows: bool) -> u64 {
    run_yaml_with(yaml, None, |valid| {
        if rows {
            valid.enrich_and_joins_on_rows();
        }
    })
}

/// The typed enrich job: the same lookups in a `map`.
fn typed_enrich(n: u64) -> u64 {
    type Enriched = (u64, i64, i64, Option<(Arc<str>, u64)>);
    let table: std::collections::HashMap<u64, (Arc<str>, u64)> = (0..KEYS)
        .filter(|k| k % 10 != 3)
        .map(|k| (k, (Arc::from(format!("key-{k}")), k % 5)))
        .collect();
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let sink = Discard::<Enriched>::default();
    let source = GeneratorSource::builder()
        .events(n)
        .keys(KEYS)
        .build()
        .unwrap();
    env.source(source)
        .map(move |e: GeneratorEvent| (e.key, e.ts, e.value, table.get(&e.key).cloned()))
        .sink(sink.clone());
    env.execute("enrich-typed").unwrap();
    sink.seen.load(Ordering::Relaxed)
}

const JOIN_KEYS: u64 = 1000;

fn join_yaml(n: u64) -> String {
    let source = |name: &str| {
        format!("{{name: {name}, connector: generator, count: {n}, keys: {JOIN_KEYS}, event_time: ts, watermark: {{out_of_orderness: 0}}}}")
    };
    format!(
        r#"
name: join
sources:
  - {}
  - {}
steps:
  - {{name: joined, join: {{kind: window, left: left, right: right, on: [key], window: {{kind: tumbling, size: 1000}}}}}}
sinks:
  - {{name: out, connector: blackhole}}
"#,
        source("left"),
        source("right")
    )
}

/// The typed window join of the same generators.
fn typed_join(n: u64) -> u64 {
    type Joined = (u64, i64, i64, Option<i64>);
    let (config, _dir) = config();
    let env = StreamEnvironment::new(config);
    let sink = Discard::<Joined>::default();
    let side = || {
        let source = GeneratorSource::builder()
            .events(n)
            .keys(JOIN_KEYS)
            .build()
            .unwrap();
        let strategy = WatermarkStrategy::<GeneratorEvent>::for_bounded_out_of_orderness(0)
            .with_timestamp_assigner(|e: &GeneratorEvent, _| e.ts);
        env.from_source(source, strategy)
            .key_by(|e: &GeneratorEvent| e.key)
    };
    side()
        .window_join(side(), TumblingEventTimeWindows::of(1000).unwrap())
        .unwrap()
        .apply(|l: &GeneratorEvent, r: Option<&GeneratorEvent>| {
            (l.key, l.ts, l.value, r.map(|r| r.value))
        })
        .sink(sink.clone());
    env.execute("join-typed").unwrap();
    sink.seen.load(Ordering::Relaxed)
}

/// One line of the file jobs' input.
#[derive(Debug, Clone, serde::Deserialize)]
struct Event {
    key: i64,
    ts: i64,
    value: i64,
}

/// `n` of the generator's W1 events as JSON lines at `path`.
fn write_events(path: &std::path::Path, n: u64) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let key = (u128::from(i) * 2_654_435_761 % u128::from(KEYS)) as u64;
        writeln!(w, r#"{{"key": {key}, "ts": {i}, "value": {}}}"#, i % 100).unwrap();
    }
    w.flush().unwrap();
}

/// `n` of the generator's W1 events as JSON values in topic `events` (one partition) of
/// a log in `dir`, each with its `ts` as its timestamp.
fn log_events(dir: &std::path::Path, n: u64) -> brook::log::Log {
    use brook::log::{Log, LogOptions, ProducerRecord, TopicConfig};
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let topic = log
        .create_topic("events", 1, TopicConfig::default())
        .unwrap();
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..n {
        let key = (u128::from(i) * 2_654_435_761 % u128::from(KEYS)) as u64;
        let value = format!(r#"{{"key": {key}, "ts": {i}, "value": {}}}"#, i % 100);
        batch.push(ProducerRecord::new(value).with_timestamp(i as i64));
        if batch.len() == 10_000 {
            topic.append(std::mem::take(&mut batch)).unwrap();
        }
    }
    topic.append(batch).unwrap();
    log
}

/// Where the input jobs read their events.
enum Input {
    /// JSON lines in a file.
    File(std::path::PathBuf),
    /// JSON values in topic `events` of a log open in the process.
    Log(brook::log::Log),
}

impl Input {
    /// The YAML source; with `schema`, it declares the events' schema.
    fn source_yaml(&self, schema: bool) -> String {
        let schema = if schema {
            ", schema: {key: int64, ts: int64, value: int64}"
        } else {
            ""
        };
        let connector = match self {
            Input::File(path) => format!("connector: file, path: {}", path.display()),
            Input::Log(_) => "connector: log, topic: events".to_string(),
        };
        format!(
            "{{name: events, {connector}{schema}, event_time: ts, watermark: {{out_of_orderness: 0}}}}"
        )
    }

    fn log(&self) -> Option<&brook::log::Log> {
        match self {
            Input::File(_) => None,
            Input::Log(log) => Some(log),
        }
    }

    /// The typed source: serde's decoder into [`Event`], the YAML job's watermarks.
    fn events(&self, env: &StreamEnvironment) -> brook::engine::DataStream<Event> {
        let strategy = WatermarkStrategy::<Event>::for_bounded_out_of_orderness(0)
            .with_timestamp_assigner(|e: &Event, _| e.ts);
        match self {
            Input::File(path) => env.from_source(FileSource::jsonl::<Event>(path), strategy),
            Input::Log(log) => env.from_source(
                brook::connectors::LogSource::json::<Event>(log, "events").bounded(true),
                strategy,
            ),
        }
    }
}

/// The jobs on the events of an [`Input`].
#[derive(Debug, Clone, Copy)]
enum FileJob {
    FilterMap,
    W1,
    /// Filter + map into a JSON-lines file (the sink encodes the rows).
    FilterMapToFile,
}

/// Where the jobs into files write (a directory kept for the run).
fn out_path(side: &str) -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
        .path()
        .join(format!("{side}-out.jsonl"))
}

/// The typed filter + map job's output row (the YAML job's fields, in its order).
#[derive(Clone, serde::Serialize)]
struct Priced {
    key: i64,
    ts: i64,
    value: i64,
    dollars: f64,
    bucket: i64,
}

impl FileJob {
    fn rows(self, n: u64) -> u64 {
        match self {
            FileJob::FilterMap | FileJob::FilterMapToFile => {
                (0..n).filter(|i| (i % 100) % 4 != 0).count() as u64
            }
            FileJob::W1 => Workload::W1.rows(n),
        }
    }

    /// The YAML job; with `schema`, its source declares the events' schema.
    fn yaml(self, input: &Input, schema: bool) -> String {
        let source = input.source_yaml(schema);
        let steps = match self {
            FileJob::FilterMap | FileJob::FilterMapToFile => {
                r#"  - {name: kept, filter: "value % 4 <> 0"}
  - {name: priced, map: {dollars: "value / 100.0", bucket: "key % 16"}}"#
            }
            FileJob::W1 => {
                r#"  - key_by: [key]
  - {name: window, window: {kind: tumbling, size: 1000}, aggregate: {count: count(), sum: sum(value)}}"#
            }
        };
        let sink = match self {
            FileJob::FilterMapToFile => format!(
                "{{name: out, connector: file, path: {}}}",
                out_path("yaml").display()
            ),
            _ => "{name: out, connector: blackhole}".to_string(),
        };
        format!("name: file\nsources:\n  - {source}\nsteps:\n{steps}\nsinks:\n  - {sink}\n")
    }

    /// The typed job reading the input with serde: rows reaching the sink.
    fn typed(self, input: &Input) -> u64 {
        let (config, _dir) = config();
        let env = StreamEnvironment::new(config);
        let events = input.events(&env);
        match self {
            FileJob::FilterMap => {
                let sink = Discard::<(i64, i64, i64, f64, i64)>::default();
                events
                    .filter(|e: &Event| e.value % 4 != 0)
                    .map(|e: Event| (e.key, e.ts, e.value, e.value as f64 / 100.0, e.key % 16))
                    .sink(sink.clone());
                env.execute("file-filter-map").unwrap();
                sink.seen.load(Ordering::Relaxed)
            }
            FileJob::W1 => {
                let sink =
                    Discard::<brook::operators::window::WindowResult<i64, (u64, i64)>>::default();
                events
                    .key_by(|e: &Event| e.key)
                    .window(Workload::W1.assigner())
                    .aggregate((Count, Sum::of(|e: &Event| e.value)))
                    .sink(sink.clone());
                env.execute("file-W1").unwrap();
                sink.seen.load(Ordering::Relaxed)
            }
            FileJob::FilterMapToFile => {
                events
                    .filter(|e: &Event| e.value % 4 != 0)
                    .map(|e: Event| Priced {
                        key: e.key,
                        ts: e.ts,
                        value: e.value,
                        dollars: e.value as f64 / 100.0,
                        bucket: e.key % 16,
                    })
                    .sink(brook::connectors::FileSink::<Priced>::jsonl(out_path(
                        "typed",
                    )))
                    .name("out");
                rows_into_out(&env.execute("file-filter-map-file").unwrap())
            }
        }
    }
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

/// Runs both sides `reps` times, alternating which goes first, checking each delivers
/// `expected` rows: (YAML, typed) events per CPU-second.
fn compare(
    label: &str,
    n: u64,
    reps: usize,
    expected: u64,
    yaml: &dyn Fn() -> u64,
    typed: &dyn Fn() -> u64,
) -> (f64, f64) {
    let (mut yaml_cpu, mut typed_cpu) = (0.0, 0.0);
    for rep in 0..reps {
        let order: [(&str, &dyn Fn() -> u64); 2] = if rep % 2 == 0 {
            [("yaml", yaml), ("typed", typed)]
        } else {
            [("typed", typed), ("yaml", yaml)]
        };
        for (side, job) in order {
            // For a profile of one side: `BROOK_BENCH_SIDE=yaml` (or `typed`).
            if std::env::var("BROOK_BENCH_SIDE").is_ok_and(|s| s != side) {
                continue;
            }
            let (cpu, wall, rows) = timed(job);
            assert_eq!(rows, expected, "{label} {side}: rows reaching the sink");
            let cpu = cpu.unwrap_or(wall);
            eprintln!("{label} round {rep} {side}: {wall:.3} s wall, {cpu:.2} s CPU");
            if side == "yaml" {
                yaml_cpu += cpu;
            } else {
                typed_cpu += cpu;
            }
        }
    }
    let rate = |cpu: f64| (n * reps as u64) as f64 / cpu.max(0.01);
    (rate(yaml_cpu), rate(typed_cpu))
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let scale = env_f64("BROOK_BENCH_SCALE", 1.0);
    let reps = if bench {
        env_f64("BROOK_BENCH_REPS", 3.0) as usize
    } else {
        1
    };
    let only = std::env::var("BROOK_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|o| o.trim() == name);
    let mut table = Vec::new();
    if wanted("filter-map") {
        let n = if bench {
            (50_000_000.0 * scale) as u64
        } else {
            20_000
        };
        let expected = (0..n).filter(|i| (i % 100) % 4 != 0).count() as u64;
        let (y, t) = compare("filter-map", n, reps, expected, &|| yaml_job(n), &|| {
            typed_job(n)
        });
        table.push(("filter + map".to_string(), n, y, t));
    }
    for w in [Workload::W1, Workload::W2, Workload::W3, Workload::W4] {
        if !wanted(w.name()) {
            continue;
        }
        // A multiple of 100,000 (whole bursts for W3, whole windows for the others).
        let n = if bench {
            (((w.events() * scale) as u64) / 100_000).max(1) * 100_000
        } else {
            100_000
        };
        let yaml = w.yaml(n, false);
        let (y, t) = compare(w.name(), n, reps, w.rows(n), &|| run_yaml(&yaml), &|| {
            w.typed(n)
        });
        table.push((format!("{} (YAML window)", w.name()), n, y, t));
        if std::env::var("BROOK_BENCH_ROW_PATH").is_ok() {
            let late = w.yaml(n, true);
            let label = format!("{} rows", w.name());
            let (y, t) = compare(
                &label,
                n,
                reps,
                w.rows(n),
                &|| run_yaml_on_rows(&late),
                &|| w.typed(n),
            );
            table.push((format!("{} (window on rows)", w.name()), n, y, t));
            let label = format!("{} late", w.name());
            let (y, t) = compare(&label, n, reps, w.rows(n), &|| run_yaml(&late), &|| {
                w.typed(n)
            });
            table.push((format!("{} (typed, late_output)", w.name()), n, y, t));
        }
    }
    if wanted("W4-wide") {
        let n = if bench {
            (((20_000_000.0 * scale) as u64) / 100_000).max(1) * 100_000
        } else {
            100_000
        };
        let yaml = wide_yaml(n);
        assert_ne!(yaml, Workload::W4.yaml(n, false), "the aggregates replaced");
        let rows = Workload::W4.rows(n);
        let (y, t) = compare("W4-wide", n, reps, rows, &|| run_yaml(&yaml), &|| {
            wide_typed(n)
        });
        table.push(("W4, 4 aggregates".to_string(), n, y, t));
    }
    let dir = tempfile::tempdir().unwrap();
    if wanted("enrich") {
        let n = if bench {
            (20_000_000.0 * scale) as u64
        } else {
            20_000
        };
        let lookup = dir.path().join("table.jsonl");
        write_table(&lookup);
        let yaml = enrich_yaml(n, &lookup);
        let (y, t) = compare(
            "enrich",
            n,
            reps,
            n,
            &|| run_enrich_yaml(&yaml, false),
            &|| typed_enrich(n),
        );
        table.push(("enrich".to_string(), n, y, t));
        if std::env::var("BROOK_BENCH_ROW_PATH").is_ok() {
            let (y, t) = compare(
                "enrich rows",
                n,
                reps,
                n,
                &|| run_enrich_yaml(&yaml, true),
                &|| typed_enrich(n),
            );
            table.push(("enrich (on rows)".to_string(), n, y, t));
        }
    }
    if wanted("join") {
        // Whole seconds: every key once per window on each side.
        let n = if bench {
            (((4_000_000.0 * scale) as u64) / 1000).max(1) * 1000
        } else {
            20_000
        };
        let yaml = join_yaml(n);
        let (y, t) = compare(
            "join",
            2 * n,
            reps,
            n,
            &|| run_enrich_yaml(&yaml, false),
            &|| typed_join(n),
        );
        table.push(("join (window)".to_string(), 2 * n, y, t));
        if std::env::var("BROOK_BENCH_ROW_PATH").is_ok() {
            let (y, t) = compare(
                "join rows",
                2 * n,
                reps,
                n,
                &|| run_enrich_yaml(&yaml, true),
                &|| typed_join(n),
            );
            table.push(("join (on rows)".to_string(), 2 * n, y, t));
        }
    }
    let n = if bench {
        (((4_000_000.0 * scale) as u64) / 100_000).max(1) * 100_000
    } else {
        100_000
    };
    let rows_too = std::env::var("BROOK_BENCH_ROW_PATH").is_ok();
    for (input_name, jobs) in [
        (
            "file",
            vec![
                ("file-filter-map", FileJob::FilterMap),
                ("file-W1", FileJob::W1),
                ("file-filter-map-file", FileJob::FilterMapToFile),
            ],
        ),
        (
            "log",
            vec![
                ("log-filter-map", FileJob::FilterMap),
                ("log-W1", FileJob::W1),
            ],
        ),
    ] {
        if !jobs.iter().any(|(name, _)| wanted(name)) {
            continue;
        }
        let input = if input_name == "file" {
            let path = dir.path().join("events.jsonl");
            write_events(&path, n);
            Input::File(path)
        } else {
            Input::Log(log_events(&dir.path().join("log"), n))
        };
        for (name, job) in jobs {
            if !wanted(name) {
                continue;
            }
            let expected = job.rows(n);
            let yaml = job.yaml(&input, true);
            let (y, t) = compare(
                name,
                n,
                reps,
                expected,
                &|| run_yaml_on(&yaml, input.log()),
                &|| job.typed(&input),
            );
            table.push((name.to_string(), n, y, t));
            if rows_too {
                let rows = job.yaml(&input, false);
                let label = format!("{name} rows");
                let (y, t) = compare(
                    &label,
                    n,
                    reps,
                    expected,
                    &|| run_yaml_on(&rows, input.log()),
                    &|| job.typed(&input),
                );
                table.push((format!("{name} (no schema)"), n, y, t));
            }
        }
    }
    if !bench {
        for (job, n, ..) in &table {
            println!("yaml_arrow: {job}: both sides deliver the expected rows of {n} (smoke run)");
        }
        return;
    }
    let state = if std::env::var("BROOK_BENCH_STATE").is_ok_and(|s| s == "rocksdb") {
        "RocksDB state, checkpoints every 1 s"
    } else {
        "in-memory state"
    };
    println!("yaml_arrow: x {reps} rounds, parallelism 1, {state}");
    println!(
        "{:<22} {:>12} {:>16} {:>16} {:>8}",
        "job", "events", "YAML ev/CPU-s", "typed ev/CPU-s", "ratio"
    );
    for (job, n, y, t) in table {
        println!("{job:<22} {n:>12} {y:>16.0} {t:>16.0} {:>8.2}", y / t);
    }
}
