//! Watermark strategies, as Flink's `WatermarkStrategy`: how a source assigns event
//! times to records and derives watermarks from them, per split (semantics.md §2).
//!
//! - [`WatermarkGenerator`]: turns the timestamps seen into a watermark
//!   ([`BoundedOutOfOrderness`], and monotonous timestamps as its special case `B = 0`).
//! - [`WatermarkStrategy`]: a generator factory, an optional timestamp assigner, an
//!   optional idle timeout and the emission interval.
//! - [`SplitWatermarks`]: one generator per split of a source subtask, combined into the
//!   subtask's watermark (the minimum over active splits) and idleness.

use std::fmt;
use std::sync::Arc;

use crate::bad_record::BadRecords;
use crate::time::{Millis, Watermark};

/// Default watermark emission interval: 200 ms of processing time, as Flink's
/// `pipeline.auto-watermark-interval`.
pub const DEFAULT_EMIT_INTERVAL_MS: Millis = 200;

/// Derives a watermark from the event times of records, as Flink's
/// `WatermarkGenerator`.
pub trait WatermarkGenerator: Send {
    /// A record with event time `timestamp` (ms) was read.
    fn on_event(&mut self, timestamp: Millis);
    /// The watermark the events so far allow (ms); [`Watermark::MIN`] before any.
    fn current_watermark(&self) -> Watermark;

    /// The largest event time seen, for a checkpoint (semantics.md §4: watermark
    /// progress survives a restore). `None` before any event.
    fn max_timestamp(&self) -> Option<Millis>;

    /// Resumes from a checkpoint's [`WatermarkGenerator::max_timestamp`].
    fn restore_max_timestamp(&mut self, max_timestamp: Millis) {
        self.on_event(max_timestamp);
    }
}

/// `W = max timestamp seen − B − 1`, as Flink's `BoundedOutOfOrdernessWatermarks`;
/// `B = 0` is Flink's `AscendingTimestampsWatermarks` (monotonous timestamps).
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    max_timestamp: Option<Millis>,
    bound_ms: Millis,
}

impl BoundedOutOfOrderness {
    /// A generator allowing records up to `bound_ms` behind the newest one.
    pub fn new(bound_ms: Millis) -> Self {
        BoundedOutOfOrderness {
            max_timestamp: None,
            bound_ms: bound_ms.max(0),
        }
    }
}

impl WatermarkGenerator for BoundedOutOfOrderness {
    #[inline]
    fn on_event(&mut self, timestamp: Millis) {
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |m| m.max(timestamp)));
    }

    fn max_timestamp(&self) -> Option<Millis> {
        self.max_timestamp
    }

    #[inline]
    fn current_watermark(&self) -> Watermark {
        match self.max_timestamp {
            // Saturating: a timestamp near i64::MIN must not wrap to a huge watermark.
            Some(m) => Watermark(m.saturating_sub(self.bound_ms).saturating_sub(1)),
            None => Watermark::MIN,
        }
    }
}

/// A timestamp that could not be assigned: the record as text and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTimestamp {
    /// The record as read (for the dead-letter output).
    pub raw: String,
    /// What was wrong, naming the field.
    pub reason: String,
}

/// Assigns a record's event time (ms) from its value and the timestamp the source gave
/// it (a log record's timestamp, a generator's `ts`), as Flink's `TimestampAssigner`.
pub type TimestampAssigner<T> =
    Arc<dyn Fn(&T, Option<Millis>) -> Result<Millis, BadTimestamp> + Send + Sync>;

/// Creates a generator per split.
pub type GeneratorFactory = Arc<dyn Fn() -> Box<dyn WatermarkGenerator> + Send + Sync>;

