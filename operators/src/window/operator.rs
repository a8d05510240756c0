//! The window operator, as Flink's `WindowOperator` (semantics.md §3).

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

use brook_core::cancel::{CancelCheck, CancelFlag};
use brook_core::checkpoint::{CheckpointId, RestoredState, StateSnapshot};
use brook_core::element::Batch;
use brook_core::keys::{key_group_for_key, KeyGroup};
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_core::time::{Millis, Watermark};
use brook_state::{
    namespaced_table, read_native_entries, BackendKind, KeyedStateBackend, NamespacedTable,
    StateError, TimerQueue,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::assigner::WindowAssigner;
use super::fast::{event_cleanup_time, FixedWindows, Sessions};
use super::function::{Aggregating, ProcessWindowFunction, Processing, WindowFunction};
use super::snapshot::{self, event_time_timers, is_pending, Writer};
use super::trigger::{Domain, TimerSet, Trigger, TriggerCtx, TriggerState};
use super::{AggregateFunction, TimeWindow, WindowOutput};

/// The name of the window operator's state (one entry per key and window).
const WINDOW_STATE: &str = "window-contents";

/// Everything kept for one key and window: the contents, the trigger's state and the
/// timers registered for it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Slot<S> {
    contents: S,
    trigger: TriggerState,
    timers: TimerSet,
}

/// The operator's settings and timer queues (split from the state table so that both
/// can be borrowed at once).
struct Core<K> {
    assigner: WindowAssigner,
    trigger: Trigger,
    allowed_lateness: Millis,
    event_timers: TimerQueue<K, TimeWindow>,
    processing_timers: TimerQueue<K, TimeWindow>,
    /// Timers a trigger registered, to be queued.
    new_timers: Vec<(Domain, Millis)>,
}

impl<K: Clone> Core<K> {
    /// When a window's state is dropped, as Flink's `WindowOperator.cleanupTime`:
    /// `max_timestamp + allowed lateness` in event time (`i64::MAX`, never, on
    /// overflow), `max_timestamp` in processing time.
    fn cleanup_time(&self, w: &TimeWindow) -> Millis {
        if self.assigner.is_event_time() {
            event_cleanup_time(w, self.allowed_lateness)
        } else {
            w.max_timestamp()
        }
    }

    /// Whether a window is already cleaned up at watermark `wm` (event time only).
    fn is_window_late(&self, w: &TimeWindow, wm: Millis) -> bool {
        self.assigner.is_event_time() && self.cleanup_time(w) <= wm
    }

    fn cleanup_domain(&self) -> Domain {
        if self.assigner.is_event_time() {
            Domain::Event
        } else {
            Domain::Processing
        }
    }

    /// Registers the window's cleanup timer (none when it would be `i64::MAX`).
    fn register_cleanup(&mut self, timers: &mut TimerSet, w: &TimeWindow) {
        let t = self.cleanup_time(w);
        if t != Millis::MAX && timers.insert(self.cleanup_domain(), t) {
            self.new_timers.push((self.cleanup_domain(), t));
        }
    }

