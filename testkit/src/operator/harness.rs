//! [`OperatorHarness`]: one operator subtask, driven as the engine's task drives it.

use std::fmt;

use brook_core::checkpoint::{CheckpointId, RestoredState, StateSnapshot};
use brook_core::element::{Batch, StreamElement, StreamRecord};
use brook_core::keys::{DEFAULT_MAX_PARALLELISM, MAX_MAX_PARALLELISM};
use brook_core::operator::{
    OpResult, Operator, OperatorContext, OperatorError, Output, SubtaskInfo,
};
use brook_core::time::{ManualClock, Millis, Watermark};
use brook_core::watermark::WatermarkGenerator;
use brook_state::{KeyedStateBackend, StateError};
use thiserror::Error;

use super::backend::TestBackend;

/// A harness could not be set up.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// The subtask index, parallelism and max parallelism do not fit together.
    #[error(
        "subtask {index} of parallelism {parallelism} with max parallelism {max_parallelism}: \
         needs index < parallelism <= max parallelism <= {MAX_MAX_PARALLELISM}"
    )]
    BadSubtask {
        /// The subtask index asked for.
        index: u32,
        /// The parallelism asked for.
        parallelism: u32,
        /// The max parallelism (number of key groups) asked for.
        max_parallelism: u32,
    },
    /// The state backend could not be created.
    #[error(transparent)]
    State(#[from] StateError),
}

/// One record the operator emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted<T> {
    /// The record's value.
    pub value: T,
    /// Its event time (ms), if the operator gave one.
    pub timestamp: Option<Millis>,
    /// The operator's input watermark when it emitted the record: the watermark whose
    /// arrival fired it, or the one in force before the record that caused it
    /// ([`Watermark::MIN`] before any watermark).
    pub watermark: Watermark,
}

/// Where a harness runs its operator: the subtask and the clock.
#[derive(Debug, Clone)]
pub struct HarnessSetup {
    info: SubtaskInfo,
    clock: ManualClock,
}

impl HarnessSetup {
    /// Subtask 1 of 1 of the operator `name`, with the engine's default max
    /// parallelism (128 key groups) and a manual clock standing at 0 ms.
    pub fn new(name: impl Into<String>) -> Self {
        HarnessSetup {
            info: SubtaskInfo {
                name: name.into(),
                index: 0,
                parallelism: 1,
                max_parallelism: DEFAULT_MAX_PARALLELISM,
            },
            clock: ManualClock::new(0),
        }
    }

    /// Runs as subtask `index` (`0..parallelism`) of `parallelism`: the operator owns
    /// that subtask's key groups, and a restore gives it their state.
    pub fn subtask(mut self, index: u32, parallelism: u32) -> Self {
        self.info.index = index;
        self.info.parallelism = parallelism;
        self
    }

    /// The job's number of key groups.
    pub fn max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.info.max_parallelism = max_parallelism;
        self
    }

    /// Uses `clock` (shared: the test and other harnesses moving it move this one).
    pub fn clock(mut self, clock: &ManualClock) -> Self {
        self.clock = clock.clone();
        self
    }

    /// The subtask this setup describes.
    pub fn info(&self) -> &SubtaskInfo {
        &self.info
    }

    /// A harness for `op` (which brings its own state, if any). Not opened yet: call
    /// [`OperatorHarness::restore`] first to restore, then [`OperatorHarness::open`].
    ///
    /// # Errors
    /// [`HarnessError::BadSubtask`] when index, parallelism and max parallelism do not
    /// fit together.
    pub fn harness<O: Operator>(self, op: O) -> Result<OperatorHarness<O>, HarnessError> {
        let info = &self.info;
        if info.index >= info.parallelism
            || info.parallelism > info.max_parallelism
            || info.max_parallelism > MAX_MAX_PARALLELISM
        {
            return Err(HarnessError::BadSubtask {
                index: info.index,
                parallelism: info.parallelism,
                max_parallelism: info.max_parallelism,
            });
        }
        Ok(self.build(op))
    }

    fn build<O: Operator>(self, op: O) -> OperatorHarness<O> {
        OperatorHarness {
            op,
            ctx: OperatorContext::new(self.info, self.clock.shared()),
            clock: self.clock,
            out: Output::new(),
            emitted: Vec::new(),
            forwarded: Vec::new(),
            callback: None,
            generator: None,
            idle: false,
            stage: Stage::Created,
        }
    }

    /// A harness for the keyed operator `make` builds on a new, empty `backend`.
    ///
    /// # Errors
    /// As [`HarnessSetup::harness`]; [`HarnessError::State`] when the backend cannot
    /// be created (RocksDB).
    pub fn keyed<O: Operator>(
        self,
        backend: TestBackend,
        make: impl FnOnce(Box<dyn KeyedStateBackend>) -> O,
    ) -> Result<OperatorHarness<O>, HarnessError> {
        let state = backend.create()?;
        self.harness(make(state))
    }
}

