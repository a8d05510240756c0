//! The transaction timeout decision (Kafka's `transaction.timeout.ms`): which
//! transactions of one transactional id the coordinator aborts at a given time, and
//! whether it fences the id's session. A pure function of the id's state and the
//! clock; [`crate::Log::expire_transactions`] carries it out.
//!
//! The rule, as Kafka's transaction coordinator (`TransactionStateManager::
//! timedOutTransactions`, then `abortTimedOutTransactions`):
//!
//! - A transaction's clock starts when its first partition is added (Kafka's
//!   `txnStartTimestamp`, set by the first `AddPartitionsToTxn`); one that wrote
//!   nothing holds nothing back and never times out.
//! - It is expired once `now - began > timeout` (exactly at the timeout it is still
//!   alive) while it is undecided: open, or prepared. Prepared ones expire too, as
//!   Kafka's coordinator aborts a Flink `KafkaSink`'s pre-committed transactions
//!   (Kafka cannot tell them apart from open ones); one whose commit or abort has
//!   begun is finished, never expired.
//! - An expired transaction of the id's current session fences that session: its
//!   epoch is bumped, so the late writer gets `ProducerFenced` on its next call, and
//!   the session's other open transactions (none can be prepared any more) are
//!   aborted with it. An expired transaction of an older session (a prepared one
//!   left for a restore) is aborted alone: its writer is fenced already, and the
//!   current session is not touched.

use crate::txn::{Status, TxnEntry};

/// What the coordinator does about one transactional id at a given time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// The transactions past their timeout, `(producer id, sequence)`, oldest first.
    pub(crate) expired: Vec<(u64, u64)>,
    /// Bump the id's epoch: an expired transaction belongs to the current session.
    pub(crate) fence: bool,
    /// Open transactions of the fenced session that did not expire themselves,
    /// aborted with the expired ones (nobody can prepare them any more).
    pub(crate) orphaned: Vec<(u64, u64)>,
}

/// Whether `t` is past its timeout at `now_ms`.
fn is_expired(t: &TxnEntry, now_ms: i64) -> bool {
    let undecided = matches!(t.status, Status::Open | Status::Prepared);
    let timeout = i64::try_from(t.timeout_ms).unwrap_or(i64::MAX);
    undecided
        && t.began_ms
            .is_some_and(|began| now_ms.saturating_sub(began) > timeout)
}

/// The decision for the transactions of one id whose current session is
/// `(producer_id, epoch)`; `None` when nothing expired.
pub(crate) fn expiry(
    session: (u64, u16),
    transactions: &[TxnEntry],
    now_ms: i64,
) -> Option<Expiry> {
    let expired: Vec<&TxnEntry> = transactions
        .iter()
        .filter(|t| is_expired(t, now_ms))
        .collect();
    if expired.is_empty() {
        return None;
    }
    let fence = expired.iter().any(|t| (t.producer_id, t.epoch) == session);
    let key = |t: &TxnEntry| (t.producer_id, t.sequence);
    let expired: Vec<(u64, u64)> = expired.into_iter().map(key).collect();
    let orphaned = if fence {
        transactions
            .iter()
            .filter(|t| t.status == Status::Open && !expired.contains(&key(t)))
            .map(key)
            .collect()
    } else {
        Vec::new()
    };
    Some(Expiry {
        expired,
        fence,
        orphaned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transaction of producer 7 (sequence `seq`, epoch `epoch`) that began at
    /// `began` with a timeout of 100 ms.
    fn txn(seq: u64, epoch: u16, status: Status, began: Option<i64>) -> TxnEntry {
        TxnEntry {
            producer_id: 7,
            sequence: seq,
            epoch,
            status,
            partitions: Vec::new(),
            began_ms: began,
            timeout_ms: 100,
            timed_out: false,
            offsets: Vec::new(),
        }
    }

    #[test]
    fn the_decision_table() {
        use Status::*;
        // (case, session epoch, transactions, now, expected)
        type Case = (&'static str, u16, Vec<TxnEntry>, i64, Option<Expiry>);
        let cases: Vec<Case> = vec![
            ("nothing", 0, vec![], 1_000, None),
            (
                "open, exactly at its timeout: alive",
                0,
                vec![txn(0, 0, Open, Some(1_000))],
                1_100,
                None,
            ),
            (
                "open, 1 ms past its timeout: expired, the session fenced",
                0,
                vec![txn(0, 0, Open, Some(1_000))],
                1_101,
                Some(Expiry {
                    expired: vec![(7, 0)],
                    fence: true,
                    orphaned: vec![],
                }),
            ),
            (
                "open without a partition: never expires",
                0,
                vec![txn(0, 0, Open, None)],
                1_000_000,
                None,
            ),
            (
                "the clock went back: alive",
                0,
                vec![txn(0, 0, Open, Some(1_000))],
                500,
                None,
            ),
            (
                "prepared in the current session: expired, fenced, the open one orphaned",
                3,
                vec![
                    txn(4, 3, Prepared, Some(1_000)),
                    txn(5, 3, Open, Some(1_050)),
                ],
                1_120,
                Some(Expiry {
                    expired: vec![(7, 4)],
                    fence: true,
                    orphaned: vec![(7, 5)],
                }),
            ),
            (
                "prepared by an older session: aborted alone, the current session not fenced",
                4,
                vec![
                    txn(4, 3, Prepared, Some(1_000)),
                    txn(5, 4, Open, Some(1_050)),
                ],
                1_120,
                Some(Expiry {
                    expired: vec![(7, 4)],
                    fence: false,
                    orphaned: vec![],
                }),
            ),
            (
                "both past: both expired, nothing left to orphan",
                3,
                vec![
                    txn(4, 3, Prepared, Some(1_000)),
                    txn(5, 3, Open, Some(1_010)),
                ],
                1_200,
                Some(Expiry {
                    expired: vec![(7, 4), (7, 5)],
                    fence: true,
                    orphaned: vec![],
                }),
            ),
            (
                "a decision under way is finished, never expired",
                0,
                vec![txn(0, 0, Committing, Some(0)), txn(1, 0, Aborting, Some(0))],
                1_000_000,
                None,
            ),
        ];
        for (case, epoch, txns, now, want) in cases {
            assert_eq!(expiry((7, epoch), &txns, now), want, "{case}");
        }
    }

    #[test]
    fn each_transaction_has_its_own_timeout() {
        let mut long = txn(0, 0, Status::Open, Some(0));
        long.timeout_ms = 3_600_000;
        assert_eq!(expiry((7, 0), std::slice::from_ref(&long), 3_600_000), None);
        let got = expiry((7, 0), &[long], 3_600_001).map(|e| e.expired);
        assert_eq!(got, Some(vec![(7, 0)]));
    }

    #[test]
    fn another_producer_id_is_not_the_current_session() {
        // The id got a new producer id (epoch exhausted); the old id's transaction
        // with the same epoch number is not the current session's.
        let t = txn(0, 0, Status::Prepared, Some(0));
        let e = expiry((8, 0), &[t], 1_000).expect("expired");
        assert!(!e.fence);
    }
}
