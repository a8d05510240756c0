//! IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND and SUBTRACT of single
//! topic configs, what `kafka-configs --alter`, librdkafka's and kafka-python's admin
//! clients send (and `brook topic alter` through a broker).
//!
//! A topic's changes are applied in order to its current configuration by
//! [`apply`], a pure function using the same parsing and validation as `brook topic
//! alter` in-process ([`TopicConfig::set`]); the result replaces the topic's
//! configuration ([`Log::alter_topic`]) unless the request is `validate_only`. The
//! answers are Kafka's (`ConfigAdminManager`, `LogConfig.validate`):
//!
//! - an unknown or unsettable config name, a value that does not parse or is out of
//!   range: INVALID_CONFIG with a message naming the config; nothing of that topic
//!   changes (a resource's changes apply together or not at all);
//! - SET with a null value, the same name twice, an unknown operation:
//!   INVALID_REQUEST;
//! - DELETE returns the config to brook's default (the log keeps values, not whether
//!   they were set: DescribeConfigs then reports it as DEFAULT_CONFIG);
//! - APPEND/SUBTRACT add or remove items of a list config (`cleanup.policy`), and
//!   are INVALID_CONFIG on any other, as Kafka's "Config value append is not allowed
//!   for config key"; subtracting every policy leaves none, which is INVALID_CONFIG;
//! - an unknown topic: UNKNOWN_TOPIC_OR_PARTITION;
//! - broker 0 (or the cluster default, an empty name): its settings are fixed at
//!   start, so any change is INVALID_CONFIG naming it (an empty change list
//!   succeeds); another broker id or resource type: INVALID_REQUEST, as
//!   DescribeConfigs answers them.
//!
//! Alters of one broker are serialized (Kafka serializes them through its
//! controller), so two clients changing different configs of a topic at once both
//! keep their change.

use std::sync::{Mutex, PoisonError};

use brook_log::{Log, TopicConfig};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::describe_configs::{
    topic_entries, ConfigEntry, ConfigType, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use crate::error_code;
use crate::metadata::NODE_ID;

/// Kafka's `AlterConfigOp.OpType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// SET (0): the value replaces the config's.
    Set,
    /// DELETE (1): the config returns to its default.
    Delete,
    /// APPEND (2): items added to a list config.
    Append,
    /// SUBTRACT (3): items removed from a list config.
    Subtract,
}

impl Op {
    /// The operation of Kafka's code, `None` for an unknown one.
    pub fn from_code(code: i8) -> Option<Op> {
        match code {
            0 => Some(Op::Set),
            1 => Some(Op::Delete),
            2 => Some(Op::Append),
            3 => Some(Op::Subtract),
            _ => None,
        }
    }
}

/// One change of a resource's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<'a> {
    /// The config's name (Kafka's).
    pub name: &'a str,
    /// What to do.
    pub op: Op,
    /// The value (ignored by DELETE).
    pub value: Option<&'a str>,
}

/// Why a resource's changes are refused: Kafka's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The Kafka error code.
    pub code: i16,
    /// What was wrong, naming the config.
    pub message: String,
}

impl Refusal {
    fn new(error: ResponseError, message: String) -> Self {
        Refusal {
            code: error.code(),
            message,
        }
    }

    /// A resource's error code and message in either API's answer: 0 and none, or
    /// the refusal's.
    pub(crate) fn answer(result: Result<(), Refusal>) -> (i16, Option<StrBytes>) {
        match result {
            Ok(()) => (0, None),
            Err(r) => (r.code, Some(StrBytes::from_string(r.message))),
        }
    }
}

