//! The window operator's fast paths for in-memory state and the default event-time
//! trigger ([`super::Trigger::EventTime`]), with the same results as the general path
//! (semantics.md §3):
//!
//! - [`FixedWindows`] (tumbling and sliding): state kept window-major, `window ->
//!   (key -> state)` with windows ordered by end, and no timer per key and window: a
//!   watermark fires the windows whose max timestamp it passed (every key of one window
//!   together, in no particular key order) and drops those past their cleanup time.
//! - [`Sessions`]: each key's sessions in a short list ordered by start; a record that
//!   extends one session changes it in place; one lazily kept timer entry per session
//!   (moved only when it pops and finds the session grew).
//!
//! Both keep everything visible per key and window, so they can be snapshotted per key
//! group (issue 5).

use std::cmp::Ordering;
use std::fmt;
use std::hash::Hash;

use brook_core::cancel::{CancelCheck, CancelFlag};
use brook_core::operator::Output;
use brook_core::time::Millis;
use brook_state::{FastHashMap, NamespaceMajorTable, TimerQueue};

use super::function::WindowFunction;
use super::{TimeWindow, WindowOutput};

/// When an event-time window's state is dropped, as Flink's `cleanupTime`:
/// `max_timestamp + allowed_lateness`, `i64::MAX` (never) on overflow.
#[inline]
pub(crate) fn event_cleanup_time(w: &TimeWindow, allowed_lateness: Millis) -> Millis {
    w.max_timestamp()
        .checked_add(allowed_lateness)
        .unwrap_or(Millis::MAX)
}

/// A window ordered by its end (then start), so windows fire in order of max timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByEnd(pub(crate) TimeWindow);

impl Ord for ByEnd {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0.end, self.0.start).cmp(&(other.0.end, other.0.start))
    }
}

impl PartialOrd for ByEnd {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Tumbling and sliding event-time windows on the heap, window-major.
///
/// A window with `max_timestamp <= W` has fired: either at the watermark that passed it,
/// or at once when it was created that late (within the allowed lateness). So firing a
/// watermark `W` emits the windows with `fired < max_timestamp <= W`, where `fired` is
/// the previous watermark; a record added to a window with `max_timestamp <= W` (the
/// watermark in force) re-fires that key's result at once, as the event-time trigger
/// does.
pub(crate) struct FixedWindows<K, S> {
    table: NamespaceMajorTable<ByEnd, K, S>,
    /// The last watermark fired.
    fired: Millis,
    /// Only after a restore from former subtasks that had fired up to different
    /// watermarks: entries with `max_timestamp > fired` that fired already and got
    /// no record since (not to fire again when the watermark passes them). Empty
    /// otherwise.
    skip: FastHashMap<(TimeWindow, K), ()>,
}

impl<K, S> fmt::Debug for FixedWindows<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindows")
            .field("table", &self.table)
            .field("fired", &self.fired)
            .finish()
    }
}

impl<K, S> FixedWindows<K, S> {
    /// Number of (key, window) entries.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}

impl<K: Hash + Eq + Clone, S> FixedWindows<K, S> {
    pub(crate) fn new() -> Self {
        FixedWindows {
            table: NamespaceMajorTable::new(),
            fired: Millis::MIN,
            skip: FastHashMap::default(),
        }
    }

    /// Calls `f(key, window, state, pending)` for every entry, `pending` when the
    /// window is still to fire at its max timestamp (for snapshots).
    pub(crate) fn for_each_entry(&self, f: &mut dyn FnMut(&K, &TimeWindow, &S, bool)) {
        for (ByEnd(w), key, state) in self.table.iter() {
            let pending = w.max_timestamp() > self.fired
                && (self.skip.is_empty() || !self.skip.contains_key(&(*w, key.clone())));
            f(key, w, state, pending);
        }
    }

    /// Puts restored entries `(key, window, state, pending)` into an empty table
    /// (before the first watermark): windows not `pending` have fired and fire again
    /// only for records within the allowed lateness.
    pub(crate) fn restore(&mut self, entries: Vec<(K, TimeWindow, S, bool)>) {
        let max_fired = entries
            .iter()
            .filter(|e| !e.3)
            .map(|e| e.1.max_timestamp())
            .max();
        let min_pending = entries
            .iter()
            .filter(|e| e.3)
            .map(|e| e.1.max_timestamp())
            .min();
        // Fired windows end before pending ones when all entries were written at one
        // watermark (aligned checkpoints); otherwise those after `fired` are skipped.
        let mut fired = max_fired.unwrap_or(Millis::MIN).max(self.fired);
        if let Some(p) = min_pending {
            fired = fired.min(p.saturating_sub(1));
        }
        self.fired = fired;
        for (key, w, state, pending) in entries {
            if !pending && w.max_timestamp() > fired {
                self.skip.insert((w, key.clone()), ());
            }
            let pos = self.table.namespace(ByEnd(w));
            let hash = self.table.hash_key(&key);
            // (Entries are unique per key and window.)
            self.table
                .get_or_insert_with(pos, hash, &key, move || state);
        }
    }

