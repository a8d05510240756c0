//! [`NumberedSource`]: a bounded source of events `0..n` where event `i` is a pure
//! function of `i` ([`NumberedEvents`]), parallel and checkpointable. The
//! [`GeneratorSource`](crate::GeneratorSource) and the Nexmark generator (brook-nexmark)
//! are numbered sources.
//!
//! # Splits
//!
//! The range `0..n` is cut into blocks of 16 consecutive events, dealt round-robin to
//! a fixed number `S` of splits ([`NumberedSource::splits`], default 16): split `j`
//! holds the blocks `j, j + S, j + 2S, ...`. The splits do not depend on the
//! parallelism, so a job can restore a checkpoint at another parallelism; subtask `i`
//! of `p` reads splits `i, i + p, ...` (with `p > S` some subtasks have nothing to
//! read). A reader emits its blocks in increasing event order, so its event times
//! grow (when the events' times grow with `i`) and every split's watermark advances
//! together (one contiguous range per split would hold a subtask's watermark back at
//! its slowest range). Small blocks keep the watermark close behind the newest event:
//! a split has its first event after at most `S × 16` events, and the minimum over a
//! subtask's splits lags its newest event by fewer than `(splits per subtask) × 16`
//! events.
//!
//! A split's checkpointed position is the next event number it has not emitted
//! (version byte 1, then a `u64` little endian); a restored reader continues there.
//!
//! # Rate
//!
//! Without a rate the events come as fast as the job takes them, in batches of 4096;
//! with [`NumberedSource::rate`] a subtask emits its share of the rate (the share of
//! all events its splits hold) per second, on a schedule computed from the time elapsed
//! since its first poll (a reader that falls behind catches up).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::source::{
    decode_offset_position, encode_offset_position, InputStatus, Source, SourceReader, Split,
    SplitProgress,
};
use brook_core::time::{Millis, Stopwatch};

use crate::error::ConnectorError;
use crate::BATCH;

/// Events per block: split `j` of `S` holds blocks `j, j + S, ...`.
const BLOCK: u64 = 16;

/// The events of a [`NumberedSource`]: event `i` and its event time, the same on every
/// call (any subtask computes any event from its number alone).
pub trait NumberedEvents: Send + Sync + 'static {
    /// The records.
    type Out: Clone + Send + 'static;

    /// Event number `i` and its event time (ms since the epoch).
    fn event(&self, i: u64) -> (Self::Out, Millis);
}

/// A bounded source of the events `0..n` of `G` (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct NumberedSource<G> {
    events: G,
    n: u64,
    splits: u32,
    rate: Option<f64>,
    schedule: Option<ScheduleStart>,
    name: &'static str,
}

/// The moment a rate's schedule starts, shared by every reader of a source (and by
/// whoever times results against it): set by the first poll of any subtask.
pub type ScheduleStart = Arc<OnceLock<Stopwatch>>;

impl<G: NumberedEvents> NumberedSource<G> {
    /// The events `0..n` of `events`, as fast as possible, in 16 splits whose ids are
    /// `name[j/16]`.
    pub fn new(name: &'static str, events: G, n: u64) -> Self {
        NumberedSource {
            events,
            n,
            splits: 16,
            rate: None,
            schedule: None,
            name,
        }
    }

    /// How many splits (at least 1; default 16): the most subtasks that have events to
    /// read. A checkpoint restores only into a source with the same number of splits.
    ///
    /// # Errors
    /// [`ConnectorError::Config`] (`splits`) for 0.
    pub fn splits(mut self, n: u32) -> Result<Self, ConnectorError> {
        if n == 0 {
            return Err(ConnectorError::config("splits", "must be at least 1"));
        }
        self.splits = n;
        Ok(self)
    }

    /// Events per second over all subtasks (a positive number), or `None`: as fast as
    /// possible (the default). Each subtask emits its share.
    ///
    /// # Errors
    /// [`ConnectorError::Config`] (`rate`) for a rate that is not a positive number.
    pub fn rate(mut self, events_per_second: Option<f64>) -> Result<Self, ConnectorError> {
        if let Some(r) = events_per_second {
            if !(r.is_finite() && r > 0.0) {
                return Err(ConnectorError::config(
                    "rate",
                    format!("must be a positive number of events per second, not {r}"),
                ));
            }
        }
        self.rate = events_per_second;
        Ok(self)
    }

    /// Starts every subtask's schedule of the [rate](Self::rate) at one moment, kept in
    /// `start` (set by the first poll of any subtask unless the caller set it, for
    /// example to a schedule an earlier process began), instead of each at its own
    /// first poll: event at output position `p` is then due `p / rate` seconds after
    /// it, in every subtask, and a sink can measure how late a result is against the
    /// schedule. A reader restored on a shared schedule keeps its place in it: it
    /// catches up with the events that fell due while it was not running.
    pub fn shared_schedule(mut self, start: ScheduleStart) -> Self {
        self.schedule = Some(start);
        self
    }

