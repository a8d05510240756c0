//! Event-time joins of two keyed streams, as keyed process functions over one stream
//! of [`Either`] records (the two inputs, unioned and keyed by the same key), so they
//! get keyed state, timers, checkpoints and rescaling like any keyed operator.
//!
//! - [`IntervalJoin`] (Flink's `KeyedStream.intervalJoin`): right `b` joins left `a`
//!   when `a.ts + lower <= b.ts <= a.ts + upper` (ms, bounds inclusive).
//!   [`IntervalJoinOperator`] runs it, on typed per-key buffers and one timer entry per
//!   key when the state backend is in memory (issue 21), else as a keyed process
//!   function.
//! - [`WindowJoin`] (Flink's `DataStream.join(..).window(..)`, or `coGroup` for the
//!   outer join): `a` and `b` of one key in the same window; emitted when the window
//!   fires. Tumbling and sliding event-time windows. [`WindowJoinOperator`] runs it,
//!   on typed per-window buffers and one timer entry per key when the state backend
//!   is in memory (issue 21), else as a keyed process function.
//! - [`TemporalJoin`] (Flink SQL's event-time temporal join, `FOR SYSTEM_TIME AS OF`):
//!   each left record joins the right record (a *version* of a changing table row)
//!   with the greatest timestamp `<=` its own, once the watermark says that version
//!   is final. [`TemporalJoinOperator`] runs it, on typed per-key records and
//!   versions and one timer entry per key when the state backend is in memory (issue
//!   21), else as a keyed process function.
//!
//! Inner or left outer ([`JoinType`]): an unmatched left record is emitted with `None`
//! once the watermark has passed the last moment a match could arrive. A record is
//! late when its timestamp is `<=` the watermark (semantics.md §3a); late records are
//! counted in the operator's `late_records` metric (`brook_late_records_total`),
//! passed on as [`JoinOutput::LateLeft`] / [`JoinOutput::LateRight`] (the engine turns
//! them into side outputs or drops them) and never joined. The temporal join's
//! versions are never late (as Flink's): only its left records can be. State is
//! removed by watermark: with steady input the state stays bounded.

use std::marker::PhantomData;

use brook_core::operator::{OpResult, OperatorError, Output};
use brook_core::time::Millis;
use brook_state::{StateDescriptor, TimeDomain};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::process::{KeyedContext, KeyedProcessFunction};
use crate::window::assigner::WindowAssigner;
use crate::window::TimeWindow;

mod interval_heap;
mod interval_operator;
mod temporal_heap;
mod temporal_operator;
mod window_heap;
mod window_operator;

pub use interval_operator::IntervalJoinOperator;
pub use temporal_operator::TemporalJoinOperator;
pub use window_operator::WindowJoinOperator;

/// A record of the left (`Left`) or right (`Right`) input of a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Either<A, B> {
    /// From the left input.
    Left(A),
    /// From the right input.
    Right(B),
}

/// What a join emits: results, and late records of either input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutput<O, A, B> {
    /// A joined (or, for a left outer join, unmatched left) result.
    Joined(O),
    /// A left record that arrived after the watermark passed its timestamp.
    LateLeft(A),
    /// A right record that arrived after the watermark passed its timestamp.
    LateRight(B),
}

/// Which left records are emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinType {
    /// Only matched pairs.
    #[default]
    Inner,
    /// Matched pairs, and each left record without any match once, with `None`.
    LeftOuter,
}

/// A join was configured wrongly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinConfigError {
    /// `lower > upper` for an interval join.
    #[error("interval join: lower bound {lower} ms is above upper bound {upper} ms")]
    EmptyInterval {
        /// The lower bound (ms).
        lower: Millis,
        /// The upper bound (ms).
        upper: Millis,
    },
    /// A window join needs non-merging event-time windows.
    #[error("window join: {0} (use tumbling or sliding event-time windows)")]
    Windows(&'static str),
}

/// Checks interval bounds (ms): `lower <= upper`.
///
/// # Errors
/// [`JoinConfigError::EmptyInterval`] when `lower > upper`.
pub fn check_interval(lower: Millis, upper: Millis) -> Result<(), JoinConfigError> {
    if lower > upper {
        return Err(JoinConfigError::EmptyInterval { lower, upper });
    }
    Ok(())
}

/// Checks that windows can be joined: not merging (sessions), event time.
///
/// # Errors
/// [`JoinConfigError::Windows`] for session or processing-time windows.
pub fn check_join_windows(windows: &WindowAssigner) -> Result<(), JoinConfigError> {
    if windows.is_merging() {
        return Err(JoinConfigError::Windows("session windows cannot be joined"));
    }
    if !windows.is_event_time() {
        return Err(JoinConfigError::Windows(
            "processing-time windows cannot be joined",
        ));
    }
    Ok(())
}

