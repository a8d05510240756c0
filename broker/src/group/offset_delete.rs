//! OffsetDelete: removes a group's committed offsets of some partitions, by Kafka's
//! rules (KIP-496):
//!
//! - a group that has neither members nor committed offsets is GROUP_ID_NOT_FOUND;
//! - an empty group (no members) loses the offsets asked for;
//! - a consumer group with members keeps the offsets of every topic a member is
//!   subscribed to (GROUP_SUBSCRIBED_TO_TOPIC for those partitions) and loses the
//!   others; a member whose subscription does not decode counts as subscribed to
//!   everything, as in Kafka ("to be safe");
//! - a group with members of another protocol type is NON_EMPTY_GROUP;
//! - an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION.
//!
//! The check and the write happen under the coordinator's lock, so no member can
//! subscribe in between.

use std::collections::BTreeSet;

use brook_log::{Log, LogError, TopicPartition};
use bytes::Buf;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_protocol_subscription::ConsumerProtocolSubscription;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::protocol::Decodable;

use super::coordinator::Coordinator;
use super::machine::{GroupSummary, State};
use crate::error_code;

/// What the group's state allows to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletable {
    /// Every partition asked for (the group has no members).
    All,
    /// All but these topics' partitions (the members' subscriptions).
    AllBut(BTreeSet<String>),
    /// Nothing: a member's subscription is unknown.
    Nothing,
}

/// Kafka's decision for a group: `live` is its membership (`None` if no member ever
/// joined through this broker), `has_offsets` whether it has committed offsets.
///
/// # Errors
/// GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP.
pub fn deletable(
    live: Option<&GroupSummary>,
    has_offsets: bool,
) -> Result<Deletable, ResponseError> {
    match live {
        None if !has_offsets => Err(ResponseError::GroupIdNotFound),
        Some(g) if g.members.is_empty() && !has_offsets && g.state == State::Empty => {
            Err(ResponseError::GroupIdNotFound)
        }
        None => Ok(Deletable::All),
        Some(g) if g.members.is_empty() => Ok(Deletable::All),
        Some(g) if g.protocol_type != "consumer" => Err(ResponseError::NonEmptyGroup),
        Some(g) => {
            let mut topics = BTreeSet::new();
            for m in &g.members {
                match subscribed_topics(&m.metadata) {
                    Some(t) => topics.extend(t),
                    None => return Ok(Deletable::Nothing),
                }
            }
            Ok(Deletable::AllBut(topics))
        }
    }
}

/// The topics of a consumer's subscription (Kafka's ConsumerProtocol: a version,
/// then the subscription at that version), `None` if it does not decode.
pub fn subscribed_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut buf = bytes::Bytes::copy_from_slice(metadata);
    if buf.remaining() < 2 {
        return None;
    }
    // Newer versions than the codec knows keep the older fields first (Kafka's
    // compatibility rule), so they decode as the newest known one.
    let version = buf.get_i16().clamp(0, 3);
    let s = ConsumerProtocolSubscription::decode(&mut buf, version).ok()?;
    Some(s.topics.iter().map(|t| t.to_string()).collect())
}

