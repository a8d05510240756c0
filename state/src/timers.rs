//! Timers per key and namespace, in event time and processing time.

use std::collections::BTreeSet;

use brook_core::keys::KeyGroup;
use brook_core::time::Millis;

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's time.
    EventTime,
    /// Fires when the wall clock reaches the timer's time.
    ProcessingTime,
}

/// A registered timer: when, and for which key and namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    /// When it fires (ms).
    pub timestamp: Millis,
    /// The key's key group.
    pub key_group: KeyGroup,
    /// The encoded key.
    pub key: Vec<u8>,
    /// The namespace (for example a window), encoded.
    pub namespace: Vec<u8>,
}

/// Event-time and processing-time timers of one operator instance, as Flink's
/// `InternalTimerService`: registering the same (time, key, namespace) twice keeps one
/// timer; timers fire in time order.
#[derive(Debug, Default)]
pub struct TimerService {
    event: BTreeSet<Timer>,
    processing: BTreeSet<Timer>,
}

impl TimerService {
    /// No timers.
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&mut self, domain: TimeDomain) -> &mut BTreeSet<Timer> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer (idempotent).
    pub fn register(&mut self, domain: TimeDomain, timer: Timer) {
        self.set(domain).insert(timer);
    }

    /// Deletes a timer, if registered.
    pub fn delete(&mut self, domain: TimeDomain, timer: &Timer) {
        self.set(domain).remove(timer);
    }

    /// Removes and returns the earliest timer due at `time` (`timestamp <= time`).
    /// Call repeatedly: timers registered while firing also fire if due.
    pub fn pop_due(&mut self, domain: TimeDomain, time: Millis) -> Option<Timer> {
        let set = self.set(domain);
        if set.first().is_some_and(|t| t.timestamp <= time) {
            set.pop_first()
        } else {
            None
        }
    }

    /// Every timer with its domain (for snapshots).
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, &Timer)> {
        self.event.iter().map(|t| (TimeDomain::EventTime, t)).chain(
            self.processing
                .iter()
                .map(|t| (TimeDomain::ProcessingTime, t)),
        )
    }

    /// The earliest processing-time timer, to schedule a callback.
    pub fn next_processing_time(&self) -> Option<Millis> {
        self.processing.first().map(|t| t.timestamp)
    }

    /// Number of timers in a domain.
    pub fn len(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.len(),
            TimeDomain::ProcessingTime => self.processing.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ts: i64, key: &[u8]) -> Timer {
        Timer {
            timestamp: ts,
            key_group: 0,
            key: key.to_vec(),
            namespace: Vec::new(),
        }
    }

    #[test]
    fn timers_fire_in_order_once() {
        let mut s = TimerService::new();
        s.register(TimeDomain::EventTime, t(30, b"a"));
        s.register(TimeDomain::EventTime, t(10, b"b"));
        s.register(TimeDomain::EventTime, t(10, b"b"));
        s.register(TimeDomain::EventTime, t(20, b"a"));
        s.delete(TimeDomain::EventTime, &t(20, b"a"));
        assert_eq!(s.len(TimeDomain::EventTime), 2);
        assert_eq!(s.pop_due(TimeDomain::EventTime, 25), Some(t(10, b"b")));
        assert_eq!(s.pop_due(TimeDomain::EventTime, 25), None);
        assert_eq!(s.pop_due(TimeDomain::EventTime, 30), Some(t(30, b"a")));
        s.register(TimeDomain::ProcessingTime, t(7, b"x"));
        assert_eq!(s.next_processing_time(), Some(7));
    }
}
