//! Channels between tasks: bounded queues of batches (backpressure), the writer that
//! partitions a stream over them, and the input gate that reads them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId};
use brook_core::element::{Batch, StreamElement};
use brook_core::keys::{key_group_for_hash, subtask_for_key_group};
use brook_core::partition::Partitioner;
use brook_core::time::{Millis, Stopwatch, Watermark};
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::chain::Link;
use crate::checkpoint::TaskSnapshot;
use crate::error::{TaskFailure, TaskResult};
use crate::metrics::OperatorMetrics;

/// Hashes a record's key (for [`Partitioner::KeyGroups`]).
pub(crate) type KeyHasher<T> = Arc<dyn Fn(&T) -> u64 + Send + Sync>;

/// The upstream end of an edge for one upstream subtask.
pub(crate) struct ChannelWriter<T> {
    senders: Vec<Sender<StreamElement<T>>>,
    partitioner: Partitioner,
    key_hash: Option<KeyHasher<T>>,
    max_parallelism: u32,
    /// Per downstream subtask, records waiting to be sent (hash partitioning only).
    buffers: Vec<Batch<T>>,
    batch_size: usize,
    /// Forward edges: the one downstream subtask.
    forward_to: usize,
    next: usize,
    metrics: Arc<OperatorMetrics>,
}

impl<T: Clone + Send + 'static> ChannelWriter<T> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        senders: Vec<Sender<StreamElement<T>>>,
        partitioner: Partitioner,
        key_hash: Option<KeyHasher<T>>,
        max_parallelism: u32,
        batch_size: usize,
        subtask: usize,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        let n = senders.len();
        ChannelWriter {
            buffers: (0..n).map(|_| Vec::new()).collect(),
            forward_to: subtask % n.max(1),
            next: subtask % n.max(1),
            senders,
            partitioner,
            key_hash,
            max_parallelism,
            batch_size,
            metrics,
        }
    }

    fn send(&self, i: usize, e: StreamElement<T>) -> TaskResult {
        match self.senders[i].try_send(e) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(e)) => {
                let sw = Stopwatch::start();
                let r = self.senders[i]
                    .send(e)
                    .map_err(|_| TaskFailure::Disconnected);
                OperatorMetrics::add(&self.metrics.backpressure_ns, sw.elapsed_nanos());
                r
            }
            Err(TrySendError::Disconnected(_)) => Err(TaskFailure::Disconnected),
        }
    }

    fn send_buffer(&mut self, i: usize) -> TaskResult {
        if self.buffers[i].is_empty() {
            return Ok(());
        }
        let b = std::mem::replace(&mut self.buffers[i], Vec::with_capacity(self.batch_size));
        self.send(i, StreamElement::Records(b))
    }

    fn flush_all(&mut self) -> TaskResult {
        (0..self.buffers.len()).try_for_each(|i| self.send_buffer(i))
    }

    fn broadcast(&mut self, e: StreamElement<T>) -> TaskResult {
        self.flush_all()?;
        (0..self.senders.len()).try_for_each(|i| self.send(i, e.clone()))
    }
}

