//! The dashboard of one `brook run` (`--ui ADDR`): its job from the process's live
//! metrics, served from a thread of its own. The process prints a one-time login link
//! at the start; the link is the only way in (no API token exists here).

use std::net::SocketAddr;
use std::path::PathBuf;
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

/// A running dashboard; it stops when dropped.
#[derive(Debug)]
pub struct LocalServer {
    /// Where it listens (with the port it got for port 0).
    pub addr: SocketAddr,
    /// The one-time login link to the job's page (`http://ADDR/ui/login?t=...`).
    pub link: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Serves the dashboard of `job` on `addr` (loopback only) from a background thread.
///
/// # Errors
/// [`RunnerError::Invalid`] for an address other than loopback (the dashboard has
/// no TLS: reach it from elsewhere through an SSH tunnel); [`RunnerError::Io`] when
/// the address cannot be bound or the thread not started.
pub fn serve_local(addr: SocketAddr, job: LocalJob) -> Result<LocalServer, RunnerError> {
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
    // No API token here: a random one no one is told, so only a session gets in.
    let token: Arc<str> = Arc::from(crate::runner::token::generate()?);
    let dashboard = Dashboard::new(Arc::new(job), addr, token, None, None);
    let link = format!(
        "http://{addr}{}",
        dashboard
            .new_link(&super::LinkRequest {
                job: Some(id.clone()),
                topics: false,
            })?
            .path
    );
    let router = dashboard.router();
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
        _shutdown: tx,
    })
}
