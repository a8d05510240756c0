//! The interval join's fast path for in-memory state (issue 21): per key, typed
//! buffers of both sides ordered by time, and one timer entry per key (at the key's
//! next cleanup time) instead of one timer per record, as the window operator's
//! session fast path keeps (`window/fast.rs`).
//!
//! Same results as the general path ([`super::IntervalJoin`] in a keyed process
//! operator, semantics.md §3a): bounds inclusive, a record at or behind the watermark
//! is late, a left record at `t` is kept until the watermark reaches `t + upper`, a
//! right one until it reaches `t - lower`, an unmatched left record of a left outer
//! join is emitted at `t + upper`. What differs is only the order of results emitted
//! together: a record's matches come in time order of the other side (the general
//! path: arrival order), and cleanup at one watermark goes key by key.
//!
//! Checkpoints hold what the general path would hold (see
//! [`HeapIntervalJoin::snapshot`]), so either path restores the other's.

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

use super::{JoinOutput, JoinType, IJ_LEFT, IJ_RIGHT};

/// A key's buffered left records `(timestamp, record, matched)`, ordered by time.
/// Encoded by bincode as the general path's `Vec` (both are a length and the items).
type Lefts<A> = VecDeque<(Millis, A, bool)>;
/// A key's buffered right records `(timestamp, record)`, ordered by time.
type Rights<B> = VecDeque<(Millis, B)>;

/// How many emptied buffers are kept for new keys: keys come and go as the watermark
/// passes them, and reusing their memory saves an allocation per new key.
const SPARE_BUFFERS: usize = 1024;

/// One key's buffers.
struct Buffers<A, B> {
    left: Lefts<A>,
    right: Rights<B>,
    /// The time of this key's entry in the timer queue (`None`: none); never later
    /// than [`Buffers::due`]. Other queue entries for the key are stale.
    queued_at: Option<Millis>,
}

impl<A, B> Default for Buffers<A, B> {
    fn default() -> Self {
        Buffers {
            left: VecDeque::new(),
            right: VecDeque::new(),
            queued_at: None,
        }
    }
}

/// The interval's bounds (ms) and join type.
#[derive(Debug, Clone, Copy)]
pub(super) struct Interval {
    pub(super) lower: Millis,
    pub(super) upper: Millis,
    pub(super) join_type: JoinType,
}

impl Interval {
    /// When the watermark has passed every match of a left record at `ta`.
    fn left_expiry(&self, ta: Millis) -> Millis {
        ta.saturating_add(self.upper)
    }

    /// When the watermark has passed every match of a right record at `tb`.
    fn right_expiry(&self, tb: Millis) -> Millis {
        tb.saturating_sub(self.lower)
    }
}

impl<A, B> Buffers<A, B> {
    /// The next time the watermark removes something (the buffers are ordered by time
    /// and the expiries grow with it), `None` when empty.
    fn due(&self, iv: &Interval) -> Option<Millis> {
        let l = self.left.front().map(|e| iv.left_expiry(e.0));
        let r = self.right.front().map(|e| iv.right_expiry(e.0));
        match (l, r) {
            (Some(l), Some(r)) => Some(l.min(r)),
            (l, r) => l.or(r),
        }
    }

    fn is_empty(&self) -> bool {
        self.left.is_empty() && self.right.is_empty()
    }

    /// Joins left `a` at `ta` with the buffered right records in
    /// `[ta + lower, ta + upper]` and buffers it.
    fn add_left<O, F>(
        &mut self,
        ta: Millis,
        a: A,
        iv: &Interval,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) where
        F: FnMut(&A, Option<&B>) -> O,
    {
        let (lo, hi) = (ta.saturating_add(iv.lower), ta.saturating_add(iv.upper));
        let start = self.right.partition_point(|(tb, _)| *tb < lo);
        let mut matched = false;
        for (tb, b) in self.right.range(start..) {
            if *tb > hi {
                break;
            }
            out.collect(JoinOutput::Joined(f(&a, Some(b))), Some(ta.max(*tb)));
            matched = true;
        }
        insert_by_time(&mut self.left, (ta, a, matched), |e| e.0);
    }

    /// Joins right `b` at `tb` with the buffered left records `a` at `ta` with
    /// `ta + lower <= tb <= ta + upper` and buffers it.
    fn add_right<O, F>(
        &mut self,
        tb: Millis,
        b: B,
        iv: &Interval,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) where
        F: FnMut(&A, Option<&B>) -> O,
    {
        // Both conditions are monotone in `ta` (saturating as the general path's).
        let start = self
            .left
            .partition_point(|(ta, _, _)| ta.saturating_add(iv.upper) < tb);
        for (ta, a, m) in self.left.range_mut(start..) {
            if ta.saturating_add(iv.lower) > tb {
                break;
            }
            out.collect(JoinOutput::Joined(f(a, Some(&b))), Some(tb.max(*ta)));
            *m = true;
        }
        insert_by_time(&mut self.right, (tb, b), |e| e.0);
    }

