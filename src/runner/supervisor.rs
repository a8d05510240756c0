//! The runner's state (one `job.json` per job) and the supervision of job processes:
//! start, watch, cancel, restart by the job's strategy.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use super::api::{
    Attempt, JobDetail, JobKind, JobState, JobSummary, RestartStrategy, SubmitRequest,
};
use super::child::ChildContext;
use super::lock::ProcessLock;
use super::status::{now_ms, write_atomic, JobStatus, ProcessState, SavepointOutcome};
use super::RunnerError;

/// A job as the runner keeps it (`job.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) job: JobKind,
    pub(crate) parallelism: Option<u32>,
    pub(crate) restart: RestartStrategy,
    pub(crate) checkpoint_interval_ms: Option<i64>,
    pub(crate) state: JobState,
    pub(crate) submitted_ms: i64,
    pub(crate) attempts: Vec<Attempt>,
    pub(crate) savepoints: Vec<PathBuf>,
    /// A savepoint to restore when no newer checkpoint of the job exists.
    pub(crate) restore_from: Option<PathBuf>,
    /// Failures since the restart delay was last reset.
    #[serde(default)]
    pub(crate) consecutive_failures: u32,
}

impl JobRecord {
    fn summary(&self) -> JobSummary {
        JobSummary {
            id: self.id.clone(),
            name: self.name.clone(),
            kind: match self.job {
                JobKind::Yaml { .. } => "yaml".into(),
                JobKind::Bin { .. } => "bin".into(),
            },
            state: self.state,
            attempts: u32::try_from(self.attempts.len()).unwrap_or(u32::MAX),
            submitted_ms: self.submitted_ms,
            last_failure: self
                .attempts
                .iter()
                .rev()
                .filter_map(|a| a.outcome.as_ref())
                .find(|o| !matches!(o.as_str(), "finished" | "canceled" | "lost"))
                .cloned(),
        }
    }
}

/// Where the answer to a request goes.
pub(crate) type Reply = oneshot::Sender<Result<(), RunnerError>>;

/// Messages to a job's supervising task.
#[derive(Debug)]
pub(crate) enum Control {
    Cancel { savepoint: bool, reply: Reply },
}

/// The runner's jobs and their supervising tasks.
#[derive(Debug)]
pub(crate) struct Supervisor {
    pub(crate) data_dir: PathBuf,
    root: PathBuf,
    exe: PathBuf,
    jobs: Mutex<BTreeMap<String, JobRecord>>,
    controls: Mutex<BTreeMap<String, mpsc::Sender<Control>>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunnerError + '_ {
    move |source| RunnerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Lowercase letters, digits and '-' of a name, for ids.
pub(crate) fn id_stem(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    s = s.trim_matches('-').to_string();
    if s.is_empty() {
        s.push_str("job");
    }
    s
}

const STDERR_TAIL: u64 = 2_000;

/// The outcome of a process that could not open the data directory's log because
/// another process holds it (exit status [`super::child::EXIT_DATA_DIR_BUSY`]).
const BUSY: &str = "waiting: another process holds the data directory's log";

/// How often such a job tries again (ms).
const BUSY_RETRY_MS: u64 = 1_000;

impl Supervisor {
    /// Loads the jobs under `<data_dir>/runner/jobs`.
    pub(crate) fn load(data_dir: PathBuf, exe: PathBuf) -> Result<Arc<Self>, RunnerError> {
        let root = data_dir.join("runner");
        let jobs_dir = root.join("jobs");
        std::fs::create_dir_all(&jobs_dir).map_err(io(&jobs_dir))?;
        let mut jobs = BTreeMap::new();
        for entry in std::fs::read_dir(&jobs_dir).map_err(io(&jobs_dir))? {
            let entry = entry.map_err(io(&jobs_dir))?;
            let path = entry.path().join("job.json");
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            match serde_json::from_slice::<JobRecord>(&bytes) {
                Ok(r) if super::api::validate_job_id(&r.id).is_ok() => {
                    jobs.insert(r.id.clone(), r);
                }
                Ok(_) | Err(_) => {
                    tracing::warn!(path = %path.display(), "skipping an unreadable job record")
                }
            }
        }
        Ok(Arc::new(Supervisor {
            data_dir,
            root,
            exe,
            jobs: Mutex::new(jobs),
            controls: Mutex::new(BTreeMap::new()),
        }))
    }

