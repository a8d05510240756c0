//! Links of an operator chain: operators, sinks, fan-out and channel writers, called
//! one after the other inside a task (chaining is a function call, not a channel).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId, RestoredState, StateSnapshot};
use brook_core::element::Batch;
use brook_core::operator::{
    OpResult, Operator, OperatorContext, OperatorError, Output, SubtaskInfo,
};
use brook_core::sink::SinkWriter;
use brook_core::time::{Millis, Stopwatch, Watermark};
// Records in and out count a YAML job's batch of rows as its rows (issue 18).
use brook_operators::row_batch::rows_of;
use std::sync::atomic::Ordering;

use crate::checkpoint::TaskSnapshot;
use crate::error::{EngineError, TaskFailure, TaskResult};
use crate::ids::VertexId;
use crate::metrics::OperatorMetrics;

/// Outputs larger than this many records are passed on in chunks of this size.
const LARGE_OUTPUT: usize = 8192;

/// One element of a chain, receiving what the previous one emits.
pub(crate) trait Link<T>: Send {
    fn open(&mut self) -> TaskResult;
    fn batch(&mut self, batch: Batch<T>) -> TaskResult;
    fn watermark(&mut self, wm: Watermark) -> TaskResult;
    fn idle(&mut self, idle: bool) -> TaskResult;
    /// Earliest processing time at which some operator of the chain wants a callback.
    fn next_callback(&self) -> Option<Millis>;
    fn processing_time(&mut self, now: Millis) -> TaskResult;
    /// Sends what is buffered for downstream (the task is about to wait for input).
    fn flush(&mut self) -> TaskResult;
    /// A checkpoint barrier: snapshot into `snap`, then pass it on.
    fn barrier(&mut self, barrier: CheckpointBarrier, snap: &mut TaskSnapshot) -> TaskResult;
    /// A checkpoint is complete (sinks commit).
    fn checkpoint_complete(&mut self, id: CheckpointId) -> TaskResult;
    /// End of input: finish and pass the end on.
    fn end(&mut self) -> TaskResult;
    /// Always called last.
    fn close(&mut self);
}

/// A type-erased `Box<dyn Link<T>>`, for plumbing between typed builders.
pub(crate) type ErasedLink = Box<dyn Any + Send>;

pub(crate) fn erase<T: 'static>(link: Box<dyn Link<T>>) -> ErasedLink {
    Box::new(link)
}

pub(crate) fn unerase<T: 'static>(
    link: ErasedLink,
    what: &str,
) -> Result<Box<dyn Link<T>>, EngineError> {
    link.downcast::<Box<dyn Link<T>>>()
        .map(|b| *b)
        .map_err(|_| EngineError::InvalidGraph(format!("record type mismatch at {what}")))
}

pub(crate) fn panic_message(p: Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
}

/// Runs `f`, turning an error or a panic into a task failure naming `info`.
pub(crate) fn guarded<R>(info: &SubtaskInfo, f: impl FnOnce() -> OpResult<R>) -> TaskResult<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => Ok(r),
        // The job was cancelled during the call: ended, not failed.
        Ok(Err(OperatorError::Cancelled)) => Err(TaskFailure::Disconnected),
        Ok(Err(e)) => Err(TaskFailure::Failed(EngineError::Task {
            task: info.to_string(),
            message: e.to_string(),
        })),
        Err(p) => Err(TaskFailure::Failed(EngineError::Task {
            task: info.to_string(),
            message: format!("panicked: {}", panic_message(p)),
        })),
    }
}

/// An operator followed by the rest of its chain.
pub(crate) struct OperatorLink<O: Operator> {
    op: O,
    vertex: VertexId,
    /// State to restore before `open`.
    restore: Option<RestoredState>,
    ctx: OperatorContext,
    out: Output<O::Out>,
    next: Box<dyn Link<O::Out>>,
    metrics: Arc<OperatorMetrics>,
    callback: Option<Millis>,
}

