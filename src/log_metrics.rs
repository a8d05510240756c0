//! The log's per-partition gauges in Prometheus text, for every process that holds the
//! log and serves metrics: the runner's `/metrics`, `brook broker --metrics-addr`, and
//! `brook run --metrics-addr` when the job opened the log itself. As Kafka's broker
//! exposes `kafka.log:type=Log` (`LogEndOffset`, `LogStartOffset`, `Size`), with the
//! count of segments that retention keeps only because of a future timestamp
//! (docs/semantics.md §1, retention).
//!
//! | series (gauges, labels `topic`, `partition`) | value |
//! |---|---|
//! | `brook_log_segments_held_by_future_timestamps` | closed segments time retention would delete but keeps, as they hold a record stamped in the future (as of the last retention pass, at most a maintenance interval old) |
//! | `brook_log_end_offset` | the offset the next record gets |
//! | `brook_log_start_offset` | the oldest offset stored |
//! | `brook_log_size_bytes` | bytes in the partition's segment files |

use std::fmt::Write;

use brook_log::{Log, PartitionInfo, TopicInfo};

type Get = fn(&PartitionInfo) -> u64;

/// The series: name, help, value.
const SERIES: [(&str, &str, Get); 4] = [
    (
        "brook_log_segments_held_by_future_timestamps",
        "Closed segments time retention keeps only because they hold a record stamped in the future",
        |p| p.segments_held_by_future_timestamps as u64,
    ),
    (
        "brook_log_end_offset",
        "Offset the next record appended to the partition gets",
        |p| p.log_end_offset,
    ),
    (
        "brook_log_start_offset",
        "Oldest offset stored in the partition",
        |p| p.log_start_offset,
    ),
    (
        "brook_log_size_bytes",
        "Bytes stored in the partition's segment files",
        |p| p.size_bytes,
    ),
];

/// The series of `topics` (see the [module docs](self)), one sample per partition.
/// Topic names need no escaping: the log accepts only letters, digits, `.`, `_` and
/// `-` in them.
pub fn prometheus(topics: &[TopicInfo]) -> String {
    let mut s = String::new();
    for (name, help, get) in SERIES {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
        for t in topics {
            for p in &t.partitions {
                let _ = writeln!(
                    s,
                    "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                    t.name,
                    p.partition,
                    get(p)
                );
            }
        }
    }
    s
}

/// [`prometheus`] of every topic of `log` now (a topic deleted meanwhile is left out).
pub fn log_prometheus(log: &Log) -> String {
    let topics: Vec<TopicInfo> = log
        .topics()
        .iter()
        .filter_map(|t| log.describe_topic(t).ok())
        .collect();
    prometheus(&topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_log::TopicConfig;

    #[test]
    fn one_sample_per_partition_and_series() {
        let part = |partition, held| PartitionInfo {
            partition,
            log_start_offset: 2,
            log_end_offset: 7,
            size_bytes: 300,
            segments: 2,
            last_stable_offset: 7,
            segments_held_by_future_timestamps: held,
        };
        let text = prometheus(&[TopicInfo {
            name: "orders".into(),
            config: TopicConfig::default(),
            partitions: vec![part(0, 0), part(1, 1)],
        }]);
        for line in [
            "# TYPE brook_log_segments_held_by_future_timestamps gauge",
            "brook_log_segments_held_by_future_timestamps{topic=\"orders\",partition=\"0\"} 0",
            "brook_log_segments_held_by_future_timestamps{topic=\"orders\",partition=\"1\"} 1",
            "brook_log_end_offset{topic=\"orders\",partition=\"1\"} 7",
            "brook_log_start_offset{topic=\"orders\",partition=\"0\"} 2",
            "brook_log_size_bytes{topic=\"orders\",partition=\"0\"} 300",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in {text}");
        }
    }
}
