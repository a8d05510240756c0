//! End-to-end latency of a rate-limited run (`brook nexmark --rate`): how long after
//! the source's schedule made a result due the sink wrote it.
//!
//! With a rate of `R` events per second, the event at output position `p` is due
//! `p / R` s after the schedule's start, one start for every subtask
//! ([`NumberedSource::shared_schedule`](brook_connectors::NumberedSource::shared_schedule)),
//! and its event time is `base_time_ms + p × inter_event_delay_us / 1000`. A result's
//! time is its record's timestamp: a bid's own event time (q0 to q3), a window's end
//! − 1 (the windowed queries). Its latency is the moment the sink's writer got it minus
//! the moment the event of that time was due: for a window, from when its end was due
//! to the row, so it includes the watermark's delay (the out-of-orderness bound and
//! the periodic emission), as a user of the results sees it. A result ahead of the
//! schedule counts 0.
//!
//! Each sink writer keeps its own histogram (HdrHistogram, microseconds, 3 significant
//! digits), reads the clock once per batch and merges into the shared one when it
//! closes: no lock or clock read per record.

use std::io::Write as _;
use std::sync::{Mutex, PoisonError};

use brook_connectors::ScheduleStart;
use brook_core::time::Millis;
use hdrhistogram::Histogram;

use crate::config::NexmarkConfig;

/// The largest latency recorded exactly (µs): an hour. Longer ones count as an hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// When each event time was due, for a run at a rate.
#[derive(Debug, Clone)]
pub struct LatencyClock {
    start: ScheduleStart,
    base_time_ms: Millis,
    inter_event_delay_us: u64,
    rate: f64,
}

impl LatencyClock {
    /// The clock of a source with `config` (which must have a rate) whose schedule
    /// starts at `start`; `None` without a rate.
    pub fn new(config: &NexmarkConfig, start: ScheduleStart) -> Option<Self> {
        Some(LatencyClock {
            start,
            base_time_ms: config.base_time_ms,
            inter_event_delay_us: config.inter_event_delay_us.max(1),
            rate: config.rate?,
        })
    }

    /// Nanoseconds since the schedule started, or `None` before it has.
    pub fn now_nanos(&self) -> Option<u64> {
        self.start.get().map(|s| s.elapsed_nanos())
    }

    /// When the event of event time `t` was due (ns after the schedule's start).
    pub fn due_nanos(&self, t: Millis) -> f64 {
        let position = (t - self.base_time_ms) as f64 * 1000.0 / self.inter_event_delay_us as f64;
        position.max(0.0) / self.rate * 1e9
    }

    /// The latency (µs) of a result of time `t` written `now_nanos` after the start.
    pub fn latency_us(&self, t: Millis, now_nanos: u64) -> u64 {
        ((now_nanos as f64 - self.due_nanos(t)) / 1e3).max(0.0) as u64
    }
}

/// An empty histogram of latencies in µs.
pub fn histogram() -> Histogram<u64> {
    // Constant bounds that HdrHistogram accepts (1 <= low, high >= 2 * low, 3 digits).
    #[allow(clippy::unwrap_used)]
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).unwrap()
}

/// The latencies of a run: the clock and the writers' merged histograms.
#[derive(Debug)]
pub struct Latencies {
    clock: LatencyClock,
    all: Mutex<Histogram<u64>>,
}

impl Latencies {
    /// No latencies yet, measured with `clock`.
    pub fn new(clock: LatencyClock) -> Self {
        Latencies {
            clock,
            all: Mutex::new(histogram()),
        }
    }

    /// The clock the writers read.
    pub fn clock(&self) -> &LatencyClock {
        &self.clock
    }

    /// Adds a writer's histogram (when it closes).
    pub fn merge(&self, h: &Histogram<u64>) {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        // Same bounds: adding cannot fail; a value out of range would be saturated.
        let _ = all.add(h);
    }

    /// The percentiles of every result written, or `None` if none was.
    pub fn report(&self) -> Option<LatencyReport> {
        let all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        (!all.is_empty()).then(|| {
            let ms = |us: u64| us as f64 / 1000.0;
            LatencyReport {
                results: all.len(),
                p50_ms: ms(all.value_at_quantile(0.5)),
                p99_ms: ms(all.value_at_quantile(0.99)),
                p999_ms: ms(all.value_at_quantile(0.999)),
                max_ms: ms(all.max()),
            }
        })
    }
}

/// Latencies over time, for measuring a recovery (`brook nexmark --kill-after`): each
/// sink writer adds a line `EPOCH_MS RESULTS P99_US MAX_US` for the results it got in
/// the last [`INTERVAL_MS`] (at most one line per writer and interval, written when a
/// batch comes after the interval ended; none for an interval without results).
pub struct IntervalLog {
    out: Mutex<Box<dyn std::io::Write + Send>>,
}

