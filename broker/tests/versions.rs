//! Every version ApiVersions advertises is served end to end: a request encoded at that
//! version (as a client would) is parsed, handled against a log with data, and its
//! response encodes at that version (the codec refuses a field the version lacks, as it
//! did for ListOffsets' leader epoch before v4, which kcat found).

use brook_broker::api_versions::SUPPORTED;
use brook_broker::frame::{self, Decoded, Request};
use brook_broker::metadata::Advertised;
use brook_broker::{create_topics, fetch, list_offsets, metadata, produce};
use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, FetchRequest, ListOffsetsRequest,
    MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

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
        other => panic!("{other:?} is advertised but this test does not know it"),
    }
    .expect("body");
    buf.freeze()
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
                    let resp = produce::handle(&r, &log);
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
            };
            encoded.unwrap_or_else(|e| panic!("{api:?} v{version} response: {e}"));
        }
    }
}
