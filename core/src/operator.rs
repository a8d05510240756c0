//! The [`Operator`] trait: one step of a dataflow, fed batches and watermarks.
//!
//! Operator methods are synchronous and never called concurrently (a task is a single
//! loop, as Flink's mailbox model), so operators can be tested without a runtime. The
//! lifecycle is Flink's after FLINK-22972: [`Operator::open`], then any number of
//! batches, watermarks and processing-time callbacks, then [`Operator::finish`] at the
//! end of input (flush what is buffered), then [`Operator::close`] always.

use std::fmt;

use thiserror::Error;

use crate::cancel::CancelFlag;
use crate::checkpoint::{CheckpointId, RestoredState, StateSnapshot};
use crate::element::{Batch, StreamRecord};
use crate::keys::KeyGroupRange;
use crate::time::{Millis, SharedClock, Watermark};

/// Why an operator (or a source or sink) failed.
#[derive(Debug, Error)]
pub enum OperatorError {
    /// User code reported a failure.
    #[error("{0}")]
    Failed(String),
    /// A record could not be processed (parsed, evaluated, encoded); the bad-record
    /// policy of semantics.md §5 decides what happens to it.
    #[error("bad record{}: {reason}", position.as_ref().map(|p| format!(" at {p}")).unwrap_or_default())]
    BadRecord {
        /// Where the record came from, when known (file and line, partition and offset).
        position: Option<String>,
        /// What was wrong.
        reason: String,
    },
    /// An error from a library (I/O, state, the log, ...).
    #[error(transparent)]
    Other(#[from] Box<dyn std::error::Error + Send + Sync>),
    /// The job was cancelled while the operator worked (see
    /// [`OperatorContext::cancel_flag`]): the task ends as cancelled, not failed.
    #[error("the job was cancelled")]
    Cancelled,
}

impl OperatorError {
    /// A failure with a message.
    pub fn failed(msg: impl Into<String>) -> Self {
        OperatorError::Failed(msg.into())
    }

    /// Wraps any error.
    pub fn other(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        OperatorError::Other(Box::new(e))
    }
}

/// Result of operator methods.
pub type OpResult<T = ()> = Result<T, OperatorError>;

/// Where a parallel instance runs: its vertex name and subtask, for errors and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskInfo {
    /// Name of the operator (the job-graph vertex).
    pub name: String,
    /// This subtask's index, `0..parallelism`.
    pub index: u32,
    /// Number of parallel subtasks of the vertex.
    pub parallelism: u32,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
}

impl SubtaskInfo {
    /// The key groups this subtask owns.
    pub fn key_groups(&self) -> KeyGroupRange {
        crate::keys::key_group_range(self.max_parallelism, self.parallelism, self.index)
    }
}

impl fmt::Display for SubtaskInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (subtask {}/{})",
            self.name,
            self.index + 1,
            self.parallelism
        )
    }
}

/// What an operator can see and ask of its task.
#[derive(Debug)]
pub struct OperatorContext {
    info: SubtaskInfo,
    clock: SharedClock,
    watermark: Watermark,
    processing_time_callback: Option<Millis>,
    late_records: u64,
    cancel: CancelFlag,
}

impl OperatorContext {
    /// A context for one subtask (never cancelled; see
    /// [`OperatorContext::with_cancel_flag`]).
    pub fn new(info: SubtaskInfo, clock: SharedClock) -> Self {
        OperatorContext {
            info,
            clock,
            watermark: Watermark::MIN,
            processing_time_callback: None,
            late_records: 0,
            cancel: CancelFlag::never(),
        }
    }

    /// The same context, cancelled when the job's `flag` is set (the runtime's).
    pub fn with_cancel_flag(mut self, flag: CancelFlag) -> Self {
        self.cancel = flag;
        self
    }

