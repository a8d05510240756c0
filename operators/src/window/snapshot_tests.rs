//! The window operator's checkpoints: an operator restored from a snapshot (at the
//! same or another parallelism) continues exactly as the one that was snapshotted.

use brook_core::checkpoint::{RestoredState, StateSnapshot};
use brook_core::keys::{key_group_for_key, key_group_range, subtask_for_key_group};
use brook_core::operator::OperatorError;

use super::*;

/// What to build: assigner, backend (index into [`backends`]), trigger, lateness.
#[derive(Debug, Clone, Copy)]
struct Cfg {
    assigner: WindowAssigner,
    backend: usize,
    trigger: Option<Trigger>,
    lateness: Millis,
}

const HEAP: usize = 0;
const BYTES: usize = 1;
const HEAP_GENERAL: usize = 2;

/// A harness (not opened) for the operator `cfg` describes, as the subtask `setup`
/// names.
fn build(cfg: &Cfg, setup: HarnessSetup) -> OperatorHarness<CountSumOp> {
    backends()[cfg.backend].1.harness(setup, |b| {
        let mut op = aggregate_op(cfg.assigner, b)
            .allowed_lateness(cfg.lateness)
            .emit_late_records(true);
        if let Some(t) = cfg.trigger {
            op = op.trigger(t);
        }
        op
    })
}

/// How records are routed to the subtasks of a [`Run`].
#[derive(Debug, Clone, Copy)]
enum Route {
    /// By the key's number modulo the parallelism, ignoring key groups (so that
    /// several subtasks write the same key group: their frames get concatenated).
    ByKey,
    /// By key group, as `key_by` does (required after a restore).
    ByKeyGroup,
}

/// A window operator at some parallelism fed the same steps as a job would: records
/// routed, watermarks and the clock broadcast. One harness per subtask.
struct Run {
    subs: Vec<OperatorHarness<CountSumOp>>,
    route: Route,
    max_parallelism: u32,
    wm: Millis,
}

/// Subtask `index` of `parallelism` on `clock`.
fn setup(clock: &ManualClock, max_parallelism: u32, parallelism: u32, index: u32) -> HarnessSetup {
    HarnessSetup::new("window")
        .subtask(index, parallelism)
        .max_parallelism(max_parallelism)
        .clock(clock)
}

impl Run {
    fn new(cfg: &Cfg, parallelism: u32, max_parallelism: u32, clock: &ManualClock) -> Self {
        let subs = (0..parallelism)
            .map(|i| {
                let mut h = build(cfg, setup(clock, max_parallelism, parallelism, i));
                h.open().unwrap();
                h
            })
            .collect();
        Run {
            subs,
            route: Route::ByKey,
            max_parallelism,
            wm: Millis::MIN,
        }
    }

    /// Snapshots every subtask.
    fn snapshot(&mut self) -> Vec<StateSnapshot> {
        self.subs
            .iter_mut()
            .map(|h| h.snapshot(1).unwrap())
            .collect()
    }

    /// Fresh operators at `parallelism` restored from `snaps`, given watermark `wm`
    /// first (the sources re-emit it before any record).
    fn restore(
        cfg: &Cfg,
        snaps: &[StateSnapshot],
        parallelism: u32,
        max_parallelism: u32,
        wm: Millis,
        clock: &ManualClock,
    ) -> Self {
        let subs = (0..parallelism)
            .map(|i| {
                let mut h = build(cfg, setup(clock, max_parallelism, parallelism, i));
                h.restore(snaps).unwrap();
                h.open().unwrap();
                h
            })
            .collect();
        let mut run = Run {
            subs,
            route: Route::ByKeyGroup,
            max_parallelism,
            wm: Millis::MIN,
        };
        run.watermark(wm);
        run
    }

    fn record(&mut self, e: Ev) {
        let n = self.subs.len();
        let i = match self.route {
            Route::ByKey => usize::from(e.key.as_bytes()[1] - b'0') % n,
            Route::ByKeyGroup => {
                let kg = key_group_for_key(&e.key, self.max_parallelism);
                subtask_for_key_group(self.max_parallelism, n as u32, kg) as usize
            }
        };
        let ts = e.ts;
        self.subs[i].process_element(e, ts).unwrap();
    }

