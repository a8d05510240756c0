//! Errors of a job run.

use thiserror::Error;

/// Why a job failed.
#[derive(Debug, Error)]
pub enum EngineError {
    /// A stateful operator's keyed state backend could not be created.
    #[error("{operator}: cannot open its state backend: {message}")]
    StateBackend {
        /// The operator subtask.
        operator: String,
        /// What went wrong.
        message: String,
    },
    /// A task failed: an operator, source or sink returned an error or panicked.
    #[error("{task} failed: {message}")]
    Task {
        /// The operator and subtask, e.g. `map (subtask 2/4)`.
        task: String,
        /// What happened.
        message: String,
    },
    /// The job graph is invalid (named vertex, reason).
    #[error("invalid job graph: {0}")]
    InvalidGraph(String),
    /// A savepoint could not be taken.
    #[error("savepoint failed: {0}")]
    Savepoint(String),
    /// The job was cancelled.
    #[error("job cancelled")]
    Cancelled,
    /// Starting a task thread failed.
    #[error("cannot start task {task}: {source}")]
    Spawn {
        /// The task.
        task: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How a task ended badly; the first root cause wins over follow-on failures.
#[derive(Debug)]
pub(crate) enum TaskFailure {
    /// The task itself failed (root cause).
    Failed(EngineError),
    /// A neighbour disappeared (a follow-on of another task's failure or a cancel).
    Disconnected,
}

impl From<EngineError> for TaskFailure {
    fn from(e: EngineError) -> Self {
        TaskFailure::Failed(e)
    }
}

pub(crate) type TaskResult<T = ()> = Result<T, TaskFailure>;