fn state_err(e: brook_state::StateError) -> OperatorError {
    OperatorError::other(e)
}

/// `what` got a record without a timestamp.
fn missing_timestamp(what: &str) -> OperatorError {
    OperatorError::failed(format!(
        "{what} needs event-time timestamps: set a watermark strategy on the sources"
    ))
}

fn timestamp<K>(ctx: &KeyedContext<'_, K>, what: &str) -> OpResult<Millis> {
    ctx.timestamp().ok_or_else(|| missing_timestamp(what))
}

/// Whether a record at `ts` is late: the watermark already passed it.
fn is_late<K>(ctx: &KeyedContext<'_, K>, ts: Millis) -> bool {
    ts <= ctx.current_watermark().millis()
}

/// Counts a late record and passes it on (to a late side output, or to be dropped).
fn emit_late<K, O, A, B>(
    ctx: &mut KeyedContext<'_, K>,
    ts: Millis,
    value: Either<A, B>,
    out: &mut Output<JoinOutput<O, A, B>>,
) {
    ctx.count_late_record();
    match value {
        Either::Left(a) => out.collect(JoinOutput::LateLeft(a), Some(ts)),
        Either::Right(b) => out.collect(JoinOutput::LateRight(b), Some(ts)),
    }
}

/// The type parameters a join function does not hold.
type Types<K, A, B, O> = PhantomData<fn() -> (K, A, B, O)>;

// ---- interval join ---------------------------------------------------------------

/// The interval join (see the [module docs](self)): per key, the left records by
/// timestamp (each with whether it matched) and the right records by timestamp.
/// A left record at `t` is kept until the watermark reaches `t + upper`, a right one
/// at `t` until it reaches `t - lower`. A result's timestamp is the later of the two
/// records'; an unmatched left record is emitted at `t + upper`.
pub struct IntervalJoin<K, A, B, O, F> {
    lower: Millis,
    upper: Millis,
    join_type: JoinType,
    f: F,
    _types: Types<K, A, B, O>,
}

impl<K, A, B, O, F> std::fmt::Debug for IntervalJoin<K, A, B, O, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalJoin")
            .field("lower", &self.lower)
            .field("upper", &self.upper)
            .field("join_type", &self.join_type)
            .finish_non_exhaustive()
    }
}

impl<K, A, B, O, F> IntervalJoin<K, A, B, O, F>
where
    F: FnMut(&A, Option<&B>) -> O,
{
    /// Joins `b` to `a` when `a.ts + lower <= b.ts <= a.ts + upper` (ms); `f` makes
    /// the result (with `None` for an unmatched left record of a left outer join).
    ///
    /// # Errors
    /// [`JoinConfigError::EmptyInterval`] when `lower > upper`.
    pub fn new(
        lower: Millis,
        upper: Millis,
        join_type: JoinType,
        f: F,
    ) -> Result<Self, JoinConfigError> {
        check_interval(lower, upper)?;
        Ok(IntervalJoin {
            lower,
            upper,
            join_type,
            f,
            _types: PhantomData,
        })
    }
}

const IJ_LEFT: &str = "interval-join-left";
const IJ_RIGHT: &str = "interval-join-right";

/// A key's buffered left records: (timestamp, record, matched).
type LeftBuffer<A> = Vec<(Millis, A, bool)>;
/// A key's buffered right records: (timestamp, record).
type RightBuffer<B> = Vec<(Millis, B)>;

