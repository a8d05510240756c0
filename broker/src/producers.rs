//! The broker's idempotent producers: the producer ids it hands out, and a lock per
//! partition held across the sequence check ([`crate::idempotence`]) and the append
//! of a batch.
//!
//! The sequence state itself is the log's: each partition keeps it, stores the
//! producer id, epoch and base sequence with every batch, and rebuilds it when it is
//! opened (`brook_log::producer_state`), so a retry of a batch appended before a
//! broker restart is still answered with its offset and not appended again, as
//! Kafka's.
//!
//! Producer ids of idempotent producers are `start time (ms) * 2^10 + n`: unique
//! across broker restarts without writing anything (a restart one millisecond later
//! starts 1024 ids further on; a broker would have to give out more than a million
//! ids a second, on average over its life, to reach the next start's ids), and far
//! above the ids the log's transaction coordinator gives transactional ids (counted
//! from 0), so the two never meet. As the state of an id now outlives the broker
//! (for `producer.id.expiration.ms`), this relies on the clock not going back across
//! restarts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brook_core::time::SharedClock;

/// One partition's lock, shared by the connections producing to it.
type Shared = Arc<Mutex<()>>;

/// Producer ids and the partitions' locks, shared by every connection.
#[derive(Debug)]
pub struct Producers {
    next_id: AtomicI64,
    partitions: Mutex<Locks>,
}

/// The partitions' locks. An entry no request holds guards nothing and is dropped
/// when the map has grown ([`Locks::insert`]): otherwise every partition ever
/// produced to, deleted topics' too, would keep one for the broker's life.
#[derive(Debug)]
struct Locks {
    /// By topic, then partition (looked up by `&str`, without allocating).
    by_topic: HashMap<String, HashMap<u32, Shared>>,
    /// Entries in `by_topic`.
    len: usize,
    /// The next insert at this many entries prunes first.
    prune_at: usize,
}

/// The fewest entries the lock map prunes at: the partitions of a typical broker
/// never trigger it.
const MIN_PRUNE_AT: usize = 1024;

impl Locks {
    /// Adds a fresh lock for `topic`/`partition` (not in the map). Past `prune_at`
    /// entries it first drops those no request holds (only the map refers to them:
    /// the next request for one gets a fresh lock, and no request can hold the old
    /// one, since handing out a clone and pruning both happen under the map's lock),
    /// then sets the next bound to twice what is left, so pruning costs O(1) per
    /// insert, amortised, and the map stays within twice the locks in use (or
    /// [`MIN_PRUNE_AT`]).
    fn insert(&mut self, topic: &str, partition: u32) -> Shared {
        if self.len >= self.prune_at {
            self.by_topic.retain(|_, partitions| {
                partitions.retain(|_, lock| Arc::strong_count(lock) > 1);
                !partitions.is_empty()
            });
            self.len = self.by_topic.values().map(HashMap::len).sum();
            self.prune_at = (2 * self.len).max(MIN_PRUNE_AT);
        }
        self.len += 1;
        Arc::clone(
            self.by_topic
                .entry(topic.to_string())
                .or_default()
                .entry(partition)
                .or_default(),
        )
    }
}

impl Producers {
    /// Fresh state; producer ids start from the clock's time.
    pub fn new(clock: SharedClock) -> Self {
        let first = clock.now_ms().max(0).saturating_mul(1 << 10);
        Producers {
            next_id: AtomicI64::new(first),
            partitions: Mutex::new(Locks {
                by_topic: HashMap::new(),
                len: 0,
                prune_at: MIN_PRUNE_AT,
            }),
        }
    }

    /// A producer id no producer had before (InitProducerId without a transactional id).
    pub fn new_producer_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The lock of one partition's producers. Held across the check and the append of
    /// a batch, so two requests of one producer cannot both pass the same check; one
    /// lock per batch, not per record.
    pub fn partition(&self, topic: &str, partition: u32) -> Shared {
        let mut all = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = all.by_topic.get(topic).and_then(|t| t.get(&partition)) {
            return Arc::clone(p);
        }
        all.insert(topic, partition)
    }
}

/// Locks one partition's producers; the lock guards no data, so a poisoned lock only
/// means another task panicked elsewhere.
pub fn lock(p: &Mutex<()>) -> MutexGuard<'_, ()> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use brook_core::time::ManualClock;

    use super::*;

    #[test]
    fn producer_ids_are_distinct_and_above_the_logs() {
        let producers = Producers::new(ManualClock::new(1_700_000_000_000).shared());
        let a = producers.new_producer_id();
        let b = producers.new_producer_id();
        assert_ne!(a, b);
        assert!(a >= 1_700_000_000_000 << 10);
        // A broker started a millisecond later starts past the first one's first 1024.
        let later = Producers::new(ManualClock::new(1_700_000_000_001).shared());
        assert_eq!(later.new_producer_id(), a + 1024);
    }

    #[test]
    fn the_lock_map_keeps_only_held_locks_once_it_has_grown() {
        let producers = Producers::new(ManualClock::new(0).shared());
        let held = producers.partition("held", 0);
        // Topics produced to once each (and deleted since, say): nobody holds them.
        for i in 0..10 * MIN_PRUNE_AT {
            drop(producers.partition(&format!("t{i}"), 0));
        }
        let len = producers
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len;
        assert!(len <= MIN_PRUNE_AT, "{len} locks kept");
        // A lock in use is never replaced: its holders and newcomers share it.
        assert!(Arc::ptr_eq(&held, &producers.partition("held", 0)));
    }
}
