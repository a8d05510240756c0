//! The runner's JSON HTTP API: request and response bodies, job states and restart
//! strategies.
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `POST /jobs` | [`SubmitRequest`] | [`JobDetail`] (201) |
//! | `GET /jobs` | | `[`[`JobSummary`]`]` |
//! | `GET /jobs/{id}` | | [`JobDetail`] |
//! | `POST /jobs/{id}/cancel` | [`CancelRequest`] | [`JobDetail`] |
//! | `POST /jobs/{id}/resume` | [`ResumeRequest`] | [`JobDetail`] |
//! | `GET /metrics` | | Prometheus text: the jobs' series (a `job` label); with `--broker-listen` the log's per-partition gauges (`topic`, `partition`: brook::log_metrics) |
//! | `POST /ui/links` | [`LinkRequest`](crate::ui::LinkRequest) | [`LinkBody`](crate::ui::LinkBody): a one-time login link of the dashboard (`brook ui`) |
//!
//! The dashboard's pages and data (`/`, `/ui/...`: [`crate::ui`]) are served on the same
//! address, with a session cookie instead of the token.
//!
//! Every request carries `Authorization: Bearer <token>`; POST bodies are sent with
//! `Content-Type: application/json` (an empty body is `{}`'s defaults for cancel and
//! resume).
//!
//! Errors are `{"error": "..."}` with 400 (bad input), 401 (no or wrong token), 403 (a
//! `Host` that is not the runner's address, or another `Origin`), 404 (no such job), 409
//! (the job is not in a state that allows it) or 415 (a POST body that is not declared
//! JSON).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::status::JobStatus;
use super::RunnerError;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// A process of the job runs.
    Running,
    /// The last process failed; the next starts after the restart delay.
    Restarting,
    /// The job ended on its own: its input is read and its output committed.
    Finished,
    /// The job failed and its restart strategy gave up.
    Failed,
    /// The job was canceled (maybe with a savepoint); it can be resumed.
    Canceled,
}

impl JobState {
    /// Whether the job has no process and none will start on its own.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Failed | JobState::Canceled
        )
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobState::Running => "RUNNING",
            JobState::Restarting => "RESTARTING",
            JobState::Finished => "FINISHED",
            JobState::Failed => "FAILED",
            JobState::Canceled => "CANCELED",
        })
    }
}

/// What a job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum JobKind {
    /// A YAML spec, run by `brook run`.
    Yaml {
        /// The spec's text (the runner keeps a copy).
        spec: String,
        /// The directory relative paths of the spec are relative to (the submitted
        /// file's directory).
        base_dir: PathBuf,
    },
    /// A binary written with the builder API (see [`super::child`]).
    Bin {
        /// Absolute path of the binary.
        path: PathBuf,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
    },
}

/// When and how often a failed job is restarted (Flink's `fixed-delay` and
/// `exponential-delay` strategies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum RestartStrategy {
    /// Restart after `delay_ms`, at most `attempts` times; then the job fails.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Delay before each restart (ms).
        delay_ms: u64,
    },
    /// Restart after `initial_ms`, each further delay `multiplier` times the last, at
    /// most `max_ms`; the delay starts over after a process ran `reset_ms` without
    /// failing. Unlimited restarts unless `attempts` is set.
    ExponentialDelay {
        /// The first delay (ms).
        initial_ms: u64,
        /// The largest delay (ms).
        max_ms: u64,
        /// Growth of the delay per failure (at least 1).
        multiplier: f64,
        /// A process that ran this long resets the delay (ms).
        reset_ms: u64,
        /// Restarts allowed (default unlimited).
        #[serde(default)]
        attempts: Option<u32>,
    },
    /// Never restart: the first failure fails the job.
    None,
}

impl Default for RestartStrategy {
    fn default() -> Self {
        RestartStrategy::FixedDelay {
            attempts: 3,
            delay_ms: 1_000,
        }
    }
}

/// Longest restart delay accepted (ms): one day.
const MAX_DELAY_MS: u64 = 86_400_000;

