//! Which aborted transactions a read of a range of offsets must report: the decision
//! behind the aborted-transactions list of a Kafka fetch response (Kafka's
//! `LogSegment.collectAbortedTxns` over its `TransactionIndex`).
//!
//! A read-committed Kafka client is handed the batches as stored — aborted data and
//! the markers included — and drops a transactional batch of producer P from the
//! first offset of one of P's aborted transactions until P's ABORT marker. For that it
//! needs every aborted transaction whose range (first offset ..= abort marker) meets
//! the fetched offsets: one that began before the fetch offset and ends inside it too.
//!
//! The ranges come from each partition's aborted-transaction index
//! (`aborted.txnindex`, kept by `crate::partition`): persisted beside the segments
//! when the abort marker is written (after the marker is fsynced), rather than rebuilt
//! on open by scanning the segments as the producers' state is, because the first
//! offset of an aborted transaction is where its partition was added to it, which no
//! batch records (a transaction may write nothing before its first record, or
//! nothing at all), and a scan of every segment for markers would make opening a
//! partition cost as much as reading it. The index stays consistent without being
//! rewritten but for one thing: retention deletes whole segments from the log start,
//! and the entries whose abort markers were in them are then dropped, from memory at
//! once and from the file by rewriting it (as Kafka deletes a segment's transaction
//! index with the segment; an entry left by a crash in between is never selected, as
//! a read never starts below the log start, and goes at the next retention pass);
//! compaction
//! removes the aborted records but keeps offsets and markers, so a range still means
//! the same; recovery truncates only a torn tail after the last fsync, and an entry
//! is written only once its marker is durable (an abort a crash interrupted is
//! redone on open, and a repeated entry merged when the index is loaded).

use crate::partition::AbortedTxn;

/// An aborted transaction as a fetch reports it (Kafka's
/// `FetchResponse.AbortedTransaction`): its records are those of `producer_id` from
/// `first_offset` up to its abort marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer id of the transaction's batches and marker.
    pub producer_id: u64,
    /// The transaction's number among the producer id's transactions (the
    /// `sequence` of its batches' [`crate::TxnMark`]).
    pub sequence: u64,
    /// The first offset of the transaction in the partition (the log end offset when
    /// the partition was added to it: its records are at or after it).
    pub first_offset: u64,
    /// The offset of its abort marker.
    pub last_offset: u64,
}

impl From<&AbortedTxn> for AbortedTransaction {
    fn from(a: &AbortedTxn) -> Self {
        AbortedTransaction {
            producer_id: a.producer_id,
            sequence: a.sequence,
            first_offset: a.first_offset,
            last_offset: a.last_offset,
        }
    }
}

/// The entries of `index` (sorted by `last_offset`, as the index is: in the order
/// of their markers) whose range `first_offset..=last_offset` meets the offsets
/// `from..until`; none when the range is empty.
pub(crate) fn overlapping(
    index: &[AbortedTxn],
    from: u64,
    until: u64,
) -> impl Iterator<Item = &AbortedTxn> {
    // Those ending before `from` are a prefix (sorted by the end); of the rest, the
    // ones that begin before `until` meet the range.
    let start = index.partition_point(|a| a.last_offset < from);
    index[start..]
        .iter()
        .filter(move |a| from < until && a.first_offset < until)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn txn(producer_id: u64, first_offset: u64, last_offset: u64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            sequence: 0,
            first_offset,
            last_offset,
        }
    }

    #[test]
    fn one_that_began_before_the_read_and_ends_inside_it_is_reported() {
        let index = [txn(1, 2, 5), txn(2, 6, 9), txn(3, 20, 30)];
        let got: Vec<u64> = overlapping(&index, 4, 7).map(|a| a.producer_id).collect();
        assert_eq!(got, vec![1, 2]);
        assert_eq!(overlapping(&index, 10, 20).count(), 0);
        assert_eq!(overlapping(&index, 30, 31).count(), 1);
        assert_eq!(overlapping(&index, 7, 7).count(), 0, "an empty read");
    }

    /// Transactions as the log writes them: each begins at some offset and its marker
    /// comes later, markers in increasing order (so the index is sorted by its end).
    fn arb_index() -> impl Strategy<Value = Vec<AbortedTxn>> {
        proptest::collection::vec((1u64..20, 0u64..15), 0..25).prop_map(|steps| {
            let mut marker = 0;
            steps
                .into_iter()
                .enumerate()
                .map(|(i, (gap, length))| {
                    marker += gap;
                    txn(i as u64, marker.saturating_sub(length), marker)
                })
                .collect()
        })
    }

    proptest! {
        /// Against the model: an entry is reported exactly when some offset of the
        /// read lies in its range.
        #[test]
        fn reports_exactly_the_transactions_with_an_offset_in_the_read(
            index in arb_index(),
            from in 0u64..400,
            len in 0u64..60,
        ) {
            let until = from + len;
            let got: Vec<u64> = overlapping(&index, from, until).map(|a| a.producer_id).collect();
            let want: Vec<u64> = index
                .iter()
                .filter(|a| (from..until).any(|o| (a.first_offset..=a.last_offset).contains(&o)))
                .map(|a| a.producer_id)
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
