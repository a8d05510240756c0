//! OffsetCommit and OffsetFetch: a group's committed offsets, kept in the log's
//! committed-offset store (so `brook group describe` and its lag see them).
//!
//! A commit is checked by the group's generation first ([`Coordinator::commit`]:
//! ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS as Kafka answers) and
//! written under the same lock. The store keeps the offset only: the commit's
//! metadata string and leader epoch are not kept, and OffsetFetch returns an empty
//! metadata string and leader epoch -1.

use brook_log::{CommitIdentity, Log};
use brook_log::{LogError, TopicPartition};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::coordinator::Coordinator;
use crate::error_code;

/// An OffsetCommit: every partition gets the same error when the commit is
/// refused as a whole (Kafka's rule), or its own (an unknown partition, a negative
/// offset).
pub fn offset_commit(
    coordinator: &Coordinator,
    request: &OffsetCommitRequest,
    log: &Log,
) -> OffsetCommitResponse {
    let group = request.group_id.0.as_str();
    // Per partition: its error, or the offset to write.
    let mut decided: Vec<(usize, usize, Result<TopicPartition, i16>, u64)> = Vec::new();
    let mut offsets: Vec<(TopicPartition, u64)> = Vec::new();
    for (ti, topic) in request.topics.iter().enumerate() {
        for (pi, p) in topic.partitions.iter().enumerate() {
            let tp = u32::try_from(p.partition_index)
                .ok()
                .filter(|&n| {
                    log.topic(topic.name.0.as_str())
                        .is_ok_and(|t| n < t.partition_count())
                })
                .map(|n| TopicPartition::new(topic.name.0.to_string(), n));
            let offset = u64::try_from(p.committed_offset).ok();
            let d = match (tp, offset) {
                (None, _) => Err(ResponseError::UnknownTopicOrPartition.code()),
                (Some(_), None) => Err(ResponseError::OffsetOutOfRange.code()),
                (Some(tp), Some(o)) => {
                    offsets.push((tp.clone(), o));
                    Ok(tp)
                }
            };
            decided.push((ti, pi, d, offset.unwrap_or(0)));
        }
    }
    let written = coordinator.commit(
        group,
        request.generation_id_or_member_epoch,
        &request.member_id,
        request.group_instance_id.as_deref(),
        || log.commit_offsets(group, &CommitIdentity::Standalone, &offsets),
    );
    let whole: i16 = match written {
        Ok(Ok(())) => 0,
        Ok(Err(LogError::InvalidName(_))) => ResponseError::InvalidGroupId.code(),
        Ok(Err(e)) => error_code(&e),
        Err(e) => e.code(),
    };
    let topics = request
        .topics
        .iter()
        .enumerate()
        .map(|(ti, topic)| {
            let partitions = topic
                .partitions
                .iter()
                .enumerate()
                .map(|(pi, p)| {
                    let own = decided
                        .iter()
                        .find(|(t, q, _, _)| (*t, *q) == (ti, pi))
                        .and_then(|(_, _, d, _)| d.as_ref().err().copied());
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(own.unwrap_or(whole))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// An OffsetFetch (v1-v7, one group): the committed offset of each partition asked
/// for, -1 where none is committed; `topics: null` (v2+) asks for every partition
/// the group has committed.
pub fn offset_fetch(request: &OffsetFetchRequest, version: i16, log: &Log) -> OffsetFetchResponse {
    let group = request.group_id.0.as_str();
    let partition = |index: i32, offset: Option<u64>| {
        OffsetFetchResponsePartition::default()
            .with_partition_index(index)
            .with_committed_offset(offset.and_then(|o| i64::try_from(o).ok()).unwrap_or(-1))
            .with_metadata(Some(StrBytes::default()))
    };
    let topics = match &request.topics {
        Some(topics) => topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partition_indexes
                    .iter()
                    .map(|&i| {
                        let offset = u32::try_from(i).ok().and_then(|n| {
                            log.committed_offset(
                                group,
                                &TopicPartition::new(t.name.0.to_string(), n),
                            )
                        });
                        partition(i, offset)
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions)
            })
            .collect(),
        None => {
            let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
            for lag in log.group_lag(group).unwrap_or_default() {
                let Some(committed) = lag.committed else {
                    continue;
                };
                let p = partition(
                    i32::try_from(lag.partition).unwrap_or(i32::MAX),
                    Some(committed),
                );
                match topics.last_mut() {
                    Some(t) if t.name.0.as_str() == lag.topic => t.partitions.push(p),
                    _ => topics.push(
                        OffsetFetchResponseTopic::default()
                            .with_name(TopicName(StrBytes::from_string(lag.topic.clone())))
                            .with_partitions(vec![p]),
                    ),
                }
            }
            topics
        }
    };
    let response = OffsetFetchResponse::default().with_topics(topics);
    if version >= 2 {
        response.with_error_code(0)
    } else {
        response
    }
}
