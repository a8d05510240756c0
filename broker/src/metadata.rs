//! Metadata: the topics, their partitions, and this broker as every partition's
//! leader (node id 0, one replica, in sync).

use brook_log::{Log, LogError, TopicConfig};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::info;

use crate::error_code;

/// The node id of the one broker (Kafka's `node.id`).
pub const NODE_ID: i32 = 0;

/// The cluster id clients see.
pub const CLUSTER_ID: &str = "brook";

/// Where clients reach this broker, and whether Metadata creates missing topics.
#[derive(Debug, Clone)]
pub struct Advertised {
    /// Host clients connect to (the listen address).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Kafka's `auto.create.topics.enable`: a Metadata request for a missing topic
    /// that allows it (every version before 4, and v4+ with
    /// `allow_auto_topic_creation`) creates it with `default_partitions` partitions.
    /// brook's default is off (`brook broker --auto-create-topics` turns it on): a
    /// mistyped topic name is an error, not a new topic.
    pub auto_create_topics: bool,
    /// Kafka's `num.partitions`: partitions of an auto-created topic and of a
    /// CreateTopics request that leaves the count to the broker (-1). Default 1.
    pub default_partitions: u32,
}

/// The Metadata response for `request` (decoded at `version`).
pub fn handle(
    request: &MetadataRequest,
    version: i16,
    log: &Log,
    advertised: &Advertised,
) -> MetadataResponse {
    // All topics: a null list (v1+), or an empty one in v0.
    let names: Vec<String> = match &request.topics {
        None => log.topics(),
        Some(t) if t.is_empty() && version == 0 => log.topics(),
        Some(t) => t
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect(),
    };
    let allow_create =
        advertised.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
    let topics = names
        .into_iter()
        .map(|name| describe(log, &name, allow_create, advertised.default_partitions))
        .collect();
    let broker = MetadataResponseBroker::default()
        .with_node_id(BrokerId(NODE_ID))
        .with_host(StrBytes::from_string(advertised.host.clone()))
        .with_port(i32::from(advertised.port));
    MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(NODE_ID))
        .with_topics(topics)
}

fn describe(log: &Log, name: &str, allow_create: bool, partitions: u32) -> MetadataResponseTopic {
    let topic = MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))));
    let found = match log.topic(name) {
        Err(LogError::UnknownTopic(_)) if allow_create => {
            match log.create_topic(name, partitions, TopicConfig::default()) {
                Ok(t) => {
                    info!(topic = name, partitions, "auto-created topic (Metadata)");
                    Ok(t)
                }
                // Created by another request meanwhile.
                Err(LogError::TopicExists(_)) => log.topic(name),
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    match found {
        Ok(t) => {
            let partitions = (0..t.partition_count())
                .map(|p| {
                    MetadataResponsePartition::default()
                        .with_partition_index(p as i32)
                        .with_leader_id(BrokerId(NODE_ID))
                        .with_leader_epoch(0)
                        .with_replica_nodes(vec![BrokerId(NODE_ID)])
                        .with_isr_nodes(vec![BrokerId(NODE_ID)])
                })
                .collect();
            topic.with_partitions(partitions)
        }
        Err(LogError::UnknownTopic(_)) => {
            topic.with_error_code(ResponseError::UnknownTopicOrPartition.code())
        }
        Err(e) => topic.with_error_code(error_code(&e)),
    }
}

#[cfg(test)]
mod tests {
    use brook_log::LogOptions;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;

    use super::*;

    fn advertised(auto_create_topics: bool) -> Advertised {
        Advertised {
            host: "127.0.0.1".into(),
            port: 9092,
            auto_create_topics,
            default_partitions: 2,
        }
    }

    fn request(names: &[&str]) -> MetadataRequest {
        MetadataRequest::default()
            .with_topics(Some(
                names
                    .iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(true)
    }

    fn open() -> (tempfile::TempDir, Log) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = LogOptions {
            maintenance_interval_ms: None,
            ..LogOptions::default()
        };
        let log = Log::open(dir.path(), options).expect("open log");
        (dir, log)
    }

    #[test]
    fn lists_partitions_led_by_this_broker_and_reports_unknown_topics() {
        let (_dir, log) = open();
        log.create_topic("snacks", 3, TopicConfig::default())
            .expect("create");
        let r = handle(&request(&["snacks", "nope"]), 9, &log, &advertised(false));
        assert_eq!(r.brokers.len(), 1);
        assert_eq!(r.brokers[0].port, 9092);
        assert_eq!(r.topics[0].error_code, 0);
        assert_eq!(r.topics[0].partitions.len(), 3);
        assert!(r.topics[0]
            .partitions
            .iter()
            .all(|p| p.leader_id == BrokerId(NODE_ID)));
        assert_eq!(
            r.topics[1].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        // Off by default: nothing was created.
        assert_eq!(log.topics(), vec!["snacks".to_string()]);
    }

    #[test]
    fn auto_creates_only_when_enabled_and_allowed() {
        let (_dir, log) = open();
        let mut req = request(&["fresh"]);
        req.allow_auto_topic_creation = false;
        let r = handle(&req, 9, &log, &advertised(true));
        assert_eq!(
            r.topics[0].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        let r = handle(&request(&["fresh"]), 9, &log, &advertised(true));
        assert_eq!(r.topics[0].error_code, 0);
        assert_eq!(r.topics[0].partitions.len(), 2);
    }

    #[test]
    fn a_null_list_means_every_topic() {
        let (_dir, log) = open();
        log.create_topic("a", 1, TopicConfig::default()).expect("a");
        log.create_topic("b", 1, TopicConfig::default()).expect("b");
        let r = handle(
            &MetadataRequest::default().with_topics(None),
            9,
            &log,
            &advertised(false),
        );
        assert_eq!(r.topics.len(), 2);
    }
}
