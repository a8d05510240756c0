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

use brook::engine::JobConfig;

#[path = "common/workloads.rs"]
mod workloads;

use workloads::{fmt_rate, median, run_job, timed, Run, Settings, Tally, Workload, MULTIPLIER};

/// The brook job at `parallelism` with in-memory state.
fn brook(w: Workload, n: u64, parallelism: u32) -> Run {
    run_job(w, n, JobConfig::with_parallelism(parallelism))
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

/// Events per run in bench mode, before `BROOK_BENCH_SCALE`.
fn bench_events(w: Workload) -> u64 {
    match w {
        // 10 rows per event.
        Workload::W2 => 500_000,
        _ => 2_000_000,
    }
}

fn main() {
    let settings = Settings::from_env(5);
    let (bench, rounds, only) = (settings.bench, settings.rounds, settings.only.clone());
    let events = |w: Workload| -> u64 {
        if bench {
            settings.events(bench_events(w))
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
