//! Tasks: one thread per parallel subtask of a chain, a single loop that feeds the
//! chain from a source reader or from input channels (operator methods are never
//! called concurrently, as Flink's mailbox model).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::element::StreamElement;
use brook_core::operator::{Output, SubtaskInfo};
use brook_core::source::{InputStatus, SourceReader};
use brook_core::time::{Millis, SharedClock, Watermark};
use crossbeam_channel::Select;

use crate::chain::{guarded, Link};
use crate::channel::{note_queue, queued, InputGate, WatermarkTracker};
use crate::error::{TaskFailure, TaskResult};
use crate::metrics::OperatorMetrics;

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
}

impl TaskEnv {
    fn check_cancelled(&self) -> TaskResult {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(TaskFailure::Disconnected);
        }
        Ok(())
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

/// A source subtask: polls its reader and feeds the chain.
pub(crate) struct SourceTask<T> {
    pub(crate) info: SubtaskInfo,
    pub(crate) reader: Box<dyn SourceReader<Out = T>>,
    pub(crate) head: Box<dyn Link<T>>,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) env: TaskEnv,
}

impl<T: Send + 'static> SourceTask<T> {
    fn run_loop(&mut self) -> TaskResult {
        self.head.open()?;
        let mut out = Output::with_capacity(self.env.batch_size);
        loop {
            self.env.check_cancelled()?;
            let reader = &mut self.reader;
            let status = guarded(&self.info, || reader.poll_next(&mut out))?;
            if !out.is_empty() {
                let b = out.take();
                OperatorMetrics::add(&self.metrics.records_out, b.len() as u64);
                self.head.batch(b)?;
            }
            fire_callbacks(self.head.as_mut(), &self.env.clock)?;
            match status {
                InputStatus::MoreAvailable => {}
                InputStatus::NothingAvailable => {
                    self.head.flush()?;
                    let wait = wait_ms(self.head.as_ref(), &self.env.clock);
                    self.reader.wait_for_data(wait.max(1) as u64);
                }
                InputStatus::End => {
                    // Bounded input: the final watermark fires every window and timer.
                    self.head.watermark(Watermark::MAX)?;
                    self.metrics.watermark.store(i64::MAX, Ordering::Relaxed);
                    return self.head.end();
                }
            }
        }
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
    pub(crate) gate: InputGate<T>,
    pub(crate) head: Box<dyn Link<T>>,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) env: TaskEnv,
}

impl<T: Send + 'static> InputTask<T> {
    fn run_loop(&mut self) -> TaskResult {
        self.head.open()?;
        let receivers = self.gate.receivers.clone();
        let mut tracker = WatermarkTracker::new(receivers.len());
        let mut sel = Select::new();
        for r in &receivers {
            sel.recv(r);
        }
        let mut open = receivers.len();
        while open > 0 {
            note_queue(&self.metrics, queued(&self.gate));
            let oper = match sel.try_select() {
                Ok(op) => op,
                Err(_) => {
                    // Nothing waiting: send on what is buffered before blocking.
                    self.head.flush()?;
                    self.env.check_cancelled()?;
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
            let i = oper.index();
            let msg = oper
                .recv(&receivers[i])
                .map_err(|_| TaskFailure::Disconnected)?;
            let update = match msg {
                StreamElement::Records(b) => {
                    self.head.batch(b)?;
                    fire_callbacks(self.head.as_mut(), &self.env.clock)?;
                    continue;
                }
                StreamElement::Watermark(w) => tracker.on_watermark(i, w),
                StreamElement::Idle(idle) => tracker.on_idle(i, idle),
                StreamElement::EndOfInput => {
                    sel.remove(i);
                    open -= 1;
                    tracker.on_end(i)
                }
            };
            if let Some(w) = update.advanced {
                self.head.watermark(w)?;
            }
            if let Some(idle) = update.idle_changed {
                self.head.idle(idle)?;
            }
        }
        self.head.end()
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
