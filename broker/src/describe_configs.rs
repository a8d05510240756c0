//! DescribeConfigs: a topic's configs under Kafka's names, and the few broker
//! settings `brook broker` has.
//!
//! Each entry says where its value comes from as Kafka's `config_source` does:
//! DYNAMIC_TOPIC_CONFIG (1) for a topic value that differs from brook's default
//! (set at creation), DEFAULT_CONFIG (5) otherwise; a broker setting is
//! STATIC_BROKER_CONFIG (4) when given at start, DEFAULT_CONFIG otherwise. The log
//! keeps values, not whether they were given, so a value given equal to the default
//! reads as the default. Topic configs are not read-only (Kafka's rule; they are
//! altered by IncrementalAlterConfigs and AlterConfigs), broker settings are (they
//! are fixed at start). Synonyms are always empty (one level of configuration per value); the type
//! and documentation (v3+) are Kafka's. Kafka's answers for bad resources: an unknown
//! topic is UNKNOWN_TOPIC_OR_PARTITION, a broker other than node 0 or another resource type INVALID_REQUEST. No
//! configuration keys (null or an empty list) asks for every config.

use brook_log::{Log, TopicConfig};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::error_code;
use crate::frame::MAX_FRAME_BYTES;
use crate::metadata::NODE_ID;
use crate::server::BrokerConfig;

/// Kafka's resource type of a topic.
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka's resource type of a broker.
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's `ConfigSource`: a topic's own value.
const SOURCE_TOPIC: i8 = 1;
/// Kafka's `ConfigSource`: a broker setting given at start.
const SOURCE_STATIC_BROKER: i8 = 4;
/// Kafka's `ConfigSource`: the default.
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's `ConfigType` of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// BOOLEAN (1).
    Boolean = 1,
    /// INT (3).
    Int = 3,
    /// LONG (5).
    Long = 5,
    /// DOUBLE (6).
    Double = 6,
    /// LIST (7).
    List = 7,
}

/// One config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Kafka's name.
    pub name: &'static str,
    /// The value as text.
    pub value: String,
    /// Kafka's `config_source` (see the module docs).
    pub source: i8,
    /// Whether it can be altered (topic configs in Kafka; broker settings cannot).
    pub read_only: bool,
    /// Its type.
    pub config_type: ConfigType,
    /// Kafka's documentation, shortened.
    pub documentation: &'static str,
}

/// A topic's configs under Kafka's names, in Kafka's alphabetical order.
pub fn topic_entries(config: &TopicConfig) -> Vec<ConfigEntry> {
    let default = TopicConfig::default();
    let entry = |name, value: String, is_default: bool, config_type, documentation| ConfigEntry {
        name,
        value,
        source: if is_default {
            SOURCE_DEFAULT
        } else {
            SOURCE_TOPIC
        },
        read_only: false,
        config_type,
        documentation,
    };
    // -1 is Kafka's "no limit"; an age limit that is off never rolls (Long.MAX_VALUE).
    let or_minus_one = |v: Option<i64>| v.unwrap_or(-1).to_string();
    vec![
        entry(
            "cleanup.policy",
            config.cleanup_policy.as_str().to_string(),
            config.cleanup_policy == default.cleanup_policy,
            ConfigType::List,
            "delete (retention by time and size), compact (the latest record per key) or both.",
        ),
        entry(
            "delete.retention.ms",
            config.delete_retention_ms.to_string(),
            config.delete_retention_ms == default.delete_retention_ms,
            ConfigType::Long,
            "How long a tombstone stays readable after compaction first reached it (ms).",
        ),
        entry(
            "index.interval.bytes",
            config.index_interval_bytes.to_string(),
            config.index_interval_bytes == default.index_interval_bytes,
            ConfigType::Int,
            "Bytes of records between two offset index entries.",
        ),
        entry(
            "max.message.bytes",
            config.max_record_bytes.to_string(),
            config.max_record_bytes == default.max_record_bytes,
            ConfigType::Int,
            "The largest record batch size allowed (bytes).",
        ),
        entry(
            "min.cleanable.dirty.ratio",
            config.min_cleanable_dirty_ratio.0.to_string(),
            config.min_cleanable_dirty_ratio == default.min_cleanable_dirty_ratio,
            ConfigType::Double,
            "The share of not yet compacted bytes at which a partition is compacted.",
        ),
        entry(
            "min.compaction.lag.ms",
            config.min_compaction_lag_ms.to_string(),
            config.min_compaction_lag_ms == default.min_compaction_lag_ms,
            ConfigType::Long,
            "The age a record must reach before it is compacted (ms).",
        ),
        entry(
            "retention.bytes",
            or_minus_one(config.retention_bytes.and_then(|b| i64::try_from(b).ok())),
            config.retention_bytes == default.retention_bytes,
            ConfigType::Long,
            "The size a partition may grow to before its oldest segments are deleted (bytes; -1: no limit).",
        ),
        entry(
            "retention.ms",
            or_minus_one(config.retention_ms),
            config.retention_ms == default.retention_ms,
            ConfigType::Long,
            "How long a segment is kept after its newest record (ms; -1: no limit).",
        ),
        entry(
            "segment.bytes",
            config.segment_bytes.to_string(),
            config.segment_bytes == default.segment_bytes,
            ConfigType::Int,
            "The segment file size (bytes).",
        ),
        entry(
            "segment.ms",
            config.segment_ms.unwrap_or(i64::MAX).to_string(),
            config.segment_ms == default.segment_ms,
            ConfigType::Long,
            "The age after which the active segment is rolled (ms).",
        ),
    ]
}

