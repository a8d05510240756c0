//! CreateTopics: topics with a partition count and Kafka topic configs.
//!
//! One broker holds one copy: a replication factor other than 1 (or -1, "the
//! broker's default") is INVALID_REPLICATION_FACTOR, explicit replica assignments are
//! INVALID_REPLICA_ASSIGNMENT. Configs are Kafka's names for what the log has
//! (`retention.ms`, `retention.bytes`, `segment.bytes`, `segment.ms`,
//! `max.message.bytes`, `index.interval.bytes`, and compaction's `cleanup.policy`,
//! `delete.retention.ms`, `min.compaction.lag.ms`, `min.cleanable.dirty.ratio`); any
//! other, or a value out of range, is INVALID_CONFIG naming it.

use brook_log::{Log, LogError, TopicConfig};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::info;

use crate::error_code;

/// The CreateTopics response; `default_partitions` serves a count of -1.
pub fn handle(
    request: &CreateTopicsRequest,
    log: &Log,
    default_partitions: u32,
) -> CreateTopicsResponse {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let result = CreatableTopicResult::default().with_name(t.name.clone());
            match create(t, log, default_partitions, request.validate_only) {
                Ok(partitions) => result
                    .with_num_partitions(partitions as i32)
                    .with_replication_factor(1),
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

fn create(
    t: &CreatableTopic,
    log: &Log,
    default_partitions: u32,
    validate_only: bool,
) -> Result<u32, (i16, String)> {
    let name = t.name.0.as_str();
    if t.replication_factor != -1 && t.replication_factor != 1 {
        return Err((
            ResponseError::InvalidReplicationFactor.code(),
            format!(
                "replication_factor {}: this broker keeps one copy (use 1 or -1)",
                t.replication_factor
            ),
        ));
    }
    if !t.assignments.is_empty() {
        return Err((
            ResponseError::InvalidReplicaAssignment.code(),
            "assignments: replicas cannot be placed on a single broker".to_string(),
        ));
    }
    let partitions = match t.num_partitions {
        -1 => default_partitions,
        n if n >= 1 => n as u32,
        n => {
            return Err((
                ResponseError::InvalidPartitions.code(),
                format!("num_partitions {n}: must be at least 1 (or -1 for the default)"),
            ))
        }
    };
    let config = topic_config(&t.configs)
        .map_err(|message| (ResponseError::InvalidConfig.code(), message))?;
    let fail = |e: LogError| (error_code(&e), e.to_string());
    if validate_only {
        config.validate().map_err(fail)?;
        if log.topic(name).is_ok() {
            return Err(fail(LogError::TopicExists(name.to_string())));
        }
        return Ok(partitions);
    }
    log.create_topic(name, partitions, config).map_err(fail)?;
    info!(topic = name, partitions, "created topic (CreateTopics)");
    Ok(partitions)
}

/// The log's topic config from Kafka's config names; the error names the config.
pub fn topic_config(configs: &[CreatableTopicConfig]) -> Result<TopicConfig, String> {
    let mut config = TopicConfig::default();
    for c in configs {
        let name = c.name.as_str();
        let Some(value) = c.value.as_ref().map(|v| v.as_str()) else {
            // A null value leaves the default, as Kafka.
            continue;
        };
        let int = |v: &str| {
            v.parse::<i64>()
                .map_err(|_| format!("config {name}: {v:?} is not an integer"))
        };
        let non_negative = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("config {name}: {v:?} is not a non-negative integer"))
        };
        match name {
            // -1: no limit, as Kafka.
            "retention.ms" => config.retention_ms = Some(int(value)?).filter(|ms| *ms >= 0),
            "retention.bytes" => {
                config.retention_bytes = u64::try_from(int(value)?).ok();
            }
            "segment.bytes" => config.segment_bytes = non_negative(value)?,
            "segment.ms" => config.segment_ms = Some(int(value)?),
            "max.message.bytes" => config.max_record_bytes = non_negative(value)?,
            "index.interval.bytes" => config.index_interval_bytes = non_negative(value)?,
            // Compaction (the log's own parser, as `brook topic create --config`).
            "cleanup.policy"
            | "delete.retention.ms"
            | "min.compaction.lag.ms"
            | "min.cleanable.dirty.ratio" => config
                .set(name, value)
                .map_err(|e| format!("config {name}: {e}"))?,
            other => {
                return Err(format!(
                    "config {other}: not supported (supported: retention.ms, retention.bytes, \
                     segment.bytes, segment.ms, max.message.bytes, index.interval.bytes, \
                     cleanup.policy, delete.retention.ms, min.compaction.lag.ms, \
                     min.cleanable.dirty.ratio)"
                ))
            }
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use brook_log::LogOptions;
    use kafka_protocol::messages::TopicName;

    use super::*;

    fn topic(name: &str, partitions: i32) -> CreatableTopic {
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
    }

    fn config(name: &'static str, value: &'static str) -> CreatableTopicConfig {
        CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str(name))
            .with_value(Some(StrBytes::from_static_str(value)))
    }

    #[test]
    fn creates_topics_and_answers_each_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let request = CreateTopicsRequest::default().with_topics(vec![
            topic("snacks", 3).with_configs(vec![config("retention.ms", "60000")]),
            topic("defaulted", -1),
            topic("bad name!", 1),
            topic("odd", 1).with_configs(vec![config("cleanup.policy", "shred")]),
            topic("copies", 1).with_replication_factor(3),
            topic("classes", 1).with_configs(vec![
                config("cleanup.policy", "compact"),
                config("delete.retention.ms", "1000"),
            ]),
        ]);
        let r = handle(&request, &log, 2);
        let codes: Vec<i16> = r.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(
            codes,
            vec![
                0,
                0,
                ResponseError::InvalidTopicException.code(),
                ResponseError::InvalidConfig.code(),
                ResponseError::InvalidReplicationFactor.code(),
                0,
            ]
        );
        let classes = log.topic("classes").expect("classes");
        assert!(classes.config().cleanup_policy.compacts());
        assert_eq!(classes.config().delete_retention_ms, 1000);
        let snacks = log.topic("snacks").expect("snacks");
        assert_eq!(snacks.partition_count(), 3);
        assert_eq!(snacks.config().retention_ms, Some(60_000));
        assert_eq!(
            log.topic("defaulted").expect("defaulted").partition_count(),
            2
        );
        let message = r.topics[3].error_message.as_ref().expect("message");
        assert!(message.as_str().contains("cleanup.policy"), "{message:?}");
        // Again: the topic exists.
        let again = handle(
            &CreateTopicsRequest::default().with_topics(vec![topic("snacks", 3)]),
            &log,
            2,
        );
        assert_eq!(
            again.topics[0].error_code,
            ResponseError::TopicAlreadyExists.code()
        );
    }

    #[test]
    fn validate_only_creates_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic("snacks", 3)])
            .with_validate_only(true);
        assert_eq!(handle(&request, &log, 1).topics[0].error_code, 0);
        assert!(log.topics().is_empty());
    }
}
