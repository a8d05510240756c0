//! Which producer ids a read_committed fetch shows for transactional batches.
//!
//! A Kafka client drops a transactional batch of producer P while P counts as
//! aborted: from the first offset of one of P's listed aborted transactions until P's
//! next ABORT marker (Java's `CompletedFetch`, kafka-python's), or until the marker
//! that pops that first offset (librdkafka). That is right as long as a producer id
//! has one transaction at a time in a partition, as every Kafka producer has (so every
//! transaction written through the broker). A session of the log's own API (the log
//! sink) may begin its next transaction while the one before waits prepared, under
//! the same producer id; should one of them be aborted while a batch of the other
//! (data or marker) lies in its range — an older session's prepared transaction
//! aborted (its timeout) after the new session wrote — the clients would drop or keep
//! the wrong records. A read where that happens ([`needs_distinct_ids`]) shows each
//! transaction under an id of its own ([`distinct_id`]) in its batches, markers and
//! list alike, so the clients' rule holds again; every other read shows the real
//! producer ids. A client's filter state lives for one fetch response, so ids need
//! only be consistent within one.

use brook_log::AbortedTransaction;

/// A transactional batch (data or marker) of a read: its offsets and transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnBatch {
    /// The offset of its first record in the read.
    pub first_offset: u64,
    /// The offset of its last record in the read.
    pub last_offset: u64,
    /// Its producer id.
    pub producer_id: u64,
    /// Its transaction's number among the producer id's transactions.
    pub sequence: u64,
}

/// Whether a batch of another transaction of the same producer id lies in the range
/// (first offset ..= abort marker) of one of the `aborted` transactions: then the
/// producer id alone does not tell the clients which records to drop.
pub fn needs_distinct_ids(batches: &[TxnBatch], aborted: &[AbortedTransaction]) -> bool {
    aborted.iter().any(|a| {
        batches.iter().any(|b| {
            b.producer_id == a.producer_id
                && b.sequence != a.sequence
                && b.first_offset <= a.last_offset
                && b.last_offset >= a.first_offset
        })
    })
}

/// The id transaction `sequence` of `producer_id` is shown under when the read
/// [`needs_distinct_ids`]: bit 62 set, so never one of the log's producer ids (counted
/// up from 0), then 31 bits of each; distinct within a read unless its transactions'
/// numbers differ by a multiple of 2^31.
pub fn distinct_id(producer_id: u64, sequence: u64) -> i64 {
    const LOW: u64 = (1 << 31) - 1;
    // At most 62 bits are set, so the value fits an i64.
    ((1u64 << 62) | ((producer_id & LOW) << 31) | (sequence & LOW)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first_offset: u64, last_offset: u64, producer_id: u64, sequence: u64) -> TxnBatch {
        TxnBatch {
            first_offset,
            last_offset,
            producer_id,
            sequence,
        }
    }

    fn aborted(producer_id: u64, sequence: u64, first: u64, last: u64) -> AbortedTransaction {
        AbortedTransaction {
            producer_id,
            sequence,
            first_offset: first,
            last_offset: last,
        }
    }

    #[test]
    fn one_transaction_at_a_time_keeps_the_real_ids() {
        // A Kafka producer: commit 0-2 (marker 3), abort 4-6 (marker 7), commit 8-10.
        let batches = [
            batch(0, 2, 5, 0),
            batch(3, 3, 5, 0),
            batch(4, 6, 5, 1),
            batch(7, 7, 5, 1),
            batch(8, 10, 5, 2),
            batch(11, 11, 5, 2),
        ];
        assert!(!needs_distinct_ids(&batches, &[aborted(5, 1, 4, 7)]));
        // Another producer's batch inside the range does not matter.
        assert!(!needs_distinct_ids(
            &[batch(5, 5, 6, 0)],
            &[aborted(5, 1, 4, 7)]
        ));
    }

    #[test]
    fn a_batch_of_another_transaction_in_an_aborted_range_needs_distinct_ids() {
        // Prepared transaction 0 (0-1), the next one writes 2-3, then 0 is aborted (4).
        let batches = [batch(0, 1, 5, 0), batch(2, 3, 5, 1), batch(4, 4, 5, 0)];
        assert!(needs_distinct_ids(&batches, &[aborted(5, 0, 0, 4)]));
        assert_ne!(distinct_id(5, 0), distinct_id(5, 1));
        assert_ne!(distinct_id(5, 0), distinct_id(6, 0));
        assert!(distinct_id(u64::MAX, u64::MAX) > 0);
    }
}
