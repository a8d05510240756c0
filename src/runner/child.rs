//! The contract between the runner and a job process it supervises.
//!
//! The runner starts every job as a child process: `brook run <spec>` for a YAML job,
//! the job's own binary for a job written with the builder API. It hands the child
//! these environment variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `BROOK_JOB_ID` | the runner's id of the job; its presence means "supervised" |
//! | `BROOK_DATA_DIR` | the runner's data directory (the embedded log's) |
//! | `BROOK_CHECKPOINT_DIR` | where the job's checkpoints go |
//! | `BROOK_STATE_DIR` | where the job may keep local (RocksDB) state |
//! | `BROOK_STATUS_FILE` | where the job writes its [`JobStatus`] (JSON, replaced atomically every 500 ms and when it ends) |
//! | `BROOK_RESTORE` | optional: the checkpoint or savepoint directory to restore from |
//! | `BROOK_PARALLELISM` | optional: the job's default parallelism |
//! | `BROOK_CHECKPOINT_INTERVAL` | optional: checkpoint interval when the job sets none (default 10s) |
//!
//! The child's standard input is a pipe from the runner carrying one command per line:
//! `cancel`, `savepoint DIR` (take a savepoint under DIR, go on) and `stop DIR`
//! (stop with a savepoint: take one under DIR, then cancel; if it fails the job goes
//! on). End of input means the runner is gone: the job stops as after a crash, and the
//! next runner restarts it from its latest checkpoint, so no job outlives its runner.
//! While it runs the child holds an exclusive lock on `<BROOK_STATUS_FILE>.lock`, so
//! a runner never starts a second copy of a job while an old one is still stopping.
//!
//! Exit status: 0 when the job finished or was canceled (the status file says which);
//! [`EXIT_DATA_DIR_BUSY`] (75) when the embedded log could not be opened because
//! another process holds it (the log is one process's at a time: the runner tries
//! again every second without counting a failure); anything else is a failure the
//! runner may restart the job after.
//!
//! A job binary needs two calls to be supervised, and still runs on its own:
//!
//! ```no_run
//! use brook::prelude::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Checkpoint directory, restore point and parallelism from the runner, if any.
//! let env = StreamEnvironment::new(brook::runner::job_config(JobConfig::default())?);
//! env.source(GeneratorSource::new(1000, 10)?)
//!     .map(|e| e.value)
//!     .sink(StdoutSink::new());
//! // Under a runner: status reports and runner commands; otherwise `env.execute`.
//! brook::runner::execute(&env, "generated")?;
//! # Ok(()) }
//! ```

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use brook_engine::metrics::JobMetrics;
use brook_engine::{
    CheckpointConfig, EngineError, JobConfig, JobHandle, JobResult, RestoredCheckpoint,
    StreamEnvironment,
};

use super::lock::{LockError, ProcessLock};
use super::status::{now_ms, JobStatus, ProcessState, SavepointOutcome};
use super::RunnerError;

/// `BROOK_JOB_ID`.
pub const ENV_JOB_ID: &str = "BROOK_JOB_ID";
/// `BROOK_JOB_NAME`: the job's name at the runner, which the job runs under (its
/// log sinks' transactional ids are `<name>.<sink>.<subtask>`, so two jobs submitted
/// from one spec under different names must not share them).
pub const ENV_JOB_NAME: &str = "BROOK_JOB_NAME";
/// `BROOK_DATA_DIR`.
pub const ENV_DATA_DIR: &str = "BROOK_DATA_DIR";
/// `BROOK_CHECKPOINT_DIR`.
pub const ENV_CHECKPOINT_DIR: &str = "BROOK_CHECKPOINT_DIR";
/// `BROOK_STATE_DIR`.
pub const ENV_STATE_DIR: &str = "BROOK_STATE_DIR";
/// `BROOK_STATUS_FILE`.
pub const ENV_STATUS_FILE: &str = "BROOK_STATUS_FILE";
/// `BROOK_RESTORE`.
pub const ENV_RESTORE: &str = "BROOK_RESTORE";
/// `BROOK_PARALLELISM`.
pub const ENV_PARALLELISM: &str = "BROOK_PARALLELISM";
/// `BROOK_CHECKPOINT_INTERVAL`.
pub const ENV_CHECKPOINT_INTERVAL: &str = "BROOK_CHECKPOINT_INTERVAL";