/// Where the operator is in its lifecycle (`core/src/operator.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Built; may be restored.
    Created,
    /// Opened; takes input.
    Open,
    /// `finish` called (end of input).
    Finished,
    /// `close` called.
    Closed,
}

/// One operator subtask driven as the engine's task drives it (`OperatorLink` in
/// `engine/src/chain.rs`), the test analogue of Flink's
/// `KeyedOneInputStreamOperatorTestHarness`. See the [module docs](super).
///
/// Every operator call returns the operator's [`OpResult`]; calls out of lifecycle
/// order (a record before [`OperatorHarness::open`], a restore after it) are an
/// [`OperatorError::Failed`] naming the call, never a panic. The operator is closed
/// when the harness is dropped, if it was not closed before.
pub struct OperatorHarness<O: Operator> {
    op: O,
    ctx: OperatorContext,
    clock: ManualClock,
    out: Output<O::Out>,
    emitted: Vec<Emitted<O::Out>>,
    forwarded: Vec<Watermark>,
    /// The earliest processing-time callback asked for and not yet fired.
    callback: Option<Millis>,
    generator: Option<Box<dyn WatermarkGenerator>>,
    idle: bool,
    stage: Stage,
}

impl<O: Operator> fmt::Debug for OperatorHarness<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorHarness")
            .field("subtask", self.ctx.info())
            .field("stage", &self.stage)
            .field("watermark", &self.ctx.current_watermark())
            .field("callback", &self.callback)
            .field("emitted", &self.emitted.len())
            .finish_non_exhaustive()
    }
}

impl<O: Operator> OperatorHarness<O> {
    /// A harness for `op` as subtask 1 of 1 of an operator named `operator` (see
    /// [`HarnessSetup::new`]). Not opened yet.
    pub fn new(op: O) -> Self {
        // The default subtask (1 of 1, 128 key groups) needs no check.
        HarnessSetup::new("operator").build(op)
    }

    /// Opens `op`, passes it `batch` and returns what it emitted: for operators
    /// tested one batch at a time (stateless ones).
    ///
    /// # Errors
    /// The operator's error from `open` or `process_batch`.
    pub fn run_batch(op: O, batch: Batch<O::In>) -> OpResult<Batch<O::Out>> {
        let mut h = OperatorHarness::new(op);
        h.open()?;
        h.process_batch(batch)?;
        Ok(h.take_records())
    }

    /// Records passed to the operator also go to `generator`, and
    /// [`OperatorHarness::process_generated_watermark`] sends its watermark, as a
    /// source with a watermark strategy would (semantics.md §2).
    pub fn with_watermark_generator(
        mut self,
        generator: impl WatermarkGenerator + 'static,
    ) -> Self {
        self.generator = Some(Box::new(generator));
        self
    }

    fn expect(&self, call: &str, stages: &[Stage]) -> OpResult {
        if stages.contains(&self.stage) {
            Ok(())
        } else {
            Err(OperatorError::failed(format!(
                "operator harness: {call} when the operator is {:?} (lifecycle: restore, open, \
                 input, end_input, close)",
                self.stage
            )))
        }
    }

    /// Collects what the last call emitted and the processing-time callback it asked
    /// for (the earliest of those pending is kept, as the engine does).
    fn emit(&mut self) {
        let watermark = self.ctx.current_watermark();
        self.emitted
            .extend(self.out.take().into_iter().map(|r| Emitted {
                value: r.value,
                timestamp: r.timestamp,
                watermark,
            }));
        if let Some(t) = self.ctx.take_processing_time_callback() {
            self.callback = Some(self.callback.map_or(t, |c| c.min(t)));
        }
    }

    /// Restores the operator from the snapshots of all former subtasks: it gets the
    /// keyed state of the key groups this subtask owns (at this harness's parallelism,
    /// which may differ from theirs) and all operator state, as the engine restores
    /// a checkpoint. Before [`OperatorHarness::open`].
    pub fn restore(&mut self, snapshots: &[StateSnapshot]) -> OpResult {
        let state = RestoredState::collect(snapshots, self.ctx.info().key_groups());
        self.restore_state(&state)
    }