    /// Queues the timers registered since the last call.
    fn queue_new_timers(&mut self, key: &K, w: TimeWindow) {
        for (d, t) in self.new_timers.drain(..) {
            let q = match d {
                Domain::Event => &mut self.event_timers,
                Domain::Processing => &mut self.processing_timers,
            };
            q.register(t, key.clone(), w);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only: operators built on this thread while set take the general path.
    pub(super) static FORCE_GENERAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Which state the operator keeps (chosen from the backend kind, assigner and trigger).
enum Path<K, S> {
    /// The general path: a [`NamespacedTable`] per key and window plus timers.
    General,
    /// Tumbling or sliding event-time windows, default trigger, heap state.
    Fixed(FixedWindows<K, S>),
    /// Event-time sessions, default trigger, heap state.
    Sessions(Sessions<K, S>),
}

/// Windows on a keyed stream, as Flink's `WindowOperator`: records of type `T` are
/// keyed by `KS`, assigned to windows by a [`WindowAssigner`], kept per key and window
/// by a [`WindowFunction`] `F` (an aggregate's accumulator or the records), and emitted
/// when the [`Trigger`] fires: `WindowOutput::Result` with timestamp `end - 1`.
///
/// Event-time rules (semantics.md §3): a record is processed against the watermark in
/// force before it; a window is dropped once the watermark reaches
/// `max_timestamp + allowed_lateness` (ms); a record all of whose windows (after session
/// merging) are dropped is *late*: counted ([`WindowOperator::late_records`]) and, with
/// [`WindowOperator::emit_late_records`], emitted unchanged as `WindowOutput::Late` with
/// its own timestamp. Timers due at a watermark fire in time order before it is
/// forwarded.
///
/// State lives in a [`NamespacedTable`] with the window as namespace: Rust values on the
/// heap for an in-memory backend, bincode in any other backend. With an in-memory
/// backend, event-time windows and the default trigger, state is kept without timers
/// per key and window instead (window-major for tumbling and sliding windows, sessions
/// changed in place), with the same results; the rows of one window firing at one
/// watermark then come in no particular key order.
pub struct WindowOperator<T, K, KS, F: WindowFunction<K, T>> {
    core: Core<K>,
    emit_late: bool,
    key_selector: KS,
    func: F,
    table: Box<dyn NamespacedTable<K, TimeWindow, Slot<F::State>>>,
    needs_key_group: bool,
    heap: bool,
    path: Path<K, F::State>,
    windows: Vec<TimeWindow>,
    existing: Vec<TimeWindow>,
    sweep: Vec<(TimeWindow, bool)>,
    merged: Vec<TimeWindow>,
    removed: Vec<Slot<F::State>>,
    late_records: u64,
    /// Windows and timers handled since the job's cancel flag was last read: one
    /// record can fall into millions of sliding windows.
    cancel_check: CancelCheck,
    _in: PhantomData<fn(T)>,
}

impl<T, K, KS, F: WindowFunction<K, T>> fmt::Debug for WindowOperator<T, K, KS, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowOperator")
            .field("assigner", &self.core.assigner)
            .field("trigger", &self.core.trigger)
            .field("allowed_lateness", &self.core.allowed_lateness)
            .field("emit_late", &self.emit_late)
            .field(
                "windows",
                &match &self.path {
                    Path::General => self.table.len(),
                    Path::Fixed(f) => f.len(),
                    Path::Sessions(s) => s.len(),
                },
            )
            .field("late_records", &self.late_records)
            .finish_non_exhaustive()
    }
}

impl<T, K, KS, A> WindowOperator<T, K, KS, Aggregating<A>>
where
    T: Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    KS: Fn(&T) -> K + Send + 'static,
    A: AggregateFunction<T>,
{
    /// Aggregates each key's windows incrementally with `f` (one accumulator per key and
    /// window), emitting `WindowOutput::Result(WindowResult { key, window, value })`,
    /// as Flink's `WindowedStream.aggregate`. State goes to `backend`.
    pub fn aggregate(
        assigner: WindowAssigner,
        key_selector: KS,
        f: A,
        backend: Box<dyn KeyedStateBackend>,
    ) -> Self {
        Self::with_function(assigner, key_selector, Aggregating(f), backend)
    }
}

impl<T, K, KS, P> WindowOperator<T, K, KS, Processing<P, K, T>>
where
    T: Clone + Serialize + DeserializeOwned + Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    KS: Fn(&T) -> K + Send + 'static,
    P: ProcessWindowFunction<K, T>,
{
    /// Keeps all records of each key and window and hands them to `f` when the window
    /// fires, emitting `WindowOutput::Result` of each of `f`'s outputs, as Flink's
    /// `WindowedStream.process`. State goes to `backend`.
    pub fn process(
        assigner: WindowAssigner,
        key_selector: KS,
        f: P,
        backend: Box<dyn KeyedStateBackend>,
    ) -> Self {
        Self::with_function(assigner, key_selector, Processing::new(f), backend)
    }
}

fn state_err(e: StateError) -> OperatorError {
    OperatorError::other(e)
}

impl<T, K, KS, F> WindowOperator<T, K, KS, F>
where
    T: Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    KS: Fn(&T) -> K + Send + 'static,
    F: WindowFunction<K, T>,
{
    /// The operator with any [`WindowFunction`] (see [`WindowOperator::aggregate`] and
    /// [`WindowOperator::process`]); the trigger is the assigner's default.
    pub fn with_function(
        assigner: WindowAssigner,
        key_selector: KS,
        func: F,
        backend: Box<dyn KeyedStateBackend>,
    ) -> Self {
        let heap = backend.kind() == BackendKind::Heap;
        let table = namespaced_table(WINDOW_STATE, backend);
        let mut op = WindowOperator {
            core: Core {
                trigger: Trigger::default_for(assigner.is_event_time()),
                assigner,
                allowed_lateness: 0,
                event_timers: TimerQueue::new(),
                processing_timers: TimerQueue::new(),
                new_timers: Vec::new(),
            },
            emit_late: false,
            key_selector,
            func,
            needs_key_group: table.needs_key_group(),
            table,
            heap,
            path: Path::General,
            windows: Vec::new(),
            existing: Vec::new(),
            sweep: Vec::new(),
            merged: Vec::new(),
            removed: Vec::new(),
            late_records: 0,
            cancel_check: CancelCheck::new(),
            _in: PhantomData,
        };
        op.choose_path();
        op
    }

    /// The fast paths need heap state, event time and the default trigger.
    fn choose_path(&mut self) {
        #[cfg(test)]
        let forced = FORCE_GENERAL.with(std::cell::Cell::get);
        #[cfg(not(test))]
        let forced = false;
        let fast = self.heap
            && !forced
            && self.core.assigner.is_event_time()
            && self.core.trigger == Trigger::EventTime;
        self.path = if !fast {
            Path::General
        } else if self.core.assigner.is_merging() {
            Path::Sessions(Sessions::new())
        } else {
            Path::Fixed(FixedWindows::new())
        };
    }

    /// Fires on `trigger` instead of the assigner's default ([`Trigger::EventTime`] or
    /// [`Trigger::ProcessingTime`]).
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.core.trigger = trigger;
        self.choose_path();
        self
    }