impl RestartStrategy {
    /// Parses `fixed:attempts=3,delay=1s`, `exponential:initial=1s,max=1m,multiplier=2`
    /// (also `reset=1h`, `attempts=N`) or `none`. Omitted settings take their defaults
    /// (fixed: 3 attempts, 1 s; exponential: 1 s, 5 min, 2, reset 1 h).
    ///
    /// # Errors
    /// [`RunnerError::Invalid`] naming the bad setting.
    pub fn parse(text: &str) -> Result<Self, RunnerError> {
        let bad = |m: String| RunnerError::Invalid(format!("restart strategy {text:?}: {m}"));
        let (kind, rest) = text.split_once(':').unwrap_or((text, ""));
        let mut settings = Vec::new();
        for kv in rest.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("{kv:?} is not KEY=VALUE")))?;
            settings.push((k.trim(), v.trim()));
        }
        let ms = |v: &str| -> Result<u64, RunnerError> {
            brook_core::config::parse_duration_ms(v)
                .ok()
                .and_then(|ms| u64::try_from(ms).ok())
                .ok_or_else(|| bad(format!("{v:?} is not a duration such as 500ms or 2s")))
        };
        let count = |v: &str| -> Result<u32, RunnerError> {
            v.parse()
                .map_err(|_| bad(format!("{v:?} is not a whole number")))
        };
        let s = match kind.trim() {
            "none" if settings.is_empty() => RestartStrategy::None,
            "fixed" | "fixed-delay" => {
                let (mut attempts, mut delay_ms) = (3, 1_000);
                for (k, v) in settings {
                    match k {
                        "attempts" => attempts = count(v)?,
                        "delay" => delay_ms = ms(v)?,
                        _ => return Err(bad(format!("unknown setting {k:?} (attempts, delay)"))),
                    }
                }
                RestartStrategy::FixedDelay { attempts, delay_ms }
            }
            "exponential" | "exponential-delay" => {
                let (mut initial_ms, mut max_ms, mut multiplier, mut reset_ms, mut attempts) =
                    (1_000, 300_000, 2.0, 3_600_000, None);
                for (k, v) in settings {
                    match k {
                        "initial" => initial_ms = ms(v)?,
                        "max" => max_ms = ms(v)?,
                        "reset" => reset_ms = ms(v)?,
                        "attempts" => attempts = Some(count(v)?),
                        "multiplier" => {
                            multiplier = v
                                .parse()
                                .map_err(|_| bad(format!("multiplier {v:?} is not a number")))?
                        }
                        _ => {
                            return Err(bad(format!(
                                "unknown setting {k:?} (initial, max, multiplier, reset, attempts)"
                            )))
                        }
                    }
                }
                RestartStrategy::ExponentialDelay {
                    initial_ms,
                    max_ms,
                    multiplier,
                    reset_ms,
                    attempts,
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown strategy {other:?} (fixed, exponential, none)"
                )))
            }
        };
        s.validate()?;
        Ok(s)
    }

    /// Checks the settings' ranges.
    ///
    /// # Errors
    /// [`RunnerError::Invalid`] naming the bad setting.
    pub fn validate(&self) -> Result<(), RunnerError> {
        let bad = |m: &str| Err(RunnerError::Invalid(format!("restart strategy: {m}")));
        match self {
            RestartStrategy::FixedDelay { delay_ms, .. } if *delay_ms > MAX_DELAY_MS => {
                bad("delay is longer than a day")
            }
            RestartStrategy::ExponentialDelay {
                initial_ms,
                max_ms,
                multiplier,
                ..
            } => {
                if !(multiplier.is_finite() && *multiplier >= 1.0 && *multiplier <= 100.0) {
                    bad("multiplier must be between 1 and 100")
                } else if *max_ms > MAX_DELAY_MS || initial_ms > max_ms {
                    bad("initial must be at most max, and max at most a day")
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// The delay before restart number `restart` (1-based, counted since the delay was
    /// last reset), or `None` when the strategy gives up.
    pub fn delay_ms(&self, restart: u32) -> Option<u64> {
        match self {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay_ms } => {
                (restart <= *attempts).then_some(*delay_ms)
            }
            RestartStrategy::ExponentialDelay {
                initial_ms,
                max_ms,
                multiplier,
                attempts,
                ..
            } => {
                if attempts.is_some_and(|a| restart > a) {
                    return None;
                }
                let exp = i32::try_from(restart.saturating_sub(1)).unwrap_or(i32::MAX);
                let d = (*initial_ms as f64) * multiplier.powi(exp);
                Some(if d.is_finite() && d < *max_ms as f64 {
                    d as u64
                } else {
                    *max_ms
                })
            }
        }
    }

    /// Compact text, as parsed by [`RestartStrategy::parse`].
    pub fn describe(&self) -> String {
        match self {
            RestartStrategy::None => "none".into(),
            RestartStrategy::FixedDelay { attempts, delay_ms } => {
                format!("fixed:attempts={attempts},delay={delay_ms}ms")
            }
            RestartStrategy::ExponentialDelay {
                initial_ms,
                max_ms,
                multiplier,
                reset_ms,
                attempts,
            } => {
                let mut s = format!(
                    "exponential:initial={initial_ms}ms,max={max_ms}ms,multiplier={multiplier},reset={reset_ms}ms"
                );
                if let Some(a) = attempts {
                    s.push_str(&format!(",attempts={a}"));
                }
                s
            }
        }
    }
}

/// `POST /jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// The job's name (letters, digits, `.`, `_`, `-`); default: the spec's name or
    /// the binary's file name.
    #[serde(default)]
    pub name: Option<String>,
    /// What to run.
    pub job: JobKind,
    /// Default parallelism.
    #[serde(default)]
    pub parallelism: Option<u32>,
    /// Restart strategy (default: fixed delay, 3 attempts, 1 s).
    #[serde(default)]
    pub restart: Option<RestartStrategy>,
    /// Checkpoint interval when the job sets none (`10s` by default).
    #[serde(default)]
    pub checkpoint_interval: Option<String>,
    /// Start from this savepoint (a directory inside the runner's data directory).
    #[serde(default)]
    pub from_savepoint: Option<PathBuf>,
}

/// `POST /jobs/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Take a savepoint first (stop with savepoint); the job keeps running if it
    /// fails.
    #[serde(default)]
    pub savepoint: bool,
}

