//! `cargo bench --bench join`: an interval join of orders with payments (issue 6),
//! at parallelism 1 and 2, in input records per second, beside a hand-written
//! single-threaded loop doing the same join in the same run (per-key buffers of both
//! sides, cleaned by the watermark), as a ratio.
//!
//! The workload: order `i` (key `i * 2654435761 mod 10,000`, time `i` ms) and, for
//! three orders in four, its payment at `i + (i mod 8)` ms; the join pairs payments with
//! orders of the same key within `[0, 5]` ms, so a payment made after 6 or 7 ms finds
//! none. Both streams are in time order (watermark: max seen - 1). Every run is
//! checked: the pair count and a checksum of the pairs equal the loop's, and the count
//! equals the formula.
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only checks, on a few
//! thousand records, that the join is right. `BROOK_BENCH_SCALE` (default 1.0) scales
//! the record count, `BROOK_BENCH_REPS` (default 3) the rounds (medians shown).
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brook::core::element::Batch;
use brook::core::operator::{OpResult, Output, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::core::source::{InputStatus, Source, SourceReader, Split};
use brook::core::time::Millis;
use brook::core::watermark::WatermarkStrategy;
use brook::engine::{JobConfig, StreamEnvironment};

const KEYS: u64 = 10_000;
const MULTIPLIER: u64 = 2_654_435_761;
const LOWER: Millis = 0;
const UPPER: Millis = 5;

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
fn expected_pairs(n: u64) -> u64 {
    (0..n).filter(|i| i % 4 != 3 && i % 8 <= 5).count() as u64
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
fn brook(n: u64, parallelism: u32) -> (f64, u64, u64) {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let strategy = || WatermarkStrategy::for_bounded_out_of_orderness(7);
    let orders = env
        .from_source(RangeSource { n, f: order }, strategy())
        .key_by(|r: &Rec| r.1);
    let payments = env
        .from_source(RangeSource { n, f: payment }, strategy())
        .key_by(|r: &Rec| r.1);
    let sink = Count::default();
    orders
        .interval_join(payments, LOWER, UPPER)
        .unwrap()
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
    let want = expected_pairs(n);
    println!(
        "join: interval join [{LOWER}, {UPPER}] ms of {n} orders with their payments ({records} records in, {want} pairs out), median of {rounds}"
    );
    println!(
        "{:<12} {:>14} {:>14} {:>8}",
        "parallelism", "brook rec/s", "loop rec/s", "ratio"
    );
    for p in [1u32, 2] {
        let (mut b, mut l) = (Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            let (lt, lp, lc) = hand_loop(n);
            let (bt, bp, bc) = brook(n, p);
            assert_eq!(lp, want, "the loop is wrong");
            assert_eq!((bp, bc), (lp, lc), "brook and the loop disagree");
            eprintln!("p={p} round {round}: brook {bt:.3} s, loop {lt:.3} s");
            b.push(bt);
            l.push(lt);
        }
        let (br, lr) = (records as f64 / median(b), records as f64 / median(l));
        println!("{:<12} {:>14.0} {:>14.0} {:>8.3}", p, br, lr, br / lr);
    }
}