/// `config` with `changes` applied in order (see the module docs for the rules).
///
/// # Errors
/// A [`Refusal`] naming the first config that cannot be changed so.
pub fn apply(config: &TopicConfig, changes: &[Change<'_>]) -> Result<TopicConfig, Refusal> {
    for (i, c) in changes.iter().enumerate() {
        if changes[..i].iter().any(|earlier| earlier.name == c.name) {
            return Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("config {:?} is changed twice in one request", c.name),
            ));
        }
    }
    let defaults = topic_entries(&TopicConfig::default());
    let mut next = config.clone();
    for c in changes {
        let invalid = |reason: String| Refusal::new(ResponseError::InvalidConfig, reason);
        let Some(default) = defaults.iter().find(|e| e.name == c.name) else {
            // `set` names the config and lists the ones brook has.
            return Err(match next.set(c.name, "") {
                Err(e) => invalid(e.to_string()),
                Ok(()) => invalid(format!("{:?} is not a topic config", c.name)),
            });
        };
        let value = match (c.op, c.value) {
            (Op::Delete, _) => default.value.clone(),
            (_, None) => {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("config {:?}: a null value is only allowed with DELETE", c.name),
                ))
            }
            (Op::Set, Some(v)) => v.to_owned(),
            (Op::Append | Op::Subtract, Some(_)) if default.config_type != ConfigType::List => {
                return Err(invalid(format!(
                    "config {:?} is not a list: APPEND and SUBTRACT are only allowed for list configs (cleanup.policy)",
                    c.name
                )))
            }
            (op, Some(v)) => {
                let current = topic_entries(&next)
                    .into_iter()
                    .find(|e| e.name == c.name)
                    .map(|e| e.value)
                    .unwrap_or_default();
                list_change(&current, op, v)
            }
        };
        next.set(c.name, &value)
            .map_err(|e| invalid(e.to_string()))?;
    }
    Ok(next)
}

/// A list config's value (comma-separated items) after APPEND (items not yet in it
/// added at the end) or SUBTRACT (items removed) of `items`.
fn list_change(current: &str, op: Op, items: &str) -> String {
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut list = split(current);
    let given = split(items);
    if op == Op::Append {
        for item in given {
            if !list.contains(&item) {
                list.push(item);
            }
        }
    } else {
        list.retain(|i| !given.contains(i));
    }
    list.join(",")
}

/// Serializes read-modify-write of topic configs within this broker process.
static ALTERS: Mutex<()> = Mutex::new(());

/// Applies `changes` to one resource (a topic is altered unless `validate_only`);
/// shared with the legacy AlterConfigs (crate::alter_configs). `broker` is this
/// broker's settings ([`crate::describe_configs::broker_entries`]).
///
/// # Errors
/// A [`Refusal`] (see the module docs).
pub(crate) fn alter_resource(
    log: &Log,
    resource_type: i8,
    name: &str,
    changes: &[Change<'_>],
    validate_only: bool,
    broker: &[ConfigEntry],
) -> Result<(), Refusal> {
    match resource_type {
        RESOURCE_TOPIC => {
            let log_error = |e: brook_log::LogError| Refusal {
                code: error_code(&e),
                message: e.to_string(),
            };
            // A poisoned lock guards nothing but the order of alters.
            let _serial = ALTERS.lock().unwrap_or_else(PoisonError::into_inner);
            let topic = log.topic(name).map_err(log_error)?;
            let next = apply(&topic.config(), changes)?;
            if !validate_only {
                log.alter_topic(name, next).map_err(log_error)?;
            }
            Ok(())
        }
        RESOURCE_BROKER if name.is_empty() || name == NODE_ID.to_string() => {
            match changes.first() {
                None => Ok(()),
                Some(c) if broker.iter().any(|e| e.name == c.name) => Err(Refusal::new(
                    ResponseError::InvalidConfig,
                    format!(
                        "broker config {:?} is fixed when brook broker starts (read-only; restart it with another value)",
                        c.name
                    ),
                )),
                Some(c) => Err(Refusal::new(
                    ResponseError::InvalidConfig,
                    format!("{:?} is not a broker config brook broker has", c.name),
                )),
            }
        }
        RESOURCE_BROKER => Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("broker {name:?}: this is broker {NODE_ID}"),
        )),
        other => Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("resource type {other}: only topics (2) and brokers (4) are served"),
        )),
    }
}