    /// Keeps each event-time window until the watermark reaches
    /// `max_timestamp + ms` (default 0; negative counts as 0), as Flink's
    /// `allowedLateness`: records arriving meanwhile are added and fire the window
    /// again with its full result. No effect on processing-time windows.
    pub fn allowed_lateness(mut self, ms: Millis) -> Self {
        self.core.allowed_lateness = ms.max(0);
        self
    }

    /// Whether late records are emitted as `WindowOutput::Late` (for a late-data side
    /// output) or only counted and dropped (default: dropped).
    pub fn emit_late_records(mut self, emit: bool) -> Self {
        self.emit_late = emit;
        self
    }

    /// Late records seen so far (emitted or dropped).
    pub fn late_records(&self) -> u64 {
        self.late_records
    }

    /// Number of (key, window) entries in state.
    pub fn window_count(&self) -> usize {
        match &self.path {
            Path::General => self.table.len(),
            Path::Fixed(f) => f.len(),
            Path::Sessions(s) => s.len(),
        }
    }

    fn key_group(&self, key: &K, ctx: &OperatorContext) -> KeyGroup {
        if self.needs_key_group {
            key_group_for_key(key, ctx.info().max_parallelism)
        } else {
            0
        }
    }

    /// Adds a record to window `w` (which is not late), lets the trigger decide and
    /// registers the cleanup timer, as the body of Flink's `processElement` loop.
    #[allow(clippy::too_many_arguments)]
    fn add_to_window(
        &mut self,
        kg: KeyGroup,
        key: &K,
        w: TimeWindow,
        ts: Millis,
        value: &T,
        (wm, now): (Millis, Millis),
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> OpResult {
        let slot = match self.table.get_mut(kg, key, &w).map_err(state_err)? {
            Some(s) => s,
            None => {
                let fresh = Slot {
                    contents: self.func.create(),
                    trigger: TriggerState::default(),
                    timers: TimerSet::default(),
                };
                self.table.insert(kg, key, &w, fresh).map_err(state_err)?
            }
        };
        self.func.add(&mut slot.contents, value);
        let mut tctx = TriggerCtx {
            window: w,
            watermark: wm,
            now,
            timers: &mut slot.timers,
            new_timers: &mut self.core.new_timers,
        };
        if self
            .core
            .trigger
            .on_element(ts, &mut slot.trigger, &mut tctx)
        {
            self.func.emit(key, &w, &slot.contents, out);
        }
        self.core.register_cleanup(&mut slot.timers, &w);
        self.core.queue_new_timers(key, w);
        Ok(())
    }

    /// Tumbling and sliding windows. Returns whether every window was late; stops with
    /// [`OperatorError::Cancelled`] when `cancel` is set.
    #[allow(clippy::too_many_arguments)]
    fn process_fixed(
        &mut self,
        kg: KeyGroup,
        key: &K,
        ts: Millis,
        value: &T,
        clocks: (Millis, Millis),
        cancel: &CancelFlag,
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> OpResult<bool> {
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        self.core
            .assigner
            .assign_windows(ts, clocks.1, &mut windows);
        let mut skipped = true;
        for w in &windows {
            if self.cancel_check.tick(1, cancel) {
                return Err(OperatorError::Cancelled);
            }
            if self.core.is_window_late(w, clocks.0) {
                continue;
            }
            skipped = false;
            self.add_to_window(kg, key, *w, ts, value, clocks, out)?;
        }
        self.windows = windows;
        Ok(skipped)
    }

    /// Finds the group of the key's windows that `w` merges with, as Flink's
    /// `TimeWindow.mergeWindows` (sorted by start, overlapping or touching windows
    /// chained): returns the covering window and leaves the existing windows of the
    /// group in `self.merged`, by start.
    fn merge_group(&mut self, w: TimeWindow) -> TimeWindow {
        self.sweep.clear();
        self.sweep.extend(self.existing.iter().map(|e| (*e, false)));
        self.sweep.push((w, true));
        self.sweep
            .sort_unstable_by_key(|(x, new)| (x.start, *new, x.end));
        self.merged.clear();
        let (mut from, mut cover) = (0, self.sweep[0].0);
        let mut i = 1;
        loop {
            let next = self.sweep.get(i).map(|(x, _)| *x);
            match next {
                Some(x) if cover.intersects(&x) => cover = cover.cover(&x),
                _ => {
                    let group = &self.sweep[from..i];
                    if group.iter().any(|(_, new)| *new) {
                        self.merged
                            .extend(group.iter().filter(|(_, new)| !new).map(|(x, _)| *x));
                        return cover;
                    }
                    // `w` is in a later group.
                    let Some(x) = next else {
                        return w;
                    };
                    from = i;
                    cover = x;
                }
            }
            i += 1;
        }
    }

    /// Session windows: merges the record's window with the key's kept windows, as
    /// Flink's `MergingWindowSet.addWindow`. Returns whether the record was late.
    #[allow(clippy::too_many_arguments)]
    fn process_merging(
        &mut self,
        kg: KeyGroup,
        key: &K,
        ts: Millis,
        value: &T,
        (wm, now): (Millis, Millis),
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> OpResult<bool> {
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        self.core.assigner.assign_windows(ts, now, &mut windows);
        let mut skipped = true;
        for &w in &windows {
            self.existing.clear();
            self.table
                .namespaces(kg, key, &mut self.existing)
                .map_err(state_err)?;
            let cover = self.merge_group(w);
            let result = if self.merged.is_empty() {
                w
            } else if self.merged.len() == 1 && self.merged[0] == cover {
                // Inside a kept window: nothing merges.
                cover
            } else {
                self.merge_into(kg, key, cover, (wm, now))?;
                cover
            };
            if self.core.is_window_late(&result, wm) {
                // Only possible for a window of its own: a kept window is never late.
                self.table.remove(kg, key, &result).map_err(state_err)?;
                continue;
            }
            skipped = false;
            self.add_to_window(kg, key, result, ts, value, (wm, now), out)?;
        }
        self.windows = windows;
        Ok(skipped)
    }

    /// Replaces the windows in `self.merged` by `cover`: contents merged (earliest
    /// window first), trigger states merged by the trigger, their timers dropped.
    fn merge_into(
        &mut self,
        kg: KeyGroup,
        key: &K,
        cover: TimeWindow,
        (wm, now): (Millis, Millis),
    ) -> OpResult {
        let mut removed = std::mem::take(&mut self.removed);
        for m in &self.merged {
            if let Some(s) = self.table.remove(kg, key, m).map_err(state_err)? {
                removed.push(s);
            }
        }
        let mut trigger = TriggerState::default();
        let mut timers = TimerSet::default();
        let mut tctx = TriggerCtx {
            window: cover,
            watermark: wm,
            now,
            timers: &mut timers,
            new_timers: &mut self.core.new_timers,
        };
        self.core
            .trigger
            .on_merge(&mut trigger, removed.iter().map(|s| &s.trigger), &mut tctx);
        let mut contents: Option<F::State> = None;
        for s in removed.drain(..) {
            match contents.as_mut() {
                None => contents = Some(s.contents),
                Some(c) => self.func.merge(c, s.contents),
            }
        }
        let contents = contents.unwrap_or_else(|| self.func.create());
        self.table
            .insert(
                kg,
                key,
                &cover,
                Slot {
                    contents,
                    trigger,
                    timers,
                },
            )
            .map_err(state_err)?;
        self.core.queue_new_timers(key, cover);
        self.removed = removed;
        Ok(())
    }

    /// Fires the timers of `domain` due at `time`, in time order, as Flink's
    /// `onEventTime` / `onProcessingTime`.
    fn fire_timers(
        &mut self,
        domain: Domain,
        time: Millis,
        ctx: &OperatorContext,
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> OpResult {
        let clocks = (ctx.current_watermark().millis(), ctx.processing_time());
        loop {
            let due = match domain {
                Domain::Event => self.core.event_timers.pop_due(time),
                Domain::Processing => self.core.processing_timers.pop_due(time),
            };
            let Some((t, mut batch)) = due else {
                break;
            };
            for (key, w) in batch.drain(..) {
                if self.cancel_check.tick(1, ctx.cancel_flag()) {
                    return Err(OperatorError::Cancelled);
                }
                let kg = self.key_group(&key, ctx);
                self.on_timer(domain, t, kg, &key, w, clocks, out)?;
            }
            match domain {
                Domain::Event => self.core.event_timers.recycle(batch),
                Domain::Processing => self.core.processing_timers.recycle(batch),
            }
        }
        self.table.flush().map_err(state_err)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_timer(
        &mut self,
        domain: Domain,
        t: Millis,
        kg: KeyGroup,
        key: &K,
        w: TimeWindow,
        (wm, now): (Millis, Millis),
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> OpResult {
        let Some(slot) = self.table.get_mut(kg, key, &w).map_err(state_err)? else {
            return Ok(()); // the window is gone (merged or cleaned up)
        };
        if !slot.timers.remove(domain, t) {
            return Ok(()); // the timer was deleted
        }
        let mut tctx = TriggerCtx {
            window: w,
            watermark: wm,
            now,
            timers: &mut slot.timers,
            new_timers: &mut self.core.new_timers,
        };
        let fire = match domain {
            Domain::Event => self
                .core
                .trigger
                .on_event_time(t, &mut slot.trigger, &mut tctx),
            Domain::Processing => self.core.trigger.on_processing_time(),
        };
        if fire {
            self.func.emit(key, &w, &slot.contents, out);
        }
        if domain == self.core.cleanup_domain() && t == self.core.cleanup_time(&w) {
            self.core.new_timers.clear();
            self.table.remove(kg, key, &w).map_err(state_err)?;
        } else {
            self.core.queue_new_timers(key, w);
        }
        Ok(())
    }

    /// Puts a restored entry into the general path's table and queues its timers.
    fn restore_general(
        &mut self,
        kg: KeyGroup,
        key: K,
        w: TimeWindow,
        slot: Slot<F::State>,
    ) -> OpResult {
        let timers: Vec<(Domain, Millis)> = slot.timers.iter().collect();
        self.table.insert(kg, &key, &w, slot).map_err(state_err)?;
        for (d, t) in timers {
            let q = match d {
                Domain::Event => &mut self.core.event_timers,
                Domain::Processing => &mut self.core.processing_timers,
            };
            q.register(t, key.clone(), w);
        }
        Ok(())
    }

    /// Asks to be called once processing time has *passed* the earliest processing-
    /// time timer (at `t + 1`): a record processed at `t` itself still belongs to the
    /// window that timer fires (as Flink since FLINK-9857, whose timers fired at `t`
    /// and a record at `t` then opened the fired window again: two rows for one key
    /// and window).
    fn request_processing_callback(&self, ctx: &mut OperatorContext) {
        if let Some(t) = self.core.processing_timers.peek_time() {
            ctx.request_processing_time_callback(t.saturating_add(1));
        }
    }
}

impl<T, K, KS, F> Operator for WindowOperator<T, K, KS, F>
where
    T: Send + 'static,
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    KS: Fn(&T) -> K + Send + 'static,
    F: WindowFunction<K, T>,
{
    type In = T;
    type Out = WindowOutput<F::Out, T>;

    fn open(&mut self, ctx: &mut OperatorContext) -> OpResult {
        if let Trigger::ContinuousEventTime(i) = self.core.trigger {
            if i <= 0 {
                return Err(OperatorError::failed(format!(
                    "{}: the continuous event-time trigger's interval must be > 0 ms, got {i}",
                    ctx.info()
                )));
            }
        }
        Ok(())
    }

    /// Writes every key's windows (contents, trigger state, timers; see `snapshot.rs`),
    /// one blob per key group; on a byte backend with a native format (RocksDB) in a
    /// checkpoint, the backend's files instead (incremental; timers are in the
    /// entries and re-registered from them on restore).
    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        ctx: &mut OperatorContext,
        snap: &mut StateSnapshot,
    ) -> OpResult {
        if let (Path::General, Some(storage)) = (&self.path, snap.storage().cloned()) {
            let key_groups = ctx.info().key_groups();
            if let Some(native) = self
                .table
                .snapshot_native(&storage, key_groups)
                .map_err(state_err)?
            {
                snap.put_native(native);
                return Ok(());
            }
        }
        let mut w = Writer::new(ctx.info().max_parallelism);
        let lateness = self.core.allowed_lateness;
        let fresh = TriggerState::default();
        match &self.path {
            Path::General => self
                .table
                .for_each_entry(&mut |key, win, slot| {
                    w.put(key, win, &slot.contents, &slot.trigger, &slot.timers);
                })
                .map_err(state_err)?,
            Path::Fixed(f) => f.for_each_entry(&mut |key, win, state, pending| {
                let timers = event_time_timers(win, lateness, pending);
                w.put(key, win, state, &fresh, &timers);
            }),
            Path::Sessions(s) => s.for_each_entry(&mut |key, win, state, armed| {
                let timers = event_time_timers(win, lateness, armed);
                w.put(key, win, state, &fresh, &timers);
            }),
        }
        w.finish(snap)
    }

    /// Puts back the windows of the key groups this subtask owns and re-registers
    /// their timers (fired windows stay fired). Called before `open`, on a fresh
    /// operator.
    fn restore_state(&mut self, ctx: &mut OperatorContext, state: &RestoredState) -> OpResult {
        let max_parallelism = ctx.info().max_parallelism;
        let general = matches!(self.path, Path::General);
        let mut fast = Vec::new();
        for (kg, bytes) in state.keyed() {
            snapshot::read::<K, F::State>(kg, bytes, max_parallelism, |entry| {
                let (key, w, contents, trigger, timers) = entry;
                if general {
                    let slot = Slot {
                        contents,
                        trigger,
                        timers,
                    };
                    self.restore_general(kg, key, w, slot)
                } else {
                    fast.push((key, w, contents, is_pending(&w, &timers)));
                    Ok(())
                }
            })?;
        }
        if !state.native().0.is_empty() {
            if general && self.table.restore_native(state).map_err(state_err)? {
                let mut timers = Vec::new();
                self.table
                    .for_each_entry(&mut |key, w, slot| {
                        timers.extend(slot.timers.iter().map(|(d, t)| (d, t, key.clone(), *w)));
                    })
                    .map_err(state_err)?;
                for (d, t, key, w) in timers {
                    let q = match d {
                        Domain::Event => &mut self.core.event_timers,
                        Domain::Processing => &mut self.core.processing_timers,
                    };
                    q.register(t, key, w);
                }
            } else {
                let entries =
                    read_native_entries::<K, TimeWindow, Slot<F::State>>(WINDOW_STATE, state)
                        .map_err(state_err)?;
                for (kg, key, w, slot) in entries {
                    if general {
                        self.restore_general(kg, key, w, slot)?;
                    } else {
                        let pending = is_pending(&w, &slot.timers);
                        fast.push((key, w, slot.contents, pending));
                    }
                }
            }
        }
        let lateness = self.core.allowed_lateness;
        match &mut self.path {
            Path::General => {}
            Path::Fixed(f) => f.restore(fast),
            Path::Sessions(s) => s.restore(fast, lateness),
        }
        self.table.flush().map_err(state_err)?;
        self.request_processing_callback(ctx);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Batch<T>,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        let clocks = (ctx.current_watermark().millis(), ctx.processing_time());
        let event_time = self.core.assigner.is_event_time();
        let mut late = 0;
        for r in batch {
            let ts = match r.timestamp {
                Some(t) if t != Millis::MIN => t,
                _ if event_time => {
                    return Err(OperatorError::failed(format!(
                        "{}: a record has no event time, so an event-time window cannot \
                         place it; give the source a WatermarkStrategy (event-time \
                         timestamps) or use a processing-time window",
                        ctx.info()
                    )))
                }
                _ => Millis::MIN,
            };
            let key = (self.key_selector)(&r.value);
            let lateness = self.core.allowed_lateness;
            let skipped = match &mut self.path {
                Path::Fixed(f) => {
                    self.windows.clear();
                    self.core
                        .assigner
                        .assign_windows(ts, clocks.1, &mut self.windows);
                    // A chunk of windows at a time: a cancelled job stops within one
                    // chunk even when a record is in millions of windows.
                    let mut skipped = true;
                    for chunk in self.windows.chunks(CancelCheck::EVERY) {
                        if self.cancel_check.tick(chunk.len(), ctx.cancel_flag()) {
                            return Err(OperatorError::Cancelled);
                        }
                        skipped &= f.add(
                            &key,
                            &r.value,
                            chunk,
                            clocks.0,
                            lateness,
                            &mut self.func,
                            out,
                        );
                    }
                    skipped
                }
                Path::Sessions(s) => {
                    self.windows.clear();
                    self.core
                        .assigner
                        .assign_windows(ts, clocks.1, &mut self.windows);
                    if self.cancel_check.tick(1, ctx.cancel_flag()) {
                        return Err(OperatorError::Cancelled);
                    }
                    let mut skipped = true;
                    for &w in &self.windows {
                        skipped &=
                            s.add(&key, &r.value, w, clocks.0, lateness, &mut self.func, out);
                    }
                    skipped
                }
                Path::General => {
                    let kg = self.key_group(&key, ctx);
                    if self.core.assigner.is_merging() {
                        self.process_merging(kg, &key, ts, &r.value, clocks, out)?
                    } else {
                        let cancel = ctx.cancel_flag();
                        self.process_fixed(kg, &key, ts, &r.value, clocks, cancel, out)?
                    }
                }
            };
            // As Flink: late when no window took it and `ts + lateness <= watermark`.
            if skipped && event_time && ts.saturating_add(self.core.allowed_lateness) <= clocks.0 {
                late += 1;
                if self.emit_late {
                    out.collect(WindowOutput::Late(r.value), r.timestamp);
                }
            }
        }
        if late > 0 {
            self.late_records += late;
            ctx.count_late_records(late);
        }
        self.table.flush().map_err(state_err)?;
        self.request_processing_callback(ctx);
        Ok(())
    }

    fn on_watermark(
        &mut self,
        wm: Watermark,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult<Option<Watermark>> {
        let lateness = self.core.allowed_lateness;
        match &mut self.path {
            Path::Fixed(f) => {
                let cancel = (&mut self.cancel_check, ctx.cancel_flag());
                if !f.on_watermark(wm.millis(), lateness, &mut self.func, out, cancel) {
                    return Err(OperatorError::Cancelled);
                }
            }
            Path::Sessions(s) => s.on_watermark(wm.millis(), lateness, &mut self.func, out),
            Path::General => self.fire_timers(Domain::Event, wm.millis(), ctx, out)?,
        }
        self.request_processing_callback(ctx);
        Ok(Some(wm))
    }

    fn on_processing_time(
        &mut self,
        now_ms: Millis,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        // Only timers processing time has passed (see `request_processing_callback`).
        self.fire_timers(Domain::Processing, now_ms.saturating_sub(1), ctx, out)?;
        self.request_processing_callback(ctx);
        Ok(())
    }
}
