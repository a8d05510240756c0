//! Triggers: when a window emits its result, as Flink's `Trigger`s.
//!
//! Every trigger keeps its state (a count, the next early firing time) and the set of
//! timers it registered per key and window in keyed state, next to the window's
//! contents; for merged session windows the states are merged as Flink's
//! `Trigger.onMerge` does.

use brook_core::time::Millis;
use serde::{Deserialize, Serialize};

use super::TimeWindow;

/// When a window fires. A firing emits the window's full current result and keeps the
/// contents (no trigger purges); contents are dropped at the window's cleanup time
/// (`max_timestamp + allowed lateness` of event time, `max_timestamp` of processing time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// As Flink's `EventTimeTrigger` (default for event-time assigners): fires when the
    /// watermark reaches the window's max timestamp; a record arriving when the watermark
    /// is already there (a window within its allowed lateness) fires it at once.
    EventTime,
    /// As Flink's `ProcessingTimeTrigger` (default for processing-time assigners): fires
    /// when processing time reaches the window's max timestamp.
    ProcessingTime,
    /// As Flink's `CountTrigger`: fires each time `n` more records arrived in the window
    /// (the count restarts after a firing; the window never fires at its end).
    Count(u64),
    /// As Flink's `ContinuousEventTimeTrigger` with an interval in ms (> 0): early firings
    /// at event times `t - t % interval + interval` (Java remainder of the window's first
    /// record time `t`), then every interval, never past the window's max timestamp; plus
    /// the firing at the window end as [`Trigger::EventTime`].
    ContinuousEventTime(Millis),
}

/// A timer's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Domain {
    Event,
    Processing,
}

/// The timers registered for one key and window: at most one per (domain, time), as
/// Flink's timer service deduplicates them. Queue entries not found here are stale.
/// Compact (40 bytes): `kinds[i]` is 0 for a free place, else the domain of `times[i]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TimerSet {
    times: [Millis; 4],
    kinds: [u8; 4],
}

impl Domain {
    fn code(self) -> u8 {
        match self {
            Domain::Event => 1,
            Domain::Processing => 2,
        }
    }
}

impl TimerSet {
    fn find(&self, domain: Domain, time: Millis) -> Option<usize> {
        let code = domain.code();
        (0..4).find(|&i| self.kinds[i] == code && self.times[i] == time)
    }

    /// Adds a timer; false when it was already registered.
    ///
    /// A window holds at most three timers (end of window, next early firing, cleanup),
    /// so four places always suffice.
    #[inline]
    pub(crate) fn insert(&mut self, domain: Domain, time: Millis) -> bool {
        if self.find(domain, time).is_some() {
            return false;
        }
        match self.kinds.iter().position(|k| *k == 0) {
            Some(i) => {
                self.kinds[i] = domain.code();
                self.times[i] = time;
            }
            None => unreachable!("a window holds at most three timers"),
        }
        true
    }

    /// Whether a timer is registered.
    pub(crate) fn contains(&self, domain: Domain, time: Millis) -> bool {
        self.find(domain, time).is_some()
    }

    /// The registered timers, as `(domain, time)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Domain, Millis)> + '_ {
        (0..4).filter_map(|i| match self.kinds[i] {
            1 => Some((Domain::Event, self.times[i])),
            2 => Some((Domain::Processing, self.times[i])),
            _ => None,
        })
    }

    /// Removes a timer; false when it was not registered (a stale queue entry).
    pub(crate) fn remove(&mut self, domain: Domain, time: Millis) -> bool {
        match self.find(domain, time) {
            Some(i) => {
                self.kinds[i] = 0;
                true
            }
            None => false,
        }
    }
}

/// A trigger's state for one key and window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TriggerState {
    /// Records since the last firing ([`Trigger::Count`]).
    pub(crate) count: u64,
    /// The next early firing ([`Trigger::ContinuousEventTime`]).
    pub(crate) fire_time: Option<Millis>,
}

/// What a trigger sees and may do: the clocks, and registering timers (collected in
/// `new_timers` for the operator to queue).
#[derive(Debug)]
pub(crate) struct TriggerCtx<'a> {
    pub(crate) window: TimeWindow,
    pub(crate) watermark: Millis,
    pub(crate) now: Millis,
    pub(crate) timers: &'a mut TimerSet,
    pub(crate) new_timers: &'a mut Vec<(Domain, Millis)>,
}

