//! The window workloads W1-W4 of `docs/workloads.md` (shared docs), shared by the
//! `windows` and `state` benches (`#[path = "common/workloads.rs"] mod workloads;`):
//! the event generator, a brook source of its events, a sink that checks and counts
//! the rows (`Tally`), the job source -> key_by -> window -> (COUNT, SUM) -> sink,
//! CPU-time measurement and the benches' environment knobs.
#![allow(dead_code)]

use brook::core::time::process_cpu_secs;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use brook::core::element::Batch;
use brook::core::operator::{OpResult, Output, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::core::source::{InputStatus, Source, SourceReader, Split};
use brook::core::watermark::WatermarkStrategy;
use brook::engine::{JobConfig, StreamEnvironment};
use brook::operators::window::aggregate::{Count, Sum};
use brook::operators::window::assigner::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows, WindowAssigner,
};
use brook::operators::window::WindowResult;

/// The multiplier of the W1/W2/W4 keys (workloads.md).
pub(crate) const MULTIPLIER: u64 = 2_654_435_761;
/// Events a reader emits per poll.
pub(crate) const READ_BATCH: u64 = 4096;

// ---------------------------------------------------------------------------------
// The workloads
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    W1,
    W2,
    W3,
    W4,
}

/// One event: `(key, ts ms, value)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ev {
    pub(crate) key: u64,
    pub(crate) ts: i64,
    pub(crate) value: i64,
}

