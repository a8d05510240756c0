//! Tasks: one thread per parallel subtask of a chain, a single loop that feeds the
//! chain from a source reader or from input channels (operator methods are never
//! called concurrently, as Flink's mailbox model).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId};
use brook_core::element::{Batch, StreamElement, StreamRecord};
use brook_core::operator::{Output, SubtaskInfo};
use brook_core::source::{InputStatus, SourceReader};
use brook_core::time::{Millis, SharedClock, Stopwatch, Watermark};
use brook_core::watermark::{SplitWatermarks, WatermarkStrategy, WatermarkUpdate};
use crossbeam_channel::Select;

use crate::alignment::{Alignment, BarrierAligner};
use crate::chain::{guarded, Link};
use crate::channel::{note_queue, queued, InputGate, WatermarkTracker};
use crate::checkpoint::{CheckpointControl, SourceSnapshot, TaskSnapshot};
use crate::error::{TaskFailure, TaskResult};
use crate::ids::VertexId;
use crate::metrics::{OperatorMetrics, SplitMetrics};
use brook_operators::row_batch::rows_of;

/// How long a task waits for input before checking timers and cancellation (ms).
const POLL_MS: i64 = 50;

/// Times an idle task yields its core before parking on its inputs.
const SPIN_YIELDS: usize = 32;

/// A runnable task.
pub(crate) trait TaskRunner: Send {
    fn name(&self) -> String;
    fn run(self: Box<Self>) -> TaskResult;
}

/// Shared by all tasks of a job.
#[derive(Debug, Clone)]
pub(crate) struct TaskEnv {
    pub(crate) clock: SharedClock,
    pub(crate) cancelled: Arc<AtomicBool>,
    pub(crate) batch_size: usize,
    /// Set when the job takes checkpoints.
    pub(crate) checkpoints: Option<Arc<CheckpointControl>>,
}

impl TaskEnv {
    /// Fails when the job is cancelled, after committing a checkpoint that completed
    /// since `last`: a stop-with-savepoint cancels right after its savepoint, whose
    /// sink transactions must commit (as Flink's), not wait for a resume.
    fn check_cancelled_committing<T>(
        &self,
        head: &mut dyn Link<T>,
        last: &mut CheckpointId,
    ) -> TaskResult {
        if self.cancelled.load(Ordering::Relaxed) {
            self.notify_complete(head, last)?;
            return Err(TaskFailure::Disconnected);
        }
        Ok(())
    }

    /// A checkpoint sources should inject now, if one was requested since `last`.
    fn requested_checkpoint(&self, last: CheckpointId) -> Option<CheckpointId> {
        let c = self.checkpoints.as_ref()?;
        let r = c.requested.load(Ordering::SeqCst);
        (r > last).then_some(r)
    }

    /// Passes a newly completed checkpoint down the chain.
    fn notify_complete<T>(&self, head: &mut dyn Link<T>, last: &mut CheckpointId) -> TaskResult {
        if let Some(c) = &self.checkpoints {
            let done = c.completed.load(Ordering::SeqCst);
            if done > *last {
                *last = done;
                head.checkpoint_complete(done)?;
            }
        }
        Ok(())
    }

    /// The barrier of checkpoint `id` now (processing time).
    fn barrier(&self, id: CheckpointId) -> CheckpointBarrier {
        CheckpointBarrier {
            id,
            timestamp: self.clock.now_ms(),
        }
    }

    /// The task's input ended: no later checkpoint can complete.
    fn task_ended(&self) {
        if let Some(c) = &self.checkpoints {
            c.task_ended.store(true, Ordering::SeqCst);
        }
    }
}

fn fire_callbacks<T>(head: &mut dyn Link<T>, clock: &SharedClock) -> TaskResult {
    if let Some(t) = head.next_callback() {
        let now = clock.now_ms();
        if t <= now {
            head.processing_time(now)?;
        }
    }
    Ok(())
}

