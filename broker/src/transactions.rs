//! Transactional producers (KIP-98): InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and the checks a
//! transactional Produce passes.
//!
//! The broker keeps no transaction state of its own: each transactional id maps onto
//! the log's transaction coordinator ([`brook_log::txn`]), which persists it. A
//! session here is the id's current [`TransactionalProducer`] (InitProducerId starts
//! it with `Log::init_transactions`: the producer id, the epoch bumped, older
//! sessions fenced, the id's open and prepared transactions aborted) plus what Kafka's coordinator
//! tracks for the open transaction: the partitions added (a transactional batch for
//! any other partition gets INVALID_TXN_STATE) and whether one is open at all (the
//! first AddPartitionsToTxn or AddOffsetsToTxn begins it, as Kafka's state goes from
//! Empty to Ongoing). TxnOffsetCommit hands the offsets to the log's transaction
//! ([`TransactionalProducer::send_offsets`]), which writes them as the group's
//! committed offsets in the same step as the commit markers; EndTxn commits (prepare
//! and commit markers) or aborts.
//!
//! Errors as Kafka's: a request from an older epoch of the id gets PRODUCER_FENCED
//! (INVALID_PRODUCER_EPOCH for the API versions before KIP-588 introduced it); a
//! producer id that is not the id's (or an id the broker has no session for, e.g. after
//! a broker restart: the client must call InitProducerId again) gets
//! INVALID_PRODUCER_ID_MAPPING; a request out of order (EndTxn without a transaction,
//! offsets without AddOffsetsToTxn) gets INVALID_TXN_STATE. A repeated EndTxn for the
//! transaction just ended the same way succeeds (a retry after a lost answer).
//!
//! Sessions live in memory; the log's state survives a restart, the sessions do not.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brook_log::{Log, LogError, TopicPartition, TransactionalProducer};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use tracing::{info, warn};

use crate::error_code;
use crate::group::Coordinator;
use crate::producers::Producers;

/// The first version of each transactional API that may answer PRODUCER_FENCED
/// (KIP-588); older versions get INVALID_PRODUCER_EPOCH for the same situation.
const FENCED_SINCE_ADD_PARTITIONS: i16 = 2;
const FENCED_SINCE_ADD_OFFSETS: i16 = 2;
const FENCED_SINCE_END_TXN: i16 = 2;
const FENCED_SINCE_TXN_OFFSET_COMMIT: i16 = 3;

/// One transactional id's current session.
#[derive(Debug)]
struct Session {
    producer: TransactionalProducer,
    producer_id: i64,
    epoch: i16,
    /// Partitions added to the open transaction.
    partitions: BTreeSet<(String, u32)>,
    /// Groups added to the open transaction (AddOffsetsToTxn).
    groups: BTreeSet<String>,
    /// Whether a transaction is open (Kafka's Ongoing).
    open: bool,
    /// How the last transaction ended (true: committed), to answer a retried EndTxn.
    last_end: Option<bool>,
}

/// Why a request of a transactional producer is refused before it touches the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    /// No session with this producer id (INVALID_PRODUCER_ID_MAPPING).
    UnknownProducer,
    /// An older epoch of the id (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH).
    Fenced,
    /// Out of order for the transaction's state (INVALID_TXN_STATE).
    InvalidState,
}

impl SessionError {
    /// The error code at an API version that answers PRODUCER_FENCED from
    /// `fenced_since` on.
    pub fn code(self, version: i16, fenced_since: i16) -> i16 {
        match self {
            SessionError::UnknownProducer => ResponseError::InvalidProducerIdMapping.code(),
            SessionError::Fenced if version >= fenced_since => ResponseError::ProducerFenced.code(),
            SessionError::Fenced => ResponseError::InvalidProducerEpoch.code(),
            SessionError::InvalidState => ResponseError::InvalidTxnState.code(),
        }
    }
}