impl<O: Operator> OperatorLink<O> {
    pub(crate) fn new(
        op: O,
        vertex: VertexId,
        restore: Option<RestoredState>,
        ctx: OperatorContext,
        next: Box<dyn Link<O::Out>>,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        OperatorLink {
            op,
            vertex,
            restore,
            ctx,
            out: Output::new(),
            next,
            metrics,
            callback: None,
        }
    }

    fn emit(&mut self) -> TaskResult {
        let late = self.ctx.late_records();
        if late != 0 {
            self.metrics.late_records.store(late, Ordering::Relaxed);
        }
        if let Some(t) = self.ctx.take_processing_time_callback() {
            self.callback = Some(self.callback.map_or(t, |c| c.min(t)));
        }
        let n = self.out.len();
        if n == 0 {
            return Ok(());
        }
        if n <= LARGE_OUTPUT {
            let b = self.out.take();
            OperatorMetrics::add(&self.metrics.records_out, rows_of(&b));
            return self.next.batch(b);
        }
        // A large output (a watermark firing many windows) goes on in chunks from a
        // buffer that keeps its capacity: freshly grown megabyte buffers at every
        // firing cost more in page faults than the copy.
        let mut records = self.out.drain();
        loop {
            let chunk: Batch<O::Out> = records.by_ref().take(LARGE_OUTPUT).collect();
            if chunk.is_empty() {
                return Ok(());
            }
            OperatorMetrics::add(&self.metrics.records_out, rows_of(&chunk));
            self.next.batch(chunk)?;
            // Millions of rows from one call take a while downstream: a cancelled job
            // stops between chunks.
            if self.ctx.cancel_flag().is_cancelled() {
                return Err(TaskFailure::Disconnected);
            }
        }
    }

    fn timed<R>(
        &mut self,
        f: impl FnOnce(&mut O, &mut OperatorContext, &mut Output<O::Out>) -> OpResult<R>,
    ) -> TaskResult<R> {
        let sw = Stopwatch::start();
        let (op, ctx, out) = (&mut self.op, &mut self.ctx, &mut self.out);
        let info = ctx.info().clone();
        let r = guarded(&info, || f(op, ctx, out));
        OperatorMetrics::add(&self.metrics.busy_ns, sw.elapsed_nanos());
        r
    }
}

impl<O: Operator> Link<O::In> for OperatorLink<O> {
    fn open(&mut self) -> TaskResult {
        if let Some(r) = self.restore.take() {
            self.timed(|op, ctx, _| op.restore_state(ctx, &r))?;
        }
        self.timed(|op, ctx, _| op.open(ctx))?;
        self.emit()?;
        self.next.open()
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snap: &mut TaskSnapshot) -> TaskResult {
        self.timed(|op, ctx, out| op.prepare_snapshot_pre_barrier(barrier.id, ctx, out))?;
        self.emit()?;
        let mut s = match &snap.storage {
            Some(st) => StateSnapshot::with_storage(st.for_operator(self.vertex)),
            None => StateSnapshot::new(),
        };
        match self.timed(|op, ctx, _| op.snapshot_state(barrier.id, ctx, &mut s)) {
            Ok(()) if !s.is_empty() => snap.operators.push((self.vertex, self.ctx.info().index, s)),
            Ok(()) => {}
            // A state that cannot be written (its files are gone because the
            // checkpoint was aborted, a full disk) fails this checkpoint, not the
            // job: the operator's live state is intact.
            Err(TaskFailure::Failed(e)) => {
                snap.declined.get_or_insert(e.to_string());
            }
            Err(e) => return Err(e),
        }
        self.next.barrier(barrier, snap)
    }

    fn checkpoint_complete(&mut self, id: CheckpointId) -> TaskResult {
        self.timed(|op, _, _| op.notify_checkpoint_complete(id))?;
        self.emit()?;
        self.next.checkpoint_complete(id)
    }

    fn batch(&mut self, batch: Batch<O::In>) -> TaskResult {
        OperatorMetrics::add(&self.metrics.records_in, rows_of(&batch));
        OperatorMetrics::add(&self.metrics.batches_in, 1);
        self.timed(|op, ctx, out| op.process_batch(batch, ctx, out))?;
        self.emit()
    }