    /// Drops what the watermark `wm` passed, emitting each unmatched left record of a
    /// left outer join at its expiry.
    fn clean<O, F>(
        &mut self,
        wm: Millis,
        iv: &Interval,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) -> usize
    where
        F: FnMut(&A, Option<&B>) -> O,
    {
        let before = self.left.len() + self.right.len();
        while let Some((ta, _, _)) = self.left.front() {
            let expiry = iv.left_expiry(*ta);
            if expiry > wm {
                break;
            }
            // (`front` was `Some`.)
            if let Some((_, a, matched)) = self.left.pop_front() {
                if !matched && iv.join_type == JoinType::LeftOuter {
                    out.collect(JoinOutput::Joined(f(&a, None)), Some(expiry));
                }
            }
        }
        while self
            .right
            .front()
            .is_some_and(|(tb, _)| iv.right_expiry(*tb) <= wm)
        {
            self.right.pop_front();
        }
        before - self.left.len() - self.right.len()
    }
}

/// Inserts `e` after every entry of the same or an earlier time (in-order input:
/// at the back).
pub(super) fn insert_by_time<T>(q: &mut VecDeque<T>, e: T, time: impl Fn(&T) -> Millis) {
    let t = time(&e);
    if q.back().is_none_or(|b| time(b) <= t) {
        q.push_back(e);
    } else {
        let at = q.partition_point(|x| time(x) <= t);
        q.insert(at, e);
    }
}

/// Queues the key's next cleanup unless an entry at or before it is queued.
fn schedule<K, A, B>(
    queue: &mut TimerQueue<K, ()>,
    key: K,
    buf: &mut Buffers<A, B>,
    iv: &Interval,
) {
    if let Some(due) = buf.due(iv) {
        if buf.queued_at.is_none_or(|q| due < q) {
            queue.register(due, key, ());
            buf.queued_at = Some(due);
        }
    }
}

/// The interval join's state on the heap: per key its buffers, and a timer queue with
/// (at least) one entry per key at its next cleanup time.
pub(super) struct HeapIntervalJoin<K, A, B> {
    keys: FastHashMap<K, Buffers<A, B>>,
    queue: TimerQueue<K, ()>,
    spare: Vec<Buffers<A, B>>,
    /// Records buffered (both sides).
    len: usize,
}

impl<K, A, B> std::fmt::Debug for HeapIntervalJoin<K, A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapIntervalJoin")
            .field("keys", &self.keys.len())
            .field("records", &self.len)
            .field("queue", &self.queue)
            .finish()
    }
}

