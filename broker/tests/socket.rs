//! The server through a real socket: Fetch long polling (a fetch at the end of a
//! partition waits up to `max_wait_ms` for `min_bytes` of records and answers as soon as
//! an append brings them; with none it answers empty at the deadline), Produce with
//! acks=0 (appended, never answered), Produce served while tokio's blocking pool is
//! busy, and a JoinGroup held for a rebalance while other
//! connections are served.

use std::time::Duration;

use brook_broker::{BrokerConfig, Server};
use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const VERSION: i16 = 12;

/// A frame: size prefix, request header of `api` v`version`, and `body`.
fn frame(api: ApiKey, version: i16, correlation_id: i32, body: &impl Encodable) -> Bytes {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api.request_header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("body");
    let mut frame = BytesMut::new();
    frame.put_i32(i32::try_from(buf.len()).expect("small frame"));
    frame.put_slice(&buf);
    frame.freeze()
}

fn fetch_frame(max_wait_ms: i32, offset: i64) -> Bytes {
    let request = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("waits")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    frame(ApiKey::Fetch, VERSION, 1, &request)
}

async fn fetch(stream: &mut TcpStream, max_wait_ms: i32, offset: i64) -> Vec<Vec<u8>> {
    stream
        .write_all(&fetch_frame(max_wait_ms, offset))
        .await
        .expect("send");
    let size = stream.read_i32().await.expect("size");
    let mut buf = vec![0u8; usize::try_from(size).expect("a size")];
    stream.read_exact(&mut buf).await.expect("response");
    let mut buf = Bytes::from(buf);
    let header = ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(VERSION))
        .expect("response header");
    assert_eq!(header.correlation_id, 1);
    let response = FetchResponse::decode(&mut buf, VERSION).expect("fetch response");
    assert!(!buf.has_remaining());
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let mut records = partition.records.clone().unwrap_or_default();
    RecordBatchDecoder::decode_all(&mut records)
        .expect("batches")
        .into_iter()
        .flat_map(|s| s.records)
        .filter_map(|r| r.value.map(|v| v.to_vec()))
        .collect()
}

/// A log with topic `waits` served on a free port.
async fn serve() -> (
    tempfile::TempDir,
    Log,
    tokio::task::JoinHandle<()>,
    TcpStream,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("waits", 1, TopicConfig::default())
        .expect("create");
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..BrokerConfig::default()
    };
    let server = Server::bind(&config, log.clone()).await.expect("bind");
    let addr = server.local_addr();
    let serving = tokio::spawn(async move {
        let _ = server.run().await;
    });
    let stream = TcpStream::connect(addr).await.expect("connect");
    (dir, log, serving, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_at_the_end_waits_for_the_next_append() {
    let (_dir, log, serving, mut stream) = serve().await;
    let topic = log.topic("waits").expect("topic");

    // Nothing arrives: an empty answer once max_wait_ms (200 ms) has passed.
    assert!(fetch(&mut stream, 200, 0).await.is_empty());

    // An append while the fetch waits (max 30 s) is in its answer.
    let appender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        topic
            .append(vec![ProducerRecord::new("late")])
            .expect("append");
    });
    let got = fetch(&mut stream, 30_000, 0).await;
    assert_eq!(got, vec![b"late".to_vec()]);
    appender.await.expect("appender");
    serving.abort();
}

/// A Produce of one record to `waits`.
fn produce_frame(acks: i16, value: &'static [u8]) -> Bytes {
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
        key: None,
        value: Some(Bytes::from_static(value)),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut records = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut records, [&record], &options).expect("batch");
    let produce = ProduceRequest::default()
        .with_acks(acks)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("waits")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.freeze()))])]);
    frame(ApiKey::Produce, 9, 1, &produce)
}

