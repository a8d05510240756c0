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
//! so every run, at any parallelism, produces the same multiset of events. The range
//! `0..n` is cut into one contiguous split per subtask. Without a rate the events come
//! as fast as the job takes them, in batches of 1024; with [`GeneratorBuilder::rate`]
//! each of the `p` subtasks emits `rate / p` events per second, on a schedule computed
//! from the time elapsed since its first poll (a reader that falls behind catches up).
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
use brook_core::source::{InputStatus, Source, SourceReader, Split};
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
}

impl Default for GeneratorBuilder {
    fn default() -> Self {
        GeneratorBuilder {
            events: 1_000_000,
            keys: 1_000,
            start_ms: 0,
            step_ms: 1,
            rate: None,
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

/// A contiguous range `start..end` of event numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorSplit {
    /// First event number.
    pub start: u64,
    /// One past the last event number.
    pub end: u64,
}

impl Split for GeneratorSplit {
    fn split_id(&self) -> String {
        format!("generator[{}..{})", self.start, self.end)
    }
}

impl Source for GeneratorSource {
    type Out = GeneratorEvent;
    type Split = GeneratorSplit;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<GeneratorSplit>> {
        let p = u128::from(parallelism.max(1));
        let n = u128::from(self.cfg.events);
        // i * n / p <= n, a u64: the narrowing is exact.
        let bound = |i: u128| (i * n / p) as u64;
        Ok((0..p)
            .map(|i| GeneratorSplit {
                start: bound(i),
                end: bound(i + 1),
            })
            .collect())
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<GeneratorSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = GeneratorEvent>>> {
        // Empty ranges (more subtasks than events) have nothing to read.
        let mut splits = splits;
        splits.retain(|s| s.end > s.start);
        let total = splits.iter().map(|s| s.end.saturating_sub(s.start)).sum();
        Ok(Box::new(GeneratorReader {
            cfg: self.cfg.clone(),
            splits,
            split: 0,
            next: None,
            emitted: 0,
            total,
            rate: self
                .cfg
                .rate
                .map(|r| r / f64::from(info.parallelism.max(1))),
            started: None,
        }))
    }

    fn is_bounded(&self) -> bool {
        true
    }
}

struct GeneratorReader {
    cfg: GeneratorBuilder,
    splits: Vec<GeneratorSplit>,
    /// Index of the split being read.
    split: usize,
    /// Next event number of that split.
    next: Option<u64>,
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
        let allowed = self.allowed();
        let mut budget = allowed.saturating_sub(self.emitted).min(BATCH as u64);
        if budget == 0 && self.emitted < self.total {
            return Ok(InputStatus::NothingAvailable);
        }
        out.reserve(budget as usize);
        while budget > 0 {
            let Some(split) = self.splits.get(self.split) else {
                break;
            };
            let start = self.next.unwrap_or(split.start);
            let end = split.end.min(start + budget);
            out.set_split(self.split as u32);
            for i in start..end {
                let e = event(&self.cfg, i);
                out.collect(e, Some(e.ts));
            }
            let n = end - start;
            budget -= n;
            self.emitted += n;
            if end >= split.end {
                out.finish_split(self.split as u32);
                self.split += 1;
                self.next = None;
            } else {
                self.next = Some(end);
            }
        }
        Ok(if self.split >= self.splits.len() {
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
}
