//! `brook runner`: the HTTP service (axum) over the supervisor.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use brook_broker::{address_file, write_address, BrokerConfig, Server};
use brook_log::{Log, LogOptions};

use super::api::{validate_job_id, CancelRequest, ErrorBody, ResumeRequest, SubmitRequest};
use super::lock::{LockError, ProcessLock};
use super::supervisor::Supervisor;
use super::token::ENV_TOKEN;
use super::RunnerError;

/// Settings of `brook runner`.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Where to listen; port 0 picks a free port (written to
    /// `<data-dir>/runner/address`).
    pub listen: SocketAddr,
    /// The data directory: the embedded log's, and the runner's state under
    /// `runner/`.
    pub data_dir: PathBuf,
    /// Required on every request as `Authorization: Bearer <token>`; must be given to
    /// listen on an address other than loopback. `None`: the token in
    /// `<data-dir>/runner/token`, made at the first start (see [`super::token_file`]).
    pub token: Option<String>,
    /// The `brook` executable that runs YAML jobs (`brook run`).
    pub exe: PathBuf,
    /// Serve the data directory's log over the Kafka protocol while the runner runs
    /// (`brook runner --broker-listen`): the runner holds the log, and its job
    /// processes (and any other client) go through this broker, so several jobs use
    /// the log at once. `None`: the runner does not open the log; its jobs take turns
    /// with it (a job waits while another process holds it).
    pub broker: Option<BrokerConfig>,
    /// How the runner opens the log it serves.
    pub log_options: LogOptions,
}

impl IntoResponse for RunnerError {
    fn into_response(self) -> Response {
        let status = match &self {
            RunnerError::Invalid(_) | RunnerError::Restore { .. } | RunnerError::Json(_) => {
                StatusCode::BAD_REQUEST
            }
            RunnerError::NotFound(_) => StatusCode::NOT_FOUND,
            RunnerError::Conflict(_) => StatusCode::CONFLICT,
            RunnerError::Unauthorized => StatusCode::UNAUTHORIZED,
            RunnerError::Io { .. }
            | RunnerError::Engine(_)
            | RunnerError::Http(_)
            | RunnerError::Broker(_)
            | RunnerError::Log(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (
            status,
            Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response()
    }
}

#[derive(Debug, Clone)]
struct AppState {
    supervisor: Arc<Supervisor>,
    /// The dashboard at `/` (crate::ui), for `POST /ui/links`.
    dashboard: Arc<crate::ui::Dashboard>,
    token: Arc<str>,
    /// The address the runner listens on (with the port it got), for the `Host` check.
    listen: SocketAddr,
    /// The log when the runner serves it (`--broker-listen`): its partitions' gauges
    /// go into `/metrics` (brook::log_metrics).
    log: Option<Log>,
}

/// Lets a request through only if [`super::guard::admit`] does.
async fn guard(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if let Err(r) = super::guard::admit(
        req.method(),
        req.uri(),
        req.headers(),
        app.listen,
        &app.token,
    ) {
        tracing::warn!(method = %req.method(), path = %req.uri().path(), status = r.status.as_u16(), reason = %r.message, "request refused");
        return (r.status, Json(ErrorBody { error: r.message })).into_response();
    }
    next.run(req).await
}

type ApiResult<T> = Result<T, RunnerError>;

/// A JSON body, with a 400 naming the problem when it does not parse.
fn body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> ApiResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| RunnerError::Invalid(format!("bad request body: {e}")))
}

/// `POST /ui/links` (`brook ui`): a one-time login link of the dashboard.
async fn ui_link(State(app): State<AppState>, bytes: axum::body::Bytes) -> ApiResult<Response> {
    let req: crate::ui::LinkRequest = body(&bytes)?;
    if let Some(id) = &req.job {
        // A link to a page that does not exist would only show an error.
        app.supervisor.detail(id)?;
    }
    Ok(Json(app.dashboard.new_link(&req)?).into_response())
}

/// The dashboard's actions are the API's: the same supervisor calls and checks.
impl crate::ui::JobControl for Arc<Supervisor> {
    fn cancel(
        &self,
        id: String,
        savepoint: bool,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<super::api::JobDetail, RunnerError>> + Send>,
    > {
        let s = Arc::clone(self);
        Box::pin(async move {
            validate_job_id(&id)?;
            Supervisor::cancel(&s, &id, savepoint).await
        })
    }

    fn resume(&self, id: &str) -> Result<super::api::JobDetail, RunnerError> {
        validate_job_id(id)?;
        Supervisor::resume(self, id, None)
    }
}

impl crate::ui::JobSource for Supervisor {
    fn jobs(&self) -> Vec<super::api::JobDetail> {
        self.list()
            .iter()
            .filter_map(|j| self.detail(&j.id).ok())
            .collect()
    }

