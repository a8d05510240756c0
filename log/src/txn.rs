//! Transactions: atomic writes to several partitions, after Kafka's design (KIP-98).
//!
//! A *transactional id* (a name with the same rules as a topic name) identifies one
//! logical writer across restarts. [`Log::init_transactions`] starts a *session* for
//! it: the id gets a producer id (once) and its *epoch* is bumped, which fences every
//! older session — their appends, prepares and commits fail with
//! [`LogError::ProducerFenced`], as Kafka's `initTransactions`. Starting a session
//! also aborts the id's transactions that were open but not prepared (a crashed or
//! fenced writer's leftovers); prepared ones stay, to be committed or aborted by name.
//!
//! A session writes one transaction at a time ([`TransactionalProducer::begin`],
//! [`TransactionalProducer::send`]). Its records go into the partitions at once, with
//! dense offsets as any record, in batches marked with the producer id, epoch and the
//! transaction's number ([`crate::format`]). [`TransactionalProducer::prepare`] ends
//! the writing: the data is fsynced and the transaction recorded as *prepared*; the
//! session may begin the next one while it waits. [`TransactionalProducer::commit`]
//! or [`TransactionalProducer::abort`] then writes a *marker* (a control record) into
//! every partition the transaction touched; markers take an offset but are never
//! returned to readers. An abort also enters the transaction's offset range in the
//! partition's aborted-transaction index.
//!
//! Readers ([`crate::IsolationLevel`]): read-committed readers stop at the *last
//! stable offset* (the first offset of the earliest undecided transaction, or the log
//! end offset) and skip records of aborted transactions; read-uncommitted readers see
//! every data record up to the log end offset. Appends without a transaction are
//! visible at once, as before (they are committed by definition).
//!
//! # Durability
//!
//! The coordinator's state per transactional id (producer id, epoch, undecided
//! transactions with their partitions and first offsets, and the outcome of the last
//! [`RECENT_OUTCOMES`] transactions) is kept in `<data-dir>/transactions/<id>.json`,
//! written to a temporary file, fsynced and renamed. A transaction's partitions are
//! recorded before its first record is appended to them, prepared after its data is
//! fsynced, and decided in two steps (`committing`/`aborting`, then removed once all
//! markers are written and fsynced). On open the log rebuilds each partition's
//! undecided transactions (and so its last stable offset) from this state and
//! finishes any decision that a crash interrupted.
//!
//! # Timeout
//!
//! Each session has a `transaction.timeout.ms` (Kafka's name), given when it starts
//! ([`Log::init_transactions_with_timeout`]; default
//! [`DEFAULT_TRANSACTION_TIMEOUT_MS`], Kafka's producer default) and at most
//! [`MAX_TRANSACTION_TIMEOUT_MS`] (Kafka's broker `transaction.max.timeout.ms`; a
//! larger one is refused with [`LogError::InvalidTransactionTimeout`]). A
//! transaction records, durably, when its first partition was added (the log's
//! clock) and its session's timeout. A transaction still undecided (open *or*
//! prepared) once that timeout has passed is aborted by the log's maintenance
//! ([`Log::expire_transactions`]; the rule is in `log/src/txn_timeout.rs`), as Kafka's
//! coordinator does: markers written, the aborted index updated, the last stable
//! offset advanced. When it belonged to the id's current session the epoch is bumped,
//! so the late writer is fenced ([`LogError::ProducerFenced`]). Committing an
//! expired transaction later (a restore) fails with
//! [`LogError::TransactionTimedOut`]. So a writer that crashes holds the last stable
//! offset of its partitions back at most for its timeout, not until its
//! transactional id gets a new session.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), brook_log::LogError> {
//! use brook_log::{IsolationLevel, Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default())?;
//! let topic = log.create_topic("t", 1, TopicConfig::default())?;
//! let mut writer = log.init_transactions("my-writer")?;
//! writer.begin()?;
//! writer.send("t", vec![ProducerRecord::new("a")])?;
//! let handle = writer.prepare()?;                 // durable, not yet visible
//! let p = topic.partition(0)?;
//! assert!(p.read(0, ReadLimit::default())?.is_empty());
//! writer.commit(&handle)?;                        // visible to read-committed readers
//! assert_eq!(p.read(0, ReadLimit::default())?.len(), 1);
//! assert_eq!(p.log_end_offset(), 2);              // the record and the commit marker
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_core::names::{validate_group_id, validate_name};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::{IoContext, LogError, Result};
use crate::format::{ControlType, ProducerMark, TxnMark};
use crate::group::TopicPartition;
use crate::log::Log;
use crate::partition::{sync_dir, AppendInfo, Partition};
use crate::record::ProducerRecord;
use crate::txn_timeout::{expiry, Expiry};

/// How many decided transactions per transactional id keep their outcome, so that
/// committing one of them again is answered by [`CommitOutcome::AlreadyCommitted`]
/// (or an error for an aborted one). A restore commits the transactions of the
/// latest checkpoint, a few transactions back; the state file is rewritten (and
/// fsynced) at every step of a transaction, so it is kept small.
pub const RECENT_OUTCOMES: usize = 100;