/// The sessions of every transactional id, shared by every connection.
#[derive(Debug, Default)]
pub struct Transactions {
    sessions: Mutex<HashMap<String, Arc<Mutex<Option<Session>>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Handlers do not panic halfway; a poisoned lock only means another task
    // panicked elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Checks that `(producer_id, epoch)` is the session's.
fn check(session: Option<&Session>, producer_id: i64, epoch: i16) -> Result<(), SessionError> {
    match session {
        None => Err(SessionError::UnknownProducer),
        Some(s) if s.producer_id != producer_id => Err(SessionError::UnknownProducer),
        Some(s) if epoch < s.epoch => Err(SessionError::Fenced),
        // A newer epoch than the broker gave out: not this session either.
        Some(s) if epoch > s.epoch => Err(SessionError::UnknownProducer),
        Some(_) => Ok(()),
    }
}

/// Aborts the prepared transactions of a new session's transactional id.
fn abort_prepared(producer: &mut TransactionalProducer) -> Result<(), LogError> {
    for h in producer.prepared()? {
        warn!(
            transactional_id = producer.transactional_id(),
            sequence = h.sequence,
            "aborting a prepared transaction left by an earlier session"
        );
        producer.abort(&h)?;
    }
    Ok(())
}

/// Opens a transaction in `s` if none is open (Kafka's Empty → Ongoing).
fn ensure_open(s: &mut Session) -> Result<(), LogError> {
    if !s.open {
        s.producer.begin()?;
        s.open = true;
        s.partitions.clear();
        s.groups.clear();
    }
    Ok(())
}

impl Transactions {
    fn session(&self, id: &str) -> Arc<Mutex<Option<Session>>> {
        let mut all = lock(&self.sessions);
        Arc::clone(all.entry(id.to_string()).or_default())
    }

    fn existing(&self, id: &str) -> Option<Arc<Mutex<Option<Session>>>> {
        lock(&self.sessions).get(id).map(Arc::clone)
    }

    /// InitProducerId: a fresh producer id for an idempotent producer; for a
    /// transactional id, a new session of it (its producer id with the epoch bumped,
    /// older sessions fenced, its open and prepared transactions aborted).
    pub fn init_producer_id(
        &self,
        request: &InitProducerIdRequest,
        log: &Log,
        producers: &Producers,
    ) -> InitProducerIdResponse {
        let answer = InitProducerIdResponse::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let Some(id) = request.transactional_id.as_ref() else {
            // KIP-360's epoch bump of an idempotent producer is answered with a new
            // producer id: the client starts its sequences again either way.
            return answer
                .with_producer_id(ProducerId(producers.new_producer_id()))
                .with_producer_epoch(0);
        };
        let id = id.0.as_str();
        let cell = self.session(id);
        let mut session = lock(&cell);
        // KIP-360 (v3+): a producer that names its current id and epoch asks for the
        // bump of that session; naming another one means it was fenced meanwhile.
        if request.producer_id.0 >= 0 {
            if let Some(s) = session.as_ref() {
                if (s.producer_id, s.epoch) != (request.producer_id.0, request.producer_epoch) {
                    return answer.with_error_code(ResponseError::ProducerFenced.code());
                }
            }
        }
        // transaction.timeout.ms is the session's: the log's transaction coordinator
        // aborts (and fences) a transaction undecided past it (semantics §1).
        let timeout_ms = u64::try_from(request.transaction_timeout_ms).unwrap_or(0);
        let mut producer = match log.init_transactions_with_timeout(id, timeout_ms) {
            Ok(p) => p,
            Err(e) => {
                warn!(transactional_id = id, "InitProducerId: {e}");
                let code = match e {
                    LogError::InvalidName(_) => ResponseError::InvalidRequest.code(),
                    e => error_code(&e),
                };
                return answer.with_error_code(code);
            }
        };
        // A new session aborts the id's prepared transactions too, as Kafka's
        // InitProducerId without keepPreparedTxn (KIP-939): one the log sink left
        // in-process that the restored checkpoint names was committed before, by an
        // EndTxn resuming it (`resume_txn`); the others were written after that
        // checkpoint and would hold the last stable offset back until their timeout.
        if let Err(e) = abort_prepared(&mut producer) {
            warn!(transactional_id = id, "InitProducerId: {e}");
            return answer.with_error_code(error_code(&e));
        }
        let (Ok(producer_id), Ok(epoch)) = (
            i64::try_from(producer.producer_id()),
            i16::try_from(producer.epoch()),
        ) else {
            warn!(
                transactional_id = id,
                epoch = producer.epoch(),
                "InitProducerId: the log's epoch does not fit Kafka's 16-bit signed epoch"
            );
            return answer.with_error_code(ResponseError::UnknownServerError.code());
        };
        info!(
            transactional_id = id,
            producer_id, epoch, "transactional producer initialised"
        );
        *session = Some(Session {
            producer,
            producer_id,
            epoch,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            open: false,
            last_end: None,
        });
        answer
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
    }

