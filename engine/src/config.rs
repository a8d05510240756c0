//! A job's settings ([`JobConfig`]): parallelism, key groups, batching, the clock, the
//! state backend, checkpoints and the checkpoint to restore.

use std::sync::Arc;

use brook_core::keys::{DEFAULT_MAX_PARALLELISM, MAX_MAX_PARALLELISM};
use brook_core::time::{SharedClock, SystemClock};

use crate::checkpoint::{CheckpointConfig, RestoredCheckpoint};
use crate::error::EngineError;
use crate::state_backend::StateBackendFactory;

/// Settings of a job.
#[derive(Clone)]
pub struct JobConfig {
    /// Default parallelism of every vertex. Default 1.
    pub parallelism: u32,
    /// Number of key groups (Flink's max parallelism); stored with the job, never
    /// re-derived. Default 128.
    pub max_parallelism: u32,
    /// Records per batch sent between tasks. Default 1024.
    pub batch_size: usize,
    /// Batches a channel holds before its producer blocks (backpressure). Default 4.
    pub channel_capacity: usize,
    /// The processing-time clock. Default: the system clock.
    pub clock: SharedClock,
    /// Creates keyed state backends: [`StateBackendFactory::memory`] (the default)
    /// or [`StateBackendFactory::rocksdb`].
    pub state_backend: StateBackendFactory,
    /// Take aligned checkpoints (semantics.md §4). Default: none.
    pub checkpoint: Option<CheckpointConfig>,
    /// Restore operator state, source positions and sink commits from this checkpoint
    /// (see [`crate::checkpoint::latest_complete`]).
    pub restore: Option<Arc<RestoredCheckpoint>>,
    /// Count the hottest keys of every keyed operator (crate::hot_keys: a sample of
    /// about one record in 32 into 32 counters per writer). Default on.
    pub hot_keys: bool,
}

impl std::fmt::Debug for JobConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobConfig")
            .field("parallelism", &self.parallelism)
            .field("max_parallelism", &self.max_parallelism)
            .field("batch_size", &self.batch_size)
            .field("channel_capacity", &self.channel_capacity)
            .finish_non_exhaustive()
    }
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            parallelism: 1,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            batch_size: 4096,
            channel_capacity: 4,
            clock: SystemClock::shared(),
            state_backend: StateBackendFactory::memory(),
            checkpoint: None,
            restore: None,
            hot_keys: true,
        }
    }
}

impl JobConfig {
    /// Default settings with this parallelism.
    pub fn with_parallelism(parallelism: u32) -> Self {
        JobConfig {
            parallelism,
            ..Default::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidGraph(m));
        if self.parallelism == 0 {
            return bad("parallelism must be at least 1".into());
        }
        if self.max_parallelism == 0 || self.max_parallelism > MAX_MAX_PARALLELISM {
            return bad(format!(
                "max_parallelism must be between 1 and {MAX_MAX_PARALLELISM}"
            ));
        }
        if self.batch_size == 0 || self.channel_capacity == 0 {
            return bad("batch_size and channel_capacity must be at least 1".into());
        }
        Ok(())
    }
}