/// How a source assigns event time and emits watermarks, as Flink's
/// `WatermarkStrategy`.
///
/// ```
/// use brook_core::watermark::WatermarkStrategy;
/// # #[derive(Clone)] struct Event { ts: i64 }
/// let s = WatermarkStrategy::<Event>::for_bounded_out_of_orderness(100)
///     .with_timestamp_assigner(|e: &Event, _| e.ts)
///     .with_idleness(5_000);
/// assert_eq!(s.idle_timeout_ms(), Some(5_000));
/// ```
pub struct WatermarkStrategy<T> {
    generator: Option<GeneratorFactory>,
    assigner: Option<TimestampAssigner<T>>,
    idle_timeout_ms: Option<Millis>,
    emit_interval_ms: Millis,
    bad_records: BadRecords,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            generator: self.generator.clone(),
            assigner: self.assigner.clone(),
            idle_timeout_ms: self.idle_timeout_ms,
            emit_interval_ms: self.emit_interval_ms,
            bad_records: self.bad_records.clone(),
        }
    }
}

impl<T> fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("watermarks", &self.generator.is_some())
            .field("timestamp_assigner", &self.assigner.is_some())
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("emit_interval_ms", &self.emit_interval_ms)
            .finish()
    }
}

impl<T> WatermarkStrategy<T> {
    /// No event time: records keep the source's timestamps and no watermark is emitted
    /// until a bounded input ends (then `i64::MAX`).
    pub fn no_watermarks() -> Self {
        WatermarkStrategy {
            generator: None,
            assigner: None,
            idle_timeout_ms: None,
            emit_interval_ms: DEFAULT_EMIT_INTERVAL_MS,
            bad_records: BadRecords::default(),
        }
    }

    /// Watermarks `max timestamp − bound_ms − 1` per split, as Flink's
    /// `forBoundedOutOfOrderness`.
    pub fn for_bounded_out_of_orderness(bound_ms: Millis) -> Self {
        Self::for_generator(move || Box::new(BoundedOutOfOrderness::new(bound_ms)))
    }

    /// Timestamps that never decrease within a split: `W = max timestamp − 1`, as
    /// Flink's `forMonotonousTimestamps`.
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(0)
    }

    /// A custom generator, created once per split.
    pub fn for_generator(
        factory: impl Fn() -> Box<dyn WatermarkGenerator> + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            generator: Some(Arc::new(factory)),
            ..Self::no_watermarks()
        }
    }

    /// Event time from the record: `f(value, source timestamp)` in ms.
    pub fn with_timestamp_assigner(
        mut self,
        f: impl Fn(&T, Option<Millis>) -> Millis + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(move |v, ts| Ok(f(v, ts))));
        self
    }

    /// Event time from the record, which may not have one: a failure goes to the
    /// bad-record policy set with [`WatermarkStrategy::on_bad_record`] (default: fail).
    pub fn with_fallible_timestamp_assigner(
        mut self,
        f: impl Fn(&T, Option<Millis>) -> Result<Millis, BadTimestamp> + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(f));
        self
    }

    /// What to do with records whose timestamp cannot be assigned.
    pub fn on_bad_record(mut self, bad: BadRecords) -> Self {
        self.bad_records = bad;
        self
    }

    /// A split with no records for `timeout_ms` of processing time is idle: left out of
    /// the minimum until it has records again (semantics.md §2). If all splits of a
    /// subtask are idle, the subtask is marked idle downstream.
    pub fn with_idleness(mut self, timeout_ms: Millis) -> Self {
        self.idle_timeout_ms = Some(timeout_ms.max(0));
        self
    }

    /// Emit watermarks every `interval_ms` of processing time (default 200); `0`
    /// emits after every record that advances the watermark (deterministic results).
    pub fn with_emit_interval(mut self, interval_ms: Millis) -> Self {
        self.emit_interval_ms = interval_ms.max(0);
        self
    }

    /// Whether this strategy emits watermarks at all.
    pub fn has_watermarks(&self) -> bool {
        self.generator.is_some()
    }

    /// The timestamp assigner, if any.
    pub fn timestamp_assigner(&self) -> Option<&TimestampAssigner<T>> {
        self.assigner.as_ref()
    }

    /// The idle timeout (ms), if any.
    pub fn idle_timeout_ms(&self) -> Option<Millis> {
        self.idle_timeout_ms
    }

    /// The emission interval (ms); `0` = after every record.
    pub fn emit_interval_ms(&self) -> Millis {
        self.emit_interval_ms
    }

    /// The bad-record handler for timestamps that cannot be assigned.
    pub fn bad_records(&self) -> &BadRecords {
        &self.bad_records
    }

    /// Per-split watermark tracking for a subtask reading `splits` splits, at
    /// processing time `now_ms`.
    pub fn split_watermarks(&self, splits: usize, now_ms: Millis) -> SplitWatermarks {
        SplitWatermarks::new(self.generator.clone(), splits, self.idle_timeout_ms, now_ms)
    }
}