impl<K, A, B, O, F> KeyedProcessFunction for IntervalJoin<K, A, B, O, F>
where
    K: Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
    B: Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    type Key = K;
    type In = Either<A, B>;
    type Out = JoinOutput<O, A, B>;

    /// A key's buffers are one value per side (read and written whole: a key holds
    /// only what the watermark has not passed yet).
    fn process_element(
        &mut self,
        value: Either<A, B>,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let ts = timestamp(ctx, "an interval join")?;
        if is_late(ctx, ts) {
            emit_late(ctx, ts, value, out);
            return Ok(());
        }
        let left_d = StateDescriptor::<LeftBuffer<A>>::new(IJ_LEFT);
        let right_d = StateDescriptor::<RightBuffer<B>>::new(IJ_RIGHT);
        match value {
            Either::Left(a) => {
                let mut matched = false;
                let rights = ctx.state().value(&right_d).get().map_err(state_err)?;
                for (tb, b) in rights.iter().flatten() {
                    if ts.saturating_add(self.lower) <= *tb && *tb <= ts.saturating_add(self.upper)
                    {
                        out.collect(JoinOutput::Joined((self.f)(&a, Some(b))), Some(ts.max(*tb)));
                        matched = true;
                    }
                }
                let mut left = ctx.state().value(&left_d);
                let mut buf = left.get().map_err(state_err)?.unwrap_or_default();
                buf.push((ts, a, matched));
                left.set(&buf).map_err(state_err)?;
                ctx.register_event_time_timer(ts.saturating_add(self.upper));
            }
            Either::Right(b) => {
                let mut lefts = ctx.state().value(&left_d).get().map_err(state_err)?;
                let mut newly = false;
                for (ta, a, m) in lefts.iter_mut().flatten() {
                    if ta.saturating_add(self.lower) <= ts && ts <= ta.saturating_add(self.upper) {
                        out.collect(JoinOutput::Joined((self.f)(a, Some(&b))), Some(ts.max(*ta)));
                        newly |= !*m;
                        *m = true;
                    }
                }
                if let (true, JoinType::LeftOuter, Some(l)) = (newly, self.join_type, &lefts) {
                    ctx.state().value(&left_d).set(l).map_err(state_err)?;
                }
                let mut right = ctx.state().value(&right_d);
                let mut buf = right.get().map_err(state_err)?.unwrap_or_default();
                buf.push((ts, b));
                right.set(&buf).map_err(state_err)?;
                ctx.register_event_time_timer(ts.saturating_sub(self.lower));
            }
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let left_d = StateDescriptor::<LeftBuffer<A>>::new(IJ_LEFT);
        let right_d = StateDescriptor::<RightBuffer<B>>::new(IJ_RIGHT);
        if let Some(lefts) = ctx.state().value(&left_d).get().map_err(state_err)? {
            let before = lefts.len();
            let mut kept = Vec::with_capacity(before);
            for (ta, a, matched) in lefts {
                if ta.saturating_add(self.upper) <= time {
                    if !matched && self.join_type == JoinType::LeftOuter {
                        out.collect(
                            JoinOutput::Joined((self.f)(&a, None)),
                            Some(ta.saturating_add(self.upper)),
                        );
                    }
                } else {
                    kept.push((ta, a, matched));
                }
            }
            if kept.is_empty() {
                ctx.state().value(&left_d).clear().map_err(state_err)?;
            } else if kept.len() != before {
                ctx.state().value(&left_d).set(&kept).map_err(state_err)?;
            }
        }
        if let Some(rights) = ctx.state().value(&right_d).get().map_err(state_err)? {
            let before = rights.len();
            let kept: RightBuffer<B> = rights
                .into_iter()
                .filter(|(tb, _)| tb.saturating_sub(self.lower) > time)
                .collect();
            if kept.is_empty() {
                ctx.state().value(&right_d).clear().map_err(state_err)?;
            } else if kept.len() != before {
                ctx.state().value(&right_d).set(&kept).map_err(state_err)?;
            }
        }
        Ok(())
    }
}

// ---- window join -----------------------------------------------------------------

/// The window join (see the [module docs](self)): per key and window, the left and
/// the right records; when the watermark reaches the window's max timestamp, every
/// pair is emitted (and, for a left outer join, each left record without a right one
/// with `None`), at the window's max timestamp, and the window's state is dropped.
pub struct WindowJoin<K, A, B, O, F> {
    assigner: WindowAssigner,
    join_type: JoinType,
    f: F,
    windows: Vec<TimeWindow>,
    _types: Types<K, A, B, O>,
}

impl<K, A, B, O, F> std::fmt::Debug for WindowJoin<K, A, B, O, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowJoin")
            .field("assigner", &self.assigner)
            .field("join_type", &self.join_type)
            .finish_non_exhaustive()
    }
}

impl<K, A, B, O, F> WindowJoin<K, A, B, O, F>
where
    F: FnMut(&A, Option<&B>) -> O,
{
    /// Joins records of one key in the same window of `assigner`.
    ///
    /// # Errors
    /// [`JoinConfigError::Windows`] for session or processing-time windows.
    pub fn new(
        assigner: WindowAssigner,
        join_type: JoinType,
        f: F,
    ) -> Result<Self, JoinConfigError> {
        check_join_windows(&assigner)?;
        Ok(WindowJoin {
            assigner,
            join_type,
            f,
            windows: Vec::new(),
            _types: PhantomData,
        })
    }
}