    fn watermark(&mut self, wm: Millis) {
        if wm > self.wm {
            self.wm = wm;
            for h in &mut self.subs {
                h.process_watermark(wm).unwrap();
            }
        }
    }

    /// Processing time is now `now`: subtasks whose callback is due get it.
    fn clock(&mut self, now: Millis) {
        for h in &mut self.subs {
            h.set_processing_time(now).unwrap();
        }
    }

    fn window_count(&self) -> usize {
        self.subs.iter().map(|h| h.operator().window_count()).sum()
    }

    fn late_records(&self) -> u64 {
        self.subs.iter().map(|h| h.operator().late_records()).sum()
    }

    /// `(watermark when emitted, output)` of every subtask, rendered.
    fn take_got(&mut self) -> Vec<(Millis, String)> {
        self.subs
            .iter_mut()
            .flat_map(|h| h.take_output())
            .map(|e| {
                let rendered = format!("{:?} @{:?}", e.value, e.timestamp);
                (e.watermark.millis(), rendered)
            })
            .collect()
    }
}

/// A step: a record, a watermark (broadcast, applied when it advances) or processing
/// time moving on.
#[derive(Debug, Clone)]
enum Op {
    Record(Ev),
    Watermark(Millis),
    Clock(Millis),
}

fn ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0u8..8, -200i64..200, -50i64..50)
            .prop_map(|(k, ts, v)| Op::Record(ev(&format!("k{k}"), ts, v))),
        2 => (-220i64..220).prop_map(Op::Watermark),
        1 => (0i64..40).prop_map(Op::Clock),
    ];
    prop::collection::vec(op, 0..100)
}

/// Applies `ops` to `run`; the clock only moves forward.
fn apply(run: &mut Run, ops: &[Op], clock: &ManualClock, now: &mut Millis) {
    for op in ops {
        match op {
            Op::Record(e) => run.record(e.clone()),
            Op::Watermark(w) => run.watermark(*w),
            Op::Clock(d) => {
                *now += d;
                clock.set(*now);
                run.clock(*now);
            }
        }
    }
}

/// Ends a run: final watermark and processing time far on. Returns its late count.
fn end(run: &mut Run, clock: &ManualClock) {
    run.watermark(Millis::MAX);
    clock.set(1 << 40);
    run.clock(1 << 40);
}

fn sorted(mut v: Vec<(Millis, String)>) -> Vec<(Millis, String)> {
    v.sort();
    v
}

/// Runs `ops` on operator A (parallelism `p_old`, records routed by key); at `cuts.0`
/// snapshots it and restores into B (`p_mid`, routed by key group) and at `cuts.1`
/// snapshots B and restores into C (`p_new`). A runs to the end: what it emits after
/// the first cut equals what B emits between the cuts and C after the second, as
/// multisets within each watermark step.
#[allow(clippy::too_many_arguments)]
fn check(
    cfg: Cfg,
    ops: &[Op],
    cuts: (usize, usize),
    (p_old, p_mid, p_new): (u32, u32, u32),
    max_parallelism: u32,
) -> Result<(), TestCaseError> {
    let (c1, c2) = (cuts.0.min(ops.len()), cuts.1.min(ops.len()));
    let (c1, c2) = (c1.min(c2), c1.max(c2));
    // One clock per run (they see the same times).
    let (clock_a, clock_b) = (ManualClock::new(0), ManualClock::new(0));
    let (mut now_a, mut now_b) = (0, 0);
    let mut a = Run::new(&cfg, p_old, max_parallelism, &clock_a);
    apply(&mut a, &ops[..c1], &clock_a, &mut now_a);
    let snaps = a.snapshot();
    a.take_got();
    let late_at_cut = a.late_records();
    clock_b.set(now_a);
    now_b = now_b.max(now_a);
    let mut b = Run::restore(&cfg, &snaps, p_mid, max_parallelism, a.wm, &clock_b);
    prop_assert_eq!(b.window_count(), a.window_count(), "windows after restore");

    apply(&mut a, &ops[c1..c2], &clock_a, &mut now_a);
    apply(&mut b, &ops[c1..c2], &clock_b, &mut now_b);
    prop_assert_eq!(
        b.window_count(),
        a.window_count(),
        "windows at the second cut"
    );
    let snaps = b.snapshot();
    let clock_c = ManualClock::new(now_b);
    let mut now_c = now_b;
    let mut c = Run::restore(&cfg, &snaps, p_new, max_parallelism, b.wm, &clock_c);
    prop_assert_eq!(
        c.window_count(),
        b.window_count(),
        "windows after the second restore"
    );
    let late_b = b.late_records();

    apply(&mut a, &ops[c2..], &clock_a, &mut now_a);
    apply(&mut c, &ops[c2..], &clock_c, &mut now_c);
    prop_assert_eq!(c.window_count(), a.window_count(), "windows before the end");
    end(&mut a, &clock_a);
    end(&mut c, &clock_c);
    // (Non-zero when the lateness is "forever".)
    prop_assert_eq!(c.window_count(), a.window_count(), "windows at the end");

    let mut restored = b.take_got();
    restored.extend(c.take_got());
    prop_assert_eq!(sorted(a.take_got()), sorted(restored));
    prop_assert_eq!(a.late_records() - late_at_cut, late_b + c.late_records());
    Ok(())
}

