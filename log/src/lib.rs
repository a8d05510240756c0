//! brook's embedded partitioned log: a local, Kafka-like log usable on its own.
//!
//! A [`Log`] keeps topics in a data directory. A [`Topic`] has N [`Partition`]s; a
//! partition is an append-only sequence of [`Record`]s with dense offsets 0, 1, 2, ...,
//! stored as segment files with an offset index and a time index
//! ([`format`](mod@format) describes the bytes). The semantics are those of
//! `docs/semantics.md` §1, after Apache Kafka:
//!
//! - keyed records go to `toPositive(murmur2(key)) % N` ([`partitioner`]), keyless
//!   ones by Kafka's sticky partitioner (one partition per batch, a random start);
//! - appends are batched (one append = one batch with a CRC32C) and durable according
//!   to the [`FsyncPolicy`]; after a crash a torn tail is truncated on open and
//!   corruption elsewhere is reported, never skipped;
//! - reads by offset with a [`ReadLimit`], or by timestamp; below the log start offset
//!   they fail with [`LogError::OffsetOutOfRange`];
//! - retention by time and size deletes whole closed segments; compaction
//!   (`cleanup.policy=compact`, [`Partition::compact`]) keeps the latest record per
//!   key instead, removing tombstones ([`ProducerRecord::tombstone`], null values)
//!   after `delete.retention.ms`, with offsets unchanged;
//! - consumer groups ([`group`]) assign partitions to members, fence stale commits by
//!   generation and keep committed offsets durably ([`offsets`]);
//! - transactions ([`txn`]) as Kafka's: a [`TransactionalProducer`] per transactional
//!   id, fenced by epoch, writes records that read-committed readers (the default,
//!   [`IsolationLevel`]) see only once the transaction is committed; a transaction
//!   can be prepared and committed later, also by a new session after a restart;
//!   one undecided past its session's `transaction.timeout.ms` is aborted by the
//!   log's maintenance and its writer fenced;
//! - an async [`Producer`] and [`Consumer`] on tokio.
//!
//! The log must not know about jobs, operators or the engine: connectors adapt it into
//! brook sources and sinks.
//!
//! # Example
//! ```
//! # fn main() -> Result<(), brook_log::LogError> {
//! use brook_log::{Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default())?;
//! let topic = log.create_topic("snacks", 3, TopicConfig::default())?;
//! topic.append(vec![ProducerRecord::keyed("mia", "apple")])?;
//! let p = topic.partition_for(Some(b"mia"));
//! let records = topic.partition(p)?.read(0, ReadLimit::default())?;
//! assert_eq!(&records[0].value[..], b"apple");
//! # Ok(()) }
//! ```

mod aborted;
mod cleaner;
mod client;
mod compaction;
mod error;
mod flush;
pub mod format;
pub mod group;
mod log;
pub mod offsets;
mod options;
mod partition;
pub mod partitioner;
mod prealloc;
mod producer_snapshot;
pub mod producer_state;
mod record;
pub mod reset;
mod segment;
mod topic;
pub mod txn;
mod txn_timeout;

pub use crate::aborted::AbortedTransaction;
pub use crate::cleaner::{CleanerFault, CompactionStats};
pub use crate::client::{Consumer, ConsumerConfig, OffsetReset, Producer};
pub use crate::error::{LogError, Result};
pub use crate::format::{ControlType, HeaderRef, HeadersRef, ProducerMark, RecordRef, TxnMark};
pub use crate::group::{
    AssignmentStrategy, CommitIdentity, GroupError, Membership, TopicPartition,
};
pub use crate::log::{Log, PartitionLag};
pub use crate::options::{
    CleanupPolicy, FsyncPolicy, LogOptions, Ratio, TopicConfig, MAX_SEGMENT_BYTES,
};
pub use crate::partition::{
    AppendInfo, IsolationLevel, Partition, PartitionInfo, ReadLimit, ReadSummary, StoredRead,
};
pub use crate::producer_state::{ProducerEntry, ProducerStates, SequenceRange};
pub use crate::record::{ConsumerRecord, Header, ProducerRecord, Record};
pub use crate::reset::{OffsetResetRow, ResetTo};
pub use crate::topic::{Topic, TopicInfo};
pub use crate::txn::{
    CommitOutcome, TransactionHandle, TransactionalProducer, DEFAULT_TRANSACTION_TIMEOUT_MS,
    MAX_TRANSACTION_TIMEOUT_MS,
};
