//! Barrier alignment of a task with input channels (aligned checkpoints, exactly once;
//! semantics.md §4), as Flink's `SingleCheckpointBarrierHandler` in its aligned mode.
//! Pure: the task loop reports each barrier and end of input it reads, and acts on the
//! [`Alignment`] it gets back; records never touch the aligner.
//!
//! The rules, per task:
//! - A barrier on a channel starts the alignment of its checkpoint if none is under
//!   way, and holds that channel back ([`Alignment::Block`]): nothing more is read from
//!   it until the checkpoint is aligned, so no record after the barrier reaches the
//!   snapshot.
//! - The checkpoint is aligned ([`Alignment::Aligned`]) once every channel has either
//!   delivered its barrier or ended: an ended channel counts as aligned (it sends
//!   nothing more that could belong after the barrier). Every open channel is usable
//!   again.
//! - A newer barrier (a larger id) during an alignment supersedes the older one, as in
//!   Flink: the older checkpoint cannot complete any more (brook's coordinator starts
//!   the next one only after aborting it, e.g. on a timeout), every channel is
//!   released and the newer barrier aligns from its first channel. An older barrier
//!   during an alignment is ignored and its channel stays usable.
//! - A barrier no newer than the last aligned checkpoint, a barrier or end on an ended
//!   channel and a second barrier of the same checkpoint on a held channel change
//!   nothing. Channels deliver each barrier once and in increasing order and nothing
//!   after their end, so the task loop never reports these; the rules only make the
//!   machine total.

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId};

/// What the task does after a barrier or an end of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alignment {
    /// Nothing changes.
    Continue,
    /// Hold back this channel until the checkpoint is aligned. If the barrier
    /// superseded an older one, every other open channel is usable again.
    Block(usize),
    /// Every channel delivered this barrier or ended: snapshot now, then pass it on.
    /// Every open channel is usable again.
    Aligned(CheckpointBarrier),
}

/// The state of one input channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    /// Read from it.
    Open,
    /// It delivered the barrier being aligned: held back.
    Blocked,
    /// It delivered its end of input.
    Ended,
}

/// Tracks barrier alignment over a task's input channels (see the module doc).
#[derive(Debug)]
pub(crate) struct BarrierAligner {
    channels: Vec<Channel>,
    /// The checkpoint being aligned, if any.
    aligning: Option<CheckpointBarrier>,
    /// The last checkpoint aligned (older barriers are stale).
    last_aligned: Option<CheckpointId>,
}

impl BarrierAligner {
    /// An aligner over `channels` open input channels, none aligning.
    pub(crate) fn new(channels: usize) -> Self {
        BarrierAligner {
            channels: vec![Channel::Open; channels],
            aligning: None,
            last_aligned: None,
        }
    }

    /// Whether the task reads `channel` now: it is open and not held back by an
    /// alignment.
    pub(crate) fn is_usable(&self, channel: usize) -> bool {
        self.channels.get(channel) == Some(&Channel::Open)
    }

    /// Whether every channel has ended (true for a task without channels).
    pub(crate) fn all_ended(&self) -> bool {
        self.channels.iter().all(|c| *c == Channel::Ended)
    }

    /// `channel` delivered `barrier`.
    pub(crate) fn on_barrier(&mut self, channel: usize, barrier: CheckpointBarrier) -> Alignment {
        let held = match self.channels.get(channel) {
            Some(Channel::Ended) | None => return Alignment::Continue,
            Some(c) => *c == Channel::Blocked,
        };
        if self.last_aligned.is_some_and(|id| barrier.id <= id) {
            return Alignment::Continue;
        }
        match self.aligning {
            Some(a) if barrier.id < a.id || (barrier.id == a.id && held) => {
                return Alignment::Continue;
            }
            Some(a) if barrier.id == a.id => {}
            // None, or a newer barrier: it supersedes the one aligning.
            _ => {
                self.aligning = Some(barrier);
                self.release();
            }
        }
        if let Some(c) = self.channels.get_mut(channel) {
            *c = Channel::Blocked;
        }
        self.aligned_or(Alignment::Block(channel))
    }

    /// `channel` delivered its end of input.
    pub(crate) fn on_end(&mut self, channel: usize) -> Alignment {
        match self.channels.get_mut(channel) {
            Some(c) if *c != Channel::Ended => *c = Channel::Ended,
            _ => return Alignment::Continue,
        }
        self.aligned_or(Alignment::Continue)
    }

