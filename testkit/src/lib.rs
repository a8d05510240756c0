//! brook's shared test helpers, used by the workspace's tests only (not published).
//! One copy of each helper: tests import them from here instead of pasting their own.

pub mod binary;
#[cfg(feature = "broker")]
pub mod broker;
pub mod browser;
pub mod child_lines;
#[cfg(feature = "log")]
pub mod consumed;
pub mod files;
#[cfg(feature = "log")]
pub mod future_segment;
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "log")]
pub mod log_job;
pub mod metrics;
pub mod operator;
pub mod process;
pub mod runner;
pub mod tmpfs;
#[cfg(feature = "broker")]
pub mod wire;