/// The IncrementalAlterConfigs response.
pub fn handle(
    request: &IncrementalAlterConfigsRequest,
    log: &Log,
    broker: &[ConfigEntry],
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .iter()
        .map(|r| {
            let changes: Option<Vec<Change<'_>>> = r
                .configs
                .iter()
                .map(|c| {
                    Some(Change {
                        name: c.name.as_str(),
                        op: Op::from_code(c.config_operation)?,
                        value: c.value.as_deref(),
                    })
                })
                .collect();
            let result = match changes {
                Some(changes) => alter_resource(
                    log,
                    r.resource_type,
                    r.resource_name.as_str(),
                    &changes,
                    request.validate_only,
                    broker,
                ),
                None => Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    "unknown config operation (SET 0, DELETE 1, APPEND 2, SUBTRACT 3)".into(),
                )),
            };
            let (code, message) = Refusal::answer(result);
            AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use brook_log::{CleanupPolicy, LogOptions};
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };

    use super::*;
    use crate::describe_configs::broker_entries;
    use crate::server::BrokerConfig;

    fn set<'a>(name: &'a str, value: &'a str) -> Change<'a> {
        Change {
            name,
            op: Op::Set,
            value: Some(value),
        }
    }

    fn change<'a>(name: &'a str, op: Op, value: Option<&'a str>) -> Change<'a> {
        Change { name, op, value }
    }

    #[test]
    fn set_and_delete_change_single_configs() {
        let base = TopicConfig {
            segment_bytes: 4096,
            ..TopicConfig::default()
        };
        let next = apply(
            &base,
            &[
                set("retention.ms", "60000"),
                change("segment.bytes", Op::Delete, None),
                set("retention.bytes", "-1"),
            ],
        )
        .expect("apply");
        assert_eq!(next.retention_ms, Some(60_000));
        assert_eq!(next.segment_bytes, TopicConfig::default().segment_bytes);
        assert_eq!(next.retention_bytes, None);
        // What is not named stays.
        assert_eq!(next.max_record_bytes, base.max_record_bytes);
    }

    #[test]
    fn append_and_subtract_edit_the_cleanup_policy_list() {
        let base = TopicConfig::default();
        let both = apply(
            &base,
            &[change("cleanup.policy", Op::Append, Some("compact"))],
        )
        .expect("append");
        assert_eq!(both.cleanup_policy, CleanupPolicy::CompactDelete);
        let compact = apply(
            &both,
            &[change("cleanup.policy", Op::Subtract, Some("delete"))],
        )
        .expect("subtract");
        assert_eq!(compact.cleanup_policy, CleanupPolicy::Compact);
        let none = apply(
            &compact,
            &[change("cleanup.policy", Op::Subtract, Some("compact"))],
        )
        .expect_err("no policy left");
        assert_eq!(none.code, ResponseError::InvalidConfig.code());
        assert!(none.message.contains("cleanup.policy"), "{}", none.message);
        let not_a_list = apply(&base, &[change("retention.ms", Op::Append, Some("5"))])
            .expect_err("append to a number");
        assert_eq!(not_a_list.code, ResponseError::InvalidConfig.code());
        assert!(
            not_a_list.message.contains("retention.ms"),
            "{}",
            not_a_list.message
        );
    }

    #[test]
    fn bad_changes_are_refused_naming_the_config() {
        let base = TopicConfig::default();
        let unknown = apply(&base, &[set("compression.type", "zstd")]).expect_err("unknown");
        assert_eq!(unknown.code, ResponseError::InvalidConfig.code());
        assert!(
            unknown.message.contains("compression.type"),
            "{}",
            unknown.message
        );
        let bad = apply(&base, &[set("retention.ms", "soon")]).expect_err("bad value");
        assert_eq!(bad.code, ResponseError::InvalidConfig.code());
        assert!(bad.message.contains("retention.ms"), "{}", bad.message);
        let small = apply(&base, &[set("segment.bytes", "10")]).expect_err("out of range");
        assert!(small.message.contains("segment.bytes"), "{}", small.message);
        let null = apply(&base, &[change("retention.ms", Op::Set, None)]).expect_err("null");
        assert_eq!(null.code, ResponseError::InvalidRequest.code());
        let twice =
            apply(&base, &[set("retention.ms", "1"), set("retention.ms", "2")]).expect_err("twice");
        assert_eq!(twice.code, ResponseError::InvalidRequest.code());
    }

    fn resource(kind: i8, name: &str, configs: Vec<AlterableConfig>) -> AlterConfigsResource {
        AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
            .with_configs(configs)
    }

    fn config(name: &str, op: i8, value: Option<&str>) -> AlterableConfig {
        AlterableConfig::default()
            .with_name(StrBytes::from_string(name.to_owned()))
            .with_config_operation(op)
            .with_value(value.map(|v| StrBytes::from_string(v.to_owned())))
    }

    #[test]
    fn the_log_gets_the_change_unless_validate_only_and_nothing_of_a_refused_topic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 1, TopicConfig::default())
            .expect("create");
        let broker = broker_entries(&BrokerConfig::default());
        let alter = |validate_only, configs: Vec<AlterableConfig>| {
            let request = IncrementalAlterConfigsRequest::default()
                .with_resources(vec![resource(RESOURCE_TOPIC, "snacks", configs)])
                .with_validate_only(validate_only);
            handle(&request, &log, &broker).responses[0].clone()
        };
        let retention = |log: &Log| log.topic("snacks").expect("topic").config().retention_ms;
        let checked = alter(true, vec![config("retention.ms", 0, Some("60000"))]);
        assert_eq!((checked.error_code, checked.error_message), (0, None));
        assert_eq!(retention(&log), TopicConfig::default().retention_ms);
        let done = alter(false, vec![config("retention.ms", 0, Some("60000"))]);
        assert_eq!(done.error_code, 0);
        assert_eq!(retention(&log), Some(60_000));
        // The second change is bad: the first is not applied either.
        let refused = alter(
            false,
            vec![
                config("retention.ms", 0, Some("1000")),
                config("segment.ms", 0, Some("never")),
            ],
        );
        assert_eq!(refused.error_code, ResponseError::InvalidConfig.code());
        assert!(refused
            .error_message
            .expect("message")
            .contains("segment.ms"));
        assert_eq!(retention(&log), Some(60_000));
        let unknown_op = alter(false, vec![config("retention.ms", 7, Some("1"))]);
        assert_eq!(unknown_op.error_code, ResponseError::InvalidRequest.code());
    }

    #[test]
    fn unknown_topics_brokers_and_other_resources_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let broker = broker_entries(&BrokerConfig::default());
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            resource(
                RESOURCE_TOPIC,
                "nothing",
                vec![config("retention.ms", 0, Some("1"))],
            ),
            resource(
                RESOURCE_BROKER,
                "0",
                vec![config("num.partitions", 0, Some("3"))],
            ),
            resource(RESOURCE_BROKER, "0", vec![]),
            resource(RESOURCE_BROKER, "7", vec![]),
            resource(8, "x", vec![]),
        ]);
        let codes: Vec<i16> = handle(&request, &log, &broker)
            .responses
            .iter()
            .map(|r| r.error_code)
            .collect();
        assert_eq!(
            codes,
            vec![
                ResponseError::UnknownTopicOrPartition.code(),
                ResponseError::InvalidConfig.code(),
                0,
                ResponseError::InvalidRequest.code(),
                ResponseError::InvalidRequest.code(),
            ]
        );
    }
}
