//! The coordinator thread: a thin shell around the [`CheckpointCoordinator`] that
//! turns what it observes (the job's clock, the tasks' acknowledgements, the
//! [`CheckpointControl`] the tasks and the job handle write) into events every
//! [`STEP`], and performs the actions (files, the control's atomics, statistics, logs).

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::time::{Millis, SharedClock};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracing::{debug, info, warn};

use super::control::{Ack, CheckpointControl};
use super::coordinator::{Action, CheckpointCoordinator, CoordinatorConfig, Event};
use super::snapshot::FileEntry;
use super::snapshot::FORMAT_VERSION;
use super::storage::{
    checkpoint_dirs, checkpoint_sizes, remove_unreferenced_shared_files, shared_files,
    shared_files_before, write_metadata, Metadata,
};
use crate::metrics::{CheckpointRecord, CheckpointStats, TaskAlignment};

/// How often the shell looks at the clock and the control: a finished job is not kept
/// waiting longer, and a savepoint or the final checkpoint starts within it.
const STEP_MS: Millis = 20;
const STEP: Duration = Duration::from_millis(STEP_MS as u64);

/// Who waits for a savepoint: its directory, or why there is none.
type Waiter = Sender<Result<PathBuf, String>>;

/// Everything the coordinator thread of a job works with.
#[derive(Debug)]
pub(crate) struct CoordinatorThread {
    pub(crate) config: CoordinatorConfig,
    /// Complete checkpoints kept (older ones are deleted).
    pub(crate) retain: usize,
    /// What every checkpoint's metadata records of the job.
    pub(crate) job: String,
    pub(crate) vertices: Vec<String>,
    pub(crate) max_parallelism: u32,
    pub(crate) control: Arc<CheckpointControl>,
    pub(crate) acks: Receiver<Ack>,
    pub(crate) clock: SharedClock,
    /// Set when the job is ending.
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) stats: Arc<CheckpointStats>,
    /// What the sizes of the checkpoint in progress need from the one before.
    pub(crate) sizes: std::sync::Mutex<SizeTracker>,
}

/// The shared files of the last complete checkpoint (loaded from the checkpoints
/// directory when first needed), and the sizes of the checkpoint whose metadata was
/// just written, until it completes.
#[derive(Debug, Default)]
pub(crate) struct SizeTracker {
    last_shared: Option<std::collections::HashSet<String>>,
    /// (id, full bytes, incremental bytes)
    pending: Option<(u64, u64, u64)>,
}

type Machine = CheckpointCoordinator<Waiter>;

impl CoordinatorThread {
    /// Runs checkpoints for the job until it ends.
    pub(crate) fn run(self) {
        let mut machine = Machine::new(self.config.clone());
        let _ = self.run_until_exit(&mut machine);
    }

