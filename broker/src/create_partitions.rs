//! CreatePartitions: grows topics to a new partition count ([`Log::add_partitions`]).
//!
//! Kafka's answers: `count` is the new total and must be larger than the current one
//! (INVALID_PARTITIONS otherwise); an unknown topic is UNKNOWN_TOPIC_OR_PARTITION;
//! explicit replica assignments are INVALID_REPLICA_ASSIGNMENT (one broker holds
//! one copy); a topic named twice in one request is INVALID_REQUEST for each
//! mention; `validate_only` checks without adding. As in Kafka, keyed records map
//! to partitions by `murmur2(key) % count`, so keys move to other partitions from
//! then on.

use std::collections::HashMap;

use brook_log::Log;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::info;

use crate::error_code;

/// The CreatePartitions response: one result per topic.
pub fn handle(request: &CreatePartitionsRequest, log: &Log) -> CreatePartitionsResponse {
    let mut mentions: HashMap<&str, usize> = HashMap::new();
    for t in &request.topics {
        *mentions.entry(t.name.0.as_str()).or_default() += 1;
    }
    let results = request
        .topics
        .iter()
        .map(|t| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let outcome = if mentions.get(t.name.0.as_str()).copied().unwrap_or(0) > 1 {
                Err((
                    ResponseError::InvalidRequest.code(),
                    format!("topic {:?} is named more than once", t.name.0.as_str()),
                ))
            } else {
                grow(t, log, request.validate_only)
            };
            match outcome {
                Ok(()) => result,
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}

fn grow(t: &CreatePartitionsTopic, log: &Log, validate_only: bool) -> Result<(), (i16, String)> {
    let name = t.name.0.as_str();
    let topic = log
        .topic(name)
        .map_err(|e| (error_code(&e), e.to_string()))?;
    if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err((
            ResponseError::InvalidReplicaAssignment.code(),
            "assignments: replicas cannot be placed on a single broker (send null)".to_owned(),
        ));
    }
    let current = topic.partition_count();
    let total = u32::try_from(t.count)
        .ok()
        .filter(|&n| n > current)
        .ok_or_else(|| {
            (
                ResponseError::InvalidPartitions.code(),
                format!(
                    "count {}: topic {name:?} has {current} partitions; the new count must be larger",
                    t.count
                ),
            )
        })?;
    if validate_only {
        return Ok(());
    }
    log.add_partitions(name, total)
        .map_err(|e| (error_code(&e), e.to_string()))?;
    info!(
        topic = name,
        partitions = total,
        "added partitions (CreatePartitions)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use brook_log::{LogOptions, TopicConfig};
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsAssignment;
    use kafka_protocol::messages::{BrokerId, TopicName};

    use super::*;

    fn topic(name: &str, count: i32) -> CreatePartitionsTopic {
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_count(count)
    }

    #[test]
    fn grows_topics_and_refuses_what_kafka_refuses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        for name in ["snacks", "drinks", "fixed"] {
            log.create_topic(name, 2, TopicConfig::default())
                .expect("create");
        }
        let request = CreatePartitionsRequest::default().with_topics(vec![
            topic("snacks", 5),
            topic("drinks", 2),
            topic("nothing", 3),
            topic("fixed", 3).with_assignments(Some(vec![
                CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(0)])
            ])),
        ]);
        let r = handle(&request, &log);
        let codes: Vec<i16> = r.results.iter().map(|t| t.error_code).collect();
        assert_eq!(
            codes,
            vec![
                0,
                ResponseError::InvalidPartitions.code(),
                ResponseError::UnknownTopicOrPartition.code(),
                ResponseError::InvalidReplicaAssignment.code(),
            ]
        );
        assert_eq!(log.topic("snacks").expect("snacks").partition_count(), 5);
        assert_eq!(log.topic("drinks").expect("drinks").partition_count(), 2);
        let message = r.results[1].error_message.as_ref().expect("message");
        assert!(message.as_str().contains("has 2 partitions"), "{message:?}");
    }

    #[test]
    fn validate_only_and_duplicates_add_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 1, TopicConfig::default())
            .expect("create");
        let check = CreatePartitionsRequest::default()
            .with_topics(vec![topic("snacks", 4)])
            .with_validate_only(true);
        assert_eq!(handle(&check, &log).results[0].error_code, 0);
        let twice = CreatePartitionsRequest::default()
            .with_topics(vec![topic("snacks", 4), topic("snacks", 6)]);
        let r = handle(&twice, &log);
        assert!(r
            .results
            .iter()
            .all(|t| t.error_code == ResponseError::InvalidRequest.code()));
        assert_eq!(log.topic("snacks").expect("snacks").partition_count(), 1);
    }
}
