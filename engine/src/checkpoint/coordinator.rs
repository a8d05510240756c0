//! The checkpoint coordinator's decisions, as a state machine: [`Event`]s in (the
//! clock, the tasks' acknowledgements, savepoint requests, the end of the sources, the
//! end of the job), [`Action`]s out, which the coordinator thread
//! (`coordinator_thread`) performs. The machine never reads a clock, touches a file or
//! sleeps: time comes in as `now_ms` (ms, by the job's clock), so every rule below is
//! tested with tables of events.
//!
//! # Rules (semantics.md §4; Flink's `CheckpointCoordinator` where it is silent)
//! - One checkpoint at a time. Ids are consecutive from the first id given (one after
//!   the newest in the checkpoint directory and the restored one); an aborted
//!   checkpoint's id is never used again.
//! - The next checkpoint is triggered on the first [`Event::Tick`] at which a savepoint
//!   was requested, every source subtask has ended (the final checkpoint), or
//!   `interval_ms` have passed since the wait began: the first `Tick` after the start or
//!   after the previous checkpoint ended. Exactly at `since + interval_ms` it is
//!   triggered.
//! - A checkpoint completes when each of the `tasks` acknowledged it with a file and its
//!   metadata was written. It is aborted when a task declines it (an `Err` ack: its
//!   reason), when its metadata cannot be written, when it is not complete after
//!   `timeout_ms` (at `started + timeout_ms` it still runs, one millisecond later it is
//!   aborted: "not complete after <timeout_ms> ms"), or when the job ends ("the job is
//!   ending": the job's normal end, not a degraded checkpoint, so `ending` is set).
//! - Acknowledgements of any other checkpoint (late ones of an aborted checkpoint) are
//!   ignored.
//! - A savepoint (or a checkpoint asked for by stop-with-checkpoint) requested while a
//!   checkpoint runs waits for it to end and is the next checkpoint: never merged into
//!   the running one, whose barriers are already out. A newer request replaces a waiting
//!   one (whose waiter is dropped, as the request slot it came from overwrites). The
//!   waiter hears the savepoint's directory or why it failed; "the job is ending" when
//!   the job ends first; "the job has reached the end of its input" once the final
//!   checkpoint completed.
//! - The final checkpoint (FLIP-147) is the first triggered after
//!   [`Event::AllSourcesEnded`]; once it completed no other checkpoint is taken. An
//!   aborted one is tried again at once; after [`FINAL_ATTEMPTS`] aborted attempts it is
//!   abandoned and the coordinator exits (the sources end without one).
//! - [`Event::Stop`] (the job is canceled or a task ended): a running checkpoint is
//!   aborted and the coordinator exits; one whose metadata is being written completes or
//!   aborts first.

use std::mem;
use std::path::PathBuf;

use brook_core::checkpoint::CheckpointId;
use brook_core::time::Millis;

use super::control::Ack;
use super::snapshot::FileEntry;
use super::storage::checkpoint_path;

/// Final checkpoints tried before sources end without one.
pub(crate) const FINAL_ATTEMPTS: u32 = 3;

/// The abort reason, and the savepoint answer, when the job ends first.
const ENDING: &str = "the job is ending";

/// The answer to a savepoint requested after the final checkpoint completed.
const END_OF_INPUT: &str = "the job has reached the end of its input";

/// What the coordinator decides with.
#[derive(Debug, Clone)]
pub(crate) struct CoordinatorConfig {
    /// The checkpoints directory (`chk-<id>` directories).
    pub(crate) dir: PathBuf,
    /// Time between the end of one checkpoint and the start of the next (ms).
    pub(crate) interval_ms: Millis,
    /// A checkpoint not complete after this long is aborted (ms).
    pub(crate) timeout_ms: Millis,
    /// Tasks that acknowledge every checkpoint.
    pub(crate) tasks: usize,
    /// The id of the first checkpoint.
    pub(crate) first_id: CheckpointId,
}

