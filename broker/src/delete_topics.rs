//! DeleteTopics: topics by name, with their data and every group's committed
//! offsets for them ([`Log::delete_topic`]).
//!
//! Kafka's answers: an unknown topic is UNKNOWN_TOPIC_OR_PARTITION. Versions 6+ may
//! name a topic by its id instead (KIP-516); the log has no topic ids (Metadata is
//! served before v10, so no client has learnt one), so a topic given by id alone is
//! UNKNOWN_TOPIC_ID. The deletion is done when the response is sent (Kafka's
//! `timeout_ms` is then moot).

use brook_log::Log;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::info;

use crate::error_code;

/// The DeleteTopics response: one result per topic asked for (v1-v5 send names,
/// v6+ topic states).
pub fn handle(request: &DeleteTopicsRequest, log: &Log) -> DeleteTopicsResponse {
    let by_name = request.topic_names.iter().map(|n| (Some(n), None));
    let by_state = request
        .topics
        .iter()
        .map(|t| (t.name.as_ref(), Some(t.topic_id)));
    let responses = by_name
        .chain(by_state)
        .map(|(name, id)| {
            let result = DeletableTopicResult::default()
                .with_name(name.cloned())
                .with_topic_id(id.unwrap_or_default());
            let Some(name) = name else {
                return result
                    .with_error_code(ResponseError::UnknownTopicId.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "topic_id: this broker has no topic ids; name the topic",
                    )));
            };
            match log.delete_topic(name.0.as_str()) {
                Ok(()) => {
                    info!(topic = name.0.as_str(), "deleted topic (DeleteTopics)");
                    result
                }
                Err(e) => result
                    .with_error_code(error_code(&e))
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

/// A topic name as the codec carries it.
pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use brook_log::{LogOptions, TopicConfig};
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    #[test]
    fn deletes_named_topics_and_answers_each_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 2, TopicConfig::default())
            .expect("create");
        let request = DeleteTopicsRequest::default()
            .with_topic_names(vec![topic_name("snacks"), topic_name("nothing")]);
        let r = handle(&request, &log);
        let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
        assert_eq!(
            codes,
            vec![0, ResponseError::UnknownTopicOrPartition.code()]
        );
        assert!(log.topics().is_empty());
        // The v1 response encodes (names only).
        let mut buf = bytes::BytesMut::new();
        r.encode(&mut buf, 1).expect("encode v1");
    }

    #[test]
    fn v6_names_are_served_and_ids_are_unknown() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 1, TopicConfig::default())
            .expect("create");
        let request = DeleteTopicsRequest::default().with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic_name("snacks"))),
            DeleteTopicState::default().with_topic_id(
                "5cbb2f1a-0d5c-4ac3-9e33-8a7e3e5d8b7c"
                    .parse()
                    .expect("uuid"),
            ),
        ]);
        let r = handle(&request, &log);
        let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, vec![0, ResponseError::UnknownTopicId.code()]);
        assert!(log.topics().is_empty());
    }
}
