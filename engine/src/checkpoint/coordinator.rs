//! The checkpoint coordinator: the thread that triggers checkpoints, collects the
//! tasks' acknowledgements and completes a checkpoint by writing its metadata, and
//! the control it shares with the tasks.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::checkpoint::CheckpointId;
use brook_core::time::SharedClock;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracing::{debug, info, warn};

use super::snapshot::{
    file_stem, write_task_file, FileEntry, TaskSnapshot, TaskStorage, FORMAT_VERSION,
};
use super::storage::{checkpoint_dirs, remove_unreferenced_shared_files, write_metadata, Metadata};
use super::CheckpointConfig;

/// Final checkpoints tried before sources end without one.
pub(crate) const FINAL_ATTEMPTS: u32 = 3;

/// A task's answer to a barrier.
#[derive(Debug)]
pub(crate) struct Ack {
    pub(crate) id: CheckpointId,
    pub(crate) result: Result<FileEntry, String>,
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
            None => self.dir.join(format!("chk-{id}")),
        }
    }

    fn all_sources_ended(&self) -> bool {
        self.sources_ended.load(Ordering::SeqCst) >= self.sources_total
    }

    /// A source subtask that reached the end of its input may end now: the final
    /// checkpoint (taken after every source ended) completed, or was given up.
    pub(crate) fn final_done(&self, completed: CheckpointId) -> bool {
        let f = self.final_id.load(Ordering::SeqCst);
        (f != 0 && completed >= f) || self.final_abandoned.load(Ordering::SeqCst)
    }

    fn take_savepoint_request(&self) -> Option<SavepointRequest> {
        self.savepoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn savepoint_requested(&self) -> bool {
        self.savepoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
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
    pub(crate) fn write_and_ack(&self, id: CheckpointId, task: &str, snap: &TaskSnapshot) {
        let result = match &snap.declined {
            Some(reason) => Err(reason.clone()),
            None => {
                write_task_file(&self.checkpoint_dir(id), task, snap).map_err(|e| e.to_string())
            }
        };
        // The coordinator may be gone (the job is ending); nothing to do then.
        let _ = self.acks.send(Ack { id, result });
    }
}

/// Runs checkpoints for a job until `stop` is set or a task ends.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_coordinator(
    control: Arc<CheckpointControl>,
    acks: Receiver<Ack>,
    config: CheckpointConfig,
    first_id: CheckpointId,
    tasks: usize,
    job: String,
    vertices: Vec<String>,
    max_parallelism: u32,
    clock: SharedClock,
    stop: Arc<AtomicBool>,
    stats: Arc<crate::metrics::CheckpointStats>,
) {
    let mut id = first_id;
    let mut final_attempts = 0;
    let stopped = || stop.load(Ordering::SeqCst) || control.task_ended.load(Ordering::SeqCst);
    loop {
        // Sleep in steps so a finished job is not kept waiting and a savepoint or the
        // final checkpoint starts at once.
        let mut slept = 0;
        while slept < config.interval_ms
            && !stopped()
            && !control.savepoint_requested()
            && !control.all_sources_ended()
        {
            let step = (config.interval_ms - slept).min(20);
            std::thread::sleep(Duration::from_millis(step as u64));
            slept += step;
        }
        let savepoint = control.take_savepoint_request();
        if stopped() {
            if let Some(s) = savepoint {
                let _ = s.done.send(Err("the job is ending".into()));
            }
            return;
        }
        if let Some(parent) = savepoint.as_ref().and_then(|s| s.parent.as_ref()) {
            // A savepoint is a checkpoint in a directory of the user's, never deleted
            // by retention.
            control
                .savepoint_dirs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, parent.join(format!("savepoint-{id}")));
        }
        let dir = control.checkpoint_dir(id);
        if let Err(e) = fs::create_dir_all(&dir) {
            warn!(checkpoint = id, error = %e, "cannot create the checkpoint directory");
            return;
        }
        let is_final = control.all_sources_ended();
        if is_final {
            final_attempts += 1;
            control.final_id.store(id, Ordering::SeqCst);
        }
        let started = clock.now_ms();
        control.requested.store(id, Ordering::SeqCst);
        let mut files = Vec::with_capacity(tasks);
        let mut failure = None;
        // Aborted because the job stops (canceled, Ctrl-C, a closed stdout): its normal
        // end, not a degraded checkpoint, so not a warning.
        let mut ending = false;
        while files.len() < tasks && failure.is_none() {
            if stopped() {
                failure = Some("the job is ending".to_string());
                ending = true;
                break;
            }
            if clock.now_ms() - started > config.timeout_ms {
                failure = Some(format!("not complete after {} ms", config.timeout_ms));
                break;
            }
            match acks.recv_timeout(Duration::from_millis(20)) {
                Ok(a) if a.id == id => match a.result {
                    Ok(f) => files.push(f),
                    Err(e) => failure = Some(e),
                },
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let size: u64 = files.iter().map(|f| f.size).sum();
        let done = failure.is_none() && {
            let meta = Metadata {
                format_version: FORMAT_VERSION,
                job: job.clone(),
                checkpoint_id: id,
                timestamp_ms: started,
                max_parallelism,
                vertices: vertices.clone(),
                files,
            };
            match write_metadata(&dir, &meta) {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e.to_string());
                    false
                }
            }
        };
        if done {
            // Before the savepoint's waiter hears of it: a stop-with-savepoint cancels
            // the job right after, and the tasks commit what they see completed.
            control.completed.store(id, Ordering::SeqCst);
        }
        if let Some(s) = savepoint {
            let _ = s.done.send(match &failure {
                None => Ok(dir.clone()),
                Some(f) => Err(f.clone()),
            });
        }
        if done {
            let now = clock.now_ms();
            let ms = now - started;
            stats.completed.fetch_add(1, Ordering::Relaxed);
            stats.last_id.store(id, Ordering::Relaxed);
            stats
                .last_duration_ms
                .store(u64::try_from(ms).unwrap_or(0), Ordering::Relaxed);
            stats.last_size_bytes.store(size, Ordering::Relaxed);
            stats.last_completed_ms.store(now, Ordering::Relaxed);
            info!(checkpoint = id, ms, "checkpoint complete");
            for (old, path) in checkpoint_dirs(&control.dir)
                .into_iter()
                .skip(config.retain)
            {
                if old < id {
                    let _ = fs::remove_dir_all(path);
                }
            }
            remove_unreferenced_shared_files(&control.dir);
            if is_final {
                // The sources end now; no later checkpoint could complete.
                while !stopped() {
                    if let Some(s) = control.take_savepoint_request() {
                        let _ = s
                            .done
                            .send(Err("the job has reached the end of its input".into()));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let reason = failure.as_deref().unwrap_or("?");
            if ending {
                debug!(checkpoint = id, reason, "checkpoint aborted");
            } else {
                warn!(checkpoint = id, reason, "checkpoint aborted");
            }
            let _ = fs::remove_dir_all(&dir);
            if is_final && final_attempts >= FINAL_ATTEMPTS {
                warn!(
                    attempts = final_attempts,
                    "the final checkpoint failed: the job ends without one (its last output is committed, but a restore of an earlier checkpoint would write it again)"
                );
                control.final_abandoned.store(true, Ordering::SeqCst);
                return;
            }
            if stopped() {
                return;
            }
        }
        id += 1;
    }
}
