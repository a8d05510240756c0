//! Joins against naive models: random, out-of-order input (some records very late),
//! driven through a `KeyedProcessOperator` record by record with the watermark of a
//! bounded out-of-orderness strategy emitted after every record (semantics.md §2: a
//! record meets the watermark in force before it). Each join's output equals a
//! nested-loop join over the records that were not late, and the late records come
//! out as late and are counted (the temporal join's versions are never late); state
//! stays bounded under a long steady input.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use brook_core::checkpoint::StateSnapshot;
use brook_core::operator::Operator;
use brook_core::time::Millis;
use brook_core::watermark::BoundedOutOfOrderness;
use brook_operators::join::{
    Either, IntervalJoin, IntervalJoinOperator, JoinOutput, JoinType, TemporalJoin,
    TemporalJoinOperator, WindowJoin, WindowJoinOperator,
};
use brook_operators::process::{KeyedProcessFunction, KeyedProcessOperator};
use brook_operators::window::assigner::{SlidingEventTimeWindows, TumblingEventTimeWindows};
use brook_operators::window::TimeWindow;
use brook_testkit::operator::{HarnessSetup, OperatorHarness, TestBackend};
use proptest::prelude::*;

/// A record of either side: (key, id).
type Rec = (u8, u32);
type In = Either<Rec, Rec>;
type Out = JoinOutput<(u32, Option<u32>), Rec, Rec>;

const BOUND: Millis = 10;

fn key(e: &In) -> u8 {
    match e {
        Either::Left(r) | Either::Right(r) => r.0,
    }
}

fn pair(a: &Rec, b: Option<&Rec>) -> (u32, Option<u32>) {
    (a.1, b.map(|b| b.1))
}

/// What a run gave: joined pairs (sorted), ids of late records, the late records the
/// operator counted, the largest state (entries + timers) seen, and the state left at
/// the end.
#[derive(Debug, Default)]
struct Ran {
    joined: Vec<(u32, Option<u32>)>,
    late: Vec<u32>,
    late_count: u64,
    max_state: usize,
    end_state: usize,
}

type Join<F> = KeyedProcessOperator<F, fn(&In) -> u8>;

/// An opened harness for the join `f` (heap state).
fn harness<F>(f: F) -> OperatorHarness<Join<F>>
where
    F: KeyedProcessFunction<Key = u8, In = In, Out = Out>,
{
    let mut h = HarnessSetup::new("join")
        .keyed(TestBackend::Heap, |b| {
            KeyedProcessOperator::new(f, key as fn(&In) -> u8, b)
        })
        .unwrap();
    h.open().unwrap();
    h
}

/// Moves what the join emitted so far into `ran`: joined pairs and late ids.
fn take<F>(h: &mut OperatorHarness<Join<F>>, ran: &mut Ran)
where
    F: KeyedProcessFunction<Key = u8, In = In, Out = Out>,
{
    for out in h.take_values() {
        match out {
            JoinOutput::Joined(p) => ran.joined.push(p),
            JoinOutput::LateLeft(a) | JoinOutput::LateRight(a) => ran.late.push(a.1),
        }
    }
}

/// Feeds `input` `(record, ts)` one by one; after each, the watermark
/// `max ts - BOUND - 1` if it advanced; then the final watermark.
fn drive<F>(f: F, input: &[(In, Millis)]) -> Ran
where
    F: KeyedProcessFunction<Key = u8, In = In, Out = Out>,
{
    let mut h = harness(f).with_watermark_generator(BoundedOutOfOrderness::new(BOUND));
    let mut ran = Ran::default();
    for (rec, ts) in input {
        h.process_element(rec.clone(), *ts).unwrap();
        h.process_generated_watermark().unwrap();
        take(&mut h, &mut ran);
        let (entries, timers) = h.operator().state_size();
        ran.max_state = ran.max_state.max(entries + timers);
    }
    h.end_input().unwrap();
    take(&mut h, &mut ran);
    let (entries, timers) = h.operator().state_size();
    ran.end_state = entries + timers;
    ran.late_count = h.context().late_records();
    ran.joined.sort_unstable();
    ran.late.sort_unstable();
    ran
}

