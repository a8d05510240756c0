//! End-to-end behaviour of the runtime: parallel runs agree with a sequential model,
//! per-key order survives a hash exchange, backpressure bounds memory, and failures
//! name their operator.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::element::Batch;
use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use brook_core::time::{ManualClock, Millis};
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{EngineError, JobConfig, StreamEnvironment};
use brook_operators::process::{KeyedContext, KeyedProcessFunction};
use brook_state::{StateDescriptor, TimeDomain};
use proptest::prelude::*;

/// filter -> map -> key_by -> running count per key, as the pipeline under test.
fn pipeline(input: Vec<(u8, i32)>, parallelism: u32, batch_size: usize) -> Vec<(u8, i32, u64)> {
    let config = JobConfig {
        batch_size,
        ..JobConfig::with_parallelism(parallelism)
    };
    let env = StreamEnvironment::new(config);
    let out = CollectSink::new();
    env.source(VecSource::new(input))
        .filter(|(_, v)| v % 3 != 0)
        .map(|(k, v)| (k % 16, v.wrapping_mul(2)))
        .key_by(|(k, _)| *k)
        .process(|| RunningCount)
        .sink(out.clone());
    env.execute("model").unwrap();
    out.values()
}

struct RunningCount;
const COUNT: StateDescriptor<u64> = StateDescriptor::new("count");

impl KeyedProcessFunction for RunningCount {
    type Key = u8;
    type In = (u8, i32);
    type Out = (u8, i32, u64);

    fn process_element(
        &mut self,
        v: (u8, i32),
        ctx: &mut KeyedContext<'_, u8>,
        out: &mut Output<(u8, i32, u64)>,
    ) -> OpResult {
        let n = ctx.state().value(&COUNT).get().unwrap().unwrap_or(0) + 1;
        ctx.state().value(&COUNT).set(&n).unwrap();
        out.collect((v.0, v.1, n), None);
        Ok(())
    }
}

