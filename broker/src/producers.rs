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
//! Producer ids of idempotent producers are `start time (ms) * 2^10 + n`, far above
//! the ids the log's transaction coordinator gives transactional ids (counted from
//! 0), so the two never meet, and unique across broker restarts without writing
//! anything: a restart one millisecond later starts 1024 ids further on, so an
//! earlier run reaches a later start's ids only by giving out more than a million
//! ids a second on average over its life. That alone needs the clock not to go back
//! across restarts (an NTP step can). What matters is an id whose state the log
//! still holds (for `producer.id.expiration.ms`, across restarts): a new producer
//! given it would inherit its epoch and sequences, and its first batches would be
//! refused or taken for retries. Every such id is in some partition's producer state,
//! which the log rebuilds when it opens, so the broker starts above the highest of
//! them too ([`highest_in_log`], [`Producers::above`]): whatever the clock did, no id
//! with state in the log is handed out again. (An id given out but never used to
//! append leaves no state, and reusing it harms nothing.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brook_core::time::SharedClock;
use brook_log::Log;

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

    /// The same, but handing out only ids above `highest` (the highest producer id
    /// whose state the log holds, [`highest_in_log`]).
    #[must_use]
    pub fn above(self, highest: Option<i64>) -> Self {
        if let Some(h) = highest {
            self.next_id
                .fetch_max(h.saturating_add(1), Ordering::Relaxed);
        }
        self
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

/// The highest producer id whose state any partition of `log` holds (rebuilt when
/// the log opened), `None` when there is none. A partition that cannot be read (it is
/// being deleted) holds no state to protect.
pub fn highest_in_log(log: &Log) -> Option<i64> {
    log.topics()
        .iter()
        .filter_map(|name| log.topic(name).ok())
        .flat_map(|topic| topic.partitions())
        .filter_map(|p| p.producer_states().ok())
        .filter_map(|states| states.iter().map(|(id, _)| id).max())
        // Kafka's producer ids are >= 0; the log stores their bits.
        .filter_map(|id| i64::try_from(id).ok())
        .max()
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

    /// A broker restarted with its clock behind its earlier run's start (an NTP step)
    /// would hand out the ids of that run again; the log still holds the state of one
    /// of them, so the new run starts above it.
    #[test]
    fn a_restart_hands_out_no_id_whose_state_the_log_holds() {
        use brook_log::{LogOptions, ProducerMark, ProducerRecord, TopicConfig};

        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("t", 2, TopicConfig::default())
            .expect("create");
        let earlier = Producers::new(ManualClock::new(1_000).shared());
        let used = earlier.new_producer_id();
        let partition = log
            .topic("t")
            .and_then(|t| t.partition(1))
            .expect("partition");
        let mark = ProducerMark {
            producer_id: u64::try_from(used).expect("ids are positive"),
            epoch: 0,
            base_sequence: 0,
        };
        partition
            .append_with_producer(&[ProducerRecord::new("v")], mark)
            .expect("append");
        log.close().expect("close");
        drop(log);

        let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
        assert_eq!(highest_in_log(&log), Some(used));
        // The clock is back where the earlier run started.
        let restarted =
            Producers::new(ManualClock::new(1_000).shared()).above(highest_in_log(&log));
        assert!(restarted.new_producer_id() > used);
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
