//! The dashboard of one `brook run` (`--ui ADDR`): its job from the process's live
//! metrics, served from a thread of its own. The process prints a one-time login link
//! at the start. For more links (`brook ui JOB --data-dir DIR`, once that one is used
//! or expired) it leaves its address and a random API token in
//! `<data-dir>/ui/<job id>.json` (mode 0600, removed when the run ends): whoever can
//! read the data directory can log in, as with the runner's token file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_engine::metrics::JobMetrics;

use super::{Dashboard, JobSource};
use crate::runner::api::{
    Attempt, JobDetail, JobState, JobSummary, RestartStrategy, RetainedCheckpoint,
};
use crate::runner::status::{now_ms, JobStatus, ProcessState};
use crate::runner::RunnerError;

/// The job of this process.
#[derive(Debug, Clone)]
pub struct LocalJob {
    /// Its id in the dashboard's URLs (the name's letters and digits).
    pub id: String,
    /// The job's name.
    pub name: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// The spec's default parallelism, if set.
    pub parallelism: Option<u32>,
    /// Where its checkpoints go (empty without checkpoints).
    pub checkpoint_dir: PathBuf,
    /// The checkpoint it restored, if any.
    pub restored_from: Option<PathBuf>,
    /// Its live metrics.
    pub metrics: JobMetrics,
}

impl LocalJob {
    /// A job named `name`, started now, with `metrics`.
    pub fn new(name: &str, metrics: JobMetrics) -> Self {
        LocalJob {
            id: crate::runner::supervisor::id_stem(name),
            name: name.to_string(),
            started_ms: now_ms(),
            parallelism: None,
            checkpoint_dir: PathBuf::new(),
            restored_from: None,
            metrics,
        }
    }

    fn detail(&self) -> JobDetail {
        let attempts = vec![Attempt {
            number: 1,
            started_ms: self.started_ms,
            ended_ms: None,
            pid: Some(std::process::id()),
            restored_from: self.restored_from.clone(),
            outcome: None,
            stderr_tail: None,
        }];
        JobDetail {
            summary: JobSummary {
                id: self.id.clone(),
                name: self.name.clone(),
                kind: "yaml".into(),
                // The dashboard lives as long as the job's process.
                state: JobState::Running,
                attempts: 1,
                submitted_ms: self.started_ms,
                last_failure: None,
            },
            parallelism: self.parallelism,
            restart: RestartStrategy::None,
            retained_checkpoints: RetainedCheckpoint::list(&self.checkpoint_dir, &attempts),
            latest_restored: self.restored_from.clone(),
            attempt_history: attempts,
            savepoints: Vec::new(),
            checkpoint_dir: self.checkpoint_dir.clone(),
            status: Some(JobStatus::from_metrics(
                &self.id,
                ProcessState::Running,
                &self.metrics,
            )),
        }
    }
}

impl JobSource for LocalJob {
    fn jobs(&self) -> Vec<JobDetail> {
        vec![self.detail()]
    }

    fn job(&self, id: &str) -> Option<JobDetail> {
        (id == self.id).then(|| self.detail())
    }
}

/// A running dashboard; it stops when dropped, and removes its file.
#[derive(Debug)]
pub struct LocalServer {
    /// Where it listens (with the port it got for port 0).
    pub addr: SocketAddr,
    /// The one-time login link to the job's page (`http://ADDR/ui/login?t=...`).
    pub link: String,
    /// Its [`LocalDashboard`] file.
    pub file: PathBuf,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // Best effort: a file left by a killed run names a dead address and a token
        // nothing accepts; the next run of the job replaces it.
        let _ = std::fs::remove_file(&self.file);
    }
}

/// What `<data-dir>/ui/<job id>.json` holds: where a `brook run --ui` dashboard
/// listens and the API token that asks it for login links (`POST /ui/links`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LocalDashboard {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The token for `Authorization: Bearer`.
    pub token: String,
}

/// The file of job `id`'s `brook run --ui` dashboard in `data_dir`.
pub fn local_dashboard_file(data_dir: &Path, id: &str) -> PathBuf {
    data_dir.join("ui").join(format!("{id}.json"))
}

/// The dashboards of `brook run --ui` that left their file in `data_dir`, as (job id,
/// file contents), by id.
pub fn local_dashboards(data_dir: &Path) -> Vec<(String, LocalDashboard)> {
    let mut found: Vec<(String, LocalDashboard)> = std::fs::read_dir(data_dir.join("ui"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_suffix(".json")?.to_string();
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((id, serde_json::from_str(&text).ok()?))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Serves the dashboard of `job` on `addr` (loopback only) from a background thread,
/// and leaves its address and token for `brook ui` in `data_dir`
/// ([`local_dashboard_file`]).
///
/// # Errors
/// [`RunnerError::Invalid`] for an address other than loopback (the dashboard has
/// no TLS: reach it from elsewhere through an SSH tunnel); [`RunnerError::Io`] when
/// the address cannot be bound, the file not written or the thread not started.
pub fn serve_local(
    addr: SocketAddr,
    job: LocalJob,
    data_dir: &Path,
) -> Result<LocalServer, RunnerError> {
    if !addr.ip().is_loopback() {
        return Err(RunnerError::Invalid(format!(
            "--ui {addr}: the dashboard of brook run listens on loopback only (127.0.0.1:PORT); reach it from another machine through an SSH tunnel, or run the job under `brook runner`"
        )));
    }
    let io = |source| RunnerError::Io {
        path: PathBuf::from(format!("--ui {addr}")),
        source,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let id = job.id.clone();
    // A random API token, told only through the owner-only file: it asks for login
    // links (`brook ui`), and opens the pages as a session does.
    let token = crate::runner::token::generate()?;
    let file = local_dashboard_file(data_dir, &id);
    let told = serde_json::to_vec(&LocalDashboard {
        url: format!("http://{addr}"),
        token: token.clone(),
    })
    .map_err(|e| RunnerError::Invalid(format!("the dashboard's file: {e}")))?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|source| RunnerError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    crate::runner::token::write_private(&file, &told)?;
    let dashboard = Dashboard::new(Arc::new(job), addr, Arc::from(token), None, None);
    let link = format!(
        "http://{addr}{}",
        dashboard
            .new_link(&super::LinkRequest {
                job: Some(id.clone()),
                topics: false,
            })?
            .path
    );
    let router = dashboard.router().merge(dashboard.links_router());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("brook-ui".into())
        .spawn(move || {
            rt.block_on(async move {
                let watch = tokio::spawn(Arc::clone(&dashboard).watch());
                let server = axum::serve(listener, router).with_graceful_shutdown(async move {
                    let _ = rx.await;
                });
                if let Err(e) = server.await {
                    tracing::warn!(error = %e, "the dashboard failed");
                }
                watch.abort();
            })
        })
        .map_err(io)?;
    Ok(LocalServer {
        addr,
        link,
        file,
        _shutdown: tx,
    })
}
