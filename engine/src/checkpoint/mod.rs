//! Aligned checkpoints (semantics.md §4), as Flink's: the [`CheckpointCoordinator`]
//! thread asks every source task to inject a barrier; each task snapshots its chain
//! when the barrier has arrived on all its inputs, writes one file and acknowledges;
//! when every task has, the coordinator writes the checkpoint's `_metadata` last and
//! atomically (write, fsync, rename, fsync the directory), and only then announces
//! completion (sinks commit).
//!
//! Layout: `<dir>/chk-<id>/<task file>` per task and `<dir>/chk-<id>/_metadata`
//! (JSON: format version, job, id, vertices, and size and CRC-32C of every file). A
//! directory without valid metadata, or whose files do not match it, is incomplete and
//! never used: [`latest_complete`] skips it with a warning.
//!
//! Bounded input ends with a final checkpoint, as Flink's (FLIP-147): a source subtask
//! at the end of its input fires its last windows and timers (watermark `MAX`), then
//! keeps answering checkpoints without sending end of input; once every source subtask
//! has, the coordinator triggers the final checkpoint at once, and the sources end when
//! it completed. So everything the job wrote is committed by a completed checkpoint
//! that records the sources at their end: a job killed after its sinks' last commit
//! but before it exited restores at the end and writes nothing twice. After
//! [`FINAL_ATTEMPTS`](coordinator::FINAL_ATTEMPTS) aborted final checkpoints the
//! sources end without one (warned).
//!
//! By role: this file holds the settings and errors; `snapshot` what a task writes and
//! its file format; `storage` the checkpoints on disk and reading one back; `control`
//! what the coordinator shares with the tasks; `coordinator` the coordinator's
//! decisions, a state machine (events in, actions out); and `coordinator_thread` the
//! thread that feeds it and performs its actions.

mod control;
mod coordinator;
mod coordinator_thread;
mod snapshot;
mod storage;

use std::path::{Path, PathBuf};

use brook_core::time::Millis;

pub(crate) use control::{Ack, CheckpointControl, SavepointRequest};
pub(crate) use coordinator::CoordinatorConfig;
pub(crate) use coordinator_thread::CoordinatorThread;
pub use snapshot::FORMAT_VERSION;
pub(crate) use snapshot::{SourceSnapshot, TaskSnapshot};
pub use storage::{latest_complete, stored_checkpoints, RestoredCheckpoint, StoredCheckpoint};
pub(crate) use storage::{newest_id, remove_unreferenced_shared_files, SplitWatermarks};

/// Files shared by successive checkpoints of a job (incremental native state).
const SHARED: &str = "shared";

/// Checkpointing settings of a job.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Where checkpoints are stored (`chk-<id>` directories).
    pub dir: PathBuf,
    /// Time between the end of one checkpoint and the start of the next (ms).
    pub interval_ms: Millis,
    /// Complete checkpoints kept (older ones are deleted). Default 3.
    pub retain: usize,
    /// A checkpoint not complete after this long is aborted (ms). Default 10 min.
    pub timeout_ms: Millis,
}

impl CheckpointConfig {
    /// Checkpoints into `dir` every `interval_ms`.
    pub fn new(dir: impl Into<PathBuf>, interval_ms: Millis) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            interval_ms,
            retain: 3,
            timeout_ms: 600_000,
        }
    }
}

/// Errors reading or writing checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// I/O on a checkpoint file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not a checkpoint of this format, or is damaged.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No complete checkpoint in the directory.
    #[error("no complete checkpoint in {0}")]
    NoneComplete(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}