fn end_offset(log: &Log) -> u64 {
    log.topic("waits")
        .and_then(|t| t.partition(0))
        .expect("partition")
        .log_end_offset()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_with_acks_0_appends_and_sends_no_answer() {
    let (_dir, log, serving, mut stream) = serve().await;
    stream
        .write_all(&produce_frame(0, b"unanswered"))
        .await
        .expect("send produce");
    stream
        .write_all(&frame(
            ApiKey::ApiVersions,
            3,
            2,
            &ApiVersionsRequest::default(),
        ))
        .await
        .expect("send api versions");
    // The first answer on the connection is ApiVersions' (correlation id 2).
    let _size = stream.read_i32().await.expect("size");
    assert_eq!(stream.read_i32().await.expect("correlation id"), 2);
    assert_eq!(end_offset(&log), 1);
    serving.abort();
}

/// Under the default `interval` fsync policy a Produce is served on its connection's
/// task, not handed to tokio's blocking pool (as Kafka's request handler threads
/// append to the page cache themselves): it is answered while the pool's only thread
/// is held, as it would be by other requests' fsyncs.
#[test]
fn a_produce_that_does_not_fsync_is_served_while_the_blocking_pool_is_busy() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (_dir, log, serving, mut stream) = serve().await;
        let (release, held) = std::sync::mpsc::channel::<()>();
        let busy = tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        stream
            .write_all(&produce_frame(1, b"served"))
            .await
            .expect("send produce");
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            response::<ProduceResponse>(&mut stream, ApiKey::Produce, 9),
        )
        .await;
        release.send(()).expect("release the pool");
        busy.await.expect("the blocking task");
        let (_, answer) = answer.expect("no answer while the blocking pool was busy");
        let partition = &answer.responses[0].partition_responses[0];
        assert_eq!((partition.error_code, partition.base_offset), (0, 0));
        assert_eq!(end_offset(&log), 1);
        serving.abort();
    });
}

/// Reads one response frame of `api` v`version`: its correlation id and body.
async fn response<T: Decodable>(stream: &mut TcpStream, api: ApiKey, version: i16) -> (i32, T) {
    let size = stream.read_i32().await.expect("size");
    let mut buf = vec![0u8; usize::try_from(size).expect("a size")];
    stream.read_exact(&mut buf).await.expect("response");
    let mut buf = Bytes::from(buf);
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .expect("response header");
    let body = T::decode(&mut buf, version).expect("response body");
    (header.correlation_id, body)
}

fn join_frame(member_id: &str, correlation_id: i32) -> Bytes {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("held")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(StrBytes::from_string(member_id.to_owned()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(Bytes::from_static(b"m"))]);
    // v3: no member-id handshake, so a first join is a member at once.
    frame(ApiKey::JoinGroup, 3, correlation_id, &request)
}

/// A JoinGroup held for a rebalance waits on its own connection only: other
/// connections (the first member's heartbeat, anyone's ApiVersions) are answered
/// meanwhile, and the held answer comes when the first member rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_join_does_not_hold_other_connections() {
    let (_dir, _log, serving, mut first) = serve().await;
    let addr = first.peer_addr().expect("address");
    first.write_all(&join_frame("", 1)).await.expect("send");
    let (_, joined): (i32, JoinGroupResponse) = response(&mut first, ApiKey::JoinGroup, 3).await;
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    let a = joined.member_id.to_string();

    let mut second = TcpStream::connect(addr).await.expect("connect");
    second.write_all(&join_frame("", 2)).await.expect("send");
    let mut byte = [0u8; 1];
    let waited = tokio::time::timeout(Duration::from_millis(300), second.peek(&mut byte)).await;
    assert!(
        waited.is_err(),
        "the second join is held until the first member rejoins"
    );

    let mut other = TcpStream::connect(addr).await.expect("connect");
    other
        .write_all(&frame(
            ApiKey::ApiVersions,
            3,
            3,
            &ApiVersionsRequest::default(),
        ))
        .await
        .expect("send");
    let (id, _): (i32, ApiVersionsResponse) = response(&mut other, ApiKey::ApiVersions, 3).await;
    assert_eq!(id, 3);
    let heartbeat = HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("held")))
        .with_generation_id(1)
        .with_member_id(StrBytes::from_string(a.clone()));
    first
        .write_all(&frame(ApiKey::Heartbeat, 2, 4, &heartbeat))
        .await
        .expect("send");
    let (_, beat): (i32, HeartbeatResponse) = response(&mut first, ApiKey::Heartbeat, 2).await;
    assert_eq!(beat.error_code, ResponseError::RebalanceInProgress.code());

    first.write_all(&join_frame(&a, 5)).await.expect("send");
    let (_, rejoined): (i32, JoinGroupResponse) = response(&mut first, ApiKey::JoinGroup, 3).await;
    let (id, held): (i32, JoinGroupResponse) = response(&mut second, ApiKey::JoinGroup, 3).await;
    assert_eq!(id, 2);
    assert_eq!((rejoined.generation_id, held.generation_id), (2, 2));
    assert_eq!(
        (rejoined.leader.as_str(), held.leader.as_str()),
        (a.as_str(), a.as_str())
    );
    assert_eq!(rejoined.members.len(), 2);
    serving.abort();
}
