//! brook's runtime.
//!
//! - `api`: the builder API in Flink's vocabulary, re-exported as [`environment`]
//!   ([`StreamEnvironment`], [`DataStream`], [`KeyedStream`]), [`window`] and [`join`];
//!   nothing below imports it.
//! - `graph`: the job graph of sources, operators and sinks with per-vertex
//!   parallelism and partitioned edges; `build`: the typed builders behind it.
//! - [`checkpoint`]: configuration and errors, task snapshots and their file format,
//!   storage and restore, the coordinator.
//! - `ids`, `config` ([`JobConfig`]): the names every other module may use.
//! - `plan`: the execution plan of a job graph, a pure function (each vertex's
//!   parallelism, each edge's partitioner, the chains of forward edges that run as one
//!   task); `execute`: builds channels and tasks from it, one thread per task, failure
//!   reporting ([`JobHandle`], [`JobResult`]).
//! - `chain`, `channel`, `task`: operator chains, bounded channels of batches
//!   (backpressure), input gates with per-channel watermarks, and the task loops;
//!   `alignment`: the pure barrier alignment the input task loop asks.
//! - [`metrics`]: records, batches, busy and backpressure time per operator subtask;
//!   a Prometheus text rendering.
//!
//! Must not know about: the inside of any operator, state backend or connector beyond
//! the traits they implement.
//!
//! # Example
//! ```
//! use brook_engine::{JobConfig, StreamEnvironment};
//! use brook_engine::testing::{CollectSink, VecSource};
//!
//! let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
//! let out = CollectSink::new();
//! env.source(VecSource::new((1..=10).collect::<Vec<i64>>()))
//!     .filter(|x| x % 2 == 0)
//!     .map(|x| x * 10)
//!     .sink(out.clone());
//! env.execute("evens").unwrap();
//! let mut got = out.values();
//! got.sort();
//! assert_eq!(got, vec![20, 40, 60, 80, 100]);
//! ```

mod alignment;
mod api;
mod build;
mod chain;
mod channel;
pub mod checkpoint;
mod config;
mod error;
mod execute;
mod graph;
pub mod hot_keys;
mod ids;
pub mod metrics;
mod plan;
pub mod state_backend;
mod task;
pub mod testing;

// The API's modules keep their paths: `brook_engine::environment`, `::join`, `::window`.
pub use api::{environment, join, window};
pub use checkpoint::{
    latest_complete, stored_checkpoints, CheckpointConfig, CheckpointError, RestoredCheckpoint,
    StoredCheckpoint,
};
pub use config::JobConfig;
pub use environment::{DataStream, KeyedStream, SinkHandle, StreamEnvironment};
pub use error::EngineError;
pub use execute::{JobHandle, JobResult};
pub use join::JoinedStreams;
pub use metrics::{CheckpointStats, SplitMetrics};
pub use state_backend::{StateBackendContext, StateBackendFactory};
pub use window::{OutputTag, WindowedStream};
