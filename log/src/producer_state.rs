//! The idempotent and transactional producers' state of one partition, as Kafka's
//! `ProducerStateManager` keeps it: per producer id, its epoch and the first and last
//! sequence and first offset of its last [`PRODUCER_WINDOW`] batches. A pure state
//! machine: batches in ([`ProducerStates::appended`]), state out; the partition keeps
//! it next to its data, updates it in the same append that writes a producer's batch
//! (format version 3, [`ProducerMark`]), snapshots it when a segment rolls
//! ([`crate::producer_snapshot`]) and rebuilds it on open from the latest snapshot and
//! the batches after it.
//!
//! The decisions taken on it (is a batch a retry, a gap, a fenced epoch) are the
//! broker's (`brook-broker`'s `idempotence`).

use std::collections::{HashMap, VecDeque};

use crate::format::ProducerMark;

/// How many batches per producer and partition are remembered for duplicate detection
/// (Kafka's `NUM_BATCHES_TO_RETAIN`, and the clients' limit of
/// `max.in.flight.requests.per.connection` for idempotence).
pub const PRODUCER_WINDOW: usize = 5;

/// How long a producer's state is kept after its last append (ms): Kafka's
/// `producer.id.expiration.ms` default, one day.
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 24 * 60 * 60 * 1000;

/// How often expired producers are looked for (ms).
const EXPIRY_SCAN_MS: i64 = 60_000;

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceRange {
    /// The sequence of its first record.
    pub first_sequence: i32,
    /// The sequence of its last record.
    pub last_sequence: i32,
    /// The offset of its first record.
    pub first_offset: u64,
}

/// What a partition remembers of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The epoch of its last batch.
    pub epoch: u16,
    /// Its last batches of that epoch, oldest first, at most [`PRODUCER_WINDOW`].
    pub batches: VecDeque<SequenceRange>,
    /// When it last appended here (ms): the clock's time of the append, or for a
    /// batch found by the rebuild after the latest snapshot, the time of the rebuild
    /// (the log keeps record time, not append time; this keeps the state at least
    /// [`PRODUCER_ID_EXPIRATION_MS`] after the restart, never less).
    pub last_append_ms: i64,
}

/// The producers' state of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<u64, ProducerEntry>,
    last_scan_ms: i64,
}

impl ProducerStates {
    /// What is remembered of `producer_id`, if anything.
    pub fn get(&self, producer_id: u64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Producers with state.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer has state.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The producers and their state, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// Records that a batch of `record_count` records (at least one) of producer
    /// `mark` was appended at `first_offset` at `now_ms`: a newer epoch forgets the
    /// older epoch's batches; the oldest of more than [`PRODUCER_WINDOW`] is forgotten.
    /// Producers idle for [`PRODUCER_ID_EXPIRATION_MS`] are forgotten (looked for once
    /// a minute).
    pub fn appended(
        &mut self,
        mark: &ProducerMark,
        record_count: u32,
        first_offset: u64,
        now_ms: i64,
    ) {
        let entry = self
            .producers
            .entry(mark.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: mark.epoch,
                batches: VecDeque::with_capacity(PRODUCER_WINDOW),
                last_append_ms: now_ms,
            });
        if mark.epoch != entry.epoch {
            entry.epoch = mark.epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == PRODUCER_WINDOW {
            entry.batches.pop_front();
        }
        entry.batches.push_back(SequenceRange {
            first_sequence: mark.base_sequence,
            last_sequence: mark.last_sequence(record_count),
            first_offset,
        });
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        if now_ms - self.last_scan_ms >= EXPIRY_SCAN_MS {
            self.expire(now_ms);
        }
    }

    /// Forgets the producers idle for more than [`PRODUCER_ID_EXPIRATION_MS`] at
    /// `now_ms`.
    pub fn expire(&mut self, now_ms: i64) {
        self.last_scan_ms = now_ms;
        self.producers
            .retain(|_, e| now_ms - e.last_append_ms <= PRODUCER_ID_EXPIRATION_MS);
    }

    /// Puts back one producer's state read from a snapshot.
    pub(crate) fn insert(&mut self, producer_id: u64, entry: ProducerEntry) {
        self.producers.insert(producer_id, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(producer_id: u64, epoch: u16, base_sequence: i32) -> ProducerMark {
        ProducerMark {
            producer_id,
            epoch,
            base_sequence,
        }
    }

    fn ranges(s: &ProducerStates, id: u64) -> Vec<(i32, i32, u64)> {
        s.get(id)
            .map(|e| {
                e.batches
                    .iter()
                    .map(|b| (b.first_sequence, b.last_sequence, b.first_offset))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn keeps_the_last_five_batches_of_the_current_epoch() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.appended(&mark(7, 0, i * 2), 2, 100 + i as u64 * 2, 0);
        }
        assert_eq!(ranges(&s, 7).len(), PRODUCER_WINDOW);
        assert_eq!(ranges(&s, 7)[0], (4, 5, 104));
        assert_eq!(ranges(&s, 7)[4], (12, 13, 112));
        // A newer epoch starts over.
        s.appended(&mark(7, 1, 0), 1, 200, 0);
        assert_eq!(ranges(&s, 7), vec![(0, 0, 200)]);
        assert_eq!(s.get(7).map(|e| e.epoch), Some(1));
    }

    #[test]
    fn last_sequences_wrap_after_i32_max() {
        let mut s = ProducerStates::default();
        s.appended(&mark(1, 0, i32::MAX - 1), 4, 0, 0);
        assert_eq!(ranges(&s, 1), vec![(i32::MAX - 1, 1, 0)]);
    }

    #[test]
    fn idle_producers_expire_after_a_day() {
        let mut s = ProducerStates::default();
        s.appended(&mark(7, 0, 0), 1, 0, 0);
        s.appended(
            &mark(8, 0, 0),
            1,
            1,
            PRODUCER_ID_EXPIRATION_MS + EXPIRY_SCAN_MS,
        );
        assert!(s.get(7).is_none());
        assert_eq!(s.len(), 1);
    }
}
