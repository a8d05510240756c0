//! Channels between tasks: bounded queues of batches (backpressure), the writer that
//! partitions a stream over them, and the input gate that reads them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId};
use brook_core::element::{Batch, StreamElement};
use brook_core::keys::{key_group_for_hash, subtask_for_key_group};
use brook_core::partition::Partitioner;
use brook_core::time::{Millis, Stopwatch, Watermark};
use brook_core::watermark::WatermarkUpdate;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::chain::Link;
use crate::checkpoint::TaskSnapshot;
use crate::error::{TaskFailure, TaskResult};
use crate::hot_keys::HotKeyTracker;
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
    /// Key-partitioned edges with hot keys on: counts a sample of the keys.
    hot_keys: Option<HotKeyTracker<T>>,
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
        hot_keys: Option<HotKeyTracker<T>>,
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
            hot_keys,
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
        if let Some(t) = &mut self.hot_keys {
            t.tick();
        }
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
                // Hashes the sampled records only: partitioning needs no hash here.
                if let (Some(t), Some(hash)) = (&mut self.hot_keys, &self.key_hash) {
                    t.count_sampled(&batch, |r| &r.value, |v| hash(v));
                }
                self.send(0, StreamElement::Records(batch))
            }
            Partitioner::KeyGroups => {
                let n = self.senders.len() as u32;
                let Some(hash) = self.key_hash.clone() else {
                    return Err(TaskFailure::Disconnected);
                };
                for r in batch {
                    let h = hash(&r.value);
                    if let Some(t) = &mut self.hot_keys {
                        if t.sample() {
                            t.count(h, &r.value);
                        }
                    }
                    let kg = key_group_for_hash(h, self.max_parallelism);
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
        // Flushes come when the input pauses: the figures of the last batches are
        // published even when no batch follows.
        if let Some(t) = &mut self.hot_keys {
            t.tick();
        }
        self.flush_all()
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, _snap: &mut TaskSnapshot) -> TaskResult {
        self.broadcast(StreamElement::Barrier(barrier))
    }

    fn checkpoint_complete(&mut self, _id: CheckpointId) -> TaskResult {
        Ok(())
    }

    fn end(&mut self) -> TaskResult {
        if let Some(t) = &self.hot_keys {
            t.publish();
        }
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
/// (semantics.md §2). Pure, no I/O. Each event returns what changed as a
/// [`WatermarkUpdate`], the type a source subtask's split watermarks return too.
#[derive(Debug)]
pub(crate) struct WatermarkTracker {
    channels: Vec<(Watermark, bool, bool)>,
    current: Watermark,
    idle: bool,
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
        let mut u = WatermarkUpdate::default();
        if let Some(m) = min {
            if m > self.current {
                self.current = m;
                u.watermark = Some(m);
            }
        }
        if all_idle != self.idle {
            self.idle = all_idle;
            u.idle = Some(all_idle);
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

    /// An input event of a tracker.
    #[derive(Debug, Clone, Copy)]
    enum Input {
        Wm(usize, i64),
        Idle(usize, bool),
        End(usize),
    }
    use Input::*;

    const NONE: WatermarkUpdate = WatermarkUpdate {
        idle: None,
        watermark: None,
    };

    fn advanced(w: i64) -> WatermarkUpdate {
        WatermarkUpdate {
            watermark: Some(Watermark(w)),
            ..NONE
        }
    }

    fn idle(idle: bool) -> WatermarkUpdate {
        WatermarkUpdate {
            idle: Some(idle),
            ..NONE
        }
    }

    /// Feeds each row's input and checks the update and the current watermark after it.
    fn run(mut t: WatermarkTracker, rows: &[(Input, WatermarkUpdate, i64)]) -> WatermarkTracker {
        for (k, &(input, want, current)) in rows.iter().enumerate() {
            let got = match input {
                Wm(ch, w) => t.on_watermark(ch, Watermark(w)),
                Idle(ch, i) => t.on_idle(ch, i),
                End(ch) => t.on_end(ch),
            };
            assert_eq!(got, want, "row {k}: {input:?}");
            assert_eq!(t.current(), Watermark(current), "row {k}: {input:?}");
        }
        t
    }

    #[test]
    fn a_resumed_tracker_never_goes_below_its_floor() {
        let t = WatermarkTracker::resuming_from(2, Watermark(48));
        assert_eq!(t.current(), Watermark(48));
        run(
            t,
            &[
                // A restored source that starts lower (it was idle at the checkpoint)
                // moves nothing back.
                (Wm(0, 11), NONE, 48),
                (Wm(1, 60), NONE, 48),
                // Past the floor on every channel: advances as usual.
                (Wm(0, 99), advanced(60), 60),
            ],
        );
    }

    #[test]
    fn input_watermark_is_the_minimum_of_active_channels() {
        let min = i64::MIN;
        let t = run(
            WatermarkTracker::new(3),
            &[
                (Wm(0, 10), NONE, min),
                (Wm(1, 5), NONE, min),
                (Wm(2, 7), advanced(5), 5),
                // Channel 1 goes idle: the minimum of the others counts.
                (Idle(1, true), advanced(7), 7),
                // A smaller watermark never moves the input watermark back.
                (Wm(1, 6), NONE, 7),
                (End(1), NONE, 7),
                (Wm(2, 20), advanced(10), 10),
                // Channel 0 idle too: channel 2 alone decides.
                (Idle(0, true), advanced(20), 20),
                // Every open channel idle: the task is idle, its watermark holds.
                (Idle(2, true), idle(true), 20),
                (Idle(2, false), idle(false), 20),
                (End(0), NONE, 20),
                // Every channel ended: not idle, nothing more to hand out.
                (End(2), NONE, 20),
            ],
        );
        assert!(t.all_ended());
    }

    #[test]
    fn an_idle_task_turns_active_and_advances_in_one_update() {
        let min = i64::MIN;
        let t = run(
            WatermarkTracker::new(2),
            &[
                (Wm(0, 50), NONE, min),
                (Wm(1, 100), advanced(50), 50),
                (Idle(1, true), NONE, 50),
                (Idle(0, true), idle(true), 50),
                // Channel 1 comes back ahead of the held watermark: both change, and
                // the update's order (active first) sends them on.
                (
                    Idle(1, false),
                    WatermarkUpdate {
                        idle: Some(false),
                        watermark: Some(Watermark(100)),
                    },
                    100,
                ),
                (Wm(0, 120), NONE, 100),
                // The last active channel ends while the other is idle: the task is
                // idle.
                (Idle(0, true), NONE, 100),
                (End(1), idle(true), 100),
                // Every channel ended: no longer idle (the end follows downstream).
                (End(0), idle(false), 100),
            ],
        );
        assert!(t.all_ended());
    }
}
