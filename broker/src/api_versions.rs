//! ApiVersions: the APIs this broker serves and their version ranges.
//!
//! Only what is served is advertised (Kafka's KIP-35/KIP-511 rule): a client that
//! needs an API that is missing here reports it as unsupported at once. The ranges
//! cover what librdkafka 2.x and kafka-python 2.x negotiate; each one stops before a
//! version that would need something the log does not have (topic ids: Metadata v10,
//! Fetch v13; the max-timestamp query: ListOffsets v7), and starts at the first
//! version using record batches v2 (Produce v3, Fetch v4), the only format the broker
//! reads and writes.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// The served APIs: `(key, min version, max version)`.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 6),
    (ApiKey::Metadata, 0, 9),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 5),
    // Consumer groups (crate::group); OffsetCommit/OffsetFetch stop before the
    // KIP-848 and multi-group versions (v9, v8).
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    // librdkafka 2.x asks for v0-1, kafka-python up to v2.
    (ApiKey::DeleteGroups, 0, 2),
    // Admin: librdkafka 2.x asks for DeleteTopics v0-1, CreatePartitions v0,
    // DescribeConfigs v0-1, OffsetDelete v0; kafka-python up to DeleteTopics v3,
    // DescribeConfigs v2, CreatePartitions v1. The codec starts DeleteTopics and
    // DescribeConfigs at v1. DeleteTopics v6 may name topics by id (answered
    // UNKNOWN_TOPIC_ID: the log has none).
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::OffsetDelete, 0, 0),
    // Topic configs (crate::incremental_alter_configs, crate::alter_configs):
    // librdkafka 2.x asks for IncrementalAlterConfigs v0-1 and AlterConfigs v0-2,
    // kafka-python the same; the codec's whole ranges.
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    // Idempotent and transactional producers (crate::transactions). Each stops
    // before KIP-890's versions (a new epoch per transaction, server-side partition
    // verification); AddPartitionsToTxn v4+ is the brokers' batched form.
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    // SASL SCRAM (crate::sasl); advertised on every listener, as Kafka does.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The version range served for `key`, or `None` if the API is not served.
pub fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

/// Whether `version` of `key` is served.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported(key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// The ApiVersions response. `request_version` beyond the served range gets
/// UNSUPPORTED_VERSION with the table (sent as version 0, which every client reads:
/// KIP-511), so the client retries with a version it finds there.
pub fn handle(request_version: i16) -> ApiVersionsResponse {
    let error = if is_supported(ApiKey::ApiVersions, request_version) {
        0
    } else {
        ResponseError::UnsupportedVersion.code()
    };
    let api_keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertises_exactly_the_served_apis() {
        let r = handle(3);
        assert_eq!(r.error_code, 0);
        let keys: Vec<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
        assert_eq!(
            keys,
            vec![
                0, 1, 2, 3, 18, 19, 8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 20, 37, 32, 47, 33, 44,
                22, 24, 25, 28, 26, 17, 36
            ]
        );
        // Not served: DescribeAcls.
        assert!(supported(ApiKey::DescribeAcls).is_none());
    }

    #[test]
    fn every_advertised_range_is_one_the_codec_knows() {
        for &(key, min, max) in SUPPORTED {
            let codec = key.valid_versions();
            assert!(
                codec.min <= min && max <= codec.max,
                "{key:?} {min}..={max}"
            );
        }
    }

    #[test]
    fn a_too_new_api_versions_request_gets_unsupported_version_and_the_table() {
        let r = handle(9);
        assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
        assert_eq!(r.api_keys.len(), SUPPORTED.len());
    }
}
