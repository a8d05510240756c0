//! Options of a log and configuration of its topics.

use std::fmt;
use std::str::FromStr;

use brook_core::config::parse_duration_ms;
use brook_core::time::{SharedClock, SystemClock};
use serde::{Deserialize, Serialize};

use crate::error::{LogError, Result};

/// When appended data is forced to stable storage (as Kafka's `flush.ms` family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync before every append is acknowledged: an acknowledged batch survives a
    /// crash of the process or the machine.
    Always,
    /// fsync when at least this many ms have passed since the last one (checked on
    /// append and by the background maintenance): a machine crash may lose up to that
    /// much acknowledged data; a process crash loses none.
    Interval(i64),
    /// Leave flushing to the operating system (and to a clean close): a process crash
    /// loses nothing, a machine crash may lose recent data.
    Never,
}

impl FromStr for FsyncPolicy {
    type Err = LogError;
    /// Parses `always`, `never` or `interval=<duration>` (for example `interval=1s`).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || LogError::InvalidConfig {
            field: "fsync",
            reason: format!("{s:?} is not one of always, never, interval=<duration>"),
        };
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => {
                let d = s.strip_prefix("interval=").ok_or_else(bad)?;
                let ms = parse_duration_ms(d).map_err(|_| bad())?;
                Ok(FsyncPolicy::Interval(ms))
            }
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => f.write_str("always"),
            FsyncPolicy::Never => f.write_str("never"),
            FsyncPolicy::Interval(ms) => write!(f, "interval={ms}ms"),
        }
    }
}

/// Options for opening a [`crate::Log`].
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Durability of appends. Default: `interval=1s`.
    pub fsync: FsyncPolicy,
    /// The clock used for record timestamps, segment age, retention, group session
    /// timeouts and transaction timeouts. Default: the system clock.
    pub clock: SharedClock,
    /// How often (ms of real time) the background thread applies retention, flushes
    /// under `interval`, evicts expired group members and aborts timed-out
    /// transactions; `None` runs no thread (call
    /// [`crate::Log::run_maintenance`] yourself). Default: 1000 ms.
    pub maintenance_interval_ms: Option<u64>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            fsync: FsyncPolicy::Interval(1_000),
            clock: SystemClock::shared(),
            maintenance_interval_ms: Some(1_000),
        }
    }
}

/// The largest segment size accepted (positions in the index are 32-bit).
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// Per-topic configuration, stored with the topic. Names follow Kafka's topic configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// Delete closed segments whose newest record is older than this (ms);
    /// `None` keeps them forever. Default 7 days (Kafka's `retention.ms`).
    pub retention_ms: Option<i64>,
    /// Delete the oldest closed segments while the partition is bigger than this
    /// (bytes); `None` for no limit (Kafka's `retention.bytes`). Default none.
    pub retention_bytes: Option<u64>,
    /// Roll to a new segment before one grows past this (bytes). Default 1 GiB.
    pub segment_bytes: u64,
    /// Roll to a new segment when the active one is older than this (ms of wall-clock
    /// time since it was created or reopened). Default 7 days (Kafka's `segment.ms`).
    pub segment_ms: Option<i64>,
    /// Largest encoded record accepted (bytes). Default 1 MiB.
    pub max_record_bytes: u64,
    /// Bytes of data between two index entries. Default 4096.
    pub index_interval_bytes: u64,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            retention_ms: Some(7 * 24 * 3_600_000),
            retention_bytes: None,
            segment_bytes: 1 << 30,
            segment_ms: Some(7 * 24 * 3_600_000),
            max_record_bytes: 1 << 20,
            index_interval_bytes: 4096,
        }
    }
}

impl TopicConfig {
    /// Checks the values; the error names the offending field.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`].
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: String| Err(LogError::InvalidConfig { field, reason });
        if let Some(ms) = self.retention_ms {
            if ms <= 0 {
                return bad("retention", format!("{ms} ms must be positive"));
            }
        }
        if self.retention_bytes == Some(0) {
            return bad("retention-bytes", "must be positive".into());
        }
        if self.segment_bytes < 1024 || self.segment_bytes > MAX_SEGMENT_BYTES {
            return bad(
                "segment-bytes",
                format!(
                    "{} must be between 1024 and {MAX_SEGMENT_BYTES}",
                    self.segment_bytes
                ),
            );
        }
        if let Some(ms) = self.segment_ms {
            if ms <= 0 {
                return bad("segment-ms", format!("{ms} ms must be positive"));
            }
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > MAX_SEGMENT_BYTES {
            return bad(
                "max-record-bytes",
                format!(
                    "{} must be between 1 and {MAX_SEGMENT_BYTES}",
                    self.max_record_bytes
                ),
            );
        }
        if self.index_interval_bytes == 0 {
            return bad("index-interval-bytes", "must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policies_parse() {
        assert_eq!(
            "always".parse::<FsyncPolicy>().unwrap(),
            FsyncPolicy::Always
        );
        assert_eq!("never".parse::<FsyncPolicy>().unwrap(), FsyncPolicy::Never);
        assert_eq!(
            "interval=250ms".parse::<FsyncPolicy>().unwrap(),
            FsyncPolicy::Interval(250)
        );
        assert_eq!(
            "interval=2s".parse::<FsyncPolicy>().unwrap(),
            FsyncPolicy::Interval(2000)
        );
        let e = "sometimes".parse::<FsyncPolicy>().unwrap_err().to_string();
        assert!(e.contains("fsync"), "{e}");
    }

    #[test]
    fn config_validation_names_the_field() {
        let c = TopicConfig {
            segment_bytes: 10,
            ..Default::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("segment-bytes"));
        let c = TopicConfig {
            retention_ms: Some(-1),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("retention"));
        TopicConfig::default().validate().unwrap();
    }
}