    /// Restores the operator from `state` as given. Before [`OperatorHarness::open`].
    pub fn restore_state(&mut self, state: &RestoredState) -> OpResult {
        self.expect("restore", &[Stage::Created])?;
        let r = self.op.restore_state(&mut self.ctx, state);
        self.emit();
        r
    }

    /// Opens the operator.
    pub fn open(&mut self) -> OpResult {
        self.expect("open", &[Stage::Created])?;
        self.stage = Stage::Open;
        let r = self.op.open(&mut self.ctx);
        self.emit();
        r
    }

    /// Passes one record with event time `timestamp` (ms).
    pub fn process_element(&mut self, value: O::In, timestamp: Millis) -> OpResult {
        self.process_batch(vec![StreamRecord::with_timestamp(value, timestamp)])
    }

    /// Passes one record (with or without an event time).
    pub fn process_record(&mut self, record: StreamRecord<O::In>) -> OpResult {
        self.process_batch(vec![record])
    }

    /// Passes a batch of records.
    pub fn process_batch(&mut self, batch: Batch<O::In>) -> OpResult {
        self.expect("a record", &[Stage::Open])?;
        if let Some(g) = self.generator.as_mut() {
            for t in batch.iter().filter_map(|r| r.timestamp) {
                g.on_event(t);
            }
        }
        let r = self.op.process_batch(batch, &mut self.ctx, &mut self.out);
        self.emit();
        r
    }

    /// Event time advances to `watermark` (ms). A watermark not ahead of the current
    /// one is dropped, as the task's watermark tracking drops it (watermarks only move
    /// forward, semantics.md §2). What the operator forwards is kept (see
    /// [`OperatorHarness::forwarded_watermarks`]).
    pub fn process_watermark(&mut self, watermark: Millis) -> OpResult {
        self.expect("a watermark", &[Stage::Open])?;
        let wm = Watermark(watermark);
        if wm <= self.ctx.current_watermark() {
            return Ok(());
        }
        self.ctx.set_current_watermark(wm);
        let r = self.op.on_watermark(wm, &mut self.ctx, &mut self.out);
        self.emit();
        if let Some(fwd) = r? {
            self.forwarded.push(fwd);
        }
        Ok(())
    }

    /// Sends the watermark of the generator given with
    /// [`OperatorHarness::with_watermark_generator`] (nothing without one).
    pub fn process_generated_watermark(&mut self) -> OpResult {
        match self.generator.as_ref().map(|g| g.current_watermark()) {
            Some(wm) => self.process_watermark(wm.millis()),
            None => Ok(()),
        }
    }

    /// The input becomes idle (`true`) or active again. An operator is never told:
    /// the task leaves an idle input out of its minimum watermark and passes the
    /// status on (semantics.md §2); the harness only records it
    /// ([`OperatorHarness::is_idle`]).
    pub fn process_idle(&mut self, idle: bool) -> OpResult {
        self.expect("idleness", &[Stage::Open])?;
        self.idle = idle;
        Ok(())
    }

    /// Passes one element of a channel: records, a watermark, idleness, a barrier
    /// (returns the operator's snapshot, see [`OperatorHarness::snapshot`]) or the end
    /// of input ([`OperatorHarness::end_input`]).
    pub fn push(&mut self, element: StreamElement<O::In>) -> OpResult<Option<StateSnapshot>> {
        match element {
            StreamElement::Records(batch) => self.process_batch(batch)?,
            StreamElement::Watermark(wm) => self.process_watermark(wm.millis())?,
            StreamElement::Idle(idle) => self.process_idle(idle)?,
            StreamElement::Barrier(b) => return self.snapshot(b.id).map(Some),
            StreamElement::EndOfInput => self.end_input()?,
        }
        Ok(None)
    }

    /// A barrier of checkpoint `checkpoint` passes: the operator emits what must be
    /// before it (`prepare_snapshot_pre_barrier`), then writes its state, which is
    /// returned (restore it into a fresh harness with [`OperatorHarness::restore`]).
    pub fn snapshot(&mut self, checkpoint: CheckpointId) -> OpResult<StateSnapshot> {
        self.expect("a barrier", &[Stage::Open, Stage::Finished])?;
        let r = self
            .op
            .prepare_snapshot_pre_barrier(checkpoint, &mut self.ctx, &mut self.out);
        self.emit();
        r?;
        let mut snapshot = StateSnapshot::new();
        let r = self
            .op
            .snapshot_state(checkpoint, &mut self.ctx, &mut snapshot);
        self.emit();
        r.map(|()| snapshot)
    }