    pub(crate) fn job_dir(&self, id: &str) -> PathBuf {
        self.root.join("jobs").join(id)
    }

    fn status_file(&self, id: &str) -> PathBuf {
        self.job_dir(id).join("status.json")
    }

    fn checkpoint_dir(&self, id: &str) -> PathBuf {
        self.job_dir(id).join("checkpoints")
    }

    fn savepoint_dir(&self, id: &str) -> PathBuf {
        self.job_dir(id).join("savepoints")
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, JobRecord>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, id: &str) -> Result<JobRecord, RunnerError> {
        self.jobs()
            .get(id)
            .cloned()
            .ok_or_else(|| RunnerError::NotFound(id.to_string()))
    }

    /// Changes a job and writes its `job.json`.
    fn update(&self, id: &str, f: impl FnOnce(&mut JobRecord)) -> Result<JobRecord, RunnerError> {
        let mut jobs = self.jobs();
        let r = jobs
            .get_mut(id)
            .ok_or_else(|| RunnerError::NotFound(id.to_string()))?;
        let mut next = r.clone();
        f(&mut next);
        // On disk first, under the lock: no one sees a state the file does not have.
        self.save(&next)?;
        *r = next.clone();
        Ok(next)
    }

    fn save(&self, r: &JobRecord) -> Result<(), RunnerError> {
        let json = serde_json::to_vec_pretty(r).map_err(RunnerError::Json)?;
        write_atomic(&self.job_dir(&r.id).join("job.json"), &json)
    }

    pub(crate) fn list(&self) -> Vec<JobSummary> {
        let mut v: Vec<_> = self.jobs().values().map(JobRecord::summary).collect();
        v.sort_by_key(|s| (s.submitted_ms, s.id.clone()));
        v
    }

    pub(crate) fn detail(&self, id: &str) -> Result<JobDetail, RunnerError> {
        let r = self.record(id)?;
        Ok(JobDetail {
            summary: r.summary(),
            parallelism: r.parallelism,
            restart: r.restart.clone(),
            attempt_history: r.attempts.clone(),
            savepoints: r.savepoints.clone(),
            checkpoint_dir: self.checkpoint_dir(id),
            status: JobStatus::read(&self.status_file(id)),
            retained_checkpoints: super::api::RetainedCheckpoint::list(
                &self.checkpoint_dir(id),
                &r.attempts,
            ),
            latest_restored: r
                .attempts
                .iter()
                .rev()
                .find_map(|a| a.restored_from.clone()),
        })
    }

    /// Every job's id, name and current status report (for `/metrics`).
    pub(crate) fn statuses(&self) -> Vec<(JobSummary, Option<JobStatus>)> {
        self.list()
            .into_iter()
            .map(|s| {
                let st = JobStatus::read(&self.status_file(&s.id));
                (s, st)
            })
            .collect()
    }

    /// A savepoint path a client sent, checked to be a directory inside the data
    /// directory.
    fn checked_savepoint(&self, path: &Path) -> Result<PathBuf, RunnerError> {
        let bad = |m: &str| RunnerError::Invalid(format!("savepoint {}: {m}", path.display()));
        let canon = path.canonicalize().map_err(|_| bad("no such directory"))?;
        let data = self.data_dir.canonicalize().map_err(io(&self.data_dir))?;
        if !canon.starts_with(&data) {
            return Err(bad("must be inside the runner's data directory"));
        }
        if !canon.join("_metadata").is_file() {
            return Err(bad("not a complete checkpoint or savepoint (no _metadata)"));
        }
        Ok(canon)
    }

