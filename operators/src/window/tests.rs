//! Window operator tests, each run against both state tables (heap and bytes).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use brook_core::element::StreamRecord;
use brook_core::operator::{Operator, Output};
use brook_core::time::{ManualClock, Millis};
use brook_core::watermark::BoundedOutOfOrderness;
use brook_state::KeyedStateBackend;
use brook_testkit::operator::{Emitted, HarnessSetup, OperatorHarness, TestBackend};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::assigner::WindowKind;
use super::*;

type Got = [(
    Millis,
    WindowOutput<WindowResult<String, (u64, i64)>, Ev>,
    Option<Millis>,
)];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ev {
    key: String,
    ts: Millis,
    value: i64,
}

fn ev(key: &str, ts: Millis, value: i64) -> Ev {
    Ev {
        key: key.into(),
        ts,
        value,
    }
}

/// Every kind of state: `(name, backend)`. Building an operator on the backend (see
/// [`Backend::harness`]) also sets whether it may take a fast path: "heap" takes one
/// where the configuration allows (event time, default trigger), "heap-general" and
/// "bytes" never do.
fn backends() -> [(&'static str, Backend); 3] {
    [
        ("heap", Backend::new(TestBackend::Heap, false)),
        ("bytes", Backend::new(TestBackend::Serialized, false)),
        ("heap-general", Backend::new(TestBackend::Heap, true)),
    ]
}

/// A keyed state backend of the harness and whether the operator built on it is kept
/// off its fast paths.
#[derive(Debug, Clone, Copy)]
struct Backend {
    state: TestBackend,
    general: bool,
}

impl Backend {
    fn new(state: TestBackend, general: bool) -> Self {
        Backend { state, general }
    }

    /// A harness (not opened) for the operator `make` builds on this backend.
    fn harness<O: Operator>(
        self,
        setup: HarnessSetup,
        make: impl FnOnce(Box<dyn KeyedStateBackend>) -> O,
    ) -> OperatorHarness<O> {
        setup
            .keyed(self.state, |state| {
                operator::FORCE_GENERAL.with(|f| f.set(self.general));
                make(state)
            })
            .unwrap()
    }
}

type CountSum = (Count, Sum<fn(&Ev) -> i64>);
type KeyOf = fn(&Ev) -> String;
type CountSumOp = WindowOperator<Ev, String, KeyOf, function::Aggregating<CountSum>>;

fn count_sum() -> CountSum {
    (Count, Sum::of(|e: &Ev| e.value))
}

fn aggregate_op(assigner: WindowAssigner, backend: Box<dyn KeyedStateBackend>) -> CountSumOp {
    WindowOperator::aggregate(
        assigner,
        (|e: &Ev| e.key.clone()) as KeyOf,
        count_sum(),
        backend,
    )
}

/// An opened harness for the operator `make` builds on `backend`, fed as a source with
/// bounded out-of-orderness `ooo` would be (see [`feed`]).
fn driver<O: Operator<In = Ev>>(
    backend: Backend,
    ooo: Millis,
    make: impl FnOnce(Box<dyn KeyedStateBackend>) -> O,
) -> OperatorHarness<O> {
    let mut h = backend
        .harness(HarnessSetup::new("window"), make)
        .with_watermark_generator(BoundedOutOfOrderness::new(ooo));
    h.open().unwrap();
    h
}

/// Feeds one record without moving the watermark.
fn record<O: Operator<In = Ev>>(h: &mut OperatorHarness<O>, e: Ev) {
    let ts = e.ts;
    h.process_element(e, ts).unwrap();
}

/// Feeds a record, then the watermark `max_ts - ooo - 1` if it advanced (a watermark
/// after every record, semantics.md §2).
fn feed<O: Operator<In = Ev>>(h: &mut OperatorHarness<O>, e: Ev) {
    record(h, e);
    h.process_generated_watermark().unwrap();
}

/// What the harness collected: `(watermark when emitted, output, timestamp)`.
fn got<T: Clone>(output: &[Emitted<T>]) -> Vec<(Millis, T, Option<Millis>)> {
    output
        .iter()
        .map(|e| (e.watermark.millis(), e.value.clone(), e.timestamp))
        .collect()
}

/// Results as `(watermark, row)` JSON strings, sorted: equal when the same rows were
/// emitted at the same watermarks. Late rows carry no watermark (Flink's files give
/// none).
fn rows(got: &Got) -> Vec<(Option<Millis>, String)> {
    let mut v: Vec<_> = got
        .iter()
        .map(|(wm, o, _)| {
            let (wm, row) = match o {
                WindowOutput::Result(r) => (
                    Some(*wm),
                    json!({"stream": "main", "key": r.key,
                    "window_start": r.window.start, "window_end": r.window.end,
                    "count": r.value.0, "sum": r.value.1}),
                ),
                WindowOutput::Late(e) => (
                    None,
                    json!({"stream": "late", "key": e.key, "ts": e.ts, "value": e.value}),
                ),
            };
            let row: BTreeMap<String, Value> = serde_json::from_value(row).unwrap();
            (wm, serde_json::to_string(&row).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn flink_rows(jsonl: &str) -> Vec<(Option<Millis>, String)> {
    let mut v: Vec<_> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let row: BTreeMap<String, Value> = serde_json::from_str(l).unwrap();
            let wm = match row["stream"].as_str() {
                Some("main") => Some(row["watermark"].as_i64().unwrap()),
                _ => None,
            };
            let row: BTreeMap<_, _> = row.into_iter().filter(|(k, _)| k != "watermark").collect();
            (wm, serde_json::to_string(&row).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Runs one conformance case (`case` is its name, for messages) on every backend.
fn conformance(name: &str, case: &str, flink: &str) {
    let case: Value = serde_json::from_str(case).unwrap();
    let w = &case["window"];
    let offset = w.get("offset_ms").and_then(Value::as_i64).unwrap_or(0);
    let ms = |f: &str| w[f].as_i64().unwrap();
    let assigner = match w["kind"].as_str().unwrap() {
        "tumbling" => TumblingEventTimeWindows::with_offset(ms("size_ms"), offset),
        "hopping" | "sliding" => {
            SlidingEventTimeWindows::with_offset(ms("size_ms"), ms("slide_ms"), offset)
        }
        "session" => EventTimeSessionWindows::with_gap(ms("gap_ms")),
        k => panic!("{name}: unknown kind {k}"),
    }
    .unwrap();
    let events: Vec<Ev> = serde_json::from_value(case["events"].clone()).unwrap();
    let case_name = name;
    for (name, backend) in backends() {
        let ooo = case["out_of_orderness_ms"].as_i64().unwrap();
        let mut d = driver(backend, ooo, |b| {
            aggregate_op(assigner, b)
                .allowed_lateness(case["allowed_lateness_ms"].as_i64().unwrap())
                .emit_late_records(true)
        });
        for e in &events {
            feed(&mut d, e.clone());
        }
        d.end_input().unwrap();
        let got = got(d.output());
        assert_eq!(rows(&got), flink_rows(flink), "{case_name}: {name} table");
        let late = flink.lines().filter(|l| l.contains("\"late\"")).count() as u64;
        assert_eq!(d.operator().late_records(), late, "{case_name}");
        assert_eq!(d.context().late_records(), late, "{case_name}");
        assert_eq!(
            d.operator().window_count(),
            0,
            "{case_name}: all state cleaned up at the end"
        );
        // Results carry the window's max timestamp, late records their own.
        for (_, o, ts) in &got {
            match o {
                WindowOutput::Result(r) => assert_eq!(*ts, Some(r.window.max_timestamp())),
                WindowOutput::Late(e) => assert_eq!(*ts, Some(e.ts)),
            }
        }
    }
}

/// The shared conformance samples, `tests/conformance/` at the repository root (also
/// run as brook jobs by the root package's `tests/conformance.rs`).
fn conformance_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

/// Every case in `tests/conformance/` (`NAME.json` with its `NAME.flink.jsonl`), so a
/// case added there runs here too. Any other file but the README fails the test
/// rather than being skipped (a result file without its case, a misnamed case).
#[test]
fn conformance_cases_match_flink() {
    let dir = conformance_dir();
    let mut cases = Vec::new();
    let mut results = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let file = e.unwrap().file_name().into_string().unwrap();
        if let Some(name) = file.strip_suffix(".flink.jsonl") {
            results.push(name.to_string());
        } else if let Some(name) = file.strip_suffix(".json") {
            cases.push(name.to_string());
        } else {
            assert_eq!(
                file,
                "README.md",
                "not a conformance case: {}",
                dir.display()
            );
        }
    }
    cases.sort();
    results.sort();
    assert_eq!(cases, results, "each case NAME.json needs NAME.flink.jsonl");
    // The cases this test was written with are there (the folder is the right one).
    for known in ["session_merge", "tumbling_late"] {
        assert!(cases.iter().any(|c| c == known), "{known} missing");
    }
    for name in &cases {
        let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{name}{ext}"))).unwrap();
        conformance(name, &read(".json"), &read(".flink.jsonl"));
    }
}

/// `(watermark, key, start, end, count, sum)` of results; `(watermark, key, ts)` of late
/// records as `end = -1`.
fn flat(got: &Got) -> Vec<(Millis, String, Millis, Millis, u64, i64)> {
    got.iter()
        .map(|(wm, o, _)| match o {
            WindowOutput::Result(r) => (
                *wm,
                r.key.clone(),
                r.window.start,
                r.window.end,
                r.value.0,
                r.value.1,
            ),
            WindowOutput::Late(e) => (*wm, e.key.clone(), e.ts, -1, 0, e.value),
        })
        .collect()
}

/// Allowed lateness on tumbling windows, by Flink's rules: a window fires at its end,
/// fires again at once with the full result for each record within the lateness, a
/// window first created within the lateness fires at once, and after
/// `end - 1 + lateness` the window is gone and its records are late.
#[test]
fn tumbling_allowed_lateness() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 0, |b| {
            aggregate_op(TumblingEventTimeWindows::of(1000).unwrap(), b)
                .allowed_lateness(500)
                .emit_late_records(true)
        });
        feed(&mut d, ev("a", 100, 1)); // wm 99
        feed(&mut d, ev("a", 1200, 2)); // wm 1199: a [0,1000) fires
        feed(&mut d, ev("a", 500, 4)); // within lateness: re-fires with 2 records
        feed(&mut d, ev("b", 300, 8)); // b's window created late: fires at once
        feed(&mut d, ev("a", 1499, 16)); // wm 1498: [0,1000) kept (cleanup at 1499)
        feed(&mut d, ev("a", 999, 32)); // still kept: fires again with 3 records
        feed(&mut d, ev("a", 1600, 64)); // wm 1599: [0,1000) of a and b cleaned up
        feed(&mut d, ev("a", 700, 128)); // late
        feed(&mut d, ev("b", 999, 256)); // late
        d.end_input().unwrap();
        let a = |wm, s, e, n, sum| (wm, "a".to_string(), s, e, n, sum);
        let want = vec![
            a(1199, 0, 1000, 1, 1),
            a(1199, 0, 1000, 2, 5),
            (1199, "b".into(), 0, 1000, 1, 8),
            a(1498, 0, 1000, 3, 37),
            a(1599, 700, -1, 0, 128),
            (1599, "b".into(), 999, -1, 0, 256),
            a(Millis::MAX, 1000, 2000, 3, 82),
        ];
        assert_eq!(flat(&got(d.output())), want, "{name} table");
        assert_eq!(d.operator().late_records(), 2);
        assert_eq!(d.operator().window_count(), 0);
    }
}

/// Sessions within the allowed lateness: a fired session that merges fires again, at
/// once when the watermark is past the new end, else when it gets there; a record
/// touching a purged session starts a new one (late here).
#[test]
fn session_allowed_lateness() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 0, |b| {
            aggregate_op(EventTimeSessionWindows::with_gap(100).unwrap(), b)
                .allowed_lateness(1000)
                .emit_late_records(true)
        });
        feed(&mut d, ev("s", 0, 1)); // [0,100)
        feed(&mut d, ev("s", 150, 2)); // wm 149: [0,100) fires
        feed(&mut d, ev("s", 60, 4)); // [60,160) bridges to [0,250): fires at wm 249, not now
        feed(&mut d, ev("s", 400, 8)); // wm 399: [0,250) fires (3 records)
        feed(&mut d, ev("s", 90, 16)); // inside [0,250): fires again at once
        feed(&mut d, ev("s", 1300, 32)); // wm 1299: [0,250) gone (1249); [400,500) fires
        feed(&mut d, ev("s", 200, 64)); // touches the purged [0,250): own window late
        feed(&mut d, ev("s", 450, 128)); // [400,550): fires at once (max 549 <= 1299)
        d.end_input().unwrap();
        let s = |wm, st, e, n, sum| (wm, "s".to_string(), st, e, n, sum);
        let want = vec![
            s(149, 0, 100, 1, 1),
            s(399, 0, 250, 3, 7),
            s(399, 0, 250, 4, 23),
            s(1299, 400, 500, 1, 8),
            s(1299, 200, -1, 0, 64),
            s(1299, 400, 550, 2, 136),
            s(Millis::MAX, 1300, 1400, 1, 32),
        ];
        assert_eq!(flat(&got(d.output())), want, "{name} table");
        assert_eq!(d.operator().window_count(), 0);
    }
}