impl Workload {
    pub(crate) const ALL: [Workload; 4] = [Workload::W1, Workload::W2, Workload::W3, Workload::W4];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Workload::W1 => "10k keys, tumbling 1 s",
            Workload::W2 => "10k keys, sliding 10 s / 1 s",
            Workload::W3 => "1k keys, session gap 100 ms",
            Workload::W4 => "100 keys, tumbling 1 s",
        }
    }

    /// Event `i`, exactly as workloads.md defines it. Exact while `i * MULTIPLIER`
    /// fits in 64 bits (`i` < 6.9e9; `main` checks).
    #[inline]
    pub(crate) fn event(self, i: u64) -> Ev {
        let value = (i % 100) as i64;
        match self {
            Workload::W1 | Workload::W2 => Ev {
                key: (i * MULTIPLIER) % 10_000,
                ts: i as i64,
                value,
            },
            Workload::W3 => Ev {
                key: i % 1000,
                ts: (i / 100 + 200 * (i / 100_000)) as i64,
                value,
            },
            Workload::W4 => Ev {
                key: (i * MULTIPLIER) % 100,
                ts: i as i64,
                value,
            },
        }
    }

    pub(crate) fn assigner(self) -> WindowAssigner {
        match self {
            Workload::W1 | Workload::W4 => TumblingEventTimeWindows::of(1000).unwrap(),
            Workload::W2 => SlidingEventTimeWindows::of(10_000, 1000).unwrap(),
            Workload::W3 => EventTimeSessionWindows::with_gap(100).unwrap(),
        }
    }

    /// The rows a correct run emits for `n` events (`n` a multiple of 1000).
    pub(crate) fn expected_rows(self, n: u64) -> u64 {
        match self {
            Workload::W1 => n,
            Workload::W2 => 10 * n,
            // One session per key and burst (partial last burst included).
            Workload::W3 => 1000 * n.div_ceil(100_000),
            // 100 keys per 1000 ms window.
            Workload::W4 => n / 10,
        }
    }

    /// The total SUM(value) over all rows: 49.5 * n (x10 for W2).
    pub(crate) fn expected_sum(self, n: u64) -> i64 {
        let s = (n / 100 * 4950) as i64;
        if self == Workload::W2 {
            10 * s
        } else {
            s
        }
    }

    /// Whether one row is right (workloads.md's checks, per row), for `n` events.
    #[inline]
    pub(crate) fn row_ok(self, n: u64, key: u64, start: i64, end: i64, count: u64) -> bool {
        match self {
            Workload::W1 => count == 1 && end - start == 1000 && start.rem_euclid(1000) == 0,
            Workload::W2 => {
                count == 1
                    && end - start == 10_000
                    && start.rem_euclid(1000) == 0
                    && start > -10_000
            }
            Workload::W4 => count == 10 && end - start == 1000 && start.rem_euclid(1000) == 0,
            Workload::W3 => {
                // Key k in burst b: [1200 b + k div 100, + 1090) with 100 events; the
                // last burst may be partial (m events per key: 10 (m - 1) + 100 long).
                let off = start - (key / 100) as i64;
                if off < 0 || off % 1200 != 0 {
                    return false;
                }
                let b = (off / 1200) as u64;
                let per_key = ((n - b * 100_000).min(100_000) / 1000) as i64;
                per_key > 0 && count == per_key as u64 && end - start == 10 * (per_key - 1) + 100
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// What both sides emit, checked and summed
// ---------------------------------------------------------------------------------

/// The rows seen: counts, sums, rows failing the per-row check, and an
/// order-independent fingerprint of the rows (a wrapping sum of a hash of each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) rows: u64,
    pub(crate) count: u64,
    pub(crate) sum: i64,
    pub(crate) bad: u64,
    pub(crate) fingerprint: u64,
}

#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Tally {
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn row(
        &mut self,
        w: Workload,
        n: u64,
        key: u64,
        start: i64,
        end: i64,
        count: u64,
        sum: i64,
    ) {
        self.rows += 1;
        self.count += count;
        self.sum = self.sum.wrapping_add(sum);
        self.bad += u64::from(!w.row_ok(n, key, start, end, count));
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (start as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            ^ (end as u64).wrapping_mul(0x1656_67b1_9e37_79f9)
            ^ count.wrapping_mul(0x85eb_ca77_c2b2_ae63)
            ^ (sum as u64).wrapping_mul(0x27d4_eb2f_1656_67c5);
        self.fingerprint = self.fingerprint.wrapping_add(mix(h));
    }

    pub(crate) fn add(&mut self, o: &Tally) {
        self.rows += o.rows;
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.bad += o.bad;
        self.fingerprint = self.fingerprint.wrapping_add(o.fingerprint);
    }

    /// Panics unless the rows are those of a correct run of `w` over `n` events.
    pub(crate) fn verify(&self, w: Workload, n: u64, who: &str) {
        let rows = w.expected_rows(n);
        let counts = if w == Workload::W2 { 10 * n } else { n };
        assert_eq!(
            self.bad,
            0,
            "{who} {}: {} rows fail the checks",
            w.name(),
            self.bad
        );
        assert_eq!(self.rows, rows, "{who} {}: wrong number of rows", w.name());
        assert_eq!(
            self.count,
            counts,
            "{who} {}: the counts do not add up",
            w.name()
        );
        assert_eq!(
            self.sum,
            w.expected_sum(n),
            "{who} {}: wrong total SUM",
            w.name()
        );
    }
}

// ---------------------------------------------------------------------------------
// brook: source, job, sink
// ---------------------------------------------------------------------------------

/// The events of a workload, split into one contiguous range of `i` per subtask.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkloadSource {
    pub(crate) w: Workload,
    pub(crate) n: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Range {
    start: u64,
    end: u64,
}

impl Split for Range {
    fn split_id(&self) -> String {
        format!("events[{}..{})", self.start, self.end)
    }
}

impl Source for WorkloadSource {
    type Out = Ev;
    type Split = Range;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<Range>> {
        let p = u64::from(parallelism.max(1));
        let bound = |i: u64| (u128::from(i) * u128::from(self.n) / u128::from(p)) as u64;
        Ok((0..p)
            .map(|i| Range {
                start: bound(i),
                end: bound(i + 1),
            })
            .collect())
    }

    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<Range>,
    ) -> OpResult<Box<dyn SourceReader<Out = Ev>>> {
        Ok(Box::new(Reader {
            w: self.w,
            splits,
            split: 0,
            next: None,
        }))
    }

    fn is_bounded(&self) -> bool {
        true
    }

    /// Resumes each split at its checkpointed next event.
    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<Range>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = Ev>>> {
        let splits = splits
            .into_iter()
            .map(|r| {
                let at = positions
                    .get(&r.split_id())
                    .and_then(|p| p.as_slice().try_into().ok())
                    .map_or(r.start, u64::from_le_bytes);
                Range {
                    start: at.clamp(r.start, r.end),
                    end: r.end,
                }
            })
            .collect();
        self.create_reader(info, splits)
    }
}

struct Reader {
    w: Workload,
    splits: Vec<Range>,
    split: usize,
    next: Option<u64>,
}

impl SourceReader for Reader {
    type Out = Ev;

    fn poll_next(&mut self, out: &mut Output<Ev>) -> OpResult<InputStatus> {
        let Some(split) = self.splits.get(self.split) else {
            return Ok(InputStatus::End);
        };
        let start = self.next.unwrap_or(split.start);
        let end = split.end.min(start + READ_BATCH);
        out.set_split(self.split as u32);
        out.reserve((end - start) as usize);
        for i in start..end {
            // Event time comes from the watermark strategy's assigner.
            out.collect(self.w.event(i), None);
        }
        if end >= split.end {
            out.finish_split(self.split as u32);
            self.split += 1;
            self.next = None;
        } else {
            self.next = Some(end);
        }
        Ok(if self.split >= self.splits.len() {
            InputStatus::End
        } else {
            InputStatus::MoreAvailable
        })
    }

    /// Per split, the next event to read (8 bytes LE), so checkpoints can be taken.
    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        Some(
            self.splits
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    let next = match j.cmp(&self.split) {
                        std::cmp::Ordering::Less => r.end,
                        std::cmp::Ordering::Equal => self.next.unwrap_or(r.start),
                        std::cmp::Ordering::Greater => r.start,
                    };
                    (r.split_id(), next.to_le_bytes().to_vec())
                })
                .collect(),
        )
    }
}