/// The exit status of a job process that could not open the data directory's log
/// because another process holds it (`EX_TEMPFAIL`).
pub const EXIT_DATA_DIR_BUSY: i32 = 75;

/// Checkpoint interval of a supervised job that sets none (ms).
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: i64 = 10_000;

/// How often the status file is rewritten (ms).
const STATUS_EVERY_MS: i64 = 500;

/// What the runner handed a job process (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildContext {
    /// The runner's id of the job.
    pub job_id: String,
    /// The job's name at the runner (`None`: the name the job gives itself).
    pub job_name: Option<String>,
    /// The runner's data directory.
    pub data_dir: PathBuf,
    /// Where the job's checkpoints go.
    pub checkpoint_dir: PathBuf,
    /// Where the job may keep local state.
    pub state_dir: PathBuf,
    /// Where the job writes its status.
    pub status_file: PathBuf,
    /// The checkpoint or savepoint to restore from.
    pub restore: Option<PathBuf>,
    /// The job's default parallelism.
    pub parallelism: Option<u32>,
    /// Checkpoint interval when the job sets none (ms).
    pub checkpoint_interval_ms: i64,
}

fn var(name: &'static str) -> Result<Option<String>, RunnerError> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(RunnerError::Invalid(format!("{name}: not valid UTF-8")))
        }
    }
}

fn required(name: &'static str) -> Result<String, RunnerError> {
    var(name)?.ok_or_else(|| {
        RunnerError::Invalid(format!(
            "{name} is not set (it is set with {ENV_JOB_ID} by the runner)"
        ))
    })
}