/// The settings of `brook broker` reported for broker 0.
pub fn broker_entries(config: &BrokerConfig) -> Vec<ConfigEntry> {
    let default = BrokerConfig::default();
    let entry = |name, value: String, is_default: bool, config_type, documentation| ConfigEntry {
        name,
        value,
        source: if is_default {
            SOURCE_DEFAULT
        } else {
            SOURCE_STATIC_BROKER
        },
        read_only: true,
        config_type,
        documentation,
    };
    vec![
        entry(
            "auto.create.topics.enable",
            config.auto_create_topics.to_string(),
            config.auto_create_topics == default.auto_create_topics,
            ConfigType::Boolean,
            "Create a topic when a client asks for its metadata (brook's default: off).",
        ),
        entry(
            "group.min.session.timeout.ms",
            config.group_min_session_timeout_ms.to_string(),
            config.group_min_session_timeout_ms == default.group_min_session_timeout_ms,
            ConfigType::Int,
            "The shortest session timeout a group member may ask for (ms).",
        ),
        entry(
            "num.partitions",
            config.default_partitions.to_string(),
            config.default_partitions == default.default_partitions,
            ConfigType::Int,
            "Partitions of a topic created without a count.",
        ),
        entry(
            "socket.request.max.bytes",
            MAX_FRAME_BYTES.to_string(),
            true,
            ConfigType::Int,
            "The largest request accepted (bytes).",
        ),
    ]
}

