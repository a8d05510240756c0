//! Fetch long polling through a real socket: a fetch at the end of a partition waits
//! (up to `max_wait_ms`) for `min_bytes` of records and answers as soon as an append
//! brings them; with none it answers empty at the deadline.

use std::time::Duration;

use brook_broker::{BrokerConfig, Server};
use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const VERSION: i16 = 12;

fn fetch_frame(max_wait_ms: i32, offset: i64) -> Bytes {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(1)
        .encode(&mut body, ApiKey::Fetch.request_header_version(VERSION))
        .expect("header");
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("waits")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
        .encode(&mut body, VERSION)
        .expect("body");
    let mut frame = BytesMut::new();
    frame.put_i32(i32::try_from(body.len()).expect("small frame"));
    frame.put_slice(&body);
    frame.freeze()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_at_the_end_waits_for_the_next_append() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    let topic = log
        .create_topic("waits", 1, TopicConfig::default())
        .expect("create");
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..BrokerConfig::default()
    };
    let server = Server::bind(&config, log.clone()).await.expect("bind");
    let addr = server.local_addr();
    let serving = tokio::spawn(server.run());
    let mut stream = TcpStream::connect(addr).await.expect("connect");

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