#[test]
fn late_records_are_dropped_unless_emitted() {
    for (_, backend) in backends() {
        let mut d = driver(backend, 0, |b| {
            aggregate_op(TumblingEventTimeWindows::of(10).unwrap(), b)
        });
        feed(&mut d, ev("k", 25, 1));
        feed(&mut d, ev("k", 3, 1));
        d.end_input().unwrap();
        assert_eq!(
            flat(&got(d.output())),
            vec![(Millis::MAX, "k".into(), 20, 30, 1, 1)]
        );
        assert_eq!(d.operator().late_records(), 1);
        assert_eq!(d.context().late_records(), 1);
    }
}

#[test]
fn sliding_windows_fire_in_time_order() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 0, |b| {
            aggregate_op(SlidingEventTimeWindows::of(20, 10).unwrap(), b)
        });
        record(&mut d, ev("k", 5, 1));
        record(&mut d, ev("k", 15, 2));
        record(&mut d, ev("k", -3, 4));
        d.process_watermark(19).unwrap();
        d.end_input().unwrap();
        let k = |wm, s, e, n, sum| (wm, "k".to_string(), s, e, n, sum);
        let want = vec![
            k(19, -20, 0, 1, 4),
            k(19, -10, 10, 2, 5),
            k(19, 0, 20, 2, 3),
            k(Millis::MAX, 10, 30, 1, 2),
        ];
        assert_eq!(flat(&got(d.output())), want, "{name} table");
    }
}

