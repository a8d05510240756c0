//! Windows through the builder API and the runtime: parallel runs over out-of-order
//! input equal an offline computation, late records reach the side output, and idle
//! partitions stop holding windows back only with an idle timeout.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use brook_core::time::{Clock, ManualClock, Millis};
use brook_core::watermark::WatermarkStrategy;
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{JobConfig, OutputTag, StreamEnvironment};
use brook_operators::window::aggregate::{Count, Sum};
use brook_operators::window::assigner::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows, WindowAssigner,
};
use brook_operators::window::WindowResult;
use proptest::prelude::*;

type Row = (u8, i64);
type Results = BTreeMap<(u8, Millis, Millis), (u64, i64)>;

/// Runs `input` (value, event time) through key_by -> window -> (count, sum).
fn run(input: &[(Row, Millis)], assigner: WindowAssigner, bound: Millis, p: u32) -> Results {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(p));
    let out = CollectSink::new();
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(bound);
    env.from_source(VecSource::with_timestamps(input.to_vec()), strategy)
        .key_by(|r: &Row| r.0)
        .window(assigner)
        .aggregate((Count, Sum::of(|r: &Row| r.1)))
        .sink(out.clone());
    env.execute("windows").unwrap();
    let mut got = Results::new();
    for r in out.values() {
        let r: WindowResult<u8, (u64, i64)> = r;
        let prev = got.insert((r.key, r.window.start, r.window.end), r.value);
        assert!(prev.is_none(), "a window fired twice: {r:?}");
    }
    got
}

/// The same, offline: every record into every window it belongs to.
fn offline(input: &[(Row, Millis)], assigner: WindowAssigner) -> Results {
    let mut want = Results::new();
    let mut ws = Vec::new();
    for ((k, v), t) in input {
        ws.clear();
        assigner.assign_windows(*t, 0, &mut ws);
        for w in &ws {
            let e = want.entry((*k, w.start, w.end)).or_default();
            e.0 += 1;
            e.1 += v;
        }
    }
    want
}

/// Sessions offline: per key, sort the times and cut where the gap is reached.
fn offline_sessions(input: &[(Row, Millis)], gap: Millis) -> Results {
    let mut by_key: BTreeMap<u8, Vec<(Millis, i64)>> = BTreeMap::new();
    for ((k, v), t) in input {
        by_key.entry(*k).or_default().push((*t, *v));
    }
    let mut want = Results::new();
    for (k, mut evs) in by_key {
        evs.sort();
        let (mut start, mut end, mut n, mut sum) = (evs[0].0, evs[0].0 + gap, 0u64, 0i64);
        for (t, v) in evs {
            if t > end {
                want.insert((k, start, end), (n, sum));
                (start, n, sum) = (t, 0, 0);
            }
            end = end.max(t + gap);
            n += 1;
            sum += v;
        }
        want.insert((k, start, end), (n, sum));
    }
    want
}