    /// Registers a new job and starts it.
    pub(crate) fn submit(self: &Arc<Self>, req: SubmitRequest) -> Result<JobDetail, RunnerError> {
        let name = match (&req.name, &req.job) {
            (Some(n), _) => n.clone(),
            // Parsed as `brook run` parses it, so a broken spec gets the same message.
            (None, JobKind::Yaml { spec, .. }) => {
                crate::spec::parse(spec)
                    .map_err(|e| RunnerError::Invalid(format!("invalid job spec: {e}")))?
                    .name
            }
            (None, JobKind::Bin { path, .. }) => path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        super::api::validate_job_name(&name)?;
        if req.parallelism == Some(0) {
            return Err(RunnerError::Invalid(
                "parallelism must be at least 1".into(),
            ));
        }
        let restart = req.restart.clone().unwrap_or_default();
        restart.validate()?;
        let checkpoint_interval_ms = req
            .checkpoint_interval
            .as_deref()
            .map(|t| {
                brook_core::config::parse_duration_ms(t)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| {
                        RunnerError::Invalid(format!(
                            "checkpoint_interval {t:?}: not a positive duration"
                        ))
                    })
            })
            .transpose()?;
        match &req.job {
            JobKind::Yaml { spec, base_dir } => {
                if !base_dir.is_absolute() {
                    return Err(RunnerError::Invalid("base_dir must be absolute".into()));
                }
                // Checked as `brook run` checks it (fields, expressions, files), so a
                // bad spec is refused now rather than failing its restarts.
                let parsed = crate::spec::parse(spec)
                    .map_err(|e| RunnerError::Invalid(format!("invalid job spec: {e}")))?;
                let valid = crate::spec::validate(crate::spec::resolve_paths(parsed, base_dir))
                    .map_err(|e| RunnerError::Invalid(format!("invalid job spec: {e}")))?;
                if valid.group_source().is_some() {
                    return Err(RunnerError::Invalid(
                        "a job with assignment: group does not run under the runner yet: start `brook run --checkpoint-dir <shared dir>` on each machine".into(),
                    ));
                }
            }
            JobKind::Bin { path, .. } => {
                if !path.is_absolute() || !path.is_file() {
                    return Err(RunnerError::Invalid(format!(
                        "binary {}: not an absolute path of a file",
                        path.display()
                    )));
                }
                let mode = std::fs::metadata(path).map_or(0, |m| {
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions())
                });
                if mode & 0o111 == 0 {
                    return Err(RunnerError::Invalid(format!(
                        "binary {}: not executable",
                        path.display()
                    )));
                }
            }
        }
        let restore_from = req
            .from_savepoint
            .as_deref()
            .map(|p| self.checked_savepoint(p))
            .transpose()?;
        let id = {
            let jobs = self.jobs();
            self.check_name_free(&jobs, &name, None)?;
            check_outputs_free(&jobs, &req.job, None)?;
            let stem = id_stem(&name);
            let n = jobs.len() + 1;
            let mut id = format!("{stem}-{n}");
            let mut k = n;
            while jobs.contains_key(&id) || self.job_dir(&id).exists() {
                k += 1;
                id = format!("{stem}-{k}");
            }
            id
        };
        let dir = self.job_dir(&id);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        if let JobKind::Yaml { spec, .. } = &req.job {
            let p = dir.join("job.yaml");
            std::fs::write(&p, spec).map_err(io(&p))?;
        }
        let record = JobRecord {
            id: id.clone(),
            name,
            job: req.job,
            parallelism: req.parallelism,
            restart,
            checkpoint_interval_ms,
            state: JobState::Running,
            submitted_ms: now_ms(),
            attempts: Vec::new(),
            savepoints: Vec::new(),
            restore_from,
            consecutive_failures: 0,
        };
        self.save(&record)?;
        tracing::info!(job = %id, name = %record.name, kind = %record.summary().kind, "job submitted");
        self.jobs().insert(id.clone(), record);
        self.start_supervising(&id);
        self.detail(&id)
    }