    /// Adds a record to its `windows` (those not yet cleaned up at watermark `wm`),
    /// firing the key's result at once in windows the watermark already passed.
    /// Returns whether every window was cleaned up (the record may be late).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn add<T, F: WindowFunction<K, T, State = S>>(
        &mut self,
        key: &K,
        value: &T,
        windows: &[TimeWindow],
        wm: Millis,
        allowed_lateness: Millis,
        func: &mut F,
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> bool {
        let hash = self.table.hash_key(key);
        let mut skipped = true;
        for w in windows {
            if event_cleanup_time(w, allowed_lateness) <= wm {
                continue;
            }
            skipped = false;
            let pos = self.table.namespace(ByEnd(*w));
            let state = self
                .table
                .get_or_insert_with(pos, hash, key, || func.create());
            func.add(state, value);
            if w.max_timestamp() <= wm {
                func.emit(key, w, state, out);
            } else if !self.skip.is_empty() {
                // A fired window that gets a record before the watermark reaches it
                // again fires again then (as the event-time trigger re-registers).
                self.skip.remove(&(*w, key.clone()));
            }
        }
        skipped
    }

    /// Fires the windows the watermark `wm` passed since the last one (in order of max
    /// timestamp), then drops those whose cleanup time it reached. Returns `false`,
    /// part-way, when `cancel` is set (checked per window fired, counted in `check`):
    /// one watermark can pass millions of windows.
    pub(crate) fn on_watermark<T, F: WindowFunction<K, T, State = S>>(
        &mut self,
        wm: Millis,
        allowed_lateness: Millis,
        func: &mut F,
        out: &mut Output<WindowOutput<F::Out, T>>,
        (check, cancel): (&mut CancelCheck, &CancelFlag),
    ) -> bool {
        if wm <= self.fired {
            return true;
        }
        let fired = self.fired;
        let mut pos = self.table.partition_point(|w| w.0.max_timestamp() <= fired);
        while let Some(&ByEnd(w)) = self.table.namespace_at(pos) {
            if w.max_timestamp() > wm {
                break;
            }
            if check.tick(1, cancel) {
                return false;
            }
            for (key, state) in self.table.entries_at(pos) {
                if !self.skip.is_empty() && self.skip.remove(&(w, key.clone())).is_some() {
                    continue;
                }
                func.emit(key, &w, state, out);
            }
            pos += 1;
        }
        if !self.skip.is_empty() {
            self.skip.retain(|(w, _), ()| w.max_timestamp() > wm);
        }
        while let Some(&ByEnd(w)) = self.table.first() {
            if event_cleanup_time(&w, allowed_lateness) > wm {
                break;
            }
            self.table.remove_first();
        }
        self.fired = wm;
        true
    }
}

/// One session of a key.
struct Session<S> {
    window: TimeWindow,
    state: S,
    /// Fires when the watermark reaches `window.max_timestamp()` (the event-time
    /// trigger's timer of the general path).
    armed: bool,
    /// The time of this session's entry in the timer queue (`i64::MAX`: none). Never
    /// later than [`Session::due`]; other queue entries for its key are stale.
    queued_at: Millis,
}

impl<S> Session<S> {
    /// When something happens to the session next: it fires (if armed) or is dropped.
    fn due(&self, allowed_lateness: Millis) -> Millis {
        let cleanup = event_cleanup_time(&self.window, allowed_lateness);
        if self.armed {
            self.window.max_timestamp().min(cleanup)
        } else {
            cleanup
        }
    }
}

/// Event-time session windows on the heap, as Flink's `MergingWindowSet`: per key its
/// kept sessions (pairwise apart: neither overlapping nor touching) ordered by start.
pub(crate) struct Sessions<K, S> {
    keys: FastHashMap<K, Vec<Session<S>>>,
    queue: TimerQueue<K, ()>,
    merged: Vec<Session<S>>,
    len: usize,
}

impl<K, S> fmt::Debug for Sessions<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("keys", &self.keys.len())
            .field("sessions", &self.len)
            .field("queue", &self.queue)
            .finish()
    }
}

/// Queues the session's next due time unless an entry at or before it is queued.
fn schedule<K, S>(queue: &mut TimerQueue<K, ()>, key: &K, s: &mut Session<S>, lateness: Millis)
where
    K: Clone,
{
    let due = s.due(lateness);
    if due != Millis::MAX && due < s.queued_at {
        queue.register(due, key.clone(), ());
        s.queued_at = due;
    }
}

impl<K, S> Sessions<K, S> {
    /// Number of sessions kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<K: Hash + Eq + Clone, S> Sessions<K, S> {
    pub(crate) fn new() -> Self {
        Sessions {
            keys: FastHashMap::default(),
            queue: TimerQueue::new(),
            merged: Vec::new(),
            len: 0,
        }
    }