impl<T: Clone + Send + 'static> Link<T> for ChannelWriter<T> {
    fn open(&mut self) -> TaskResult {
        Ok(())
    }

    fn batch(&mut self, batch: Batch<T>) -> TaskResult {
        match self.partitioner {
            Partitioner::Forward => self.send(self.forward_to, StreamElement::Records(batch)),
            Partitioner::Rebalance => {
                let i = self.next;
                self.next = (self.next + 1) % self.senders.len();
                self.send(i, StreamElement::Records(batch))
            }
            Partitioner::Broadcast => {
                let n = self.senders.len();
                for i in 0..n - 1 {
                    self.send(i, StreamElement::Records(batch.clone()))?;
                }
                self.send(n - 1, StreamElement::Records(batch))
            }
            // One downstream subtask owns every key group: no need to hash.
            Partitioner::KeyGroups if self.senders.len() == 1 => {
                self.send(0, StreamElement::Records(batch))
            }
            Partitioner::KeyGroups => {
                let n = self.senders.len() as u32;
                let Some(hash) = self.key_hash.clone() else {
                    return Err(TaskFailure::Disconnected);
                };
                for r in batch {
                    let kg = key_group_for_hash(hash(&r.value), self.max_parallelism);
                    let t = subtask_for_key_group(self.max_parallelism, n, kg) as usize;
                    self.buffers[t].push(r);
                    if self.buffers[t].len() >= self.batch_size {
                        self.send_buffer(t)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn watermark(&mut self, wm: Watermark) -> TaskResult {
        self.broadcast(StreamElement::Watermark(wm))
    }

    fn idle(&mut self, idle: bool) -> TaskResult {
        self.broadcast(StreamElement::Idle(idle))
    }

    fn next_callback(&self) -> Option<Millis> {
        None
    }

    fn processing_time(&mut self, _now: Millis) -> TaskResult {
        Ok(())
    }

    fn flush(&mut self) -> TaskResult {
        self.flush_all()
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, _snap: &mut TaskSnapshot) -> TaskResult {
        self.broadcast(StreamElement::Barrier(barrier))
    }

    fn checkpoint_complete(&mut self, _id: CheckpointId) -> TaskResult {
        Ok(())
    }

    fn end(&mut self) -> TaskResult {
        self.broadcast(StreamElement::EndOfInput)
    }

    fn close(&mut self) {}
}

/// The downstream end: one receiver per upstream channel.
pub(crate) struct InputGate<T> {
    pub(crate) receivers: Vec<Receiver<StreamElement<T>>>,
}

/// The channels of one edge: per upstream subtask its senders (one per downstream
/// channel), and per downstream subtask its gate.
pub(crate) type EdgeChannels<T> = (Vec<Vec<Sender<StreamElement<T>>>>, Vec<InputGate<T>>);

/// Creates the channels of one edge: `up` writers' senders and `down` gates.
pub(crate) fn channels<T>(
    up: usize,
    down: usize,
    capacity: usize,
    all_to_all: bool,
) -> EdgeChannels<T> {
    let mut senders: Vec<Vec<Sender<StreamElement<T>>>> = (0..up).map(|_| Vec::new()).collect();
    let mut gates: Vec<InputGate<T>> = (0..down)
        .map(|_| InputGate {
            receivers: Vec::new(),
        })
        .collect();
    if all_to_all {
        for s in senders.iter_mut() {
            for g in gates.iter_mut() {
                let (tx, rx) = bounded(capacity);
                s.push(tx);
                g.receivers.push(rx);
            }
        }
    } else {
        // Forward: subtask i to subtask i (equal parallelism).
        for (s, g) in senders.iter_mut().zip(gates.iter_mut()) {
            let (tx, rx) = bounded(capacity);
            s.push(tx);
            g.receivers.push(rx);
        }
    }
    (senders, gates)
}

/// Tracks per-channel watermarks and idleness and computes the task's input
/// watermark: the minimum over channels that are neither idle nor ended
/// (semantics.md §2). Pure, no I/O.
#[derive(Debug)]
pub(crate) struct WatermarkTracker {
    channels: Vec<(Watermark, bool, bool)>,
    current: Watermark,
    idle: bool,
}

/// What changed after an input event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WatermarkUpdate {
    pub(crate) advanced: Option<Watermark>,
    pub(crate) idle_changed: Option<bool>,
}

impl WatermarkTracker {
    pub(crate) fn new(n: usize) -> Self {
        WatermarkTracker {
            channels: vec![(Watermark::MIN, false, false); n],
            current: Watermark::MIN,
            idle: false,
        }
    }

    /// A tracker of a restored task that resumes from `floor`, the watermark its
    /// inputs had reached at the checkpoint: it never hands out a smaller one, so a
    /// record late before the crash is late after it (semantics.md §4), whatever the
    /// restored sources send first.
    pub(crate) fn resuming_from(n: usize, floor: Watermark) -> Self {
        WatermarkTracker {
            current: floor,
            ..WatermarkTracker::new(n)
        }
    }

    /// The watermark handed out last (the floor until the inputs pass it).
    pub(crate) fn current(&self) -> Watermark {
        self.current
    }

    pub(crate) fn on_watermark(&mut self, ch: usize, wm: Watermark) -> WatermarkUpdate {
        let c = &mut self.channels[ch];
        c.0 = c.0.max(wm);
        c.1 = false;
        self.update()
    }

    pub(crate) fn on_idle(&mut self, ch: usize, idle: bool) -> WatermarkUpdate {
        self.channels[ch].1 = idle;
        self.update()
    }

    pub(crate) fn on_end(&mut self, ch: usize) -> WatermarkUpdate {
        self.channels[ch].2 = true;
        self.update()
    }

    pub(crate) fn all_ended(&self) -> bool {
        self.channels.iter().all(|c| c.2)
    }

    fn update(&mut self) -> WatermarkUpdate {
        let active = self.channels.iter().filter(|c| !c.1 && !c.2);
        let min = active.map(|c| c.0).min();
        let all_idle = min.is_none() && !self.all_ended();
        let mut u = WatermarkUpdate {
            advanced: None,
            idle_changed: None,
        };
        if let Some(m) = min {
            if m > self.current {
                self.current = m;
                u.advanced = Some(m);
            }
        }
        if all_idle != self.idle {
            self.idle = all_idle;
            u.idle_changed = Some(all_idle);
        }
        u
    }
}

pub(crate) fn queued<T>(gate: &InputGate<T>) -> u64 {
    gate.receivers.iter().map(|r| r.len() as u64).sum()
}

pub(crate) fn note_queue(metrics: &OperatorMetrics, n: u64) {
    metrics.max_queued_batches.fetch_max(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_tracker_never_goes_below_its_floor() {
        let mut t = WatermarkTracker::resuming_from(2, Watermark(48));
        assert_eq!(t.current(), Watermark(48));
        // A restored source that starts lower (it was idle at the checkpoint) moves
        // nothing back.
        assert_eq!(t.on_watermark(0, Watermark(11)).advanced, None);
        assert_eq!(t.on_watermark(1, Watermark(60)).advanced, None);
        assert_eq!(t.current(), Watermark(48));
        // Past the floor on every channel: advances as usual.
        assert_eq!(
            t.on_watermark(0, Watermark(99)).advanced,
            Some(Watermark(60))
        );
    }

    #[test]
    fn input_watermark_is_the_minimum_of_active_channels() {
        let mut t = WatermarkTracker::new(3);
        assert_eq!(t.on_watermark(0, Watermark(10)).advanced, None);
        assert_eq!(t.on_watermark(1, Watermark(5)).advanced, None);
        assert_eq!(t.on_watermark(2, Watermark(7)).advanced, Some(Watermark(5)));
        // Channel 1 goes idle: the minimum of the others counts.
        assert_eq!(t.on_idle(1, true).advanced, Some(Watermark(7)));
        // A smaller watermark never moves the input watermark back.
        assert_eq!(t.on_watermark(1, Watermark(6)).advanced, None);
        assert_eq!(t.on_end(1).advanced, None);
        assert_eq!(
            t.on_watermark(2, Watermark(20)).advanced,
            Some(Watermark(10))
        );
        // Channel 0 idle too: channel 2 alone decides.
        assert_eq!(t.on_idle(0, true).advanced, Some(Watermark(20)));
        let u = t.on_idle(2, true);
        assert_eq!(
            u,
            WatermarkUpdate {
                advanced: None,
                idle_changed: Some(true)
            }
        );
        assert_eq!(t.on_idle(2, false).idle_changed, Some(false));
        t.on_end(0);
        t.on_end(2);
        assert!(t.all_ended());
    }
}