    /// [`Alignment::Aligned`] when the checkpoint under way has its barrier or an end
    /// on every channel (and the alignment ends), else `otherwise`.
    fn aligned_or(&mut self, otherwise: Alignment) -> Alignment {
        match self.aligning {
            Some(b) if !self.channels.contains(&Channel::Open) => {
                self.aligning = None;
                self.last_aligned = Some(b.id);
                self.release();
                Alignment::Aligned(b)
            }
            _ => otherwise,
        }
    }

    /// Every held channel is usable again.
    fn release(&mut self) {
        for c in &mut self.channels {
            if *c == Channel::Blocked {
                *c = Channel::Open;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a task's loop reports to its aligner.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Event {
        /// A barrier of checkpoint `.1` on channel `.0`.
        Barrier(usize, CheckpointId),
        /// End of input on a channel.
        End(usize),
    }
    use Event::*;

    fn barrier(id: CheckpointId) -> CheckpointBarrier {
        // The timestamp tells a barrier apart from another of the same id.
        CheckpointBarrier {
            id,
            timestamp: 1000 + id as i64,
        }
    }

    fn aligned(id: CheckpointId) -> Alignment {
        Alignment::Aligned(barrier(id))
    }

    use Alignment::{Block, Continue};

    fn step(a: &mut BarrierAligner, e: Event) -> Alignment {
        match e {
            Barrier(ch, id) => a.on_barrier(ch, barrier(id)),
            End(ch) => a.on_end(ch),
        }
    }

    fn usable(a: &BarrierAligner, n: usize) -> Vec<usize> {
        (0..n).filter(|&ch| a.is_usable(ch)).collect()
    }

    /// Feeds each row's event to an aligner over `n` channels and checks the decision
    /// and the channels the task reads after it; returns the aligner.
    fn run(n: usize, rows: &[(Event, Alignment, &[usize])]) -> BarrierAligner {
        let mut a = BarrierAligner::new(n);
        assert_eq!(usable(&a, n), (0..n).collect::<Vec<_>>());
        for (k, &(event, want, reads)) in rows.iter().enumerate() {
            assert_eq!(step(&mut a, event), want, "row {k}: {event:?}");
            assert_eq!(usable(&a, n), reads, "row {k}: {event:?}, channels read");
        }
        a
    }

    #[test]
    fn a_barrier_on_every_channel_aligns_the_checkpoint() {
        run(
            3,
            &[
                (Barrier(1, 1), Block(1), &[0, 2]),
                (Barrier(0, 1), Block(0), &[2]),
                (Barrier(2, 1), aligned(1), &[0, 1, 2]),
                // The next checkpoint aligns afresh.
                (Barrier(2, 2), Block(2), &[0, 1]),
                (Barrier(0, 2), Block(0), &[1]),
                (Barrier(1, 2), aligned(2), &[0, 1, 2]),
            ],
        );
    }

    #[test]
    fn a_single_input_task_aligns_on_its_barrier() {
        let a = run(
            1,
            &[
                (Barrier(0, 1), aligned(1), &[0]),
                (Barrier(0, 2), aligned(2), &[0]),
                (End(0), Continue, &[]),
                (Barrier(0, 3), Continue, &[]),
            ],
        );
        assert!(a.all_ended());
    }

    #[test]
    fn an_ended_channel_counts_as_aligned() {
        // A barrier after end of input on another channel aligns at once.
        run(
            2,
            &[
                (End(0), Continue, &[1]),
                (Barrier(1, 1), aligned(1), &[1]),
                (Barrier(1, 2), aligned(2), &[1]),
            ],
        );
        // The other channels end while a barrier waits for them.
        let a = run(
            3,
            &[
                (Barrier(0, 1), Block(0), &[1, 2]),
                (End(1), Continue, &[2]),
                (End(2), aligned(1), &[0]),
                (End(0), Continue, &[]),
            ],
        );
        assert!(a.all_ended());
        // Every channel ends while aligning, the held one too (the task loop never
        // reads a held channel; the machine is total): aligned, nothing left to read.
        let a = run(
            2,
            &[
                (Barrier(1, 1), Block(1), &[0]),
                (End(1), Continue, &[0]),
                (End(0), aligned(1), &[]),
            ],
        );
        assert!(a.all_ended());
    }

    #[test]
    fn a_newer_barrier_supersedes_the_one_aligning() {
        run(
            3,
            &[
                (Barrier(0, 1), Block(0), &[1, 2]),
                // Channel 1's source skipped checkpoint 1: 2 supersedes it and channel
                // 0 is read again.
                (Barrier(1, 2), Block(1), &[0, 2]),
                // An older barrier while 2 aligns: ignored, its channel still read.
                (Barrier(2, 1), Continue, &[0, 2]),
                (Barrier(0, 2), Block(0), &[2]),
                (Barrier(2, 2), aligned(2), &[0, 1, 2]),
                // Checkpoint 1 never aligns: its barriers are stale now.
                (Barrier(0, 1), Continue, &[0, 1, 2]),
                (Barrier(0, 2), Continue, &[0, 1, 2]),
                (Barrier(0, 3), Block(0), &[1, 2]),
                // A newer barrier on the held channel itself supersedes too.
                (Barrier(0, 4), Block(0), &[1, 2]),
                (Barrier(1, 3), Continue, &[1, 2]),
                (Barrier(1, 4), Block(1), &[2]),
                (End(2), aligned(4), &[0, 1]),
            ],
        );
    }

    #[test]
    fn duplicates_and_unknown_channels_change_nothing() {
        let a = run(
            2,
            &[
                (Barrier(0, 1), Block(0), &[1]),
                (Barrier(0, 1), Continue, &[1]),
                (Barrier(7, 1), Continue, &[1]),
                (End(7), Continue, &[1]),
                (End(1), aligned(1), &[0]),
                (End(1), Continue, &[0]),
                (Barrier(1, 2), Continue, &[0]),
                (End(0), Continue, &[]),
                (End(0), Continue, &[]),
            ],
        );
        assert!(a.all_ended());
        assert!(BarrierAligner::new(0).all_ended());
    }

    /// The alignment `InputTask::run_loop` did inline before the aligner (flags per
    /// channel), kept as the reference: returns the barrier to snapshot, if any.
    struct InlineFlags {
        ended: Vec<bool>,
        blocked: Vec<bool>,
        aligning: Option<CheckpointBarrier>,
    }

    impl InlineFlags {
        fn step(&mut self, e: Event) -> Option<CheckpointBarrier> {
            match e {
                Barrier(i, id) => {
                    let b = barrier(id);
                    if self.aligning.is_none_or(|a| a.id < b.id) {
                        self.aligning = Some(b);
                        self.blocked.iter_mut().for_each(|x| *x = false);
                    }
                    if self.aligning.is_some_and(|a| a.id == b.id) {
                        self.blocked[i] = true;
                    }
                }
                End(i) => self.ended[i] = true,
            }
            let b = self.aligning?;
            let n = self.ended.len();
            if (0..n).all(|k| self.blocked[k] || self.ended[k]) {
                self.aligning = None;
                self.blocked.iter_mut().for_each(|x| *x = false);
                return Some(b);
            }
            None
        }

        fn usable(&self) -> Vec<usize> {
            (0..self.ended.len())
                .filter(|&i| !self.ended[i] && !self.blocked[i])
                .collect()
        }
    }

    /// Per channel: the checkpoints its upstream sent a barrier for (increasing; a
    /// source may skip one) and whether its input ends after them.
    fn channel_script() -> impl Strategy<Value = (Vec<CheckpointId>, bool)> {
        (
            proptest::collection::btree_set(1u64..7, 0..6),
            any::<bool>(),
        )
            .prop_map(|(ids, ends)| (ids.into_iter().collect(), ends))
    }

    proptest! {
        /// On every sequence channels can deliver (each channel's barriers in order,
        /// nothing after its end, nothing read from a held channel), the aligner
        /// decides as the inline flags did and lets the task read the same channels.
        #[test]
        fn decides_as_the_inline_flags_did(
            scripts in proptest::collection::vec(channel_script(), 1..5),
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let n = scripts.len();
            let mut next = vec![0usize; n];
            let mut a = BarrierAligner::new(n);
            let mut flags = InlineFlags {
                ended: vec![false; n],
                blocked: vec![false; n],
                aligning: None,
            };
            for pick in picks {
                // The channels the task reads and that have something to deliver.
                let ready: Vec<usize> = flags
                    .usable()
                    .into_iter()
                    .filter(|&ch| next[ch] < scripts[ch].0.len() + usize::from(scripts[ch].1))
                    .collect();
                if ready.is_empty() {
                    break;
                }
                let ch = ready[pick.index(ready.len())];
                let (ids, _) = &scripts[ch];
                let e = match ids.get(next[ch]) {
                    Some(&id) => Barrier(ch, id),
                    None => End(ch),
                };
                next[ch] += 1;
                let want = flags.step(e);
                let got = match step(&mut a, e) {
                    Alignment::Aligned(b) => Some(b),
                    Continue | Block(_) => None,
                };
                prop_assert_eq!(got, want, "{:?}", e);
                prop_assert_eq!(usable(&a, n), flags.usable(), "{:?}", e);
                prop_assert_eq!(a.all_ended(), flags.ended.iter().all(|x| *x));
            }
        }
    }
}
