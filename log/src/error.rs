//! The log's error type.

use std::io;
use std::path::PathBuf;

use brook_core::names::InvalidName;
use thiserror::Error;

use crate::group::GroupError;
use crate::offsets::OffsetStoreError;

/// Everything that can go wrong in the log.
#[derive(Debug, Error)]
pub enum LogError {
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `write`, `fsync`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Another process (or another `Log` in this one) holds the data directory.
    #[error("data directory {path} is in use by another brook process (lock file {lock} is held); stop that process or use another --data-dir")]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A name that cannot be used for a topic or group.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// The topic does not exist.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// The topic already exists.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// The partition does not exist in the topic.
    #[error("topic {topic:?} has no partition {partition} (it has {partitions})")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many partitions the topic has.
        partitions: u32,
    },
    /// A configuration value is out of range; `field` names it.
    #[error("invalid {field}: {reason}")]
    InvalidConfig {
        /// The configuration field, as a user writes it.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A record is larger than the topic's `max_record_bytes`.
    #[error("record of {size} bytes at batch position {index} exceeds the maximum record size of {max} bytes")]
    RecordTooLarge {
        /// Position of the record in the appended batch (0-based).
        index: usize,
        /// Its encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A record the topic cannot take, such as a keyless record for a compacted topic
    /// (as Kafka's `InvalidRecordException`, INVALID_RECORD).
    #[error("record at batch position {index} refused by topic {topic:?}: {reason}")]
    InvalidRecord {
        /// The topic.
        topic: String,
        /// Position of the record in the appended batch (0-based).
        index: usize,
        /// Why.
        reason: String,
    },
    /// A read below the log start offset (data deleted by retention), as Kafka's
    /// `OffsetOutOfRange`.
    #[error("offset {requested} is out of range for {topic}-{partition}: the log starts at {log_start} and ends at {log_end}")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The offset asked for.
        requested: u64,
        /// The earliest offset still stored.
        log_start: u64,
        /// The offset the next record will get.
        log_end: u64,
    },
    /// A consumer group's position (its committed offset) on a partition lies outside
    /// [log start, log end] and the consumer's `auto.offset.reset` is `none`, as a Kafka
    /// consumer's `NoOffsetForPartitionException`/`OffsetOutOfRangeException`.
    #[error("group {group:?}: offset {offset} of {topic}-{partition} is out of range (the log starts at {log_start} and ends at {log_end}) and auto.offset.reset is none; move it with `brook group reset-offsets` or consume with --auto-offset-reset earliest|latest")]
    GroupOffsetOutOfRange {
        /// The consumer group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The group's offset there.
        offset: u64,
        /// The earliest offset still stored.
        log_start: u64,
        /// The offset the next record will get.
        log_end: u64,
    },
    /// Stored data failed validation somewhere other than a torn tail; brook refuses to
    /// skip it silently.
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte position of the first bad batch.
        position: u64,
        /// What was wrong (CRC mismatch, bad length, ...).
        reason: String,
    },
    /// A consumer-group operation was refused.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// Committed offsets could not be stored or loaded.
    #[error(transparent)]
    Offsets(#[from] OffsetStoreError),
    /// A transactional writer whose epoch is older than the transactional id's current
    /// one: a newer session was started for the id, or the coordinator aborted one of
    /// the writer's transactions after its `transaction.timeout.ms` (and bumped the
    /// epoch), as Kafka's `ProducerFenced`.
    #[error("transactional id {transactional_id:?}: this writer (epoch {epoch}) was fenced (the id is at epoch {current_epoch}: a newer session started, or a transaction of this writer passed its transaction.timeout.ms and was aborted)")]
    ProducerFenced {
        /// The transactional id.
        transactional_id: String,
        /// The writer's epoch.
        epoch: u16,
        /// The id's current epoch.
        current_epoch: u16,
    },
    /// An append for a transaction that does not accept appends in the partition
    /// (it was prepared, aborted or committed, or its writer was fenced).
    #[error("transaction {sequence} of producer {producer_id} is not open for appends to {topic}-{partition}")]
    TransactionNotOpen {
        /// The producer id.
        producer_id: u64,
        /// The transaction's number.
        sequence: u64,
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },
    /// A transaction operation that the transaction's state does not allow, such as
    /// committing an aborted transaction, beginning a second one while one is open,
    /// or sending without one (as Kafka's `InvalidTxnState`).
    #[error("transactional id {transactional_id:?}, transaction {sequence}: {reason}")]
    InvalidTransactionState {
        /// The transactional id.
        transactional_id: String,
        /// The transaction's number (`u64::MAX` when there is none).
        sequence: u64,
        /// What was wrong.
        reason: String,
    },
    /// A session asked for a `transaction.timeout.ms` outside 1 ..= `max_ms`
    /// ([`crate::txn::MAX_TRANSACTION_TIMEOUT_MS`]), as Kafka's
    /// `INVALID_TRANSACTION_TIMEOUT`.
    #[error("transactional id {transactional_id:?}: transaction.timeout.ms {timeout_ms} is not between 1 and the log's transaction.max.timeout.ms {max_ms}")]
    InvalidTransactionTimeout {
        /// The transactional id.
        transactional_id: String,
        /// The timeout asked for (ms).
        timeout_ms: u64,
        /// The largest timeout accepted (ms).
        max_ms: u64,
    },
    /// A transaction to commit was aborted by the coordinator because it stayed
    /// undecided longer than its `transaction.timeout.ms` (as Kafka's coordinator
    /// does): its records are gone for read-committed readers, so a restore that needs
    /// it fails rather than silently losing them.
    #[error("transactional id {transactional_id:?}, transaction {sequence}: aborted by the log because it stayed undecided longer than its transaction.timeout.ms ({timeout_ms} ms); its records are lost (restore sooner, or give the sink a longer transaction.timeout.ms)")]
    TransactionTimedOut {
        /// The transactional id.
        transactional_id: String,
        /// The transaction's number.
        sequence: u64,
        /// Its timeout (ms).
        timeout_ms: u64,
    },
    /// A broken invariant inside the log (a bug), such as a panicked blocking task.
    #[error("internal error: {0}")]
    Internal(String),
    /// The log was closed.
    #[error("the log is closed")]
    Closed,
}

/// The log's result type.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// Adds the operation and path to an [`io::Error`].
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| LogError::Io {
            op,
            path: path.to_path_buf(),
            source,
        })
    }
}