/// `POST /jobs/{id}/resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRequest {
    /// Resume from this savepoint of the job; by default from its newest savepoint
    /// or checkpoint.
    #[serde(default)]
    pub from_savepoint: Option<PathBuf>,
}

/// One process of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based.
    pub number: u32,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// When it ended.
    #[serde(default)]
    pub ended_ms: Option<i64>,
    /// Its process id.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The checkpoint or savepoint it restored.
    #[serde(default)]
    pub restored_from: Option<PathBuf>,
    /// How it ended: `finished`, `canceled`, `exit code N`, `killed by signal N`,
    /// `lost` (the runner went away while it ran).
    #[serde(default)]
    pub outcome: Option<String>,
    /// The end of its standard error, when it failed.
    #[serde(default)]
    pub stderr_tail: Option<String>,
}

/// A job in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The runner's id.
    pub id: String,
    /// The job's name.
    pub name: String,
    /// `yaml` or `bin`.
    pub kind: String,
    /// Its state.
    pub state: JobState,
    /// Processes started so far.
    pub attempts: u32,
    /// When it was submitted (ms since the epoch).
    pub submitted_ms: i64,
    /// The cause of the last failure.
    pub last_failure: Option<String>,
}

/// A job in detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    /// The summary.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Its default parallelism.
    pub parallelism: Option<u32>,
    /// Its restart strategy.
    pub restart: RestartStrategy,
    /// Every process so far, oldest first.
    pub attempt_history: Vec<Attempt>,
    /// Savepoints taken, oldest first.
    pub savepoints: Vec<PathBuf>,
    /// Its checkpoint directory.
    pub checkpoint_dir: PathBuf,
    /// The report of its current (or last) process.
    pub status: Option<JobStatus>,
    /// The complete checkpoints retained in its checkpoint directory, newest first,
    /// from their metadata: the history that outlives its processes (a process's own
    /// history, with failures and durations, is in `status.checkpoints`).
    #[serde(default)]
    pub retained_checkpoints: Vec<RetainedCheckpoint>,
    /// The checkpoint or savepoint the latest attempt that restored one restored.
    #[serde(default)]
    pub latest_restored: Option<PathBuf>,
}