/// Something that happened, fed to [`CheckpointCoordinator::handle`]. `W` is whoever
/// waits for a savepoint (a channel in the engine, a name in tests).
#[derive(Debug)]
pub(crate) enum Event<W> {
    /// The time now (ms, by the job's clock): the coordinator triggers and times out
    /// checkpoints only here.
    Tick { now_ms: Millis },
    /// A task's answer to a barrier.
    Ack(Ack),
    /// The answer to [`Action::WriteMetadata`], and when it was written (ms).
    MetadataWritten {
        result: Result<(), String>,
        now_ms: Millis,
    },
    /// [`Action::Trigger`] could not be carried out (its directory cannot be created).
    TriggerFailed { error: String },
    /// A savepoint into `parent/savepoint-<id>`, or (`None`) a checkpoint in the
    /// checkpoints directory, taken as soon as possible.
    SavepointRequested { parent: Option<PathBuf>, waiter: W },
    /// Every source subtask has reached the end of its input.
    AllSourcesEnded,
    /// The job is ending: canceled, or a task ended.
    Stop,
}

/// What the coordinator thread is to do, in order.
#[derive(Debug, PartialEq)]
pub(crate) enum Action<W> {
    /// Start checkpoint `id`: create `dir` (a savepoint's is registered first, so the
    /// tasks write there), remember a final checkpoint as such, and ask the sources to
    /// inject its barrier.
    Trigger {
        id: CheckpointId,
        dir: PathBuf,
        savepoint: bool,
        is_final: bool,
    },
    /// Write checkpoint `id`'s metadata into `dir` (`timestamp_ms`: when it was
    /// triggered) and answer with [`Event::MetadataWritten`].
    WriteMetadata {
        id: CheckpointId,
        dir: PathBuf,
        timestamp_ms: Millis,
        files: Vec<FileEntry>,
    },
    /// Checkpoint `id` is complete: tell the tasks (sinks commit), count it and log it.
    Complete {
        id: CheckpointId,
        duration_ms: Millis,
        size_bytes: u64,
        completed_ms: Millis,
        /// Per task, its barrier alignment time (µs), in the order the tasks acked.
        alignments: Vec<(String, u64)>,
    },
    /// Delete the complete checkpoints older than `newest` beyond those retained, and the
    /// shared files no remaining checkpoint lists.
    CleanUp { newest: CheckpointId },
    /// Checkpoint `id` is aborted: count it, log it (at debug when `ending`, else as a
    /// warning) and delete `dir`.
    Abort {
        id: CheckpointId,
        dir: PathBuf,
        reason: String,
        ending: bool,
    },
    /// Tell a savepoint's waiter its directory, or why there is none.
    AnswerSavepoint {
        waiter: W,
        result: Result<PathBuf, String>,
    },
    /// The final checkpoint was aborted `attempts` times: the sources end without one
    /// (warned).
    AbandonFinal { attempts: u32 },
    /// The coordinator is done: no further events are expected.
    Exit,
}

/// A savepoint asked for and not yet started.
#[derive(Debug)]
struct Waiting<W> {
    parent: Option<PathBuf>,
    waiter: W,
}

/// The checkpoint in progress.
#[derive(Debug)]
struct Running<W> {
    id: CheckpointId,
    dir: PathBuf,
    started_ms: Millis,
    is_final: bool,
    /// Who waits for this checkpoint (a savepoint or a requested checkpoint).
    waiter: Option<W>,
    files: Vec<FileEntry>,
    size_bytes: u64,
    /// Per task that acknowledged, its alignment time (µs).
    alignments: Vec<(String, u64)>,
}

#[derive(Debug)]
enum Phase<W> {
    /// Between checkpoints, waiting since `since_ms` (`None`: from the next tick).
    Idle { since_ms: Option<Millis> },
    /// Collecting the tasks' acknowledgements.
    Collecting(Running<W>),
    /// Every task acknowledged; the metadata is being written.
    Writing(Running<W>),
    /// The final checkpoint completed: no other checkpoint is taken.
    Finished,
    /// [`Action::Exit`] was given.
    Exited,
}

/// The checkpoint coordinator of one job (see the module docs for its rules).
#[derive(Debug)]
pub(crate) struct CheckpointCoordinator<W> {
    config: CoordinatorConfig,
    next_id: CheckpointId,
    phase: Phase<W>,
    savepoint: Option<Waiting<W>>,
    sources_ended: bool,
    final_attempts: u32,
    /// [`Event::Stop`] arrived.
    ending: bool,
}