/// A change of a subtask's combined watermark or idleness: a source subtask's over its
/// splits ([`SplitWatermarks::update`]), and an operator task's over its input
/// channels (the engine's per-channel tracker). To send downstream in this order:
/// becoming active before the watermark, becoming idle after it (a watermark marks its
/// channel active downstream, so an idle subtask's last watermark goes first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatermarkUpdate {
    /// The subtask became idle (`Some(true)`) or active again (`Some(false)`).
    pub idle: Option<bool>,
    /// The subtask's watermark advanced to this.
    pub watermark: Option<Watermark>,
}

struct SplitState {
    generator: Box<dyn WatermarkGenerator>,
    last_record_ms: Millis,
    idle: bool,
    finished: bool,
    /// The split's watermark as of the last [`SplitWatermarks::update`] (what went
    /// downstream), for counting late records without a generator call per record.
    watermark: Millis,
    /// Records read at or behind their watermark (see [`SplitWatermarks::split_late`]).
    late: u64,
}

/// The watermarks of one source subtask: a generator per split, combined as the
/// minimum over splits that are neither idle nor finished (semantics.md §2). The
/// combined watermark never goes back.
pub struct SplitWatermarks {
    factory: Option<GeneratorFactory>,
    splits: Vec<SplitState>,
    idle_timeout_ms: Option<Millis>,
    emitted: Watermark,
    idle: bool,
    /// The watermark a restored subtask resumes from, not yet handed out (see
    /// [`SplitWatermarks::restore`]).
    restored: Option<Watermark>,
}

impl fmt::Debug for SplitWatermarks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitWatermarks")
            .field("splits", &self.splits.len())
            .field("emitted", &self.emitted)
            .field("idle", &self.idle)
            .finish()
    }
}

impl SplitWatermarks {
    fn new(
        factory: Option<GeneratorFactory>,
        splits: usize,
        idle_timeout_ms: Option<Millis>,
        now_ms: Millis,
    ) -> Self {
        let mut s = SplitWatermarks {
            factory,
            splits: Vec::new(),
            idle_timeout_ms,
            emitted: Watermark::MIN,
            idle: false,
            restored: None,
        };
        for _ in 0..splits {
            s.add_split(now_ms);
        }
        s
    }

    /// Adds a split (index = number of splits before); its idle clock starts now.
    pub fn add_split(&mut self, now_ms: Millis) {
        let generator: Box<dyn WatermarkGenerator> = match &self.factory {
            Some(f) => f(),
            None => Box::new(BoundedOutOfOrderness::new(0)),
        };
        self.splits.push(SplitState {
            generator,
            last_record_ms: now_ms,
            idle: false,
            finished: false,
            watermark: Millis::MIN,
            late: 0,
        });
    }

    /// Number of splits.
    pub fn len(&self) -> usize {
        self.splits.len()
    }

    /// Whether there are no splits.
    pub fn is_empty(&self) -> bool {
        self.splits.is_empty()
    }

    /// Whether watermarks are generated at all.
    pub fn enabled(&self) -> bool {
        self.factory.is_some()
    }

    /// A record of `split` with event time `timestamp` was read at `now_ms`. Returns
    /// true when the subtask was idle and is active again (send `Idle(false)` before the
    /// record).
    #[inline]
    pub fn on_record(&mut self, split: usize, timestamp: Millis, now_ms: Millis) -> bool {
        if let Some(s) = self.splits.get_mut(split) {
            // Late as Flink's window operator sees it (timestamp <= watermark), against
            // the larger of the split's own watermark and the subtask's combined one.
            if timestamp <= s.watermark.max(self.emitted.millis()) {
                s.late += 1;
            }
            s.generator.on_event(timestamp);
            s.last_record_ms = now_ms;
            s.idle = false;
        }
        if self.idle {
            self.idle = false;
            return true;
        }
        false
    }