    /// Two live jobs of one name would share transactional ids of their log sinks
    /// (`<job>.<sink>.<subtask>`) and fence each other's commits: one at a time.
    fn check_name_free(
        &self,
        jobs: &BTreeMap<String, JobRecord>,
        name: &str,
        except: Option<&str>,
    ) -> Result<(), RunnerError> {
        match jobs
            .values()
            .find(|r| r.name == name && !r.state.is_terminal() && Some(r.id.as_str()) != except)
        {
            Some(other) => Err(RunnerError::Conflict(format!(
                "job {} of the same name {name:?} is {}: cancel it or choose another --name",
                other.id, other.state
            ))),
            None => Ok(()),
        }
    }

    /// Starts the jobs a previous runner left running.
    pub(crate) fn recover(self: &Arc<Self>) {
        let ids: Vec<String> = self
            .jobs()
            .values()
            .filter(|r| !r.state.is_terminal())
            .map(|r| r.id.clone())
            .collect();
        for id in ids {
            let _ = self.update(&id, |r| {
                if let Some(a) = r.attempts.last_mut() {
                    if a.ended_ms.is_none() {
                        a.ended_ms = Some(now_ms());
                        a.outcome = Some("lost".into());
                    }
                }
            });
            tracing::info!(job = %id, "resuming a job of the previous runner");
            self.start_supervising(&id);
        }
    }