    /// The total number of events.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The events.
    pub fn events(&self) -> &G {
        &self.events
    }
}

/// Split `index` of `count`: the blocks of 16 events `index, index + count, ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedSplit {
    /// The split's number, `0..count`.
    pub index: u32,
    /// How many splits there are.
    pub count: u32,
    /// The source's name, the prefix of the split id.
    name: &'static str,
}

impl Split for NumberedSplit {
    fn split_id(&self) -> String {
        format!("{}[{}/{}]", self.name, self.index, self.count)
    }
}

impl NumberedSplit {
    /// Whether event `i` belongs to this split.
    fn holds(&self, i: u64) -> bool {
        (i / BLOCK) % u64::from(self.count) == u64::from(self.index)
    }
}

impl<G: NumberedEvents + Clone> NumberedSource<G> {
    fn reader(
        &self,
        splits: Vec<NumberedSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<NumberedReader<G>> {
        let n = self.n;
        let mut cursors = Vec::with_capacity(splits.len());
        let (mut total, mut all) = (0u64, 0u64);
        for (k, split) in splits.into_iter().enumerate() {
            let first = u64::from(split.index).saturating_mul(BLOCK);
            let next = match positions.get(&split.split_id()) {
                None => first,
                Some(bytes) => {
                    let next = decode_offset_position(bytes).ok_or_else(|| {
                        ConnectorError::config(
                            "splits",
                            format!(
                                "the checkpointed position of {} is not one this generator wrote",
                                split.split_id()
                            ),
                        )
                    })?;
                    if next < n && !split.holds(next) {
                        return Err(ConnectorError::config(
                            "splits",
                            format!(
                                "the checkpointed position {next} is not an event of {}",
                                split.split_id()
                            ),
                        )
                        .into());
                    }
                    next
                }
            };
            total += remaining(&split, next, n);
            all += remaining(&split, first, n);
            cursors.push(SplitCursor {
                index: k as u32,
                split,
                next,
                reported: false,
            });
        }
        // This subtask's share of all events (of the rate).
        let share = if n == 0 { 0.0 } else { all as f64 / n as f64 };
        // On a shared schedule a restored reader keeps its place in it: what its
        // splits emitted before counts as emitted, so it catches up with the events
        // that fell due meanwhile instead of starting the schedule over.
        let (emitted, total) = if self.schedule.is_some() {
            (all - total, all)
        } else {
            (0, total)
        };
        Ok(NumberedReader {
            events: self.events.clone(),
            n,
            cursors,
            emitted,
            total,
            rate: self.rate.map(|r| (r * share).max(f64::MIN_POSITIVE)),
            started: None,
            schedule: self.schedule.clone(),
        })
    }
}

/// Events of `split` from event number `next` on (it is one of the split's, or `>= n`).
fn remaining(split: &NumberedSplit, next: u64, n: u64) -> u64 {
    if next >= n {
        return 0;
    }
    let s = u128::from(split.count);
    let b = u128::from(BLOCK);
    let (n, next) = (u128::from(n), u128::from(next));
    // Events of the split in 0..x: full rounds of S blocks, then part of one.
    let upto = |x: u128| {
        let round = s * b;
        let full = x / round * b;
        let rest = x % round;
        let lo = u128::from(split.index) * b;
        full + rest.saturating_sub(lo).min(b)
    };
    (upto(n) - upto(next)) as u64
}

impl<G: NumberedEvents + Clone> Source for NumberedSource<G> {
    type Out = G::Out;
    type Split = NumberedSplit;

    fn enumerate_splits(&self, _parallelism: u32) -> OpResult<Vec<NumberedSplit>> {
        let (count, name) = (self.splits, self.name);
        Ok((0..count)
            .map(|index| NumberedSplit { index, count, name })
            .collect())
    }

    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<NumberedSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = G::Out>>> {
        Ok(Box::new(self.reader(splits, &HashMap::new())?))
    }

    fn restore_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<NumberedSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = G::Out>>> {
        Ok(Box::new(self.reader(splits, positions)?))
    }

