//! When `brook verify` kills the job, and at which parallelism each attempt runs: a
//! pure function of the seed, so a failing run is repeated with `--seed S`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The shortest bound on a kill's delay (ms): below it every attempt dies while the
/// process starts. A job that ends within a few tens of ms of its start (a small
/// file) gets its kills there.
pub const MIN_MAX_DELAY_MS: u64 = 20;

/// How often an attempt that waits for a checkpoint may see the job end before the
/// waiting stops (each time the run starts over).
pub const WAITING_ENDS: u32 = 3;

/// The parallelisms `--rescale` picks from (1 to this, inclusive).
pub const MAX_RESCALE_PARALLELISM: u32 = 4;

/// One attempt of the killed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How long it runs before SIGKILL (ms of wall time).
    pub delay_ms: u64,
    /// Its parallelism (`--parallelism`), with `--rescale`; otherwise `None` (the
    /// run's own).
    pub parallelism: Option<u32>,
    /// Whether the delay counts from the attempt's first completed checkpoint rather
    /// than from its start, so the kill lands after that checkpoint and the next
    /// attempt restores it (the delay is then below one checkpoint interval: the kill
    /// comes between that checkpoint and the next).
    pub after_checkpoint: bool,
}

/// The seeded sequence of attempts: each delay uniform in `[0, max_delay_ms]`, the
/// bound adapting to what the attempts achieve (a state machine fed the facts the
/// caller observes: [`KillSchedule::killed`], [`KillSchedule::shorten`]).
#[derive(Debug)]
pub struct KillSchedule {
    rng: StdRng,
    max_delay_ms: u64,
    /// The bound never grows beyond this.
    ceiling_ms: u64,
    rescale: bool,
    checkpoint_interval_ms: u64,
    /// Every third attempt waits for a checkpoint (see [`Attempt::after_checkpoint`])
    /// until [`KillSchedule::ended_before_checkpoint`] has said [`WAITING_ENDS`] times
    /// that the job is too short for it.
    wait_for_checkpoints: bool,
    waiting_ended: u32,
    attempts: u64,
}

impl KillSchedule {
    /// A schedule from `seed` with kills at most `max_delay_ms` after each start (see
    /// [`max_delay_ms`]), a bound that may grow up to `ceiling_ms` (the reference
    /// run's duration: a kill later than that would mostly find the job ended); with
    /// `rescale`, each attempt at a parallelism of 1 to [`MAX_RESCALE_PARALLELISM`].
    /// Every third attempt is killed within `checkpoint_interval_ms` after its first
    /// completed checkpoint, so that restores are sure to happen (random moments alone
    /// may all fall before the first checkpoint of an attempt when the process starts
    /// slowly, on a loaded machine).
    pub fn new(
        seed: u64,
        max_delay_ms: u64,
        ceiling_ms: u64,
        rescale: bool,
        checkpoint_interval_ms: u64,
    ) -> Self {
        let max_delay_ms = max_delay_ms.max(MIN_MAX_DELAY_MS);
        KillSchedule {
            rng: StdRng::seed_from_u64(seed),
            max_delay_ms,
            ceiling_ms: ceiling_ms.max(max_delay_ms),
            rescale,
            checkpoint_interval_ms,
            wait_for_checkpoints: true,
            waiting_ended: 0,
            attempts: 0,
        }
    }

    /// The bound on the delays (ms).
    pub fn max_delay(&self) -> u64 {
        self.max_delay_ms
    }

    /// The next attempt.
    pub fn next_attempt(&mut self) -> Attempt {
        self.attempts += 1;
        // Not every attempt: each one that waits moves the job on by a checkpoint at
        // least, and the job must not end before the kills are made.
        let after_checkpoint = self.wait_for_checkpoints && self.attempts.is_multiple_of(3);
        let bound = if after_checkpoint {
            self.checkpoint_interval_ms.min(self.max_delay_ms)
        } else {
            self.max_delay_ms
        };
        let delay_ms = self.rng.gen_range(0..=bound);
        let parallelism = self
            .rescale
            .then(|| self.rng.gen_range(1..=MAX_RESCALE_PARALLELISM));
        Attempt {
            delay_ms,
            parallelism,
            after_checkpoint,
        }
    }

    /// An attempt that waited for a checkpoint saw the job end before it or right after
    /// it (the checkpoint was the job's last, or a job that ends within a checkpoint
    /// interval or two): after [`WAITING_ENDS`] of these no attempt waits.
    pub fn ended_before_checkpoint(&mut self) {
        self.waiting_ended += 1;
        if self.waiting_ended >= WAITING_ENDS {
            self.wait_for_checkpoints = false;
        }
    }

    /// The job got to its end `ended_after_ms` after the start of an attempt, before
    /// all kills were made: the run starts over with delays half as long, and at most
    /// half that time (never below [`MIN_MAX_DELAY_MS`]), so that they come before the
    /// job's end. Returns false when they cannot get shorter.
    pub fn shorten(&mut self, ended_after_ms: u64) -> bool {
        if self.max_delay_ms <= MIN_MAX_DELAY_MS {
            return false;
        }
        self.max_delay_ms = (self.max_delay_ms / 2)
            .min(ended_after_ms / 2)
            .max(MIN_MAX_DELAY_MS);
        // Growing back to where the job ended first would end it again.
        self.ceiling_ms = self.max_delay_ms;
        true
    }

