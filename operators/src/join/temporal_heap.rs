//! The temporal join's fast path for in-memory state (issue 21): per key, the waiting
//! left records and the versions of the right side as typed values ordered by time,
//! and one timer entry per key (at its next left record's time, or when the watermark
//! lets an old version go) instead of a bincode round trip of map state entries and a
//! timer per record.
//!
//! Same results as the general path ([`super::TemporalJoin`] in a keyed process
//! operator, semantics.md §3a): a left record at or behind the watermark is late; a
//! left record at `t` waits until the watermark reaches `t` and is then emitted at `t`
//! with the version of greatest timestamp `<= t` (of one timestamp, the last to
//! arrive), or `None` for a left outer join without one; versions are never late, and
//! those older than the newest version at or before the watermark are dropped. What
//! differs is only the order of results emitted together (key by key).
//!
//! Checkpoints hold what the general path would hold (see
//! [`HeapTemporalJoin::snapshot`]), so either path restores the other's.

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

use super::interval_heap::{insert_by_time, split_full_key};
use super::{Either, JoinOutput, JoinType, TJ_LEFT, TJ_VERSIONS};

/// One key's waiting left records and its versions.
struct KeyState<A, B> {
    /// `(timestamp, record)` ordered by time (arrival order within one time).
    lefts: VecDeque<(Millis, A)>,
    /// `(timestamp, version)` ordered by time, one per timestamp.
    versions: VecDeque<(Millis, B)>,
    /// The time of this key's entry in the timer queue (`None`: none); never later
    /// than [`KeyState::due`]. Other entries for the key are stale.
    queued_at: Option<Millis>,
}

impl<A, B> Default for KeyState<A, B> {
    fn default() -> Self {
        KeyState {
            lefts: VecDeque::new(),
            versions: VecDeque::new(),
            queued_at: None,
        }
    }
}

impl<A, B> KeyState<A, B> {
    /// The next watermark that changes something: the first waiting left record's
    /// time, or the second version's (from then on the first is never needed).
    fn due(&self) -> Option<Millis> {
        let l = self.lefts.front().map(|e| e.0);
        let v = self.versions.get(1).map(|e| e.0);
        match (l, v) {
            (Some(l), Some(v)) => Some(l.min(v)),
            (l, v) => l.or(v),
        }
    }

    /// Adds the version `b` valid from `tb`, replacing one of the same time (the
    /// general path's map state keeps the last put).
    fn add_version(&mut self, tb: Millis, b: B) {
        let at = self.versions.partition_point(|(t, _)| *t < tb);
        match self.versions.get_mut(at) {
            Some(v) if v.0 == tb => v.1 = b,
            _ => self.versions.insert(at, (tb, b)),
        }
    }

    /// Emits each left record at or before `wm` with the version valid at its time
    /// and drops the versions older than the newest at or before `wm`. Returns how
    /// many records (left records and versions) went.
    fn advance<O, F>(
        &mut self,
        wm: Millis,
        join_type: JoinType,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) -> usize
    where
        F: FnMut(&A, Option<&B>) -> O,
    {
        let before = self.lefts.len() + self.versions.len();
        while self.lefts.front().is_some_and(|(ta, _)| *ta <= wm) {
            // (`front` was `Some`.)
            let Some((ta, a)) = self.lefts.pop_front() else {
                break;
            };
            let valid = self.versions.partition_point(|(tv, _)| *tv <= ta);
            match (valid.checked_sub(1), join_type) {
                (Some(i), _) => {
                    let b = self.versions.get(i).map(|v| &v.1);
                    out.collect(JoinOutput::Joined(f(&a, b)), Some(ta));
                }
                (None, JoinType::LeftOuter) => {
                    out.collect(JoinOutput::Joined(f(&a, None)), Some(ta))
                }
                (None, JoinType::Inner) => {}
            }
        }
        let valid = self.versions.partition_point(|(tv, _)| *tv <= wm);
        if valid >= 2 {
            self.versions.drain(..valid - 1);
        }
        before - self.lefts.len() - self.versions.len()
    }
}

/// Queues the key's next due time unless an entry at or before it is queued.
fn schedule<K, A, B>(queue: &mut TimerQueue<K, ()>, key: K, ks: &mut KeyState<A, B>) {
    if let Some(due) = ks.due() {
        if ks.queued_at.is_none_or(|q| due < q) {
            queue.register(due, key, ());
            ks.queued_at = Some(due);
        }
    }
}

/// The temporal join's state on the heap: per key its left records and versions, and
/// a timer queue with (at least) one entry per key that has something due.
pub(super) struct HeapTemporalJoin<K, A, B> {
    keys: FastHashMap<K, KeyState<A, B>>,
    queue: TimerQueue<K, ()>,
    /// Left records and versions buffered.
    len: usize,
}

impl<K, A, B> std::fmt::Debug for HeapTemporalJoin<K, A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapTemporalJoin")
            .field("keys", &self.keys.len())
            .field("records", &self.len)
            .field("queue", &self.queue)
            .finish()
    }
}