#[test]
fn count_trigger_fires_every_n_and_not_at_the_end() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 1000, |b| {
            aggregate_op(TumblingEventTimeWindows::of(100).unwrap(), b).trigger(Trigger::Count(2))
        });
        for (i, ts) in [1, 2, 3, 4, 5].into_iter().enumerate() {
            record(&mut d, ev("k", ts, 1 << i));
        }
        d.end_input().unwrap();
        let k = |s, e, n, sum| (Millis::MIN, "k".to_string(), s, e, n, sum);
        assert_eq!(
            flat(&got(d.output())),
            vec![k(0, 100, 2, 3), k(0, 100, 4, 15)],
            "{name} table"
        );
        assert_eq!(d.operator().window_count(), 0);
    }
}

#[test]
fn count_trigger_merges_counts_of_sessions() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 1000, |b| {
            aggregate_op(EventTimeSessionWindows::with_gap(15).unwrap(), b)
                .trigger(Trigger::Count(3))
        });
        record(&mut d, ev("k", 0, 1));
        record(&mut d, ev("k", 30, 2));
        record(&mut d, ev("k", 35, 4));
        // Bridges [0,15) (count 1) and [30,50) (count 2): 3, plus this record -> fires.
        record(&mut d, ev("k", 15, 8));
        assert_eq!(
            flat(&got(d.output())),
            vec![(Millis::MIN, "k".to_string(), 0, 50, 4, 15)],
            "{name} table"
        );
    }
}

