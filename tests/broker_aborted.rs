//! Fetch's aborted-transactions list through `brook broker`, as Kafka's: a
//! transactional producer (librdkafka) commits, aborts and commits; read_committed
//! consumers brook did not write (librdkafka, kafka-python, kcat) filter the stored
//! batches themselves and see exactly the committed records at their offsets, their
//! position ending after the last marker; a raw Fetch shows the batches as stored (the
//! producer id, the real COMMIT/ABORT markers) and the aborted transaction (producer
//! id, first offset). All of it again after the broker is SIGKILLed and restarted.

// Reading back waits with a deadline (librdkafka's poll returns early on its own
// events, so a count of polls is no bound).
#![allow(clippy::disallowed_methods)]

use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use brook_testkit::broker::{
    client_config as config, create_topic, kafka_python_command, kcat, BrokerProcess,
};
use brook_testkit::process::wait_bounded;
use brook_testkit::wire;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "ledger";
/// Fetch v11: isolation level and aborted transactions (v4+), not yet flexible.
const FETCH_VERSION: i16 = 11;

/// What a read_committed reader must get: `c0..c2` (offsets 0-2, commit marker 3),
/// not `a0..a2` (4-6, abort marker 7), `d0..d2` (8-10, commit marker 11).
fn committed() -> Vec<(i64, String)> {
    [
        (0, "c0"),
        (1, "c1"),
        (2, "c2"),
        (8, "d0"),
        (9, "d1"),
        (10, "d2"),
    ]
    .iter()
    .map(|(o, v)| (*o, v.to_string()))
    .collect()
}

/// The log end offset (and last stable offset) after the three transactions.
const END: i64 = 12;

fn write_commit_abort_commit(bootstrap: &str) {
    let producer: BaseProducer = config(bootstrap)
        .set("transactional.id", "ledger-writer")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    for (prefix, commit) in [("c", true), ("a", false), ("d", true)] {
        producer.begin_transaction().expect("begin");
        for i in 0..3 {
            producer
                .send(
                    BaseRecord::<(), _>::to(TOPIC)
                        .partition(0)
                        .payload(&format!("{prefix}{i}")),
                )
                .expect("queued");
        }
        producer.flush(TIMEOUT).expect("flush");
        if commit {
            producer.commit_transaction(TIMEOUT).expect("commit");
        } else {
            producer.abort_transaction(TIMEOUT).expect("abort");
        }
    }
}

/// librdkafka at read_committed from the beginning: the records, and its position
/// once it has passed the last marker (bounded).
fn rdkafka_read_committed(bootstrap: &str) -> (Vec<(i64, String)>, Offset) {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", "aborted-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .expect("assign partition");
    consumer.assign(&tpl).expect("assign");
    let mut got = Vec::new();
    let position = |c: &BaseConsumer| {
        c.position()
            .expect("position")
            .find_partition(TOPIC, 0)
            .map_or(Offset::Invalid, |p| p.offset())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline
        && (got.len() < committed().len() || position(&consumer) != Offset::Offset(END))
    {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            let value = String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("utf-8");
            got.push((m.offset(), value));
        }
    }
    // Nothing more comes.
    if let Some(m) = consumer.poll(Duration::from_millis(300)) {
        let m = m.expect("a record");
        got.push((m.offset(), format!("{:?}", m.payload())));
    }
    (got, position(&consumer))
}

/// kafka-python at read_committed: records and position (see the script).
fn kafka_python_read_committed(bootstrap: &str) -> (Vec<(i64, String)>, i64) {
    let child = kafka_python_command(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/broker/kafka_python_read_committed.py",
    )
    .args([bootstrap, TOPIC])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start python3");
    let out = match wait_bounded(child, Duration::from_secs(90)) {
        Ok(o) if o.status.success() => o,
        Ok(o) | Err(o) => panic!(
            "kafka_python_read_committed.py failed: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    };
    let answer: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON line from the script");
    let records = answer["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r[0].as_i64().expect("an offset"),
                r[1].as_str().expect("a value").to_string(),
            )
        })
        .collect();
    (records, answer["position"].as_i64().expect("a position"))
}