    fn watermark(&mut self, wm: Watermark) -> TaskResult {
        self.ctx.set_current_watermark(wm);
        self.metrics.watermark.store(wm.millis(), Ordering::Relaxed);
        let fwd = self.timed(|op, ctx, out| op.on_watermark(wm, ctx, out))?;
        self.emit()?;
        match fwd {
            Some(w) => self.next.watermark(w),
            None => Ok(()),
        }
    }

    fn idle(&mut self, idle: bool) -> TaskResult {
        self.next.idle(idle)
    }

    fn next_callback(&self) -> Option<Millis> {
        match (self.callback, self.next.next_callback()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn processing_time(&mut self, now: Millis) -> TaskResult {
        if self.callback.is_some_and(|t| t <= now) {
            self.callback = None;
            self.timed(|op, ctx, out| op.on_processing_time(now, ctx, out))?;
            self.emit()?;
        }
        self.next.processing_time(now)
    }

    fn flush(&mut self) -> TaskResult {
        self.next.flush()
    }

    fn end(&mut self) -> TaskResult {
        self.timed(|op, ctx, out| op.finish(ctx, out))?;
        self.emit()?;
        self.next.end()
    }

    fn close(&mut self) {
        let info = self.ctx.info().clone();
        let op = &mut self.op;
        let _ = guarded(&info, || {
            op.close();
            Ok(())
        });
        self.next.close();
    }
}

/// A sink writer at the end of a chain.
pub(crate) struct SinkLink<T> {
    writer: Box<dyn SinkWriter<In = T>>,
    vertex: VertexId,
    info: SubtaskInfo,
    metrics: Arc<OperatorMetrics>,
    /// Pre-committed, not yet committed: (checkpoint, committable).
    pending: Vec<(CheckpointId, Vec<u8>)>,
}

impl<T> SinkLink<T> {
    pub(crate) fn new(
        writer: Box<dyn SinkWriter<In = T>>,
        vertex: VertexId,
        info: SubtaskInfo,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        SinkLink {
            writer,
            vertex,
            info,
            metrics,
            pending: Vec::new(),
        }
    }
}

impl<T: Send + 'static> Link<T> for SinkLink<T> {
    fn open(&mut self) -> TaskResult {
        Ok(())
    }

    fn batch(&mut self, batch: Batch<T>) -> TaskResult {
        OperatorMetrics::add(&self.metrics.records_in, rows_of(&batch));
        OperatorMetrics::add(&self.metrics.batches_in, 1);
        let sw = Stopwatch::start();
        let w = &mut self.writer;
        let r = guarded(&self.info, || w.write_batch(batch));
        OperatorMetrics::add(&self.metrics.busy_ns, sw.elapsed_nanos());
        r
    }

    fn watermark(&mut self, wm: Watermark) -> TaskResult {
        self.metrics.watermark.store(wm.millis(), Ordering::Relaxed);
        Ok(())
    }

    fn idle(&mut self, _idle: bool) -> TaskResult {
        Ok(())
    }

    fn next_callback(&self) -> Option<Millis> {
        None
    }

    fn processing_time(&mut self, _now: Millis) -> TaskResult {
        Ok(())
    }

    fn flush(&mut self) -> TaskResult {
        let w = &mut self.writer;
        guarded(&self.info, || w.flush())
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snap: &mut TaskSnapshot) -> TaskResult {
        let w = &mut self.writer;
        if let Some(c) = guarded(&self.info, || w.prepare_commit(barrier.id))? {
            self.pending.push((barrier.id, c));
        }
        // Everything pre-committed and not yet committed goes into the checkpoint: if
        // an earlier checkpoint failed, its data is committed with this one.
        let all = self.pending.iter().map(|(_, c)| c.clone()).collect();
        snap.sinks.push((self.vertex, self.info.index, all));
        Ok(())
    }

    fn checkpoint_complete(&mut self, id: CheckpointId) -> TaskResult {
        let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= id);
        self.pending = rest;
        if done.is_empty() {
            return Ok(());
        }
        let w = &mut self.writer;
        guarded(&self.info, || {
            w.commit(id, done.into_iter().map(|(_, c)| c).collect())
        })
    }

