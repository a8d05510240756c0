//! EndTxn resuming a prepared transaction of the log: how a checkpoint taken by a job
//! with the log in-process restores through the broker (docs/semantics.md §1a).
//!
//! The in-process log sink leaves each checkpoint's output as a transaction
//! *prepared* in the log, named by transactional id, producer id, epoch and sequence
//! ([`brook_log::txn`]); the checkpoint holds that name. Restored through a broker,
//! the Kafka sink must commit it, but a Kafka client cannot commit another session's
//! transaction. Flink's `KafkaSink` does it by resuming: it sets the producer id and
//! epoch of the stored transaction on a new producer (`resumeTransaction`, by
//! reflection) and sends EndTxn(commit), which Kafka's coordinator accepts because
//! its transaction state is durable. The broker accepts the same EndTxn, from the
//! log's durable state, whether or not it has a session of that producer; and since
//! one transactional id of the log may hold several prepared transactions (one per
//! checkpoint not yet committed), the request names which by the sequence in the
//! tagged field [`RESUME_SEQUENCE_TAG`] (EndTxn v3+). Without that field an EndTxn is
//! the ordinary one ([`crate::transactions`]).
//!
//! The resumed transaction is decided by a new session of its transactional id (which
//! fences older sessions and aborts its open transaction, as InitProducerId; prepared
//! ones stay, so several can be resumed one after the other). Committing is idempotent:
//! a transaction committed before answers success (a restore interrupted and run
//! again). An aborted or timed-out one, or one the log no longer knows, answers
//! INVALID_TXN_STATE (the broker logs why).

use brook_core::txn_committable::RESUME_SEQUENCE_TAG;
use brook_log::{Log, LogError, TransactionHandle};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};
use tracing::{info, warn};

use crate::error_code;

/// The answer to an EndTxn that resumes a prepared transaction, or `None` for an
/// ordinary EndTxn (no [`RESUME_SEQUENCE_TAG`] field).
pub fn end_txn(request: &EndTxnRequest, log: &Log) -> Option<EndTxnResponse> {
    let tag = request.unknown_tagged_fields.get(&RESUME_SEQUENCE_TAG)?;
    let code = match resume(request, tag, log) {
        Ok(()) => 0,
        Err(code) => code,
    };
    Some(EndTxnResponse::default().with_error_code(code))
}

/// The transaction an EndTxn names: its producer id and epoch, the tag's sequence.
fn handle(request: &EndTxnRequest, tag: &[u8]) -> Option<TransactionHandle> {
    let sequence = u64::from_be_bytes(<[u8; 8]>::try_from(tag).ok()?);
    Some(TransactionHandle {
        transactional_id: request.transactional_id.0.to_string(),
        producer_id: u64::try_from(request.producer_id.0).ok()?,
        epoch: u16::try_from(request.producer_epoch).ok()?,
        sequence,
    })
}

fn resume(request: &EndTxnRequest, tag: &[u8], log: &Log) -> Result<(), i16> {
    let Some(h) = handle(request, tag) else {
        warn!(
            transactional_id = request.transactional_id.0.as_str(),
            "EndTxn resuming a transaction: the producer id, epoch or sequence is invalid"
        );
        return Err(ResponseError::InvalidRequest.code());
    };
    let refused = |e: LogError| -> i16 {
        warn!(
            transactional_id = h.transactional_id.as_str(),
            producer_id = h.producer_id,
            sequence = h.sequence,
            "EndTxn resuming a prepared transaction: {e}"
        );
        match e {
            LogError::InvalidName(_) => ResponseError::InvalidRequest.code(),
            // Kafka answers an EndTxn for a transaction its coordinator expired so.
            LogError::TransactionTimedOut { .. } => ResponseError::InvalidTxnState.code(),
            e => error_code(&e),
        }
    };
    let mut session = log
        .init_transactions(&h.transactional_id)
        .map_err(refused)?;
    if request.committed {
        let outcome = session.commit(&h).map_err(refused)?;
        info!(
            transactional_id = h.transactional_id.as_str(),
            producer_id = h.producer_id,
            sequence = h.sequence,
            ?outcome,
            "resumed a prepared transaction and committed it"
        );
    } else {
        session.abort(&h).map_err(refused)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use brook_core::time::ManualClock;
    use brook_log::{LogOptions, ProducerRecord, ReadLimit, TopicConfig};
    use bytes::Bytes;
    use kafka_protocol::messages::{InitProducerIdRequest, ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::producers::Producers;
    use crate::transactions::Transactions;

    fn request(h: &TransactionHandle, committed: bool, tag: Option<Vec<u8>>) -> EndTxnRequest {
        let mut r = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                h.transactional_id.clone(),
            )))
            .with_producer_id(ProducerId(h.producer_id as i64))
            .with_producer_epoch(h.epoch as i16)
            .with_committed(committed);
        if let Some(t) = tag {
            r.unknown_tagged_fields
                .insert(RESUME_SEQUENCE_TAG, Bytes::from(t));
        }
        r
    }

    #[test]
    fn a_prepared_transaction_is_committed_by_name_once_and_init_producer_id_aborts_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let topic = log.create_topic("t", 1, TopicConfig::default()).unwrap();
        let mut w = log.init_transactions("job.out.0").unwrap();
        w.begin().unwrap();
        w.send("t", vec![ProducerRecord::new("a")]).unwrap();
        let first = w.prepare().unwrap();
        w.begin().unwrap();
        w.send("t", vec![ProducerRecord::new("b")]).unwrap();
        let second = w.prepare().unwrap();
        let tag = |h: &TransactionHandle| Some(h.sequence.to_be_bytes().to_vec());

        // Without the tag it is an ordinary EndTxn, not this module's.
        assert!(end_txn(&request(&first, true, None), &log).is_none());
        for _ in 0..2 {
            let r = end_txn(&request(&first, true, tag(&first)), &log).unwrap();
            assert_eq!(r.error_code, 0);
        }
        let p = topic.partition(0).unwrap();
        let read: Vec<_> = p.read(0, ReadLimit::default()).unwrap();
        assert_eq!(read.len(), 1, "only the named transaction is visible");
        assert_eq!(read[0].value, Bytes::from("a"));
        // The second stayed prepared, until a producer's InitProducerId aborts it
        // (Kafka's, without keepPreparedTxn).
        assert_eq!(
            log.init_transactions("job.out.0")
                .unwrap()
                .prepared()
                .unwrap(),
            vec![second.clone()]
        );
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(
                "job.out.0",
            ))))
            .with_transaction_timeout_ms(60_000);
        let producers = Producers::new(ManualClock::new(1).shared());
        let r = Transactions::default().init_producer_id(&init, &log, &producers);
        assert_eq!(r.error_code, 0);
        assert!(log
            .init_transactions("job.out.0")
            .unwrap()
            .prepared()
            .unwrap()
            .is_empty());
        let r = end_txn(&request(&second, true, tag(&second)), &log).unwrap();
        assert_eq!(r.error_code, ResponseError::InvalidTxnState.code());
        let r = end_txn(&request(&second, true, Some(vec![1, 2])), &log).unwrap();
        assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    }
}
