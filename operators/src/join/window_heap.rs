//! The window join's fast path for in-memory state (issue 21): per key, its open
//! windows ordered by end, each with the typed records of both sides, and one timer
//! entry per key (at its earliest window's max timestamp) instead of a bincode round
//! trip of the window's buffers and a timer registration per record.
//!
//! Same results as the general path ([`super::WindowJoin`] in a keyed process
//! operator, semantics.md §3a): a record joins in each of its windows the watermark
//! has not passed (`max timestamp > watermark`), a record with none is late, a window
//! fires when the watermark reaches its max timestamp and emits every pair (and for a
//! left outer join each left record of a window without right records, with `None`)
//! at that max timestamp. What differs is only the order of results emitted together
//! (key by key in order of their timer entries).
//!
//! Checkpoints hold what the general path would hold (see
//! [`HeapWindowJoin::snapshot`]), so either path restores the other's.

use std::collections::{BTreeSet, VecDeque};
use std::hash::Hash;

use brook_core::checkpoint::{RestoredState, StateSnapshot};
use brook_core::keys::{key_group_for_key, KeyGroup, KeyGroupRange};
use brook_core::operator::{OpResult, OperatorError, Output};
use brook_core::time::Millis;
use brook_state::snapshot::{restore_keyed, snapshot_keyed};
use brook_state::{
    FastHashMap, KeyedStateStore, MemoryStateBackend, StateDescriptor, TimeDomain, Timer,
    TimerQueue, TimerService,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::interval_heap::split_full_key;
use super::{Either, JoinOutput, JoinType, WindowSides, WJ};
use crate::window::TimeWindow;

/// How many emptied windows (and keys) are kept for reuse: windows open and fire all
/// the time, and reusing their vectors saves allocations per window.
const SPARE: usize = 1024;

/// One window of one key: its records of each side in arrival order.
struct Pane<A, B> {
    window: TimeWindow,
    left: Vec<A>,
    right: Vec<B>,
}

/// One key's open windows, ordered by end (fixed-size windows: also by start).
struct KeyWindows<A, B> {
    panes: VecDeque<Pane<A, B>>,
    /// The time of this key's entry in the timer queue (`None`: none); never later
    /// than its first window's max timestamp. Other entries for the key are stale.
    queued_at: Option<Millis>,
}

impl<A, B> Default for KeyWindows<A, B> {
    fn default() -> Self {
        KeyWindows {
            panes: VecDeque::new(),
            queued_at: None,
        }
    }
}

/// Emptied panes and keys for reuse.
struct Spare<A, B> {
    panes: Vec<Pane<A, B>>,
    keys: Vec<KeyWindows<A, B>>,
}

impl<A, B> Spare<A, B> {
    fn pane(&mut self, window: TimeWindow) -> Pane<A, B> {
        match self.panes.pop() {
            Some(mut p) => {
                p.window = window;
                p
            }
            None => Pane {
                window,
                left: Vec::new(),
                right: Vec::new(),
            },
        }
    }

    fn give_pane(&mut self, mut p: Pane<A, B>) {
        if self.panes.len() < SPARE {
            p.left.clear();
            p.right.clear();
            self.panes.push(p);
        }
    }
}

impl<A: Clone, B: Clone> KeyWindows<A, B> {
    /// The pane of `w`, opened if new (records arrive mostly in time order: the
    /// search starts at the newest window).
    fn pane_mut(&mut self, w: TimeWindow, spare: &mut Spare<A, B>) -> &mut Pane<A, B> {
        let at = match self.panes.iter().rposition(|p| p.window.end <= w.end) {
            Some(i) if self.panes[i].window == w => i,
            Some(i) => {
                self.panes.insert(i + 1, spare.pane(w));
                i + 1
            }
            None => {
                self.panes.push_front(spare.pane(w));
                0
            }
        };
        &mut self.panes[at]
    }

    /// Adds `value` to each of `windows` (all open; not empty): a copy into each but
    /// the last, which takes the record.
    fn add(&mut self, windows: &[TimeWindow], value: Either<A, B>, spare: &mut Spare<A, B>) {
        let Some((last, rest)) = windows.split_last() else {
            return;
        };
        match value {
            Either::Left(a) => {
                for w in rest {
                    self.pane_mut(*w, spare).left.push(a.clone());
                }
                self.pane_mut(*last, spare).left.push(a);
            }
            Either::Right(b) => {
                for w in rest {
                    self.pane_mut(*w, spare).right.push(b.clone());
                }
                self.pane_mut(*last, spare).right.push(b);
            }
        }
    }
}

/// Emits the results of a fired pane at its max timestamp: every pair in arrival
/// order of the left, then the right records (as the general path), and for a left
/// outer join each left record with `None` when there is no right record.
fn fire<A, B, O, F>(
    pane: &Pane<A, B>,
    join_type: JoinType,
    f: &mut F,
    out: &mut Output<JoinOutput<O, A, B>>,
) where
    F: FnMut(&A, Option<&B>) -> O,
{
    let ts = Some(pane.window.max_timestamp());
    for a in &pane.left {
        for b in &pane.right {
            out.collect(JoinOutput::Joined(f(a, Some(b))), ts);
        }
        if pane.right.is_empty() && join_type == JoinType::LeftOuter {
            out.collect(JoinOutput::Joined(f(a, None)), ts);
        }
    }
}

/// Queues the key's next firing unless an entry at or before it is queued.
fn schedule<K, A, B>(queue: &mut TimerQueue<K, ()>, key: K, kw: &mut KeyWindows<A, B>) {
    if let Some(due) = kw.panes.front().map(|p| p.window.max_timestamp()) {
        if kw.queued_at.is_none_or(|q| due < q) {
            queue.register(due, key, ());
            kw.queued_at = Some(due);
        }
    }
}

/// The window join's state on the heap: per key its open windows, and a timer queue
/// with (at least) one entry per key at its earliest window's max timestamp.
pub(super) struct HeapWindowJoin<K, A, B> {
    keys: FastHashMap<K, KeyWindows<A, B>>,
    queue: TimerQueue<K, ()>,
    spare: Spare<A, B>,
    /// Records buffered (a record in two windows counts twice).
    len: usize,
}

impl<K, A, B> std::fmt::Debug for HeapWindowJoin<K, A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapWindowJoin")
            .field("keys", &self.keys.len())
            .field("records", &self.len)
            .field("queue", &self.queue)
            .finish()
    }
}