/// Version of the coordinator's state files.
const STATE_VERSION: u32 = 1;

/// A session's `transaction.timeout.ms` when none is given (ms): 60000, Kafka's
/// producer default.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// The largest `transaction.timeout.ms` a session may ask for (ms): 900000 (15
/// minutes), Kafka's broker default `transaction.max.timeout.ms`.
pub const MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;

fn default_timeout_ms() -> u64 {
    DEFAULT_TRANSACTION_TIMEOUT_MS
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Names one transaction: what a checkpoint stores to commit it after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransactionHandle {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id the transaction was written with.
    pub producer_id: u64,
    /// The epoch of the session that wrote it.
    pub epoch: u16,
    /// The transaction's number among the producer id's transactions.
    pub sequence: u64,
}

/// What [`TransactionalProducer::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The commit markers were written now.
    Committed,
    /// The transaction had been committed before (committing is idempotent).
    AlreadyCommitted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Accepting records (in the session that began it).
    Open,
    /// Data fsynced; waiting for commit or abort.
    Prepared,
    /// Decided to commit; markers being written.
    Committing,
    /// Decided to abort; markers being written.
    Aborting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Committed,
    Aborted,
    /// Aborted by the coordinator after the transaction's timeout (ms).
    TimedOut {
        timeout_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TxnPartition {
    topic: String,
    partition: u32,
    /// The log end offset when the transaction was added to the partition.
    first_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TxnEntry {
    pub(crate) producer_id: u64,
    pub(crate) sequence: u64,
    /// Epoch of the session that began it.
    pub(crate) epoch: u16,
    pub(crate) status: Status,
    pub(crate) partitions: Vec<TxnPartition>,
    /// Group offsets sent with the transaction (Kafka's `sendOffsetsToTransaction`):
    /// written to the groups' committed offsets when it commits, dropped when it
    /// aborts. Absent in state files of transactions without offsets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) offsets: Vec<TxnOffset>,
    /// When its first partition was added (the log's clock, ms), as Kafka's
    /// `txnStartTimestamp`; `None` while it has none (it holds nothing back). State
    /// files written before timeouts existed lack it: the log's open fills in the
    /// time of the open.
    #[serde(default)]
    pub(crate) began_ms: Option<i64>,
    /// Its session's `transaction.timeout.ms`.
    #[serde(default = "default_timeout_ms")]
    pub(crate) timeout_ms: u64,
    /// The coordinator aborts it because its timeout passed (kept through a crash
    /// between that decision and the markers, so its outcome says so).
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) timed_out: bool,
}

/// One group offset of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TxnOffset {
    group: String,
    topic: String,
    partition: u32,
    /// The next offset to read, as a commit.
    offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RecentOutcome {
    producer_id: u64,
    sequence: u64,
    outcome: Outcome,
}

/// The durable state of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdState {
    version: u32,
    transactional_id: String,
    producer_id: u64,
    epoch: u16,
    next_sequence: u64,
    transactions: Vec<TxnEntry>,
    recent: VecDeque<RecentOutcome>,
}

impl IdState {
    fn find(&self, producer_id: u64, sequence: u64) -> Option<usize> {
        self.transactions
            .iter()
            .position(|t| t.producer_id == producer_id && t.sequence == sequence)
    }

    fn outcome(&self, producer_id: u64, sequence: u64) -> Option<Outcome> {
        self.recent
            .iter()
            .find(|r| r.producer_id == producer_id && r.sequence == sequence)
            .map(|r| r.outcome)
    }

    fn handle(&self, t: &TxnEntry) -> TransactionHandle {
        TransactionHandle {
            transactional_id: self.transactional_id.clone(),
            producer_id: t.producer_id,
            epoch: t.epoch,
            sequence: t.sequence,
        }
    }
}

/// The transaction coordinator of a log: the state of every transactional id.
#[derive(Debug)]
pub(crate) struct TxnCoordinator {
    dir: PathBuf,
    ids: BTreeMap<String, IdState>,
    next_producer_id: u64,
}

impl TxnCoordinator {
    /// Loads the state files in `dir` (created if missing); leftover temporary files
    /// of an interrupted write are removed. Transactions stored without their start
    /// time (by a brook without timeouts) start their clock at `now_ms`.
    pub(crate) fn open(dir: &Path, now_ms: i64) -> Result<Self> {
        fs::create_dir_all(dir).ctx("create directory", dir)?;
        let mut ids = BTreeMap::new();
        let mut next_producer_id = 0;
        for entry in fs::read_dir(dir).ctx("list", dir)? {
            let entry = entry.ctx("list", dir)?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with(".tmp") {
                fs::remove_file(&path).ctx("remove", &path)?;
                continue;
            }
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            let bytes = fs::read(&path).ctx("read", &path)?;
            let mut st: IdState =
                serde_json::from_slice(&bytes).map_err(|e| LogError::Corrupt {
                    path: path.clone(),
                    position: 0,
                    reason: format!("transaction state does not parse: {e}"),
                })?;
            if st.version != STATE_VERSION || st.transactional_id != id {
                return Err(LogError::Corrupt {
                    path,
                    position: 0,
                    reason: format!(
                        "transaction state of version {} for id {:?} in the file of {id:?}",
                        st.version, st.transactional_id
                    ),
                });
            }
            let top = st
                .transactions
                .iter()
                .map(|t| t.producer_id)
                .chain(st.recent.iter().map(|r| r.producer_id))
                .chain(std::iter::once(st.producer_id))
                .max()
                .unwrap_or(st.producer_id);
            next_producer_id = next_producer_id.max(top + 1);
            for t in &mut st.transactions {
                if t.began_ms.is_none() && !t.partitions.is_empty() {
                    t.began_ms = Some(now_ms);
                }
            }
            ids.insert(id.to_string(), st);
        }
        Ok(TxnCoordinator {
            dir: dir.to_path_buf(),
            ids,
            next_producer_id,
        })
    }

    /// Writes one id's state atomically: temporary file, fsync, rename, fsync of the
    /// directory.
    fn store(&self, st: &IdState) -> Result<()> {
        let path = self.dir.join(format!("{}.json", st.transactional_id));
        let tmp = self.dir.join(format!("{}.json.tmp", st.transactional_id));
        let text = serde_json::to_vec(st).map_err(|e| LogError::Internal(e.to_string()))?;
        fs::write(&tmp, text).ctx("write", &tmp)?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .ctx("fsync", &tmp)?;
        fs::rename(&tmp, &path).ctx("rename", &path)?;
        sync_dir(&self.dir)
    }

    /// Every undecided transaction, for the partitions to rebuild their state on open:
    /// `(topic, partition, (producer id, sequence), first offset)`.
    pub(crate) fn undecided(&self) -> Vec<(String, u32, (u64, u64), u64)> {
        self.ids
            .values()
            .flat_map(|st| st.transactions.iter())
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        p.topic.clone(),
                        p.partition,
                        (t.producer_id, t.sequence),
                        p.first_offset,
                    )
                })
            })
            .collect()
    }

    /// Transactions whose decision a crash interrupted: `(id, producer id, sequence)`.
    pub(crate) fn interrupted(&self) -> Vec<(String, u64, u64)> {
        self.ids
            .values()
            .flat_map(|st| {
                st.transactions
                    .iter()
                    .filter(|t| matches!(t.status, Status::Committing | Status::Aborting))
                    .map(|t| (st.transactional_id.clone(), t.producer_id, t.sequence))
            })
            .collect()
    }

    /// Whether the transaction is being committed (rather than aborted).
    pub(crate) fn is_committing(&self, id: &str, producer_id: u64, sequence: u64) -> bool {
        self.ids.get(id).is_some_and(|st| {
            st.find(producer_id, sequence)
                .is_some_and(|i| st.transactions[i].status == Status::Committing)
        })
    }

    /// The transactional ids known, sorted.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.ids.keys().cloned().collect()
    }

    fn state(&self, id: &str) -> Result<&IdState> {
        self.ids
            .get(id)
            .ok_or_else(|| LogError::InvalidTransactionState {
                transactional_id: id.to_string(),
                sequence: u64::MAX,
                reason: "unknown transactional id".into(),
            })
    }

    /// Checks that the session `(producer_id, epoch)` is the id's current one.
    fn check_session(&self, id: &str, producer_id: u64, epoch: u16) -> Result<&IdState> {
        let st = self.state(id)?;
        if st.producer_id != producer_id || st.epoch != epoch {
            return Err(LogError::ProducerFenced {
                transactional_id: id.to_string(),
                epoch,
                current_epoch: st.epoch,
            });
        }
        Ok(st)
    }
}

