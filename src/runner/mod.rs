//! The runner: a long-running service that runs submitted jobs as supervised child
//! processes, restarts failed ones from their latest checkpoint, and keeps its state
//! in its data directory so that a restarted runner picks its jobs up again.
//!
//! - [`child`]: the contract with a job process (environment variables, commands on
//!   stdin, the status file), and the two calls a builder-API binary makes;
//! - [`status`]: the status a job process reports;
//! - [`api`]: the HTTP API's bodies, job states and restart strategies;
//! - [`client`]: an HTTP client of the API (used by `brook submit`, `brook jobs`, ...);
//! - [`lock`]: the per-process file locks (the runner's, each job process's);
//! - [`serve`]: the service itself (`brook runner`), which admits a request only with
//!   the token, the runner's own `Host`, no foreign `Origin` and a JSON body.
//!
//! Layout of the data directory: `<data-dir>/runner/lock` (held by the runner),
//! `<data-dir>/runner/address` (where it listens), `<data-dir>/runner/token` (the
//! token it made at its first start, mode 0600; see [`token_file`]), and per job
//! `<data-dir>/runner/jobs/<id>/`: `job.json` (the job, its state, attempts and
//! failures; replaced atomically), `job.yaml` (the spec's copy), `checkpoints/`,
//! `savepoints/`, `state/`, `status.json`, `stdout.log`, `stderr.log`.

pub mod api;
pub mod child;
pub mod client;
pub(crate) mod guard;
pub mod lock;
mod service;
pub mod status;
pub(crate) mod supervisor;
pub(crate) mod token;

use std::path::PathBuf;

pub use child::{execute, job_config, ChildContext};
pub use service::{serve, RunnerConfig};
pub use token::{read_token, token_file, ENV_TOKEN};

/// Errors of the runner, its clients and job processes.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// I/O on a file of the runner.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bad input: a malformed name, id, setting or request.
    #[error("{0}")]
    Invalid(String),
    /// No job with this id.
    #[error("no job {0}")]
    NotFound(String),
    /// The job is not in a state that allows the request.
    #[error("{0}")]
    Conflict(String),
    /// A request without the right token.
    #[error("missing or wrong token: set BROOK_RUNNER_TOKEN, or give the runner's --data-dir (its token is in <data-dir>/runner/token)")]
    Unauthorized,
    /// A checkpoint or savepoint cannot be restored.
    #[error("cannot restore {path}: {message}")]
    Restore {
        /// Its directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// JSON that cannot be written or read.
    #[error("JSON: {0}")]
    Json(serde_json::Error),
    /// The job failed.
    #[error(transparent)]
    Engine(brook_engine::EngineError),
    /// The runner cannot be reached or answered with an error.
    #[error("{0}")]
    Http(String),
    /// The broker serving the log cannot start or stopped.
    #[error("serving the log: {0}")]
    Broker(brook_broker::BrokerError),
    /// The log the runner serves cannot be opened or closed.
    #[error("the log: {0}")]
    Log(brook_log::LogError),
}
