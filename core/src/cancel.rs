//! Cancellation inside one long operator call.
//!
//! A task checks whether its job was cancelled between the batches it processes, but
//! one call can take long by itself: a record that falls into millions of sliding
//! windows, or a watermark that fires millions of them (issue 15: a job ignored Ctrl-C
//! and SIGTERM for ten minutes). Such loops count their work with a [`CancelCheck`]
//! and stop with [`crate::operator::OperatorError::Cancelled`] once the job is
//! cancelled; the task then ends as a cancelled one, not as a failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A job's cancel flag as operators see it: set once, by the runtime, when the job is
/// cancelled (Ctrl-C, SIGTERM, `brook job cancel`, a failed task).
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Option<Arc<AtomicBool>>);

impl CancelFlag {
    /// The flag the runtime sets.
    pub fn new(flag: Arc<AtomicBool>) -> Self {
        CancelFlag(Some(flag))
    }

    /// A flag nobody sets (tests, operators run outside a job).
    pub fn never() -> Self {
        CancelFlag(None)
    }

    /// Whether the job was cancelled. A relaxed load: the flag only ever goes from
    /// false to true, and seeing it one iteration late is harmless.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// Counts work between reads of a [`CancelFlag`], so a hot loop reads the flag once per
/// [`CancelCheck::EVERY`] units of work (windows, records, rows), not per unit.
#[derive(Debug, Clone, Default)]
pub struct CancelCheck {
    since: usize,
}

impl CancelCheck {
    /// Units of work between two reads of the flag. A unit is small (one window of one
    /// record: a hash-map update or a state access), so 1,024 of them take well under
    /// a millisecond, and even with RocksDB state a few milliseconds.
    pub const EVERY: usize = 1024;

    /// A counter at zero.
    pub const fn new() -> Self {
        CancelCheck { since: 0 }
    }

    /// Counts `n` units of work; `true` when the flag was read and is set.
    #[inline]
    pub fn tick(&mut self, n: usize, flag: &CancelFlag) -> bool {
        self.since += n;
        if self.since < Self::EVERY {
            return false;
        }
        self.since = 0;
        flag.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_flag_once_per_every_units() {
        let raw = Arc::new(AtomicBool::new(true));
        let flag = CancelFlag::new(Arc::clone(&raw));
        let mut c = CancelCheck::new();
        // Below EVERY units the flag is not read, set or not.
        assert!(!c.tick(CancelCheck::EVERY - 1, &flag));
        // The unit that reaches EVERY reads it.
        assert!(c.tick(1, &flag));
        // The count starts again after each read.
        assert!(!c.tick(1, &flag));
        raw.store(false, Ordering::Relaxed);
        assert!(!c.tick(CancelCheck::EVERY, &flag));
        // One large unit of work (a record in many windows) reads it at once.
        raw.store(true, Ordering::Relaxed);
        assert!(c.tick(5 * CancelCheck::EVERY, &flag));
    }

    #[test]
    fn a_flag_nobody_sets_is_never_cancelled() {
        let mut c = CancelCheck::new();
        assert!(!c.tick(10 * CancelCheck::EVERY, &CancelFlag::never()));
        assert!(!CancelFlag::default().is_cancelled());
    }
}
