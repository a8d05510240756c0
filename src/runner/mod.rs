//! The runner: a long-running service that runs submitted jobs as supervised child
//! processes, restarts failed ones from their latest checkpoint, and keeps its state
//! in its data directory so that a restarted runner picks its jobs up again.
//!
//! - [`child`]: the contract with a job process (environment variables, commands on
//!   stdin, the status file), and the two calls a builder-API binary makes;
//! - [`status`]: the status a job process reports;
//! - [`api`]: the HTTP API's bodies, job states and restart strategies;
//! - [`client`]: an HTTP client of the API (used by `brook submit`, `brook jobs`, ...);
//! - [`serve`]: the service itself (`brook runner`).
//!
//! Layout of the data directory: `<data-dir>/runner/lock` (held by the runner),
//! `<data-dir>/runner/address` (where it listens), and per job
//! `<data-dir>/runner/jobs/<id>/`: `job.json` (the job, its state, attempts and
//! failures; replaced atomically), `job.yaml` (the spec's copy), `checkpoints/`,
//! `savepoints/`, `state/`, `status.json`, `stdout.log`, `stderr.log`.

pub mod api;
pub mod child;
pub mod client;
mod service;
pub mod status;
mod supervisor;

use std::path::PathBuf;

pub use child::{execute, job_config, ChildContext};
pub use service::{serve, RunnerConfig, ENV_TOKEN};

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
    #[error("missing or wrong token (set BROOK_RUNNER_TOKEN)")]
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
}