/// The length of an [`IntervalLog`] line's interval (ms).
pub const INTERVAL_MS: Millis = 100;

impl std::fmt::Debug for IntervalLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalLog").finish_non_exhaustive()
    }
}

impl IntervalLog {
    /// Lines go to `out`.
    pub fn new(out: Box<dyn std::io::Write + Send>) -> Self {
        IntervalLog {
            out: Mutex::new(out),
        }
    }

    /// Writes the line of an interval that ended at `epoch_ms` (write errors are
    /// ignored: the log is a measurement, and the parent reads what there is).
    pub fn line(&self, epoch_ms: Millis, h: &Histogram<u64>) {
        if h.is_empty() {
            return;
        }
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(
            out,
            "{epoch_ms} {} {} {}",
            h.len(),
            h.value_at_quantile(0.99),
            h.max()
        );
        let _ = out.flush();
    }
}

/// One line of an [`IntervalLog`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalLine {
    /// When the interval ended (ms since the epoch).
    pub epoch_ms: Millis,
    /// Results in it.
    pub results: u64,
    /// Their 99th percentile latency (µs).
    pub p99_us: u64,
    /// The largest (µs).
    pub max_us: u64,
}

/// The lines of an interval log's text (lines that do not parse are skipped: a
/// SIGKILLed writer may leave half a line).
pub fn parse_intervals(text: &str) -> Vec<IntervalLine> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ').map(str::parse::<i64>);
            let (Some(Ok(t)), Some(Ok(n)), Some(Ok(p99)), Some(Ok(max)), None) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                return None;
            };
            Some(IntervalLine {
                epoch_ms: t,
                results: u64::try_from(n).ok()?,
                p99_us: u64::try_from(p99).ok()?,
                max_us: u64::try_from(max).ok()?,
            })
        })
        .collect()
}

/// End-to-end latency percentiles of a run (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyReport {
    /// Results measured.
    pub results: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// The largest.
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};

    use super::*;

    #[test]
    fn an_event_is_due_at_its_position_over_the_rate() {
        let config = NexmarkConfig {
            rate: Some(1000.0),
            inter_event_delay_us: 100,
            ..NexmarkConfig::default()
        };
        let clock = LatencyClock::new(&config, Arc::new(OnceLock::new())).unwrap();
        let base = config.base_time_ms;
        // Event time base + 1 ms is position 10: due after 10 ms at 1000 events/s.
        assert_eq!(clock.due_nanos(base), 0.0);
        assert_eq!(clock.due_nanos(base + 1), 10e6);
        assert_eq!(clock.latency_us(base + 1, 12_500_000), 2_500);
        // Ahead of the schedule counts 0.
        assert_eq!(clock.latency_us(base + 1, 5_000_000), 0);
        assert_eq!(clock.now_nanos(), None, "before the schedule starts");
        assert!(LatencyClock::new(&NexmarkConfig::default(), Arc::new(OnceLock::new())).is_none());
    }

    #[test]
    fn interval_lines_round_trip_and_half_lines_are_skipped() {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = IntervalLog::new(Box::new(Shared(Arc::clone(&buf))));
        let mut h = histogram();
        log.line(5, &h); // empty: no line
        for us in [100, 200, 300] {
            h.record(us).unwrap();
        }
        log.line(1_000, &h);
        let mut text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        text.push_str("2000 3 10"); // cut off by a SIGKILL
        let lines = parse_intervals(&text);
        assert_eq!(lines.len(), 1);
        assert_eq!((lines[0].epoch_ms, lines[0].results), (1_000, 3));
        assert!(
            lines[0].max_us >= 300 && lines[0].p99_us >= 299,
            "{lines:?}"
        );
    }

    #[test]
    fn writers_histograms_merge_into_percentiles() {
        let config = NexmarkConfig {
            rate: Some(1000.0),
            ..NexmarkConfig::default()
        };
        let l = Latencies::new(LatencyClock::new(&config, Arc::new(OnceLock::new())).unwrap());
        assert_eq!(l.report(), None);
        let (mut a, mut b) = (histogram(), histogram());
        for us in 1..=990 {
            a.record(us * 10).unwrap();
        }
        for _ in 0..10 {
            b.record(1_000_000).unwrap();
        }
        l.merge(&a);
        l.merge(&b);
        let r = l.report().unwrap();
        assert_eq!(r.results, 1000);
        assert!((r.p50_ms - 5.0).abs() < 0.01, "{r:?}");
        assert!((r.p99_ms - 9.9).abs() < 0.01, "{r:?}");
        assert!((r.max_ms - 1000.0).abs() < 1.0, "{r:?}");
    }
}