/// The records with the watermark in force when each arrived.
fn with_watermarks(input: &[(In, Millis)]) -> Vec<(&In, Millis, Millis)> {
    let mut max_ts = Millis::MIN;
    let mut wm = Millis::MIN;
    input
        .iter()
        .map(|(r, ts)| {
            let before = wm;
            max_ts = max_ts.max(*ts);
            wm = wm.max(max_ts - BOUND - 1);
            (r, *ts, before)
        })
        .collect()
}

/// Lefts and rights that were not late (`ts > watermark`), and the late ids.
#[allow(clippy::type_complexity)]
fn split_late(input: &[(In, Millis)]) -> (Vec<(Rec, Millis)>, Vec<(Rec, Millis)>, Vec<u32>) {
    let (mut l, mut r, mut late) = (Vec::new(), Vec::new(), Vec::new());
    for (rec, ts, wm) in with_watermarks(input) {
        match rec {
            _ if ts <= wm => late.push(match rec {
                Either::Left(a) | Either::Right(a) => a.1,
            }),
            Either::Left(a) => l.push((*a, ts)),
            Either::Right(b) => r.push((*b, ts)),
        }
    }
    late.sort_unstable();
    (l, r, late)
}

fn interval_model(
    input: &[(In, Millis)],
    lower: Millis,
    upper: Millis,
    jt: JoinType,
) -> (Vec<(u32, Option<u32>)>, Vec<u32>) {
    let (ls, rs, late) = split_late(input);
    let mut out = Vec::new();
    for (a, ta) in &ls {
        let mut matched = false;
        for (b, tb) in &rs {
            if a.0 == b.0 && ta + lower <= *tb && *tb <= ta + upper {
                out.push((a.1, Some(b.1)));
                matched = true;
            }
        }
        if !matched && jt == JoinType::LeftOuter {
            out.push((a.1, None));
        }
    }
    out.sort_unstable();
    (out, late)
}

/// Window join model: a record joins in each of its windows that had not fired when
/// it arrived (a record with none is late).
fn window_model(
    input: &[(In, Millis)],
    assign: impl Fn(Millis) -> Vec<TimeWindow>,
    jt: JoinType,
) -> (Vec<(u32, Option<u32>)>, Vec<u32>) {
    type Sides = (Vec<u32>, Vec<u32>);
    let mut windows: BTreeMap<(u8, Millis, Millis), Sides> = BTreeMap::new();
    let mut late = Vec::new();
    for (rec, ts, wm) in with_watermarks(input) {
        let open: Vec<TimeWindow> = assign(ts)
            .into_iter()
            .filter(|w| w.max_timestamp() > wm)
            .collect();
        let (Either::Left(r) | Either::Right(r)) = rec;
        if open.is_empty() {
            late.push(r.1);
        }
        for w in open {
            let s = windows.entry((r.0, w.start, w.end)).or_default();
            match rec {
                Either::Left(a) => s.0.push(a.1),
                Either::Right(b) => s.1.push(b.1),
            }
        }
    }
    let mut out = Vec::new();
    for (ls, rs) in windows.values() {
        for a in ls {
            for b in rs {
                out.push((*a, Some(*b)));
            }
            if rs.is_empty() && jt == JoinType::LeftOuter {
                out.push((*a, None));
            }
        }
    }
    out.sort_unstable();
    late.sort_unstable();
    (out, late)
}

/// Temporal join model (Flink's): only left records can be late; every version
/// counts, also one that arrived behind the watermark. A left record joins, when the
/// watermark first reaches its timestamp, the version of its key with the greatest
/// timestamp <= its own among those that had arrived by then (of equal timestamps,
/// the one that came last).
fn temporal_model(input: &[(In, Millis)], jt: JoinType) -> (Vec<(u32, Option<u32>)>, Vec<u32>) {
    let recs = with_watermarks(input);
    // The watermark after record i: the one in force before the next (the final
    // watermark after the last).
    let wm_after = |i: usize| recs.get(i + 1).map_or(Millis::MAX, |r| r.2);
    let (mut out, mut late) = (Vec::new(), Vec::new());
    for (j, (rec, ta, wm)) in recs.iter().enumerate() {
        let Either::Left(a) = rec else { continue };
        if ta <= wm {
            late.push(a.1);
            continue;
        }
        let due = (j..recs.len())
            .find(|i| wm_after(*i) >= *ta)
            .unwrap_or(recs.len() - 1);
        let mut best: Option<(Millis, u32)> = None;
        for (rec, tb, _) in &recs[..=due] {
            if let Either::Right(b) = rec {
                if b.0 == a.0 && tb <= ta && best.is_none_or(|(t, _)| *tb >= t) {
                    best = Some((*tb, b.1));
                }
            }
        }
        match best {
            Some((_, b)) => out.push((a.1, Some(b))),
            None if jt == JoinType::LeftOuter => out.push((a.1, None)),
            None => {}
        }
    }
    out.sort_unstable();
    late.sort_unstable();
    (out, late)
}