/// The same computation, sequentially: per key, the running count of its records.
fn model(input: &[(u8, i32)]) -> Vec<(u8, i32, u64)> {
    let mut counts: BTreeMap<u8, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for &(k, v) in input.iter().filter(|(_, v)| v % 3 != 0) {
        let k = k % 16;
        let c = counts.entry(k).or_default();
        *c += 1;
        out.push((k, v.wrapping_mul(2), *c));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Parallelism 1, 2 and 4 give the same per-key multisets as the sequential model.
    /// The running counts of a key are 1..=n only if all its records reached the same
    /// subtask (and its state).
    #[test]
    fn parallel_runs_match_the_sequential_model(input in proptest::collection::vec((any::<u8>(), any::<i32>()), 0..400), batch in 1usize..64) {
        let mut expected = model(&input);
        expected.sort();
        for p in [1, 2, 4] {
            // Source splits interleave, so which value gets which count differs
            // between runs: compare each key's values and counts as multisets.
            let mut got = pipeline(input.clone(), p, batch);
            got.sort();
            let per_key = |v: &[(u8, i32, u64)]| {
                let mut m: BTreeMap<u8, (Vec<i32>, Vec<u64>)> = BTreeMap::new();
                for &(k, x, c) in v {
                    let e = m.entry(k).or_default();
                    e.0.push(x);
                    e.1.push(c);
                }
                for e in m.values_mut() {
                    e.0.sort();
                    e.1.sort();
                }
                m
            };
            prop_assert_eq!(per_key(&got), per_key(&expected), "parallelism {}", p);
        }
    }
}

#[test]
fn per_key_order_is_kept_across_a_hash_exchange() {
    // One source split, so the input order per key is well defined; 4 downstream
    // subtasks. Each record carries its sequence number within its key.
    let mut seqs = [0u32; 50];
    let input: Vec<(u32, u32)> = (0..20_000u32)
        .map(|i| {
            let k = (i * 7919) % 50;
            seqs[k as usize] += 1;
            (k, seqs[k as usize])
        })
        .collect();
    let env = StreamEnvironment::new(JobConfig {
        batch_size: 37,
        ..JobConfig::with_parallelism(4)
    });
    let out = CollectSink::new();
    env.source(VecSource::new(input).splits(1))
        .set_parallelism(1)
        .key_by(|(k, _)| *k)
        .map(|r| r)
        .sink(out.clone());
    env.execute("order").unwrap();
    let got = out.values();
    assert_eq!(got.len(), 20_000);
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for (k, s) in got {
        let prev = last.insert(k, s).unwrap_or(0);
        assert_eq!(s, prev + 1, "key {k}: {s} after {prev}");
    }
}

/// A sink that sleeps on every batch.
#[derive(Clone)]
struct SlowSink {
    written: Arc<AtomicU64>,
}

impl Sink for SlowSink {
    type In = u64;
    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = u64>>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for SlowSink {
    type In = u64;
    fn write_batch(&mut self, batch: Batch<u64>) -> OpResult {
        std::thread::sleep(Duration::from_millis(2));
        self.written
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn a_slow_sink_bounds_the_batches_in_flight() {
    let capacity = 3;
    let config = JobConfig {
        batch_size: 64,
        channel_capacity: capacity,
        ..JobConfig::with_parallelism(2)
    };
    let env = StreamEnvironment::new(config);
    let written = Arc::new(AtomicU64::new(0));
    env.source(VecSource::new((0..200_000u64).collect()))
        .map(|x| x + 1)
        .rebalance()
        .sink(SlowSink {
            written: Arc::clone(&written),
        });
    let job = env.start("slow").unwrap();
    let metrics = job.metrics().clone();
    let result = job.join().unwrap();
    assert_eq!(written.load(Ordering::Relaxed), 200_000);
    let sink = metrics
        .vertices()
        .into_iter()
        .find(|v| v.name == "sink")
        .unwrap();
    for m in &sink.subtasks {
        // Each sink subtask reads 2 channels (one per map subtask) of `capacity`
        // batches each: never more can be queued, however slow it is.
        let max = m.max_queued_batches.load(Ordering::Relaxed);
        assert!(max <= 2 * capacity as u64, "{max} batches queued");
    }
    let map = result.vertices.iter().find(|(n, _)| n == "map").unwrap();
    assert!(
        map.1.backpressure_ms > 0,
        "the map was never blocked: {:?}",
        map.1
    );
}

#[test]
fn a_panicking_map_fails_the_job_naming_it_within_a_second() {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    let out = CollectSink::new();
    env.source(VecSource::new((0..1_000_000u64).collect()))
        .map(|x| {
            if x == 5_000 {
                panic!("bad value {x}")
            } else {
                x
            }
        })
        .name("parse")
        .key_by(|x| x % 10)
        .map(|x| x)
        .sink(out);
    let sw = brook_core::time::Stopwatch::start();
    let err = env.execute("panics").unwrap_err();
    assert!(
        sw.elapsed_nanos() < 1_000_000_000,
        "took {} ms",
        sw.elapsed_nanos() / 1_000_000
    );
    let msg = err.to_string();
    assert!(matches!(err, EngineError::Task { .. }), "{msg}");
    assert!(
        msg.contains("parse (subtask") && msg.contains("panicked: bad value 5000"),
        "{msg}"
    );
}

#[test]
fn an_operator_error_fails_the_job_naming_operator_and_subtask() {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    env.source(VecSource::new(vec![1u64, 2, 3]))
        .key_by(|x| *x)
        .process(|| Fails)
        .sink(CollectSink::new());
    let msg = env.execute("fails").unwrap_err().to_string();
    assert_eq!(msg, "process (subtask 1/1) failed: no twos allowed");
}

struct Fails;
impl KeyedProcessFunction for Fails {
    type Key = u64;
    type In = u64;
    type Out = u64;
    fn process_element(
        &mut self,
        v: u64,
        _ctx: &mut KeyedContext<'_, u64>,
        out: &mut Output<u64>,
    ) -> OpResult {
        if v == 2 {
            return Err(brook_core::operator::OperatorError::failed(
                "no twos allowed",
            ));
        }
        out.collect(v, None);
        Ok(())
    }
}

/// Emits each key's sum from an event-time timer at 1000 ms (fired by the final
/// watermark at the end of input) and from a processing-time timer 20 ms after each
/// record.
struct Timers;
const SUM: StateDescriptor<i64> = StateDescriptor::new("sum");

impl KeyedProcessFunction for Timers {
    type Key = u8;
    type In = (u8, i64);
    type Out = (u8, i64, &'static str);

    fn process_element(
        &mut self,
        v: (u8, i64),
        ctx: &mut KeyedContext<'_, u8>,
        _out: &mut Output<Self::Out>,
    ) -> OpResult {
        let s = ctx.state().value(&SUM).get().unwrap().unwrap_or(0);
        ctx.state().value(&SUM).set(&(s + v.1)).unwrap();
        ctx.register_event_time_timer(1_000);
        let now = ctx.current_processing_time();
        ctx.register_processing_time_timer(now + 20);
        Ok(())
    }

    fn on_timer(
        &mut self,
        ts: Millis,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, u8>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let s = ctx.state().value(&SUM).get().unwrap().unwrap_or(0);
        let d = if domain == TimeDomain::EventTime {
            "event"
        } else {
            "processing"
        };
        out.collect((*ctx.key(), s, d), Some(ts));
        Ok(())
    }
}

#[test]
fn the_final_watermark_fires_event_time_timers() {
    let out = CollectSink::new();
    let input: Vec<(u8, i64)> = (0..100).map(|i| ((i % 5) as u8, i as i64)).collect();
    // The clock stands still, so processing-time timers never fire here.
    let config = JobConfig {
        clock: ManualClock::new(0).shared(),
        ..JobConfig::with_parallelism(2)
    };
    let env = StreamEnvironment::new(config);
    env.source(VecSource::new(input))
        .key_by(|(k, _)| *k)
        .process(|| Timers)
        .sink(out.clone());
    env.execute("timers").unwrap();
    let mut got = out.values();
    got.sort();
    let expected: Vec<(u8, i64, &str)> = (0..5u8)
        .map(|k| (k, (0..100).filter(|i| i % 5 == k as i64).sum(), "event"))
        .collect();
    assert_eq!(got, expected);
}

/// Emits its records, then waits (reporting no data) until released.
#[derive(Clone)]
struct GateSource {
    records: Vec<(u8, i64)>,
    released: Arc<AtomicBool>,
}

#[derive(Debug, Clone)]
struct OneSplit;
impl Split for OneSplit {
    fn split_id(&self) -> String {
        "one".into()
    }
}

impl Source for GateSource {
    type Out = (u8, i64);
    type Split = OneSplit;
    fn enumerate_splits(&self, _p: u32) -> OpResult<Vec<OneSplit>> {
        Ok(vec![OneSplit])
    }
    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<OneSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = (u8, i64)>>> {
        let records = if splits.is_empty() {
            Vec::new()
        } else {
            self.records.clone()
        };
        Ok(Box::new(GateReader {
            records,
            released: Arc::clone(&self.released),
        }))
    }
    fn is_bounded(&self) -> bool {
        false
    }
}

struct GateReader {
    records: Vec<(u8, i64)>,
    released: Arc<AtomicBool>,
}

impl SourceReader for GateReader {
    type Out = (u8, i64);
    fn poll_next(&mut self, out: &mut Output<(u8, i64)>) -> OpResult<InputStatus> {
        for r in self.records.drain(..) {
            out.collect(r, None);
        }
        if self.released.load(Ordering::SeqCst) {
            Ok(InputStatus::End)
        } else {
            Ok(InputStatus::NothingAvailable)
        }
    }
}

#[test]
fn processing_time_timers_fire_when_the_clock_reaches_them() {
    let clock = ManualClock::new(1_000);
    let config = JobConfig {
        clock: clock.shared(),
        ..JobConfig::with_parallelism(2)
    };
    let env = StreamEnvironment::new(config);
    let out = CollectSink::new();
    let released = Arc::new(AtomicBool::new(false));
    let source = GateSource {
        records: vec![(1, 10), (2, 20), (1, 5)],
        released: Arc::clone(&released),
    };
    env.source(source)
        .key_by(|(k, _)| *k)
        .process(|| Timers)
        .sink(out.clone());
    let job = env.start("processing-time").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        out.values().is_empty(),
        "fired before the clock moved: {:?}",
        out.values()
    );
    clock.advance(20);
    let mut waited = 0;
    while out.values().len() < 2 && waited < 5_000 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 10;
    }
    let mut got = out.records();
    got.sort_by_key(|r| r.value);
    let fired: Vec<_> = got.iter().map(|r| (r.value, r.timestamp)).collect();
    assert_eq!(
        fired,
        vec![
            ((1, 15, "processing"), Some(1_020)),
            ((2, 20, "processing"), Some(1_020))
        ]
    );
    released.store(true, Ordering::SeqCst);
    job.join().unwrap();
    // The final watermark then fired the event-time timers too.
    assert_eq!(out.values().len(), 4);
}