impl ChildContext {
    /// The context from the environment; `None` when the process does not run under
    /// a runner (`BROOK_JOB_ID` is not set).
    ///
    /// # Errors
    /// [`RunnerError::Invalid`] when `BROOK_JOB_ID` is set but another variable is
    /// missing or malformed.
    pub fn from_env() -> Result<Option<Self>, RunnerError> {
        let Some(job_id) = var(ENV_JOB_ID)? else {
            return Ok(None);
        };
        let parallelism = var(ENV_PARALLELISM)?
            .map(|p| {
                p.parse::<u32>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    RunnerError::Invalid(format!("{ENV_PARALLELISM}={p}: not a positive number"))
                })
            })
            .transpose()?;
        let checkpoint_interval_ms = match var(ENV_CHECKPOINT_INTERVAL)? {
            Some(t) => brook_core::config::parse_duration_ms(&t)
                .ok()
                .filter(|ms| *ms > 0)
                .ok_or_else(|| {
                    RunnerError::Invalid(format!(
                        "{ENV_CHECKPOINT_INTERVAL}={t}: not a positive duration"
                    ))
                })?,
            None => DEFAULT_CHECKPOINT_INTERVAL_MS,
        };
        Ok(Some(ChildContext {
            job_id,
            job_name: var(ENV_JOB_NAME)?,
            data_dir: required(ENV_DATA_DIR)?.into(),
            checkpoint_dir: required(ENV_CHECKPOINT_DIR)?.into(),
            state_dir: required(ENV_STATE_DIR)?.into(),
            status_file: required(ENV_STATUS_FILE)?.into(),
            restore: var(ENV_RESTORE)?.map(PathBuf::from),
            parallelism,
            checkpoint_interval_ms,
        }))
    }

    /// The environment variables that hand this context to a child process.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (ENV_JOB_ID, self.job_id.clone()),
            (ENV_DATA_DIR, self.data_dir.display().to_string()),
            (
                ENV_CHECKPOINT_DIR,
                self.checkpoint_dir.display().to_string(),
            ),
            (ENV_STATE_DIR, self.state_dir.display().to_string()),
            (ENV_STATUS_FILE, self.status_file.display().to_string()),
            (
                ENV_CHECKPOINT_INTERVAL,
                format!("{}ms", self.checkpoint_interval_ms),
            ),
        ];
        if let Some(r) = &self.restore {
            v.push((ENV_RESTORE, r.display().to_string()));
        }
        if let Some(n) = &self.job_name {
            v.push((ENV_JOB_NAME, n.clone()));
        }
        if let Some(p) = self.parallelism {
            v.push((ENV_PARALLELISM, p.to_string()));
        }
        v
    }

    /// The lock a job process holds while it runs.
    pub fn lock_file(status_file: &Path) -> PathBuf {
        status_file.with_extension("lock")
    }

    /// Takes the job's lock (`<status file>.lock`) for the rest of the process's life,
    /// waiting while an earlier process of the job still holds it. Idempotent.
    ///
    /// # Errors
    /// [`RunnerError::Io`] when the lock file cannot be opened or locked.
    pub fn hold_lock(&self) -> Result<(), RunnerError> {
        static HELD: std::sync::OnceLock<ProcessLock> = std::sync::OnceLock::new();
        if HELD.get().is_some() {
            return Ok(());
        }
        let path = Self::lock_file(&self.status_file);
        let lock = ProcessLock::acquire(&path).map_err(|e| match e {
            LockError::Io { path, source } => RunnerError::Io { path, source },
            // `acquire` waits instead.
            held @ LockError::Held { .. } => RunnerError::Conflict(held.to_string()),
        })?;
        let _ = HELD.set(lock);
        Ok(())
    }

    /// Points `config` at the runner's checkpoint directory (keeping its interval,
    /// or [`ChildContext::checkpoint_interval_ms`] when it has none), sets the restore
    /// point and the parallelism.
    ///
    /// # Errors
    /// [`RunnerError::Restore`] when the checkpoint to restore cannot be loaded;
    /// as [`ChildContext::hold_lock`].
    pub fn configure(&self, config: &mut JobConfig) -> Result<(), RunnerError> {
        // Before anything of the job's is read or written.
        self.hold_lock()?;
        if let Some(p) = self.parallelism {
            config.parallelism = p;
        }
        match &mut config.checkpoint {
            Some(c) => c.dir = self.checkpoint_dir.clone(),
            None => {
                config.checkpoint = Some(CheckpointConfig::new(
                    &self.checkpoint_dir,
                    self.checkpoint_interval_ms,
                ))
            }
        }
        if let Some(r) = &self.restore {
            let cp = RestoredCheckpoint::load(r).map_err(|e| RunnerError::Restore {
                path: r.clone(),
                message: e.to_string(),
            })?;
            eprintln!("restoring checkpoint {} from {}", cp.id, cp.path.display());
            config.restore = Some(std::sync::Arc::new(cp));
        }
        Ok(())
    }

    /// Watches a started job until it ends: writes the status file every 500 ms,
    /// obeys the runner's commands on stdin, writes the final status. `Ok(None)` when
    /// the job was canceled.
    ///
    /// # Errors
    /// [`RunnerError::Io`] when the job's lock cannot be taken;
    /// [`RunnerError::Engine`] when the job failed.
    pub fn supervise(
        &self,
        job: JobHandle,
        metrics: &JobMetrics,
    ) -> Result<Option<JobResult>, RunnerError> {
        self.hold_lock()?;
        let (tx, rx) = mpsc::channel();
        // Not joined: it blocks on stdin until the runner writes or goes away.
        let _ = std::thread::Builder::new()
            .name("runner-commands".into())
            .spawn(move || read_commands(tx));
        let status = |state, savepoint: &Option<SavepointOutcome>, error: Option<String>| {
            let mut s = JobStatus::from_metrics(&self.job_id, state, metrics);
            s.savepoint = savepoint.clone();
            s.error = error;
            if let Err(e) = s.write(&self.status_file) {
                tracing::warn!(error = %e, "cannot write the status file");
            }
        };
        let mut canceled = false;
        let mut savepoint = None;
        let mut next_status = now_ms();
        while !job.is_finished() {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Command::Cancel) if !canceled => {
                    canceled = true;
                    job.cancel();
                }
                Ok(Command::Savepoint { dir, stop }) if !canceled => {
                    let outcome = match job.savepoint(&dir) {
                        Ok(p) => {
                            eprintln!("savepoint written to {}", p.display());
                            if stop {
                                canceled = true;
                                job.cancel();
                            }
                            SavepointOutcome::Written(p)
                        }
                        Err(e) => SavepointOutcome::Failed(e.to_string()),
                    };
                    savepoint = Some(outcome);
                    next_status = now_ms();
                }
                Ok(Command::Unknown(line)) => {
                    eprintln!("runner command not understood: {line:?}");
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            if now_ms() >= next_status {
                status(ProcessState::Running, &savepoint, None);
                next_status = now_ms() + STATUS_EVERY_MS;
            }
        }
        match job.join() {
            Ok(r) => {
                status(ProcessState::Finished, &savepoint, None);
                Ok(Some(r))
            }
            Err(EngineError::Cancelled) if canceled => {
                status(ProcessState::Canceled, &savepoint, None);
                Ok(None)
            }
            Err(e) => {
                status(ProcessState::Failed, &savepoint, Some(e.to_string()));
                Err(RunnerError::Engine(e))
            }
        }
    }
}