    /// AddPartitionsToTxn (v0-3): begins the transaction if none is open and adds
    /// the partitions. An unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION
    /// and the others OPERATION_NOT_ATTEMPTED, nothing added (Kafka's rule).
    pub fn add_partitions(
        &self,
        request: &AddPartitionsToTxnRequest,
        version: i16,
        log: &Log,
    ) -> AddPartitionsToTxnResponse {
        let id = request.v3_and_below_transactional_id.0.as_str();
        let unknown: Vec<(String, i32)> = request
            .v3_and_below_topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
            .filter(|(topic, p)| {
                !u32::try_from(*p)
                    .ok()
                    .is_some_and(|p| log.topic(topic).is_ok_and(|t| p < t.partition_count()))
            })
            .collect();
        let whole = if unknown.is_empty() {
            self.with_session(
                id,
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
                |s| {
                    ensure_open(s)?;
                    for t in &request.v3_and_below_topics {
                        for &p in &t.partitions {
                            if let Ok(p) = u32::try_from(p) {
                                s.partitions.insert((t.name.0.to_string(), p));
                            }
                        }
                    }
                    Ok(())
                },
            )
            .map_err(|e| e.code(version, FENCED_SINCE_ADD_PARTITIONS))
        } else {
            Err(ResponseError::OperationNotAttempted.code())
        };
        let code = |topic: &str, p: i32| match &whole {
            Ok(()) => 0,
            Err(_) if unknown.iter().any(|(t, q)| t == topic && *q == p) => {
                ResponseError::UnknownTopicOrPartition.code()
            }
            Err(c) => *c,
        };
        let results = request
            .v3_and_below_topics
            .iter()
            .map(|t| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(code(t.name.0.as_str(), p))
                            })
                            .collect(),
                    )
            })
            .collect();
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
    }

    /// AddOffsetsToTxn: begins the transaction if none is open and adds the group.
    pub fn add_offsets(
        &self,
        request: &AddOffsetsToTxnRequest,
        version: i16,
    ) -> AddOffsetsToTxnResponse {
        let group = request.group_id.0.to_string();
        let result = self.with_session(
            request.transactional_id.0.as_str(),
            request.producer_id.0,
            request.producer_epoch,
            |s| {
                ensure_open(s)?;
                s.groups.insert(group);
                Ok(())
            },
        );
        AddOffsetsToTxnResponse::default().with_error_code(match result {
            Ok(()) => 0,
            Err(e) => e.code(version, FENCED_SINCE_ADD_OFFSETS),
        })
    }

    /// TxnOffsetCommit: the group's offsets, committed when the transaction commits.
    /// From v3 on a consumer's generation and member id are checked as an
    /// OffsetCommit's (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID); generation -1 (older
    /// versions, producers without the consumer's group metadata) is not checked.
    pub fn txn_offset_commit(
        &self,
        request: &TxnOffsetCommitRequest,
        version: i16,
        log: &Log,
        groups: &Coordinator,
    ) -> TxnOffsetCommitResponse {
        let group = request.group_id.0.as_str();
        let mut offsets: Vec<(TopicPartition, u64)> = Vec::new();
        let mut bad: Vec<(String, i32, i16)> = Vec::new();
        for t in &request.topics {
            for p in &t.partitions {
                let topic = t.name.0.as_str();
                let known = u32::try_from(p.partition_index)
                    .ok()
                    .filter(|&n| log.topic(topic).is_ok_and(|t| n < t.partition_count()));
                match (known, u64::try_from(p.committed_offset)) {
                    (Some(n), Ok(o)) => offsets.push((TopicPartition::new(topic, n), o)),
                    (None, _) => bad.push((
                        topic.to_string(),
                        p.partition_index,
                        ResponseError::UnknownTopicOrPartition.code(),
                    )),
                    (Some(_), Err(_)) => bad.push((
                        topic.to_string(),
                        p.partition_index,
                        ResponseError::OffsetOutOfRange.code(),
                    )),
                }
            }
        }
        let write = || -> Result<(), i16> {
            self.with_session(
                request.transactional_id.0.as_str(),
                request.producer_id.0,
                request.producer_epoch,
                |s| {
                    if !s.open || !s.groups.contains(group) {
                        return Err(SessionError::InvalidState.into());
                    }
                    s.producer.send_offsets(group, &offsets).map_err(Into::into)
                },
            )
            .map_err(|e| e.code(version, FENCED_SINCE_TXN_OFFSET_COMMIT))
        };
        let whole = if request.generation_id < 0 {
            write()
        } else {
            match groups.commit(
                group,
                request.generation_id,
                &request.member_id,
                request.group_instance_id.as_deref(),
                write,
            ) {
                Ok(r) => r,
                Err(e) => Err(e.code()),
            }
        };
        let topics = request
            .topics
            .iter()
            .map(|t| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                let own = bad.iter().find(|(topic, q, _)| {
                                    topic == t.name.0.as_str() && *q == p.partition_index
                                });
                                let code = match (own, whole) {
                                    (Some(&(_, _, c)), _) => c,
                                    (None, Ok(())) => 0,
                                    (None, Err(c)) => c,
                                };
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    }

    /// EndTxn: commits (data fsynced, commit markers, the offsets) or aborts (abort
    /// markers) the open transaction.
    pub fn end_txn(&self, request: &EndTxnRequest, version: i16) -> EndTxnResponse {
        let commit = request.committed;
        let result = self.with_session(
            request.transactional_id.0.as_str(),
            request.producer_id.0,
            request.producer_epoch,
            |s| {
                if !s.open {
                    // A retry of the EndTxn that ended the last transaction succeeds.
                    return if s.last_end == Some(commit) {
                        Ok(())
                    } else {
                        Err(SessionError::InvalidState.into())
                    };
                }
                let ended = if commit {
                    s.producer.commit_transaction().map(|_| ())
                } else {
                    s.producer.abort_transaction()
                };
                // Whatever the outcome, the log has no open transaction of this
                // session any more (a failed commit leaves it prepared, for the next
                // session to decide).
                s.open = false;
                s.partitions.clear();
                s.groups.clear();
                ended?;
                s.last_end = Some(commit);
                Ok(())
            },
        );
        EndTxnResponse::default().with_error_code(match result {
            Ok(()) => 0,
            Err(e) => e.code(version, FENCED_SINCE_END_TXN),
        })
    }

    /// Runs `f` on the session of `id` if `(producer_id, epoch)` is its own.
    fn with_session<T>(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        f: impl FnOnce(&mut Session) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        let Some(cell) = self.existing(id) else {
            return Err(SessionError::UnknownProducer.into());
        };
        let mut guard = lock(&cell);
        check(guard.as_ref(), producer_id, epoch)?;
        match guard.as_mut() {
            Some(s) => f(s),
            None => Err(SessionError::UnknownProducer.into()),
        }
    }

    /// Appends a transactional batch to `topic`/`partition` in the open transaction
    /// of `id`, after the session's checks, by `append` (run under the session's
    /// lock).
    ///
    /// # Errors
    /// The Kafka error code and a message.
    pub fn produce<T>(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: u32,
        append: impl FnOnce(&mut TransactionalProducer) -> Result<T, (i16, String)>,
    ) -> Result<T, (i16, String)> {
        // Produce answers INVALID_PRODUCER_EPOCH to a fenced producer (Kafka's
        // rule: PRODUCER_FENCED is for the transaction APIs).
        let refused = |e: SessionError| {
            (
                e.code(0, 1),
                format!("transactional id {id:?}, producer id {producer_id}, epoch {epoch}: {e:?}"),
            )
        };
        let Some(cell) = self.existing(id) else {
            return Err(refused(SessionError::UnknownProducer));
        };
        let mut guard = lock(&cell);
        check(guard.as_ref(), producer_id, epoch).map_err(refused)?;
        let Some(s) = guard.as_mut() else {
            return Err(refused(SessionError::UnknownProducer));
        };
        if !s.open || !s.partitions.contains(&(topic.to_string(), partition)) {
            return Err((
                ResponseError::InvalidTxnState.code(),
                format!(
                    "{topic}/{partition} was not added to the transaction of {id:?} \
                     (AddPartitionsToTxn first)"
                ),
            ));
        }
        append(&mut s.producer)
    }
}

