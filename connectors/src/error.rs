//! Errors of the connectors, naming the file, topic or setting at fault.

use std::io;
use std::path::PathBuf;

use brook_core::operator::OperatorError;
use brook_log::LogError;
use thiserror::Error;

/// What went wrong in a connector (other than a bad record, which is an
/// [`OperatorError::BadRecord`] with its position).
#[derive(Debug, Error)]
pub enum ConnectorError {
    /// A file-system operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`open`, `read`, `write`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// An operation on the embedded log failed.
    #[error("{context}: {source}")]
    Log {
        /// What was being done, naming the topic (and partition).
        context: String,
        /// The log's error.
        source: LogError,
    },
    /// A setting is invalid; `field` names it as the builder method does.
    #[error("invalid {field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
}

impl ConnectorError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        ConnectorError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn log(context: impl Into<String>, source: LogError) -> Self {
        ConnectorError::Log {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        ConnectorError::Config {
            field,
            reason: reason.into(),
        }
    }
}

impl From<ConnectorError> for OperatorError {
    fn from(e: ConnectorError) -> Self {
        OperatorError::other(e)
    }
}
