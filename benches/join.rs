//! `cargo bench --bench join`: the interval, window and temporal joins of orders with
//! payments (issues 6 and 15), at parallelism 1 and 2, in input records per second,
//! beside a hand-written single-threaded loop doing the same join in the same run, as
//! a ratio.
//!
//! The workload: order `i` (key `i * 2654435761 mod 10,000`, time `i` ms) and, for
//! three orders in four, its payment at `i + (i mod 8)` ms (a key recurs every 10,000
//! orders). The joins:
//! - interval: payments with orders of the same key within `[0, 5]` ms, so a payment
//!   made after 6 or 7 ms finds none (loop: per-key buffers of both sides, cleaned by
//!   the watermark);
//! - window: orders and payments of the same key in the same tumbling 1,000 ms window
//!   (loop: window-major maps of key to both sides' ids, fired by the watermark);
//! - temporal: each order with the payment of its key valid at its time (the latest
//!   at or before it: its own when paid at once, else its key's previous order's)
//!   (loop: the latest version per key, merged in time order).
//!
//! Both streams are time-ordered within 7 ms (watermark: max seen - 8). Every run is
//! checked: the pair count and a checksum of the pairs equal the loop's, and the count
//! equals the formula.
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only checks, on a few
//! thousand records, that each join is right. `BROOK_BENCH_SCALE` (default 1.0) scales
//! the record count, `BROOK_BENCH_REPS` (default 3) the rounds (medians shown),
//! `BROOK_BENCH_ONLY` picks joins (`window`, or `window@1` for one parallelism; comma
//! separated). `BROOK_BENCH_PATH=general` keeps the joins' state in an in-memory
//! backend that holds encoded bytes (as RocksDB would), so they take their general
//! path (a keyed process function over keyed state) instead of their heap fast paths:
//! the before of issue 21.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brook::core::element::Batch;
use brook::core::operator::{OpResult, Output, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::core::source::{InputStatus, Source, SourceReader, Split};
use brook::core::time::Millis;
use brook::core::watermark::WatermarkStrategy;
use brook::engine::{JobConfig, StateBackendFactory, StreamEnvironment};
use brook::operators::window::assigner::TumblingEventTimeWindows;
use brook::state::MemoryStateBackend;

const KEYS: u64 = 10_000;
const MULTIPLIER: u64 = 2_654_435_761;
const LOWER: Millis = 0;
const UPPER: Millis = 5;
/// The window join's tumbling window (ms).
const WINDOW: Millis = 1_000;

/// Which join a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    Interval,
    Window,
    Temporal,
}

impl Join {
    fn name(self) -> &'static str {
        match self {
            Join::Interval => "interval",
            Join::Window => "window",
            Join::Temporal => "temporal",
        }
    }
}

/// An order or a payment: (order id, key, time ms).
type Rec = (u64, u64, Millis);

fn order(i: u64) -> Option<Rec> {
    Some((i, (i * MULTIPLIER) % KEYS, i as Millis))
}

fn payment(i: u64) -> Option<Rec> {
    (i % 4 != 3).then(|| (i, (i * MULTIPLIER) % KEYS, (i + i % 8) as Millis))
}

/// Pairs a correct run emits for `n` orders: a payment `d = i mod 8` ms after its
/// order matches it when `d <= 5`, and also matches the orders of its key within the
/// interval; with 10,000 keys and ids `i` spaced 1 ms, two orders of one key are at
/// least 10,000 ms apart (multiplication by an odd constant mod 10,000 permutes each
/// block of 10,000), so only its own order matches.
fn expected_pairs(join: Join, n: u64) -> u64 {
    let paid = |i: &u64| i % 4 != 3;
    let pairs = match join {
        Join::Interval => (0..n).filter(|i| paid(i) && i % 8 <= 5).count(),
        // Its own payment, when in the same window (other orders of the key are
        // 10,000 ms away).
        Join::Window => (0..n)
            .filter(|i| paid(i) && i / WINDOW as u64 == (i + i % 8) / WINDOW as u64)
            .count(),
        // Its own payment when made at once, else its key's previous order's (10,000
        // earlier, also paid: 10,000 is a multiple of 4 and 8).
        Join::Temporal => (0..n)
            .filter(|i| paid(i) && (i % 8 == 0 || *i >= KEYS))
            .count(),
    };
    pairs as u64
}