const WJ: &str = "window-join";

/// The records of one window: (left, right).
type WindowSides<A, B> = (Vec<A>, Vec<B>);

impl<K, A, B, O, F> KeyedProcessFunction for WindowJoin<K, A, B, O, F>
where
    K: Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
    B: Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    type Key = K;
    type In = Either<A, B>;
    type Out = JoinOutput<O, A, B>;

    fn process_element(
        &mut self,
        value: Either<A, B>,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let ts = timestamp(ctx, "a window join")?;
        let wm = ctx.current_watermark().millis();
        self.windows.clear();
        self.assigner
            .assign_windows(ts, ctx.current_processing_time(), &mut self.windows);
        // Late: every window it belongs to has fired (semantics.md §3, lateness 0).
        self.windows.retain(|w| w.max_timestamp() > wm);
        if self.windows.is_empty() {
            emit_late(ctx, ts, value, out);
            return Ok(());
        }
        let d = StateDescriptor::<((Millis, Millis), WindowSides<A, B>)>::new(WJ);
        let windows = std::mem::take(&mut self.windows);
        for w in &windows {
            let mut m = ctx.state().map(&d);
            let at = (w.start, w.end);
            let mut sides = m.get(&at).map_err(state_err)?.unwrap_or_default();
            match &value {
                Either::Left(a) => sides.0.push(clone_via_serde(a)?),
                Either::Right(b) => sides.1.push(clone_via_serde(b)?),
            }
            m.put(&at, &sides).map_err(state_err)?;
            ctx.register_event_time_timer(w.max_timestamp());
        }
        self.windows = windows;
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let d = StateDescriptor::<((Millis, Millis), WindowSides<A, B>)>::new(WJ);
        for ((start, end), (lefts, rights)) in ctx.state().map(&d).entries().map_err(state_err)? {
            let max_ts = TimeWindow::new(start, end).max_timestamp();
            if max_ts > time {
                continue;
            }
            for a in &lefts {
                for b in &rights {
                    out.collect(JoinOutput::Joined((self.f)(a, Some(b))), Some(max_ts));
                }
                if rights.is_empty() && self.join_type == JoinType::LeftOuter {
                    out.collect(JoinOutput::Joined((self.f)(a, None)), Some(max_ts));
                }
            }
            ctx.state()
                .map(&d)
                .remove(&(start, end))
                .map_err(state_err)?;
        }
        Ok(())
    }
}

/// A copy of `v` for a second window of a sliding assigner (records are not `Clone`
/// here; they are serializable, as all state is).
fn clone_via_serde<T: Serialize + DeserializeOwned>(v: &T) -> OpResult<T> {
    bincode::serialize(v)
        .and_then(|b| bincode::deserialize(&b))
        .map_err(|e| OperatorError::failed(format!("window join: cannot copy a record: {e}")))
}

// ---- temporal join ---------------------------------------------------------------

/// The event-time temporal join (see the [module docs](self)), as Flink's: per key,
/// the versions of the right side by timestamp, and the left records waiting for the
/// watermark to reach their timestamp. A left record is emitted at its own timestamp
/// with the version valid then (`None` for a left outer join without one; an inner
/// join drops it).
///
/// Every version is kept, also one that arrives behind the watermark: a waiting left
/// record (its timestamp is above the watermark) may still need it. Only left records
/// can be late. A version is dropped once no waiting or later left record can need
/// it: every left record to come has a timestamp above the watermark `W`, so the
/// newest version at or before `W` and all later ones are kept, older ones dropped
/// (semantics.md §3a).
pub struct TemporalJoin<K, A, B, O, F> {
    join_type: JoinType,
    f: F,
    _types: Types<K, A, B, O>,
}

impl<K, A, B, O, F> std::fmt::Debug for TemporalJoin<K, A, B, O, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemporalJoin")
            .field("join_type", &self.join_type)
            .finish_non_exhaustive()
    }
}

impl<K, A, B, O, F> TemporalJoin<K, A, B, O, F>
where
    F: FnMut(&A, Option<&B>) -> O,
{
    /// Joins each left record with the right version valid at its timestamp.
    pub fn new(join_type: JoinType, f: F) -> Self {
        TemporalJoin {
            join_type,
            f,
            _types: PhantomData,
        }
    }
}

const TJ_LEFT: &str = "temporal-join-left";
const TJ_VERSIONS: &str = "temporal-join-versions";
/// The watermark up to which a key's records and versions have been handled.
const TJ_DONE: &str = "temporal-join-done";

