//! The committables of the transactional sinks on a Kafka-style log, in one type, so
//! that a checkpoint taken through one of them restores through the other
//! (docs/semantics.md §1a, "Jobs on a served log": `brook run`'s `log` sink is the
//! in-process log sink when it holds the data directory, the Kafka sink when a broker
//! serves it).
//!
//! A committable says what it is:
//! - [`TxnCommittable::Prepared`]: a transaction written and *prepared* in the log,
//!   named by its transactional id, producer id, epoch and sequence (the in-process
//!   log sink). Committing it writes its commit markers.
//! - [`TxnCommittable::Records`]: the records of one checkpoint, not written yet (the
//!   Kafka sink, which keeps them in the checkpoint as Flink's `KafkaSink` keeps its
//!   transaction). Committing it writes them in one transaction that also sets the
//!   checkpoint id as the committed offset of partition 0 of the sink's topic in
//!   group [`marker_group`]`(transactional id)`, so a restore commits exactly the
//!   checkpoints whose id is above that marker.
//!
//! Formats (both as brook wrote them before this type existed, so older checkpoints
//! decode): `Prepared` is the byte `1` followed by
//! `{"transactional_id","producer_id","epoch","sequence"}` as JSON; `Records` is the
//! JSON object `{"v":1,"id","checkpoint","records":[[key|null, value, timestamp
//! ms|null], ...]}`. Anything else is [`UnknownCommittable`].

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::checkpoint::CheckpointId;

/// The first byte of a [`TxnCommittable::Prepared`].
const PREPARED_V1: u8 = 1;

/// The version field of a [`TxnCommittable::Records`].
const RECORDS_V1: u8 = 1;

/// What a transactional log sink puts into a checkpoint (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnCommittable {
    /// A transaction prepared in the log, to commit by name.
    Prepared(PreparedTxn),
    /// A checkpoint's records, to write in one transaction with the marker.
    Records(CheckpointRecords),
}

/// A prepared transaction of the log (the fields of `brook_log::TransactionHandle`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedTxn {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id it was written with.
    pub producer_id: u64,
    /// The epoch of the session that wrote it.
    pub epoch: u16,
    /// Its number among the producer id's transactions.
    pub sequence: u64,
}

/// One record of a [`CheckpointRecords`]: key, value (JSON text), timestamp (ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRecord(pub Option<String>, pub String, pub Option<i64>);

/// The records one transactional id received between two barriers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecords {
    v: u8,
    /// The transactional id that writes them.
    pub id: String,
    /// The checkpoint they belong to (the marker's value once written).
    pub checkpoint: CheckpointId,
    /// The records, in order.
    pub records: Vec<PendingRecord>,
}

impl CheckpointRecords {
    /// The records `records` of `checkpoint`, for transactional id `id`.
    pub fn new(
        id: impl Into<String>,
        checkpoint: CheckpointId,
        records: Vec<PendingRecord>,
    ) -> Self {
        CheckpointRecords {
            v: RECORDS_V1,
            id: id.into(),
            checkpoint,
            records,
        }
    }

    /// The bytes of [`TxnCommittable::Records`] with these records.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing strings and numbers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl PreparedTxn {
    /// The bytes of [`TxnCommittable::Prepared`] naming this transaction.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![PREPARED_V1];
        // Serializing strings and numbers cannot fail.
        serde_json::to_writer(&mut b, self).unwrap_or_default();
        b
    }
}

/// The group whose committed offset (partition 0 of the sink's topic) is the last
/// checkpoint whose [`CheckpointRecords`] transactional id `id` committed.
pub fn marker_group(id: &str) -> String {
    format!("brook-txn-marker.{id}")
}

/// The tagged field (a brook extension of Kafka's flexible EndTxn, v3+) that names the
/// sequence of the prepared transaction an EndTxn resumes: producer id and epoch are
/// the request's own fields, the sequence (8 bytes, big endian) is this field, so a
/// [`TxnCommittable::Prepared`] restored through a broker is committed by name
/// (docs/semantics.md §1a). The number is far above the tags Kafka assigns (0, 1, ...).
pub const RESUME_SEQUENCE_TAG: i32 = 0x6272_0001;

/// Bytes in a checkpoint that no transactional log sink wrote.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "a committable in the checkpoint is neither a prepared log transaction nor a checkpoint's \
     records ({len} bytes, first byte {first:?}): not written by brook's log or Kafka sink"
)]
pub struct UnknownCommittable {
    /// Its length (bytes).
    pub len: usize,
    /// Its first byte, if any.
    pub first: Option<u8>,
}

impl TxnCommittable {
    /// The committable's bytes (see the [module docs](self) for the formats).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            TxnCommittable::Prepared(p) => p.encode(),
            TxnCommittable::Records(r) => r.encode(),
        }
    }

    /// Reads a committable written by either sink.
    ///
    /// # Errors
    /// [`UnknownCommittable`] for bytes in neither format.
    pub fn decode(bytes: &[u8]) -> Result<Self, UnknownCommittable> {
        let decoded = match bytes {
            [PREPARED_V1, json @ ..] => serde_json::from_slice(json)
                .ok()
                .map(TxnCommittable::Prepared),
            _ => serde_json::from_slice::<CheckpointRecords>(bytes)
                .ok()
                .filter(|r| r.v == RECORDS_V1)
                .map(TxnCommittable::Records),
        };
        decoded.ok_or(UnknownCommittable {
            len: bytes.len(),
            first: bytes.first().copied(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_decode_from_the_bytes_the_sinks_wrote_before() {
        let prepared =
            br#"{"transactional_id":"copy.out.0","producer_id":3,"epoch":2,"sequence":7}"#;
        let mut bytes = vec![1u8];
        bytes.extend_from_slice(prepared);
        assert_eq!(
            TxnCommittable::decode(&bytes),
            Ok(TxnCommittable::Prepared(PreparedTxn {
                transactional_id: "copy.out.0".into(),
                producer_id: 3,
                epoch: 2,
                sequence: 7,
            }))
        );
        let records = br#"{"v":1,"id":"copy.out.1","checkpoint":4,"records":[["k","{\"a\":1}",5],[null,"2",null]]}"#;
        let want = TxnCommittable::Records(CheckpointRecords::new(
            "copy.out.1",
            4,
            vec![
                PendingRecord(Some("k".into()), "{\"a\":1}".into(), Some(5)),
                PendingRecord(None, "2".into(), None),
            ],
        ));
        assert_eq!(TxnCommittable::decode(records), Ok(want.clone()));
        assert_eq!(TxnCommittable::decode(&want.encode()), Ok(want));
    }

    #[test]
    fn other_bytes_are_an_unknown_committable() {
        for bad in [
            &b""[..],
            b"\x02{}",
            b"{\"v\":2,\"id\":\"x\",\"checkpoint\":1,\"records\":[]}",
            b"path/part-0",
        ] {
            let e = TxnCommittable::decode(bad).unwrap_err();
            assert_eq!(e.len, bad.len());
            assert!(
                e.to_string().contains("neither a prepared log transaction"),
                "{e}"
            );
        }
    }
}