    fn is_bounded(&self) -> bool {
        true
    }
}

/// Reading position in one split.
struct SplitCursor {
    /// Index of the split among the reader's splits (for per-split watermarks).
    index: u32,
    split: NumberedSplit,
    /// The next event number to emit (`>= n`: the split is done).
    next: u64,
    /// Whether the end of the split was reported.
    reported: bool,
}

struct NumberedReader<G> {
    events: G,
    n: u64,
    cursors: Vec<SplitCursor>,
    /// Events emitted by this reader.
    emitted: u64,
    /// Events this reader emits in all.
    total: u64,
    /// This subtask's events per second.
    rate: Option<f64>,
    /// Since the first poll, for the rate's schedule.
    started: Option<Stopwatch>,
    /// The source's shared start of the schedule, if it has one.
    schedule: Option<ScheduleStart>,
}

impl<G> NumberedReader<G> {
    /// How many events the schedule allows by now (all of them without a rate).
    fn allowed(&mut self) -> u64 {
        let Some(rate) = self.rate else {
            return self.total;
        };
        let schedule = &self.schedule;
        let elapsed_s = self
            .started
            .get_or_insert_with(|| match schedule {
                Some(start) => *start.get_or_init(Stopwatch::start),
                None => Stopwatch::start(),
            })
            .elapsed_nanos() as f64
            / 1e9;
        // Event k is due at k / rate seconds: event 0 right away.
        let due = (elapsed_s * rate).floor();
        if due >= self.total as f64 {
            self.total
        } else {
            due as u64 + 1
        }
    }
}

impl<G: NumberedEvents> SourceReader for NumberedReader<G> {
    type Out = G::Out;

    fn poll_next(&mut self, out: &mut Output<G::Out>) -> OpResult<InputStatus> {
        let n = self.n;
        for c in &mut self.cursors {
            if c.next >= n && !c.reported {
                c.reported = true;
                out.finish_split(c.index);
            }
        }
        let allowed = self.allowed();
        let mut budget = allowed.saturating_sub(self.emitted).min(BATCH as u64);
        if budget == 0 && self.emitted < self.total {
            return Ok(InputStatus::NothingAvailable);
        }
        out.reserve(budget as usize);
        while budget > 0 {
            // The split with the smallest next event: blocks go out in event order.
            let Some(c) = self
                .cursors
                .iter_mut()
                .filter(|c| c.next < n)
                .min_by_key(|c| c.next)
            else {
                break;
            };
            let start = c.next;
            let block_end = (start / BLOCK + 1).saturating_mul(BLOCK).min(n);
            let end = block_end.min(start.saturating_add(budget));
            out.set_split(c.index);
            for i in start..end {
                let (e, ts) = self.events.event(i);
                out.collect(e, Some(ts));
            }
            let k = end - start;
            budget -= k;
            self.emitted += k;
            c.next = if end == block_end {
                // The split's next block.
                let skip = u64::from(c.split.count - 1).saturating_mul(BLOCK);
                block_end.saturating_add(skip)
            } else {
                end
            };
            if c.next >= n {
                c.reported = true;
                out.finish_split(c.index);
            }
        }
        Ok(if self.cursors.iter().all(|c| c.next >= n) {
            InputStatus::End
        } else {
            InputStatus::MoreAvailable
        })
    }

    fn wait_for_data(&mut self, timeout_ms: u64) {
        let (Some(rate), Some(started)) = (self.rate, self.started) else {
            return;
        };
        // The next event (number `emitted`) is due at emitted / rate seconds.
        let due_ns = self.emitted as f64 / rate * 1e9;
        let wait_ns = (due_ns - started.elapsed_nanos() as f64).max(0.0);
        let wait = Duration::from_nanos(wait_ns as u64).min(Duration::from_millis(timeout_ms));
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    fn split_progress(&self) -> Vec<(String, SplitProgress)> {
        let n = self.n;
        self.cursors
            .iter()
            .map(|c| {
                let progress = SplitProgress {
                    offset: c.next.min(n),
                    lag: Some(remaining(&c.split, c.next, n)),
                };
                (c.split.split_id(), progress)
            })
            .collect()
    }

    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        Some(
            self.cursors
                .iter()
                .map(|c| {
                    (
                        c.split.split_id(),
                        encode_offset_position(c.next.min(self.n)),
                    )
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Identity;

    impl NumberedEvents for Identity {
        type Out = u64;
        fn event(&self, i: u64) -> (u64, Millis) {
            (i, i as Millis)
        }
    }

    #[test]
    fn remaining_counts_the_events_of_a_split() {
        for (n, s) in [
            (0u64, 3u32),
            (10, 4),
            (1000, 3),
            (5000, 16),
            (BLOCK * 7 + 5, 7),
        ] {
            let src = NumberedSource::new("t", Identity, n)
                .splits(s)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut sum = 0;
            for split in src.enumerate_splits(1).unwrap_or_default() {
                let want = (0..n).filter(|i| split.holds(*i)).count() as u64;
                let first = u64::from(split.index) * BLOCK;
                assert_eq!(remaining(&split, first, n), want, "n={n} {split:?}");
                sum += want;
                if let Some(mid) = (0..n).filter(|i| split.holds(*i)).nth(300) {
                    let after = (mid..n).filter(|i| split.holds(*i)).count() as u64;
                    assert_eq!(remaining(&split, mid, n), after);
                }
            }
            assert_eq!(sum, n);
        }
    }
}