impl<K, A, B, O, F> TemporalJoin<K, A, B, O, F>
where
    A: Serialize + DeserializeOwned,
    B: Serialize + DeserializeOwned,
    F: FnMut(&A, Option<&B>) -> O,
{
    /// Emits `a` joined with the version valid at `ts` among `versions` (sorted).
    fn emit(
        &mut self,
        a: &A,
        ts: Millis,
        versions: &[(Millis, B)],
        out: &mut Output<JoinOutput<O, A, B>>,
    ) {
        let valid = versions.iter().rev().find(|(tv, _)| *tv <= ts);
        match (valid, self.join_type) {
            (Some((_, b)), _) => out.collect(JoinOutput::Joined((self.f)(a, Some(b))), Some(ts)),
            (None, JoinType::LeftOuter) => {
                out.collect(JoinOutput::Joined((self.f)(a, None)), Some(ts))
            }
            (None, JoinType::Inner) => {}
        }
    }
}

impl<K, A, B, O, F> KeyedProcessFunction for TemporalJoin<K, A, B, O, F>
where
    K: Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
    B: Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    type Key = K;
    type In = Either<A, B>;
    type Out = JoinOutput<O, A, B>;

    fn process_element(
        &mut self,
        value: Either<A, B>,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let ts = timestamp(ctx, "a temporal join")?;
        match value {
            Either::Left(a) if is_late(ctx, ts) => emit_late(ctx, ts, Either::Left(a), out),
            Either::Left(a) => {
                let d = StateDescriptor::<(Millis, Vec<A>)>::new(TJ_LEFT);
                let mut m = ctx.state().map(&d);
                let mut at = m.get(&ts).map_err(state_err)?.unwrap_or_default();
                at.push(a);
                m.put(&ts, &at).map_err(state_err)?;
                ctx.register_event_time_timer(ts);
            }
            Either::Right(b) => {
                let d = StateDescriptor::<(Millis, B)>::new(TJ_VERSIONS);
                ctx.state().map(&d).put(&ts, &b).map_err(state_err)?;
                // Old versions go when the watermark passes the next left record or
                // this version; a timer for a key that only gets versions. A version
                // behind the watermark is pruned at the next advance (a timer at or
                // before the watermark would fire only then too).
                let next = ctx.current_watermark().millis().saturating_add(1);
                ctx.register_event_time_timer(ts.max(next));
            }
        }
        Ok(())
    }

    /// Brings the key up to the watermark in one pass: emits every left record at or
    /// before it and drops the versions no later record can need. One timer does the
    /// work of all of the key's timers that fire in the same watermark advance (the
    /// others find the key done), so a key with many buffered versions and records
    /// costs one scan per advance, not one per timer.
    fn on_timer(
        &mut self,
        time: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let wm = ctx.current_watermark().millis().max(time);
        let dd = StateDescriptor::<Millis>::new(TJ_DONE);
        if ctx.state().value(&dd).get().map_err(state_err)? >= Some(wm) {
            return Ok(());
        }
        let vd = StateDescriptor::<(Millis, B)>::new(TJ_VERSIONS);
        let ld = StateDescriptor::<(Millis, Vec<A>)>::new(TJ_LEFT);
        let mut lefts = ctx.state().map(&ld).entries().map_err(state_err)?;
        let waiting = lefts.iter().filter(|(t, _)| *t > wm).count();
        lefts.retain(|(t, _)| *t <= wm);
        lefts.sort_by_key(|(t, _)| *t);
        let mut versions = ctx.state().map(&vd).entries().map_err(state_err)?;
        versions.sort_by_key(|(t, _)| *t);
        for (ta, as_) in lefts {
            for a in &as_ {
                self.emit(a, ta, &versions, out);
            }
            ctx.state().map(&ld).remove(&ta).map_err(state_err)?;
        }
        // Versions before the one valid at the watermark can never be looked up again:
        // later left records have timestamps above it.
        let keep_from = versions
            .iter()
            .rev()
            .find(|(tv, _)| *tv <= wm)
            .map_or(Millis::MIN, |(tv, _)| *tv);
        for (tv, _) in versions.iter().filter(|(tv, _)| *tv < keep_from) {
            ctx.state().map(&vd).remove(tv).map_err(state_err)?;
        }
        let kept = versions.iter().filter(|(tv, _)| *tv >= keep_from).count();
        if kept == 0 && waiting == 0 {
            ctx.state().value(&dd).clear().map_err(state_err)?;
        } else {
            ctx.state().value(&dd).set(&wm).map_err(state_err)?;
        }
        Ok(())
    }
}