/// Input whose disorder stays within `bound` ms within each split: timestamps around an
/// increasing base, shuffled by less than the bound.
fn disordered(bound: Millis) -> impl Strategy<Value = Vec<(Row, Millis)>> {
    prop::collection::vec((0u8..6, -50i64..50, 0..bound.max(1), 0i64..40), 1..300).prop_map(
        move |v| {
            let mut base = 0;
            v.into_iter()
                .map(|(k, val, jitter, step)| {
                    base += step;
                    ((k, val), base + 1_000 - jitter)
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn tumbling_and_hopping_at_parallelism_2_equal_the_offline_result(
        input in disordered(100), p in 1u32..3,
    ) {
        let t = TumblingEventTimeWindows::of(100).unwrap();
        prop_assert_eq!(run(&input, t, 100, p), offline(&input, t));
        let h = SlidingEventTimeWindows::of(200, 50).unwrap();
        prop_assert_eq!(run(&input, h, 100, p), offline(&input, h));
    }

    #[test]
    fn sessions_at_parallelism_2_equal_the_offline_result(input in disordered(100)) {
        let s = EventTimeSessionWindows::with_gap(30).unwrap();
        // A bound covering the whole input: nothing is late, so merging order and
        // splits do not matter.
        prop_assert_eq!(run(&input, s, 1_000_000, 2), offline_sessions(&input, 30));
    }
}

#[test]
fn late_records_go_to_the_side_output_and_allowed_lateness_refires() {
    let env = StreamEnvironment::new(JobConfig::default());
    let results = CollectSink::new();
    let late_sink = CollectSink::new();
    let late = OutputTag::<Row>::new("late");
    let input = vec![
        ((1, 1), 100),
        ((1, 2), 1_200), // W = 1199: [0, 1000) fires
        ((1, 3), 900),   // within the lateness of 500: refires [0, 1000)
        ((1, 4), 1_600), // W = 1599: cleanup of [0, 1000) (999 + 500 <= 1599)
        ((1, 5), 950),   // late: to the side output
    ];
    let strategy = WatermarkStrategy::for_monotonous_timestamps().with_emit_interval(0);
    let windowed = env
        .from_source(VecSource::with_timestamps(input), strategy)
        .key_by(|r: &Row| r.0)
        .window(TumblingEventTimeWindows::of(1_000).unwrap())
        .allowed_lateness(500)
        .side_output_late_data(&late)
        .aggregate(Sum::of(|r: &Row| r.1));
    windowed
        .get_side_output(&late)
        .unwrap()
        .sink(late_sink.clone());
    windowed.sink(results.clone());
    let r = env.execute("late").unwrap();
    let got: Vec<_> = results
        .values()
        .into_iter()
        .map(|r| (r.window.start, r.value))
        .collect();
    assert_eq!(got, vec![(0, 1), (0, 4), (1_000, 6)]);
    assert_eq!(late_sink.values(), vec![(1, 5)]);
    let late_count: u64 = r.vertices.iter().map(|(_, t)| t.late_records).sum();
    assert_eq!(late_count, 1);
}

#[test]
fn a_side_output_nobody_wrote_is_an_error() {
    let env = StreamEnvironment::new(JobConfig::default());
    let s = env.source(VecSource::new(vec![1u8]));
    let err = s
        .get_side_output(&OutputTag::<u8>::new("nothing"))
        .unwrap_err();
    assert!(err.to_string().contains("nothing"), "{err}");
}

/// Two splits on one subtask; split 0 gets an event every poll while the test advances
/// processing time, split 1 never gets one. Unbounded until `stop`.
#[derive(Clone)]
struct OneBusySplit {
    clock: ManualClock,
    stop: Arc<AtomicBool>,
}

#[derive(Debug, Clone)]
struct S(u32);
impl Split for S {
    fn split_id(&self) -> String {
        format!("s{}", self.0)
    }
}

impl Source for OneBusySplit {
    type Out = Row;
    type Split = S;
    fn enumerate_splits(&self, _p: u32) -> OpResult<Vec<S>> {
        Ok(vec![S(0), S(1)])
    }
    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        _splits: Vec<S>,
    ) -> OpResult<Box<dyn SourceReader<Out = Row>>> {
        Ok(Box::new(BusyReader {
            src: self.clone(),
            last: None,
        }))
    }
    fn is_bounded(&self) -> bool {
        false
    }
}

struct BusyReader {
    src: OneBusySplit,
    last: Option<Millis>,
}

impl SourceReader for BusyReader {
    type Out = Row;
    fn poll_next(&mut self, out: &mut Output<Row>) -> OpResult<InputStatus> {
        if self.src.stop.load(Ordering::SeqCst) {
            return Ok(InputStatus::End);
        }
        // One event per millisecond of processing time, event time = processing time.
        let now = self.src.clock.now_ms();
        if self.last != Some(now) {
            self.last = Some(now);
            out.set_split(0);
            out.collect((7, 1), Some(now));
        }
        Ok(InputStatus::NothingAvailable)
    }
}

/// Windows fired while processing time runs from 0 to 3 s with one split silent.
/// Waits (up to 3 s) for `expect` windows, then stops the job before its end fires
/// the rest.
fn fired_with_a_silent_split(idle_timeout: Option<Millis>, expect: usize) -> Vec<Millis> {
    let clock = ManualClock::new(0);
    let stop = Arc::new(AtomicBool::new(false));
    let env = StreamEnvironment::new(JobConfig {
        clock: clock.shared(),
        ..JobConfig::default()
    });
    let mut strategy = WatermarkStrategy::for_monotonous_timestamps().with_emit_interval(0);
    if let Some(t) = idle_timeout {
        strategy = strategy.with_idleness(t);
    }
    let out = CollectSink::new();
    let src = OneBusySplit {
        clock: clock.clone(),
        stop: Arc::clone(&stop),
    };
    env.from_source(src, strategy)
        .key_by(|r: &Row| r.0)
        .window(TumblingEventTimeWindows::of(1_000).unwrap())
        .aggregate(Count)
        .sink(out.clone());
    let job = env.start("idle").unwrap();
    for _ in 0..30 {
        clock.advance(100);
        std::thread::sleep(Duration::from_millis(15));
    }
    let mut waited = 0;
    while (out.values().len() < expect && waited < 3_000) || waited < 200 {
        std::thread::sleep(Duration::from_millis(20));
        waited += 20;
    }
    let fired: Vec<Millis> = out.values().iter().map(|r| r.window.start).collect();
    stop.store(true, Ordering::SeqCst);
    job.join().unwrap();
    fired
}

#[test]
fn a_silent_split_holds_windows_back_without_idleness() {
    assert_eq!(fired_with_a_silent_split(None, 0), Vec::<Millis>::new());
}

#[test]
fn windows_fire_once_the_silent_split_is_idle() {
    // Split 1 is idle from 500 ms on; the event at 3000 ms brings split 0's watermark
    // to 2999, and [0, 1000), [1000, 2000), [2000, 3000) have fired on it alone.
    let fired = fired_with_a_silent_split(Some(500), 3);
    assert_eq!(fired, vec![0, 1_000, 2_000], "{fired:?}");
}

#[test]
fn window_all_reduces_every_record_of_a_window() {
    use brook_operators::window::Reduce;
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    let out = CollectSink::new();
    let input: Vec<(Row, Millis)> = (0..100).map(|i| ((i as u8 % 3, i), i * 10)).collect();
    env.from_source(
        VecSource::with_timestamps(input),
        WatermarkStrategy::for_monotonous_timestamps(),
    )
    .window_all(TumblingEventTimeWindows::of(500).unwrap())
    .aggregate(Reduce::of(|a: &Row, b: &Row| (a.0.max(b.0), a.1 + b.1)))
    .sink(out.clone());
    env.execute("window-all").unwrap();
    let mut got: Vec<_> = out
        .values()
        .into_iter()
        .map(|r| (r.window.start, r.value.unwrap().1))
        .collect();
    got.sort();
    // Windows of 50 records each: sums of 0..50, 50..100.
    assert_eq!(got, vec![(0, 1225), (500, 3725)]);
}