/// kcat at read_committed from the beginning to the end of the partition.
fn kcat_read_committed(bootstrap: &str) -> Vec<(i64, String)> {
    let child = std::process::Command::new(kcat(Path::new(env!("CARGO_MANIFEST_DIR"))))
        .args([
            "-b",
            bootstrap,
            "-C",
            "-t",
            TOPIC,
            "-p",
            "0",
            "-o",
            "beginning",
        ])
        .args(["-e", "-q", "-X", "isolation.level=read_committed"])
        .args(["-f", "%o %s\\n"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kcat");
    let out = match wait_bounded(child, Duration::from_secs(20)) {
        Ok(o) if o.status.success() => o,
        Ok(o) | Err(o) => panic!(
            "kcat failed: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let (offset, value) = line.split_once(' ').expect("offset and value");
            (offset.parse().expect("an offset"), value.to_string())
        })
        .collect()
}

/// One raw Fetch of partition 0 from `offset` at `isolation` (1 read_committed).
fn fetch(broker: &BrokerProcess, offset: i64, isolation: i8) -> PartitionData {
    let mut stream = TcpStream::connect(broker.addr).expect("connect");
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let response: FetchResponse =
        wire::request(&mut stream, ApiKey::Fetch, FETCH_VERSION, &request);
    response.responses[0].partitions[0].clone()
}

fn records(p: &PartitionData) -> Vec<Record> {
    let mut bytes = p.records.clone().unwrap_or_default();
    RecordBatchDecoder::decode_all(&mut bytes)
        .expect("record batches")
        .into_iter()
        .flat_map(|s| s.records)
        .collect()
}

/// The raw fetches: the stored batches with the producer id and markers, and the
/// aborted transaction listed while the fetched range meets it.
fn check_raw_fetch(broker: &BrokerProcess) {
    let p = fetch(broker, 0, 1);
    assert_eq!(p.error_code, 0);
    assert_eq!((p.high_watermark, p.last_stable_offset), (END, END));
    let got = records(&p);
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (0..END).collect::<Vec<_>>(),
        "every offset as stored, aborted records and markers included"
    );
    let pid = got[4].producer_id;
    assert!(
        pid >= 0,
        "the aborted records carry their producer id: {pid}"
    );
    assert!(got.iter().all(|r| r.transactional && r.producer_id == pid));
    let markers: Vec<(i64, Option<&[u8]>)> = got
        .iter()
        .filter(|r| r.control)
        .map(|r| (r.offset, r.key.as_deref()))
        .collect();
    let (commit, abort): (&[u8], &[u8]) = (&[0, 0, 0, 1], &[0, 0, 0, 0]);
    assert_eq!(
        markers,
        vec![(3, Some(commit)), (7, Some(abort)), (11, Some(commit))]
    );
    let listed = |p: &PartitionData| -> Vec<(i64, i64)> {
        p.aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect()
    };
    assert_eq!(listed(&p), vec![(pid, 4)]);
    // From inside the aborted transaction it is still listed; after its marker not.
    assert_eq!(listed(&fetch(broker, 5, 1)), vec![(pid, 4)]);
    let after = fetch(broker, 8, 1);
    assert_eq!(after.aborted_transactions.as_ref().map(Vec::len), Some(0));
    // read_uncommitted gets every data record (no marker but the one of no producer
    // that moves the position past the last) and no list.
    let uncommitted = fetch(broker, 0, 0);
    assert_eq!(uncommitted.aborted_transactions, None);
    let data: Vec<i64> = records(&uncommitted)
        .iter()
        .filter(|r| !r.control)
        .map(|r| r.offset)
        .collect();
    assert_eq!(data, vec![0, 1, 2, 4, 5, 6, 8, 9, 10]);
}

fn check_clients(broker: &BrokerProcess) {
    let bootstrap = broker.bootstrap();
    let (got, position) = rdkafka_read_committed(&bootstrap);
    assert_eq!(got, committed(), "librdkafka");
    assert_eq!(position, Offset::Offset(END), "librdkafka's position");
    let (got, position) = kafka_python_read_committed(&bootstrap);
    assert_eq!(got, committed(), "kafka-python");
    assert_eq!(position, END, "kafka-python's position");
    assert_eq!(kcat_read_committed(&bootstrap), committed(), "kcat");
}

#[test]
fn read_committed_clients_filter_by_the_aborted_transactions_list_also_after_a_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = Path::new(env!("CARGO_BIN_EXE_brook"));
    let first = BrokerProcess::start(binary, dir.path(), &[]);
    let bootstrap = first.bootstrap();
    create_topic(&bootstrap, TOPIC, 1);
    write_commit_abort_commit(&bootstrap);
    check_raw_fetch(&first);
    check_clients(&first);
    // SIGKILL (KillOnDrop): the list comes from the aborted-transaction index on disk.
    drop(first);
    let second = BrokerProcess::start(binary, dir.path(), &[]);
    check_raw_fetch(&second);
    check_clients(&second);
}