/// How long to wait for input: until the next processing-time callback, at most
/// [`POLL_MS`].
fn wait_ms<T>(head: &dyn Link<T>, clock: &SharedClock) -> Millis {
    match head.next_callback() {
        Some(t) => (t - clock.now_ms()).clamp(0, POLL_MS),
        None => POLL_MS,
    }
}

/// Sends a watermark advance and an idleness change down the chain in
/// [`WatermarkUpdate`]'s order: becoming active before the watermark, becoming idle
/// after it (a watermark marks the channel active again downstream).
fn forward_update<T>(head: &mut dyn Link<T>, u: WatermarkUpdate) -> TaskResult {
    if u.idle == Some(false) {
        head.idle(false)?;
    }
    if let Some(w) = u.watermark {
        head.watermark(w)?;
    }
    if u.idle == Some(true) {
        head.idle(true)?;
    }
    Ok(())
}

/// A source subtask: polls its reader, assigns event time, tracks watermarks per
/// split (semantics.md §2) and feeds the chain.
pub(crate) struct SourceTask<T> {
    pub(crate) info: SubtaskInfo,
    pub(crate) reader: Box<dyn SourceReader<Out = T>>,
    pub(crate) head: Box<dyn Link<T>>,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) env: TaskEnv,
    pub(crate) strategy: WatermarkStrategy<T>,
    /// Ids of this subtask's splits, in the order the reader got them.
    pub(crate) split_ids: Vec<String>,
    pub(crate) vertex: VertexId,
    /// Restored watermark progress per split id.
    pub(crate) restored_watermarks: crate::checkpoint::SplitWatermarks,
}

/// At most this often (ms) a source with idleness asks its reader which splits have
/// records waiting.
const BACKLOG_CHECK_MS: Millis = 100;

/// How often per-split watermarks are copied into the metrics (ms).
const SPLIT_METRICS_MS: Millis = 200;