impl<K, A, B> HeapWindowJoin<K, A, B>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    A: Clone + Serialize + DeserializeOwned,
    B: Clone + Serialize + DeserializeOwned,
{
    pub(super) fn new() -> Self {
        HeapWindowJoin {
            keys: FastHashMap::default(),
            queue: TimerQueue::new(),
            spare: Spare {
                panes: Vec::new(),
                keys: Vec::new(),
            },
            len: 0,
        }
    }

    /// Keys with open windows, and records buffered.
    pub(super) fn size(&self) -> (usize, usize) {
        (self.keys.len(), self.len)
    }

    /// Buffers a record of `key` in each of `windows` (its windows the watermark has
    /// not passed; not empty).
    pub(super) fn add(&mut self, key: K, windows: &[TimeWindow], value: Either<A, B>) {
        self.len += windows.len();
        match self.keys.get_mut(&key) {
            Some(kw) => {
                kw.add(windows, value, &mut self.spare);
                schedule(&mut self.queue, key, kw);
            }
            None => {
                let mut kw = self.spare.keys.pop().unwrap_or_default();
                kw.add(windows, value, &mut self.spare);
                schedule(&mut self.queue, key.clone(), &mut kw);
                self.keys.insert(key, kw);
            }
        }
    }

    /// Fires every window the watermark `wm` reached (its max timestamp `<= wm`), key
    /// by key in order of their timer entries, and drops it.
    pub(super) fn on_watermark<O, F>(
        &mut self,
        wm: Millis,
        join_type: JoinType,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) where
        F: FnMut(&A, Option<&B>) -> O,
    {
        while let Some((t, mut batch)) = self.queue.pop_due(wm) {
            for (key, ()) in batch.drain(..) {
                let Some(kw) = self.keys.get_mut(&key) else {
                    continue; // stale: the key's windows all fired
                };
                if kw.queued_at != Some(t) {
                    continue; // stale: an earlier entry for the key was queued
                }
                kw.queued_at = None;
                while kw
                    .panes
                    .front()
                    .is_some_and(|p| p.window.max_timestamp() <= wm)
                {
                    // (`front` was `Some`.)
                    if let Some(pane) = kw.panes.pop_front() {
                        fire(&pane, join_type, f, out);
                        self.len -= pane.left.len() + pane.right.len();
                        self.spare.give_pane(pane);
                    }
                }
                if kw.panes.is_empty() {
                    if let Some(kw) = self.keys.remove(&key) {
                        if self.spare.keys.len() < SPARE {
                            self.spare.keys.push(kw);
                        }
                    }
                } else {
                    // Every window left ends after `wm`.
                    schedule(&mut self.queue, key, kw);
                }
            }
            self.queue.recycle(batch);
        }
    }

    /// Writes the state as the general path's keyed state would be: per key the map
    /// state `window-join` from `(start, end)` to the window's `(lefts, rights)`, and
    /// an event-time timer at each open window's max timestamp (the general path
    /// registers one per window and record, deduplicated, and a firing timer removes
    /// every window it reached, so its pending timers are exactly these).
    pub(super) fn snapshot(
        &mut self,
        max_parallelism: u32,
        key_groups: KeyGroupRange,
        snap: &mut StateSnapshot,
    ) -> OpResult {
        let mut store = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        let mut timers = TimerService::new();
        let d = StateDescriptor::<((Millis, Millis), WindowSides<A, B>)>::new(WJ);
        let mut key_bytes = Vec::new();
        for (key, kw) in &mut self.keys {
            let kg = key_group_for_key(key, max_parallelism);
            key_bytes.clear();
            bincode::serialize_into(&mut key_bytes, key).map_err(|e| {
                OperatorError::failed(format!("window join: cannot encode a key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            for pane in &mut kw.panes {
                // The records move into the tuple the general path writes and back,
                // without a copy.
                let sides = (
                    std::mem::take(&mut pane.left),
                    std::mem::take(&mut pane.right),
                );
                let w = pane.window;
                let put = store.map(&d).put(&(w.start, w.end), &sides);
                (pane.left, pane.right) = sides;
                put.map_err(OperatorError::other)?;
                timers.register(
                    TimeDomain::EventTime,
                    Timer {
                        timestamp: w.max_timestamp(),
                        key_group: kg,
                        key: key_bytes.clone(),
                        namespace: Vec::new(),
                    },
                );
            }
        }
        snapshot_keyed(store.backend_mut(), &timers, snap, key_groups).map_err(OperatorError::other)
    }

    /// Restores state written by either path (into an empty join, before any
    /// record). Timers are not read: each key's next firing follows from its windows.
    pub(super) fn restore(&mut self, state: &RestoredState) -> OpResult {
        let mut store = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        let mut timers = TimerService::new();
        restore_keyed(state, store.backend_mut(), &mut timers).map_err(OperatorError::other)?;
        let mut keys: BTreeSet<(KeyGroup, Vec<u8>)> = BTreeSet::new();
        let mut bad = None;
        store
            .backend()
            .for_each_entry(&mut |name, full_key, _| match split_full_key(full_key) {
                Some(k) => {
                    keys.insert(k);
                }
                None => bad = Some(name.to_string()),
            });
        if let Some(name) = bad {
            return Err(OperatorError::failed(format!(
                "window join: a damaged key in restored state {name}"
            )));
        }
        let d = StateDescriptor::<((Millis, Millis), WindowSides<A, B>)>::new(WJ);
        for (kg, key_bytes) in keys {
            let key: K = bincode::deserialize(&key_bytes).map_err(|e| {
                OperatorError::failed(format!("window join: cannot decode a restored key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            let mut windows = store.map(&d).entries().map_err(OperatorError::other)?;
            windows.sort_by_key(|((start, end), _)| (*end, *start));
            let mut kw = KeyWindows::default();
            for ((start, end), (left, right)) in windows {
                self.len += left.len() + right.len();
                kw.panes.push_back(Pane {
                    window: TimeWindow::new(start, end),
                    left,
                    right,
                });
            }
            if kw.panes.is_empty() {
                continue;
            }
            schedule(&mut self.queue, key.clone(), &mut kw);
            self.keys.insert(key, kw);
        }
        Ok(())
    }
}
