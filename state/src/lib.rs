//! Keyed state for brook operators.
//!
//! - [`backend`]: the [`KeyedStateBackend`] trait, a byte-level store addressed by
//!   state name, key group, key and namespace (the layout `key group | key |
//!   namespace` keeps a key-group range contiguous, ready for rescaling and for
//!   RocksDB), and [`MemoryStateBackend`], its in-memory implementation.
//! - [`keyed`]: [`KeyedStateStore`], which scopes a backend to the current key and
//!   namespace, and the typed handles [`ValueState`], [`ListState`] and [`MapState`]
//!   declared with [`StateDescriptor`]s (values are encoded with bincode).
//! - [`snapshot`]: keyed state and timers written per key group into checkpoints and
//!   read back, at any parallelism.
//! - [`timers`]: the [`TimerService`] of event-time and processing-time timers per
//!   key and namespace.
//! - [`table`]: typed [`NamespacedTable`]s, `(key, namespace) -> value`, kept as Rust
//!   values on the heap for in-memory backends ([`HeapTable`]) or encoded in any byte
//!   backend ([`BytesTable`]); picked by the backend's [`BackendKind`].
//! - [`timer_queue`]: a typed [`TimerQueue`] of `(time, key, namespace)` with lazy
//!   deletion, for operators that track their timers in their own state (windows).
//!
//! - [`rocksdb`](crate::rocksdb): [`RocksDbStateBackend`], keyed state in a RocksDB
//!   instance per subtask, with native (hard-linked, incremental) checkpoints.
//!
//! Must not know about: operators, the engine, the log or any connector. RocksDB types
//! stay inside the `rocksdb` module.

pub mod backend;
pub mod keyed;
pub mod rocksdb;
pub mod snapshot;
pub mod table;
pub mod timer_queue;
pub mod timers;

pub use crate::rocksdb::{RocksDbOptions, RocksDbStateBackend};
pub use backend::{BackendKind, KeyedStateBackend, MemoryStateBackend};
pub use keyed::{
    AggregatingState, AggregatingStateDescriptor, KeyedStateStore, ListState, MapState,
    ReducingState, ReducingStateDescriptor, StateDescriptor, StateTtl, TtlUpdate, ValueState,
};
pub use table::{
    namespaced_table, read_native_entries, BytesTable, FastHashMap, HeapTable, NamespaceMajorTable,
    NamespacedTable,
};
pub use timer_queue::TimerQueue;
pub use timers::{TimeDomain, Timer, TimerService};

use thiserror::Error;

/// A state operation failed.
#[derive(Debug, Error)]
pub enum StateError {
    /// A value could not be encoded or decoded (a state schema changed, or a bug).
    #[error("state {state:?}: cannot {op} value: {source}")]
    Codec {
        /// The state's name.
        state: String,
        /// `encode` or `decode`.
        op: &'static str,
        /// The codec's error.
        source: bincode::Error,
    },
    /// No current key is set (state used outside of a keyed context).
    #[error("state {0:?} used without a current key")]
    NoCurrentKey(String),
    /// The RocksDB state backend failed to open, restore or checkpoint (RocksDB's or
    /// the file system's error, as text).
    #[error("RocksDB state backend at {}: cannot {op}: {message}", path.display())]
    RocksDb {
        /// The instance's (or the checkpoint's) directory.
        path: std::path::PathBuf,
        /// What failed, for example `open` or `checkpoint`.
        op: &'static str,
        /// The error.
        message: String,
    },
}

/// Result of state operations.
pub type Result<T, E = StateError> = std::result::Result<T, E>;
