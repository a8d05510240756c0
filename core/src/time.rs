//! Time: event time in milliseconds since the Unix epoch, and the [`Clock`].
//!
//! All event times in brook are `i64` milliseconds since 1970-01-01T00:00:00Z (UTC).
//! Wall-clock time is read only through a [`Clock`]: [`SystemClock`] in production,
//! [`ManualClock`] in tests, so that segment ageing, retention, session timeouts and
//! watermark idleness can be tested deterministically.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Milliseconds since the Unix epoch (UTC).
pub type Millis = i64;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current wall-clock time in ms since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// A shared, dynamically typed clock.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl SystemClock {
    /// A [`SharedClock`] reading the system time.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place allowed to read the system time
    fn now_ms(&self) -> Millis {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_millis() as Millis,
            // A clock set before 1970: report negative milliseconds rather than panic.
            Err(e) => -(e.duration().as_millis() as Millis),
        }
    }
}

/// A clock that only moves when told to; for deterministic tests.
///
/// Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: Millis) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance(&self, ms: Millis) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: Millis) {
        self.now.store(ms, Ordering::SeqCst);
    }

    /// This clock as a [`SharedClock`] (sharing the same time).
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        let shared = c.shared();
        assert_eq!(shared.now_ms(), 1_000);
        c.advance(250);
        assert_eq!(shared.now_ms(), 1_250);
        c.set(5);
        assert_eq!(shared.now_ms(), 5);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}

/// An event-time watermark: the assertion that no more records with a timestamp
/// `<=` this value (ms) are expected (semantics.md §2). Watermarks only move forward.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Watermark(pub Millis);

impl Watermark {
    /// No progress yet (`i64::MIN`), the initial watermark.
    pub const MIN: Watermark = Watermark(i64::MIN);
    /// The end of event time (`i64::MAX`), emitted when a bounded input ends: every
    /// window fires and every event-time timer runs.
    pub const MAX: Watermark = Watermark(i64::MAX);

    /// The timestamp in ms.
    pub fn millis(self) -> Millis {
        self.0
    }
}

/// Measures elapsed processing time for metrics, in nanoseconds. Kept here so that
/// wall-clock reads stay in this module.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts measuring.
    #[allow(clippy::disallowed_methods)] // metrics timing, not a decision input
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// A stopwatch that started `nanos` ago (now, if the monotonic clock does not
    /// reach that far back): a schedule that began in an earlier process.
    #[allow(clippy::disallowed_methods)] // metrics timing, not a decision input
    pub fn started_ago(nanos: u64) -> Self {
        let now = std::time::Instant::now();
        Stopwatch(
            now.checked_sub(std::time::Duration::from_nanos(nanos))
                .unwrap_or(now),
        )
    }

    /// Nanoseconds since [`Stopwatch::start`].
    pub fn elapsed_nanos(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// The process's CPU time (user + system, all threads, also those that ended) in
/// seconds, from `/proc/self/stat` (10 ms resolution); `None` where there is none.
/// For figures per CPU-second (benchmarks, `brook nexmark`), not for decisions.
pub fn process_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) follow its ')'; utime
    // and stime are fields 14 and 15 of the line, in clock ticks (USER_HZ = 100).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}
