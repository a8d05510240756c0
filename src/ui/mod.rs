//! The web dashboard: server-rendered pages with a small script that polls JSON about
//! every second and draws the operator graph as SVG. Served by the runner at `/` on
//! its HTTP address (all its jobs) and by `brook run --ui ADDR` (its one job). Every
//! asset is inside the binary (`include_str!`): it works offline, without a CDN.
//!
//! | method and path | who | answer |
//! |---|---|---|
//! | `GET /ui/login?t=<link>` | anyone with a one-time link | 303 to the link's page, with the session cookie |
//! | `GET /` | session or token | the Jobs page |
//! | `GET /ui/jobs/{id}` | session or token | a job's page: graph, operators, watermarks, checkpoints, attempts |
//! | `GET /ui/assets/{app.js,style.css}` | session or token | the script and the style sheet |
//! | `GET /ui/api/jobs` | session or token | `[`[`JobDetail`]`]` |
//! | `GET /ui/api/jobs/{id}[?after=MS]` | session or token | [`JobView`]; with `after`, once the job's report is newer than `MS` (at most [`LONG_POLL_MS`] later) |
//! | `GET /ui/topics` | session or token | the Topics and groups page |
//! | `GET /ui/api/topics` | session or token | [`topics::LogView`] (empty lists without a log) |
//! | `POST /ui/api/jobs/{id}/cancel` | session + CSRF token | `{"savepoint": bool}` → [`JobDetail`]; the runner's `POST /jobs/{id}/cancel` |
//! | `POST /ui/api/jobs/{id}/resume` | session + CSRF token | `{}` → [`JobDetail`]; the runner's `POST /jobs/{id}/resume` |
//! | `POST /ui/links` | the server's API token only (the runner's; `brook run --ui`'s in `<data-dir>/ui/<job>.json`) | [`LinkBody`] (`brook ui`) |
//!
//! Security, as the runner's API (crate::runner::guard) plus a browser's login: every
//! request's `Host` must name the server and an `Origin` must be its own (403
//! otherwise; no CORS headers are ever sent); a page or data request needs the
//! session cookie or `Authorization: Bearer <token>` (401 otherwise). A browser gets in
//! through a one-time link ([`session`]): its token is exchanged once for a session id
//! in an `HttpOnly; SameSite=Strict` cookie and the redirect drops it from the address
//! bar; the API token is never in a URL, a page or a log (requests are logged by path,
//! never by query). The job page's actions (cancel, cancel with savepoint, resume;
//! the runner only: `brook run --ui` answers 404) change state: they need the session
//! cookie, an `Origin` of the server's own, the session's CSRF token (written into the
//! pages of the session, sent back in `X-CSRF-Token`) and a JSON body
//! ([`session::check_action`]); the API token alone does not do (the API has its own
//! routes). The API's POSTs take the bearer token only, never the cookie. Pages send a
//! Content-Security-Policy allowing the server's own script and style only.

pub mod holdback;
pub mod local;
mod pages;
pub mod session;
pub mod topics;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::runner::api::{ErrorBody, JobDetail};
use crate::runner::guard;
use crate::runner::status::now_ms;
use crate::runner::RunnerError;

pub use holdback::{gates, Gate, GateClock};
pub use session::Sessions;

/// The session cookie's name.
pub const COOKIE: &str = "brook_session";

/// Where the dashboard's jobs come from: the runner's supervisor, or the one job of
/// `brook run --ui`.
pub trait JobSource: Send + Sync + 'static {
    /// Every job, oldest first.
    fn jobs(&self) -> Vec<JobDetail>;
    /// One job; `None` when there is no such job.
    fn job(&self, id: &str) -> Option<JobDetail>;
}

/// The actions of the job page, where the server can change jobs (the runner).
pub trait JobControl: Send + Sync + 'static {
    /// Cancels job `id`, with a savepoint first when `savepoint`.
    fn cancel(
        &self,
        id: String,
        savepoint: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<JobDetail, RunnerError>> + Send>>;
    /// Resumes job `id` from its newest savepoint or checkpoint.
    ///
    /// # Errors
    /// As the runner's `POST /jobs/{id}/resume`.
    fn resume(&self, id: &str) -> Result<JobDetail, RunnerError>;
}

/// `GET /ui/api/jobs/{id}`: the job with the answer to "who holds the watermark back".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job, with its process's current report.
    pub job: JobDetail,
    /// Per operator downstream of a source, the splits holding its watermark back
    /// (empty without a report).
    pub gates: Vec<Gate>,
    /// When this answer was made (ms since the epoch), for uptimes.
    pub now_ms: i64,
}

/// `POST /ui/links`: a one-time login link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkBody {
    /// `/ui/login?t=<link token>`: open it once, on the server's address, within
    /// [`session::LINK_TTL_MS`].
    pub path: String,
}

