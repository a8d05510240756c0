//! Options of a log and configuration of its topics.

use std::fmt;
use std::str::FromStr;

use brook_core::config::{parse_duration_ms, parse_size_bytes};
use brook_core::time::{SharedClock, SystemClock};
use serde::{Deserialize, Serialize};

use crate::error::{LogError, Result};

/// When appended data is forced to stable storage (as Kafka's `flush.ms` family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync before every append is acknowledged: an acknowledged batch survives a
    /// crash of the process or the machine.
    Always,
    /// fsync when at least this many ms have passed since the last one, by the
    /// background maintenance (checked every `maintenance_interval_ms`), never by an
    /// append, and without blocking appends (as Kafka's `flush.ms`; see
    /// `docs/semantics.md` §1 *Durability*): a machine crash may lose up to that much
    /// plus one maintenance interval of acknowledged data; a process crash loses none.
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

/// What happens to old segments of a topic (Kafka's `cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CleanupPolicy {
    /// Time and size retention delete whole closed segments (`delete`, the default).
    #[default]
    #[serde(rename = "delete")]
    Delete,
    /// Compaction keeps the latest record of each key (`compact`); nothing is deleted
    /// by age or size.
    #[serde(rename = "compact")]
    Compact,
    /// Both: compaction, and retention deletes segments by age or size
    /// (`compact,delete`).
    #[serde(rename = "compact,delete")]
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether compaction runs.
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }

    /// Whether time and size retention delete segments.
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    /// Kafka's spelling: `delete`, `compact` or `compact,delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
}