    /// Checkpoint `checkpoint` is complete.
    pub fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> OpResult {
        self.expect("a completed checkpoint", &[Stage::Open, Stage::Finished])?;
        let r = self.op.notify_checkpoint_complete(checkpoint);
        self.emit();
        r
    }

    /// Sets processing time to `now_ms`; when the callback the operator asked for is
    /// due, the operator gets it (once, with `now_ms`, as the engine calls it).
    pub fn set_processing_time(&mut self, now_ms: Millis) -> OpResult {
        self.expect("processing time", &[Stage::Open, Stage::Finished])?;
        self.clock.set(now_ms);
        if self.callback.is_some_and(|t| t <= now_ms) {
            self.callback = None;
            let r = self
                .op
                .on_processing_time(now_ms, &mut self.ctx, &mut self.out);
            self.emit();
            r?;
        }
        Ok(())
    }

    /// Moves processing time on by `ms` (see [`OperatorHarness::set_processing_time`]).
    pub fn advance_processing_time(&mut self, ms: Millis) -> OpResult {
        self.set_processing_time(self.processing_time().saturating_add(ms))
    }

    /// End of input: the final watermark ([`Watermark::MAX`], if not there yet),
    /// then `finish`, as a bounded input ends.
    pub fn end_input(&mut self) -> OpResult {
        self.process_watermark(Watermark::MAX.millis())?;
        self.stage = Stage::Finished;
        let r = self.op.finish(&mut self.ctx, &mut self.out);
        self.emit();
        r
    }

    /// Closes the operator (also done on drop).
    pub fn close(&mut self) {
        if matches!(self.stage, Stage::Open | Stage::Finished) {
            self.op.close();
        }
        self.stage = Stage::Closed;
    }

    /// Everything emitted and not yet taken, in order.
    pub fn output(&self) -> &[Emitted<O::Out>] {
        &self.emitted
    }

    /// Takes everything emitted so far, in order.
    pub fn take_output(&mut self) -> Vec<Emitted<O::Out>> {
        std::mem::take(&mut self.emitted)
    }

    /// Takes everything emitted so far as records (value and timestamp).
    pub fn take_records(&mut self) -> Batch<O::Out> {
        self.take_output()
            .into_iter()
            .map(|e| StreamRecord {
                value: e.value,
                timestamp: e.timestamp,
            })
            .collect()
    }

    /// Takes the values emitted so far.
    pub fn take_values(&mut self) -> Vec<O::Out> {
        self.take_output().into_iter().map(|e| e.value).collect()
    }

    /// Takes everything emitted so far, split by `side` into the main output
    /// (`Ok`) and a side output (`Err`), each in order.
    #[allow(clippy::type_complexity)] // two lists of the same shape
    pub fn take_output_split<M, S>(
        &mut self,
        mut side: impl FnMut(O::Out) -> Result<M, S>,
    ) -> (Vec<Emitted<M>>, Vec<Emitted<S>>) {
        let (mut main, mut other) = (Vec::new(), Vec::new());
        for e in self.take_output() {
            match side(e.value) {
                Ok(value) => main.push(Emitted {
                    value,
                    timestamp: e.timestamp,
                    watermark: e.watermark,
                }),
                Err(value) => other.push(Emitted {
                    value,
                    timestamp: e.timestamp,
                    watermark: e.watermark,
                }),
            }
        }
        (main, other)
    }

    /// The watermarks the operator forwarded, in order.
    pub fn forwarded_watermarks(&self) -> &[Watermark] {
        &self.forwarded
    }

    /// The operator's input watermark.
    pub fn current_watermark(&self) -> Watermark {
        self.ctx.current_watermark()
    }

    /// Whether the input is idle (see [`OperatorHarness::process_idle`]).
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// The processing-time callback the operator asked for and has not had yet (ms).
    pub fn pending_processing_time(&self) -> Option<Millis> {
        self.callback
    }

    /// Processing time now (ms).
    pub fn processing_time(&self) -> Millis {
        self.ctx.processing_time()
    }

    /// The harness's clock (shared: moving it moves the harness's processing time,
    /// without firing callbacks).
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The operator, to inspect its state.
    pub fn operator(&self) -> &O {
        &self.op
    }

    /// The operator, mutable.
    pub fn operator_mut(&mut self) -> &mut O {
        &mut self.op
    }

    /// The operator's context (late records counted, subtask).
    pub fn context(&self) -> &OperatorContext {
        &self.ctx
    }

    /// The subtask the operator runs as.
    pub fn info(&self) -> &SubtaskInfo {
        self.ctx.info()
    }
}

impl<O: Operator> Drop for OperatorHarness<O> {
    fn drop(&mut self) {
        self.close();
    }
}