impl TriggerCtx<'_> {
    pub(crate) fn register(&mut self, domain: Domain, time: Millis) {
        if self.timers.insert(domain, time) {
            self.new_timers.push((domain, time));
        }
    }

    fn register_next_fire(&mut self, state: &mut TriggerState, time: Millis, interval: Millis) {
        let next = time.wrapping_add(interval).min(self.window.max_timestamp());
        state.fire_time = Some(next);
        self.register(Domain::Event, next);
    }
}

impl Trigger {
    /// The default trigger of an assigner's time domain.
    pub(crate) fn default_for(event_time: bool) -> Trigger {
        if event_time {
            Trigger::EventTime
        } else {
            Trigger::ProcessingTime
        }
    }

    /// A record (`timestamp` in ms) was added to the window; true to fire.
    pub(crate) fn on_element(
        &self,
        timestamp: Millis,
        state: &mut TriggerState,
        ctx: &mut TriggerCtx<'_>,
    ) -> bool {
        let max_ts = ctx.window.max_timestamp();
        match *self {
            Trigger::EventTime => {
                if max_ts <= ctx.watermark {
                    return true;
                }
                ctx.register(Domain::Event, max_ts);
                false
            }
            Trigger::ProcessingTime => {
                ctx.register(Domain::Processing, max_ts);
                false
            }
            Trigger::Count(n) => {
                state.count += 1;
                if state.count >= n {
                    state.count = 0;
                    return true;
                }
                false
            }
            Trigger::ContinuousEventTime(interval) => {
                if max_ts <= ctx.watermark {
                    return true;
                }
                ctx.register(Domain::Event, max_ts);
                if state.fire_time.is_none() {
                    let start = timestamp.wrapping_sub(timestamp % interval);
                    ctx.register_next_fire(state, start, interval);
                }
                false
            }
        }
    }

    /// An event-time timer of the window at `time` (ms) fired; true to fire.
    pub(crate) fn on_event_time(
        &self,
        time: Millis,
        state: &mut TriggerState,
        ctx: &mut TriggerCtx<'_>,
    ) -> bool {
        match *self {
            Trigger::EventTime => time == ctx.window.max_timestamp(),
            Trigger::ProcessingTime | Trigger::Count(_) => false,
            Trigger::ContinuousEventTime(interval) => {
                if time == ctx.window.max_timestamp() {
                    return true;
                }
                if state.fire_time == Some(time) {
                    ctx.register_next_fire(state, time, interval);
                    return true;
                }
                false
            }
        }
    }

    /// A processing-time timer of the window fired; true to fire.
    pub(crate) fn on_processing_time(&self) -> bool {
        matches!(self, Trigger::ProcessingTime)
    }

