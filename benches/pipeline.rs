//! `cargo bench --bench pipeline`: generator -> filter -> map -> key_by exchange ->
//! discard, at parallelism 1 and 2, in events per second, each beside a hand-written
//! single-threaded loop doing the same work in the same run (generate, filter, map,
//! hash the key to its key group and subtask, discard), as a ratio; and the engine
//! with hot-key counting off (`JobConfig::hot_keys`), for what counting costs (on/off
//! ratio, same run).
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only checks that the
//! pipeline works, on a small input.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brook::connectors::GeneratorSource;
use brook::core::element::Batch;
use brook::core::keys::{
    hash_key, key_group_for_hash, subtask_for_key_group, DEFAULT_MAX_PARALLELISM,
};
use brook::core::operator::{OpResult, SubtaskInfo};
use brook::core::sink::{Sink, SinkWriter};
use brook::engine::{JobConfig, StreamEnvironment};

const KEYS: u64 = 10_000;

/// Counts what it receives, and drops it.
#[derive(Clone, Default)]
struct Discard {
    seen: Arc<AtomicU64>,
    checksum: Arc<AtomicU64>,
}

impl Sink for Discard {
    type In = (u64, i64);
    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = (u64, i64)>>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for Discard {
    type In = (u64, i64);
    fn write_batch(&mut self, batch: Batch<(u64, i64)>) -> OpResult {
        let sum = batch
            .iter()
            .fold(0u64, |a, r| a.wrapping_add(r.value.1 as u64));
        self.seen.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.checksum.fetch_add(sum, Ordering::Relaxed);
        Ok(())
    }
}

fn keep(value: i64) -> bool {
    value % 4 != 0
}

/// The engine: returns (seconds, records reaching the sink, checksum).
fn engine(n: u64, parallelism: u32, hot_keys: bool) -> (f64, u64, u64) {
    let env = StreamEnvironment::new(JobConfig {
        hot_keys,
        ..JobConfig::with_parallelism(parallelism)
    });
    let sink = Discard::default();
    let source = GeneratorSource::builder()
        .events(n)
        .keys(KEYS)
        .build()
        .unwrap();
    env.source(source)
        .filter(|e| keep(e.value))
        .map(|e| (e.key, e.value * 2))
        .key_by(|(k, _)| *k)
        .sink(sink.clone());
    let t = Instant::now();
    env.execute("pipeline").unwrap();
    (
        t.elapsed().as_secs_f64(),
        sink.seen.load(Ordering::Relaxed),
        sink.checksum.load(Ordering::Relaxed),
    )
}

/// The same work in one loop: returns (seconds, records kept, checksum).
fn hand_loop(n: u64, parallelism: u32) -> (f64, u64, u64) {
    // Settings come from configuration at run time, as they do for the engine; a
    // compile-time constant would let the compiler turn every division into a shift.
    let (keys, max_parallelism) = black_box((KEYS, DEFAULT_MAX_PARALLELISM));
    let t = Instant::now();
    let (mut kept, mut checksum, mut routed) = (0u64, 0u64, 0u64);
    for i in 0..n {
        let key = (i * 2_654_435_761) % keys;
        let ts = i as i64;
        let value = (i % 100) as i64;
        black_box(ts);
        if keep(value) {
            let v = value * 2;
            let kg = key_group_for_hash(hash_key(&key), max_parallelism);
            routed = routed.wrapping_add(u64::from(subtask_for_key_group(
                max_parallelism,
                parallelism,
                kg,
            )));
            kept += 1;
            checksum = checksum.wrapping_add(v as u64);
        }
    }
    black_box(routed);
    (t.elapsed().as_secs_f64(), kept, checksum)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (n, rounds) = if bench {
        (20_000_000u64, 5)
    } else {
        (20_000, 1)
    };
    println!("pipeline: {n} events, generator -> filter -> map -> key_by -> discard (median of {rounds})");
    println!(
        "{:<14} {:>14} {:>14} {:>8} {:>18} {:>8}",
        "parallelism", "brook ev/s", "loop ev/s", "ratio", "hot keys off ev/s", "on/off"
    );
    for p in [1u32, 2] {
        let (mut engine_t, mut loop_t, mut off_t) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (lt, lk, lc) = hand_loop(n, p);
            let (et, ek, ec) = engine(n, p, true);
            let (ot, ok, oc) = engine(n, p, false);
            assert_eq!((ek, ec), (lk, lc), "the engine and the loop disagree");
            assert_eq!((ok, oc), (lk, lc), "the engine without hot keys disagrees");
            engine_t.push(et);
            loop_t.push(lt);
            off_t.push(ot);
        }
        let (e, l, o) = (
            n as f64 / median(engine_t),
            n as f64 / median(loop_t),
            n as f64 / median(off_t),
        );
        println!(
            "{:<14} {:>14.0} {:>14.0} {:>8.2} {:>18.0} {:>8.2}",
            p,
            e,
            l,
            e / l,
            o,
            e / o
        );
    }
}