#[test]
fn continuous_event_time_trigger_fires_early() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 0, |b| {
            aggregate_op(TumblingEventTimeWindows::of(100).unwrap(), b)
                .trigger(Trigger::ContinuousEventTime(30))
        });
        record(&mut d, ev("k", 5, 1));
        record(&mut d, ev("k", 40, 2));
        d.process_watermark(30).unwrap(); // early firing at 30
        d.process_watermark(59).unwrap(); // nothing: next at 60
        record(&mut d, ev("k", 70, 4));
        d.process_watermark(95).unwrap(); // early firing at 60 and 90
        d.process_watermark(99).unwrap(); // end of window
        let k = |wm, n, sum| (wm, "k".to_string(), 0, 100, n, sum);
        assert_eq!(
            flat(&got(d.output())),
            vec![k(30, 2, 3), k(95, 3, 7), k(95, 3, 7), k(99, 3, 7)],
            "{name} table"
        );
        assert_eq!(d.operator().window_count(), 0);
    }
}

#[test]
fn continuous_trigger_needs_a_positive_interval() {
    let mut h = OperatorHarness::new(
        aggregate_op(
            TumblingEventTimeWindows::of(100).unwrap(),
            TestBackend::Heap.create().unwrap(),
        )
        .trigger(Trigger::ContinuousEventTime(0)),
    );
    let err = h.open().unwrap_err();
    assert!(err.to_string().contains("interval"), "{err}");
}