/// `POST /ui/links`'s body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRequest {
    /// Open this job's page after the login (default: the Jobs page).
    #[serde(default)]
    pub job: Option<String>,
    /// Open the Topics and groups page instead (with no `job`).
    #[serde(default)]
    pub topics: bool,
}

/// The dashboard of one server.
pub struct Dashboard {
    source: Arc<dyn JobSource>,
    /// The server's address (with its port), for the `Host` check.
    listen: SocketAddr,
    /// The API token, also accepted instead of a session.
    token: Arc<str>,
    sessions: Mutex<Sessions>,
    /// The log the server holds, if any (the runner with `--broker-listen`).
    log: Option<topics::ServedLog>,
    /// Cancel and resume, where the server has them (the runner).
    control: Option<Arc<dyn JobControl>>,
    /// Per job: since when each split has held each operator back.
    clocks: Mutex<std::collections::HashMap<String, GateClock>>,
    /// The log's groups' lag over the last minutes.
    lag_history: Mutex<topics::LagHistory>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Dashboard")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Dashboard {
    /// The dashboard of the server listening on `listen` whose API token is `token`;
    /// `log` is the log it holds, for the Topics and groups page; `control` changes
    /// jobs for the job page's actions.
    pub fn new(
        source: Arc<dyn JobSource>,
        listen: SocketAddr,
        token: Arc<str>,
        log: Option<topics::ServedLog>,
        control: Option<Arc<dyn JobControl>>,
    ) -> Arc<Self> {
        Arc::new(Dashboard {
            source,
            listen,
            token,
            sessions: Mutex::new(Sessions::default()),
            log,
            control,
            clocks: Mutex::new(std::collections::HashMap::new()),
            lag_history: Mutex::new(topics::LagHistory::default()),
        })
    }

    /// Watches the jobs and the log while the server runs, once a second, so the
    /// pages can tell how long a split has held a watermark back and draw each
    /// group's lag over the last minutes, also for what happened before a page was
    /// opened. Runs until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(
            topics::LAG_SAMPLE_MS.unsigned_abs(),
        ));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let d = Arc::clone(&self);
            // The log's calls and the status reads take locks and files: not on the
            // server's threads.
            let done = tokio::task::spawn_blocking(move || {
                let jobs = d.source.jobs();
                for job in &jobs {
                    let _ = d.gates_of(job);
                }
                let mut clocks = d.clocks.lock().unwrap_or_else(|e| e.into_inner());
                clocks.retain(|id, _| jobs.iter().any(|j| &j.summary.id == id));
                drop(clocks);
                if let Some(served) = &d.log {
                    let lags = topics::group_lags(&served.log);
                    d.lag_history
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .record(now_ms(), lags);
                }
            })
            .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "the dashboard's watch failed");
            }
        }
    }

    /// The gates of `job`'s current report, each holder stamped with how long it has
    /// held its operator back.
    fn gates_of(&self, job: &JobDetail) -> Vec<Gate> {
        let Some(status) = job.status.as_ref() else {
            return Vec::new();
        };
        let mut g = gates(status);
        // An ended job's report is its last: nothing is held back any longer.
        if job.summary.state.is_terminal() {
            return g;
        }
        self.clocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(job.summary.id.clone())
            .or_default()
            .observe(now_ms(), &mut g);
        g
    }

    /// A new one-time login link leading to the page `to` asks for: a job's, the
    /// Topics and groups page, else the Jobs page.
    ///
    /// # Errors
    /// [`RunnerError::Invalid`] for a malformed job id, a job together with `topics`,
    /// or when the system has no randomness to give.
    pub fn new_link(&self, to: &LinkRequest) -> Result<LinkBody, RunnerError> {
        let target = match (&to.job, to.topics) {
            (Some(_), true) => {
                return Err(RunnerError::Invalid(
                    "a login link opens a job's page or the topics page, not both".into(),
                ))
            }
            (Some(id), false) => {
                crate::runner::api::validate_job_id(id)?;
                format!("/ui/jobs/{id}")
            }
            (None, true) => "/ui/topics".to_string(),
            (None, false) => "/".to_string(),
        };
        let token = crate::runner::token::generate()?;
        let path = format!("/ui/login?t={token}");
        self.sessions().add_link(token, target, now_ms());
        Ok(LinkBody { path })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `POST /ui/links` behind the API's guard (`Host`, `Origin`, the API token, a
    /// JSON body): new one-time links for `brook ui`. The runner routes it with its
    /// API; `brook run --ui` with this.
    pub fn links_router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/ui/links", post(links))
            .route_layer(middleware::from_fn_with_state(Arc::clone(self), api_guard))
            .with_state(Arc::clone(self))
    }

    /// The routes of the dashboard (see the [module docs](self)), with their guards;
    /// `POST /ui/links` is the caller's to route behind its API guard
    /// ([`Dashboard::links_router`] where it has none).
    pub fn router(self: &Arc<Self>) -> Router {
        let guarded = Router::new()
            .route("/", get(jobs_page))
            .route("/ui/jobs/{id}", get(job_page))
            .route("/ui/assets/{name}", get(asset))
            .route("/ui/api/jobs", get(jobs_json))
            .route("/ui/api/jobs/{id}", get(job_json))
            .route("/ui/api/jobs/{id}/{action}", post(job_action))
            .route("/ui/topics", get(topics_page))
            .route("/ui/api/topics", get(topics_json))
            .route_layer(middleware::from_fn_with_state(
                Arc::clone(self),
                session_guard,
            ));
        let login = Router::new().route("/ui/login", get(login)).route_layer(
            middleware::from_fn_with_state(Arc::clone(self), origin_guard),
        );
        guarded.merge(login).with_state(Arc::clone(self))
    }
}

