//! Every version ApiVersions advertises is served end to end: a request encoded at that
//! version (as a client would) is parsed, handled against a log with data, and its
//! response encodes at that version (the codec refuses a field the version lacks, as it
//! did for ListOffsets' leader epoch before v4, which kcat found).

use brook_broker::api_versions::SUPPORTED;
use brook_broker::frame::{self, Decoded, Request};
use brook_broker::group::{delete_groups, membership, offset_delete, offsets, Coordinator, Limits};
use brook_broker::metadata::Advertised;
use brook_broker::producers::Producers;
use brook_broker::sasl::{Authenticator, Mechanism, ScramCredential, Users};
use brook_broker::transactions::Transactions;
use brook_broker::{
    alter_configs, create_partitions, create_topics, delete_topics, describe_configs, fetch,
    incremental_alter_configs, list_offsets, metadata, produce,
};
use brook_core::time::ManualClock;
use brook_log::{CommitIdentity, Log, LogOptions, ProducerRecord, TopicConfig, TopicPartition};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource, AlterableConfig as LegacyConfig,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncrementalResource, AlterableConfig,
};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AlterConfigsRequest, ApiKey,
    ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, DescribeGroupsRequest, EndTxnRequest,
    FetchRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, ProduceRequest, ProducerId, RequestHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

fn group(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

fn txn_id() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str("tx"))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn batch() -> Bytes {
    let record = Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_000,
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"v")),
        headers: IndexMap::new(),
        delete_horizon: false,
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&record], &options).expect("batch");
    buf.freeze()
}

