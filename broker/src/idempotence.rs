//! Sequence checks of idempotent producers, as Kafka's broker makes them (KIP-98,
//! `ProducerStateManager`): a pure decision, a batch and the partition's state of its
//! producer in, what to do out.
//!
//! Every batch of an idempotent (or transactional) producer carries its producer id,
//! epoch and the sequence number of its first record; the records of a batch have
//! consecutive sequences, wrapping from `i32::MAX` to 0. Per (producer id, partition)
//! the log remembers the epoch and the last five batches appended (first and last
//! sequence, first offset: [`ProducerEntry`], kept by the partition, stored with every
//! batch and rebuilt from the log when the partition is opened), and the broker
//! decides:
//!
//! - a producer id with no state: append, whatever the sequence (Kafka accepts any
//!   sequence when it has no entry, e.g. after its state expired);
//! - an epoch below the remembered one: [`Decision::StaleEpoch`] (Kafka's
//!   INVALID_PRODUCER_EPOCH), nothing appended;
//! - a newer epoch: append if the sequence starts again at 0, else
//!   [`Decision::OutOfOrder`];
//! - the same epoch: a batch equal (first and last sequence) to one of the last five
//!   is a retry, answered with that batch's first offset and not appended again
//!   ([`Decision::Duplicate`], Kafka 2.x+: success, not DUPLICATE_SEQUENCE_NUMBER);
//!   the sequence after the last batch's is appended; anything else is a gap or an
//!   old batch out of the window: [`Decision::OutOfOrder`]
//!   (OUT_OF_ORDER_SEQUENCE_NUMBER).
//!
//! The log forgets a producer after `producer.id.expiration.ms` (a day) without an
//! append ([`brook_log::producer_state::PRODUCER_ID_EXPIRATION_MS`]).

use brook_log::{ProducerEntry, ProducerMark};

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

impl BatchMeta {
    /// The partition's key of this producer (Kafka's ids and epochs are not negative;
    /// the log stores their bits).
    pub fn log_producer_id(&self) -> u64 {
        self.producer_id as u64
    }

    /// The producer fields the log stores with the batch.
    pub fn mark(&self) -> ProducerMark {
        ProducerMark {
            producer_id: self.log_producer_id(),
            epoch: self.epoch as u16,
            base_sequence: self.first_sequence,
        }
    }
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Append it (with its producer fields, which updates the state).
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

/// The sequence after `s` (Kafka's sequences wrap to 0 after `i32::MAX`).
fn next(s: i32) -> i32 {
    if s == i32::MAX {
        0
    } else {
        s + 1
    }
}

/// Decides what to do with `batch`, given what the partition remembers of its
/// producer (`None`: nothing).
pub fn check(entry: Option<&ProducerEntry>, batch: &BatchMeta) -> Decision {
    let Some(entry) = entry else {
        return Decision::Append;
    };
    let current = entry.epoch as i16;
    if batch.epoch < current {
        return Decision::StaleEpoch { current };
    }
    if batch.epoch > current {
        return if batch.first_sequence == 0 {
            Decision::Append
        } else {
            Decision::OutOfOrder { expected: 0 }
        };
    }
    if let Some(b) = entry.batches.iter().find(|b| {
        b.first_sequence == batch.first_sequence && b.last_sequence == batch.last_sequence
    }) {
        return Decision::Duplicate {
            base_offset: b.first_offset,
        };
    }
    let expected = entry.batches.back().map_or(0, |b| next(b.last_sequence));
    if batch.first_sequence == expected {
        Decision::Append
    } else {
        Decision::OutOfOrder { expected }
    }
}

#[cfg(test)]
mod tests {
    use brook_log::ProducerStates;

    use super::*;

    fn batch(epoch: i16, first: i32, last: i32) -> BatchMeta {
        BatchMeta {
            producer_id: 7,
            epoch,
            first_sequence: first,
            last_sequence: last,
        }
    }

    /// Appends `b` at `offset` as the partition would.
    fn appended(s: &mut ProducerStates, b: &BatchMeta, offset: u64) {
        let count = (b.last_sequence - b.first_sequence + 1) as u32;
        s.appended(&b.mark(), count, offset, 0);
    }

    fn decide(s: &ProducerStates, b: &BatchMeta) -> Decision {
        check(s.get(b.log_producer_id()), b)
    }

    /// Producer 7 at epoch 1 appended batches 0..=2 (offset 100), 3..=4 (103), 5..=5 (105).
    fn state() -> ProducerStates {
        let mut s = ProducerStates::default();
        for (b, offset) in [
            (batch(1, 0, 2), 100),
            (batch(1, 3, 4), 103),
            (batch(1, 5, 5), 105),
        ] {
            assert_eq!(decide(&s, &b), Decision::Append);
            appended(&mut s, &b, offset);
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
            assert_eq!(decide(&s, &b), want, "{b:?}");
        }
        // A producer without state: any sequence (its state expired).
        let other = BatchMeta {
            producer_id: 8,
            ..batch(0, 42, 43)
        };
        assert_eq!(decide(&s, &other), Decision::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            let b = batch(0, i, i);
            assert_eq!(decide(&s, &b), Decision::Append);
            appended(&mut s, &b, 10 + i as u64);
        }
        assert_eq!(
            decide(&s, &batch(0, 2, 2)),
            Decision::Duplicate { base_offset: 12 }
        );
        assert_eq!(
            decide(&s, &batch(0, 1, 1)),
            Decision::OutOfOrder { expected: 7 }
        );
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut s = ProducerStates::default();
        s.appended(&batch(0, i32::MAX - 1, i32::MAX).mark(), 2, 0, 0);
        assert_eq!(decide(&s, &batch(0, 0, 3)), Decision::Append);
        assert_eq!(
            decide(&s, &batch(0, 1, 3)),
            Decision::OutOfOrder { expected: 0 }
        );
    }

    #[test]
    fn a_new_epoch_forgets_the_old_batches() {
        let mut s = state();
        appended(&mut s, &batch(2, 0, 0), 200);
        assert_eq!(
            decide(&s, &batch(2, 0, 0)),
            Decision::Duplicate { base_offset: 200 }
        );
        assert_eq!(
            decide(&s, &batch(2, 3, 4)),
            Decision::OutOfOrder { expected: 1 }
        );
        assert_eq!(
            decide(&s, &batch(1, 6, 6)),
            Decision::StaleEpoch { current: 2 }
        );
    }
}
