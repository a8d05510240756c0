//! What the checkpoint coordinator shares with the tasks of a job: the checkpoint
//! sources are asked to inject, the newest complete one, the end of the sources, and
//! the channel of the tasks' acknowledgements.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use brook_core::checkpoint::CheckpointId;
use crossbeam_channel::Sender;

use super::snapshot::{file_stem, write_task_file, FileEntry, TaskSnapshot, TaskStorage};
use super::storage::checkpoint_path;

/// A task's answer to a barrier: its file, or why it declined the checkpoint.
#[derive(Debug)]
pub(crate) struct Ack {
    pub(crate) id: CheckpointId,
    pub(crate) result: Result<FileEntry, String>,
    /// The task and how long its barrier alignment took (µs; 0 for a source or a
    /// task with one input channel).
    pub(crate) alignment: Option<(String, u64)>,
}

/// Shared between the coordinator and the tasks of a job.
#[derive(Debug)]
pub(crate) struct CheckpointControl {
    /// The newest checkpoint sources are asked to inject.
    pub(crate) requested: AtomicU64,
    /// The newest complete checkpoint.
    pub(crate) completed: AtomicU64,
    /// Set when a task ended: no further checkpoints can complete.
    pub(crate) task_ended: AtomicBool,
    /// Source subtasks of the job, and how many have reached the end of their input
    /// and wait for the final checkpoint.
    pub(crate) sources_total: usize,
    pub(crate) sources_ended: AtomicUsize,
    /// The final checkpoint: the first triggered after every source subtask ended
    /// (0: none yet). Sources send end of input once it completed.
    pub(crate) final_id: AtomicU64,
    /// Set when final checkpoints failed too often: sources end without one.
    pub(crate) final_abandoned: AtomicBool,
    pub(crate) acks: Sender<Ack>,
    pub(crate) dir: PathBuf,
    /// A savepoint asked for: its parent directory and who waits for its path.
    pub(crate) savepoint: std::sync::Mutex<Option<SavepointRequest>>,
    /// Savepoints in progress: checkpoint id -> directory.
    pub(crate) savepoint_dirs: std::sync::Mutex<HashMap<CheckpointId, PathBuf>>,
}

/// A savepoint asked for with [`crate::JobHandle::savepoint`].
#[derive(Debug)]
pub(crate) struct SavepointRequest {
    /// `None`: an ordinary checkpoint, taken now (stop with checkpoint).
    pub(crate) parent: Option<PathBuf>,
    pub(crate) done: Sender<Result<PathBuf, String>>,
}

impl CheckpointControl {
    pub(crate) fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        let savepoints = self
            .savepoint_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match savepoints.get(&id) {
            Some(d) => d.clone(),
            None => checkpoint_path(&self.dir, id),
        }
    }

    pub(super) fn all_sources_ended(&self) -> bool {
        self.sources_ended.load(Ordering::SeqCst) >= self.sources_total
    }

    /// A source subtask that reached the end of its input may end now: the final
    /// checkpoint (taken after every source ended) completed, or was given up.
    pub(crate) fn final_done(&self, completed: CheckpointId) -> bool {
        let f = self.final_id.load(Ordering::SeqCst);
        (f != 0 && completed >= f) || self.final_abandoned.load(Ordering::SeqCst)
    }

    pub(super) fn take_savepoint_request(&self) -> Option<SavepointRequest> {
        self.savepoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// An empty snapshot of `task` for checkpoint `id`, offering native state storage
    /// unless `id` is a savepoint (savepoints are self-contained).
    pub(crate) fn new_snapshot(&self, id: CheckpointId, task: &str) -> TaskSnapshot {
        let savepoint = self
            .savepoint_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&id);
        TaskSnapshot {
            storage: (!savepoint).then(|| TaskStorage {
                root: self.dir.clone(),
                prefix: PathBuf::from(format!("chk-{id}")).join(file_stem(task)),
            }),
            ..TaskSnapshot::default()
        }
    }

    /// Writes a task's snapshot into checkpoint `id` and acknowledges it.
    /// `alignment_us`: from the first barrier of `id` on an input channel to the last.
    pub(crate) fn write_and_ack(
        &self,
        id: CheckpointId,
        task: &str,
        snap: &TaskSnapshot,
        alignment_us: u64,
    ) {
        let result = match &snap.declined {
            Some(reason) => Err(reason.clone()),
            None => {
                write_task_file(&self.checkpoint_dir(id), task, snap).map_err(|e| e.to_string())
            }
        };
        // The coordinator may be gone (the job is ending); nothing to do then.
        let _ = self.acks.send(Ack {
            id,
            result,
            alignment: Some((task.to_string(), alignment_us)),
        });
    }
}