fn refused(status: StatusCode, message: String) -> Response {
    (status, Json(ErrorBody { error: message })).into_response()
}

/// The session id in a `Cookie` header, if any.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
}

/// `Host` and `Origin` as the API's, then the session cookie or the API token.
async fn session_guard(State(d): State<Arc<Dashboard>>, req: Request, next: Next) -> Response {
    if let Err(r) = guard::admit_origin(req.uri(), req.headers(), d.listen) {
        tracing::warn!(path = %req.uri().path(), status = r.status.as_u16(), reason = %r.message, "dashboard request refused");
        return refused(r.status, r.message);
    }
    let by_session =
        session_cookie(req.headers()).is_some_and(|s| d.sessions().is_valid(&s, now_ms()));
    if !by_session && !guard::has_token(req.headers(), &d.token) {
        return refused(
            StatusCode::UNAUTHORIZED,
            "no session: open the link `brook ui` prints (a link works once)".into(),
        );
    }
    with_page_headers(next.run(req).await)
}

/// The API's guard, for [`Dashboard::links_router`].
async fn api_guard(State(d): State<Arc<Dashboard>>, req: Request, next: Next) -> Response {
    if let Err(r) = guard::admit(req.method(), req.uri(), req.headers(), d.listen, &d.token) {
        tracing::warn!(path = %req.uri().path(), status = r.status.as_u16(), reason = %r.message, "link request refused");
        return refused(r.status, r.message);
    }
    next.run(req).await
}

/// `POST /ui/links` of [`Dashboard::links_router`].
async fn links(State(d): State<Arc<Dashboard>>, bytes: axum::body::Bytes) -> Response {
    let req: LinkRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        LinkRequest::default()
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(r) => r,
            Err(e) => return refused(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
        }
    };
    if let Some(id) = &req.job {
        if d.source.job(id).is_none() {
            return refused(StatusCode::NOT_FOUND, format!("no job {id}"));
        }
    }
    match d.new_link(&req) {
        Ok(link) => Json(link).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `Host` and `Origin` only: the login's link token is its credential.
async fn origin_guard(State(d): State<Arc<Dashboard>>, req: Request, next: Next) -> Response {
    if let Err(r) = guard::admit_origin(req.uri(), req.headers(), d.listen) {
        // The path only: the query holds the link token.
        tracing::warn!(path = %req.uri().path(), status = r.status.as_u16(), reason = %r.message, "dashboard login refused");
        return refused(r.status, r.message);
    }
    with_page_headers(next.run(req).await)
}

/// Headers of every dashboard answer: the server's own script and style only, no
/// framing, no caching, no referrer (a page's address never leaves it).
fn with_page_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    );
    set(h, header::CACHE_CONTROL, "no-store");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    r
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    #[serde(default)]
    t: String,
}