impl<K, A, B> HeapTemporalJoin<K, A, B>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    A: Clone + Serialize + DeserializeOwned,
    B: Serialize + DeserializeOwned,
{
    pub(super) fn new() -> Self {
        HeapTemporalJoin {
            keys: FastHashMap::default(),
            queue: TimerQueue::new(),
            len: 0,
        }
    }

    /// Keys with state, and left records and versions buffered.
    pub(super) fn size(&self) -> (usize, usize) {
        (self.keys.len(), self.len)
    }

    /// Buffers a left record (not late) or a version of `key` at `ts`.
    pub(super) fn add(&mut self, key: K, ts: Millis, value: Either<A, B>) {
        let add = |ks: &mut KeyState<A, B>| match value {
            Either::Left(a) => {
                insert_by_time(&mut ks.lefts, (ts, a), |e| e.0);
                1
            }
            Either::Right(b) => {
                let n = ks.versions.len();
                ks.add_version(ts, b);
                ks.versions.len() - n
            }
        };
        match self.keys.get_mut(&key) {
            Some(ks) => {
                self.len += add(ks);
                schedule(&mut self.queue, key, ks);
            }
            None => {
                let mut ks = KeyState::default();
                self.len += add(&mut ks);
                schedule(&mut self.queue, key.clone(), &mut ks);
                self.keys.insert(key, ks);
            }
        }
    }

    /// Brings every key with something due up to the watermark `wm`.
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
                let Some(ks) = self.keys.get_mut(&key) else {
                    continue; // stale: the key was emptied
                };
                if ks.queued_at != Some(t) {
                    continue; // stale: an earlier entry for the key was queued
                }
                ks.queued_at = None;
                self.len -= ks.advance(wm, join_type, f, out);
                if ks.lefts.is_empty() && ks.versions.is_empty() {
                    self.keys.remove(&key);
                } else {
                    // Everything left is due after `wm`.
                    schedule(&mut self.queue, key, ks);
                }
            }
            self.queue.recycle(batch);
        }
    }

    /// Writes the state as the general path's keyed state would be: per key the map
    /// states `temporal-join-left` (time to the left records of that time, in arrival
    /// order) and `temporal-join-versions` (time to version), an event-time timer at
    /// each left record's time and one at the second version's time (when the first
    /// can go). The general path's `temporal-join-done` mark is left out: without it
    /// a key's first timer does the work, as after a fresh start.
    pub(super) fn snapshot(
        &self,
        max_parallelism: u32,
        key_groups: KeyGroupRange,
        snap: &mut StateSnapshot,
    ) -> OpResult {
        let mut store = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        let mut timers = TimerService::new();
        let ld = StateDescriptor::<(Millis, Vec<A>)>::new(TJ_LEFT);
        let vd = StateDescriptor::<(Millis, B)>::new(TJ_VERSIONS);
        let mut key_bytes = Vec::new();
        let mut same_time = Vec::new();
        for (key, ks) in &self.keys {
            let kg = key_group_for_key(key, max_parallelism);
            key_bytes.clear();
            bincode::serialize_into(&mut key_bytes, key).map_err(|e| {
                OperatorError::failed(format!("temporal join: cannot encode a key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            let mut timer = |timestamp| {
                timers.register(
                    TimeDomain::EventTime,
                    Timer {
                        timestamp,
                        key_group: kg,
                        key: key_bytes.clone(),
                        namespace: Vec::new(),
                    },
                )
            };
            let mut lefts = ks.lefts.iter().peekable();
            while let Some((ta, a)) = lefts.next() {
                same_time.push(a.clone());
                if lefts.peek().is_none_or(|(next, _)| next != ta) {
                    store
                        .map(&ld)
                        .put(ta, &same_time)
                        .map_err(OperatorError::other)?;
                    same_time.clear();
                    timer(*ta);
                }
            }
            for (tv, b) in &ks.versions {
                store.map(&vd).put(tv, b).map_err(OperatorError::other)?;
            }
            if let Some((tv, _)) = ks.versions.get(1) {
                timer(*tv);
            }
        }
        snapshot_keyed(store.backend_mut(), &timers, snap, key_groups).map_err(OperatorError::other)
    }

    /// Restores state written by either path (into an empty join, before any
    /// record). Timers are not read: each key's next due time follows from its state.
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
                "temporal join: a damaged key in restored state {name}"
            )));
        }
        let ld = StateDescriptor::<(Millis, Vec<A>)>::new(TJ_LEFT);
        let vd = StateDescriptor::<(Millis, B)>::new(TJ_VERSIONS);
        for (kg, key_bytes) in keys {
            let key: K = bincode::deserialize(&key_bytes).map_err(|e| {
                OperatorError::failed(format!("temporal join: cannot decode a restored key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            let mut ks = KeyState::default();
            let mut lefts = store.map(&ld).entries().map_err(OperatorError::other)?;
            lefts.sort_by_key(|(t, _)| *t);
            for (ta, as_) in lefts {
                ks.lefts.extend(as_.into_iter().map(|a| (ta, a)));
            }
            let mut versions = store.map(&vd).entries().map_err(OperatorError::other)?;
            versions.sort_by_key(|(t, _)| *t);
            ks.versions = versions.into();
            if ks.lefts.is_empty() && ks.versions.is_empty() {
                continue; // only the general path's done mark
            }
            self.len += ks.lefts.len() + ks.versions.len();
            schedule(&mut self.queue, key.clone(), &mut ks);
            self.keys.insert(key, ks);
        }
        Ok(())
    }
}