/// The OffsetDelete response.
pub fn offset_delete(
    coordinator: &Coordinator,
    request: &OffsetDeleteRequest,
    log: &Log,
) -> OffsetDeleteResponse {
    let group = request.group_id.0.as_str();
    let has_offsets = log.groups().iter().any(|g| g == group);
    coordinator.with_group(group, |live| {
        let allowed = match deletable(live, has_offsets) {
            Ok(a) => a,
            Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
        };
        let mut doomed = Vec::new();
        let mut topics = Vec::with_capacity(request.topics.len());
        for t in &request.topics {
            let name = t.name.0.as_str();
            let count = log.topic(name).map(|t| t.partition_count()).ok();
            let subscribed = match &allowed {
                Deletable::All => false,
                Deletable::AllBut(subscribed) => subscribed.contains(name),
                Deletable::Nothing => true,
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let index = u32::try_from(p.partition_index)
                        .ok()
                        .filter(|&i| count.is_some_and(|c| i < c));
                    let code = match index {
                        None => ResponseError::UnknownTopicOrPartition.code(),
                        Some(_) if subscribed => ResponseError::GroupSubscribedToTopic.code(),
                        Some(i) => {
                            doomed.push(TopicPartition::new(name, i));
                            0
                        }
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        match log.delete_committed_offsets(group, &doomed) {
            Ok(()) => OffsetDeleteResponse::default().with_topics(topics),
            Err(LogError::InvalidName(_)) => OffsetDeleteResponse::default()
                .with_error_code(ResponseError::InvalidGroupId.code()),
            Err(e) => OffsetDeleteResponse::default().with_error_code(error_code(&e)),
        }
    })
}

#[cfg(test)]
mod tests {
    use brook_core::time::ManualClock;
    use brook_log::{CommitIdentity, LogOptions, TopicConfig};
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;
    use crate::group::machine::{Join, Limits, MemberSummary};

    /// A consumer's subscription as librdkafka sends it (version 1).
    fn subscription(topics: &[&str]) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        ConsumerProtocolSubscription::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| StrBytes::from_string((*t).to_owned()))
                    .collect(),
            )
            .encode(&mut buf, 1)
            .expect("encode");
        buf.freeze()
    }

    fn group(protocol_type: &str, metadata: Vec<Bytes>) -> GroupSummary {
        GroupSummary {
            state: State::Stable,
            protocol_type: protocol_type.to_owned(),
            protocol_name: "range".to_owned(),
            generation: 1,
            members: metadata
                .into_iter()
                .enumerate()
                .map(|(i, metadata)| MemberSummary {
                    member_id: format!("m{i}"),
                    group_instance_id: None,
                    client_id: "c".to_owned(),
                    client_host: "127.0.0.1".to_owned(),
                    metadata,
                    assignment: Bytes::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn kafkas_rules_by_group_state() {
        assert_eq!(deletable(None, false), Err(ResponseError::GroupIdNotFound));
        assert_eq!(deletable(None, true), Ok(Deletable::All));
        let g = group(
            "consumer",
            vec![
                subscription(&["snacks"]),
                subscription(&["drinks", "snacks"]),
            ],
        );
        assert_eq!(
            deletable(Some(&g), true),
            Ok(Deletable::AllBut(
                ["drinks".to_owned(), "snacks".to_owned()].into()
            ))
        );
        let g = group("consumer", vec![Bytes::from_static(b"\x00")]);
        assert_eq!(deletable(Some(&g), true), Ok(Deletable::Nothing));
        let g = group("connect", vec![Bytes::new()]);
        assert_eq!(deletable(Some(&g), true), Err(ResponseError::NonEmptyGroup));
    }

    fn request(group: &str, topic: &str, partitions: &[i32]) -> OffsetDeleteRequest {
        OffsetDeleteRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| OffsetDeleteRequestPartition::default().with_partition_index(p))
                        .collect(),
                )])
    }

    #[test]
    fn deletes_unless_a_member_is_subscribed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        for t in ["snacks", "drinks"] {
            log.create_topic(t, 2, TopicConfig::default())
                .expect("create");
        }
        let tp = |t: &str, p| TopicPartition::new(t, p);
        log.commit_offsets(
            "billing",
            &CommitIdentity::Standalone,
            &[
                (tp("snacks", 0), 5),
                (tp("snacks", 1), 6),
                (tp("drinks", 0), 7),
            ],
        )
        .expect("commit");
        let clock = ManualClock::new(0);
        let coordinator = Coordinator::new(
            Limits {
                min_session_timeout_ms: 1,
                ..Limits::default()
            },
            clock.shared(),
        );
        // No members: the offsets asked for go; an unknown partition is refused.
        let r = offset_delete(&coordinator, &request("billing", "snacks", &[0, 9]), &log);
        let codes: Vec<i16> = r.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(
            (r.error_code, codes),
            (0, vec![0, ResponseError::UnknownTopicOrPartition.code()])
        );
        assert_eq!(log.committed_offset("billing", &tp("snacks", 0)), None);
        assert_eq!(log.committed_offset("billing", &tp("snacks", 1)), Some(6));
        // A member subscribed to snacks joins: snacks' offsets stay, drinks' go.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let joined = runtime.block_on(coordinator.join(Join {
            group: "billing".to_owned(),
            member_id: String::new(),
            client_id: "c".to_owned(),
            client_host: "127.0.0.1".to_owned(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".to_owned(),
            protocols: vec![("range".to_owned(), subscription(&["snacks"]))],
            require_known_member_id: false,
            group_instance_id: None,
        }));
        assert_eq!(joined.error, None);
        let r = offset_delete(&coordinator, &request("billing", "snacks", &[1]), &log);
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            ResponseError::GroupSubscribedToTopic.code()
        );
        assert_eq!(log.committed_offset("billing", &tp("snacks", 1)), Some(6));
        let r = offset_delete(&coordinator, &request("billing", "drinks", &[0]), &log);
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
        assert_eq!(log.committed_offset("billing", &tp("drinks", 0)), None);
        // A group nobody knows.
        let r = offset_delete(&coordinator, &request("nobody", "snacks", &[0]), &log);
        assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
    }
}
