//! A typed timer queue: `(time, key, namespace)` entries popped in time order.
//!
//! Unlike [`crate::TimerService`] (encoded keys, deduplicated, exact deletion), a
//! [`TimerQueue`] keeps typed keys and does no bookkeeping per entry: registering twice
//! queues twice and there is no delete. Its owner decides, when an entry pops, whether
//! the timer is still wanted (lazy deletion), as the window operator does by checking
//! that the window still exists and still holds the timer.

use std::collections::BTreeMap;
use std::fmt;

use brook_core::time::Millis;

/// Timers of one time domain, grouped by time (ms): `BTreeMap<time, Vec<(key, ns)>>`.
pub struct TimerQueue<K, N> {
    by_time: BTreeMap<Millis, Vec<(K, N)>>,
    len: usize,
    spare: Vec<Vec<(K, N)>>,
}

impl<K, N> fmt::Debug for TimerQueue<K, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerQueue")
            .field("len", &self.len)
            .field("next", &self.peek_time())
            .finish()
    }
}

impl<K, N> Default for TimerQueue<K, N> {
    fn default() -> Self {
        TimerQueue {
            by_time: BTreeMap::new(),
            len: 0,
            spare: Vec::new(),
        }
    }
}

impl<K, N> TimerQueue<K, N> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a timer at `time` (ms) for `key` and `ns`. Entries of one time pop in
    /// the order they were registered.
    pub fn register(&mut self, time: Millis, key: K, ns: N) {
        let spare = &mut self.spare;
        self.by_time
            .entry(time)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push((key, ns));
        self.len += 1;
    }

    /// Removes and returns all entries of the earliest time, if that time is `<= time`.
    /// Call repeatedly: entries registered while handling a batch (also at earlier
    /// times) come out in later calls. Hand the emptied vector back with
    /// [`TimerQueue::recycle`] to reuse its memory.
    pub fn pop_due(&mut self, time: Millis) -> Option<(Millis, Vec<(K, N)>)> {
        let first = self.by_time.first_key_value().map(|(t, _)| *t)?;
        if first > time {
            return None;
        }
        let (t, entries) = self.by_time.pop_first()?;
        self.len -= entries.len();
        Some((t, entries))
    }

    /// Gives back a vector returned by [`TimerQueue::pop_due`] (its entries are dropped).
    pub fn recycle(&mut self, mut v: Vec<(K, N)>) {
        v.clear();
        if self.spare.len() < 16 {
            self.spare.push(v);
        }
    }

    /// The earliest queued time, for scheduling a processing-time callback.
    pub fn peek_time(&self) -> Option<Millis> {
        self.by_time.first_key_value().map(|(t, _)| *t)
    }

    /// Number of queued entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_registration_order() {
        let mut q = TimerQueue::new();
        q.register(30, "a", 1);
        q.register(10, "b", 2);
        q.register(10, "c", 3);
        q.register(-5, "d", 4);
        assert_eq!(q.len(), 4);
        assert_eq!(q.peek_time(), Some(-5));
        assert_eq!(q.pop_due(-6), None);
        assert_eq!(q.pop_due(20), Some((-5, vec![("d", 4)])));
        let (t, v) = q.pop_due(20).unwrap();
        assert_eq!((t, v.as_slice()), (10, &[("b", 2), ("c", 3)][..]));
        q.recycle(v);
        assert_eq!(q.pop_due(20), None);
        q.register(15, "e", 5);
        assert_eq!(q.pop_due(i64::MAX), Some((15, vec![("e", 5)])));
        assert_eq!(q.pop_due(i64::MAX), Some((30, vec![("a", 1)])));
        assert!(q.is_empty());
    }
}