    /// The reader reports records waiting in `split` (a backlog, e.g. Kafka lag) at
    /// `now_ms`: the split is not idle, however long since its last record. Idleness
    /// means no data; a reader that is slow or held back by backpressure would
    /// otherwise idle its own lagging splits, and their records would turn up late.
    /// A split that is idle already stays so until its next record.
    pub fn note_backlog(&mut self, split: usize, now_ms: Millis) {
        if let Some(s) = self.splits.get_mut(split) {
            if !s.idle {
                s.last_record_ms = s.last_record_ms.max(now_ms);
            }
        }
    }

    /// A split has been read completely: it no longer holds the watermark back.
    pub fn finish_split(&mut self, split: usize) {
        if let Some(s) = self.splits.get_mut(split) {
            s.finished = true;
        }
    }

    /// The current watermark of one split (for metrics).
    pub fn split_watermark(&self, split: usize) -> Option<Watermark> {
        self.splits
            .get(split)
            .map(|s| s.generator.current_watermark())
    }

    /// Records of `split` read with an event time at or behind its watermark: the
    /// split's own as last handed out, or the subtask's combined one when that is
    /// higher (a split back from idleness). Such a record is late for every window
    /// downstream that this split gates (for metrics: which split brings late data;
    /// the window operators count the records they drop or side-output themselves).
    /// A YAML job's Arrow batch is one record here, late when its newest row is.
    pub fn split_late(&self, split: usize) -> u64 {
        self.splits.get(split).map_or(0, |s| s.late)
    }

    /// Whether a split is currently idle (for metrics).
    pub fn split_idle(&self, split: usize) -> bool {
        self.splits.get(split).is_some_and(|s| s.idle)
    }

    /// The last combined watermark handed out.
    pub fn current(&self) -> Watermark {
        self.emitted
    }

    /// The largest event time seen in a split, for a checkpoint.
    pub fn split_max_timestamp(&self, split: usize) -> Option<Millis> {
        self.splits
            .get(split)
            .and_then(|s| s.generator.max_timestamp())
    }

    /// Resumes a split from a checkpoint: its largest event time, whether it was idle
    /// (it stays idle until it has a record), and `watermark`, the combined watermark
    /// the subtask that read it had handed out at the checkpoint.
    ///
    /// The next [`SplitWatermarks::update`] hands out the smallest `watermark` of the
    /// restored splits (their former subtasks may differ after a rescale), also when
    /// every split is idle, and then the combined watermark once it is higher: the
    /// operators downstream start from the checkpointed watermark, not from
    /// [`Watermark::MIN`], so a record late before a crash is late after the restore
    /// (semantics.md §4). The split watermarks alone cannot give it: an idle split
    /// is left out of the minimum, and with every split idle there is none.
    pub fn restore(
        &mut self,
        split: usize,
        max_timestamp: Option<Millis>,
        idle: bool,
        watermark: Watermark,
        now_ms: Millis,
    ) {
        if let Some(s) = self.splits.get_mut(split) {
            if let Some(t) = max_timestamp {
                s.generator.restore_max_timestamp(t);
            }
            s.idle = idle;
            s.last_record_ms = now_ms;
            self.restored = Some(self.restored.map_or(watermark, |w| w.min(watermark)));
        }
    }