/// The DescribeConfigs response; `broker` is [`broker_entries`] of this broker.
pub fn handle(
    request: &DescribeConfigsRequest,
    log: &Log,
    broker: &[ConfigEntry],
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let name = r.resource_name.as_str();
            let entries = match r.resource_type {
                RESOURCE_TOPIC => log
                    .topic(name)
                    .map(|t| topic_entries(&t.config()))
                    .map_err(|e| (error_code(&e), e.to_string())),
                RESOURCE_BROKER if name == NODE_ID.to_string() => Ok(broker.to_vec()),
                // The cluster-wide defaults: none can be set dynamically here.
                RESOURCE_BROKER if name.is_empty() => Ok(Vec::new()),
                RESOURCE_BROKER => Err((
                    ResponseError::InvalidRequest.code(),
                    format!("broker {name:?}: this is broker {NODE_ID}"),
                )),
                other => Err((
                    ResponseError::InvalidRequest.code(),
                    format!("resource type {other}: only topics (2) and brokers (4) are served"),
                )),
            };
            match entries {
                Ok(entries) => result.with_configs(
                    entries
                        .into_iter()
                        // No keys (null or empty, as Kafka): every config.
                        .filter(|e| {
                            r.configuration_keys.as_ref().is_none_or(|keys| {
                                keys.is_empty() || keys.iter().any(|k| k.as_str() == e.name)
                            })
                        })
                        .map(|e| {
                            DescribeConfigsResourceResult::default()
                                .with_name(StrBytes::from_static_str(e.name))
                                .with_value(Some(StrBytes::from_string(e.value)))
                                .with_read_only(e.read_only)
                                .with_config_source(e.source)
                                .with_config_type(e.config_type as i8)
                                .with_documentation(
                                    request
                                        .include_documentation
                                        .then(|| StrBytes::from_static_str(e.documentation)),
                                )
                        })
                        .collect(),
                ),
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use brook_log::LogOptions;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;

    use super::*;

    fn resource(kind: i8, name: &str) -> DescribeConfigsResource {
        DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
    }

    #[test]
    fn a_topic_reports_its_compaction_configs() {
        let mut config = TopicConfig::default();
        config.set("cleanup.policy", "compact").expect("policy");
        let entries = topic_entries(&config);
        let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "Kafka's alphabetical order");
        let get = |name| entries.iter().find(|e| e.name == name).expect(name);
        let policy = get("cleanup.policy");
        assert_eq!(
            (policy.value.as_str(), policy.source, policy.config_type),
            ("compact", SOURCE_TOPIC, ConfigType::List)
        );
        let ratio = get("min.cleanable.dirty.ratio");
        assert_eq!(
            (ratio.value.as_str(), ratio.source, ratio.config_type),
            ("0.5", SOURCE_DEFAULT, ConfigType::Double)
        );
        assert_eq!(get("delete.retention.ms").value, "86400000");
        assert_eq!(get("min.compaction.lag.ms").value, "0");
        // Every name `brook topic alter` takes is reported, and nothing else.
        let mut settable = TopicConfig::NAMES.to_vec();
        settable.sort_unstable();
        assert_eq!(sorted, settable);
    }

    #[test]
    fn a_topic_reports_its_values_and_which_were_set() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let config = TopicConfig {
            retention_ms: Some(60_000),
            ..TopicConfig::default()
        };
        log.create_topic("snacks", 1, config).expect("create");
        let request = DescribeConfigsRequest::default()
            .with_resources(vec![
                resource(RESOURCE_TOPIC, "snacks"),
                resource(RESOURCE_TOPIC, "snacks").with_configuration_keys(Some(vec![
                    StrBytes::from_static_str("segment.bytes"),
                    StrBytes::from_static_str("no.such.config"),
                ])),
                resource(RESOURCE_TOPIC, "nothing"),
            ])
            .with_include_documentation(true);
        let r = handle(&request, &log, &[]);
        let all = &r.results[0];
        assert_eq!(all.error_code, 0);
        let retention = all
            .configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .expect("retention.ms");
        assert_eq!(retention.value.as_deref(), Some("60000"));
        assert_eq!(retention.config_source, SOURCE_TOPIC);
        assert!(!retention.read_only);
        assert_eq!(retention.config_type, ConfigType::Long as i8);
        assert!(retention.synonyms.is_empty());
        assert!(retention.documentation.is_some());
        let segment = all
            .configs
            .iter()
            .find(|c| c.name.as_str() == "segment.bytes")
            .expect("segment.bytes");
        assert_eq!(segment.value.as_deref(), Some("1073741824"));
        assert_eq!(segment.config_source, SOURCE_DEFAULT);
        let picked: Vec<&str> = r.results[1]
            .configs
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(picked, vec!["segment.bytes"]);
        assert_eq!(
            r.results[2].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
    }

    #[test]
    fn the_broker_reports_its_settings_and_other_resources_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let broker = broker_entries(&BrokerConfig {
            default_partitions: 3,
            ..BrokerConfig::default()
        });
        let request = DescribeConfigsRequest::default().with_resources(vec![
            resource(RESOURCE_BROKER, "0"),
            resource(RESOURCE_BROKER, "7"),
            resource(8, "0"),
        ]);
        let r = handle(&request, &log, &broker);
        let partitions = r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == "num.partitions")
            .expect("num.partitions");
        assert_eq!(partitions.value.as_deref(), Some("3"));
        assert_eq!(partitions.config_source, SOURCE_STATIC_BROKER);
        assert!(partitions.read_only);
        assert_eq!(
            r.results[1].error_code,
            ResponseError::InvalidRequest.code()
        );
        assert_eq!(
            r.results[2].error_code,
            ResponseError::InvalidRequest.code()
        );
    }
}