impl<W> CheckpointCoordinator<W> {
    /// A coordinator waiting for its first checkpoint.
    pub(crate) fn new(config: CoordinatorConfig) -> Self {
        CheckpointCoordinator {
            next_id: config.first_id,
            config,
            phase: Phase::Idle { since_ms: None },
            savepoint: None,
            sources_ended: false,
            final_attempts: 0,
            ending: false,
        }
    }

    /// The next time (ms) at which a [`Event::Tick`] can decide something: the end of
    /// the interval, or one millisecond past the running checkpoint's timeout. `None`
    /// while nothing depends on time (or the wait starts at the next tick).
    pub(crate) fn deadline_ms(&self) -> Option<Millis> {
        match &self.phase {
            Phase::Idle { since_ms } => since_ms.map(|s| s + self.config.interval_ms),
            Phase::Collecting(run) => Some(run.started_ms + self.config.timeout_ms + 1),
            _ => None,
        }
    }

    /// Feeds one event; returns what to do, in order.
    pub(crate) fn handle(&mut self, event: Event<W>) -> Vec<Action<W>> {
        let mut out = Vec::new();
        match event {
            Event::Tick { now_ms } => self.on_tick(now_ms, &mut out),
            Event::Ack(ack) => self.on_ack(ack, &mut out),
            Event::MetadataWritten { result, now_ms } => {
                self.on_metadata_written(result, now_ms, &mut out)
            }
            Event::TriggerFailed { error } => self.on_trigger_failed(error, &mut out),
            Event::SavepointRequested { parent, waiter } => {
                self.on_savepoint_requested(parent, waiter, &mut out)
            }
            Event::AllSourcesEnded => self.sources_ended = true,
            Event::Stop => self.on_stop(&mut out),
        }
        out
    }

    fn on_tick(&mut self, now_ms: Millis, out: &mut Vec<Action<W>>) {
        match &mut self.phase {
            Phase::Idle { since_ms } => {
                let since = *since_ms.get_or_insert(now_ms);
                if self.savepoint.is_some()
                    || self.sources_ended
                    || now_ms - since >= self.config.interval_ms
                {
                    self.trigger(now_ms, out);
                }
            }
            Phase::Collecting(run) if now_ms - run.started_ms > self.config.timeout_ms => {
                let reason = format!("not complete after {} ms", self.config.timeout_ms);
                self.abort(reason, false, out);
            }
            _ => {}
        }
    }

    fn trigger(&mut self, now_ms: Millis, out: &mut Vec<Action<W>>) {
        let id = self.next_id;
        let (parent, waiter) = match self.savepoint.take() {
            Some(s) => (s.parent, Some(s.waiter)),
            None => (None, None),
        };
        // A savepoint is a checkpoint in a directory of the user's, never deleted by
        // retention.
        let savepoint = parent.is_some();
        let dir = match parent {
            Some(p) => p.join(format!("savepoint-{id}")),
            None => checkpoint_path(&self.config.dir, id),
        };
        let is_final = self.sources_ended;
        if is_final {
            self.final_attempts += 1;
        }
        out.push(Action::Trigger {
            id,
            dir: dir.clone(),
            savepoint,
            is_final,
        });
        self.phase = Phase::Collecting(Running {
            id,
            dir,
            started_ms: now_ms,
            is_final,
            waiter,
            files: Vec::with_capacity(self.config.tasks),
            size_bytes: 0,
            alignments: Vec::with_capacity(self.config.tasks),
        });
        self.write_if_acknowledged(out);
    }

    fn on_ack(&mut self, ack: Ack, out: &mut Vec<Action<W>>) {
        let Phase::Collecting(run) = &mut self.phase else {
            return;
        };
        if ack.id != run.id {
            return;
        }
        match ack.result {
            Ok(file) => {
                run.alignments.extend(ack.alignment);
                run.size_bytes += file.size;
                run.files.push(file);
                self.write_if_acknowledged(out);
            }
            Err(reason) => self.abort(reason, false, out),
        }
    }

    /// Moves to writing the metadata once every task acknowledged.
    fn write_if_acknowledged(&mut self, out: &mut Vec<Action<W>>) {
        let tasks = self.config.tasks;
        if !matches!(&self.phase, Phase::Collecting(run) if run.files.len() >= tasks) {
            return;
        }
        let Phase::Collecting(mut run) = mem::replace(&mut self.phase, Phase::Exited) else {
            return;
        };
        out.push(Action::WriteMetadata {
            id: run.id,
            dir: run.dir.clone(),
            timestamp_ms: run.started_ms,
            files: mem::take(&mut run.files),
        });
        self.phase = Phase::Writing(run);
    }