/// A refusal: the session's check, or the log's error.
#[derive(Debug)]
enum Refusal {
    Session(SessionError),
    Log(LogError),
}

impl From<SessionError> for Refusal {
    fn from(e: SessionError) -> Self {
        Refusal::Session(e)
    }
}

impl From<LogError> for Refusal {
    fn from(e: LogError) -> Self {
        Refusal::Log(e)
    }
}

impl Refusal {
    fn code(&self, version: i16, fenced_since: i16) -> i16 {
        match self {
            Refusal::Session(e) => e.code(version, fenced_since),
            Refusal::Log(LogError::ProducerFenced { .. }) => {
                SessionError::Fenced.code(version, fenced_since)
            }
            Refusal::Log(e) => {
                warn!("transaction request: {e}");
                error_code(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use brook_core::time::ManualClock;
    use brook_log::{LogOptions, TopicConfig};
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::group::Limits;

    struct Fixture {
        _dir: tempfile::TempDir,
        log: Log,
        producers: Producers,
        txns: Transactions,
        groups: Coordinator,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("orders", 2, TopicConfig::default())
            .expect("create");
        Fixture {
            _dir: dir,
            log,
            producers: Producers::new(ManualClock::new(1).shared()),
            txns: Transactions::default(),
            groups: Coordinator::new(Limits::default(), ManualClock::new(0).shared()),
        }
    }

    fn tid() -> TransactionalId {
        TransactionalId(StrBytes::from_static_str("writer"))
    }

    impl Fixture {
        fn init(&self) -> (i64, i16) {
            let r = self.txns.init_producer_id(
                &InitProducerIdRequest::default()
                    .with_transaction_timeout_ms(60_000)
                    .with_transactional_id(Some(tid()))
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
                &self.log,
                &self.producers,
            );
            assert_eq!(r.error_code, 0);
            (r.producer_id.0, r.producer_epoch)
        }

        fn add(&self, (pid, epoch): (i64, i16), partitions: Vec<i32>, version: i16) -> Vec<i16> {
            let r = self.txns.add_partitions(
                &AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(tid())
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(partitions)]),
                version,
                &self.log,
            );
            r.results_by_topic_v3_and_below[0]
                .results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
                .collect()
        }

        fn add_offsets(&self, (pid, epoch): (i64, i16)) -> i16 {
            self.txns
                .add_offsets(
                    &AddOffsetsToTxnRequest::default()
                        .with_transactional_id(tid())
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_group_id(GroupId(StrBytes::from_static_str("billing"))),
                    3,
                )
                .error_code
        }

        fn offsets(&self, (pid, epoch): (i64, i16), offset: i64) -> i16 {
            let r = self.txns.txn_offset_commit(
                &TxnOffsetCommitRequest::default()
                    .with_transactional_id(tid())
                    .with_group_id(GroupId(StrBytes::from_static_str("billing")))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_generation_id(-1)
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(1)
                            .with_committed_offset(offset)])]),
                3,
                &self.log,
                &self.groups,
            );
            r.topics[0].partitions[0].error_code
        }

        fn end(&self, (pid, epoch): (i64, i16), commit: bool, version: i16) -> i16 {
            self.txns
                .end_txn(
                    &EndTxnRequest::default()
                        .with_transactional_id(tid())
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_committed(commit),
                    version,
                )
                .error_code
        }

        fn committed(&self) -> Option<u64> {
            self.log
                .committed_offset("billing", &TopicPartition::new("orders", 1))
        }
    }

    #[test]
    fn a_transaction_timeout_of_zero_or_above_the_maximum_is_invalid() {
        let f = fixture();
        for timeout in [0, -1, 900_001] {
            let r = f.txns.init_producer_id(
                &InitProducerIdRequest::default()
                    .with_transaction_timeout_ms(timeout)
                    .with_transactional_id(Some(tid()))
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
                &f.log,
                &f.producers,
            );
            assert_eq!(
                r.error_code,
                ResponseError::InvalidTransactionTimeout.code(),
                "transaction_timeout_ms {timeout}"
            );
        }
        let r = f.txns.init_producer_id(
            &InitProducerIdRequest::default()
                .with_transaction_timeout_ms(900_000)
                .with_transactional_id(Some(tid()))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            &f.log,
            &f.producers,
        );
        assert_eq!(
            r.error_code, 0,
            "Kafka's transaction.max.timeout.ms itself is allowed"
        );
    }

    #[test]
    fn init_gives_the_ids_producer_id_with_the_epoch_bumped() {
        let f = fixture();
        let first = f.init();
        let second = f.init();
        assert_eq!((second.0, second.1), (first.0, first.1 + 1));
        // Without a transactional id: a fresh producer id each time, epoch 0.
        let idempotent = |f: &Fixture| {
            let r = f.txns.init_producer_id(
                &InitProducerIdRequest::default()
                    .with_transaction_timeout_ms(60_000)
                    .with_transactional_id(None)
                    .with_producer_id(ProducerId(-1)),
                &f.log,
                &f.producers,
            );
            (r.error_code, r.producer_id.0, r.producer_epoch)
        };
        let (a, b) = (idempotent(&f), idempotent(&f));
        assert_eq!((a.0, a.2, b.0, b.2), (0, 0, 0, 0));
        assert_ne!(a.1, b.1);
        assert_ne!(a.1, first.0);
    }

    #[test]
    fn an_older_epoch_is_fenced_and_an_unknown_producer_is_no_mapping() {
        let f = fixture();
        let old = f.init();
        let new = f.init();
        let fenced = ResponseError::ProducerFenced.code();
        assert_eq!(f.add(old, vec![0], 3), vec![fenced]);
        // Before KIP-588's versions: INVALID_PRODUCER_EPOCH.
        assert_eq!(
            f.add(old, vec![0], 1),
            vec![ResponseError::InvalidProducerEpoch.code()]
        );
        assert_eq!(f.end(old, true, 3), fenced);
        let mapping = ResponseError::InvalidProducerIdMapping.code();
        assert_eq!(f.add((new.0 + 1, new.1), vec![0], 3), vec![mapping]);
        // KIP-360: an InitProducerId naming a session that is no longer current.
        let r = f.txns.init_producer_id(
            &InitProducerIdRequest::default()
                .with_transaction_timeout_ms(60_000)
                .with_transactional_id(Some(tid()))
                .with_producer_id(ProducerId(old.0))
                .with_producer_epoch(old.1),
            &f.log,
            &f.producers,
        );
        assert_eq!(r.error_code, fenced);
        assert_eq!(f.add(new, vec![0], 3), vec![0]);
    }

    #[test]
    fn requests_out_of_order_get_invalid_txn_state_and_unknown_partitions_stop_the_add() {
        let f = fixture();
        let s = f.init();
        let invalid = ResponseError::InvalidTxnState.code();
        assert_eq!(f.end(s, true, 3), invalid);
        assert_eq!(f.add_offsets(s), 0);
        assert_eq!(f.end(s, false, 3), 0);
        // Offsets without AddOffsetsToTxn in this transaction.
        assert_eq!(f.add(s, vec![0], 3), vec![0]);
        assert_eq!(f.offsets(s, 3), invalid);
        assert_eq!(
            f.add(s, vec![1, 9], 3),
            vec![
                ResponseError::OperationNotAttempted.code(),
                ResponseError::UnknownTopicOrPartition.code()
            ]
        );
    }

    #[test]
    fn offsets_are_committed_with_the_transaction_only() {
        let f = fixture();
        let s = f.init();
        assert_eq!(f.add_offsets(s), 0);
        assert_eq!(f.offsets(s, 3), 0);
        assert_eq!(f.end(s, false, 3), 0);
        assert_eq!(f.committed(), None);
        assert_eq!(f.add_offsets(s), 0);
        assert_eq!(f.offsets(s, 4), 0);
        assert_eq!(f.committed(), None);
        assert_eq!(f.end(s, true, 3), 0);
        assert_eq!(f.committed(), Some(4));
        // A retried EndTxn of the same outcome succeeds; the other one does not.
        assert_eq!(f.end(s, true, 3), 0);
        assert_eq!(f.end(s, false, 3), ResponseError::InvalidTxnState.code());
    }
}