#[test]
fn records_without_event_time_are_an_error_naming_the_operator() {
    let mut h = Backend::new(TestBackend::Heap, false).harness(HarnessSetup::new("window"), |b| {
        aggregate_op(TumblingEventTimeWindows::of(100).unwrap(), b)
    });
    h.open().unwrap();
    let err = h
        .process_record(StreamRecord::new(ev("k", 1, 1)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("window (subtask 1/1)"), "{err}");
    assert!(err.contains("WatermarkStrategy"), "{err}");
}

#[test]
fn processing_time_windows_fire_on_the_clock() {
    for (name, backend) in backends() {
        let clock = ManualClock::new(3);
        let mut h = backend.harness(HarnessSetup::new("window").clock(&clock), |b| {
            aggregate_op(TumblingProcessingTimeWindows::of(10).unwrap(), b)
        });
        h.open().unwrap();
        let batch = vec![
            StreamRecord::new(ev("a", 0, 1)),
            StreamRecord::new(ev("b", 0, 2)),
        ];
        h.process_batch(batch).unwrap();
        // The window's timer is at 9, its max timestamp; it fires once processing time
        // has passed 9 (as Flink since FLINK-9857): a record at 9 still joins it.
        assert_eq!(h.pending_processing_time(), Some(10));
        // The clock moves on without the callback (the task has not polled yet).
        clock.set(12);
        h.process_record(StreamRecord::new(ev("a", 0, 4))).unwrap();
        assert!(h.output().is_empty());
        assert_eq!(h.pending_processing_time(), Some(10));
        h.set_processing_time(12).unwrap();
        let got: Vec<_> = h
            .take_records()
            .into_iter()
            .map(|rec| match rec.value {
                WindowOutput::Result(r) => (r.key, r.window, r.value, rec.timestamp.unwrap()),
                WindowOutput::Late(_) => panic!("late"),
            })
            .collect();
        let w = TimeWindow::new(0, 10);
        assert_eq!(
            got,
            vec![("a".into(), w, (1, 1), 9), ("b".into(), w, (1, 2), 9)],
            "{name} table"
        );
        assert_eq!(h.pending_processing_time(), Some(20));
        h.set_processing_time(19).unwrap();
        assert!(
            h.output().is_empty(),
            "{name}: not before processing time passed 19"
        );
        h.set_processing_time(20).unwrap();
        assert_eq!(h.output().len(), 1);
        assert_eq!(h.operator().window_count(), 0);
    }
}

/// A record processed at a window's max timestamp joins that window, which then fires
/// once: before FLINK-9857's rule the timer fired at 9 and a record at 9 opened the
/// fired window again, so one key had two rows for one window (Nexmark q12 saw it).
#[test]
fn a_record_at_a_processing_time_windows_last_millisecond_joins_it_and_it_fires_once() {
    for (name, backend) in backends() {
        let clock = ManualClock::new(3);
        let mut h = backend.harness(HarnessSetup::new("window").clock(&clock), |b| {
            aggregate_op(TumblingProcessingTimeWindows::of(10).unwrap(), b)
        });
        h.open().unwrap();
        h.process_record(StreamRecord::new(ev("a", 0, 1))).unwrap();
        clock.set(9);
        h.set_processing_time(9).unwrap();
        assert!(h.output().is_empty(), "{name}");
        h.process_record(StreamRecord::new(ev("a", 0, 2))).unwrap();
        clock.set(10);
        h.set_processing_time(10).unwrap();
        let rows: Vec<_> = h
            .take_records()
            .into_iter()
            .map(|rec| match rec.value {
                WindowOutput::Result(r) => (r.key, r.window, r.value),
                WindowOutput::Late(_) => panic!("late"),
            })
            .collect();
        assert_eq!(
            rows,
            vec![("a".into(), TimeWindow::new(0, 10), (2, 3))],
            "{name}"
        );
        assert_eq!(h.operator().window_count(), 0, "{name}");
    }
}

#[test]
fn processing_time_sessions_merge() {
    for (name, backend) in backends() {
        let clock = ManualClock::new(0);
        let mut h = backend.harness(HarnessSetup::new("window").clock(&clock), |b| {
            aggregate_op(ProcessingTimeSessionWindows::with_gap(10).unwrap(), b)
        });
        h.open().unwrap();
        for now in [0, 5, 14, 30] {
            // The clock moves on without callbacks: the sessions merge first.
            clock.set(now);
            h.process_record(StreamRecord::new(ev("a", 0, now)))
                .unwrap();
        }
        h.set_processing_time(100).unwrap();
        let got: Vec<_> = h
            .take_values()
            .into_iter()
            .map(|v| match v {
                WindowOutput::Result(r) => (r.window, r.value),
                WindowOutput::Late(_) => panic!("late"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (TimeWindow::new(0, 24), (3, 19)),
                (TimeWindow::new(30, 40), (1, 30))
            ],
            "{name} table"
        );
    }
}

/// Emits `(key, window, values in the order the window kept them)`.
struct Collect;

impl ProcessWindowFunction<String, Ev> for Collect {
    type Out = (String, TimeWindow, Vec<i64>);

    fn process(
        &mut self,
        key: &String,
        window: &TimeWindow,
        elements: &[Ev],
        out: &mut Output<Self::Out>,
    ) {
        let values = elements.iter().map(|e| e.value).collect();
        out.collect((key.clone(), *window, values), None);
    }
}

#[test]
fn process_window_function_sees_all_records() {
    for (name, backend) in backends() {
        let mut d = driver(backend, 100, |b| {
            WindowOperator::process(
                EventTimeSessionWindows::with_gap(15).unwrap(),
                |e: &Ev| e.key.clone(),
                Collect,
                b,
            )
        });
        for (ts, v) in [(0, 1), (30, 2), (5, 3), (35, 4), (18, 5)] {
            feed(&mut d, ev("k", ts, v));
        }
        d.end_input().unwrap();
        let got: Vec<_> = got(d.output())
            .into_iter()
            .map(|(_, o, ts)| match o {
                WindowOutput::Result(r) => (r, ts),
                WindowOutput::Late(_) => panic!("late"),
            })
            .collect();
        // [18,33) bridges [0,20) and [30,50): the earlier session's records first.
        let w = TimeWindow::new(0, 50);
        assert_eq!(
            got,
            vec![(("k".to_string(), w, vec![1, 3, 2, 4, 5]), Some(49))],
            "{name} table"
        );
    }
}

/// Plain-Rust reference: `(key, start, end) -> (count, sum)` for in-order input.
fn offline(kind: WindowKind, events: &[Ev]) -> BTreeMap<(String, Millis, Millis), (u64, i64)> {
    let mut m: BTreeMap<(String, Millis, Millis), (u64, i64)> = BTreeMap::new();
    let mut add = |k: &str, s, e, v| {
        let x = m.entry((k.to_string(), s, e)).or_default();
        x.0 += 1;
        x.1 += v;
    };
    match kind {
        WindowKind::Tumbling { size, offset } => {
            for e in events {
                let s = e.ts - (e.ts - offset).rem_euclid(size);
                add(&e.key, s, s + size, e.value);
            }
        }
        WindowKind::Sliding {
            size,
            slide,
            offset,
        } => {
            for e in events {
                let first = e.ts - size + 1;
                let mut s = first + (offset - first).rem_euclid(slide);
                while s <= e.ts {
                    add(&e.key, s, s + size, e.value);
                    s += slide;
                }
            }
        }
        WindowKind::Session { gap } => {
            // Per key the open session `(start, end, count, sum)`. Input in time order;
            // `purged_before` is the largest time seen before the record: a session with
            // `end <= purged_before` has fired and is gone (watermark `ts - 1`), so a
            // record touching it starts a new session.
            let mut open: BTreeMap<&str, (Millis, Millis, u64, i64)> = BTreeMap::new();
            let mut max_seen = Millis::MIN;
            for e in events {
                let cur = open.remove(e.key.as_str());
                let next = match cur {
                    Some((s, end, n, sum)) if e.ts <= end && end > max_seen => {
                        (s, end.max(e.ts + gap), n + 1, sum + e.value)
                    }
                    other => {
                        if let Some((s, end, n, sum)) = other {
                            m.insert((e.key.clone(), s, end), (n, sum));
                        }
                        (e.ts, e.ts + gap, 1, e.value)
                    }
                };
                open.insert(&e.key, next);
                max_seen = max_seen.max(e.ts);
            }
            for (k, (s, end, n, sum)) in open {
                m.insert((k.to_string(), s, end), (n, sum));
            }
        }
    }
    m
}

fn results(got: &Got) -> BTreeMap<(String, Millis, Millis), (u64, i64)> {
    let mut m = BTreeMap::new();
    for (_, o, _) in got {
        if let WindowOutput::Result(r) = o {
            let old = m.insert((r.key.clone(), r.window.start, r.window.end), r.value);
            assert!(old.is_none(), "a window fired twice without lateness");
        }
    }
    m
}

fn assigner_strategy() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![
        (1i64..50, -49i64..50).prop_map(|(size, o)| {
            TumblingEventTimeWindows::with_offset(size, o % size).unwrap()
        }),
        (1i64..20, 1i64..5, -19i64..20).prop_map(|(slide, n, o)| {
            SlidingEventTimeWindows::with_offset(slide * n, slide, o % slide).unwrap()
        }),
        (1i64..40).prop_map(|gap| EventTimeSessionWindows::with_gap(gap).unwrap()),
    ]
}

fn events_strategy() -> impl Strategy<Value = Vec<Ev>> {
    prop::collection::vec((0u8..4, -200i64..200, -50i64..50), 0..60).prop_map(|v| {
        v.into_iter()
            .map(|(k, ts, value)| ev(&format!("k{k}"), ts, value))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// In-order input, no lateness: results equal the offline computation.
    #[test]
    fn in_order_results_match_offline(assigner in assigner_strategy(), mut events in events_strategy(), which in 0usize..3) {
        events.sort_by_key(|e| e.ts);
        let backend = backends()[which].1;
        let mut d = driver(backend, 0, |b| aggregate_op(assigner, b));
        for e in &events {
            feed(&mut d, e.clone());
        }
        d.end_input().unwrap();
        prop_assert_eq!(d.operator().late_records(), 0);
        prop_assert_eq!(results(&got(d.output())), offline(assigner.kind(), &events));
        prop_assert_eq!(d.operator().window_count(), 0);
    }

    /// Sessions do not depend on arrival order when nothing is late.
    #[test]
    fn sessions_independent_of_arrival_order(
        gap in 1i64..40,
        (events, shuffled) in events_strategy().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        which in 0usize..3,
    ) {
        let assigner = EventTimeSessionWindows::with_gap(gap).unwrap();
        let backend = backends()[which].1;
        let run = |evs: &[Ev]| {
            let mut d = driver(backend, 0, |b| aggregate_op(assigner, b));
            for e in evs {
                record(&mut d, e.clone());
            }
            d.end_input().unwrap();
            results(&got(d.output()))
        };
        let a = run(&events);
        prop_assert_eq!(&a, &run(&shuffled));
        // With the watermark held back nothing is purged early: offline sessions of the
        // records in time order, none of them fired yet.
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.ts);
        let mut held = driver(backend, 0, |b| aggregate_op(assigner, b));
        for e in &sorted {
            record(&mut held, e.clone());
        }
        held.end_input().unwrap();
        prop_assert_eq!(a, results(&got(held.output())));
    }
}

/// One step of a random run: a record (without moving the watermark) or a watermark.
#[derive(Debug, Clone)]
enum Step {
    Record(Ev),
    Watermark(Millis),
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (0u8..4, -200i64..200, -50i64..50)
            .prop_map(|(k, ts, v)| Step::Record(ev(&format!("k{k}"), ts, v))),
        1 => (-220i64..220).prop_map(Step::Watermark),
    ];
    prop::collection::vec(step, 0..80)
}

/// Runs `steps` (watermarks only when they advance; the final watermark at the end).
fn run_steps(
    assigner: WindowAssigner,
    lateness: Millis,
    backend: Backend,
    steps: &[Step],
) -> (Vec<(Option<Millis>, String)>, u64, usize) {
    let mut d = driver(backend, 0, |b| {
        aggregate_op(assigner, b)
            .allowed_lateness(lateness)
            .emit_late_records(true)
    });
    for s in steps {
        match s {
            Step::Record(e) => record(&mut d, e.clone()),
            Step::Watermark(w) => d.process_watermark(*w).unwrap(),
        }
    }
    let open = d.operator().window_count();
    d.end_input().unwrap();
    // Late rows carry their watermark too: compare when they were emitted.
    let mut out = rows(&got(d.output()));
    let late_at: Vec<_> = got(d.output())
        .into_iter()
        .filter_map(|(wm, o, _)| match o {
            WindowOutput::Late(e) => Some(format!("late {} {} {} at {wm}", e.key, e.ts, e.value)),
            WindowOutput::Result(_) => None,
        })
        .collect();
    out.extend(late_at.into_iter().map(|l| (None, l)));
    out.sort();
    (out, d.operator().late_records(), open)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The fast paths (heap state, default trigger) give exactly the general path's
    /// output (heap and bytes tables): the same rows at the same watermarks, the same
    /// late records at the same watermarks, the same number of (key, window) entries
    /// before the final watermark, on random out-of-order input with random
    /// watermarks and allowed lateness.
    #[test]
    fn fast_path_equals_general_path(
        assigner in assigner_strategy(),
        lateness in prop_oneof![Just(0i64), 0i64..100, Just(i64::MAX)],
        steps in steps_strategy(),
    ) {
        let [heap, bytes, general] = backends();
        let fast = run_steps(assigner, lateness, heap.1, &steps);
        prop_assert_eq!(&fast, &run_steps(assigner, lateness, general.1, &steps));
        prop_assert_eq!(&fast, &run_steps(assigner, lateness, bytes.1, &steps));
    }
}

/// Snapshot and restore (issue 5): see the file.
#[path = "snapshot_tests.rs"]
mod snapshot_tests;