    /// Windows with these trigger states merged into `ctx.window` (whose state is
    /// `state`, fresh unless it existed): combine them and register the timers the
    /// merged window needs, as Flink's `Trigger.onMerge`.
    pub(crate) fn on_merge<'s>(
        &self,
        state: &mut TriggerState,
        merged: impl Iterator<Item = &'s TriggerState>,
        ctx: &mut TriggerCtx<'_>,
    ) {
        let max_ts = ctx.window.max_timestamp();
        match *self {
            Trigger::EventTime => {
                if max_ts > ctx.watermark {
                    ctx.register(Domain::Event, max_ts);
                }
            }
            Trigger::ProcessingTime => {
                if max_ts > ctx.now {
                    ctx.register(Domain::Processing, max_ts);
                }
            }
            Trigger::Count(_) => {
                for m in merged {
                    state.count += m.count;
                }
            }
            Trigger::ContinuousEventTime(_) => {
                for m in merged {
                    state.fire_time = match (state.fire_time, m.fire_time) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                if let Some(t) = state.fire_time {
                    ctx.register(Domain::Event, t);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Harness {
        timers: TimerSet,
        new: Vec<(Domain, Millis)>,
        state: TriggerState,
    }

    impl Harness {
        fn new() -> Self {
            Harness {
                timers: TimerSet::default(),
                new: Vec::new(),
                state: TriggerState::default(),
            }
        }

        fn element(&mut self, t: &Trigger, ts: Millis, wm: Millis) -> bool {
            let mut ctx = TriggerCtx {
                window: TimeWindow::new(0, 100),
                watermark: wm,
                now: 0,
                timers: &mut self.timers,
                new_timers: &mut self.new,
            };
            t.on_element(ts, &mut self.state, &mut ctx)
        }

        fn event(&mut self, t: &Trigger, time: Millis) -> bool {
            assert!(
                self.timers.remove(Domain::Event, time),
                "timer {time} registered"
            );
            let mut ctx = TriggerCtx {
                window: TimeWindow::new(0, 100),
                watermark: time,
                now: 0,
                timers: &mut self.timers,
                new_timers: &mut self.new,
            };
            t.on_event_time(time, &mut self.state, &mut ctx)
        }
    }

    #[test]
    fn event_time_fires_at_window_end_or_at_once_when_late() {
        let t = Trigger::EventTime;
        let mut h = Harness::new();
        assert!(!h.element(&t, 5, i64::MIN));
        assert!(!h.element(&t, 6, i64::MIN));
        assert_eq!(h.new, vec![(Domain::Event, 99)], "one timer, deduplicated");
        assert!(h.event(&t, 99));
        assert!(
            h.element(&t, 7, 99),
            "watermark at max timestamp: fire at once"
        );
        assert!(!t.on_processing_time());
    }

    #[test]
    fn processing_time_registers_a_processing_timer() {
        let t = Trigger::ProcessingTime;
        let mut h = Harness::new();
        assert!(!h.element(&t, 5, 1000));
        assert_eq!(h.new, vec![(Domain::Processing, 99)]);
        assert!(t.on_processing_time());
    }

    #[test]
    fn count_fires_every_n_records() {
        let t = Trigger::Count(3);
        let mut h = Harness::new();
        let fired: Vec<bool> = (0..7).map(|i| h.element(&t, i, i64::MIN)).collect();
        assert_eq!(fired, [false, false, true, false, false, true, false]);
        assert!(h.new.is_empty());
        let mut merged = TriggerState::default();
        let mut ctx = TriggerCtx {
            window: TimeWindow::new(0, 200),
            watermark: 0,
            now: 0,
            timers: &mut h.timers,
            new_timers: &mut h.new,
        };
        let other = TriggerState {
            count: 1,
            fire_time: None,
        };
        t.on_merge(&mut merged, [&h.state, &other].into_iter(), &mut ctx);
        assert_eq!(merged.count, 2);
    }

    #[test]
    fn continuous_event_time_fires_early_every_interval() {
        let t = Trigger::ContinuousEventTime(30);
        let mut h = Harness::new();
        assert!(!h.element(&t, 17, i64::MIN));
        // End of window (99) and the first early firing at 0 + 30.
        assert_eq!(h.new, vec![(Domain::Event, 99), (Domain::Event, 30)]);
        assert!(!h.element(&t, 40, i64::MIN));
        assert_eq!(h.new.len(), 2);
        assert!(h.event(&t, 30));
        assert!(h.event(&t, 60));
        assert!(h.event(&t, 90));
        // The next early firing is capped at the max timestamp and is the end timer.
        assert_eq!(h.state.fire_time, Some(99));
        assert!(h.event(&t, 99));
        assert!(h.element(&t, 50, 99));
    }

    #[test]
    fn continuous_event_time_aligns_negative_times_as_java() {
        let t = Trigger::ContinuousEventTime(30);
        let mut h = Harness::new();
        // Java: -17 - (-17 % 30) = -17 - (-17) = 0 -> first early firing at 30.
        let mut ctx = TriggerCtx {
            window: TimeWindow::new(-100, 100),
            watermark: i64::MIN,
            now: 0,
            timers: &mut h.timers,
            new_timers: &mut h.new,
        };
        assert!(!t.on_element(-17, &mut h.state, &mut ctx));
        assert_eq!(h.state.fire_time, Some(30));
    }

    #[test]
    fn timer_set_deduplicates_and_detects_stale_entries() {
        let mut s = TimerSet::default();
        assert!(s.insert(Domain::Event, 5));
        assert!(!s.insert(Domain::Event, 5));
        assert!(s.insert(Domain::Processing, 5));
        assert!(s.remove(Domain::Event, 5));
        assert!(!s.remove(Domain::Event, 5));
        assert!(s.remove(Domain::Processing, 5));
    }
}