/// Records `f(i)` for `i` in `0..n`, split `i mod p` across `p` readers, so the
/// readers move through event time together (contiguous ranges would hold the
/// second half's records in the join's state until the first reader caught up).
/// Payments are at most 7 ms late, so a reader's output is time-ordered within 7 ms;
/// the watermark strategy allows 7 ms.
#[derive(Clone)]
struct RangeSource {
    n: u64,
    f: fn(u64) -> Option<Rec>,
}

/// `i = next, next + step, ...` below `end`.
#[derive(Debug, Clone)]
struct Range {
    next: u64,
    step: u64,
    end: u64,
}

impl Split for Range {
    fn split_id(&self) -> String {
        format!("{} mod {}", self.next, self.step)
    }
}

impl Source for RangeSource {
    type Out = Rec;
    type Split = Range;
    fn enumerate_splits(&self, p: u32) -> OpResult<Vec<Range>> {
        let p = u64::from(p.max(1));
        Ok((0..p)
            .map(|i| Range {
                next: i,
                step: p,
                end: self.n,
            })
            .collect())
    }
    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<Range>,
    ) -> OpResult<Box<dyn SourceReader<Out = Rec>>> {
        Ok(Box::new(RangeReader {
            f: self.f,
            splits: splits.into(),
        }))
    }
    fn is_bounded(&self) -> bool {
        true
    }
}

struct RangeReader {
    f: fn(u64) -> Option<Rec>,
    splits: VecDeque<Range>,
}

impl SourceReader for RangeReader {
    type Out = Rec;
    fn poll_next(&mut self, out: &mut Output<Rec>) -> OpResult<InputStatus> {
        let Some(r) = self.splits.front_mut() else {
            return Ok(InputStatus::End);
        };
        for _ in 0..4096 {
            if r.next >= r.end {
                break;
            }
            if let Some(rec) = (self.f)(r.next) {
                out.collect(rec, Some(rec.2));
            }
            r.next += r.step;
        }
        if r.next >= r.end {
            self.splits.pop_front();
        }
        Ok(if self.splits.is_empty() {
            InputStatus::End
        } else {
            InputStatus::MoreAvailable
        })
    }
}

/// Counts pairs and sums a checksum of them.
#[derive(Clone, Default)]
struct Count {
    pairs: Arc<AtomicU64>,
    checksum: Arc<AtomicU64>,
}

fn pair_hash(o: u64, p: u64) -> u64 {
    o.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ p.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
}