type Row = WindowResult<u64, (u64, i64)>;

/// Checks and counts the rows it receives, and drops them.
#[derive(Clone)]
pub(crate) struct Discard {
    pub(crate) w: Workload,
    pub(crate) n: u64,
    pub(crate) tally: Arc<Mutex<Tally>>,
}

impl Sink for Discard {
    type In = Row;
    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = Row>>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for Discard {
    type In = Row;
    fn write_batch(&mut self, batch: Batch<Row>) -> OpResult {
        let mut t = Tally::default();
        for r in &batch {
            let r = &r.value;
            let (count, sum) = r.value;
            t.row(
                self.w,
                self.n,
                r.key,
                r.window.start,
                r.window.end,
                count,
                sum,
            );
        }
        self.tally.lock().unwrap().add(&t);
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) secs: f64,
    pub(crate) cpu_secs: Option<f64>,
    pub(crate) tally: Tally,
}

pub(crate) fn timed(f: impl FnOnce() -> Tally) -> Run {
    let cpu0 = process_cpu_secs();
    let t = Instant::now();
    let tally = f();
    let secs = t.elapsed().as_secs_f64();
    let cpu_secs = cpu0.zip(process_cpu_secs()).map(|(a, b)| b - a);
    Run {
        secs,
        cpu_secs,
        tally,
    }
}

/// The brook job source -> key_by(key) -> window -> (COUNT, SUM(value)) -> checking
/// sink under `config` (parallelism, state backend, checkpoints), timed from
/// `execute` to its end. `BROOK_BENCH_WM_MS` sets the source's watermark interval
/// (default: the strategy's, 200 ms).
pub(crate) fn run_job(w: Workload, n: u64, config: JobConfig) -> Run {
    let env = StreamEnvironment::new(config);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut strategy =
        WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|e: &Ev, _| e.ts);
    if let Some(ms) = std::env::var("BROOK_BENCH_WM_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        strategy = strategy.with_emit_interval(ms);
    }
    env.from_source(WorkloadSource { w, n }, strategy)
        .key_by(|e: &Ev| e.key)
        .window(w.assigner())
        .aggregate((Count, Sum::of(|e: &Ev| e.value)))
        .sink(Discard {
            w,
            n,
            tally: Arc::clone(&tally),
        });
    timed(|| {
        env.execute(&format!("windows-{}", w.name())).unwrap();
        let t = *tally.lock().unwrap();
        t
    })
}

// ---------------------------------------------------------------------------------
// Measuring and settings
// ---------------------------------------------------------------------------------

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else {
        format!("{:.0} k", r / 1e3)
    }
}

/// How a bench runs: `--bench` on the command line (else a quick smoke check),
/// `BROOK_BENCH_SCALE` (default 1.0), `BROOK_BENCH_REPS` (default `default_reps`) and
/// `BROOK_BENCH_ONLY` (empty: everything). Scale and rounds apply in bench mode only.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) bench: bool,
    pub(crate) scale: f64,
    pub(crate) rounds: usize,
    pub(crate) only: String,
}

impl Settings {
    pub(crate) fn from_env(default_reps: usize) -> Settings {
        let bench = std::env::args().any(|a| a == "--bench");
        Settings {
            bench,
            scale: if bench {
                env_or("BROOK_BENCH_SCALE", 1.0)
            } else {
                1.0
            },
            rounds: if bench {
                env_or("BROOK_BENCH_REPS", default_reps).max(1)
            } else {
                1
            },
            only: std::env::var("BROOK_BENCH_ONLY").unwrap_or_default(),
        }
    }

    /// `base` events scaled, as a multiple of 100,000 (whole W3 bursts, as
    /// workloads.md's checks assume), at least 100,000.
    pub(crate) fn events(&self, base: u64) -> u64 {
        ((base as f64 * self.scale / 100_000.0).round() as u64).max(1) * 100_000
    }
}