impl<T: Send + 'static> SourceTask<T> {
    fn run_loop(&mut self) -> TaskResult {
        self.head.open()?;
        let clock = self.env.clock.clone();
        let mut now = clock.now_ms();
        let mut wms = self.strategy.split_watermarks(self.split_ids.len(), now);
        for (i, id) in self.split_ids.iter().enumerate() {
            if let Some(p) = self.restored_watermarks.get(id) {
                let w = Watermark(p.subtask_watermark);
                wms.restore(i, p.max_timestamp, p.idle, w, now);
            }
        }
        // The restored watermark goes out before any record, also when every split
        // was idle, so a record late before the crash is late after it (semantics.md
        // §4).
        if !self.restored_watermarks.is_empty() {
            let u = wms.update(now);
            self.apply(u)?;
        }
        let (mut injected, mut completed) = (0, 0);
        let interval = self.strategy.emit_interval_ms();
        let per_record = wms.enabled() && interval == 0;
        let mut next_emit = now.saturating_add(interval);
        let mut next_metrics = now;
        // With idleness: how often splits with records waiting are kept active.
        let backlog_check_ms = match self.strategy.idle_timeout_ms() {
            Some(t) if wms.enabled() => (t / 4).clamp(1, BACKLOG_CHECK_MS),
            _ => 0,
        };
        let mut next_backlog_check = now;
        let mut counts = vec![0u64; self.split_ids.len()];
        let mut runs: Vec<(usize, u32)> = Vec::new();
        let mut out = Output::with_capacity(self.env.batch_size);
        loop {
            // A completed checkpoint reaches the reader (offsets committed to a Kafka
            // group) before a cancel that followed it (stop with checkpoint) is seen.
            let before = completed;
            self.env
                .notify_complete(self.head.as_mut(), &mut completed)?;
            if completed > before {
                let reader = &mut self.reader;
                guarded(&self.info, || reader.checkpoint_complete(completed))?;
            }
            self.env
                .check_cancelled_committing(self.head.as_mut(), &mut completed)?;
            if let Some(id) = self.env.requested_checkpoint(injected) {
                injected = id;
                self.checkpoint(id, &wms)?;
            }
            let reader = &mut self.reader;
            let status = guarded(&self.info, || reader.poll_next(&mut out))?;
            now = clock.now_ms();
            if !out.is_empty() {
                runs.clear();
                runs.extend(out.split_runs());
                let b = out.take();
                OperatorMetrics::add(&self.metrics.records_out, rows_of(&b));
                self.emit_records(b, &runs, &mut wms, &mut counts, per_record, now)?;
            }
            for s in out.take_finished_splits() {
                wms.finish_split(s as usize);
            }
            if backlog_check_ms > 0 && now >= next_backlog_check {
                self.note_backlogs(&mut wms, now);
                next_backlog_check = now.saturating_add(backlog_check_ms);
            }
            if wms.enabled() && (per_record || now >= next_emit) {
                let u = wms.update(now);
                self.apply(u)?;
                next_emit = now.saturating_add(interval.max(1));
            }
            if now >= next_metrics {
                self.split_metrics(&wms);
                next_metrics = now + SPLIT_METRICS_MS;
            }
            fire_callbacks(self.head.as_mut(), &self.env.clock)?;
            match status {
                InputStatus::MoreAvailable => {}
                InputStatus::NothingAvailable => {
                    self.head.flush()?;
                    let mut wait = wait_ms(self.head.as_ref(), &self.env.clock);
                    if wms.enabled() {
                        wait = wait.min(next_emit.saturating_sub(now));
                    }
                    self.reader.wait_for_data(wait.max(1) as u64);
                }
                InputStatus::End => {
                    // Bounded input: the final watermark fires every window and timer.
                    self.head.watermark(Watermark::MAX)?;
                    self.metrics.watermark.store(i64::MAX, Ordering::Relaxed);
                    self.split_metrics(&wms);
                    self.await_final_checkpoint(&wms, &mut injected, &mut completed)?;
                    self.env.task_ended();
                    return self.head.end();
                }
            }
        }
    }

    /// At the end of the input, with checkpoints: keeps answering checkpoints (the
    /// reader's positions are its end) until the job's final checkpoint completed and
    /// was passed down the chain, so sinks commit everything before they finish
    /// (see the checkpoint module).
    fn await_final_checkpoint(
        &mut self,
        wms: &SplitWatermarks,
        injected: &mut CheckpointId,
        completed: &mut CheckpointId,
    ) -> TaskResult {
        let Some(control) = self.env.checkpoints.clone() else {
            return Ok(());
        };
        self.head.flush()?;
        control.sources_ended.fetch_add(1, Ordering::SeqCst);
        loop {
            let before = *completed;
            self.env.notify_complete(self.head.as_mut(), completed)?;
            if *completed > before {
                let reader = &mut self.reader;
                let done = *completed;
                guarded(&self.info, || reader.checkpoint_complete(done))?;
            }
            self.env
                .check_cancelled_committing(self.head.as_mut(), completed)?;
            if let Some(id) = self.env.requested_checkpoint(*injected) {
                *injected = id;
                self.checkpoint(id, wms)?;
            }
            if control.final_done(*completed) {
                return Ok(());
            }
            fire_callbacks(self.head.as_mut(), &self.env.clock)?;
            self.head.flush()?;
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Snapshots the reader's positions and the split watermarks, passes the barrier
    /// down the chain (each operator snapshots), writes the task's file and acks.
    fn checkpoint(&mut self, id: CheckpointId, wms: &SplitWatermarks) -> TaskResult {
        let Some(control) = self.env.checkpoints.clone() else {
            return Ok(());
        };
        self.head.flush()?;
        let reader = &mut self.reader;
        reader.checkpoint_started(id);
        let Some(positions) = reader.snapshot_positions() else {
            let _ = control.acks.send(crate::checkpoint::Ack {
                id,
                result: Err(format!("{}: this source cannot be checkpointed", self.info)),
                alignment: None,
            });
            return Ok(());
        };
        let task = self.info.to_string();
        let mut snap = control.new_snapshot(id, &task);
        snap.sources.push(SourceSnapshot {
            vertex: self.vertex,
            positions,
            watermarks: self
                .split_ids
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), wms.split_max_timestamp(i), wms.split_idle(i)))
                .collect(),
            watermark: wms.current().millis(),
        });
        self.head.barrier(self.env.barrier(id), &mut snap)?;
        // A source injects the barrier: nothing to align.
        control.write_and_ack(id, &task, &snap, 0);
        Ok(())
    }

    /// Records a watermark advance in the metrics and sends the update down the chain.
    fn apply(&mut self, u: WatermarkUpdate) -> TaskResult {
        if let Some(w) = u.watermark {
            self.metrics.watermark.store(w.millis(), Ordering::Relaxed);
        }
        forward_update(self.head.as_mut(), u)
    }

    /// Splits whose reader reports records waiting are not idle (see
    /// [`SplitWatermarks::note_backlog`]).
    fn note_backlogs(&self, wms: &mut SplitWatermarks, now: Millis) {
        for (id, p) in self.reader.split_progress() {
            if p.lag.is_some_and(|l| l > 0) {
                if let Some(i) = self.split_ids.iter().position(|s| *s == id) {
                    wms.note_backlog(i, now);
                }
            }
        }
    }

    fn split_metrics(&self, wms: &SplitWatermarks) {
        let progress = self.reader.split_progress();
        let splits = self
            .split_ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let p = progress.iter().find(|(s, _)| s == id).map(|(_, p)| *p);
                SplitMetrics {
                    split: id.clone(),
                    watermark: wms.split_watermark(i).map_or(i64::MIN, |w| w.millis()),
                    idle: wms.split_idle(i),
                    offset: p.map(|p| p.offset),
                    lag: p.and_then(|p| p.lag),
                    late_records: wms.split_late(i),
                }
            })
            .collect();
        *self
            .metrics
            .splits
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = splits;
    }

    /// Assigns a record's event time; `Ok(false)` when the record is bad and was
    /// skipped or dead-lettered by the strategy's policy.
    fn assign(&self, r: &mut StreamRecord<T>, split: usize, count: u64) -> TaskResult<bool> {
        let Some(a) = self.strategy.timestamp_assigner() else {
            return Ok(true);
        };
        match a(&r.value, r.timestamp) {
            Ok(ts) => {
                r.timestamp = Some(ts);
                Ok(true)
            }
            Err(e) => {
                let position = format!(
                    "{}, split {}, record {count}",
                    self.info,
                    self.split_ids.get(split).map_or("?", String::as_str),
                );
                let info = &self.info;
                guarded(info, || {
                    self.strategy
                        .bad_records()
                        .handle(&e.raw, &position, &e.reason)
                })?;
                Ok(false)
            }
        }
    }

    /// Assigns timestamps, updates the split watermarks and sends the records; with
    /// per-record emission, a watermark follows each record that advances it.
    fn emit_records(
        &mut self,
        batch: Batch<T>,
        runs: &[(usize, u32)],
        wms: &mut SplitWatermarks,
        counts: &mut [u64],
        per_record: bool,
        now: Millis,
    ) -> TaskResult {
        if !wms.enabled() && self.strategy.timestamp_assigner().is_none() {
            return self.head.batch(batch);
        }
        let mut run = 0;
        let mut split = 0usize;
        let mut next_split = |i: usize, split: &mut usize| {
            while run < runs.len() && runs[run].0 <= i {
                *split = runs[run].1 as usize;
                run += 1;
            }
        };
        let mut count = |split: usize| {
            counts.get_mut(split).map_or(0, |c| {
                *c += 1;
                *c
            })
        };
        if per_record {
            let mut pending: Batch<T> = Vec::new();
            for (i, mut r) in batch.into_iter().enumerate() {
                next_split(i, &mut split);
                if !self.assign(&mut r, split, count(split))? {
                    continue;
                }
                if let Some(ts) = r.timestamp {
                    if wms.on_record(split, ts, now) {
                        if !pending.is_empty() {
                            self.head.batch(std::mem::take(&mut pending))?;
                        }
                        self.head.idle(false)?;
                    }
                }
                pending.push(r);
                let u = wms.update(now);
                if u != WatermarkUpdate::default() {
                    self.head.batch(std::mem::take(&mut pending))?;
                    self.apply(u)?;
                }
            }
            if !pending.is_empty() {
                self.head.batch(pending)?;
            }
            return Ok(());
        }
        let mut batch = batch;
        let mut keep: Vec<bool> = Vec::new();
        let mut reactivated = false;
        for i in 0..batch.len() {
            next_split(i, &mut split);
            let c = count(split);
            if !self.assign(&mut batch[i], split, c)? {
                if keep.is_empty() {
                    keep = vec![true; batch.len()];
                }
                keep[i] = false;
                continue;
            }
            if let Some(ts) = batch[i].timestamp {
                reactivated |= wms.on_record(split, ts, now);
            }
        }
        if !keep.is_empty() {
            let mut k = keep.into_iter();
            batch.retain(|_| k.next().unwrap_or(true));
        }
        if reactivated {
            self.head.idle(false)?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.head.batch(batch)
    }
}