    /// The job's cancel flag: an operator whose one call can run long (many windows
    /// per record) checks it with a [`crate::cancel::CancelCheck`] and returns
    /// [`OperatorError::Cancelled`] once it is set.
    pub fn cancel_flag(&self) -> &CancelFlag {
        &self.cancel
    }

    /// Name and subtask of this operator instance.
    pub fn info(&self) -> &SubtaskInfo {
        &self.info
    }

    /// Processing time now (ms since the epoch), from the job's clock.
    pub fn processing_time(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The job's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The current event-time watermark of this operator's input.
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// Set by the runtime before it calls [`Operator::on_watermark`].
    pub fn set_current_watermark(&mut self, wm: Watermark) {
        self.watermark = wm;
    }

    /// Asks for [`Operator::on_processing_time`] to be called once processing time
    /// reaches `at_ms`. Only the earliest pending request is kept.
    pub fn request_processing_time_callback(&mut self, at_ms: Millis) {
        self.processing_time_callback = Some(
            self.processing_time_callback
                .map_or(at_ms, |t| t.min(at_ms)),
        );
    }

    /// Counts `n` late records (dropped or sent to a late-data side output), for the
    /// operator's `late_records` metric.
    pub fn count_late_records(&mut self, n: u64) {
        self.late_records += n;
    }

    /// Late records counted so far.
    pub fn late_records(&self) -> u64 {
        self.late_records
    }

    /// Takes the pending processing-time request (for the runtime).
    pub fn take_processing_time_callback(&mut self) -> Option<Millis> {
        self.processing_time_callback.take()
    }
}

/// Where an operator puts its results: a batch being built.
#[derive(Debug)]
pub struct Output<T> {
    records: Batch<T>,
    /// Source readers only: which split the records come from (see
    /// [`Output::set_split`]).
    splits: SplitMarks,
}

/// Which split the records of a source reader's output come from, kept as runs so that
/// a reader reading one split at a time pays nothing per record.
#[derive(Debug, Default)]
struct SplitMarks {
    /// The split of the records collected from now on.
    current: u32,
    /// The split of the first records of the batch being built.
    first: u32,
    /// `(record index, split)` where the split changes within the batch.
    changes: Vec<(usize, u32)>,
    /// Splits the reader finished since the last take.
    finished: Vec<u32>,
}

impl<T> Default for Output<T> {
    fn default() -> Self {
        Output {
            records: Vec::new(),
            splits: SplitMarks::default(),
        }
    }
}

impl<T> Output<T> {
    /// An empty output.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty output with room for `n` records.
    pub fn with_capacity(n: usize) -> Self {
        Output {
            records: Vec::with_capacity(n),
            splits: SplitMarks::default(),
        }
    }

    /// Source readers: the records collected from now on come from split `index` (the
    /// position of the split in the list the reader was created with). Per-split
    /// watermarks depend on it; a reader with one split never needs to call it.
    #[inline]
    pub fn set_split(&mut self, index: u32) {
        if index != self.splits.current {
            self.splits.current = index;
            if self.records.is_empty() {
                self.splits.first = index;
                self.splits.changes.clear();
            } else {
                self.splits.changes.push((self.records.len(), index));
            }
        }
    }

    /// Source readers: the split of the records collected from now on (the last
    /// [`Output::set_split`], 0 before any).
    pub fn split(&self) -> u32 {
        self.splits.current
    }

    /// Source readers: split `index` has been read completely (a bounded split); it no
    /// longer holds back the watermark.
    pub fn finish_split(&mut self, index: u32) {
        self.splits.finished.push(index);
    }

    /// The split of each run of records now waiting, as `(start index, split)`, in
    /// order (for the runtime, before [`Output::take`]).
    pub fn split_runs(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        std::iter::once((0, self.splits.first)).chain(self.splits.changes.iter().copied())
    }

    /// Takes the splits finished since the last call (for the runtime).
    pub fn take_finished_splits(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.splits.finished)
    }

    /// Emits a value with a timestamp (or none).
    pub fn collect(&mut self, value: T, timestamp: Option<Millis>) {
        self.records.push(StreamRecord { value, timestamp });
    }

