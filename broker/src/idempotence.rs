//! Sequence checks of idempotent producers, as Kafka's broker makes them (KIP-98,
//! `ProducerStateManager`): a pure state machine per partition, batch in, decision out.
//!
//! Every batch of an idempotent (or transactional) producer carries its producer id,
//! epoch and the sequence number of its first record; the records of a batch have
//! consecutive sequences, wrapping from `i32::MAX` to 0. Per (producer id, partition)
//! the broker remembers the epoch and the last [`WINDOW`] batches appended (first and
//! last sequence, first offset) and decides:
//!
//! - a producer id it has no state for: append, whatever the sequence (Kafka accepts
//!   any sequence when it has no entry, e.g. after its state expired);
//! - an epoch below the remembered one: [`Decision::StaleEpoch`] (Kafka's
//!   INVALID_PRODUCER_EPOCH), nothing appended;
//! - a newer epoch: append if the sequence starts again at 0, else
//!   [`Decision::OutOfOrder`];
//! - the same epoch: a batch equal (first and last sequence) to one of the last
//!   [`WINDOW`] is a retry, answered with that batch's first offset and not appended
//!   again ([`Decision::Duplicate`], Kafka 2.x+: success, not DUPLICATE_SEQUENCE_NUMBER);
//!   the sequence after the last batch's is appended; anything else is a gap or an old
//!   batch out of the window: [`Decision::OutOfOrder`] (OUT_OF_ORDER_SEQUENCE_NUMBER).
//!
//! An entry is forgotten after [`EXPIRATION_MS`] without an append (Kafka's
//! `producer.id.expiration.ms`, one day).

use std::collections::{HashMap, VecDeque};

/// How many batches per producer and partition are remembered for duplicate detection
/// (Kafka's `NUM_BATCHES_TO_RETAIN`, and librdkafka's and the Java client's limit of
/// `max.in.flight.requests.per.connection` for idempotence).
pub const WINDOW: usize = 5;

/// How long a producer's state is kept after its last append (ms): Kafka's
/// `producer.id.expiration.ms` default.
pub const EXPIRATION_MS: i64 = 24 * 60 * 60 * 1000;

/// How often expired entries are looked for (ms).
const EXPIRY_SCAN_MS: i64 = 60_000;

/// The producer fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    /// The producer id (>= 0).
    pub producer_id: i64,
    /// The producer epoch.
    pub epoch: i16,
    /// The sequence of the batch's first record.
    pub first_sequence: i32,
    /// The sequence of its last record.
    pub last_sequence: i32,
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Append it, then report the offset with [`PartitionProducers::appended`].
    Append,
    /// A retry of a batch appended before: answer its first offset, append nothing.
    Duplicate {
        /// The first offset of the original batch.
        base_offset: u64,
    },
    /// A gap, or an old batch no longer remembered (OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfOrder {
        /// The sequence the broker expects next.
        expected: i32,
    },
    /// The batch's epoch is older than the producer's (INVALID_PRODUCER_EPOCH).
    StaleEpoch {
        /// The producer's current epoch.
        current: i16,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    epoch: i16,
    /// `(first sequence, last sequence, first offset)`, oldest first.
    batches: VecDeque<(i32, i32, u64)>,
    last_append_ms: i64,
}

/// The idempotent producers' state of one partition.
#[derive(Debug, Default)]
pub struct PartitionProducers {
    producers: HashMap<i64, Entry>,
    last_scan_ms: i64,
}

/// The sequence after `s` (Kafka's sequences wrap to 0 after `i32::MAX`).
fn next(s: i32) -> i32 {
    if s == i32::MAX {
        0
    } else {
        s + 1
    }
}