/// Up to 80 records of 3 keys: time moves forward about 3 ms per record with up to
/// `BOUND` ms of disorder; about one in 12 records is 50-100 ms late.
fn input() -> impl Strategy<Value = Vec<(In, Millis)>> {
    prop::collection::vec(
        (any::<bool>(), 0u8..3, -BOUND..=BOUND, 0u8..12, 50i64..100),
        0..80,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (left, k, jitter, dice, lateness))| {
                let id = i as u32;
                let ts = 3 * i as Millis + jitter - if dice == 0 { lateness } else { 0 };
                let r = if left {
                    Either::Left((k, id))
                } else {
                    Either::Right((k, id))
                };
                (r, ts)
            })
            .collect()
    })
}

fn join_type() -> impl Strategy<Value = JoinType> {
    prop_oneof![Just(JoinType::Inner), Just(JoinType::LeftOuter)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn interval_join_equals_a_nested_loop(
        input in input(),
        lower in -20i64..10,
        width in 0i64..25,
        jt in join_type(),
    ) {
        let upper = lower + width;
        let ran = drive(IntervalJoin::new(lower, upper, jt, pair).unwrap(), &input);
        let (want, late) = interval_model(&input, lower, upper, jt);
        prop_assert_eq!(ran.joined, want);
        prop_assert_eq!(ran.late_count, late.len() as u64);
        prop_assert_eq!(ran.late, late);
        prop_assert_eq!(ran.end_state, 0, "state is cleaned up");
    }

    #[test]
    fn window_join_equals_a_nested_loop_per_window(
        input in input(),
        size in 5i64..40,
        slide_div in 1i64..4,
        jt in join_type(),
    ) {
        let slide = (size / slide_div).max(1);
        let windows = SlidingEventTimeWindows::of(size, slide).unwrap();
        let assign = |ts| {
            let mut v = Vec::new();
            windows.assign_windows(ts, 0, &mut v);
            v
        };
        let ran = drive(WindowJoin::new(windows, jt, pair).unwrap(), &input);
        let (want, late) = window_model(&input, assign, jt);
        prop_assert_eq!(ran.joined, want);
        prop_assert_eq!(ran.late_count, late.len() as u64);
        prop_assert_eq!(ran.late, late);
        prop_assert_eq!(ran.end_state, 0, "state is cleaned up");
    }

    #[test]
    fn temporal_join_takes_the_version_valid_at_each_record(
        input in input(),
        jt in join_type(),
    ) {
        let ran = drive(TemporalJoin::new(jt, pair), &input);
        let (want, late) = temporal_model(&input, jt);
        prop_assert_eq!(ran.joined, want);
        prop_assert_eq!(ran.late_count, late.len() as u64);
        prop_assert_eq!(ran.late, late);
    }
}

/// Feeds `steps` to `f`: a record `(record, ts)` or a watermark, each watermark
/// after the records before it (as the engine delivers them); then the final
/// watermark.
fn drive_steps<F>(f: F, steps: &[Step]) -> Ran
where
    F: KeyedProcessFunction<Key = u8, In = In, Out = Out>,
{
    let mut h = harness(f);
    let mut ran = Ran::default();
    for step in steps {
        match step {
            Step::Record(rec, ts) => h.process_element(rec.clone(), *ts).unwrap(),
            Step::Watermark(wm) => h.process_watermark(*wm).unwrap(),
        }
        take(&mut h, &mut ran);
    }
    h.end_input().unwrap();
    take(&mut h, &mut ran);
    ran.late_count = h.context().late_records();
    let (entries, timers) = h.operator().state_size();
    ran.end_state = entries + timers;
    ran
}

/// A step of [`drive_steps`].
enum Step {
    Record(In, Millis),
    Watermark(Millis),
}

/// Issue 15, item 4, as Flink's event-time temporal join: rates `EUR@0 = 1.1`
/// (version 1), order `o3@8` (record 3), then at watermark 6 the late version
/// `EUR@4 = 1.15` (version 2): when the watermark passes 8, o3 joins the version
/// valid at its time, 1.15, not 1.1. The late version is kept, not counted as late.
#[test]
fn a_temporal_join_keeps_a_version_that_arrives_behind_the_watermark() {
    const EUR: u8 = 0;
    let steps = [
        Step::Record(Either::Right((EUR, 1)), 0),
        Step::Record(Either::Left((EUR, 3)), 8),
        Step::Watermark(6),
        Step::Record(Either::Right((EUR, 2)), 4),
        Step::Watermark(9),
    ];
    let ran = drive_steps(TemporalJoin::new(JoinType::Inner, pair), &steps);
    assert_eq!(ran.joined, vec![(3, Some(2))]);
    assert_eq!((ran.late, ran.late_count), (vec![], 0));
    // Only left records are late: an order at 5 behind watermark 6 is.
    let steps = [
        Step::Record(Either::Right((EUR, 1)), 0),
        Step::Watermark(6),
        Step::Record(Either::Left((EUR, 4)), 5),
    ];
    let ran = drive_steps(TemporalJoin::new(JoinType::LeftOuter, pair), &steps);
    assert_eq!((ran.joined, ran.late, ran.late_count), (vec![], vec![4], 1));
}

/// A late version older than the one valid at the watermark can never be needed
/// (every left record to come is later than the watermark): it does not replace it.
#[test]
fn a_late_version_older_than_the_valid_one_does_not_replace_it() {
    let steps = [
        Step::Record(Either::Right((0, 1)), 0),
        Step::Record(Either::Right((0, 2)), 5),
        Step::Watermark(6),
        Step::Record(Either::Right((0, 3)), 2),
        Step::Watermark(7),
        Step::Record(Either::Left((0, 4)), 8),
        Step::Record(Either::Right((0, 5)), 3),
    ];
    let ran = drive_steps(TemporalJoin::new(JoinType::Inner, pair), &steps);
    assert_eq!(ran.joined, vec![(4, Some(2))]);
}

/// Issue 15, item 3: every late record of an interval or window join is counted
/// (`brook_late_records_total`), whichever side it is on.
#[test]
fn interval_and_window_joins_count_their_late_records() {
    let steps = [
        Step::Record(Either::Left((0, 1)), 10),
        Step::Watermark(20),
        Step::Record(Either::Right((0, 2)), 12),
        Step::Record(Either::Left((0, 3)), 15),
        Step::Record(Either::Right((0, 4)), 25),
    ];
    let interval = drive_steps(
        IntervalJoin::new(0, 5, JoinType::LeftOuter, pair).unwrap(),
        &steps,
    );
    assert_eq!(interval.late, vec![2, 3]);
    assert_eq!(interval.late_count, 2);
    assert_eq!(interval.joined, vec![(1, None)]);
    let windows = TumblingEventTimeWindows::of(10).unwrap();
    let window = drive_steps(
        WindowJoin::new(windows, JoinType::Inner, pair).unwrap(),
        &steps,
    );
    assert_eq!(window.late, vec![2, 3]);
    assert_eq!(window.late_count, 2);
}

/// A long steady input: 20,000 records of 10 keys, both sides, in order. The state
/// of every join stays small (what the watermark has not yet passed), not growing
/// with the input.
#[test]
fn state_stays_bounded_under_a_long_steady_input() {
    let input: Vec<(In, Millis)> = (0..20_000u32)
        .map(|i| {
            let r = ((i % 10) as u8, i);
            let rec = if i % 3 == 0 {
                Either::Right(r)
            } else {
                Either::Left(r)
            };
            (rec, Millis::from(i))
        })
        .collect();
    let interval = drive(
        IntervalJoin::new(-5, 5, JoinType::LeftOuter, pair).unwrap(),
        &input,
    );
    let window = drive(
        WindowJoin::new(
            TumblingEventTimeWindows::of(50).unwrap(),
            JoinType::Inner,
            pair,
        )
        .unwrap(),
        &input,
    );
    let temporal = drive(TemporalJoin::new(JoinType::LeftOuter, pair), &input);
    for (name, ran) in [
        ("interval", &interval),
        ("window", &window),
        ("temporal", &temporal),
    ] {
        assert!(
            ran.max_state < 200,
            "{name} join state grew to {} entries and timers",
            ran.max_state
        );
        assert!(!ran.joined.is_empty(), "{name} join emitted nothing");
    }
    // Every left record of the temporal join found a version but those before the
    // first right record of their key.
    let mut first_right: BTreeMap<u8, Millis> = BTreeMap::new();
    for (rec, ts) in &input {
        if let Either::Right(r) = rec {
            first_right.entry(r.0).or_insert(*ts);
        }
    }
    let unversioned = input
        .iter()
        .filter(|(rec, ts)| matches!(rec, Either::Left(r) if first_right[&r.0] > *ts))
        .count();
    assert!(unversioned > 0);
    assert_eq!(
        temporal.joined.iter().filter(|(_, b)| b.is_none()).count(),
        unversioned
    );
}

// ---- the interval and window join operators: heap fast paths against the general ---
// ---- paths ------------------------------------------------------------------------

type IntervalOp = IntervalJoinOperator<
    u8,
    Rec,
    Rec,
    (u32, Option<u32>),
    fn(&Rec, Option<&Rec>) -> (u32, Option<u32>),
    fn(&In) -> u8,
>;

/// What an interval join emitted, sortable: (0 joined / 1 late left / 2 late right,
/// left or late id, right id, timestamp).
type Emit = (u8, u32, Option<u32>, Option<Millis>);

/// An opened (or, with `restore`, restored then opened) [`IntervalJoinOperator`] as
/// subtask `index` of `parallelism` on `backend`.
fn interval_operator(
    (lower, upper, jt): (Millis, Millis, JoinType),
    backend: TestBackend,
    (index, parallelism): (u32, u32),
    restore: Option<&StateSnapshot>,
) -> OperatorHarness<IntervalOp> {
    let mut h = HarnessSetup::new("join")
        .subtask(index, parallelism)
        .keyed(backend, |b| {
            let join = IntervalJoin::new(lower, upper, jt, pair as fn(&Rec, Option<&Rec>) -> _);
            IntervalJoinOperator::new(join.unwrap(), key as fn(&In) -> u8, b)
        })
        .unwrap();
    assert_eq!(h.operator().is_heap(), backend == TestBackend::Heap);
    if let Some(snap) = restore {
        h.restore(std::slice::from_ref(snap)).unwrap();
    }
    h.open().unwrap();
    h
}

type WindowOp = WindowJoinOperator<
    u8,
    Rec,
    Rec,
    (u32, Option<u32>),
    fn(&Rec, Option<&Rec>) -> (u32, Option<u32>),
    fn(&In) -> u8,
>;

/// An opened (or, with `restore`, restored then opened) [`WindowJoinOperator`] on
/// sliding windows `(size, slide)` (tumbling when equal) as subtask `index` of
/// `parallelism` on `backend`.
fn window_operator(
    (size, slide, jt): (Millis, Millis, JoinType),
    backend: TestBackend,
    (index, parallelism): (u32, u32),
    restore: Option<&StateSnapshot>,
) -> OperatorHarness<WindowOp> {
    let mut h = HarnessSetup::new("join")
        .subtask(index, parallelism)
        .keyed(backend, |b| {
            let windows = SlidingEventTimeWindows::of(size, slide).unwrap();
            let join = WindowJoin::new(windows, jt, pair as fn(&Rec, Option<&Rec>) -> _);
            WindowJoinOperator::new(join.unwrap(), key as fn(&In) -> u8, b)
        })
        .unwrap();
    assert_eq!(h.operator().is_heap(), backend == TestBackend::Heap);
    if let Some(snap) = restore {
        h.restore(std::slice::from_ref(snap)).unwrap();
    }
    h.open().unwrap();
    h
}

type TemporalOp = TemporalJoinOperator<
    u8,
    Rec,
    Rec,
    (u32, Option<u32>),
    fn(&Rec, Option<&Rec>) -> (u32, Option<u32>),
    fn(&In) -> u8,
>;

/// An opened (or, with `restore`, restored then opened) [`TemporalJoinOperator`] as
/// subtask `index` of `parallelism` on `backend`.
fn temporal_operator(
    jt: JoinType,
    backend: TestBackend,
    (index, parallelism): (u32, u32),
    restore: Option<&StateSnapshot>,
) -> OperatorHarness<TemporalOp> {
    let mut h = HarnessSetup::new("join")
        .subtask(index, parallelism)
        .keyed(backend, |b| {
            let join = TemporalJoin::new(jt, pair as fn(&Rec, Option<&Rec>) -> _);
            TemporalJoinOperator::new(join, key as fn(&In) -> u8, b)
        })
        .unwrap();
    assert_eq!(h.operator().is_heap(), backend == TestBackend::Heap);
    if let Some(snap) = restore {
        h.restore(std::slice::from_ref(snap)).unwrap();
    }
    h.open().unwrap();
    h
}

fn take_emitted<Op: Operator<In = In, Out = Out>>(
    h: &mut OperatorHarness<Op>,
    out: &mut Vec<Emit>,
) {
    for r in h.take_records() {
        out.push(match r.value {
            JoinOutput::Joined((a, b)) => (0, a, b, r.timestamp),
            JoinOutput::LateLeft(a) => (1, a.1, None, r.timestamp),
            JoinOutput::LateRight(b) => (2, b.1, None, r.timestamp),
        });
    }
}

/// The records with, after each, the watermark of a bounded out-of-orderness
/// strategy (`max ts - BOUND - 1`) when it advanced.
fn steps_of(input: &[(In, Millis)]) -> Vec<Step> {
    let (mut max_ts, mut wm) = (Millis::MIN, Millis::MIN);
    let mut steps = Vec::new();
    for (rec, ts) in input {
        steps.push(Step::Record(rec.clone(), *ts));
        max_ts = max_ts.max(*ts);
        if max_ts - BOUND - 1 > wm {
            wm = max_ts - BOUND - 1;
            steps.push(Step::Watermark(wm));
        }
    }
    steps
}

/// Runs the interval join on `first` for `steps[..cut]`, checkpoints, restores into
/// `parallelism` subtasks on `then` (records routed by key group, the watermark
/// re-emitted as the sources do after a restore) and runs the rest: everything
/// emitted (sorted) and the late records counted.
fn run_with_restore(
    iv: (Millis, Millis, JoinType),
    steps: &[Step],
    cut: usize,
    first: TestBackend,
    then: (TestBackend, u32),
) -> (Vec<Emit>, u64) {
    let open = |backend, subtask, restore: Option<&StateSnapshot>| {
        interval_operator(iv, backend, subtask, restore)
    };
    run_op_with_restore(open, IntervalOp::state_size, steps, cut, first, then)
}

/// [`run_with_restore`] for the window join on sliding windows `(size, slide)`.
fn run_window_with_restore(
    w: (Millis, Millis, JoinType),
    steps: &[Step],
    cut: usize,
    first: TestBackend,
    then: (TestBackend, u32),
) -> (Vec<Emit>, u64) {
    let open = |backend, subtask, restore: Option<&StateSnapshot>| {
        window_operator(w, backend, subtask, restore)
    };
    run_op_with_restore(open, WindowOp::state_size, steps, cut, first, then)
}

/// [`run_with_restore`] for the temporal join, without the final state check (its
/// last version per key stays, on either path, as Flink's).
fn run_temporal_with_restore(
    jt: JoinType,
    steps: &[Step],
    cut: usize,
    first: TestBackend,
    then: (TestBackend, u32),
) -> (Vec<Emit>, u64) {
    let open = |backend, subtask, restore: Option<&StateSnapshot>| {
        temporal_operator(jt, backend, subtask, restore)
    };
    run_op_with_restore(open, |_: &TemporalOp| (0, 0), steps, cut, first, then)
}

/// [`run_with_restore`] for the operator `open` makes (on a backend, as a subtask
/// `(index, parallelism)`, restored from a snapshot); `size` is its state size,
/// `(0, 0)` once empty.
fn run_op_with_restore<Op: Operator<In = In, Out = Out>>(
    open: impl Fn(TestBackend, (u32, u32), Option<&StateSnapshot>) -> OperatorHarness<Op>,
    size: impl Fn(&Op) -> (usize, usize),
    steps: &[Step],
    cut: usize,
    first: TestBackend,
    then: (TestBackend, u32),
) -> (Vec<Emit>, u64) {
    let mut out = Vec::new();
    let mut h = open(first, (0, 1), None);
    let mut wm = None;
    for step in &steps[..cut] {
        match step {
            Step::Record(rec, ts) => h.process_element(rec.clone(), *ts).unwrap(),
            Step::Watermark(w) => {
                h.process_watermark(*w).unwrap();
                wm = Some(*w);
            }
        }
        take_emitted(&mut h, &mut out);
    }
    let snap = h.snapshot(1).unwrap();
    let mut late = h.context().late_records();
    let (backend, p) = then;
    let mut hs: Vec<_> = (0..p).map(|i| open(backend, (i, p), Some(&snap))).collect();
    for h in &mut hs {
        if let Some(w) = wm {
            h.process_watermark(w).unwrap();
        }
    }
    for step in &steps[cut..] {
        match step {
            Step::Record(rec, ts) => {
                let kg =
                    brook_core::keys::key_group_for_key(&key(rec), hs[0].info().max_parallelism);
                let h = hs
                    .iter_mut()
                    .find(|h| h.info().key_groups().contains(kg))
                    .unwrap();
                h.process_element(rec.clone(), *ts).unwrap();
            }
            Step::Watermark(w) => {
                for h in &mut hs {
                    h.process_watermark(*w).unwrap();
                }
            }
        }
        for h in &mut hs {
            take_emitted(h, &mut out);
        }
    }
    for h in &mut hs {
        h.end_input().unwrap();
        take_emitted(h, &mut out);
        late += h.context().late_records();
        assert_eq!(size(h.operator()), (0, 0), "state is cleaned up");
    }
    out.sort_unstable();
    (out, late)
}

fn backend() -> impl Strategy<Value = TestBackend> {
    prop_oneof![Just(TestBackend::Heap), Just(TestBackend::Serialized)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Issue 21: the interval join's heap fast path emits what the general path does
    /// (results with their timestamps, late records), on random out-of-order input
    /// with late records, and a checkpoint taken on either path at any point restores
    /// into either path, at parallelism 1 or 2.
    #[test]
    fn interval_join_heap_path_equals_the_general_path_across_restores(
        input in input(),
        lower in -20i64..10,
        width in 0i64..25,
        jt in join_type(),
        cut in any::<prop::sample::Index>(),
        first in backend(),
        then in backend(),
        p in 1u32..=2,
    ) {
        let iv = (lower, lower + width, jt);
        let steps = steps_of(&input);
        let cut = cut.index(steps.len() + 1);
        let general = run_with_restore(iv, &steps, steps.len(), TestBackend::Serialized, (TestBackend::Serialized, 1));
        let ran = run_with_restore(iv, &steps, cut, first, (then, p));
        prop_assert_eq!(ran, general);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Issue 21: the window join's heap fast path emits what the general path does
    /// (results at their windows' max timestamps, late records), on random
    /// out-of-order input with late records and tumbling or sliding windows, and a
    /// checkpoint taken on either path at any point restores into either path, at
    /// parallelism 1 or 2.
    #[test]
    fn window_join_heap_path_equals_the_general_path_across_restores(
        input in input(),
        size in 5i64..40,
        slide_div in 1i64..4,
        jt in join_type(),
        cut in any::<prop::sample::Index>(),
        first in backend(),
        then in backend(),
        p in 1u32..=2,
    ) {
        let w = (size, (size / slide_div).max(1), jt);
        let steps = steps_of(&input);
        let cut = cut.index(steps.len() + 1);
        let general = run_window_with_restore(w, &steps, steps.len(), TestBackend::Serialized, (TestBackend::Serialized, 1));
        let ran = run_window_with_restore(w, &steps, cut, first, (then, p));
        prop_assert_eq!(ran, general);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Issue 21: the temporal join's heap fast path emits what the general path does
    /// (each left record with its version at its timestamp, late left records), on
    /// random out-of-order input with late records and versions behind the
    /// watermark, and a checkpoint taken on either path at any point restores into
    /// either path, at parallelism 1 or 2.
    #[test]
    fn temporal_join_heap_path_equals_the_general_path_across_restores(
        input in input(),
        jt in join_type(),
        cut in any::<prop::sample::Index>(),
        first in backend(),
        then in backend(),
        p in 1u32..=2,
    ) {
        let steps = steps_of(&input);
        let cut = cut.index(steps.len() + 1);
        let general = run_temporal_with_restore(jt, &steps, steps.len(), TestBackend::Serialized, (TestBackend::Serialized, 1));
        let ran = run_temporal_with_restore(jt, &steps, cut, first, (then, p));
        prop_assert_eq!(ran, general);
    }
}
