//! [`GeneratorSource`]: deterministic synthetic events, for tests and benchmarks.
//!
//! Event `i` (for `i` in `0..n`) is
//!
//! ```text
//! key   = (i * 2654435761) mod K      (computed in u128: no overflow, no wrapping)
//! ts    = start_ms + i * step_ms      (also the record's event time)
//! value = i mod 100
//! ```
//!
//! so every run, at any parallelism, produces the same multiset of events.
//!
//! # Splits
//!
//! The range `0..n` is cut into blocks of 16 consecutive events, dealt round-robin to
//! a fixed number `S` of splits ([`GeneratorBuilder::splits`], default 16): split `j`
//! holds the blocks `j, j + S, j + 2S, ...`. The splits do not depend on the
//! parallelism, so a job can restore a checkpoint at another parallelism; subtask `i`
//! of `p` reads splits `i, i + p, ...` (with `p > S` some subtasks have nothing to
//! read). A reader emits its blocks in increasing event order, so its event times
//! grow and every split's watermark advances together (one contiguous range per split
//! would hold a subtask's watermark back at its slowest range). Small blocks keep the
//! watermark close behind the newest event: a split has its first event after at most
//! `S × 16` events, and the minimum over a subtask's splits lags its newest event by
//! fewer than `(splits per subtask) × 16` events.
//!
//! A split's checkpointed position is the next event number it has not emitted
//! (version byte 1, then a `u64` little endian); a restored reader continues there.
//!
//! # Rate
//!
//! Without a rate the events come as fast as the job takes them, in batches of 4096;
//! with [`GeneratorBuilder::rate`] a subtask emits its share of the rate (the share of
//! all events its splits hold) per second, on a schedule computed from the time elapsed since
//! its first poll (a reader that falls behind catches up).
//!
//! ```
//! use brook_connectors::GeneratorSource;
//! let source = GeneratorSource::builder()
//!     .events(10_000)
//!     .keys(100)
//!     .start_ms(1_700_000_000_000)
//!     .step_ms(10)
//!     .build()
//!     .unwrap();
//! assert_eq!(source.event(3).key, (3 * 2654435761u64) % 100);
//! ```

use std::time::Duration;

use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::source::{
    decode_offset_position, encode_offset_position, InputStatus, Source, SourceReader, Split,
    SplitProgress,
};
use brook_core::time::{Millis, Stopwatch};
use serde::{Deserialize, Serialize};

use crate::error::ConnectorError;
use crate::BATCH;

/// Knuth's multiplicative hash constant, spreading consecutive `i` over the keys.
const MULTIPLIER: u128 = 2_654_435_761;

/// One generated event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GeneratorEvent {
    /// `(i * 2654435761) mod K`.
    pub key: u64,
    /// `start_ms + i * step_ms`, ms since the epoch; also the record's timestamp.
    pub ts: Millis,
    /// `i mod 100`.
    pub value: i64,
}

/// Settings of a [`GeneratorSource`]; see [`GeneratorSource::builder`].
#[derive(Debug, Clone)]
pub struct GeneratorBuilder {
    events: u64,
    keys: u64,
    start_ms: Millis,
    step_ms: Millis,
    rate: Option<f64>,
    splits: u32,
}

/// Events per block: split `j` of `S` holds blocks `j, j + S, ...`.
const BLOCK: u64 = 16;

impl Default for GeneratorBuilder {
    fn default() -> Self {
        GeneratorBuilder {
            events: 1_000_000,
            keys: 1_000,
            start_ms: 0,
            step_ms: 1,
            rate: None,
            splits: 16,
        }
    }
}

impl GeneratorBuilder {
    /// How many events in total (`n`). Default 1,000,000.
    pub fn events(mut self, n: u64) -> Self {
        self.events = n;
        self
    }

    /// How many distinct keys (`K`, at least 1). Default 1,000.
    pub fn keys(mut self, k: u64) -> Self {
        self.keys = k;
        self
    }

    /// Timestamp of the first event (ms since the epoch). Default 0.
    pub fn start_ms(mut self, ms: Millis) -> Self {
        self.start_ms = ms;
        self
    }

    /// Time between consecutive events (ms). Default 1.
    pub fn step_ms(mut self, ms: Millis) -> Self {
        self.step_ms = ms;
        self
    }

    /// Events per second over all subtasks (positive); each subtask emits its share.
    /// Default: as fast as possible.
    pub fn rate(mut self, events_per_second: f64) -> Self {
        self.rate = Some(events_per_second);
        self
    }

    /// How many splits (at least 1; default 16): the most subtasks that have events to
    /// read. A checkpoint restores only into a source with the same number of splits.
    pub fn splits(mut self, n: u32) -> Self {
        self.splits = n;
        self
    }