/// A command of the runner.
#[derive(Debug)]
enum Command {
    Cancel,
    Savepoint { dir: PathBuf, stop: bool },
    Unknown(String),
}

fn read_commands(tx: mpsc::Sender<Command>) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        let cmd = match line.split_once(' ') {
            _ if line == "cancel" => Command::Cancel,
            Some(("savepoint", dir)) => Command::Savepoint {
                dir: dir.into(),
                stop: false,
            },
            Some(("stop", dir)) => Command::Savepoint {
                dir: dir.into(),
                stop: true,
            },
            _ if line.is_empty() => continue,
            _ => Command::Unknown(line.to_string()),
        };
        if tx.send(cmd).is_err() {
            return;
        }
    }
    // The runner is gone: stop, as after a crash.
    let _ = tx.send(Command::Cancel);
}

/// `config` with the runner's settings applied when this process runs under a runner
/// (see [`ChildContext::configure`]), unchanged otherwise.
///
/// # Errors
/// As [`ChildContext::from_env`] and [`ChildContext::configure`].
pub fn job_config(mut config: JobConfig) -> Result<JobConfig, RunnerError> {
    if let Some(ctx) = ChildContext::from_env()? {
        ctx.configure(&mut config)?;
    }
    Ok(config)
}

/// Runs the job: under a runner, supervised ([`ChildContext::supervise`]; `Ok(None)`
/// when the runner canceled it); otherwise as [`StreamEnvironment::execute`].
///
/// # Errors
/// [`RunnerError::Engine`] when the job fails; as [`ChildContext::from_env`].
pub fn execute(env: &StreamEnvironment, name: &str) -> Result<Option<JobResult>, RunnerError> {
    match ChildContext::from_env()? {
        Some(ctx) => {
            let metrics = JobMetrics::default();
            let name = ctx.job_name.as_deref().unwrap_or(name);
            let job = env
                .start_with_metrics(name, metrics.clone())
                .map_err(RunnerError::Engine)?;
            ctx.supervise(job, &metrics)
        }
        None => env.execute(name).map(Some).map_err(RunnerError::Engine),
    }
}