/// A request frame of `api` at `version` as a client encodes it.
fn frame_of(api: ApiKey, version: i16, n: usize) -> Bytes {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(5)
        .with_client_id(Some(StrBytes::from_static_str("versions")))
        .encode(&mut buf, api.request_header_version(version))
        .expect("header");
    let topic = format!("t{n}");
    match api {
        ApiKey::ApiVersions => ApiVersionsRequest::default().encode(&mut buf, version),
        ApiKey::Metadata => MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("snacks")))
            ]))
            .encode(&mut buf, version),
        ApiKey::CreateTopics => CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(&topic))
                .with_num_partitions(2)
                .with_replication_factor(1)])
            .encode(&mut buf, version),
        ApiKey::Produce => ProduceRequest::default()
            .with_acks(-1)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("snacks"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch()))])])
            .encode(&mut buf, version),
        ApiKey::Fetch => FetchRequest::default()
            .with_max_bytes(1 << 20)
            .with_isolation_level(i8::from(version >= 4))
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("snacks"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])])
            .encode(&mut buf, version),
        ApiKey::ListOffsets => ListOffsetsRequest::default()
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("snacks"))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(-1),
                    ListOffsetsPartition::default().with_timestamp(500),
                ])])
            .encode(&mut buf, version),
        ApiKey::FindCoordinator => FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str("g"))
            .encode(&mut buf, version),
        // A group of its own per version: each join completes at once.
        ApiKey::JoinGroup => JoinGroupRequest::default()
            .with_group_id(group(&format!("g{n}")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(if version >= 1 { 10_000 } else { -1 })
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(Bytes::from_static(b"m"))])
            .encode(&mut buf, version),
        ApiKey::SyncGroup => SyncGroupRequest::default()
            .with_group_id(group("g"))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_static_str("nobody"))
            .encode(&mut buf, version),
        ApiKey::Heartbeat => HeartbeatRequest::default()
            .with_group_id(group("g"))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_static_str("nobody"))
            .encode(&mut buf, version),
        ApiKey::LeaveGroup if version < 3 => LeaveGroupRequest::default()
            .with_group_id(group("g"))
            .with_member_id(StrBytes::from_static_str("nobody"))
            .encode(&mut buf, version),
        ApiKey::LeaveGroup => LeaveGroupRequest::default()
            .with_group_id(group("g"))
            .with_members(vec![
                MemberIdentity::default().with_member_id(StrBytes::from_static_str("nobody"))
            ])
            .encode(&mut buf, version),
        ApiKey::OffsetCommit => OffsetCommitRequest::default()
            .with_group_id(group("solo"))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(name("snacks"))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(1)])])
            .encode(&mut buf, version),
        ApiKey::OffsetFetch => OffsetFetchRequest::default()
            .with_group_id(group("solo"))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name("snacks"))
                .with_partition_indexes(vec![0])]))
            .encode(&mut buf, version),
        ApiKey::ListGroups => ListGroupsRequest::default().encode(&mut buf, version),
        ApiKey::DescribeGroups => DescribeGroupsRequest::default()
            .with_groups(vec![group("g")])
            .encode(&mut buf, version),
        // The topic t{n} is created before the request is handled.
        ApiKey::DeleteTopics if version >= 6 => DeleteTopicsRequest::default()
            .with_topics(vec![
                DeleteTopicState::default().with_name(Some(name(&topic)))
            ])
            .encode(&mut buf, version),
        ApiKey::DeleteTopics => DeleteTopicsRequest::default()
            .with_topic_names(vec![name(&topic)])
            .encode(&mut buf, version),
        // One partition more each time (snacks has 1 to start with).
        ApiKey::CreatePartitions => CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("snacks"))
                .with_count(i32::from(version) + 2)
                .with_assignments(None)])
            .encode(&mut buf, version),
        ApiKey::DescribeConfigs => DescribeConfigsRequest::default()
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(describe_configs::RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_static_str("snacks"))
                .with_configuration_keys(None)])
            .with_include_documentation(version >= 3)
            .encode(&mut buf, version),
        // A topic of its own, so the other APIs' data keeps its configs.
        ApiKey::AlterConfigs => AlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(describe_configs::RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_static_str("configs"))
                .with_configs(vec![LegacyConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("60000")))])])
            .encode(&mut buf, version),
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::default()
            .with_resources(vec![IncrementalResource::default()
                .with_resource_type(describe_configs::RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_static_str("configs"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("segment.bytes"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("1048576")))])])
            .encode(&mut buf, version),
        // A group of its own each time (its offsets committed by the handler's arm).
        ApiKey::DeleteGroups => DeleteGroupsRequest::default()
            .with_groups_names(vec![group(&format!("gone{n}"))])
            .encode(&mut buf, version),
        ApiKey::OffsetDelete => OffsetDeleteRequest::default()
            .with_group_id(group("solo"))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(name("snacks"))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(0)
                ])])
            .encode(&mut buf, version),
        // One transactional id through every version: InitProducerId five times (its
        // producer id 0, the first of the log; epochs 0 to 4), then one transaction.
        ApiKey::InitProducerId => InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .encode(&mut buf, version),
        ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id())
            .with_v3_and_below_producer_id(ProducerId(0))
            .with_v3_and_below_producer_epoch(4)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name("snacks"))
                .with_partitions(vec![0])])
            .encode(&mut buf, version),
        ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn_id())
            .with_producer_id(ProducerId(0))
            .with_producer_epoch(4)
            .with_group_id(group("solo"))
            .encode(&mut buf, version),
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id())
            .with_group_id(group("solo"))
            .with_producer_id(ProducerId(0))
            .with_producer_epoch(4)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(name("snacks"))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(1)])])
            .encode(&mut buf, version),
        ApiKey::EndTxn => EndTxnRequest::default()
            .with_transactional_id(txn_id())
            .with_producer_id(ProducerId(0))
            .with_producer_epoch(4)
            .with_committed(true)
            .encode(&mut buf, version),
        ApiKey::SaslHandshake => SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"))
            .encode(&mut buf, version),
        ApiKey::SaslAuthenticate => SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from_static(b"n,,n=alice,r=abc"))
            .encode(&mut buf, version),
        other => panic!("{other:?} is advertised but this test does not know it"),
    }
    .expect("body");
    buf.freeze()
}

/// A connection on a SASL listener with user alice.
fn sasl() -> Authenticator {
    let mut users = Users::default();
    let m = Mechanism::ScramSha256;
    users
        .set(
            "alice",
            m,
            ScramCredential::derive(m, b"pw", vec![1; 16], 4096),
        )
        .expect("name");
    Authenticator::sasl(std::sync::Arc::new(users), "nonce".into())
}