    fn job(&self, id: &str) -> Option<super::api::JobDetail> {
        validate_job_id(id).ok()?;
        self.detail(id).ok()
    }
}

async fn submit(State(app): State<AppState>, bytes: axum::body::Bytes) -> ApiResult<Response> {
    let req: SubmitRequest = serde_json::from_slice(&bytes)
        .map_err(|e| RunnerError::Invalid(format!("bad request body: {e}")))?;
    let detail = app.supervisor.submit(req)?;
    Ok((StatusCode::CREATED, Json(detail)).into_response())
}

async fn list(State(app): State<AppState>) -> Response {
    Json(app.supervisor.list()).into_response()
}

async fn detail(State(app): State<AppState>, UrlPath(id): UrlPath<String>) -> ApiResult<Response> {
    validate_job_id(&id)?;
    Ok(Json(app.supervisor.detail(&id)?).into_response())
}

async fn cancel(
    State(app): State<AppState>,
    UrlPath(id): UrlPath<String>,
    bytes: axum::body::Bytes,
) -> ApiResult<Response> {
    validate_job_id(&id)?;
    let req: CancelRequest = body(&bytes)?;
    Ok(Json(app.supervisor.cancel(&id, req.savepoint).await?).into_response())
}

async fn resume(
    State(app): State<AppState>,
    UrlPath(id): UrlPath<String>,
    bytes: axum::body::Bytes,
) -> ApiResult<Response> {
    validate_job_id(&id)?;
    let req: ResumeRequest = body(&bytes)?;
    Ok(Json(app.supervisor.resume(&id, req.from_savepoint.as_deref())?).into_response())
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus text: per job its state and attempts, and from its process's report
/// the operators' and splits' metrics and checkpoint statistics, labelled `job`; when
/// the runner serves the log, its partitions' gauges (labelled `topic`, `partition`).
async fn metrics(State(app): State<AppState>) -> Response {
    let mut s = String::new();
    let jobs = app.supervisor.statuses();
    let mut series = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(s, "{name}{{{labels}}} {v}");
        }
    };
    let job_label = |id: &str| format!("job=\"{}\"", escape(id));
    series(
        "brook_job_up",
        "gauge",
        "1 when a process of the job runs",
        jobs.iter()
            .map(|(j, _)| {
                (
                    format!(
                        "{},name=\"{}\",state=\"{}\"",
                        job_label(&j.id),
                        escape(&j.name),
                        j.state
                    ),
                    f64::from(u8::from(j.state == super::api::JobState::Running)),
                )
            })
            .collect(),
    );
    series(
        "brook_job_attempts_total",
        "counter",
        "Processes started for the job",
        jobs.iter()
            .map(|(j, _)| (job_label(&j.id), f64::from(j.attempts)))
            .collect(),
    );
    let live: Vec<_> = jobs
        .iter()
        .filter_map(|(j, st)| st.as_ref().map(|st| (j, st)))
        .collect();
    type OpGet = fn(&super::status::OperatorStatus) -> Option<f64>;
    let ops: [(&str, &str, &str, OpGet); 6] = [
        (
            "brook_records_in_total",
            "counter",
            "Records received",
            |o| Some(o.records_in as f64),
        ),
        (
            "brook_records_out_total",
            "counter",
            "Records emitted",
            |o| Some(o.records_out as f64),
        ),
        (
            "brook_backpressure_seconds_total",
            "counter",
            "Time blocked sending downstream",
            |o| Some(o.backpressure_ms as f64 / 1e3),
        ),
        (
            "brook_busy_seconds_total",
            "counter",
            "Time spent processing",
            |o| Some(o.busy_ms as f64 / 1e3),
        ),
        (
            "brook_watermark_ms",
            "gauge",
            "Smallest watermark of the operator's subtasks (ms)",
            |o| o.watermark_ms.map(|w| w as f64),
        ),
        (
            "brook_late_records_total",
            "counter",
            "Records too late for their windows (dropped or sent to a late output)",
            |o| Some(o.late_records as f64),
        ),
    ];
    for (name, kind, help, get) in ops {
        let mut rows = Vec::new();
        for (j, st) in &live {
            for o in &st.operators {
                if let Some(v) = get(o) {
                    rows.push((
                        format!("{},operator=\"{}\"", job_label(&j.id), escape(&o.name)),
                        v,
                    ));
                }
            }
        }
        series(name, kind, help, rows);
    }
    // The splits' watermarks, labelled `idle` as `brook run --metrics-addr` labels
    // them: which split holds a window back, from /metrics alone; and the records
    // each split brought late.
    let (mut watermarks, mut late) = (Vec::new(), Vec::new());
    for (j, st) in &live {
        for sp in &st.splits {
            let labels = format!(
                "{},operator=\"{}\",subtask=\"{}\",split=\"{}\"",
                job_label(&j.id),
                escape(&sp.operator),
                sp.subtask,
                escape(&sp.split)
            );
            if let Some(w) = sp.watermark_ms {
                watermarks.push((format!("{labels},idle=\"{}\"", sp.idle), w as f64));
            }
            late.push((labels, sp.late_records as f64));
        }
    }
    series(
        "brook_split_watermark_ms",
        "gauge",
        "Watermark of a source split (ms)",
        watermarks,
    );
    series(
        "brook_split_late_records_total",
        "counter",
        "Records a source read at or behind their split's watermark",
        late,
    );
    // The hottest keys of keyed operators (brook_engine::hot_keys), one series per
    // rank: at most ten per operator, so the key's text as a label stays bounded.
    let (mut shares, mut counts) = (Vec::new(), Vec::new());
    for (j, st) in &live {
        for o in &st.operators {
            for (rank, k) in o.hot_keys.iter().enumerate() {
                let labels = format!(
                    "{},operator=\"{}\",rank=\"{}\",key=\"{}\",subtask=\"{}\"",
                    job_label(&j.id),
                    escape(&o.name),
                    rank + 1,
                    escape(&k.key),
                    k.subtask
                );
                shares.push((labels.clone(), k.share));
                counts.push((labels, k.records as f64));
            }
        }
    }
    series(
        "brook_hot_key_share",
        "gauge",
        "Share of the keyed operator's records of the last 30 to 60 s that one of its hottest keys had (estimated from a sample)",
        shares,
    );
    series(
        "brook_hot_key_records",
        "gauge",
        "Records of the last 30 to 60 s of one of the keyed operator's hottest keys (estimated from a sample)",
        counts,
    );
    type SplitGet = fn(&super::status::SplitStatus) -> Option<f64>;
    let splits: [(&str, &str, SplitGet); 2] = [
        (
            "brook_split_offset",
            "Next offset the source reads in the split",
            |sp| sp.offset.map(|o| o as f64),
        ),
        (
            "brook_split_lag",
            "Records left to read in the split",
            |sp| sp.lag.map(|l| l as f64),
        ),
    ];
    for (name, help, get) in splits {
        let mut rows = Vec::new();
        for (j, st) in &live {
            for sp in &st.splits {
                if let Some(v) = get(sp) {
                    rows.push((
                        format!(
                            "{},operator=\"{}\",split=\"{}\"",
                            job_label(&j.id),
                            escape(&sp.operator),
                            escape(&sp.split)
                        ),
                        v,
                    ));
                }
            }
        }
        series(name, "gauge", help, rows);
    }
    type CpGet = fn(&super::status::CheckpointStatus) -> Option<f64>;
    let cps: [(&str, &str, &str, CpGet); 4] = [
        (
            "brook_checkpoints_completed_total",
            "counter",
            "Checkpoints completed by the job's current process",
            |c| Some(c.completed as f64),
        ),
        (
            "brook_last_checkpoint_id",
            "gauge",
            "Id of the last completed checkpoint",
            |c| c.last_id.map(|v| v as f64),
        ),
        (
            "brook_last_checkpoint_duration_seconds",
            "gauge",
            "Duration of the last completed checkpoint",
            |c| c.last_duration_ms.map(|v| v as f64 / 1e3),
        ),
        (
            "brook_last_checkpoint_size_bytes",
            "gauge",
            "Size of the last completed checkpoint",
            |c| c.last_size_bytes.map(|v| v as f64),
        ),
    ];
    for (name, kind, help, get) in cps {
        let rows = live
            .iter()
            .filter_map(|(j, st)| get(&st.checkpoints).map(|v| (job_label(&j.id), v)))
            .collect();
        series(name, kind, help, rows);
    }
    if let Some(log) = &app.log {
        s.push_str(&crate::log_metrics::log_prometheus(log));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s).into_response()
}

/// Runs the runner until the process is stopped: takes the data directory's runner
/// lock, opens and serves the log (with [`RunnerConfig::broker`]: its address goes to
/// `<data-dir>/broker.addr` before any job starts), restarts the jobs a previous runner
/// left running, and serves the API.
///
/// # Errors
/// [`RunnerError::Invalid`] for a non-loopback address without a token, an empty
/// token, or a token file others may read; [`RunnerError::Conflict`] when another
/// runner uses the data directory, or another process holds its log;
/// [`RunnerError::Broker`] when the broker's address cannot be used;
/// [`RunnerError::Io`] when the directory or the address cannot be used.
pub async fn serve(config: RunnerConfig) -> Result<(), RunnerError> {
    if config.token.as_deref().is_some_and(str::is_empty) {
        return Err(RunnerError::Invalid("the token is empty".into()));
    }
    if !config.listen.ip().is_loopback() && config.token.is_none() {
        return Err(RunnerError::Invalid(format!(
            "listening on {} (not loopback) needs a token: set --token or {ENV_TOKEN}",
            config.listen
        )));
    }
    let root = config.data_dir.join("runner");
    std::fs::create_dir_all(&root).map_err(|source| RunnerError::Io {
        path: root.clone(),
        source,
    })?;
    let lock_path = root.join("lock");
    let lock = ProcessLock::try_acquire(&lock_path).map_err(|e| match e {
        LockError::Held { pid, .. } => RunnerError::Conflict(format!(
            "another runner uses {} ({} holds {})",
            config.data_dir.display(),
            super::lock::holder(pid),
            lock_path.display()
        )),
        LockError::Io { path, source } => RunnerError::Io { path, source },
    })?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| RunnerError::Io {
            path: PathBuf::from(config.listen.to_string()),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| RunnerError::Io {
        path: PathBuf::from(config.listen.to_string()),
        source,
    })?;
    // Before any job process starts: they find the broker from broker.addr.
    let broker = match &config.broker {
        Some(b) => Some(serve_log(b, &config).await?),
        None => None,
    };
    let token_file = super::token_file(&config.data_dir);
    let (token, told) = match config.token {
        Some(t) => (t, String::new()),
        None => (
            super::token::load_or_create(&token_file)?,
            format!(" (token in {})", token_file.display()),
        ),
    };
    let supervisor = Supervisor::load(config.data_dir.clone(), config.exe.clone())?;
    supervisor.recover();
    let token: Arc<str> = Arc::from(token);
    let dashboard = crate::ui::Dashboard::new(
        supervisor.clone(),
        addr,
        Arc::clone(&token),
        broker
            .as_ref()
            .map(|(server, log)| crate::ui::topics::ServedLog {
                log: log.clone(),
                groups: Some(server.groups()),
            }),
        Some(Arc::new(Arc::clone(&supervisor)) as Arc<dyn crate::ui::JobControl>),
    );
    // Stops with the runner's runtime.
    tokio::spawn(Arc::clone(&dashboard).watch());
    let app = AppState {
        supervisor,
        dashboard: Arc::clone(&dashboard),
        token,
        listen: addr,
        log: broker.as_ref().map(|(_, log)| log.clone()),
    };
    let router = Router::new()
        .route("/jobs", post(submit).get(list))
        .route("/jobs/{id}", get(detail))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/resume", post(resume))
        .route("/metrics", get(metrics))
        .route("/ui/links", post(ui_link))
        .route_layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
        // The dashboard has its own guard: the session cookie or the token.
        .merge(dashboard.router());
    super::status::write_atomic(&root.join("address"), addr.to_string().as_bytes())?;
    eprintln!("brook runner listening on http://{addr}{told}");
    let api = async {
        axum::serve(listener, router)
            .await
            .map_err(|source| RunnerError::Io {
                path: PathBuf::from(addr.to_string()),
                source,
            })
    };
    match broker {
        Some((server, log)) => {
            let served = tokio::select! {
                r = api => r,
                r = server.run() => r.map_err(RunnerError::Broker),
            };
            // The address is stale once the broker stops serving.
            let _ = std::fs::remove_file(address_file(&config.data_dir));
            log.close().map_err(RunnerError::Log)?;
            served?;
        }
        None => api.await?,
    }
    drop(lock);
    Ok(())
}

/// Opens the data directory's log (its lock: no other process may open it now) and
/// binds a broker on it at `broker.listen`, writing the address to
/// `<data-dir>/broker.addr`.
async fn serve_log(
    broker: &BrokerConfig,
    config: &RunnerConfig,
) -> Result<(Server, Log), RunnerError> {
    broker.validate().map_err(RunnerError::Broker)?;
    let log = Log::open(&config.data_dir, config.log_options.clone()).map_err(|e| match e {
        brook_log::LogError::Locked { .. } => RunnerError::Conflict(format!(
            "the runner serves the log of {} to its jobs, and another process holds it ({e}): \
             stop that process (brook broker, brook run) first",
            config.data_dir.display()
        )),
        e => RunnerError::Log(e),
    })?;
    let server = Server::bind(broker, log.clone())
        .await
        .map_err(RunnerError::Broker)?;
    let addr = server.local_addr();
    write_address(&config.data_dir, addr).map_err(|source| RunnerError::Io {
        path: address_file(&config.data_dir),
        source,
    })?;
    eprintln!(
        "brook runner serving the log of {} on {addr} (Kafka protocol)",
        config.data_dir.display()
    );
    Ok((server, log))
}