impl PartitionProducers {
    /// Decides what to do with `batch`; changes nothing.
    pub fn check(&self, batch: &BatchMeta) -> Decision {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            return Decision::Append;
        };
        if batch.epoch < entry.epoch {
            return Decision::StaleEpoch {
                current: entry.epoch,
            };
        }
        if batch.epoch > entry.epoch {
            return if batch.first_sequence == 0 {
                Decision::Append
            } else {
                Decision::OutOfOrder { expected: 0 }
            };
        }
        if let Some(&(_, _, base_offset)) = entry
            .batches
            .iter()
            .find(|(first, last, _)| *first == batch.first_sequence && *last == batch.last_sequence)
        {
            return Decision::Duplicate { base_offset };
        }
        let expected = entry.batches.back().map_or(0, |&(_, last, _)| next(last));
        if batch.first_sequence == expected {
            Decision::Append
        } else {
            Decision::OutOfOrder { expected }
        }
    }

    /// Records that `batch` was appended at `base_offset` at `now_ms`; forgets
    /// producers idle for [`EXPIRATION_MS`] (looked for once a minute).
    pub fn appended(&mut self, batch: &BatchMeta, base_offset: u64, now_ms: i64) {
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| Entry {
                epoch: batch.epoch,
                batches: VecDeque::with_capacity(WINDOW),
                last_append_ms: now_ms,
            });
        if batch.epoch != entry.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == WINDOW {
            entry.batches.pop_front();
        }
        entry
            .batches
            .push_back((batch.first_sequence, batch.last_sequence, base_offset));
        entry.last_append_ms = now_ms;
        if now_ms - self.last_scan_ms >= EXPIRY_SCAN_MS {
            self.last_scan_ms = now_ms;
            self.producers
                .retain(|_, e| now_ms - e.last_append_ms <= EXPIRATION_MS);
        }
    }

    /// Producers with state here.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer has state here.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(epoch: i16, first: i32, last: i32) -> BatchMeta {
        BatchMeta {
            producer_id: 7,
            epoch,
            first_sequence: first,
            last_sequence: last,
        }
    }

    /// Producer 7 at epoch 1 appended batches 0..=2 (offset 100), 3..=4 (103), 5..=5 (105).
    fn state() -> PartitionProducers {
        let mut s = PartitionProducers::default();
        for (b, offset) in [
            (batch(1, 0, 2), 100),
            (batch(1, 3, 4), 103),
            (batch(1, 5, 5), 105),
        ] {
            assert_eq!(s.check(&b), Decision::Append);
            s.appended(&b, offset, 0);
        }
        s
    }

    #[test]
    fn decisions_as_kafkas() {
        let s = state();
        let table = [
            // next in line
            (batch(1, 6, 9), Decision::Append),
            // retries of remembered batches: their first offsets
            (batch(1, 5, 5), Decision::Duplicate { base_offset: 105 }),
            (batch(1, 0, 2), Decision::Duplicate { base_offset: 100 }),
            (batch(1, 3, 4), Decision::Duplicate { base_offset: 103 }),
            // a gap, an overlap that is no remembered batch
            (batch(1, 7, 7), Decision::OutOfOrder { expected: 6 }),
            (batch(1, 4, 6), Decision::OutOfOrder { expected: 6 }),
            // an older epoch, fenced
            (batch(0, 6, 6), Decision::StaleEpoch { current: 1 }),
            // a newer epoch starts again at 0
            (batch(2, 0, 0), Decision::Append),
            (batch(2, 6, 6), Decision::OutOfOrder { expected: 0 }),
        ];
        for (b, want) in table {
            assert_eq!(s.check(&b), want, "{b:?}");
        }
        // A producer without state: any sequence (its state expired, or the broker
        // restarted).
        let other = BatchMeta {
            producer_id: 8,
            ..batch(0, 42, 43)
        };
        assert_eq!(s.check(&other), Decision::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = PartitionProducers::default();
        for i in 0..7 {
            let b = batch(0, i, i);
            assert_eq!(s.check(&b), Decision::Append);
            s.appended(&b, 10 + i as u64, 0);
        }
        assert_eq!(
            s.check(&batch(0, 2, 2)),
            Decision::Duplicate { base_offset: 12 }
        );
        assert_eq!(
            s.check(&batch(0, 1, 1)),
            Decision::OutOfOrder { expected: 7 }
        );
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut s = PartitionProducers::default();
        let b = batch(0, i32::MAX - 1, i32::MAX);
        s.appended(&b, 0, 0);
        assert_eq!(s.check(&batch(0, 0, 3)), Decision::Append);
        assert_eq!(
            s.check(&batch(0, 1, 3)),
            Decision::OutOfOrder { expected: 0 }
        );
    }

    #[test]
    fn a_new_epoch_forgets_the_old_batches() {
        let mut s = state();
        s.appended(&batch(2, 0, 0), 200, 0);
        assert_eq!(
            s.check(&batch(2, 0, 0)),
            Decision::Duplicate { base_offset: 200 }
        );
        assert_eq!(
            s.check(&batch(2, 3, 4)),
            Decision::OutOfOrder { expected: 1 }
        );
        assert_eq!(
            s.check(&batch(1, 6, 6)),
            Decision::StaleEpoch { current: 2 }
        );
    }

    #[test]
    fn idle_producers_expire_after_a_day() {
        let mut s = state();
        let other = BatchMeta {
            producer_id: 8,
            ..batch(0, 0, 0)
        };
        s.appended(&other, 1, EXPIRATION_MS + EXPIRY_SCAN_MS);
        assert_eq!(s.len(), 1);
        // Producer 7 is gone: any sequence is taken again.
        assert_eq!(s.check(&batch(1, 40, 40)), Decision::Append);
    }
}