    /// Emits a record.
    pub fn push(&mut self, record: StreamRecord<T>) {
        self.records.push(record);
    }

    /// Emits a whole batch; moved without copying when nothing else is waiting.
    pub fn extend_batch(&mut self, batch: Batch<T>) {
        if self.records.is_empty() {
            self.records = batch;
        } else {
            self.records.extend(batch);
        }
    }

    /// Makes room for `n` more records.
    pub fn reserve(&mut self, n: usize) {
        self.records.reserve(n);
    }

    /// Number of records emitted and not yet taken.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Removes the records emitted so far, keeping the buffer's capacity (for the
    /// runtime, to pass a large output on in chunks).
    pub fn drain(&mut self) -> std::vec::Drain<'_, StreamRecord<T>> {
        self.splits.first = self.splits.current;
        self.splits.changes.clear();
        self.records.drain(..)
    }

    /// Takes the records emitted so far (for the runtime).
    pub fn take(&mut self) -> Batch<T> {
        self.splits.first = self.splits.current;
        self.splits.changes.clear();
        std::mem::take(&mut self.records)
    }
}

/// One step of a dataflow with one input.
pub trait Operator: Send + 'static {
    /// Type of the input records.
    type In: Send + 'static;
    /// Type of the output records.
    type Out: Send + 'static;

    /// Called once before any input; declare state and timers here.
    fn open(&mut self, _ctx: &mut OperatorContext) -> OpResult {
        Ok(())
    }

    /// Called before [`Operator::open`] when the job restores from a checkpoint: the
    /// keyed state of the key groups this subtask owns and the operator state of all
    /// former subtasks (see [`RestoredState`]).
    fn restore_state(&mut self, _ctx: &mut OperatorContext, _state: &RestoredState) -> OpResult {
        Ok(())
    }

    /// A checkpoint barrier is about to pass (Flink's `prepareSnapshotPreBarrier`):
    /// emit into `out` what must be downstream of the barrier's checkpoint, such as
    /// results of requests in flight, so nothing in flight needs to be in the state.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint: CheckpointId,
        _ctx: &mut OperatorContext,
        _out: &mut Output<Self::Out>,
    ) -> OpResult {
        Ok(())
    }

    /// A checkpoint barrier passed: write the state that reflects every record before
    /// it (keyed state per key group). Stateless operators write nothing.
    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _ctx: &mut OperatorContext,
        _snapshot: &mut StateSnapshot,
    ) -> OpResult {
        Ok(())
    }

    /// Checkpoint `checkpoint` is complete (stored durably, metadata written).
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> OpResult {
        Ok(())
    }

    /// Processes a batch of input records, emitting into `out`.
    fn process_batch(
        &mut self,
        batch: Batch<Self::In>,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult;

    /// Event time advanced to `wm` (already in `ctx.current_watermark()`). Fire what is
    /// due into `out`, then return the watermark to forward downstream (default:
    /// forward `wm` unchanged; `None` holds it back).
    fn on_watermark(
        &mut self,
        wm: Watermark,
        _ctx: &mut OperatorContext,
        _out: &mut Output<Self::Out>,
    ) -> OpResult<Option<Watermark>> {
        Ok(Some(wm))
    }

    /// Processing time reached a time requested with
    /// [`OperatorContext::request_processing_time_callback`].
    fn on_processing_time(
        &mut self,
        _now_ms: Millis,
        _ctx: &mut OperatorContext,
        _out: &mut Output<Self::Out>,
    ) -> OpResult {
        Ok(())
    }

    /// End of input: emit whatever is still buffered. Called once, after the final
    /// watermark.
    fn finish(&mut self, _ctx: &mut OperatorContext, _out: &mut Output<Self::Out>) -> OpResult {
        Ok(())
    }

    /// Always called last, also after a failure: release resources.
    fn close(&mut self) {}
}
