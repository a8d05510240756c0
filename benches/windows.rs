//! `cargo bench --bench windows`: the window workloads W1-W4 of
//! `docs/workloads.md` (shared docs), source -> key_by -> window -> COUNT and SUM ->
//! discard, at parallelism 1 and 2, in events per second and per CPU-second, each
//! beside a hand-written single-threaded loop doing the same work in the same run
//! (generate, a hash map per window or per key, emit a row when a window closes).
//!
//! Every run is verified: the row count, each row's window and count, the total SUM,
//! and brook's rows against the loop's (an order-independent fingerprint of all rows).
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only checks, on a
//! few thousand events, that every workload gives the right rows.
//!
//! Environment (bench mode only): `BROOK_BENCH_SCALE` (default 1.0) multiplies the
//! event counts (rounded to a multiple of 100,000); `BROOK_BENCH_REPS` (default 5) is
//! the number of interleaved rounds (the table shows medians); `BROOK_BENCH_ONLY=W1`
//! (or `W1@1`, a workload at one parallelism) runs only that, for profiling.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
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
const MULTIPLIER: u64 = 2_654_435_761;
/// Events a reader emits per poll.
const READ_BATCH: u64 = 4096;

// ---------------------------------------------------------------------------------
// The workloads
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    W1,
    W2,
    W3,
    W4,
}

/// One event: `(key, ts ms, value)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ev {
    key: u64,
    ts: i64,
    value: i64,
}

impl Workload {
    const ALL: [Workload; 4] = [Workload::W1, Workload::W2, Workload::W3, Workload::W4];

    fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
        }
    }

    fn describe(self) -> &'static str {
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
    fn event(self, i: u64) -> Ev {
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

    fn assigner(self) -> WindowAssigner {
        match self {
            Workload::W1 | Workload::W4 => TumblingEventTimeWindows::of(1000).unwrap(),
            Workload::W2 => SlidingEventTimeWindows::of(10_000, 1000).unwrap(),
            Workload::W3 => EventTimeSessionWindows::with_gap(100).unwrap(),
        }
    }

    /// The rows a correct run emits for `n` events (`n` a multiple of 1000).
    fn expected_rows(self, n: u64) -> u64 {
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
    fn expected_sum(self, n: u64) -> i64 {
        let s = (n / 100 * 4950) as i64;
        if self == Workload::W2 {
            10 * s
        } else {
            s
        }
    }

    /// Whether one row is right (workloads.md's checks, per row), for `n` events.
    #[inline]
    fn row_ok(self, n: u64, key: u64, start: i64, end: i64, count: u64) -> bool {
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
struct Tally {
    rows: u64,
    count: u64,
    sum: i64,
    bad: u64,
    fingerprint: u64,
}

#[inline]
fn mix(mut x: u64) -> u64 {
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
    fn row(&mut self, w: Workload, n: u64, key: u64, start: i64, end: i64, count: u64, sum: i64) {
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

    fn add(&mut self, o: &Tally) {
        self.rows += o.rows;
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.bad += o.bad;
        self.fingerprint = self.fingerprint.wrapping_add(o.fingerprint);
    }

    /// Panics unless the rows are those of a correct run of `w` over `n` events.
    fn verify(&self, w: Workload, n: u64, who: &str) {
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
struct WorkloadSource {
    w: Workload,
    n: u64,
}

#[derive(Debug, Clone)]
struct Range {
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
}

type Row = WindowResult<u64, (u64, i64)>;

/// Checks and counts the rows it receives, and drops them.
#[derive(Clone)]
struct Discard {
    w: Workload,
    n: u64,
    tally: Arc<Mutex<Tally>>,
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
struct Run {
    secs: f64,
    cpu_secs: Option<f64>,
    tally: Tally,
}

/// The process's CPU time (user + system, all threads, also those that ended) in
/// seconds, from `/proc/self/stat` (10 ms resolution); `None` where there is none.
fn cpu_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) end with ')'; utime and
    // stime are fields 14 and 15 of the line, in clock ticks (USER_HZ = 100).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

fn timed(f: impl FnOnce() -> Tally) -> Run {
    let cpu0 = cpu_time();
    let t = Instant::now();
    let tally = f();
    let secs = t.elapsed().as_secs_f64();
    let cpu_secs = cpu0.zip(cpu_time()).map(|(a, b)| b - a);
    Run {
        secs,
        cpu_secs,
        tally,
    }
}

/// The brook job: source -> key_by(key) -> window -> (COUNT, SUM(value)) -> discard.
fn brook(w: Workload, n: u64, parallelism: u32) -> Run {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
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
// The hand-written loop
// ---------------------------------------------------------------------------------

/// A multiplicative hasher for `u64` keys (as rustc's FxHasher), so that the loop
/// does not pay for SipHash: the engine's state tables use a fast hasher too.
#[derive(Default)]
struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FastMap<V> = HashMap<u64, V, BuildHasherDefault<FastHasher>>;

/// The same work in one loop, single-threaded over all `n` events in order (the
/// watermark is `max ts - 1`: a window is emitted as soon as an event at or past its
/// end arrives).
fn hand_loop(w: Workload, n: u64) -> Run {
    // Window settings come from configuration at run time, as they do for the engine;
    // compile-time constants would let the compiler turn divisions into shifts.
    let (size, slide, gap) = black_box(match w {
        Workload::W1 | Workload::W4 => (1000i64, 1000i64, 0i64),
        Workload::W2 => (10_000, 1000, 0),
        Workload::W3 => (0, 0, 100),
    });
    timed(|| {
        if w == Workload::W3 {
            sessions_loop(w, n, gap)
        } else if size == slide {
            fixed_loop(w, n, size, slide)
        } else {
            sliding_loop(w, n, size, slide)
        }
    })
}

/// Tumbling and sliding windows: the open windows by start (contiguous, one per
/// `slide`), each a hash map from key to (count, sum); emptied maps are reused.
fn fixed_loop(w: Workload, n: u64, size: i64, slide: i64) -> Tally {
    let mut t = Tally::default();
    let mut open: VecDeque<(i64, FastMap<(u64, i64)>)> = VecDeque::new();
    let mut spare: Vec<FastMap<(u64, i64)>> = Vec::new();
    let emit = |t: &mut Tally, start: i64, map: &mut FastMap<(u64, i64)>| {
        for (k, (c, s)) in map.drain() {
            t.row(w, n, k, start, start + size, c, s);
        }
    };
    for i in 0..n {
        let e = w.event(i);
        // Windows that end at or before `ts` are complete (watermark ts - 1).
        while let Some((start, _)) = open.front() {
            if start + size > e.ts {
                break;
            }
            let (start, mut map) = open.pop_front().unwrap();
            emit(&mut t, start, &mut map);
            spare.push(map);
        }
        let last = e.ts - e.ts.rem_euclid(slide);
        let first = last - size + slide;
        let mut next = open.back().map_or(first, |(s, _)| s + slide);
        while next <= last {
            open.push_back((next, spare.pop().unwrap_or_default()));
            next += slide;
        }
        // The windows `first, first + slide, ..., last` are at consecutive indices.
        let from = ((first - open.front().unwrap().0) / slide) as usize;
        let to = from + ((last - first) / slide) as usize;
        for (_, map) in open.range_mut(from..=to) {
            let acc = map.entry(e.key).or_insert((0, 0));
            acc.0 += 1;
            acc.1 += e.value;
        }
    }
    for (start, mut map) in open.drain(..) {
        emit(&mut t, start, &mut map);
    }
    t
}

/// Sliding windows: per key, one accumulator per open window in a ring (`size / slide`
/// slots, window start `s` in slot `(s / slide) mod slots`), all in one flat vector,
/// so an event costs one hash lookup; a window is emitted by a sweep over the keys.
fn sliding_loop(w: Workload, n: u64, size: i64, slide: i64) -> Tally {
    let mut t = Tally::default();
    let slots = (size / slide) as usize;
    let mut index: FastMap<usize> = FastMap::default();
    let mut keys: Vec<u64> = Vec::new();
    let mut accs: Vec<(u64, i64)> = Vec::new();
    // The earliest window not yet emitted.
    let mut next_close: Option<i64> = None;
    let mut max_ts = i64::MIN;
    let emit = |t: &mut Tally, start: i64, keys: &[u64], accs: &mut [(u64, i64)]| {
        let slot = (start / slide).rem_euclid(slots as i64) as usize;
        for (k, ring) in keys.iter().zip(accs.chunks_exact_mut(slots)) {
            let (c, s) = std::mem::take(&mut ring[slot]);
            if c > 0 {
                t.row(w, n, *k, start, start + size, c, s);
            }
        }
    };
    for i in 0..n {
        let e = w.event(i);
        max_ts = max_ts.max(e.ts);
        let last = e.ts - e.ts.rem_euclid(slide);
        let first = last - size + slide;
        let close = next_close.get_or_insert(first);
        // Windows that end at or before `ts` are complete (watermark ts - 1).
        while *close + size <= e.ts {
            emit(&mut t, *close, &keys, &mut accs);
            *close += slide;
        }
        let at = *index.entry(e.key).or_insert_with(|| {
            keys.push(e.key);
            accs.resize(accs.len() + slots, (0, 0));
            keys.len() - 1
        });
        let ring = &mut accs[at * slots..(at + 1) * slots];
        let mut slot = (first / slide).rem_euclid(slots as i64) as usize;
        for _ in 0..slots {
            ring[slot].0 += 1;
            ring[slot].1 += e.value;
            slot = if slot + 1 == slots { 0 } else { slot + 1 };
        }
    }
    // The final watermark: every window holding an event.
    if let Some(mut start) = next_close {
        while start <= max_ts {
            emit(&mut t, start, &keys, &mut accs);
            start += slide;
        }
    }
    t
}

/// Session windows: the open session per key, and a queue of (end, key) in end order
/// (ends never decrease, events being in order) to emit sessions when the watermark
/// passes their end; entries of sessions that grew since are skipped.
fn sessions_loop(w: Workload, n: u64, gap: i64) -> Tally {
    struct Session {
        start: i64,
        end: i64,
        count: u64,
        sum: i64,
    }
    let mut t = Tally::default();
    let mut open: FastMap<Session> = FastMap::default();
    let mut due: VecDeque<(i64, u64)> = VecDeque::new();
    for i in 0..n {
        let e = w.event(i);
        while let Some(&(end, key)) = due.front() {
            if end > e.ts {
                break;
            }
            due.pop_front();
            if let Entry::Occupied(s) = open.entry(key) {
                if s.get().end == end {
                    let s = s.remove();
                    t.row(w, n, key, s.start, s.end, s.count, s.sum);
                }
            }
        }
        let end = e.ts + gap;
        match open.entry(e.key) {
            Entry::Occupied(mut o) => {
                let s = o.get_mut();
                s.end = s.end.max(end);
                s.count += 1;
                s.sum += e.value;
            }
            Entry::Vacant(v) => {
                v.insert(Session {
                    start: e.ts,
                    end,
                    count: 1,
                    sum: e.value,
                });
            }
        }
        due.push_back((end, e.key));
    }
    for (key, s) in open.drain() {
        t.row(w, n, key, s.start, s.end, s.count, s.sum);
    }
    t
}

// ---------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Events per run in bench mode, before `BROOK_BENCH_SCALE`.
fn bench_events(w: Workload) -> u64 {
    match w {
        // 10 rows per event.
        Workload::W2 => 500_000,
        _ => 2_000_000,
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else {
        format!("{:.0} k", r / 1e3)
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let scale: f64 = if bench {
        env_or("BROOK_BENCH_SCALE", 1.0)
    } else {
        1.0
    };
    let rounds: usize = if bench {
        env_or("BROOK_BENCH_REPS", 5).max(1)
    } else {
        1
    };
    let only = std::env::var("BROOK_BENCH_ONLY").unwrap_or_default();
    let events = |w: Workload| -> u64 {
        if bench {
            // A multiple of 100,000 (whole W3 bursts), as workloads.md's checks assume.
            ((bench_events(w) as f64 * scale / 100_000.0).round() as u64).max(1) * 100_000
        } else {
            // Smoke check: a few thousand events (W3: a partial burst).
            5_000
        }
    };

    println!(
        "windows: source -> key_by -> window -> (COUNT, SUM) -> discard; brook beside a \
         single-threaded loop, median of {rounds}"
    );
    println!(
        "{:<4} {:>2} {:<28} {:>9} {:>9} {:>11} {:>11} {:>6} {:>13} {:>13} {:>6}",
        "wl",
        "p",
        "",
        "events",
        "rows",
        "brook ev/s",
        "loop ev/s",
        "ratio",
        "brook ev/CPUs",
        "loop ev/CPUs",
        "ratio"
    );
    for w in Workload::ALL {
        for p in [1u32, 2] {
            let id = format!("{}@{p}", w.name());
            if !only.is_empty() && only != w.name() && only != id {
                continue;
            }
            let n = events(w);
            assert!(n.checked_mul(MULTIPLIER).is_some(), "too many events");
            let (mut b_runs, mut l_runs) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                // Alternate which goes first.
                let (b, l) = if round % 2 == 0 {
                    let l = hand_loop(w, n);
                    (brook(w, n, p), l)
                } else {
                    let b = brook(w, n, p);
                    (b, hand_loop(w, n))
                };
                b.tally.verify(w, n, "brook");
                l.tally.verify(w, n, "loop");
                assert_eq!(b.tally, l.tally, "{id}: brook and the loop disagree");
                eprintln!(
                    "{id} round {round}: brook {:.3} s (cpu {:?}), loop {:.3} s",
                    b.secs, b.cpu_secs, l.secs
                );
                b_runs.push(b);
                l_runs.push(l);
            }
            let rate = |runs: &[Run]| n as f64 / median(runs.iter().map(|r| r.secs).collect());
            // CPU time has a 10 ms resolution: events over the CPU time of all rounds.
            let cpu_rate = |runs: &[Run]| -> Option<f64> {
                // Meaningless on a smoke run's few milliseconds.
                if !bench {
                    return None;
                }
                let c: Option<f64> = runs.iter().map(|r| r.cpu_secs).sum();
                c.map(|c| (n * runs.len() as u64) as f64 / c.max(0.01))
            };
            let (b, l) = (rate(&b_runs), rate(&l_runs));
            let (bc, lc) = (cpu_rate(&b_runs), cpu_rate(&l_runs));
            let (bc_s, lc_s, rc_s) = match (bc, lc) {
                (Some(bc), Some(lc)) => (fmt_rate(bc), fmt_rate(lc), format!("{:.2}", bc / lc)),
                _ => ("-".into(), "-".into(), "-".into()),
            };
            println!(
                "{:<4} {:>2} {:<28} {:>9} {:>9} {:>11} {:>11} {:>6.2} {:>13} {:>13} {:>6}",
                w.name(),
                p,
                w.describe(),
                n,
                w.expected_rows(n),
                fmt_rate(b),
                fmt_rate(l),
                b / l,
                bc_s,
                lc_s,
                rc_s
            );
        }
    }
}
