//! Windows over keyed streams, as Flink's `WindowOperator`: assigners (tumbling,
//! sliding, session; event or processing time), triggers, incremental aggregates and
//! process window functions, allowed lateness and a late-data side output.
//!
//! Semantics are those of `docs/semantics.md` §3 (half-open windows, firing at
//! `W >= end - 1`, re-firing within the allowed lateness, late records).
//!
//! - [`assigner`]: [`WindowAssigner`] and its constructors named as Flink's
//!   ([`TumblingEventTimeWindows`], [`SlidingEventTimeWindows`],
//!   [`EventTimeSessionWindows`] and the processing-time ones).
//! - [`trigger`]: [`Trigger`] (event time, processing time, count, continuous event time).
//! - [`aggregate`]: built-in [`AggregateFunction`]s ([`Count`], [`Sum`], [`Min`], [`Max`],
//!   [`Avg`], [`First`], [`Last`], [`CountDistinct`]) and tuples of them.
//! - [`WindowOperator`]: the operator, with [`ProcessWindowFunction`]s or aggregates.
//!   Its state goes into checkpoints one blob per key group, the same format on every
//!   path (see `snapshot.rs`).

pub mod aggregate;
pub mod assigner;
mod fast;
pub mod function;
mod operator;
mod snapshot;
pub mod trigger;

pub use aggregate::{Avg, Count, CountDistinct, First, Last, Max, Min, Reduce, Sum};
pub use assigner::{
    EventTimeSessionWindows, ProcessingTimeSessionWindows, SlidingEventTimeWindows,
    SlidingProcessingTimeWindows, TumblingEventTimeWindows, TumblingProcessingTimeWindows,
    WindowAssigner, WindowConfigError, DEFAULT_MAX_WINDOWS_PER_RECORD, WARN_WINDOWS_PER_RECORD,
};
pub use function::{ProcessWindowFunction, WindowFunction};
pub use operator::WindowOperator;
pub use trigger::Trigger;

#[cfg(test)]
mod tests;

use brook_core::time::Millis;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A time window `[start, end)`, both in ms since the epoch, as Flink's `TimeWindow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First millisecond in the window.
    pub start: Millis,
    /// First millisecond after the window.
    pub end: Millis,
}

impl TimeWindow {
    /// The window `[start, end)`.
    pub const fn new(start: Millis, end: Millis) -> Self {
        TimeWindow { start, end }
    }

    /// The largest timestamp in the window: `end - 1`. The window fires when the
    /// watermark reaches it.
    pub const fn max_timestamp(&self) -> Millis {
        self.end - 1
    }

    /// Whether the two windows overlap or touch (`a.start <= b.end && b.start <= a.end`):
    /// session windows that do are merged (semantics.md §3).
    pub const fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// An incremental aggregate, as Flink's `AggregateFunction`: the window keeps one
/// accumulator per key and window, never the records themselves.
///
/// `merge` combines the accumulators of merged session windows. The accumulator is
/// stored in keyed state, so it must serialize.
pub trait AggregateFunction<In>: Clone + Send + Sync + 'static {
    /// The accumulator kept per key and window.
    type Acc: Clone + Serialize + DeserializeOwned + Send + 'static;
    /// The result emitted when the window fires.
    type Out: Clone + Send + 'static;

    /// A new, empty accumulator.
    fn create_accumulator(&self) -> Self::Acc;
    /// Adds one record.
    fn add(&self, acc: &mut Self::Acc, value: &In);
    /// Adds everything of `other` into `acc`.
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    /// The result for the records added so far (the accumulator is kept: the window
    /// may fire again within its allowed lateness).
    fn get_result(&self, acc: &Self::Acc) -> Self::Out;
}

/// The result of an aggregate for one key and window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowResult<K, R> {
    /// The key.
    pub key: K,
    /// The window.
    pub window: TimeWindow,
    /// The aggregate's result.
    pub value: R,
}

/// What a window operator emits: results, and late records for the side output.
#[derive(Debug, Clone, PartialEq)]
pub enum WindowOutput<R, T> {
    /// A window fired.
    Result(R),
    /// A late record (semantics.md §3), unchanged, for the late-data side output.
    Late(T),
}