    fn on_metadata_written(
        &mut self,
        result: Result<(), String>,
        now_ms: Millis,
        out: &mut Vec<Action<W>>,
    ) {
        if !matches!(self.phase, Phase::Writing(_)) {
            return;
        }
        match result {
            Ok(()) => self.complete(now_ms, out),
            Err(reason) => self.abort(reason, false, out),
        }
    }

    fn complete(&mut self, now_ms: Millis, out: &mut Vec<Action<W>>) {
        let Phase::Writing(run) = mem::replace(&mut self.phase, Phase::Exited) else {
            return;
        };
        // Before the savepoint's waiter hears of it: a stop-with-savepoint cancels the
        // job right after, and the tasks commit what they see completed.
        out.push(Action::Complete {
            id: run.id,
            duration_ms: now_ms - run.started_ms,
            size_bytes: run.size_bytes,
            completed_ms: now_ms,
            alignments: run.alignments,
        });
        if let Some(waiter) = run.waiter {
            out.push(Action::AnswerSavepoint {
                waiter,
                result: Ok(run.dir),
            });
        }
        out.push(Action::CleanUp { newest: run.id });
        self.next_id = run.id + 1;
        if run.is_final {
            // The sources end now; no later checkpoint could complete.
            self.phase = Phase::Finished;
            if let Some(s) = self.savepoint.take() {
                answer(s.waiter, END_OF_INPUT, out);
            }
        } else {
            self.phase = Phase::Idle { since_ms: None };
        }
        if self.ending {
            self.exit(out);
        }
    }

    /// Aborts the running checkpoint (collecting or writing).
    fn abort(&mut self, reason: String, ending: bool, out: &mut Vec<Action<W>>) {
        let (Phase::Collecting(run) | Phase::Writing(run)) =
            mem::replace(&mut self.phase, Phase::Idle { since_ms: None })
        else {
            return;
        };
        if let Some(waiter) = run.waiter {
            answer(waiter, &reason, out);
        }
        out.push(Action::Abort {
            id: run.id,
            dir: run.dir,
            reason,
            ending,
        });
        self.next_id = run.id + 1;
        if run.is_final && self.final_attempts >= FINAL_ATTEMPTS {
            out.push(Action::AbandonFinal {
                attempts: self.final_attempts,
            });
            self.exit(out);
        } else if self.ending {
            self.exit(out);
        }
    }

    fn on_trigger_failed(&mut self, error: String, out: &mut Vec<Action<W>>) {
        if let Phase::Collecting(run) = mem::replace(&mut self.phase, Phase::Exited) {
            if let Some(waiter) = run.waiter {
                answer(waiter, &error, out);
            }
        }
        self.exit(out);
    }

    fn on_savepoint_requested(
        &mut self,
        parent: Option<PathBuf>,
        waiter: W,
        out: &mut Vec<Action<W>>,
    ) {
        match self.phase {
            Phase::Finished => answer(waiter, END_OF_INPUT, out),
            Phase::Exited => answer(waiter, ENDING, out),
            _ if self.ending => answer(waiter, ENDING, out),
            _ => self.savepoint = Some(Waiting { parent, waiter }),
        }
    }

    fn on_stop(&mut self, out: &mut Vec<Action<W>>) {
        if self.ending {
            return;
        }
        self.ending = true;
        match self.phase {
            Phase::Idle { .. } | Phase::Finished => self.exit(out),
            Phase::Collecting(_) => self.abort(ENDING.to_string(), true, out),
            // The metadata's answer decides; then it exits.
            Phase::Writing(_) => {}
            Phase::Exited => {}
        }
    }

    fn exit(&mut self, out: &mut Vec<Action<W>>) {
        if let Some(s) = self.savepoint.take() {
            answer(s.waiter, ENDING, out);
        }
        self.phase = Phase::Exited;
        out.push(Action::Exit);
    }
}

fn answer<W>(waiter: W, reason: &str, out: &mut Vec<Action<W>>) {
    out.push(Action::AnswerSavepoint {
        waiter,
        result: Err(reason.to_string()),
    });
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