/// Exchanges a one-time link for a session cookie and redirects to the link's page.
async fn login(State(d): State<Arc<Dashboard>>, Query(q): Query<LoginQuery>) -> Response {
    let (session, csrf) = match (
        crate::runner::token::generate(),
        crate::runner::token::generate(),
    ) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            return refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    };
    let Some(target) = d.sessions().redeem(&q.t, session.clone(), csrf, now_ms()) else {
        return refused(
            StatusCode::UNAUTHORIZED,
            "this login link is used or expired: run `brook ui` for a new one".into(),
        );
    };
    let cookie = cookie::Cookie::build((COOKIE, session))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::milliseconds(
            session::SESSION_TTL_MS,
        ))
        .build();
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, target)]).into_response();
    match HeaderValue::from_str(&cookie.to_string()) {
        Ok(v) => {
            r.headers_mut().insert(header::SET_COOKIE, v);
            r
        }
        Err(e) => refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn jobs_page() -> Response {
    pages::html(pages::jobs_page())
}

async fn topics_page() -> Response {
    pages::html(pages::topics_page())
}

async fn topics_json(State(d): State<Arc<Dashboard>>) -> Response {
    // The log's calls take its locks briefly and read no segment: fine on the
    // request's thread.
    let mut view = d.log.as_ref().map(topics::log_view).unwrap_or_default();
    d.lag_history
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .fill(&mut view, now_ms());
    Json(view).into_response()
}

async fn job_page(
    State(d): State<Arc<Dashboard>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    // The session's CSRF token goes into the page for its actions (none without a
    // session, or where the server has no actions).
    let csrf = match (&d.control, session_cookie(&headers)) {
        (Some(_), Some(s)) => d.sessions().csrf(&s, now_ms()).map(str::to_string),
        _ => None,
    };
    match d.source.job(&id) {
        Some(job) => pages::html(pages::job_page(
            &job.summary.id,
            &job.summary.name,
            csrf.as_deref(),
        )),
        None => refused(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

/// `POST /ui/api/jobs/{id}/{cancel,resume}`: the job page's actions, after
/// [`session::check_action`].
async fn job_action(
    State(d): State<Arc<Dashboard>>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(control) = d.control.clone() else {
        return refused(
            StatusCode::NOT_FOUND,
            "this server has no job actions (use the runner)".into(),
        );
    };
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let json = text("content-type")
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    let checked = {
        let sessions = d.sessions();
        let session = session_cookie(&headers);
        session::check_action(session::ActionRequest {
            session_csrf: session.as_deref().and_then(|s| sessions.csrf(s, now_ms())),
            given_csrf: text("x-csrf-token"),
            has_origin: headers.contains_key(header::ORIGIN),
            json,
        })
    };
    if let Err(r) = checked {
        tracing::warn!(%id, %action, status = r.status, reason = r.message, "dashboard action refused");
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::FORBIDDEN);
        return refused(status, r.message.into());
    }
    let done = match action.as_str() {
        "cancel" => match serde_json::from_slice::<crate::runner::api::CancelRequest>(&bytes) {
            Ok(req) => control.cancel(id.clone(), req.savepoint).await,
            Err(e) => Err(RunnerError::Invalid(format!("bad request body: {e}"))),
        },
        "resume" => control.resume(&id),
        other => {
            return refused(
                StatusCode::NOT_FOUND,
                format!("no action {other:?} (cancel, resume)"),
            )
        }
    };
    tracing::info!(%id, %action, ok = done.is_ok(), "dashboard action");
    match done {
        Ok(job) => Json(job).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn asset(UrlPath(name): UrlPath<String>) -> Response {
    match pages::asset(&name) {
        Some((mime, body)) => ([(header::CONTENT_TYPE, mime)], body).into_response(),
        None => refused(StatusCode::NOT_FOUND, format!("no asset {name}")),
    }
}

async fn jobs_json(State(d): State<Arc<Dashboard>>) -> Response {
    Json(d.source.jobs()).into_response()
}

/// `?after=<ms>` of `GET /ui/api/jobs/{id}`.
#[derive(Debug, Deserialize)]
struct AfterQuery {
    /// Answer once the job's report is newer than this (its `updated_ms`), or after
    /// [`LONG_POLL_MS`]: the page gets each new report as it lands (the job writes
    /// one every 500 ms), with one request waiting instead of many. A job that
    /// ended (finished, failed, canceled) is answered at once.
    #[serde(default)]
    after: Option<i64>,
}

/// The longest a `GET /ui/api/jobs/{id}?after=` waits for a newer report (ms).
pub const LONG_POLL_MS: u64 = 2_000;

async fn job_json(
    State(d): State<Arc<Dashboard>>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<AfterQuery>,
) -> Response {
    if let Some(after) = q.after {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(LONG_POLL_MS);
        loop {
            let d2 = Arc::clone(&d);
            let id2 = id.clone();
            // The supervisor reads the job's report file: not on the server's threads.
            // A job that ended writes no more reports: answered at once.
            let newer = tokio::task::spawn_blocking(move || {
                d2.source
                    .job(&id2)
                    .filter(|j| !j.summary.state.is_terminal())
                    .and_then(|j| j.status.map(|s| s.updated_ms))
                    .is_none_or(|t| t > after)
            })
            .await
            .unwrap_or(true);
            if newer || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    match d.source.job(&id) {
        Some(job) => {
            let gates = d.gates_of(&job);
            Json(JobView {
                job,
                gates,
                now_ms: now_ms(),
            })
            .into_response()
        }
        None => refused(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}