/// A checkpoint kept in a job's checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetainedCheckpoint {
    /// Its id.
    pub id: u64,
    /// When it was triggered (ms since the epoch).
    pub timestamp_ms: i64,
    /// Bytes of its task files (state shared with earlier checkpoints not counted).
    pub size_bytes: u64,
    /// Bytes of everything it consists of: its directory and the shared files it
    /// refers to (what a restore reads; the dashboard's size).
    #[serde(default)]
    pub full_size_bytes: u64,
    /// Its directory.
    pub path: PathBuf,
    /// The attempts (numbers) that restored it.
    #[serde(default)]
    pub restored_by: Vec<u32>,
}

impl RetainedCheckpoint {
    /// The checkpoints of `dir` (brook_engine::stored_checkpoints), each with the
    /// attempts of `attempts` that restored it.
    pub fn list(dir: &std::path::Path, attempts: &[Attempt]) -> Vec<Self> {
        brook_engine::stored_checkpoints(dir)
            .into_iter()
            .map(|c| RetainedCheckpoint {
                restored_by: attempts
                    .iter()
                    .filter(|a| a.restored_from.as_deref() == Some(c.path.as_path()))
                    .map(|a| a.number)
                    .collect(),
                id: c.id,
                timestamp_ms: c.timestamp_ms,
                size_bytes: c.size_bytes,
                full_size_bytes: c.full_size_bytes,
                path: c.path,
            })
            .collect()
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// Checks a job id (`[a-z0-9-]`, 1 to 64 characters).
///
/// # Errors
/// [`RunnerError::Invalid`] otherwise.
pub fn validate_job_id(id: &str) -> Result<(), RunnerError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RunnerError::Invalid(format!(
            "job id {id:?}: only a-z, 0-9 and '-', at most 64 characters"
        )))
    }
}

/// Checks a job name (letters, digits, `.`, `_`, `-`; not `.` or `..`).
///
/// # Errors
/// [`RunnerError::Invalid`] otherwise.
pub fn validate_job_name(name: &str) -> Result<(), RunnerError> {
    brook_core::names::validate_name("job", name).map_err(|e| RunnerError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_restart_strategies() {
        assert_eq!(
            RestartStrategy::parse("fixed:attempts=5,delay=200ms").expect("valid"),
            RestartStrategy::FixedDelay {
                attempts: 5,
                delay_ms: 200
            }
        );
        let e =
            RestartStrategy::parse("exponential:initial=1s,max=1m,multiplier=2").expect("valid");
        assert_eq!(e.delay_ms(1), Some(1_000));
        assert_eq!(e.delay_ms(3), Some(4_000));
        assert_eq!(e.delay_ms(30), Some(60_000));
        assert_eq!(
            RestartStrategy::parse("none").expect("valid").delay_ms(1),
            None
        );
        let f = RestartStrategy::default();
        assert_eq!(f.delay_ms(3), Some(1_000));
        assert_eq!(f.delay_ms(4), None);
        for bad in [
            "fixed:attempts=x",
            "fixed:tries=3",
            "exponential:multiplier=0.5",
            "exponential:initial=2m,max=1m",
            "sometimes",
        ] {
            assert!(RestartStrategy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validates_ids_and_names() {
        assert!(validate_job_id("j-1a2b").is_ok());
        for bad in ["", "../x", "a/b", "A", "a b", "a.b"] {
            assert!(validate_job_id(bad).is_err(), "{bad:?}");
        }
        assert!(validate_job_name("windows.v2").is_ok());
        for bad in ["..", "a/b", "../x", ""] {
            assert!(validate_job_name(bad).is_err(), "{bad:?}");
        }
    }
}