    /// Adds a record whose own window is `w` at watermark `wm`: merged with the key's
    /// sessions it touches (extending one in place when it touches one), as the general
    /// path's `process_merging`. Returns whether the record's window was cleaned up
    /// already (it touched no kept session and `w`'s cleanup time is past).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add<T, F: WindowFunction<K, T, State = S>>(
        &mut self,
        key: &K,
        value: &T,
        w: TimeWindow,
        wm: Millis,
        lateness: Millis,
        func: &mut F,
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) -> bool {
        let list = match self.keys.get_mut(key) {
            Some(l) => l,
            None => {
                if event_cleanup_time(&w, lateness) <= wm {
                    return true;
                }
                self.keys.entry(key.clone()).or_default()
            }
        };
        // Sessions are apart and ordered by start, hence also by end: those touching
        // `w` are one run.
        // In-order input touches at most the newest session: try it before searching.
        let n = list.len();
        let first = match list.last() {
            Some(l) if l.window.end < w.start => n,
            Some(l) if n == 1 || list[n - 2].window.end < w.start => {
                if l.window.start <= w.end {
                    n - 1
                } else {
                    // Before the newest session: search.
                    list.partition_point(|s| s.window.end < w.start)
                }
            }
            _ => list.partition_point(|s| s.window.end < w.start),
        };
        let mut last = first;
        while last < list.len() && list[last].window.start <= w.end {
            last += 1;
        }
        let pos = match last - first {
            0 => {
                if event_cleanup_time(&w, lateness) <= wm {
                    if list.is_empty() {
                        self.keys.remove(key);
                    }
                    return true;
                }
                list.insert(
                    first,
                    Session {
                        window: w,
                        state: func.create(),
                        armed: false,
                        queued_at: Millis::MAX,
                    },
                );
                self.len += 1;
                first
            }
            1 if list[first].window.start <= w.start && w.end <= list[first].window.end => first,
            n => {
                // Merge `w` and the run into the run's first session, in start order.
                self.merged.extend(list.drain(first + 1..last));
                self.len -= n - 1;
                let s = &mut list[first];
                let mut cover = s.window.cover(&w);
                for m in self.merged.drain(..) {
                    cover = cover.cover(&m.window);
                    s.queued_at = s.queued_at.min(m.queued_at);
                    func.merge(&mut s.state, m.state);
                }
                s.window = cover;
                s.armed = cover.max_timestamp() > wm;
                first
            }
        };
        let s = &mut list[pos];
        func.add(&mut s.state, value);
        if s.window.max_timestamp() <= wm {
            func.emit(key, &s.window, &s.state, out);
        } else {
            s.armed = true;
        }
        schedule(&mut self.queue, key, s, lateness);
        false
    }

    /// Calls `f(key, window, state, armed)` for every session, `armed` when it is
    /// still to fire at its max timestamp (for snapshots).
    pub(crate) fn for_each_entry(&self, f: &mut dyn FnMut(&K, &TimeWindow, &S, bool)) {
        for (key, list) in &self.keys {
            for s in list {
                f(key, &s.window, &s.state, s.armed);
            }
        }
    }

    /// Puts restored sessions `(key, window, state, armed)` into an empty set and
    /// queues their timers.
    pub(crate) fn restore(&mut self, entries: Vec<(K, TimeWindow, S, bool)>, lateness: Millis) {
        for (key, window, state, armed) in entries {
            self.keys.entry(key).or_default().push(Session {
                window,
                state,
                armed,
                queued_at: Millis::MAX,
            });
            self.len += 1;
        }
        for (key, list) in self.keys.iter_mut() {
            list.sort_by_key(|s| (s.window.start, s.window.end));
            for s in list.iter_mut() {
                schedule(&mut self.queue, key, s, lateness);
            }
        }
    }

    /// Fires and drops sessions due at watermark `wm`, in time order.
    pub(crate) fn on_watermark<T, F: WindowFunction<K, T, State = S>>(
        &mut self,
        wm: Millis,
        lateness: Millis,
        func: &mut F,
        out: &mut Output<WindowOutput<F::Out, T>>,
    ) {
        while let Some((t, mut batch)) = self.queue.pop_due(wm) {
            for (key, ()) in batch.drain(..) {
                let Some(list) = self.keys.get_mut(&key) else {
                    continue; // stale
                };
                let mut i = 0;
                while i < list.len() {
                    let s = &mut list[i];
                    if s.queued_at != t {
                        i += 1;
                        continue;
                    }
                    s.queued_at = Millis::MAX;
                    if s.due(lateness) == t {
                        if s.armed && s.window.max_timestamp() == t {
                            s.armed = false;
                            func.emit(&key, &s.window, &s.state, out);
                        }
                        if event_cleanup_time(&s.window, lateness) == t {
                            list.remove(i);
                            self.len -= 1;
                            continue;
                        }
                    }
                    // Not due yet (the session grew) or fired and kept for lateness.
                    schedule(&mut self.queue, &key, s, lateness);
                    i += 1;
                }
                if list.is_empty() {
                    self.keys.remove(&key);
                }
            }
            self.queue.recycle(batch);
        }
    }
}