impl Sink for Count {
    type In = (u64, u64);
    fn create_writer(&self, _i: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = (u64, u64)>>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for Count {
    type In = (u64, u64);
    fn write_batch(&mut self, batch: Batch<(u64, u64)>) -> OpResult {
        let sum = batch
            .iter()
            .fold(0u64, |a, r| a.wrapping_add(pair_hash(r.value.0, r.value.1)));
        self.pairs.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.checksum.fetch_add(sum, Ordering::Relaxed);
        Ok(())
    }
}

/// brook: returns (seconds, pairs, checksum).
fn brook(join: Join, n: u64, parallelism: u32, general: bool) -> (f64, u64, u64) {
    let mut config = JobConfig::with_parallelism(parallelism);
    if general {
        config.state_backend = StateBackendFactory::new("memory-bytes", |_| {
            Ok(Box::new(MemoryStateBackend::serialized()))
        });
    }
    let env = StreamEnvironment::new(config);
    let strategy = || WatermarkStrategy::for_bounded_out_of_orderness(7);
    let orders = env
        .from_source(RangeSource { n, f: order }, strategy())
        .key_by(|r: &Rec| r.1);
    let payments = env
        .from_source(RangeSource { n, f: payment }, strategy())
        .key_by(|r: &Rec| r.1);
    let sink = Count::default();
    let joined = match join {
        Join::Interval => orders.interval_join(payments, LOWER, UPPER).unwrap(),
        Join::Window => orders
            .window_join(payments, TumblingEventTimeWindows::of(WINDOW).unwrap())
            .unwrap(),
        Join::Temporal => orders.temporal_join(payments),
    };
    joined
        .apply(|o: &Rec, p: Option<&Rec>| (o.0, p.map_or(u64::MAX, |p| p.0)))
        .sink(sink.clone());
    let t = Instant::now();
    env.execute("join").unwrap();
    (
        t.elapsed().as_secs_f64(),
        sink.pairs.load(Ordering::Relaxed),
        sink.checksum.load(Ordering::Relaxed),
    )
}

/// Counts the pairs of payment `p` with the buffered orders of its key.
fn match_payment(
    p: &Rec,
    orders: &HashMap<u64, VecDeque<(Millis, u64)>>,
    pairs: &mut u64,
    checksum: &mut u64,
) {
    for (ot, oid) in orders.get(&p.1).into_iter().flatten() {
        if ot + LOWER <= p.2 && p.2 <= ot + UPPER {
            *pairs += 1;
            *checksum = checksum.wrapping_add(pair_hash(*oid, p.0));
        }
    }
}

/// The same join in one loop over both inputs merged in time order: per key, the
/// buffered orders and payments (time, id), dropped once the watermark (time - 8)
/// passes their last possible match.
fn hand_loop(n: u64) -> (f64, u64, u64) {
    let t = Instant::now();
    type Buf = HashMap<u64, VecDeque<(Millis, u64)>>;
    let (mut orders, mut payments): (Buf, Buf) = (HashMap::new(), HashMap::new());
    let (mut pairs, mut checksum) = (0u64, 0u64);
    // Payments of orders i-7..=i are due by time i; merge by time.
    let mut due: VecDeque<Rec> = VecDeque::new();
    let mut last_clean = 0;
    for i in 0..n {
        let o = order(i).unwrap();
        if let Some(p) = payment(i) {
            let at = due.partition_point(|d| d.2 <= p.2);
            due.insert(at, p);
        }
        while due.front().is_some_and(|d| d.2 <= o.2) {
            let p = due.pop_front().unwrap();
            match_payment(&p, &orders, &mut pairs, &mut checksum);
            payments.entry(p.1).or_default().push_back((p.2, p.0));
        }
        if let Some(ps) = payments.get(&o.1) {
            for (pt, pid) in ps {
                if o.2 + LOWER <= *pt && *pt <= o.2 + UPPER {
                    pairs += 1;
                    checksum = checksum.wrapping_add(pair_hash(o.0, *pid));
                }
            }
        }
        orders.entry(o.1).or_default().push_back((o.2, o.0));
        // Clean up every 1,000 ms of time: buffers older than the watermark window.
        if o.2 - last_clean >= 1_000 {
            let wm = o.2 - 8;
            orders.retain(|_, v| {
                v.retain(|(t, _)| t + UPPER > wm);
                !v.is_empty()
            });
            payments.retain(|_, v| {
                v.retain(|(t, _)| t - LOWER > wm);
                !v.is_empty()
            });
            last_clean = o.2;
        }
    }
    while let Some(p) = due.pop_front() {
        match_payment(&p, &orders, &mut pairs, &mut checksum);
    }
    (t.elapsed().as_secs_f64(), pairs, checksum)
}

/// Orders and payments `0..n` merged in time order (a payment before an order of
/// the same time), as `(is_payment, record)`.
fn merged(n: u64, mut each: impl FnMut(bool, Rec)) {
    // Payments of orders i-7..=i are due by time i.
    let mut due: VecDeque<Rec> = VecDeque::new();
    for i in 0..n {
        let o = order(i).unwrap();
        if let Some(p) = payment(i) {
            let at = due.partition_point(|d| d.2 <= p.2);
            due.insert(at, p);
        }
        while due.front().is_some_and(|d| d.2 <= o.2) {
            each(true, due.pop_front().unwrap());
        }
        each(false, o);
    }
    for p in due {
        each(true, p);
    }
}

/// The window join in one loop: per window (ordered by start) a map of key to the
/// ids of its orders and payments; a window fires when the watermark (time - 8)
/// reaches its last millisecond, and its maps are reused.
fn window_loop(n: u64) -> (f64, u64, u64) {
    type Sides = (Vec<u64>, Vec<u64>);
    let t = Instant::now();
    let mut windows: BTreeMap<Millis, HashMap<u64, Sides>> = BTreeMap::new();
    let mut spare: Vec<HashMap<u64, Sides>> = Vec::new();
    let (mut pairs, mut checksum) = (0u64, 0u64);
    let mut fire = |w: HashMap<u64, Sides>, spare: &mut Vec<_>| {
        let mut w = w;
        for (os, ps) in w.values() {
            for o in os {
                for p in ps {
                    pairs += 1;
                    checksum = checksum.wrapping_add(pair_hash(*o, *p));
                }
            }
        }
        w.clear();
        spare.push(w);
    };
    let mut max = Millis::MIN;
    merged(n, |is_payment, r| {
        let start = r.2 - r.2.rem_euclid(WINDOW);
        let w = windows
            .entry(start)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        let sides = w.entry(r.1).or_default();
        if is_payment {
            sides.1.push(r.0);
        } else {
            sides.0.push(r.0);
        }
        max = max.max(r.2);
        let wm = max - 8;
        while let Some(e) = windows.first_entry() {
            if *e.key() + WINDOW - 1 > wm {
                break;
            }
            fire(e.remove(), &mut spare);
        }
    });
    for (_, w) in std::mem::take(&mut windows) {
        fire(w, &mut spare);
    }
    (t.elapsed().as_secs_f64(), pairs, checksum)
}

/// The temporal join in one loop over both inputs merged in time order: the latest
/// payment (id) per key; an order joins it when there is one.
fn temporal_loop(n: u64) -> (f64, u64, u64) {
    let t = Instant::now();
    let mut latest: HashMap<u64, u64> = HashMap::new();
    let (mut pairs, mut checksum) = (0u64, 0u64);
    merged(n, |is_payment, r| {
        if is_payment {
            latest.insert(r.1, r.0);
        } else if let Some(p) = latest.get(&r.1) {
            pairs += 1;
            checksum = checksum.wrapping_add(pair_hash(r.0, *p));
        }
    });
    (t.elapsed().as_secs_f64(), pairs, checksum)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let env_or = |name: &str, d: f64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (n, rounds) = if bench {
        (
            (1_000_000.0 * env_or("BROOK_BENCH_SCALE", 1.0)) as u64,
            env_or("BROOK_BENCH_REPS", 3.0) as usize,
        )
    } else {
        (5_000, 1)
    };
    let records = n + (0..n).filter(|i| i % 4 != 3).count() as u64;
    let only = std::env::var("BROOK_BENCH_ONLY").unwrap_or_default();
    let general = std::env::var("BROOK_BENCH_PATH").is_ok_and(|p| p == "general");
    let wanted = |join: Join, p: u32| {
        only.is_empty()
            || only
                .split(',')
                .any(|w| w == join.name() || w == format!("{}@{p}", join.name()))
    };
    println!(
        "join: {n} orders with their payments ({records} records in), median of {rounds}; interval [{LOWER}, {UPPER}] ms, window tumbling {WINDOW} ms, temporal; {} path",
        if general { "general" } else { "heap fast" }
    );
    println!(
        "{:<10} {:<12} {:>10} {:>14} {:>14} {:>8}",
        "join", "parallelism", "pairs", "brook rec/s", "loop rec/s", "ratio"
    );
    for join in [Join::Interval, Join::Window, Join::Temporal] {
        let want = expected_pairs(join, n);
        for p in [1u32, 2] {
            if !wanted(join, p) {
                continue;
            }
            let (mut b, mut l) = (Vec::new(), Vec::new());
            for round in 0..rounds.max(1) {
                let (lt, lp, lc) = match join {
                    Join::Interval => hand_loop(n),
                    Join::Window => window_loop(n),
                    Join::Temporal => temporal_loop(n),
                };
                let (bt, bp, bc) = brook(join, n, p, general);
                assert_eq!(lp, want, "the {} loop is wrong", join.name());
                assert_eq!(
                    (bp, bc),
                    (lp, lc),
                    "brook and the loop disagree ({} join)",
                    join.name()
                );
                eprintln!(
                    "{} p={p} round {round}: brook {bt:.3} s, loop {lt:.3} s",
                    join.name()
                );
                b.push(bt);
                l.push(lt);
            }
            let (br, lr) = (records as f64 / median(b), records as f64 / median(l));
            println!(
                "{:<10} {:<12} {:>10} {:>14.0} {:>14.0} {:>8.3}",
                join.name(),
                p,
                want,
                br,
                lr,
                br / lr
            );
        }
    }
}