    /// As fast as possible (the default).
    pub fn unlimited(mut self) -> Self {
        self.rate = None;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ConnectorError::Config`] naming the setting: `keys` of 0, a `rate` that is not
    /// a positive number, timestamps that do not fit in an `i64`.
    pub fn build(self) -> Result<GeneratorSource, ConnectorError> {
        if self.keys == 0 {
            return Err(ConnectorError::config("keys", "must be at least 1"));
        }
        if self.splits == 0 {
            return Err(ConnectorError::config("splits", "must be at least 1"));
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(ConnectorError::config(
                    "rate",
                    format!("must be a positive number of events per second, not {r}"),
                ));
            }
        }
        let last = i128::from(self.start_ms)
            + i128::from(self.events.saturating_sub(1)) * i128::from(self.step_ms);
        if Millis::try_from(last).is_err() {
            return Err(ConnectorError::config(
                "step_ms",
                format!(
                    "the timestamp of event {} ({} + {} * {}) does not fit in 64 bits",
                    self.events.saturating_sub(1),
                    self.start_ms,
                    self.events.saturating_sub(1),
                    self.step_ms
                ),
            ));
        }
        Ok(GeneratorSource { cfg: self })
    }
}

/// A bounded source of [`GeneratorEvent`]s (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    cfg: GeneratorBuilder,
}

impl GeneratorSource {
    /// Settings, starting from the defaults.
    pub fn builder() -> GeneratorBuilder {
        GeneratorBuilder::default()
    }

    /// `n` events over `keys` keys, the other settings at their defaults.
    ///
    /// # Errors
    /// As [`GeneratorBuilder::build`].
    pub fn new(n: u64, keys: u64) -> Result<Self, ConnectorError> {
        Self::builder().events(n).keys(keys).build()
    }

    /// The total number of events.
    pub fn len(&self) -> u64 {
        self.cfg.events
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.cfg.events == 0
    }

    /// Event number `i` (also for `i >= n`).
    pub fn event(&self, i: u64) -> GeneratorEvent {
        event(&self.cfg, i)
    }
}

fn event(cfg: &GeneratorBuilder, i: u64) -> GeneratorEvent {
    // The remainder is < keys, a u64, so the narrowing is exact. While the product
    // fits in 64 bits, 64-bit arithmetic gives the same result far faster than u128
    // division (a library call).
    let key = match i.checked_mul(MULTIPLIER as u64) {
        Some(p) => p % cfg.keys,
        None => ((u128::from(i) * MULTIPLIER) % u128::from(cfg.keys)) as u64,
    };
    // `build` checked that the timestamps of 0..n fit; wrap (never panic) beyond.
    let ts = cfg
        .start_ms
        .wrapping_add((i as Millis).wrapping_mul(cfg.step_ms));
    GeneratorEvent {
        key,
        ts,
        value: (i % 100) as i64,
    }
}

/// Split `index` of `count`: the blocks of 16 events `index, index + count, ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorSplit {
    /// The split's number, `0..count`.
    pub index: u32,
    /// How many splits there are.
    pub count: u32,
}

impl Split for GeneratorSplit {
    fn split_id(&self) -> String {
        format!("generator[{}/{}]", self.index, self.count)
    }
}

impl GeneratorSplit {
    /// Whether event `i` belongs to this split.
    fn holds(&self, i: u64) -> bool {
        (i / BLOCK) % u64::from(self.count) == u64::from(self.index)
    }
}

impl GeneratorSource {
    fn reader(
        &self,
        splits: Vec<GeneratorSplit>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<GeneratorReader> {
        let n = self.cfg.events;
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
        Ok(GeneratorReader {
            cfg: self.cfg.clone(),
            cursors,
            emitted: 0,
            total,
            rate: self.cfg.rate.map(|r| (r * share).max(f64::MIN_POSITIVE)),
            started: None,
        })
    }
}

/// Events of `split` from event number `next` on (it is one of the split's, or `>= n`).
fn remaining(split: &GeneratorSplit, next: u64, n: u64) -> u64 {
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

impl Source for GeneratorSource {
    type Out = GeneratorEvent;
    type Split = GeneratorSplit;

    fn enumerate_splits(&self, _parallelism: u32) -> OpResult<Vec<GeneratorSplit>> {
        let count = self.cfg.splits;
        Ok((0..count)
            .map(|index| GeneratorSplit { index, count })
            .collect())
    }

    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<GeneratorSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = GeneratorEvent>>> {
        Ok(Box::new(self.reader(splits, &Default::default())?))
    }

    fn restore_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<GeneratorSplit>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = GeneratorEvent>>> {
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
    split: GeneratorSplit,
    /// The next event number to emit (`>= n`: the split is done).
    next: u64,
    /// Whether the end of the split was reported.
    reported: bool,
}

struct GeneratorReader {
    cfg: GeneratorBuilder,
    cursors: Vec<SplitCursor>,
    /// Events emitted by this reader.
    emitted: u64,
    /// Events this reader emits in all.
    total: u64,
    /// This subtask's events per second.
    rate: Option<f64>,
    /// Since the first poll, for the rate's schedule.
    started: Option<Stopwatch>,
}

impl GeneratorReader {
    /// How many events the schedule allows by now (all of them without a rate).
    fn allowed(&mut self) -> u64 {
        let Some(rate) = self.rate else {
            return self.total;
        };
        let elapsed_s = self
            .started
            .get_or_insert_with(Stopwatch::start)
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

impl SourceReader for GeneratorReader {
    type Out = GeneratorEvent;

    fn poll_next(&mut self, out: &mut Output<GeneratorEvent>) -> OpResult<InputStatus> {
        let n = self.cfg.events;
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
                let e = event(&self.cfg, i);
                out.collect(e, Some(e.ts));
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
        let n = self.cfg.events;
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
                        encode_offset_position(c.next.min(self.cfg.events)),
                    )
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_counts_the_events_of_a_split() {
        for (n, s) in [
            (0u64, 3u32),
            (10, 4),
            (1000, 3),
            (5000, 16),
            (BLOCK * 7 + 5, 7),
        ] {
            let src = GeneratorSource::builder()
                .events(n)
                .splits(s)
                .build()
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