impl<T: Send + 'static> TaskRunner for SourceTask<T> {
    fn name(&self) -> String {
        self.info.to_string()
    }

    fn run(mut self: Box<Self>) -> TaskResult {
        let r = self.run_loop();
        self.reader.close();
        self.head.close();
        r
    }
}

/// A subtask fed by input channels.
pub(crate) struct InputTask<T> {
    pub(crate) name: String,
    /// The vertex at the head of the task's chain (its input watermark is checkpointed
    /// under it).
    pub(crate) vertex: VertexId,
    /// Restored: the watermark the task's inputs had reached at the checkpoint.
    pub(crate) restored_watermark: Option<Watermark>,
    pub(crate) gate: InputGate<T>,
    pub(crate) head: Box<dyn Link<T>>,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) env: TaskEnv,
}

/// A `Select` over the receivers the aligner lets the task read; `map[k]` is the
/// channel of the select's operation `k`.
fn select_over<'a, T>(
    receivers: &'a [crossbeam_channel::Receiver<StreamElement<T>>],
    aligner: &BarrierAligner,
) -> (Select<'a>, Vec<usize>) {
    let mut sel = Select::new();
    let mut map = Vec::new();
    for (i, r) in receivers.iter().enumerate() {
        if aligner.is_usable(i) {
            sel.recv(r);
            map.push(i);
        }
    }
    (sel, map)
}