fn tumbling() -> impl Strategy<Value = WindowAssigner> {
    (1i64..50, -49i64..50)
        .prop_map(|(size, o)| TumblingEventTimeWindows::with_offset(size, o % size).unwrap())
}

fn sliding() -> impl Strategy<Value = WindowAssigner> {
    (1i64..20, 1i64..5, -19i64..20).prop_map(|(slide, n, o)| {
        SlidingEventTimeWindows::with_offset(slide * n, slide, o % slide).unwrap()
    })
}

fn sessions() -> impl Strategy<Value = WindowAssigner> {
    (1i64..40).prop_map(|gap| EventTimeSessionWindows::with_gap(gap).unwrap())
}

fn processing_time() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![
        (1i64..30).prop_map(|s| TumblingProcessingTimeWindows::of(s).unwrap()),
        (1i64..10, 1i64..4).prop_map(|(h, n)| SlidingProcessingTimeWindows::of(h * n, h).unwrap()),
        (1i64..20).prop_map(|g| ProcessingTimeSessionWindows::with_gap(g).unwrap()),
    ]
}

fn any_event_time() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![tumbling(), sliding(), sessions()]
}

fn lateness() -> impl Strategy<Value = Millis> {
    prop_oneof![Just(0i64), 1i64..100, Just(Millis::MAX)]
}

fn positive_lateness() -> impl Strategy<Value = Millis> {
    prop_oneof![1i64..100, Just(Millis::MAX)]
}

fn parallelisms() -> impl Strategy<Value = (u32, u32, u32)> {
    (1u32..3, 1u32..4, 1u32..4)
}

/// Small max parallelism: keys share key groups (concatenated frames on restore).
fn max_parallelism() -> impl Strategy<Value = u32> {
    prop_oneof![Just(4u32), Just(128)]
}

