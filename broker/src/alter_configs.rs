//! AlterConfigs, the legacy form (before KIP-339): a resource's configs are replaced
//! as a whole, so every topic config the request does not name returns to its
//! default (Kafka's rule; clients that keep the others send them too, as
//! kafka-python does before falling back to this API). The same changes as
//! IncrementalAlterConfigs then: a SET of each named config and a DELETE of every
//! other, with the same validation and answers ([`crate::incremental_alter_configs`]).

use brook_log::{Log, TopicConfig};
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use crate::describe_configs::{ConfigEntry, RESOURCE_TOPIC};
use crate::incremental_alter_configs::{alter_resource, Change, Op, Refusal};

/// The AlterConfigs response.
pub fn handle(
    request: &AlterConfigsRequest,
    log: &Log,
    broker: &[ConfigEntry],
) -> AlterConfigsResponse {
    let responses = request
        .resources
        .iter()
        .map(|r| {
            let mut changes: Vec<Change<'_>> = r
                .configs
                .iter()
                .map(|c| Change {
                    name: c.name.as_str(),
                    op: Op::Set,
                    value: c.value.as_deref(),
                })
                .collect();
            if r.resource_type == RESOURCE_TOPIC {
                for name in TopicConfig::NAMES {
                    if !changes.iter().any(|c| c.name == name) {
                        changes.push(Change {
                            name,
                            op: Op::Delete,
                            value: None,
                        });
                    }
                }
            }
            let result = alter_resource(
                log,
                r.resource_type,
                r.resource_name.as_str(),
                &changes,
                request.validate_only,
                broker,
            );
            let (code, message) = Refusal::answer(result);
            AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use brook_log::LogOptions;
    use kafka_protocol::error::ResponseError;
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn request(configs: &[(&str, &str)], validate_only: bool) -> AlterConfigsRequest {
        let configs = configs
            .iter()
            .map(|(n, v)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string((*n).to_owned()))
                    .with_value(Some(StrBytes::from_string((*v).to_owned())))
            })
            .collect();
        AlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_static_str("snacks"))
                .with_configs(configs)])
            .with_validate_only(validate_only)
    }

    #[test]
    fn the_named_configs_replace_the_whole_set() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let before = TopicConfig {
            segment_bytes: 4096,
            ..TopicConfig::default()
        };
        log.create_topic("snacks", 1, before.clone())
            .expect("create");
        let config = |log: &Log| (*log.topic("snacks").expect("topic").config()).clone();

        let checked = handle(&request(&[("retention.ms", "60000")], true), &log, &[]);
        assert_eq!(checked.responses[0].error_code, 0);
        assert_eq!(config(&log), before);

        let r = handle(&request(&[("retention.ms", "60000")], false), &log, &[]);
        assert_eq!(r.responses[0].error_code, 0);
        let after = config(&log);
        assert_eq!(after.retention_ms, Some(60_000));
        // Not named: back to the default, as Kafka's AlterConfigs.
        assert_eq!(after.segment_bytes, TopicConfig::default().segment_bytes);

        let r = handle(&request(&[("no.such.config", "1")], false), &log, &[]);
        assert_eq!(
            r.responses[0].error_code,
            ResponseError::InvalidConfig.code()
        );
        let message = r.responses[0].error_message.as_deref().expect("message");
        assert!(message.contains("no.such.config"), "{message}");
        assert_eq!(config(&log), after);
    }
}
