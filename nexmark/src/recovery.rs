//! How fast a killed run is current again (`brook nexmark --kill-after`): from the
//! latencies per interval of both processes ([`crate::latency::IntervalLog`]), a pure
//! function of the lines, the kill's time and when the steady state began.
//!
//! - The bar is the worst 99th percentile of any interval between the end of the
//!   warm-up and the kill: the latency the output had while nothing failed.
//! - The run is *current again* at the end of the first interval after the kill whose
//!   99th percentile is at most the bar (issue 22: "latency back under its pre-crash
//!   p99"). Results replayed from the checkpoint and the events that fell due while
//!   the job was down are late, so the intervals of the catch-up are above the bar.

use brook_core::time::Millis;

use crate::latency::IntervalLine;

/// What [`recovery`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// The worst 99th percentile (µs) of an interval of the steady state before the kill.
    pub bar_us: u64,
    /// Intervals with results between the steady state's start and the kill.
    pub steady_intervals: usize,
    /// From the kill to the end of the first interval with results after it (ms).
    pub first_result_ms: Option<Millis>,
    /// From the kill to the moment the output was current again (ms); `None` if it was
    /// not before the run ended.
    pub current_ms: Option<Millis>,
}

/// Why there is no [`Recovery`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// No results between the steady state's start and the kill.
    #[error(
        "no results between the end of the warm-up and the kill: raise --kill-after or --rate"
    )]
    NoSteadyState,
}

/// The recovery of a run killed at `kill_ms` whose steady state began at `steady_ms`
/// (both ms since the epoch), from the interval lines of every process.
///
/// # Errors
/// [`RecoveryError::NoSteadyState`].
pub fn recovery(
    lines: &[IntervalLine],
    steady_ms: Millis,
    kill_ms: Millis,
) -> Result<Recovery, RecoveryError> {
    let steady: Vec<&IntervalLine> = lines
        .iter()
        .filter(|l| l.epoch_ms >= steady_ms && l.epoch_ms <= kill_ms)
        .collect();
    let bar_us = steady
        .iter()
        .map(|l| l.p99_us)
        .max()
        .ok_or(RecoveryError::NoSteadyState)?;
    let mut after: Vec<&IntervalLine> = lines.iter().filter(|l| l.epoch_ms > kill_ms).collect();
    after.sort_by_key(|l| l.epoch_ms);
    let first_result_ms = after.first().map(|l| l.epoch_ms - kill_ms);
    let current_ms = after
        .iter()
        .find(|l| l.p99_us <= bar_us)
        .map(|l| l.epoch_ms - kill_ms);
    Ok(Recovery {
        bar_us,
        steady_intervals: steady.len(),
        first_result_ms,
        current_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(epoch_ms: Millis, p99_us: u64) -> IntervalLine {
        IntervalLine {
            epoch_ms,
            results: 10,
            p99_us,
            max_us: p99_us,
        }
    }

    #[test]
    fn current_again_at_the_first_interval_under_the_bar() {
        let mut lines = vec![
            line(100, 90_000),
            line(600, 2_000),
            line(700, 3_000),
            line(800, 2_500),
        ];
        // Killed at 1000; back at 2500 with a catch-up, current from 3000 on.
        lines.extend([
            line(2_500, 900_000),
            line(2_600, 400_000),
            line(3_000, 2_000),
            line(3_100, 50_000),
            line(3_400, 2_900),
        ]);
        let r = recovery(&lines, 500, 1_000).unwrap();
        // The warm-up's 90 ms interval does not set the bar.
        assert_eq!(r.bar_us, 3_000);
        assert_eq!(r.steady_intervals, 3);
        assert_eq!(r.first_result_ms, Some(1_500));
        assert_eq!(r.current_ms, Some(2_000));
    }

    #[test]
    fn never_current_again_and_no_steady_state() {
        let lines = vec![line(600, 2_000), line(1_500, 9_000), line(1_600, 8_000)];
        let r = recovery(&lines, 500, 1_000).unwrap();
        assert_eq!(r.current_ms, None);
        assert_eq!(r.first_result_ms, Some(500));
        assert_eq!(
            recovery(&lines, 700, 1_000),
            Err(RecoveryError::NoSteadyState)
        );
    }
}