    fn end(&mut self) -> TaskResult {
        let w = &mut self.writer;
        guarded(&self.info, || w.finish())
    }

    fn close(&mut self) {
        let w = &mut self.writer;
        let _ = guarded(&self.info, || {
            w.close();
            Ok(())
        });
    }
}

/// Sends everything to several downstream links (a stream consumed twice).
pub(crate) struct FanOut<T> {
    outputs: Vec<Box<dyn Link<T>>>,
}

impl<T> FanOut<T> {
    pub(crate) fn new(outputs: Vec<Box<dyn Link<T>>>) -> Self {
        FanOut { outputs }
    }
}

impl<T: Clone + Send + 'static> Link<T> for FanOut<T> {
    fn open(&mut self) -> TaskResult {
        self.outputs.iter_mut().try_for_each(|o| o.open())
    }

    fn batch(&mut self, batch: Batch<T>) -> TaskResult {
        let n = self.outputs.len();
        for (i, o) in self.outputs.iter_mut().enumerate() {
            if i + 1 == n {
                return o.batch(batch);
            }
            o.batch(batch.clone())?;
        }
        Ok(())
    }

    fn watermark(&mut self, wm: Watermark) -> TaskResult {
        self.outputs.iter_mut().try_for_each(|o| o.watermark(wm))
    }

    fn idle(&mut self, idle: bool) -> TaskResult {
        self.outputs.iter_mut().try_for_each(|o| o.idle(idle))
    }

    fn next_callback(&self) -> Option<Millis> {
        self.outputs.iter().filter_map(|o| o.next_callback()).min()
    }

    fn processing_time(&mut self, now: Millis) -> TaskResult {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.processing_time(now))
    }

    fn flush(&mut self) -> TaskResult {
        self.outputs.iter_mut().try_for_each(|o| o.flush())
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snap: &mut TaskSnapshot) -> TaskResult {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.barrier(barrier, snap))
    }

    fn checkpoint_complete(&mut self, id: CheckpointId) -> TaskResult {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.checkpoint_complete(id))
    }

    fn end(&mut self) -> TaskResult {
        self.outputs.iter_mut().try_for_each(|o| o.end())
    }

    fn close(&mut self) {
        self.outputs.iter_mut().for_each(|o| o.close());
    }
}

/// Drops everything: the end of a stream nobody consumes.
pub(crate) struct Discard;

impl<T: Send + 'static> Link<T> for Discard {
    fn open(&mut self) -> TaskResult {
        Ok(())
    }
    fn batch(&mut self, _batch: Batch<T>) -> TaskResult {
        Ok(())
    }
    fn watermark(&mut self, _wm: Watermark) -> TaskResult {
        Ok(())
    }
    fn idle(&mut self, _idle: bool) -> TaskResult {
        Ok(())
    }
    fn next_callback(&self) -> Option<Millis> {
        None
    }
    fn processing_time(&mut self, _now: Millis) -> TaskResult {
        Ok(())
    }
    fn flush(&mut self) -> TaskResult {
        Ok(())
    }
    fn barrier(&mut self, _barrier: CheckpointBarrier, _snap: &mut TaskSnapshot) -> TaskResult {
        Ok(())
    }
    fn checkpoint_complete(&mut self, _id: CheckpointId) -> TaskResult {
        Ok(())
    }
    fn end(&mut self) -> TaskResult {
        Ok(())
    }
    fn close(&mut self) {}
}

/// Combines the erased output links of a vertex into one typed link.
pub(crate) fn combine_outputs<T: Clone + Send + 'static>(
    outputs: Vec<ErasedLink>,
    what: &str,
) -> Result<Box<dyn Link<T>>, EngineError> {
    let mut links: Vec<Box<dyn Link<T>>> = outputs
        .into_iter()
        .map(|o| unerase::<T>(o, what))
        .collect::<Result<_, _>>()?;
    Ok(match links.len() {
        0 => Box::new(Discard),
        1 => links.remove(0),
        _ => Box::new(FanOut::new(links)),
    })
}
