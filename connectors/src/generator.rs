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
//! With [`GeneratorBuilder::bursts`] (W3 of the benchmark workloads: sessions), events
//! come in bursts of 100,000 over 1000 steps, each followed by 200 steps of silence:
//!
//! ```text
//! key   = i mod K
//! ts    = start_ms + (i div 100 + 200 * (i div 100000)) * step_ms
//! value = i mod 100
//! ```
//!
//! It is a [`NumberedSource`](crate::numbered): 16 splits (by default) of blocks of 16
//! events, independent of the parallelism; a split's checkpointed position is its next
//! event number; with a rate, each subtask emits its share per second.
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

use std::collections::HashMap;

use brook_core::operator::{OpResult, SubtaskInfo};
use brook_core::source::{Source, SourceReader};
use brook_core::time::Millis;
use serde::{Deserialize, Serialize};

use crate::error::ConnectorError;
use crate::numbered::{NumberedEvents, NumberedSource, NumberedSplit};

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
    bursts: bool,
}

impl Default for GeneratorBuilder {
    fn default() -> Self {
        GeneratorBuilder {
            events: 1_000_000,
            keys: 1_000,
            start_ms: 0,
            step_ms: 1,
            rate: None,
            splits: 16,
            bursts: false,
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

    /// Events in bursts (see the [module docs](self)): W3's formula instead of W1's.
    pub fn bursts(mut self, on: bool) -> Self {
        self.bursts = on;
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
        let last_i = self.events.saturating_sub(1);
        let last_step = if self.bursts {
            burst_step(last_i)
        } else {
            last_i
        };
        let last = i128::from(self.start_ms) + i128::from(last_step) * i128::from(self.step_ms);
        if Millis::try_from(last).is_err() {
            return Err(ConnectorError::config(
                "step_ms",
                format!(
                    "the timestamp of event {} ({} + {} * {}) does not fit in 64 bits",
                    last_i, self.start_ms, last_step, self.step_ms
                ),
            ));
        }
        let formula = Formula {
            keys: self.keys,
            start_ms: self.start_ms,
            step_ms: self.step_ms,
            bursts: self.bursts,
        };
        let inner = NumberedSource::new("generator", formula, self.events)
            .splits(self.splits)?
            .rate(self.rate)?;
        Ok(GeneratorSource { inner })
    }
}

/// A bounded source of [`GeneratorEvent`]s (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    inner: NumberedSource<Formula>,
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
        self.inner.len()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Event number `i` (also for `i >= n`).
    pub fn event(&self, i: u64) -> GeneratorEvent {
        self.inner.events().event(i).0
    }
}

/// The formula of the [module docs](self).
#[derive(Debug, Clone, Copy)]
struct Formula {
    keys: u64,
    start_ms: Millis,
    step_ms: Millis,
    bursts: bool,
}

/// The step (time in units of `step_ms`) of event `i` in bursts: 100 events per step,
/// 1000 steps per burst of 100,000, then 200 steps of silence.
#[inline]
fn burst_step(i: u64) -> u64 {
    i / 100 + 200 * (i / 100_000)
}

impl NumberedEvents for Formula {
    type Out = GeneratorEvent;

    #[inline]
    fn event(&self, i: u64) -> (GeneratorEvent, Millis) {
        let e = event(self, i);
        (e, e.ts)
    }
}

fn event(cfg: &Formula, i: u64) -> GeneratorEvent {
    if cfg.bursts {
        return GeneratorEvent {
            key: i % cfg.keys,
            ts: cfg
                .start_ms
                .wrapping_add((burst_step(i) as Millis).wrapping_mul(cfg.step_ms)),
            value: (i % 100) as i64,
        };
    }
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

/// A split of a [`GeneratorSource`]: the blocks of 16 events `index, index + count, ...`.
pub type GeneratorSplit = NumberedSplit;

impl Source for GeneratorSource {
    type Out = GeneratorEvent;
    type Split = GeneratorSplit;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<GeneratorSplit>> {
        self.inner.enumerate_splits(parallelism)
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<GeneratorSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = GeneratorEvent>>> {
        self.inner.create_reader(info, splits)
    }

    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<GeneratorSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = GeneratorEvent>>> {
        self.inner.restore_reader(info, splits, positions)
    }

    fn is_bounded(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bursts follow W3 of the benchmark workloads: key k's events of burst b fall in
    /// `[1200 b + k div 100, 1200 b + k div 100 + 990]`, 100 per burst, with 200 ms of
    /// silence between bursts.
    #[test]
    fn bursts_are_w3() {
        let g = GeneratorSource::builder()
            .events(300_000)
            .keys(1000)
            .bursts(true)
            .build()
            .expect("valid");
        let mut per_key_burst = std::collections::HashMap::<(u64, i64), (i64, i64, u32)>::new();
        for i in 0..300_000 {
            let e = g.event(i);
            assert_eq!(e.key, i % 1000);
            assert_eq!(e.value, (i % 100) as i64);
            let b = e.ts / 1200;
            let r = per_key_burst
                .entry((e.key, b))
                .or_insert((i64::MAX, i64::MIN, 0));
            *r = (r.0.min(e.ts), r.1.max(e.ts), r.2 + 1);
        }
        assert_eq!(per_key_burst.len(), 3000);
        for ((k, b), (lo, hi, n)) in per_key_burst {
            assert_eq!(n, 100, "key {k} burst {b}");
            assert_eq!(lo, 1200 * b + (k / 100) as i64);
            assert_eq!(hi, lo + 990);
        }
        assert_eq!(g.event(99_999).ts, 999);
        assert_eq!(g.event(100_000).ts, 1200);
    }
}