impl<T: Send + 'static> InputTask<T> {
    fn run_loop(&mut self) -> TaskResult {
        self.head.open()?;
        let receivers = self.gate.receivers.clone();
        let n = receivers.len();
        let mut tracker = match self.restored_watermark {
            Some(floor) => {
                // The chain resumes where its inputs were at the checkpoint, before
                // any record: the restored sources may start lower (a split idle at
                // the checkpoint, subtasks merged by a rescale) or send a record
                // before their watermark (semantics.md §4).
                if floor > Watermark::MIN {
                    self.head.watermark(floor)?;
                }
                WatermarkTracker::resuming_from(n, floor)
            }
            None => WatermarkTracker::new(n),
        };
        // Which channels are read: open ones not held back by a barrier alignment.
        let mut aligner = BarrierAligner::new(n);
        // The checkpoint whose first barrier arrived, and since when (alignment time).
        let mut aligning: Option<(CheckpointId, Stopwatch)> = None;
        let (mut sel, mut map) = select_over(&receivers, &aligner);
        let mut completed = 0;
        while !aligner.all_ended() {
            note_queue(&self.metrics, queued(&self.gate));
            self.env
                .notify_complete(self.head.as_mut(), &mut completed)?;
            let oper = match sel.try_select() {
                Ok(op) => op,
                Err(_) => {
                    // Nothing waiting: send on what is buffered before blocking.
                    self.head.flush()?;
                    self.env
                        .check_cancelled_committing(self.head.as_mut(), &mut completed)?;
                    fire_callbacks(self.head.as_mut(), &self.env.clock)?;
                    // Under load the next batch is usually microseconds away: yield a
                    // few times before parking, which spares the producer a futex
                    // wake-up per batch.
                    let mut spun = None;
                    for _ in 0..SPIN_YIELDS {
                        std::thread::yield_now();
                        if let Ok(op) = sel.try_select() {
                            spun = Some(op);
                            break;
                        }
                    }
                    if let Some(op) = spun {
                        op
                    } else {
                        let wait = wait_ms(self.head.as_ref(), &self.env.clock);
                        match sel.select_timeout(Duration::from_millis(wait.max(1) as u64)) {
                            Ok(op) => op,
                            Err(_) => continue,
                        }
                    }
                }
            };
            let i = map[oper.index()];
            let msg = oper
                .recv(&receivers[i])
                .map_err(|_| TaskFailure::Disconnected)?;
            // Barriers and ends change which channels are read.
            let mut alignment = None;
            let update = match msg {
                StreamElement::Records(b) => {
                    self.head.batch(b)?;
                    // Between batches too: under steady input the channels never run
                    // empty, where the loop checks otherwise.
                    self.env
                        .check_cancelled_committing(self.head.as_mut(), &mut completed)?;
                    fire_callbacks(self.head.as_mut(), &self.env.clock)?;
                    continue;
                }
                StreamElement::Watermark(w) => tracker.on_watermark(i, w),
                StreamElement::Idle(idle) => tracker.on_idle(i, idle),
                StreamElement::Barrier(b) => {
                    if aligning.as_ref().is_none_or(|(id, _)| *id != b.id) {
                        aligning = Some((b.id, Stopwatch::start()));
                    }
                    alignment = Some(aligner.on_barrier(i, b));
                    WatermarkUpdate::default()
                }
                StreamElement::EndOfInput => {
                    alignment = Some(aligner.on_end(i));
                    if aligner.all_ended() {
                        self.env.task_ended();
                    }
                    tracker.on_end(i)
                }
            };
            forward_update(self.head.as_mut(), update)?;
            if let Some(a) = alignment {
                if let Alignment::Aligned(b) = a {
                    let us = match aligning.take() {
                        Some((id, sw)) if id == b.id => sw.elapsed_nanos() / 1_000,
                        _ => 0,
                    };
                    self.checkpoint(b, tracker.current(), us)?;
                }
                (sel, map) = select_over(&receivers, &aligner);
            }
        }
        // The final checkpoint completed before the sources ended: commit it before
        // the sinks finish.
        self.env
            .notify_complete(self.head.as_mut(), &mut completed)?;
        self.head.end()
    }

    /// Every input delivered barrier `b`: snapshot the chain and the inputs' combined
    /// `watermark`, write the file, ack.
    fn checkpoint(
        &mut self,
        b: CheckpointBarrier,
        watermark: Watermark,
        alignment_us: u64,
    ) -> TaskResult {
        let Some(control) = self.env.checkpoints.clone() else {
            return self.head.barrier(b, &mut TaskSnapshot::default());
        };
        let mut snap = control.new_snapshot(b.id, &self.name);
        snap.inputs.push((self.vertex, watermark.millis()));
        self.head.barrier(b, &mut snap)?;
        control.write_and_ack(b.id, &self.name, &snap, alignment_us);
        Ok(())
    }
}

impl<T: Send + 'static> TaskRunner for InputTask<T> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(mut self: Box<Self>) -> TaskResult {
        let r = self.run_loop();
        self.head.close();
        r
    }
}