    /// Recomputes idleness and the combined watermark at `now_ms`; returns what
    /// changed since the last call.
    pub fn update(&mut self, now_ms: Millis) -> WatermarkUpdate {
        let mut u = WatermarkUpdate::default();
        if self.factory.is_none() {
            return u;
        }
        if let Some(w) = self.restored.take() {
            if w > self.emitted {
                self.emitted = w;
                u.watermark = Some(w);
            }
        }
        let mut min: Option<Watermark> = None;
        let mut open = 0;
        for s in &mut self.splits {
            if s.finished {
                continue;
            }
            open += 1;
            s.watermark = s.generator.current_watermark().millis();
            if let Some(t) = self.idle_timeout_ms {
                if now_ms.saturating_sub(s.last_record_ms) >= t {
                    s.idle = true;
                }
            }
            if !s.idle {
                let w = s.generator.current_watermark();
                min = Some(min.map_or(w, |m| m.min(w)));
            }
        }
        match min {
            Some(w) => {
                if self.idle {
                    self.idle = false;
                    u.idle = Some(false);
                }
                if w > self.emitted {
                    self.emitted = w;
                    u.watermark = Some(w);
                }
            }
            // Every open split is idle (or this subtask has none left open while the
            // input goes on): the subtask is idle downstream; its watermark holds.
            None if (open > 0 || self.splits.is_empty()) && !self.idle => {
                self.idle = true;
                u.idle = Some(true);
            }
            None => {}
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(bound: Millis) -> WatermarkStrategy<()> {
        WatermarkStrategy::for_bounded_out_of_orderness(bound)
    }

    #[test]
    fn bounded_out_of_orderness_is_max_minus_bound_minus_one() {
        let mut g = BoundedOutOfOrderness::new(100);
        assert_eq!(g.current_watermark(), Watermark::MIN);
        g.on_event(1050);
        g.on_event(980);
        assert_eq!(g.current_watermark(), Watermark(949));
        let mut g = BoundedOutOfOrderness::new(100);
        g.on_event(i64::MIN + 5);
        assert_eq!(g.current_watermark(), Watermark::MIN);
    }

    #[test]
    fn minimum_over_splits_and_monotone() {
        let mut w = strategy(0).split_watermarks(2, 0);
        w.on_record(0, 100, 0);
        // Split 1 has no records yet: it holds the watermark at MIN.
        assert_eq!(w.update(0), WatermarkUpdate::default());
        w.on_record(1, 50, 0);
        assert_eq!(w.update(0).watermark, Some(Watermark(49)));
        w.on_record(1, 500, 0);
        assert_eq!(w.update(0).watermark, Some(Watermark(99)));
        // A finished split no longer counts.
        w.finish_split(0);
        assert_eq!(w.update(0).watermark, Some(Watermark(499)));
        assert_eq!(w.current(), Watermark(499));
    }

    #[test]
    fn records_behind_their_splits_watermark_count_as_late_for_that_split() {
        let mut w = strategy(10).with_idleness(1000).split_watermarks(2, 0);
        w.on_record(0, 100, 0);
        w.on_record(1, 100, 0);
        w.update(0);
        // Split 0's watermark is 89: 89 is late, 90 is not (timestamp <= watermark).
        w.on_record(0, 89, 0);
        w.on_record(0, 90, 0);
        assert_eq!((w.split_late(0), w.split_late(1)), (1, 0));
        // Not before the watermark went downstream: split 0 moves to 189 only at
        // the next update.
        w.on_record(0, 200, 0);
        w.on_record(0, 150, 0);
        assert_eq!(w.split_late(0), 1);
        w.update(0);
        w.on_record(0, 150, 0);
        assert_eq!(w.split_late(0), 2);
        // Split 1 idles; the combined watermark moves on without it, and its next
        // record behind that watermark is late though its own watermark is older.
        w.on_record(0, 5000, 1500);
        w.update(1500);
        assert!(w.split_idle(1));
        w.on_record(1, 1000, 1600);
        assert_eq!(w.split_late(1), 1);
        assert_eq!(w.split_late(7), 0);
    }

    #[test]
    fn a_split_with_a_backlog_does_not_go_idle() {
        let mut w = strategy(0).with_idleness(1000).split_watermarks(2, 0);
        w.on_record(0, 100, 0);
        w.on_record(1, 50, 0);
        // Split 1's reader is behind (records waiting) though none came for 1500 ms.
        w.note_backlog(1, 900);
        w.on_record(0, 5000, 1500);
        let u = w.update(1500);
        assert_eq!(u.watermark, Some(Watermark(49)), "split 1 still holds it");
        assert!(!w.split_idle(1));
        // Without a backlog it goes idle after the timeout.
        w.on_record(0, 6000, 2000);
        assert_eq!(w.update(2000).watermark, Some(Watermark(5999)));
        assert!(w.split_idle(1));
    }

    #[test]
    fn idle_split_is_left_out_and_all_idle_marks_the_subtask_idle() {
        let mut w = strategy(0).with_idleness(1000).split_watermarks(2, 0);
        w.on_record(0, 100, 0);
        assert_eq!(w.update(999).watermark, None);
        // Split 1 never had a record: idle after 1000 ms.
        w.on_record(0, 200, 1000);
        assert_eq!(w.update(1000).watermark, Some(Watermark(199)));
        // Both idle: the subtask is idle, the watermark holds.
        let u = w.update(2000);
        assert_eq!(
            u,
            WatermarkUpdate {
                idle: Some(true),
                watermark: None
            }
        );
        // A record makes it active again.
        assert!(w.on_record(1, 150, 2100));
        let u = w.update(2100);
        assert_eq!(
            u,
            WatermarkUpdate {
                idle: None,
                watermark: None
            }
        );
        w.on_record(1, 400, 2100);
        assert_eq!(w.update(2100).watermark, Some(Watermark(399)));
    }

    #[test]
    fn a_restored_idle_split_hands_out_the_checkpointed_watermark() {
        // Before the crash: ts 1, 5, 12 (bound 0) gave watermark 11, then the split
        // went idle and the checkpoint recorded it so.
        let mut w = strategy(0).with_idleness(1000).split_watermarks(1, 0);
        w.restore(0, Some(12), true, Watermark(11), 5000);
        // The watermark goes out although the split is idle; then the subtask idles.
        assert_eq!(
            w.update(5000),
            WatermarkUpdate {
                idle: Some(true),
                watermark: Some(Watermark(11)),
            }
        );
        // A record at 7 (late before the crash) does not move it back.
        assert!(w.on_record(0, 7, 5100));
        assert_eq!(w.update(5100), WatermarkUpdate::default());
        assert_eq!(w.current(), Watermark(11));
    }

    #[test]
    fn a_restored_subtask_resumes_from_its_checkpointed_watermark_not_its_splits() {
        // Split 0 went idle at 49, split 1 took the subtask to 99, then idled too:
        // the minimum of the splits (49) is below what the subtask had handed out.
        let mut w = strategy(0).with_idleness(1000).split_watermarks(2, 0);
        w.restore(0, Some(50), true, Watermark(99), 0);
        w.restore(1, Some(100), true, Watermark(99), 0);
        assert_eq!(w.update(0).watermark, Some(Watermark(99)));
        // Rescaled: splits of two former subtasks resume from the lower watermark, and
        // an active split takes it higher as usual.
        let mut w = strategy(0).with_idleness(1000).split_watermarks(2, 0);
        w.restore(0, Some(300), false, Watermark(299), 0);
        w.restore(1, Some(100), true, Watermark(99), 0);
        let u = w.update(0);
        assert_eq!(u.watermark, Some(Watermark(299)));
        assert_eq!(u.idle, None);
        let mut w = strategy(0).split_watermarks(2, 0);
        w.restore(0, Some(300), false, Watermark(299), 0);
        w.restore(1, Some(100), false, Watermark(99), 0);
        assert_eq!(w.update(0).watermark, Some(Watermark(99)));
    }

    #[test]
    fn without_idleness_a_silent_split_holds_the_watermark() {
        let mut w = strategy(0).split_watermarks(2, 0);
        w.on_record(0, 100, 0);
        assert_eq!(w.update(1_000_000), WatermarkUpdate::default());
    }

    #[test]
    fn no_watermarks_never_emits() {
        let mut w = WatermarkStrategy::<()>::no_watermarks().split_watermarks(1, 0);
        w.on_record(0, 100, 0);
        assert_eq!(w.update(0), WatermarkUpdate::default());
        assert!(!w.enabled());
    }
}