impl FromStr for CleanupPolicy {
    type Err = LogError;
    /// Parses `delete`, `compact`, `compact,delete` or `delete,compact` (as Kafka, a
    /// list in any order).
    fn from_str(s: &str) -> Result<Self> {
        let mut compact = false;
        let mut delete = false;
        for part in s.split(',').map(str::trim) {
            match part {
                "compact" => compact = true,
                "delete" => delete = true,
                _ => {
                    return Err(LogError::InvalidConfig {
                        field: "cleanup.policy",
                        reason: format!("{s:?} is not one of delete, compact, compact,delete"),
                    })
                }
            }
        }
        Ok(match (compact, delete) {
            (true, true) => CleanupPolicy::CompactDelete,
            (true, false) => CleanupPolicy::Compact,
            _ => CleanupPolicy::Delete,
        })
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A ratio in `[0, 1]` (Kafka's `min.cleanable.dirty.ratio`). Always finite, so it
/// compares as a number with equality.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ratio(pub f64);

// `validate` refuses NaN, so equality is reflexive for every accepted value.
impl Eq for Ratio {}

/// A topic's configuration as its partitions share it: replaced as a whole when the
/// topic is altered ([`crate::Log::alter_topic`]), read once per append or
/// maintenance pass (never per record).
#[derive(Debug)]
pub(crate) struct ConfigCell(std::sync::RwLock<std::sync::Arc<TopicConfig>>);

impl ConfigCell {
    pub(crate) fn new(config: TopicConfig) -> Self {
        ConfigCell(std::sync::RwLock::new(std::sync::Arc::new(config)))
    }

    /// The current configuration.
    pub(crate) fn get(&self) -> std::sync::Arc<TopicConfig> {
        // Only whole `Arc`s are stored under the lock: a poisoned one still holds a
        // complete configuration.
        std::sync::Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn set(&self, config: TopicConfig) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(config);
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
    /// Roll to a new segment before a batch whose largest timestamp is more than this
    /// (ms) after the largest timestamp of the active segment's first batch, as Kafka's
    /// `segment.ms` (`LogSegment.shouldRoll`). Default 7 days.
    pub segment_ms: Option<i64>,
    /// Largest encoded record accepted (bytes). Default 1 MiB.
    pub max_record_bytes: u64,
    /// Bytes of data between two index entries. Default 4096.
    pub index_interval_bytes: u64,
    /// `delete` (retention by time and size), `compact` (keep the latest record per
    /// key) or both (Kafka's `cleanup.policy`). Default `delete`.
    #[serde(default)]
    pub cleanup_policy: CleanupPolicy,
    /// How long (ms) a tombstone stays readable after compaction first reached it, so
    /// a consumer reading from the start sees the delete (Kafka's
    /// `delete.retention.ms`). Default 1 day.
    #[serde(default = "default_delete_retention_ms")]
    pub delete_retention_ms: i64,
    /// A record is not compacted before it is this old (ms; by the segment's newest
    /// timestamp, as Kafka's `min.compaction.lag.ms`). Default 0.
    #[serde(default)]
    pub min_compaction_lag_ms: i64,
    /// Compaction runs on a partition once the not yet compacted part is at least this
    /// share of the compactable bytes (Kafka's `min.cleanable.dirty.ratio`). Default 0.5.
    #[serde(default = "default_dirty_ratio")]
    pub min_cleanable_dirty_ratio: Ratio,
}

fn default_delete_retention_ms() -> i64 {
    86_400_000
}

fn default_dirty_ratio() -> Ratio {
    Ratio(0.5)
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
            cleanup_policy: CleanupPolicy::Delete,
            delete_retention_ms: default_delete_retention_ms(),
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: default_dirty_ratio(),
        }
    }
}

impl TopicConfig {
    /// The topic configs a user can set, by Kafka's names.
    pub const NAMES: [&'static str; 10] = [
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "max.message.bytes",
        "index.interval.bytes",
        "cleanup.policy",
        "delete.retention.ms",
        "min.compaction.lag.ms",
        "min.cleanable.dirty.ratio",
    ];

    /// Sets the config `name` (Kafka's name, one of [`TopicConfig::NAMES`]) from
    /// `value`, as `kafka-configs --alter --add-config name=value` does. Durations take
    /// ms (`604800000`) or units (`7d`), sizes bytes or units (`1GiB`); `-1` or `none`
    /// means no limit for `retention.ms`, `retention.bytes` and `segment.ms`.
    /// `cleanup.policy` takes `delete`, `compact` or both (`compact,delete`, any
    /// order), `min.cleanable.dirty.ratio` a number in `[0, 1]`.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming the config for an unknown name or a value
    /// that does not parse or is out of range ([`TopicConfig::validate`]'s limits);
    /// `self` is unchanged then.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let Some(&field) = Self::NAMES.iter().find(|n| **n == name) else {
            return Err(LogError::InvalidConfig {
                field: "config",
                reason: format!(
                    "{name:?} is not a topic config brook has (supported: {})",
                    Self::NAMES.join(", ")
                ),
            });
        };
        let bad = |what: &str| LogError::InvalidConfig {
            field,
            reason: format!("{value:?} is not {what}"),
        };
        let unlimited = matches!(value.trim(), "-1" | "none");
        let duration =
            || parse_duration_ms(value).map_err(|_| bad("a duration (ms, or 7d, 12h, ...)"));
        let size = || parse_size_bytes(value).map_err(|_| bad("a size (bytes, or 1GiB, ...)"));
        let mut next = self.clone();
        match field {
            "retention.ms" => next.retention_ms = if unlimited { None } else { Some(duration()?) },
            "retention.bytes" => {
                next.retention_bytes = if unlimited { None } else { Some(size()?) }
            }
            "segment.ms" => next.segment_ms = if unlimited { None } else { Some(duration()?) },
            "segment.bytes" => next.segment_bytes = size()?,
            "max.message.bytes" => next.max_record_bytes = size()?,
            "index.interval.bytes" => next.index_interval_bytes = size()?,
            "cleanup.policy" => next.cleanup_policy = value.parse()?,
            "delete.retention.ms" => next.delete_retention_ms = duration()?,
            "min.compaction.lag.ms" => next.min_compaction_lag_ms = duration()?,
            _ => {
                // "min.cleanable.dirty.ratio", the last of `NAMES`. NaN parses as f64
                // but is no ratio (`Ratio` relies on its absence for `Eq`).
                let ratio: f64 = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|r: &f64| !r.is_nan())
                    .ok_or_else(|| bad("a number between 0 and 1"))?;
                next.min_cleanable_dirty_ratio = Ratio(ratio);
            }
        }
        next.validate().map_err(|e| match e {
            LogError::InvalidConfig { reason, .. } => LogError::InvalidConfig { field, reason },
            e => e,
        })?;
        *self = next;
        Ok(())
    }

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
        if self.delete_retention_ms < 0 {
            return bad(
                "delete.retention.ms",
                format!("{} ms must not be negative", self.delete_retention_ms),
            );
        }
        if self.min_compaction_lag_ms < 0 {
            return bad(
                "min.compaction.lag.ms",
                format!("{} ms must not be negative", self.min_compaction_lag_ms),
            );
        }
        let ratio = self.min_cleanable_dirty_ratio.0;
        if !(0.0..=1.0).contains(&ratio) {
            return bad(
                "min.cleanable.dirty.ratio",
                format!("{ratio} must be between 0 and 1"),
            );
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
    fn configs_are_set_by_kafkas_names() {
        let mut c = TopicConfig::default();
        c.set("retention.ms", "60000").unwrap();
        c.set("segment.ms", "1h").unwrap();
        c.set("segment.bytes", "1MiB").unwrap();
        c.set("retention.bytes", "-1").unwrap();
        c.set("max.message.bytes", "2048").unwrap();
        c.set("index.interval.bytes", "100").unwrap();
        assert_eq!(c.retention_ms, Some(60_000));
        assert_eq!(c.segment_ms, Some(3_600_000));
        assert_eq!(c.segment_bytes, 1 << 20);
        assert_eq!(c.retention_bytes, None);
        assert_eq!((c.max_record_bytes, c.index_interval_bytes), (2048, 100));
        c.set("retention.ms", "none").unwrap();
        assert_eq!(c.retention_ms, None);
        let before = c.clone();
        let e = c.set("retention.hours", "5").unwrap_err().to_string();
        assert!(
            e.contains("\"retention.hours\"") && e.contains("segment.bytes"),
            "{e}"
        );
        let e = c.set("segment.bytes", "10").unwrap_err().to_string();
        assert!(
            e.contains("segment.bytes") && e.contains("between 1024"),
            "{e}"
        );
        let e = c.set("segment.ms", "soon").unwrap_err().to_string();
        assert!(e.contains("segment.ms") && e.contains("\"soon\""), "{e}");
        assert_eq!(c, before, "a refused value changes nothing");
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

    #[test]
    fn compaction_configs_set_by_kafka_names() {
        let mut c = TopicConfig::default();
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        c.set("cleanup.policy", "delete,compact").unwrap();
        assert_eq!(c.cleanup_policy, CleanupPolicy::CompactDelete);
        c.set("cleanup.policy", "compact").unwrap();
        c.set("delete.retention.ms", "1000").unwrap();
        c.set("min.compaction.lag.ms", "5").unwrap();
        c.set("min.cleanable.dirty.ratio", "0.25").unwrap();
        c.validate().unwrap();
        assert_eq!(
            (
                c.cleanup_policy,
                c.delete_retention_ms,
                c.min_compaction_lag_ms
            ),
            (CleanupPolicy::Compact, 1000, 5)
        );
        assert_eq!(c.min_cleanable_dirty_ratio, Ratio(0.25));
        let e = c.set("cleanup.policy", "shred").unwrap_err().to_string();
        assert!(e.contains("cleanup.policy"), "{e}");
        let e = c
            .set("delete.retention.ms", "soon")
            .unwrap_err()
            .to_string();
        assert!(e.contains("delete.retention.ms"), "{e}");
        let e = c
            .set("min.cleanable.dirty.ratio", "1.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("min.cleanable.dirty.ratio"), "{e}");
        let e = c
            .set("min.cleanable.dirty.ratio", "NaN")
            .unwrap_err()
            .to_string();
        assert!(e.contains("min.cleanable.dirty.ratio"), "{e}");
        assert_eq!(
            c.min_cleanable_dirty_ratio,
            Ratio(0.25),
            "refused: unchanged"
        );
        // A topic stored before these configs existed loads with Kafka's defaults.
        let old = r#"{"retention_ms":1,"retention_bytes":null,"segment_bytes":1024,"segment_ms":null,"max_record_bytes":100,"index_interval_bytes":10}"#;
        let c: TopicConfig = serde_json::from_str(old).unwrap();
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        assert_eq!(c.min_cleanable_dirty_ratio, Ratio(0.5));
    }
}