/// Looks up a partition a transaction touched; `None` when its topic was deleted
/// meanwhile (nothing to mark there any more).
fn lookup(log: &Log, topic: &str, partition: u32) -> Result<Option<Arc<Partition>>> {
    match log.topic(topic).and_then(|t| t.partition(partition)) {
        Ok(p) => Ok(Some(p)),
        Err(LogError::UnknownTopic(_) | LogError::UnknownPartition { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Decides transaction `(producer_id, sequence)` of `id`: records the decision, writes
/// the markers into its partitions, then forgets it (keeping the outcome). Redoing an
/// interrupted decision is safe: partitions already marked are left alone.
pub(crate) fn decide(
    log: &Log,
    coord: &mut TxnCoordinator,
    id: &str,
    producer_id: u64,
    sequence: u64,
    commit: bool,
) -> Result<()> {
    let Some(st) = coord.ids.get_mut(id) else {
        return Ok(());
    };
    let Some(i) = st.find(producer_id, sequence) else {
        return Ok(());
    };
    let decided = if commit {
        Status::Committing
    } else {
        Status::Aborting
    };
    if st.transactions[i].status != decided {
        st.transactions[i].status = decided;
        let snapshot = st.clone();
        coord.store(&snapshot)?;
    }
    let Some(st) = coord.ids.get(id) else {
        return Ok(());
    };
    let t = st.transactions[i].clone();
    let mark = TxnMark {
        producer_id,
        epoch: st.epoch,
        sequence,
    };
    let control = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    for p in &t.partitions {
        if let Some(part) = lookup(log, &p.topic, p.partition)? {
            part.end_txn(mark, control)?;
        }
    }
    // The offsets become committed with the transaction; written again when a crash
    // interrupted the decision (a commit of the same offsets changes nothing).
    if commit {
        let mut by_group: BTreeMap<&str, Vec<(TopicPartition, u64)>> = BTreeMap::new();
        for o in &t.offsets {
            by_group
                .entry(&o.group)
                .or_default()
                .push((TopicPartition::new(o.topic.clone(), o.partition), o.offset));
        }
        for (group, offsets) in by_group {
            log.write_group_offsets(group, &offsets)?;
        }
    }
    let Some(st) = coord.ids.get_mut(id) else {
        return Ok(());
    };
    st.transactions.remove(i);
    st.recent.push_back(RecentOutcome {
        producer_id,
        sequence,
        outcome: if commit {
            Outcome::Committed
        } else if t.timed_out {
            Outcome::TimedOut {
                timeout_ms: t.timeout_ms,
            }
        } else {
            Outcome::Aborted
        },
    });
    while st.recent.len() > RECENT_OUTCOMES {
        st.recent.pop_front();
    }
    let snapshot = st.clone();
    coord.store(&snapshot)?;
    info!(
        transactional_id = id,
        producer_id,
        sequence,
        partitions = t.partitions.len(),
        outcome = if commit {
            "commit"
        } else if t.timed_out {
            "abort (timed out)"
        } else {
            "abort"
        },
        "transaction decided"
    );
    Ok(())
}

/// Bumps the id's epoch, which fences its current session; an exhausted epoch gets
/// a new producer id, as Kafka does.
fn bump_epoch(st: &mut IdState, next_producer_id: &mut u64) {
    if st.epoch == u16::MAX {
        st.producer_id = *next_producer_id;
        *next_producer_id += 1;
        st.epoch = 0;
    } else {
        st.epoch += 1;
    }
}

impl Log {
    /// Starts a new writer session for `transactional_id` with Kafka's default
    /// `transaction.timeout.ms` ([`DEFAULT_TRANSACTION_TIMEOUT_MS`]); see
    /// [`Log::init_transactions_with_timeout`].
    ///
    /// # Errors
    /// As [`Log::init_transactions_with_timeout`].
    pub fn init_transactions(&self, transactional_id: &str) -> Result<TransactionalProducer> {
        self.init_transactions_with_timeout(transactional_id, DEFAULT_TRANSACTION_TIMEOUT_MS)
    }

    /// Starts a new writer session for `transactional_id`, as Kafka's
    /// `initTransactions`: the id gets a producer id the first time, and its epoch is
    /// bumped, which fences every older session of the id (their calls fail with
    /// [`LogError::ProducerFenced`]). Transactions of the id that are open but not
    /// prepared are aborted; prepared ones stay, for the new session to commit
    /// ([`TransactionalProducer::commit`]) or abort by handle.
    ///
    /// `timeout_ms` is the session's `transaction.timeout.ms`: a transaction it
    /// begins that is still undecided (open or prepared) that long after its first
    /// record is aborted by the log (see the [module docs](self#timeout)).
    ///
    /// # Errors
    /// [`LogError::InvalidName`] for a bad id, [`LogError::InvalidTransactionTimeout`]
    /// for a timeout of 0 or above [`MAX_TRANSACTION_TIMEOUT_MS`], I/O errors.
    pub fn init_transactions_with_timeout(
        &self,
        transactional_id: &str,
        timeout_ms: u64,
    ) -> Result<TransactionalProducer> {
        validate_name("transactional id", transactional_id)?;
        if timeout_ms == 0 || timeout_ms > MAX_TRANSACTION_TIMEOUT_MS {
            return Err(LogError::InvalidTransactionTimeout {
                transactional_id: transactional_id.to_string(),
                timeout_ms,
                max_ms: MAX_TRANSACTION_TIMEOUT_MS,
            });
        }
        let mut coord = self.txn_coordinator()?;
        let coord = &mut *coord;
        let st = match coord.ids.get(transactional_id) {
            Some(old) => {
                let mut st = old.clone();
                bump_epoch(&mut st, &mut coord.next_producer_id);
                st
            }
            None => {
                let st = IdState {
                    version: STATE_VERSION,
                    transactional_id: transactional_id.to_string(),
                    producer_id: coord.next_producer_id,
                    epoch: 0,
                    next_sequence: 0,
                    transactions: Vec::new(),
                    recent: VecDeque::new(),
                };
                coord.next_producer_id += 1;
                st
            }
        };
        coord.store(&st)?;
        let (producer_id, epoch) = (st.producer_id, st.epoch);
        let leftovers: Vec<(u64, u64, bool)> = st
            .transactions
            .iter()
            .filter(|t| t.status != Status::Prepared)
            .map(|t| (t.producer_id, t.sequence, t.status == Status::Committing))
            .collect();
        coord.ids.insert(transactional_id.to_string(), st);
        for (pid, seq, commit) in leftovers {
            if !commit {
                warn!(
                    transactional_id,
                    producer_id = pid,
                    sequence = seq,
                    "aborting a transaction left open by an earlier session"
                );
            }
            decide(self, coord, transactional_id, pid, seq, commit)?;
        }
        Ok(TransactionalProducer {
            log: self.clone(),
            id: transactional_id.to_string(),
            producer_id,
            epoch,
            timeout_ms,
            current: None,
        })
    }

    /// Aborts every transaction whose `transaction.timeout.ms` has passed at `now_ms`
    /// (the rule: `log/src/txn_timeout.rs`), as Kafka's coordinator does: markers
    /// written, the partitions' aborted index updated, their last stable offsets
    /// advanced; an id whose current session owned an expired transaction gets its
    /// epoch bumped (the late writer is fenced) and that session's other open
    /// transactions are aborted too. The log's maintenance calls this at its clock's
    /// time ([`Log::run_maintenance`]).
    ///
    /// Returns the expired transactions (not the orphaned ones aborted with them).
    ///
    /// # Errors
    /// I/O errors (the first met; the other ids are still processed).
    pub fn expire_transactions(&self, now_ms: i64) -> Result<Vec<TransactionHandle>> {
        let mut coord = self.txn_coordinator()?;
        let coord = &mut *coord;
        let decisions: Vec<(String, Expiry)> = coord
            .ids
            .values()
            .filter_map(|st| {
                expiry((st.producer_id, st.epoch), &st.transactions, now_ms)
                    .map(|e| (st.transactional_id.clone(), e))
            })
            .collect();
        let mut expired = Vec::new();
        let mut first_err = None;
        for (id, e) in decisions {
            match self.carry_out_expiry(coord, &id, &e) {
                Ok(handles) => expired.extend(handles),
                Err(err) => {
                    warn!(transactional_id = %id, error = %err, "aborting timed-out transactions failed");
                    first_err.get_or_insert(err);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(expired),
        }
    }

    /// Records the expiry of `e` for `id` (the fence first: the late writer can do
    /// nothing more once the state is stored), then aborts the transactions.
    fn carry_out_expiry(
        &self,
        coord: &mut TxnCoordinator,
        id: &str,
        e: &Expiry,
    ) -> Result<Vec<TransactionHandle>> {
        let Some(old) = coord.ids.get(id) else {
            return Ok(Vec::new());
        };
        let mut st = old.clone();
        let mut handles = Vec::new();
        for t in &mut st.transactions {
            if e.expired.contains(&(t.producer_id, t.sequence)) {
                t.timed_out = true;
                handles.push(TransactionHandle {
                    transactional_id: id.to_string(),
                    producer_id: t.producer_id,
                    epoch: t.epoch,
                    sequence: t.sequence,
                });
                warn!(
                    transactional_id = id,
                    producer_id = t.producer_id,
                    sequence = t.sequence,
                    status = ?t.status,
                    timeout_ms = t.timeout_ms,
                    fence = e.fence,
                    "aborting a transaction that passed its transaction.timeout.ms"
                );
            }
        }
        if e.fence {
            bump_epoch(&mut st, &mut coord.next_producer_id);
        }
        coord.store(&st)?;
        coord.ids.insert(id.to_string(), st);
        for &(producer_id, sequence) in e.expired.iter().chain(&e.orphaned) {
            decide(self, coord, id, producer_id, sequence, false)?;
        }
        Ok(handles)
    }

    /// The transactional ids that ever had a session in this log, sorted.
    pub fn transactional_ids(&self) -> Vec<String> {
        self.txn_coordinator().map(|c| c.ids()).unwrap_or_default()
    }
}

/// One writer session of a transactional id (see the [module docs](self)); made by
/// [`Log::init_transactions`]. Calls are synchronous (they append and fsync on the
/// calling thread).
#[derive(Debug)]
pub struct TransactionalProducer {
    log: Log,
    id: String,
    producer_id: u64,
    epoch: u16,
    /// The session's `transaction.timeout.ms`.
    timeout_ms: u64,
    /// The sequence of the transaction this session is writing.
    current: Option<u64>,
}

impl TransactionalProducer {
    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.id
    }

    /// The producer id.
    pub fn producer_id(&self) -> u64 {
        self.producer_id
    }

    /// This session's epoch.
    pub fn epoch(&self) -> u16 {
        self.epoch
    }

    /// This session's `transaction.timeout.ms`.
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    fn invalid(&self, sequence: u64, reason: impl Into<String>) -> LogError {
        LogError::InvalidTransactionState {
            transactional_id: self.id.clone(),
            sequence,
            reason: reason.into(),
        }
    }

    fn timed_out(&self, sequence: u64, timeout_ms: u64) -> LogError {
        LogError::TransactionTimedOut {
            transactional_id: self.id.clone(),
            sequence,
            timeout_ms,
        }
    }

    fn current_handle(&self, sequence: u64) -> TransactionHandle {
        TransactionHandle {
            transactional_id: self.id.clone(),
            producer_id: self.producer_id,
            epoch: self.epoch,
            sequence,
        }
    }

    /// The transaction this session is writing, if any.
    pub fn current(&self) -> Option<TransactionHandle> {
        self.current.map(|s| self.current_handle(s))
    }

    /// Begins a transaction (Kafka's `beginTransaction`).
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] when this
    /// session already has an open transaction.
    pub fn begin(&mut self) -> Result<TransactionHandle> {
        let mut coord = self.log.txn_coordinator()?;
        coord.check_session(&self.id, self.producer_id, self.epoch)?;
        if let Some(seq) = self.current {
            return Err(self.invalid(seq, "a transaction is already open in this session"));
        }
        // The new sequence is stored with the transaction's first partition: one that
        // never wrote needs no recovery, and its number may be reused after a crash.
        let Some(st) = coord.ids.get_mut(&self.id) else {
            return Err(self.invalid(u64::MAX, "unknown transactional id"));
        };
        let sequence = st.next_sequence;
        st.next_sequence += 1;
        st.transactions.push(TxnEntry {
            producer_id: self.producer_id,
            sequence,
            epoch: self.epoch,
            status: Status::Open,
            partitions: Vec::new(),
            offsets: Vec::new(),
            began_ms: None,
            timeout_ms: self.timeout_ms,
            timed_out: false,
        });
        self.current = Some(sequence);
        Ok(self.current_handle(sequence))
    }

    /// Appends `records` to `topic` inside the open transaction, each to the
    /// partition its key chooses (as [`crate::Topic::append`]), one batch per
    /// partition. The records are in the partitions at once but read-committed
    /// readers see them only once the transaction is committed.
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] without an
    /// open transaction; [`LogError::TransactionNotOpen`] when the transaction was
    /// aborted meanwhile by a newer session; as [`crate::Topic::append`].
    pub fn send(&mut self, topic: &str, records: Vec<ProducerRecord>) -> Result<Vec<AppendInfo>> {
        let by_partition = self.log.topic(topic)?.split_batch(records)?;
        let parts: Vec<u32> = by_partition.keys().copied().collect();
        let (mark, handles) = self.add_partitions(topic, &parts)?;
        let mut out = Vec::with_capacity(by_partition.len());
        for ((_, recs), p) in by_partition.into_iter().zip(handles) {
            out.push(p.append_txn(&recs, mark, None)?);
        }
        Ok(out)
    }

    /// Appends `records` to one partition inside the open transaction, as one batch.
    ///
    /// # Errors
    /// As [`TransactionalProducer::send`], and [`LogError::UnknownPartition`].
    pub fn send_to(
        &mut self,
        topic: &str,
        partition: u32,
        records: Vec<ProducerRecord>,
    ) -> Result<AppendInfo> {
        self.send_sequenced(topic, partition, records, None)
    }

    /// As [`TransactionalProducer::send_to`], for a Kafka producer's batch whose first
    /// record has sequence `base_sequence` (through the broker): stored with it, and
    /// the partition's producer state updated (see
    /// [`crate::Partition::append_with_producer`]).
    ///
    /// # Errors
    /// As [`TransactionalProducer::send_to`].
    pub fn send_sequenced(
        &mut self,
        topic: &str,
        partition: u32,
        records: Vec<ProducerRecord>,
        base_sequence: Option<i32>,
    ) -> Result<AppendInfo> {
        let (mark, handles) = self.add_partitions(topic, &[partition])?;
        let producer = base_sequence.map(|base_sequence| ProducerMark {
            producer_id: self.producer_id,
            epoch: self.epoch,
            base_sequence,
        });
        match handles.first() {
            Some(p) => p.append_txn(&records, mark, producer),
            None => Err(LogError::Internal("no partition handle".into())),
        }
    }

    /// Adds partitions to the open transaction (recording them durably before
    /// anything is appended to them) and returns the transaction's mark and the
    /// partitions, in the order given.
    fn add_partitions(
        &mut self,
        topic: &str,
        partitions: &[u32],
    ) -> Result<(TxnMark, Vec<Arc<Partition>>)> {
        let t = self.log.topic(topic)?;
        let handles = partitions
            .iter()
            .map(|p| t.partition(*p))
            .collect::<Result<Vec<_>>>()?;
        let mut coord = self.log.txn_coordinator()?;
        coord.check_session(&self.id, self.producer_id, self.epoch)?;
        let Some(seq) = self.current else {
            return Err(self.invalid(u64::MAX, "no transaction is open in this session"));
        };
        let mark = TxnMark {
            producer_id: self.producer_id,
            epoch: self.epoch,
            sequence: seq,
        };
        let key = (self.producer_id, seq);
        let Some(st) = coord.ids.get_mut(&self.id) else {
            return Err(self.invalid(seq, "unknown transactional id"));
        };
        let Some(i) = st.find(self.producer_id, seq) else {
            self.current = None;
            return Err(self.invalid(seq, "the transaction is no longer open"));
        };
        if st.transactions[i].status != Status::Open {
            return Err(self.invalid(seq, "the transaction is no longer open"));
        }
        let mut added = Vec::new();
        for (&partition, p) in partitions.iter().zip(&handles) {
            let known = st.transactions[i]
                .partitions
                .iter()
                .any(|x| x.topic == topic && x.partition == partition);
            if !known {
                let first_offset = p.add_txn(key)?;
                st.transactions[i].partitions.push(TxnPartition {
                    topic: topic.to_string(),
                    partition,
                    first_offset,
                });
                added.push(Arc::clone(p));
            }
        }
        // The timeout's clock starts with the first partition (Kafka's first
        // AddPartitionsToTxn): an empty transaction holds nothing back.
        let starts = st.transactions[i].began_ms.is_none() && !added.is_empty();
        if starts {
            st.transactions[i].began_ms = Some(self.log.options().clock.now_ms());
        }
        if !added.is_empty() {
            let snapshot = st.clone();
            if let Err(e) = coord.store(&snapshot) {
                if let Some(st) = coord.ids.get_mut(&self.id) {
                    let n = added.len();
                    let parts = &mut st.transactions[i].partitions;
                    parts.truncate(parts.len() - n);
                    if starts {
                        st.transactions[i].began_ms = None;
                    }
                }
                for p in &added {
                    p.forget_txn(key);
                }
                return Err(e);
            }
        }
        Ok((mark, handles))
    }

    /// Adds group offsets to the open transaction (Kafka's `sendOffsetsToTransaction`):
    /// they become `group`'s committed offsets when the transaction commits, in the
    /// same step as its markers, and are dropped when it aborts. A later offset for
    /// the same partition of the same group replaces an earlier one.
    ///
    /// # Errors
    /// [`LogError::InvalidName`] for a bad group name; [`LogError::ProducerFenced`];
    /// [`LogError::InvalidTransactionState`] without an open transaction; I/O errors.
    pub fn send_offsets(&mut self, group: &str, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        validate_group_id(group)?;
        let mut coord = self.log.txn_coordinator()?;
        coord.check_session(&self.id, self.producer_id, self.epoch)?;
        let Some(seq) = self.current else {
            return Err(self.invalid(u64::MAX, "no transaction is open in this session"));
        };
        let Some(st) = coord.ids.get_mut(&self.id) else {
            return Err(self.invalid(seq, "unknown transactional id"));
        };
        let Some(i) = st.find(self.producer_id, seq) else {
            self.current = None;
            return Err(self.invalid(seq, "the transaction is no longer open"));
        };
        let entry = &mut st.transactions[i];
        if entry.status != Status::Open {
            return Err(self.invalid(seq, "the transaction is no longer open"));
        }
        for (tp, offset) in offsets {
            entry.offsets.retain(|o| {
                !(o.group == group && o.topic == tp.topic && o.partition == tp.partition)
            });
            entry.offsets.push(TxnOffset {
                group: group.to_string(),
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: *offset,
            });
        }
        let snapshot = st.clone();
        coord.store(&snapshot)
    }

    /// Ends the writing of the open transaction: its data is fsynced in every
    /// partition it touched and it is recorded as prepared, so that it can be
    /// committed (or aborted) by handle, by this session or a later one of the same
    /// transactional id, also after a restart. The session can begin the next
    /// transaction at once.
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] without an
    /// open transaction; I/O errors.
    pub fn prepare(&mut self) -> Result<TransactionHandle> {
        let mut coord = self.log.txn_coordinator()?;
        coord.check_session(&self.id, self.producer_id, self.epoch)?;
        let Some(seq) = self.current else {
            return Err(self.invalid(u64::MAX, "no transaction is open in this session"));
        };
        let Some(st) = coord.ids.get_mut(&self.id) else {
            return Err(self.invalid(seq, "unknown transactional id"));
        };
        let Some(i) = st.find(self.producer_id, seq) else {
            self.current = None;
            return Err(self.invalid(seq, "the transaction is no longer open"));
        };
        let parts = st.transactions[i].partitions.clone();
        for p in &parts {
            if let Some(part) = lookup(&self.log, &p.topic, p.partition)? {
                part.seal_txn((self.producer_id, seq))?;
                part.flush()?;
            }
        }
        st.transactions[i].status = Status::Prepared;
        let handle = st.handle(&st.transactions[i]);
        let snapshot = st.clone();
        coord.store(&snapshot)?;
        self.current = None;
        Ok(handle)
    }

    /// Commits a transaction of this transactional id: one prepared by this or an
    /// earlier session (named by its handle), or this session's open one (prepared
    /// first). Idempotent: a transaction committed before gives
    /// [`CommitOutcome::AlreadyCommitted`].
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] for a
    /// handle of another transactional id, an aborted transaction, or one whose
    /// outcome is no longer known (older than the last [`RECENT_OUTCOMES`]); I/O
    /// errors.
    pub fn commit(&mut self, handle: &TransactionHandle) -> Result<CommitOutcome> {
        if handle.transactional_id != self.id {
            return Err(self.invalid(
                handle.sequence,
                format!(
                    "the handle belongs to transactional id {:?}",
                    handle.transactional_id
                ),
            ));
        }
        if self.current == Some(handle.sequence) && handle.producer_id == self.producer_id {
            self.prepare()?;
        }
        let mut coord = self.log.txn_coordinator()?;
        let st = coord.check_session(&self.id, self.producer_id, self.epoch)?;
        match st.find(handle.producer_id, handle.sequence) {
            Some(i) => {
                let status = st.transactions[i].status;
                match status {
                    Status::Prepared | Status::Committing => {}
                    Status::Open => {
                        return Err(self.invalid(
                            handle.sequence,
                            "the transaction is open in another session; prepare it first",
                        ))
                    }
                    Status::Aborting if st.transactions[i].timed_out => {
                        return Err(self.timed_out(handle.sequence, st.transactions[i].timeout_ms))
                    }
                    Status::Aborting => {
                        return Err(self.invalid(handle.sequence, "the transaction was aborted"))
                    }
                }
                decide(
                    &self.log,
                    &mut coord,
                    &self.id,
                    handle.producer_id,
                    handle.sequence,
                    true,
                )?;
                Ok(CommitOutcome::Committed)
            }
            None => match st.outcome(handle.producer_id, handle.sequence) {
                Some(Outcome::Committed) => Ok(CommitOutcome::AlreadyCommitted),
                Some(Outcome::Aborted) => {
                    Err(self.invalid(handle.sequence, "the transaction was aborted"))
                }
                Some(Outcome::TimedOut { timeout_ms }) => {
                    Err(self.timed_out(handle.sequence, timeout_ms))
                }
                None => Err(self.invalid(
                    handle.sequence,
                    "unknown transaction (never prepared, or decided too long ago to remember)",
                )),
            },
        }
    }

    /// Aborts a transaction of this transactional id by handle (prepared, or this
    /// session's open one). Idempotent for an aborted transaction.
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] for a
    /// committed transaction or a handle of another transactional id; I/O errors.
    pub fn abort(&mut self, handle: &TransactionHandle) -> Result<()> {
        if handle.transactional_id != self.id {
            return Err(self.invalid(
                handle.sequence,
                format!(
                    "the handle belongs to transactional id {:?}",
                    handle.transactional_id
                ),
            ));
        }
        let mut coord = self.log.txn_coordinator()?;
        let st = coord.check_session(&self.id, self.producer_id, self.epoch)?;
        match st.find(handle.producer_id, handle.sequence) {
            Some(i) if st.transactions[i].status == Status::Committing => {
                Err(self.invalid(handle.sequence, "the transaction is being committed"))
            }
            Some(_) => {
                if self.current == Some(handle.sequence) && handle.producer_id == self.producer_id {
                    self.current = None;
                }
                decide(
                    &self.log,
                    &mut coord,
                    &self.id,
                    handle.producer_id,
                    handle.sequence,
                    false,
                )
            }
            None => match st.outcome(handle.producer_id, handle.sequence) {
                Some(Outcome::Committed) => {
                    Err(self.invalid(handle.sequence, "the transaction was committed"))
                }
                _ => Ok(()),
            },
        }
    }

    /// Prepares and commits the open transaction (Kafka's `commitTransaction`).
    ///
    /// # Errors
    /// As [`TransactionalProducer::prepare`] and [`TransactionalProducer::commit`].
    pub fn commit_transaction(&mut self) -> Result<TransactionHandle> {
        let handle = self.prepare()?;
        self.commit(&handle)?;
        Ok(handle)
    }

    /// Aborts the open transaction (Kafka's `abortTransaction`).
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`]; [`LogError::InvalidTransactionState`] without an
    /// open transaction; I/O errors.
    pub fn abort_transaction(&mut self) -> Result<()> {
        let Some(seq) = self.current else {
            return Err(self.invalid(u64::MAX, "no transaction is open in this session"));
        };
        let handle = self.current_handle(seq);
        self.abort(&handle)
    }

    /// The prepared (not yet decided) transactions of this transactional id, oldest
    /// first.
    ///
    /// # Errors
    /// [`LogError::ProducerFenced`].
    pub fn prepared(&self) -> Result<Vec<TransactionHandle>> {
        let coord = self.log.txn_coordinator()?;
        let st = coord.check_session(&self.id, self.producer_id, self.epoch)?;
        Ok(st
            .transactions
            .iter()
            .filter(|t| t.status == Status::Prepared)
            .map(|t| st.handle(t))
            .collect())
    }
}