    fn start_supervising(self: &Arc<Self>, id: &str) {
        let (tx, rx) = mpsc::channel(4);
        self.controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), tx);
        let (me, id) = (Arc::clone(self), id.to_string());
        tokio::spawn(async move {
            me.supervise(&id, rx).await;
            me.controls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        });
    }

    /// Cancels a job, with a savepoint first if asked.
    pub(crate) async fn cancel(&self, id: &str, savepoint: bool) -> Result<JobDetail, RunnerError> {
        let r = self.record(id)?;
        if r.state.is_terminal() {
            return Err(RunnerError::Conflict(format!(
                "job {id} is {}: nothing to cancel",
                r.state
            )));
        }
        let tx = self
            .controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| RunnerError::Conflict(format!("job {id} is ending")))?;
        tracing::info!(job = %id, savepoint, "cancel requested");
        let (reply, rx) = oneshot::channel();
        tx.send(Control::Cancel { savepoint, reply })
            .await
            .map_err(|_| RunnerError::Conflict(format!("job {id} is ending")))?;
        rx.await
            .map_err(|_| RunnerError::Conflict(format!("job {id} ended before the cancel")))??;
        self.detail(id)
    }

    /// Starts a canceled or failed job again, from `savepoint` or its newest savepoint
    /// or checkpoint.
    pub(crate) fn resume(
        self: &Arc<Self>,
        id: &str,
        savepoint: Option<&Path>,
    ) -> Result<JobDetail, RunnerError> {
        let r = self.record(id)?;
        if !matches!(r.state, JobState::Canceled | JobState::Failed) {
            return Err(RunnerError::Conflict(format!(
                "job {id} is {}: only canceled or failed jobs resume",
                r.state
            )));
        }
        self.check_name_free(&self.jobs(), &r.name, Some(id))?;
        check_outputs_free(&self.jobs(), &r.job, Some(id))?;
        let explicit = savepoint.map(|p| self.checked_savepoint(p)).transpose()?;
        if explicit.is_some() {
            // Checkpoints of the run after that savepoint must not win over it.
            let cp = self.checkpoint_dir(id);
            let _ = std::fs::remove_dir_all(&cp);
        }
        self.update(id, |r| {
            if let Some(p) = explicit {
                r.restore_from = Some(p);
            } else if let Some(p) = r.savepoints.last() {
                r.restore_from = Some(p.clone());
            }
            r.state = JobState::Running;
            r.consecutive_failures = 0;
        })?;
        tracing::info!(job = %id, "job resumed");
        self.start_supervising(id);
        self.detail(id)
    }

    /// The newest complete checkpoint of the job, or its savepoint to restore when
    /// that is newer (or there is no checkpoint).
    fn restore_point(&self, r: &JobRecord) -> Option<PathBuf> {
        let cp = brook_engine::latest_complete(&self.checkpoint_dir(&r.id)).ok();
        let sp = r
            .restore_from
            .as_ref()
            .and_then(|p| brook_engine::RestoredCheckpoint::load(p).ok());
        match (cp, sp) {
            (Some(c), Some(s)) if s.id > c.id => Some(s.path.clone()),
            (Some(c), _) => Some(c.path.clone()),
            (None, Some(s)) => Some(s.path.clone()),
            (None, None) => None,
        }
    }

    /// Waits until no process of the job holds its lock (one left by a runner that
    /// went away stops when its stdin closes).
    async fn wait_for_lock(&self, id: &str) {
        let path = ChildContext::lock_file(&self.status_file(id));
        for i in 0..600 {
            if !ProcessLock::is_held(&path) {
                return;
            }
            if i == 0 {
                tracing::info!(job = %id, "waiting for the job's previous process to stop");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!(job = %id, "the job's previous process still holds its lock after 60 s");
    }

    fn command(&self, r: &JobRecord, restore: Option<PathBuf>) -> tokio::process::Command {
        let dir = self.job_dir(&r.id);
        let ctx = ChildContext {
            job_id: r.id.clone(),
            job_name: Some(r.name.clone()),
            data_dir: self.data_dir.clone(),
            checkpoint_dir: self.checkpoint_dir(&r.id),
            state_dir: dir.join("state"),
            status_file: self.status_file(&r.id),
            restore,
            parallelism: r.parallelism,
            checkpoint_interval_ms: r
                .checkpoint_interval_ms
                .unwrap_or(super::child::DEFAULT_CHECKPOINT_INTERVAL_MS),
        };
        let mut cmd = match &r.job {
            JobKind::Yaml { base_dir, .. } => {
                let mut c = tokio::process::Command::new(&self.exe);
                c.arg("--data-dir")
                    .arg(&self.data_dir)
                    .arg("run")
                    .arg("--base-dir")
                    .arg(base_dir);
                if let Some(p) = r.parallelism {
                    c.arg("--parallelism").arg(p.to_string());
                }
                // The job runs under the runner's name for it (see ENV_JOB_NAME).
                // Quoted: a name such as `123` or `true` stays a string.
                c.arg("--set").arg(format!("name='{}'", r.name));
                c.arg(dir.join("job.yaml"));
                c
            }
            JobKind::Bin { path, args } => {
                let mut c = tokio::process::Command::new(path);
                c.args(args);
                c
            }
        };
        // The token is the runner's, not the job's.
        cmd.env_remove(super::token::ENV_TOKEN);
        cmd.envs(ctx.to_env());
        cmd.current_dir(&dir);
        cmd
    }

    fn open_log(path: &Path) -> Result<(std::fs::File, u64), RunnerError> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        let len = f.metadata().map_err(io(path))?.len();
        Ok((f, len))
    }

    fn stderr_tail(path: &Path, from: u64) -> Option<String> {
        let mut f = std::fs::File::open(path).ok()?;
        let len = f.metadata().ok()?.len();
        let start = from.max(len.saturating_sub(STDERR_TAIL));
        f.seek(SeekFrom::Start(start)).ok()?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf).trim().to_string();
        (!text.is_empty()).then_some(text)
    }

    /// Runs the job's processes until it finishes, fails for good or is canceled.
    async fn supervise(self: &Arc<Self>, id: &str, mut control: mpsc::Receiver<Control>) {
        loop {
            self.wait_for_lock(id).await;
            let Ok(r) = self.record(id) else { return };
            let restore = self.restore_point(&r);
            let dir = self.job_dir(id);
            let started = now_ms();
            let waited = r.attempts.last().and_then(|a| a.outcome.as_deref()) == Some(BUSY);
            let number = u32::try_from(r.attempts.len() + usize::from(!waited)).unwrap_or(u32::MAX);
            let _ = std::fs::remove_file(self.status_file(id));
            let spawned = (|| {
                let (out, _) = Self::open_log(&dir.join("stdout.log"))?;
                let (err, err_from) = Self::open_log(&dir.join("stderr.log"))?;
                let mut cmd = self.command(&r, restore.clone());
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::from(out))
                    .stderr(Stdio::from(err));
                let child = cmd.spawn().map_err(|source| RunnerError::Io {
                    path: match &r.job {
                        JobKind::Bin { path, .. } => path.clone(),
                        JobKind::Yaml { .. } => self.exe.clone(),
                    },
                    source,
                })?;
                Ok::<_, RunnerError>((child, err_from))
            })();
            let attempt = Attempt {
                number,
                started_ms: started,
                ended_ms: None,
                pid: spawned.as_ref().ok().and_then(|(c, _)| c.id()),
                restored_from: restore.clone(),
                outcome: None,
                stderr_tail: None,
            };
            let _ = self.update(id, |r| {
                // Waiting for the data directory is one entry, however long it takes.
                if r.attempts.last().and_then(|a| a.outcome.as_deref()) == Some(BUSY) {
                    r.attempts.pop();
                }
                r.attempts.push(attempt);
                r.state = JobState::Running;
            });
            match &spawned {
                Ok((child, _)) => tracing::info!(
                    job = %id,
                    attempt = number,
                    pid = child.id().unwrap_or(0),
                    restored_from = %restore.as_deref().map_or("-".into(), |p| p.display().to_string()),
                    "job process started"
                ),
                Err(e) => {
                    tracing::warn!(job = %id, attempt = number, error = %e, "job process cannot start")
                }
            }
            let (outcome, tail, canceled) = match spawned {
                Err(e) => (format!("cannot start: {e}"), None, None),
                Ok((mut child, err_from)) => {
                    let (status, canceled) = self.watch(id, &mut child, &mut control).await;
                    let report = JobStatus::read(&self.status_file(id));
                    let (outcome, failed) =
                        describe_exit(status, report.as_ref(), canceled.is_some());
                    let tail = failed
                        .then(|| Self::stderr_tail(&dir.join("stderr.log"), err_from))
                        .flatten();
                    // A job that failed before its first status report (a bad topic,
                    // a failed restore) said why only on stderr.
                    let outcome = match tail.as_deref().and_then(last_error_line) {
                        Some(e) if report.as_ref().is_none_or(|r| r.error.is_none()) => {
                            format!("{outcome}: {e}")
                        }
                        _ => outcome,
                    };
                    (outcome, tail, canceled)
                }
            };
            let ended = now_ms();
            let finished = outcome == "finished";
            let was_canceled = outcome == "canceled";
            let busy = outcome == BUSY;
            let ran_ms = u64::try_from(ended - started).unwrap_or(0);
            let mut delay = None;
            let saved = self.update(id, |r| {
                if let Some(a) = r.attempts.last_mut() {
                    a.ended_ms = Some(ended);
                    a.outcome = Some(outcome.clone());
                    a.stderr_tail = tail.clone();
                }
                if let Some((Some(p), _)) = &canceled {
                    r.savepoints.push(p.clone());
                    r.restore_from = Some(p.clone());
                }
                if finished {
                    r.state = JobState::Finished;
                } else if was_canceled {
                    r.state = JobState::Canceled;
                } else if busy {
                    // Not the job's failure: try again soon, without using up restarts.
                    r.state = JobState::Restarting;
                    delay = Some(BUSY_RETRY_MS);
                } else {
                    if let RestartStrategy::ExponentialDelay { reset_ms, .. } = r.restart {
                        if ran_ms >= reset_ms {
                            r.consecutive_failures = 0;
                        }
                    }
                    r.consecutive_failures += 1;
                    delay = r.restart.delay_ms(r.consecutive_failures);
                    r.state = if delay.is_some() {
                        JobState::Restarting
                    } else {
                        JobState::Failed
                    };
                }
            });
            // The canceler hears back once the job's record says so.
            if let Some((_, reply)) = canceled {
                let _ = reply.send(saved.as_ref().map(|_| ()).map_err(|e| {
                    RunnerError::Conflict(format!(
                        "the job stopped, but its record was not saved: {e}"
                    ))
                }));
            }
            let Ok(saved) = saved else { return };
            log_end(id, number, &outcome, saved.state, delay);
            let Some(delay) = delay else { return };
            // Wait out the delay; a cancel ends the job now.
            let sleep = tokio::time::sleep(Duration::from_millis(delay));
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    msg = control.recv() => match msg {
                        Some(Control::Cancel { savepoint, reply }) => {
                            if savepoint {
                                let _ = reply.send(Err(RunnerError::Conflict(format!(
                                    "job {id} has no running process to take a savepoint of (it is restarting); cancel without a savepoint"
                                ))));
                                continue;
                            }
                            let _ = self.update(id, |r| r.state = JobState::Canceled);
                            tracing::info!(job = %id, "job canceled while waiting to restart");
                            let _ = reply.send(Ok(()));
                            return;
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// Waits for the process to end, obeying cancel requests. Returns its exit status
    /// and, when it was canceled, the savepoint taken (if one was asked for) and where
    /// to confirm the cancel.
    async fn watch(
        &self,
        id: &str,
        child: &mut tokio::process::Child,
        control: &mut mpsc::Receiver<Control>,
    ) -> (Option<ExitStatus>, Option<(Option<PathBuf>, Reply)>) {
        let mut stdin = child.stdin.take();
        // (with a savepoint, where to reply, when asked)
        let mut pending: Option<(bool, Reply, i64)> = None;
        let mut control_open = true;
        loop {
            tokio::select! {
                status = child.wait() => {
                    let status = status.ok();
                    let Some((savepoint, reply, _)) = pending.take() else {
                        return (status, None);
                    };
                    let report = JobStatus::read(&self.status_file(id));
                    let path = match report.as_ref().and_then(|s| s.savepoint.clone()) {
                        Some(SavepointOutcome::Written(p)) if savepoint => Some(p),
                        _ => None,
                    };
                    if savepoint && path.is_none() {
                        let _ = reply.send(Err(RunnerError::Conflict(
                            "the job process ended before its savepoint".into(),
                        )));
                        return (status, None);
                    }
                    return (status, Some((path, reply)));
                }
                msg = control.recv(), if control_open && pending.is_none() => {
                    let Some(Control::Cancel { savepoint, reply }) = msg else {
                        control_open = false;
                        continue;
                    };
                    let line = if savepoint {
                        let dir = self.savepoint_dir(id);
                        if let Err(e) = std::fs::create_dir_all(&dir) {
                            let _ = reply.send(Err(RunnerError::Io { path: dir, source: e }));
                            continue;
                        }
                        format!("stop {}\n", dir.display())
                    } else {
                        "cancel\n".to_string()
                    };
                    let sent = match stdin.as_mut() {
                        Some(s) => s.write_all(line.as_bytes()).await.is_ok() && s.flush().await.is_ok(),
                        None => false,
                    };
                    if !sent {
                        let _ = child.start_kill();
                    }
                    pending = Some((savepoint, reply, now_ms()));
                }
                _ = tokio::time::sleep(Duration::from_millis(100)), if pending.is_some() => {
                    // A stop with savepoint whose savepoint failed: the job goes on.
                    let Some((savepoint, _, asked)) = &pending else { continue };
                    let report = JobStatus::read(&self.status_file(id));
                    if *savepoint {
                        if let Some(SavepointOutcome::Failed(why)) = report.and_then(|s| s.savepoint) {
                            if let Some((_, reply, _)) = pending.take() {
                                let _ = reply.send(Err(RunnerError::Conflict(format!(
                                    "savepoint failed, the job goes on: {why}"
                                ))));
                            }
                            continue;
                        }
                    }
                    if now_ms() - asked > 120_000 {
                        // A process that does not stop is stopped.
                        let _ = child.start_kill();
                    }
                }
            }
        }
    }
}

/// Logs how a job process ended and what the job does next (`delay`: restart after
/// that many ms).
fn log_end(id: &str, attempt: u32, outcome: &str, state: JobState, delay: Option<u64>) {
    match (state, delay) {
        (JobState::Finished, _) => tracing::info!(job = %id, attempt, "job finished"),
        (JobState::Canceled, _) => tracing::info!(job = %id, attempt, "job canceled"),
        _ if outcome == BUSY => {
            tracing::info!(job = %id, attempt, "job waits: another process holds the data directory's log")
        }
        (_, Some(delay_ms)) => tracing::warn!(
            job = %id,
            attempt,
            cause = %outcome,
            delay_ms,
            "job process failed; restarting the job"
        ),
        (_, None) => tracing::error!(
            job = %id,
            attempt,
            cause = %outcome,
            "job process failed; the job failed (its restart strategy gave up)"
        ),
    }
}

/// The last `Error: ...` / `error: ...` line of a process's stderr (what `brook run`
/// and anyhow-based binaries print when they fail), without the prefix.
fn last_error_line(stderr: &str) -> Option<&str> {
    stderr.lines().rev().find_map(|l| {
        let l = l.trim();
        l.strip_prefix("Error: ")
            .or_else(|| l.strip_prefix("error: "))
            .map(str::trim)
            .filter(|e| !e.is_empty())
    })
}

/// How a process ended, and whether that is a failure.
fn describe_exit(
    status: Option<ExitStatus>,
    report: Option<&JobStatus>,
    canceled: bool,
) -> (String, bool) {
    let Some(status) = status else {
        return ("unknown exit".into(), true);
    };
    if status.success() {
        return match report.map(|r| r.state) {
            _ if canceled => ("canceled".into(), false),
            Some(ProcessState::Finished) | None => ("finished".into(), false),
            Some(s) => (format!("exited with status 0 while {s:?}"), true),
        };
    }
    if canceled {
        return ("canceled".into(), false);
    }
    if status.code() == Some(super::child::EXIT_DATA_DIR_BUSY) {
        return (BUSY.into(), false);
    }
    let mut what = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "exited".into(),
    };
    if let Some(e) = report.and_then(|r| r.error.as_ref()) {
        what.push_str(": ");
        what.push_str(e);
    }
    (what, true)
}

/// The files a YAML job writes (file sinks and its dead-letter file), resolved
/// against its base directory; none for binaries (their outputs are their own).
fn output_files(job: &JobKind) -> Vec<std::path::PathBuf> {
    let JobKind::Yaml { spec, base_dir } = job else {
        return Vec::new();
    };
    let Ok(parsed) = crate::spec::parse(spec) else {
        return Vec::new();
    };
    let spec = crate::spec::resolve_paths(parsed, base_dir);
    let mut files: Vec<std::path::PathBuf> = spec
        .sinks
        .iter()
        .filter_map(|s| match s {
            crate::spec::SinkSpec::File { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    files.extend(spec.dead_letter);
    files
}

/// Two live jobs writing one file would truncate each other's output (a restore cuts
/// a file back to its committed length): refused.
fn check_outputs_free(
    jobs: &BTreeMap<String, JobRecord>,
    job: &JobKind,
    except: Option<&str>,
) -> Result<(), RunnerError> {
    let mine = output_files(job);
    if mine.is_empty() {
        return Ok(());
    }
    for other in jobs
        .values()
        .filter(|r| !r.state.is_terminal() && Some(r.id.as_str()) != except)
    {
        if let Some(f) = output_files(&other.job).iter().find(|f| mine.contains(f)) {
            return Err(RunnerError::Conflict(format!(
                "job {} ({}) writes {} too: cancel it or write elsewhere",
                other.id,
                other.state,
                f.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::last_error_line;

    #[test]
    fn the_failure_reason_is_the_last_error_line_of_stderr() {
        let stderr = "2026 WARN something\nError: unknown topic \"nope\"\n";
        assert_eq!(last_error_line(stderr), Some("unknown topic \"nope\""));
        assert_eq!(
            last_error_line("error: bad spec\n\nCaused by: x"),
            Some("bad spec")
        );
        assert_eq!(last_error_line("WARN only\n"), None);
    }
}