macro_rules! restore_equivalence {
    ($($(#[$doc:meta])* $name:ident: $assigner:expr, $backend:expr, $trigger:expr, $lateness:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]
            $(
                $(#[$doc])*
                #[test]
                fn $name(
                    assigner in $assigner,
                    backend in $backend,
                    trigger in $trigger,
                    lateness in $lateness,
                    ops in ops_strategy(),
                    cuts in (0usize..100, 0usize..100),
                    ps in parallelisms(),
                    mp in max_parallelism(),
                ) {
                    let cfg = Cfg { assigner, backend, trigger, lateness };
                    check(cfg, &ops, cuts, ps, mp)?;
                }
            )*
        }
    };
}

restore_equivalence! {
    /// Fast tumbling path (heap, default trigger).
    restore_fast_tumbling: tumbling(), Just(HEAP), Just(None), lateness();
    /// Fast sliding path.
    restore_fast_sliding: sliding(), Just(HEAP), Just(None), lateness();
    /// Fast session path.
    restore_fast_sessions: sessions(), Just(HEAP), Just(None), lateness();
    /// General path, heap table.
    restore_general_heap: any_event_time(), Just(HEAP_GENERAL), Just(None), lateness();
    /// General path, bytes table.
    restore_general_bytes: any_event_time(), Just(BYTES), Just(None), lateness();
    /// Count trigger (general path on either table).
    restore_count_trigger: any_event_time(), prop_oneof![Just(HEAP), Just(BYTES)],
        (1u64..4).prop_map(|n| Some(Trigger::Count(n))), lateness();
    /// Allowed lateness > 0 on every path.
    restore_allowed_lateness: any_event_time(), 0usize..3, Just(None), positive_lateness();
    /// Processing-time windows: timers re-registered and a callback requested.
    restore_processing_time: processing_time(), 0usize..3, Just(None), Just(0i64);
}

/// A snapshot written on one path restores into any other (a heap run restored on a
/// byte store and back).
#[test]
fn snapshots_restore_across_paths() {
    let events: Vec<Op> = (0..60)
        .map(|i| {
            if i % 7 == 6 {
                Op::Watermark(i * 3 - 40)
            } else {
                Op::Record(ev(&format!("k{}", i % 5), (i * 37) % 150 - 30, i))
            }
        })
        .collect();
    for assigner in [
        TumblingEventTimeWindows::of(20).unwrap(),
        SlidingEventTimeWindows::of(30, 10).unwrap(),
        EventTimeSessionWindows::with_gap(8).unwrap(),
    ] {
        for from in [HEAP, BYTES, HEAP_GENERAL] {
            for to in [HEAP, BYTES, HEAP_GENERAL] {
                let cfg = |backend| Cfg {
                    assigner,
                    backend,
                    trigger: None,
                    lateness: 25,
                };
                let clock = ManualClock::new(0);
                let mut now = 0;
                let mut a = Run::new(&cfg(from), 1, 128, &clock);
                apply(&mut a, &events[..30], &clock, &mut now);
                let snaps = a.snapshot();
                a.take_got();
                let mut b = Run::restore(&cfg(to), &snaps, 2, 128, a.wm, &clock);
                apply(&mut a, &events[30..], &clock, &mut now);
                apply(&mut b, &events[30..], &clock, &mut now);
                end(&mut a, &clock);
                end(&mut b, &clock);
                let got = sorted(a.take_got());
                assert!(!got.is_empty());
                assert_eq!(
                    got,
                    sorted(b.take_got()),
                    "{assigner:?} from {from} to {to}"
                );
            }
        }
    }
}

fn restore_err(bytes: &[u8]) -> OperatorError {
    let mut snap = StateSnapshot::new();
    snap.put_keyed(3, bytes);
    let restored = RestoredState::collect([&snap], key_group_range(128, 1, 0));
    let clock = ManualClock::new(0);
    let mut h = backends()[HEAP].1.harness(setup(&clock, 128, 1, 0), |b| {
        aggregate_op(TumblingEventTimeWindows::of(10).unwrap(), b)
    });
    h.restore_state(&restored).unwrap_err()
}

#[test]
fn a_blob_of_an_unknown_version_or_damaged_is_an_error() {
    let err = restore_err(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).to_string();
    assert!(
        err.contains("key group 3") && err.contains("version 9"),
        "{err}"
    );
    // Truncated header, frame longer than the blob, garbage entry.
    for bad in [
        &[1u8, 0, 0][..],
        &[1, 200, 0, 0, 0, 0, 0, 0, 0, 1],
        &[1, 2, 0, 0, 0, 0, 0, 0, 0, 7, 7],
    ] {
        let err = restore_err(bad).to_string();
        assert!(err.contains("key group 3"), "{err}");
    }
    // A real snapshot with its version byte changed.
    let clock = ManualClock::new(0);
    let cfg = Cfg {
        assigner: TumblingEventTimeWindows::of(10).unwrap(),
        backend: HEAP,
        trigger: None,
        lateness: 0,
    };
    let mut a = Run::new(&cfg, 1, 128, &clock);
    a.record(ev("k1", 5, 1));
    let snaps = a.snapshot();
    let (kg, blob) = snaps[0].keyed().iter().next().unwrap();
    let mut blob = blob.clone();
    assert_eq!(blob[0], snapshot::VERSION);
    blob[0] = 2;
    let mut snap = StateSnapshot::new();
    snap.put_keyed(*kg, &blob);
    let restored = RestoredState::collect([&snap], key_group_range(128, 1, 0));
    let err = build(&cfg, setup(&clock, 128, 1, 0))
        .restore_state(&restored)
        .unwrap_err()
        .to_string();
    assert!(err.contains("version 2"), "{err}");
}

#[test]
fn a_restore_at_another_max_parallelism_is_an_error() {
    let clock = ManualClock::new(0);
    let cfg = Cfg {
        assigner: TumblingEventTimeWindows::of(10).unwrap(),
        backend: BYTES,
        trigger: None,
        lateness: 0,
    };
    let mut a = Run::new(&cfg, 1, 4, &clock);
    for k in 0..8 {
        a.record(ev(&format!("k{k}"), 5, 1));
    }
    let snaps = a.snapshot();
    let restored = RestoredState::collect(&snaps, key_group_range(128, 1, 0));
    let err = build(&cfg, setup(&clock, 128, 1, 0))
        .restore_state(&restored)
        .unwrap_err()
        .to_string();
    assert!(err.contains("max parallelism"), "{err}");
}

/// Processing-time windows: the restored operator asks for a callback just after its
/// earliest timer and fires there.
#[test]
fn processing_time_timers_come_back() {
    for (name, backend) in backends() {
        let _ = backend;
        let cfg = Cfg {
            assigner: TumblingProcessingTimeWindows::of(10).unwrap(),
            backend: [HEAP, BYTES, HEAP_GENERAL][["heap", "bytes", "heap-general"]
                .iter()
                .position(|n| *n == name)
                .unwrap()],
            trigger: None,
            lateness: 0,
        };
        let clock = ManualClock::new(13);
        let mut a = Run::new(&cfg, 1, 128, &clock);
        a.record(ev("k1", 0, 1));
        a.record(ev("k2", 0, 2));
        let snaps = a.snapshot();
        let mut b = Run::restore(&cfg, &snaps, 1, 128, Millis::MIN, &clock);
        // The timer is at 19; it fires once processing time has passed it.
        assert_eq!(b.subs[0].pending_processing_time(), Some(20), "{name}");
        b.clock(20);
        assert_eq!(b.take_got().len(), 2, "{name}");
        assert_eq!(b.window_count(), 0, "{name}");
    }
}

/// Former subtasks snapshotted at different watermarks (not with aligned barriers,
/// but a restore must not depend on it): on the fast path the windows one subtask
/// fired and another did not keep their own status, as on the general path (which
/// keeps it per window).
#[test]
fn restore_from_subtasks_at_different_watermarks() {
    let before: Vec<Ev> = (0..40)
        .map(|i| ev(&format!("k{}", i % 8), (i * 13) % 50 - 5, i))
        .collect();
    let after: Vec<Op> = (0..30)
        .map(|i| match i % 6 {
            5 => Op::Watermark(10 + i * 2),
            _ => Op::Record(ev(&format!("k{}", i % 8), (i * 7) % 60 - 10, 100 + i)),
        })
        .collect();
    for assigner in [
        TumblingEventTimeWindows::of(10).unwrap(),
        SlidingEventTimeWindows::of(20, 5).unwrap(),
        EventTimeSessionWindows::with_gap(4).unwrap(),
    ] {
        for lateness in [0, 15, Millis::MAX] {
            let run = |backend| {
                let cfg = Cfg {
                    assigner,
                    backend,
                    trigger: None,
                    lateness,
                };
                let clock = ManualClock::new(0);
                let mut a = Run::new(&cfg, 2, 4, &clock);
                for e in &before {
                    a.record(e.clone());
                }
                for (i, wm) in [(0, 12), (1, 31)] {
                    a.subs[i].process_watermark(wm).unwrap();
                    a.subs[i].take_output();
                }
                let snaps = a.snapshot();
                let mut b = Run::restore(&cfg, &snaps, 1, 4, 12, &clock);
                apply(&mut b, &after, &clock, &mut 0);
                end(&mut b, &clock);
                sorted(b.take_got())
            };
            let fast = run(HEAP);
            assert!(!fast.is_empty());
            assert_eq!(fast, run(HEAP_GENERAL), "{assigner:?} lateness {lateness}");
        }
    }
}