    /// An attempt was killed; `progressed` says whether it completed a checkpoint.
    /// When it did not (a slow start, a loaded machine: every kill would come before
    /// the first checkpoint and the job never moves), the bound doubles, up to the
    /// ceiling.
    pub fn killed(&mut self, progressed: bool) {
        if !progressed {
            self.max_delay_ms = self.max_delay_ms.saturating_mul(2).min(self.ceiling_ms);
        }
    }
}

/// The bound on the kills' delays (ms) for `kills` kills of a job whose run without
/// failures took `reference_ms` and checkpoints every `checkpoint_interval_ms`: twice
/// the reference over the kills (so the kills, half that long on average, come before
/// the job ends), but at least three checkpoint intervals (so most attempts complete
/// a checkpoint and the job moves forward between kills).
pub fn max_delay_ms(reference_ms: u64, kills: u32, checkpoint_interval_ms: u64) -> u64 {
    let spread = reference_ms.saturating_mul(2) / u64::from(kills.max(1));
    spread
        .max(checkpoint_interval_ms.saturating_mul(3))
        .max(MIN_MAX_DELAY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempts(seed: u64, n: usize, rescale: bool) -> Vec<Attempt> {
        let mut s = KillSchedule::new(seed, 300, 300, rescale, 100);
        (0..n).map(|_| s.next_attempt()).collect()
    }

    #[test]
    fn the_seed_fixes_every_attempt() {
        assert_eq!(attempts(7, 50, true), attempts(7, 50, true));
        assert_ne!(attempts(7, 50, true), attempts(8, 50, true));
    }

    #[test]
    fn delays_stay_within_the_bound_and_spread_over_it() {
        for seed in 0..20 {
            let a = attempts(seed, 200, false);
            assert!(a
                .iter()
                .all(|a| a.delay_ms <= 300 && a.parallelism.is_none()));
            assert!(a.iter().any(|a| a.delay_ms < 100) && a.iter().any(|a| a.delay_ms > 200));
        }
    }

    #[test]
    fn every_third_attempt_is_killed_within_an_interval_after_a_checkpoint() {
        let a = attempts(5, 200, false);
        for (i, a) in a.iter().enumerate() {
            assert_eq!(a.after_checkpoint, i % 3 == 2, "attempt {i}");
            if a.after_checkpoint {
                assert!(a.delay_ms <= 100, "{a:?}");
            }
        }
        // A job too short for a kill after its checkpoint: no attempt waits again.
        let mut s = KillSchedule::new(5, 300, 300, false, 100);
        assert!(!s.next_attempt().after_checkpoint && !s.next_attempt().after_checkpoint);
        assert!(s.next_attempt().after_checkpoint);
        for _ in 0..WAITING_ENDS - 1 {
            s.ended_before_checkpoint();
        }
        assert!((0..3).any(|_| s.next_attempt().after_checkpoint));
        s.ended_before_checkpoint();
        assert!((0..10).all(|_| !s.next_attempt().after_checkpoint));
    }

    #[test]
    fn rescale_picks_every_parallelism_from_1_to_the_maximum() {
        let a = attempts(3, 200, true);
        for p in 1..=MAX_RESCALE_PARALLELISM {
            assert!(a.iter().any(|a| a.parallelism == Some(p)), "{p}");
        }
        assert!(a
            .iter()
            .all(|a| matches!(a.parallelism, Some(1..=MAX_RESCALE_PARALLELISM))));
    }

    #[test]
    fn shortening_halves_the_bound_down_to_the_minimum() {
        let mut s = KillSchedule::new(1, 300, 1_000, false, 100);
        assert!(s.shorten(1_000));
        assert_eq!(s.max_delay(), 150);
        // A job that ended 160 ms after its start: the smaller of half the bound (75)
        // and half the run (80).
        assert!(s.shorten(160));
        assert_eq!(s.max_delay(), 75);
        assert!(s.shorten(1_000) && s.shorten(1_000));
        assert_eq!(s.max_delay(), MIN_MAX_DELAY_MS);
        assert!(!s.shorten(1_000));
        assert_eq!(
            KillSchedule::new(1, 3, 0, false, 100).max_delay(),
            MIN_MAX_DELAY_MS
        );
    }

    #[test]
    fn kills_without_a_checkpoint_double_the_bound_up_to_the_ceiling() {
        let mut s = KillSchedule::new(1, 300, 1_000, false, 100);
        s.killed(true);
        assert_eq!(s.max_delay(), 300);
        s.killed(false);
        assert_eq!(s.max_delay(), 600);
        s.killed(false);
        assert_eq!(s.max_delay(), 1_000);
        s.killed(false);
        assert_eq!(s.max_delay(), 1_000);
        // Once the job ended before the kills, the bound stays below where it did.
        assert!(s.shorten(10_000));
        s.killed(false);
        assert_eq!(s.max_delay(), 500);
    }

    #[test]
    fn the_bound_spreads_the_kills_over_the_run_but_leaves_room_for_checkpoints() {
        // 3 s over 20 kills: 300 ms; checkpoints every 50 ms need 150 ms.
        assert_eq!(max_delay_ms(3_000, 20, 50), 300);
        // Checkpoints every 200 ms: 600 ms.
        assert_eq!(max_delay_ms(3_000, 20, 200), 600);
        // A job of a few ms: the minimum.
        assert_eq!(max_delay_ms(5, 50, 1), MIN_MAX_DELAY_MS);
        assert_eq!(max_delay_ms(1_000, 0, 0), 2_000);
    }
}