impl<K, A, B> HeapIntervalJoin<K, A, B>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    A: Serialize + DeserializeOwned,
    B: Serialize + DeserializeOwned,
{
    pub(super) fn new() -> Self {
        HeapIntervalJoin {
            keys: FastHashMap::default(),
            queue: TimerQueue::new(),
            spare: Vec::new(),
            len: 0,
        }
    }

    /// Keys with buffered records, and records buffered.
    pub(super) fn size(&self) -> (usize, usize) {
        (self.keys.len(), self.len)
    }

    /// Joins a record (not late) of `key` at `ts` with the other side's buffered records
    /// and buffers it.
    pub(super) fn add<O, F>(
        &mut self,
        key: K,
        ts: Millis,
        value: super::Either<A, B>,
        iv: &Interval,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) where
        F: FnMut(&A, Option<&B>) -> O,
    {
        let add = |buf: &mut Buffers<A, B>, f: &mut F, out: &mut Output<_>| match value {
            super::Either::Left(a) => buf.add_left(ts, a, iv, f, out),
            super::Either::Right(b) => buf.add_right(ts, b, iv, f, out),
        };
        self.len += 1;
        match self.keys.get_mut(&key) {
            Some(buf) => {
                add(buf, f, out);
                schedule(&mut self.queue, key, buf, iv);
            }
            None => {
                let mut buf = self.spare.pop().unwrap_or_default();
                add(&mut buf, f, out);
                schedule(&mut self.queue, key.clone(), &mut buf, iv);
                self.keys.insert(key, buf);
            }
        }
    }

    /// Drops everything the watermark `wm` passed (emitting unmatched left records of
    /// a left outer join), key by key in order of their cleanup times.
    pub(super) fn on_watermark<O, F>(
        &mut self,
        wm: Millis,
        iv: &Interval,
        f: &mut F,
        out: &mut Output<JoinOutput<O, A, B>>,
    ) where
        F: FnMut(&A, Option<&B>) -> O,
    {
        while let Some((t, mut batch)) = self.queue.pop_due(wm) {
            for (key, ()) in batch.drain(..) {
                let Some(buf) = self.keys.get_mut(&key) else {
                    continue; // stale: the key was emptied
                };
                if buf.queued_at != Some(t) {
                    continue; // stale: a later entry for the key was queued
                }
                buf.queued_at = None;
                self.len -= buf.clean(wm, iv, f, out);
                if buf.is_empty() {
                    if let Some(buf) = self.keys.remove(&key) {
                        if self.spare.len() < SPARE_BUFFERS {
                            self.spare.push(buf);
                        }
                    }
                } else {
                    // Everything left is due after `wm`.
                    schedule(&mut self.queue, key, buf, iv);
                }
            }
            self.queue.recycle(batch);
        }
    }

    /// Writes the state as the general path's keyed state would be: per key the
    /// value states `interval-join-left` (a `Vec` of `(ts, record, matched)`) and
    /// `interval-join-right` (`(ts, record)`), and an event-time timer at each buffered
    /// record's expiry (the general path registers one per record and a firing timer
    /// removes every record expiring by then, so its pending timers are exactly these).
    pub(super) fn snapshot(
        &self,
        iv: &Interval,
        max_parallelism: u32,
        key_groups: KeyGroupRange,
        snap: &mut StateSnapshot,
    ) -> OpResult {
        let mut store = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        let mut timers = TimerService::new();
        let left_d = StateDescriptor::<Lefts<A>>::new(IJ_LEFT);
        let right_d = StateDescriptor::<Rights<B>>::new(IJ_RIGHT);
        let mut key_bytes = Vec::new();
        for (key, buf) in &self.keys {
            let kg = key_group_for_key(key, max_parallelism);
            key_bytes.clear();
            bincode::serialize_into(&mut key_bytes, key).map_err(|e| {
                OperatorError::failed(format!("interval join: cannot encode a key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            if !buf.left.is_empty() {
                store
                    .value(&left_d)
                    .set(&buf.left)
                    .map_err(OperatorError::other)?;
            }
            if !buf.right.is_empty() {
                store
                    .value(&right_d)
                    .set(&buf.right)
                    .map_err(OperatorError::other)?;
            }
            let expiries = buf
                .left
                .iter()
                .map(|e| iv.left_expiry(e.0))
                .chain(buf.right.iter().map(|e| iv.right_expiry(e.0)));
            for timestamp in expiries {
                timers.register(
                    TimeDomain::EventTime,
                    Timer {
                        timestamp,
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
    /// record). Timers are not read: each key's next cleanup follows from its buffers.
    pub(super) fn restore(&mut self, iv: &Interval, state: &RestoredState) -> OpResult {
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
                "interval join: a damaged key in restored state {name}"
            )));
        }
        let left_d = StateDescriptor::<Lefts<A>>::new(IJ_LEFT);
        let right_d = StateDescriptor::<Rights<B>>::new(IJ_RIGHT);
        for (kg, key_bytes) in keys {
            let key: K = bincode::deserialize(&key_bytes).map_err(|e| {
                OperatorError::failed(format!("interval join: cannot decode a restored key: {e}"))
            })?;
            store.set_current_key(kg, &key_bytes);
            let left = store.value(&left_d).get().map_err(OperatorError::other)?;
            let right = store.value(&right_d).get().map_err(OperatorError::other)?;
            let mut buf = Buffers::default();
            // The general path keeps arrival order; a stable sort keeps it per time.
            if let Some(mut l) = left {
                l.make_contiguous().sort_by_key(|e| e.0);
                buf.left = l;
            }
            if let Some(mut r) = right {
                r.make_contiguous().sort_by_key(|e| e.0);
                buf.right = r;
            }
            if buf.is_empty() {
                continue;
            }
            self.len += buf.left.len() + buf.right.len();
            schedule(&mut self.queue, key.clone(), &mut buf, iv);
            self.keys.insert(key, buf);
        }
        Ok(())
    }
}

/// `(key group, encoded key)` of a backend entry's full key (`brook_state::backend::
/// compose_key`: key group u16 BE | key length u32 BE | key | namespace ...).
pub(super) fn split_full_key(full: &[u8]) -> Option<(KeyGroup, Vec<u8>)> {
    let (kg, rest) = full.split_first_chunk::<2>()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    let key = rest.get(..len)?;
    Some((KeyGroup::from(u16::from_be_bytes(*kg)), key.to_vec()))
}