    fn run_until_exit(&self, machine: &mut Machine) -> ControlFlow<()> {
        loop {
            if self.stopped() {
                self.feed(machine, Event::Stop)?;
            }
            if let Some(r) = self.control.take_savepoint_request() {
                let (parent, waiter) = (r.parent, r.done);
                self.feed(machine, Event::SavepointRequested { parent, waiter })?;
            }
            if self.control.all_sources_ended() {
                self.feed(machine, Event::AllSourcesEnded)?;
            }
            let now_ms = self.clock.now_ms();
            self.feed(machine, Event::Tick { now_ms })?;
            // Not past the next deadline, so an interval shorter than a step is kept.
            let wait = machine.deadline_ms().map_or(STEP, |d| {
                Duration::from_millis((d - now_ms).clamp(1, STEP_MS) as u64)
            });
            match self.acks.recv_timeout(wait) {
                Ok(ack) => self.feed(machine, Event::Ack(ack))?,
                Err(RecvTimeoutError::Timeout) => {}
                // Every task and the job handle are gone.
                Err(RecvTimeoutError::Disconnected) => return ControlFlow::Break(()),
            }
        }
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, SizeTracker> {
        self.sizes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Measures checkpoint `id`, whose metadata (listing `files`) was just written to
    /// `dir`: its full and incremental sizes, against the last checkpoint of the
    /// checkpoints directory. A savepoint elsewhere is measured against nothing and
    /// leaves the comparison base alone.
    fn measure(&self, id: u64, dir: &Path, files: &[FileEntry]) {
        let root = dir.parent().unwrap_or(dir);
        let shared = shared_files(files);
        let in_checkpoints = root == self.config.dir.as_path();
        let mut sizes = self.sizes();
        let previous = if in_checkpoints {
            sizes
                .last_shared
                .get_or_insert_with(|| shared_files_before(root, id))
                .clone()
        } else {
            std::collections::HashSet::new()
        };
        let (full, incremental) = checkpoint_sizes(root, dir, &shared, &previous);
        sizes.pending = Some((id, full, incremental));
        if in_checkpoints {
            sizes.last_shared = Some(shared);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.control.task_ended.load(Ordering::SeqCst)
    }

    /// Feeds `event` and performs the actions; `Break` once the coordinator exited.
    fn feed(&self, machine: &mut Machine, event: Event<Waiter>) -> ControlFlow<()> {
        for action in machine.handle(event) {
            self.perform(machine, action)?;
        }
        ControlFlow::Continue(())
    }

    fn perform(&self, machine: &mut Machine, action: Action<Waiter>) -> ControlFlow<()> {
        match action {
            Action::Trigger {
                id,
                dir,
                savepoint,
                is_final,
            } => {
                if savepoint {
                    self.control
                        .savepoint_dirs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id, dir.clone());
                }
                if let Err(e) = fs::create_dir_all(&dir) {
                    warn!(checkpoint = id, error = %e, "cannot create the checkpoint directory");
                    let error = format!("{}: {e}", dir.display());
                    return self.feed(machine, Event::TriggerFailed { error });
                }
                if is_final {
                    self.control.final_id.store(id, Ordering::SeqCst);
                }
                self.control.requested.store(id, Ordering::SeqCst);
            }
            Action::WriteMetadata {
                id,
                dir,
                timestamp_ms,
                files,
            } => {
                let meta = Metadata {
                    format_version: FORMAT_VERSION,
                    job: self.job.clone(),
                    checkpoint_id: id,
                    timestamp_ms,
                    max_parallelism: self.max_parallelism,
                    vertices: self.vertices.clone(),
                    files,
                };
                let result = write_metadata(&dir, &meta).map_err(|e| e.to_string());
                if result.is_ok() {
                    self.measure(id, &dir, &meta.files);
                }
                let now_ms = self.clock.now_ms();
                return self.feed(machine, Event::MetadataWritten { result, now_ms });
            }
            Action::Complete {
                id,
                duration_ms: ms,
                size_bytes,
                completed_ms,
                alignments,
            } => {
                self.control.completed.store(id, Ordering::SeqCst);
                let stats = &self.stats;
                stats.completed.fetch_add(1, Ordering::Relaxed);
                stats.last_id.store(id, Ordering::Relaxed);
                stats
                    .last_duration_ms
                    .store(u64::try_from(ms).unwrap_or(0), Ordering::Relaxed);
                stats.last_size_bytes.store(size_bytes, Ordering::Relaxed);
                stats
                    .last_completed_ms
                    .store(completed_ms, Ordering::Relaxed);
                let pending = self.sizes().pending.take();
                let (full, incremental) = match pending {
                    Some((measured, full, incremental)) if measured == id => {
                        (Some(full), Some(incremental))
                    }
                    _ => (None, None),
                };
                stats.record(CheckpointRecord {
                    id,
                    trigger_ms: completed_ms - ms,
                    duration_ms: Some(u64::try_from(ms).unwrap_or(0)),
                    size_bytes: Some(size_bytes),
                    full_size_bytes: full,
                    incremental_bytes: incremental,
                    error: None,
                    alignment: alignments
                        .into_iter()
                        .map(|(task, alignment_us)| TaskAlignment { task, alignment_us })
                        .collect(),
                });
                info!(checkpoint = id, ms, "checkpoint complete");
            }
            Action::CleanUp { newest } => {
                let root = &self.config.dir;
                for (old, path) in checkpoint_dirs(root).into_iter().skip(self.retain) {
                    if old < newest {
                        // Best effort: a directory that stays is tried again next time.
                        let _ = fs::remove_dir_all(path);
                    }
                }
                remove_unreferenced_shared_files(root);
            }
            Action::Abort {
                id,
                dir,
                reason,
                ending,
            } => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let reason = reason.as_str();
                self.stats.record(CheckpointRecord {
                    id,
                    trigger_ms: self.clock.now_ms(),
                    duration_ms: None,
                    size_bytes: None,
                    full_size_bytes: None,
                    incremental_bytes: None,
                    error: Some(reason.to_string()),
                    alignment: Vec::new(),
                });
                if ending {
                    debug!(checkpoint = id, reason, "checkpoint aborted");
                } else {
                    warn!(checkpoint = id, reason, "checkpoint aborted");
                }
                let _ = fs::remove_dir_all(&dir);
            }
            Action::AnswerSavepoint { waiter, result } => {
                // The requester may have given up waiting; nothing to do then.
                let _ = waiter.send(result);
            }
            Action::AbandonFinal { attempts } => {
                warn!(
                    attempts,
                    "the final checkpoint failed: the job ends without one (its last output is committed, but a restore of an earlier checkpoint would write it again)"
                );
                self.control.final_abandoned.store(true, Ordering::SeqCst);
            }
            Action::Exit => return ControlFlow::Break(()),
        }
        ControlFlow::Continue(())
    }
}