#[test]
fn every_advertised_version_parses_handles_and_encodes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("snacks", 1, TopicConfig::default())
        .and_then(|t| t.append(vec![ProducerRecord::new("x").with_timestamp(1_000)]))
        .expect("topic with a record");
    let advertised = Advertised {
        host: "127.0.0.1".into(),
        port: 9092,
        auto_create_topics: false,
        default_partitions: 1,
    };
    let groups = Coordinator::new(Limits::default(), ManualClock::new(0).shared());
    let producers = Producers::new(ManualClock::new(0).shared());
    let txns = Transactions::default();
    let code = |e: ResponseError| e.code();
    let mut n = 0;
    for &(api, min, max) in SUPPORTED {
        for version in min..=max {
            n += 1;
            let parsed = frame::parse(frame_of(api, version, n))
                .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
            let Decoded::Request {
                header, request, ..
            } = parsed
            else {
                panic!("{api:?} v{version}: not a request");
            };
            assert_eq!(header.correlation_id, 5);
            let encoded = match request {
                Request::ApiVersions => frame::encode_response(
                    5,
                    api,
                    version,
                    &brook_broker::api_versions::handle(version),
                ),
                Request::Metadata(r) => {
                    let resp = metadata::handle(&r, version, &log, &advertised);
                    assert_eq!(resp.topics[0].error_code, 0, "Metadata v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::CreateTopics(r) => {
                    let resp = create_topics::handle(&r, &log, 1);
                    assert_eq!(resp.topics[0].error_code, 0, "CreateTopics v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::Produce(r) => {
                    let resp = produce::handle(&r, &log, &producers, &txns);
                    let p = &resp.responses[0].partition_responses[0];
                    assert_eq!(p.error_code, 0, "Produce v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::Fetch(r) => {
                    let fetched = fetch::handle(&r, &log);
                    assert!(fetched.bytes > 0, "Fetch v{version}");
                    frame::encode_response(5, api, version, &fetched.response)
                }
                Request::ListOffsets(r) => {
                    let resp = list_offsets::handle(&r, version, &log);
                    let offsets: Vec<i64> =
                        resp.topics[0].partitions.iter().map(|p| p.offset).collect();
                    assert_eq!(offsets[1], 0, "ListOffsets v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::FindCoordinator(r) => {
                    let resp = membership::find_coordinator(&r, version, &advertised);
                    assert_eq!((resp.error_code, resp.port), (0, 9092), "v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::JoinGroup(r) => {
                    let resp = futures::executor::block_on(membership::join_group(
                        &groups,
                        r,
                        version,
                        "versions",
                        "127.0.0.1",
                    ));
                    // v4+: the member-id handshake first (KIP-394).
                    let want = if version >= 4 {
                        code(ResponseError::MemberIdRequired)
                    } else {
                        0
                    };
                    assert_eq!(resp.error_code, want, "JoinGroup v{version}");
                    assert!(!resp.member_id.is_empty(), "JoinGroup v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::SyncGroup(r) => {
                    let resp =
                        futures::executor::block_on(membership::sync_group(&groups, r, version));
                    assert_eq!(resp.error_code, code(ResponseError::UnknownMemberId));
                    frame::encode_response(5, api, version, &resp)
                }
                Request::Heartbeat(r) => {
                    let resp = membership::heartbeat(&groups, &r);
                    assert_eq!(resp.error_code, code(ResponseError::UnknownMemberId));
                    frame::encode_response(5, api, version, &resp)
                }
                Request::LeaveGroup(r) => {
                    let resp = membership::leave_group(&groups, &r, version);
                    let error = resp
                        .members
                        .first()
                        .map_or(resp.error_code, |m| m.error_code);
                    assert_eq!(error, code(ResponseError::UnknownMemberId), "v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::OffsetCommit(r) => {
                    let resp = offsets::offset_commit(&groups, &r, &log);
                    let p = &resp.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "OffsetCommit v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::OffsetFetch(r) => {
                    let resp = offsets::offset_fetch(&r, version, &log);
                    // The OffsetCommit versions ran first (SUPPORTED's order).
                    let p = &resp.topics[0].partitions[0];
                    assert_eq!(p.committed_offset, 1, "OffsetFetch v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::ListGroups(r) => {
                    let resp = membership::list_groups(&groups, &r, version, &log);
                    // With members (the joins) and with only commits ("solo").
                    let names: Vec<&str> =
                        resp.groups.iter().map(|g| g.group_id.0.as_str()).collect();
                    assert!(names.contains(&"solo"), "ListGroups v{version}: {names:?}");
                    assert!(
                        names.iter().any(|n| n.starts_with('g')),
                        "ListGroups v{version}: {names:?}"
                    );
                    frame::encode_response(5, api, version, &resp)
                }
                Request::DescribeGroups(r) => {
                    let resp = membership::describe_groups(&groups, &r, &log);
                    assert_eq!(resp.groups[0].group_state.as_str(), "Dead");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::DeleteTopics(r) => {
                    log.create_topic(&format!("t{n}"), 1, TopicConfig::default())
                        .expect("a topic to delete");
                    let resp = delete_topics::handle(&r, &log);
                    assert_eq!(resp.responses[0].error_code, 0, "DeleteTopics v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::CreatePartitions(r) => {
                    let resp = create_partitions::handle(&r, &log);
                    assert_eq!(resp.results[0].error_code, 0, "CreatePartitions v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::DescribeConfigs(r) => {
                    let resp = describe_configs::handle(&r, &log, &[]);
                    let result = &resp.results[0];
                    assert_eq!(result.error_code, 0, "DescribeConfigs v{version}");
                    assert!(!result.configs.is_empty(), "DescribeConfigs v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::AlterConfigs(r) => {
                    let _ = log.create_topic("configs", 1, TopicConfig::default());
                    let resp = alter_configs::handle(&r, &log, &[]);
                    assert_eq!(resp.responses[0].error_code, 0, "AlterConfigs v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::IncrementalAlterConfigs(r) => {
                    let _ = log.create_topic("configs", 1, TopicConfig::default());
                    let resp = incremental_alter_configs::handle(&r, &log, &[]);
                    let result = &resp.responses[0];
                    assert_eq!(result.error_code, 0, "IncrementalAlterConfigs v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::DeleteGroups(r) => {
                    let gone = format!("gone{n}");
                    log.commit_offsets(
                        &gone,
                        &CommitIdentity::Standalone,
                        &[(TopicPartition::new("snacks", 0), 1)],
                    )
                    .expect("an offset to delete");
                    let resp = delete_groups::delete_groups(&groups, &r, &log);
                    assert_eq!(resp.results[0].error_code, 0, "DeleteGroups v{version}");
                    assert!(log
                        .committed_offset(&gone, &TopicPartition::new("snacks", 0))
                        .is_none());
                    frame::encode_response(5, api, version, &resp)
                }
                Request::OffsetDelete(r) => {
                    let resp = offset_delete::offset_delete(&groups, &r, &log);
                    assert_eq!(resp.error_code, 0, "OffsetDelete v{version}");
                    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
                    frame::encode_response(5, api, version, &resp)
                }
                Request::InitProducerId(r) => {
                    let resp = txns.init_producer_id(&r, &log, &producers);
                    assert_eq!(
                        (resp.error_code, resp.producer_id.0, resp.producer_epoch),
                        (0, 0, version),
                        "InitProducerId v{version}"
                    );
                    frame::encode_response(5, api, version, &resp)
                }
                Request::AddPartitionsToTxn(r) => {
                    let resp = txns.add_partitions(&r, version, &log);
                    let p = &resp.results_by_topic_v3_and_below[0].results_by_partition[0];
                    assert_eq!(p.partition_error_code, 0, "AddPartitionsToTxn v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::AddOffsetsToTxn(r) => {
                    let resp = txns.add_offsets(&r, version);
                    assert_eq!(resp.error_code, 0, "AddOffsetsToTxn v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::TxnOffsetCommit(r) => {
                    let resp = txns.txn_offset_commit(&r, version, &log, &groups);
                    let p = &resp.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "TxnOffsetCommit v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                Request::EndTxn(r) => {
                    // The first commits, the others are retries of it.
                    let resp = txns.end_txn(&r, version);
                    assert_eq!(resp.error_code, 0, "EndTxn v{version}");
                    frame::encode_response(5, api, version, &resp)
                }
                // A fresh connection's authentication for each request.
                Request::SaslHandshake(r) => {
                    let answer = sasl().handshake(&r.mechanism, version);
                    assert_eq!(answer.error_code, 0, "SaslHandshake v{version}");
                    frame::encode_response(5, api, version, &answer.response())
                }
                Request::SaslAuthenticate(r) => {
                    let mut auth = sasl();
                    auth.handshake("SCRAM-SHA-256", 1);
                    let answer = auth.authenticate(&r.auth_bytes);
                    assert_eq!(answer.error_code, 0, "SaslAuthenticate v{version}");
                    frame::encode_response(5, api, version, &answer.response())
                }
            };
            encoded.unwrap_or_else(|e| panic!("{api:?} v{version} response: {e}"));
        }
    }
}
