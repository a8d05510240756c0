//! `brook broker` with Kafka clients brook did not write: librdkafka (the `rdkafka`
//! crate) creates a topic, produces with acks=all into 3 partitions, reads everything
//! back (read_uncommitted and read_committed) and looks offsets up; kafka-python (from
//! PyPI, installed by the test) does the same from Python; bad frames close only
//! their own connection. The broker is the real binary, killed when a test ends.

// Reading back waits with a deadline (librdkafka's poll returns early on its own
// events, so a count of polls is no bound).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use brook_testkit::broker::{client_config as config, create_topic, BrokerProcess};
use brook_testkit::process::wait_bounded;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

/// A `brook broker` child process (testkit's, killed when dropped) on a fresh data
/// directory, removed after it.
struct Broker {
    process: BrokerProcess,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let process = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), dir.path(), &[]);
        Broker {
            addr: process.addr,
            process,
            _dir: dir,
        }
    }

    fn bootstrap(&self) -> String {
        self.process.bootstrap()
    }
}

/// Reads every partition of `topic` from the beginning until `n` records arrived
/// (bounded); returns `(partition, offset, key, value)` sorted.
fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    n: usize,
    isolation: &str,
) -> Vec<(i32, i64, String, String)> {
    let consumer: BaseConsumer = config(bootstrap)
        // librdkafka wants a group id even for assigned partitions; nothing is
        // committed (groups are a later step).
        .set("group.id", "brook-broker-test")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("assign partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{isolation}: {} of {n} records read within 30 s",
            got.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            let text = |b: Option<&[u8]>| {
                String::from_utf8(b.unwrap_or_default().to_vec()).expect("utf-8")
            };
            got.push((m.partition(), m.offset(), text(m.key()), text(m.payload())));
        }
    }
    got.sort();
    got
}

#[test]
fn rdkafka_creates_produces_with_acks_all_and_reads_everything_back() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "snack-sales", 3);
    const N: usize = 300;
    let producer: FutureProducer = config(&b)
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let deliveries: Vec<_> = (0..N)
        .map(|i| {
            let key = format!("k{i}");
            let value = format!("sale {i}");
            let record = FutureRecord::to("snack-sales")
                .partition((i % 3) as i32)
                .key(&key)
                .payload(&value);
            producer.send_result(record).expect("queued")
        })
        .collect();
    let mut acked = Vec::new();
    for d in deliveries {
        let delivery = futures::executor::block_on(d)
            .expect("delivery")
            .expect("acknowledged");
        acked.push((delivery.partition, delivery.offset));
    }
    // Each partition got offsets 0..N/3, densely, in the order sent.
    for p in 0..3 {
        let offsets: Vec<i64> = acked.iter().filter(|a| a.0 == p).map(|a| a.1).collect();
        assert_eq!(
            offsets,
            (0..(N / 3) as i64).collect::<Vec<_>>(),
            "partition {p}"
        );
    }

    let expected: Vec<(i32, i64, String, String)> = {
        let mut e: Vec<_> = (0..N)
            .map(|i| {
                (
                    (i % 3) as i32,
                    (i / 3) as i64,
                    format!("k{i}"),
                    format!("sale {i}"),
                )
            })
            .collect();
        e.sort();
        e
    };
    assert_eq!(
        read_all(&b, "snack-sales", 3, N, "read_uncommitted"),
        expected
    );
    assert_eq!(
        read_all(&b, "snack-sales", 3, N, "read_committed"),
        expected
    );

    // ListOffsets: earliest and latest per partition, and by timestamp.
    let consumer: BaseConsumer = config(&b).create().expect("consumer");
    for p in 0..3 {
        let marks = consumer
            .fetch_watermarks("snack-sales", p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(marks, (0, (N / 3) as i64), "partition {p}");
    }
    let mut times = TopicPartitionList::new();
    times
        .add_partition_offset("snack-sales", 0, Offset::Offset(0))
        .expect("timestamp query");
    let found = consumer
        .offsets_for_times(times, Duration::from_secs(10))
        .expect("offsets for times");
    assert_eq!(
        found.find_partition("snack-sales", 0).map(|e| e.offset()),
        Some(Offset::Offset(0))
    );
}

#[test]
fn acks_0_records_are_appended_without_an_answer() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "fire-and-forget", 1);
    let producer: FutureProducer = config(&b).set("acks", "0").create().expect("producer");
    for i in 0..20 {
        let value = format!("v{i}");
        let sent = futures::executor::block_on(producer.send(
            FutureRecord::<(), _>::to("fire-and-forget").payload(&value),
            Duration::from_secs(5),
        ));
        // No answer comes (broker/tests/socket.rs checks that on the wire);
        // librdkafka reports the record sent without an offset.
        assert!(sent.is_ok(), "record {i}: {sent:?}");
    }
    let got = read_all(&b, "fire-and-forget", 1, 20, "read_uncommitted");
    let values: Vec<String> = got.into_iter().map(|r| r.3).collect();
    assert_eq!(values, (0..20).map(|i| format!("v{i}")).collect::<Vec<_>>());
}

#[test]
fn a_non_loopback_address_is_refused_before_the_data_directory_is_touched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let child = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(&data)
        .args(["broker", "--listen", "0.0.0.0:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start brook broker");
    let out = wait_bounded(child, Duration::from_secs(30)).expect("it exits at once");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0.0.0.0:0 is not loopback"), "{stderr}");
    assert!(!data.exists(), "the data directory was created");
}

#[test]
fn the_broker_holds_the_data_directory() {
    let broker = Broker::start();
    let dir = broker._dir.path();
    // The log commands go through the broker (tests/cli_remote.rs) ...
    let out = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(dir)
        .args(["topic", "list"])
        .output()
        .expect("run brook topic list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... and so does a job (tests/run_served.rs): one on topics the broker does not
    // have fails naming the field, not with "in use".
    let job = dir.join("job.yaml");
    std::fs::write(
        &job,
        "name: j\nsources:\n  - {name: s, connector: log, topic: s}\nsinks:\n  - {name: o, connector: log, topic: o}\n",
    )
    .expect("write the job");
    let out = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(dir)
        .arg("run")
        .arg(&job)
        .output()
        .expect("run brook run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("in use"), "{stderr}");
    assert!(
        stderr.contains("sources[0] (s).topic: unknown topic \"s\""),
        "{stderr}"
    );
}

/// Writes `bytes` on a new connection; true if the broker then closed it (reads EOF
/// or a reset within 5 s).
fn closed_after(addr: SocketAddr, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_)) && {
        // An error here may also be the timeout: only EOF or a reset count.
        let mut again = [0u8; 1];
        !matches!(s.read(&mut again), Ok(n) if n > 0)
    }
}

/// An ApiVersions v0 request frame: key 18, version 0, correlation id 7, no client id.
fn api_versions_v0() -> Vec<u8> {
    let mut f = vec![0, 0, 0, 10];
    f.extend_from_slice(&18i16.to_be_bytes());
    f.extend_from_slice(&0i16.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes());
    f
}

/// Sends ApiVersions v0 and returns (correlation id, error code) of the answer.
fn api_versions(addr: SocketAddr) -> (i32, i16) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(&api_versions_v0()).expect("send");
    let mut head = [0u8; 10];
    s.read_exact(&mut head).expect("an answer");
    (
        i32::from_be_bytes([head[4], head[5], head[6], head[7]]),
        i16::from_be_bytes([head[8], head[9]]),
    )
}

/// 19 bytes claiming 2^31 - 1 topics: kafka-protocol 0.18 reserved the array's capacity
/// from that count before reading any element and the whole broker aborted on the failed
/// allocation. The vendored codec (vendor/README.md) caps the reservation by the bytes
/// left, so only this connection is closed.
#[test]
fn a_huge_array_count_closes_only_its_connection() {
    let broker = Broker::start();
    let addr = broker.addr;
    // Metadata v4 (not flexible): header with client id "me", then a topics array
    // claiming 2^31 - 1 entries and allow_auto_topic_creation.
    let mut body = Vec::new();
    body.extend_from_slice(&3i16.to_be_bytes());
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&2i16.to_be_bytes());
    body.extend_from_slice(b"me");
    body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    body.push(0);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    assert!(closed_after(addr, &frame), "the connection stayed open");
    assert_eq!(api_versions(addr), (7, 0), "the broker stopped serving");
}

#[test]
fn bad_frames_close_their_connection_and_the_broker_keeps_serving() {
    let broker = Broker::start();
    let addr = broker.addr;
    assert_eq!(api_versions(addr), (7, 0));
    // Oversized (1 GiB announced), negative size, unknown API key 999, an API not
    // served (DescribeAcls), a body that does not decode, a truncated frame.
    let mut unknown_key = vec![0, 0, 0, 10];
    unknown_key.extend_from_slice(&999i16.to_be_bytes());
    unknown_key.extend_from_slice(&[0; 8]);
    let mut not_served = vec![0, 0, 0, 10];
    not_served.extend_from_slice(&29i16.to_be_bytes());
    not_served.extend_from_slice(&[0; 8]);
    // Metadata v9 (flexible): header, then a topics array claiming 2^31 entries.
    let mut garbage = vec![0, 0, 0, 16];
    garbage.extend_from_slice(&3i16.to_be_bytes());
    garbage.extend_from_slice(&9i16.to_be_bytes());
    garbage.extend_from_slice(&1i32.to_be_bytes());
    garbage.extend_from_slice(&(-1i16).to_be_bytes());
    garbage.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0x7f, 0x00]);
    for (what, bytes) in [
        ("oversized", vec![0x40, 0, 0, 0]),
        ("negative size", vec![0xff, 0xff, 0xff, 0xff]),
        ("unknown API key", unknown_key),
        ("API not served", not_served),
        ("undecodable body", garbage),
    ] {
        assert!(
            closed_after(addr, &bytes),
            "{what}: the connection stayed open"
        );
        assert_eq!(api_versions(addr), (7, 0), "after {what}");
    }
    // A frame cut short, then the client goes away: the broker goes on.
    {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(&api_versions_v0()[..7]).expect("send part");
    }
    assert_eq!(api_versions(addr), (7, 0), "after a truncated frame");
    // A real client too.
    create_topic(&broker.bootstrap(), "still-serving", 1);
}

/// kafka-python installed (once per target directory) by `scripts/kafka-python.sh`.
fn kafka_python() -> std::path::PathBuf {
    brook_testkit::broker::kafka_python(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    )
}

#[test]
fn kafka_python_creates_produces_and_reads_everything_back() {
    let python_path = kafka_python();
    let broker = Broker::start();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broker/kafka_python_roundtrip.py");
    let child = Command::new("python3")
        .arg(&script)
        .arg(broker.bootstrap())
        .env("PYTHONPATH", &python_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    let output = wait_bounded(child, Duration::from_secs(60));
    let (ok, output) = match output {
        Ok(o) => (o.status.success(), o),
        Err(o) => (false, o),
    };
    assert!(
        ok,
        "kafka-python script failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("90 records produced and read back"));
}

/// A null value (a tombstone, as Kafka clients send a delete for a compacted topic)
/// is stored as null and read back as null, distinct from an empty value; a compacted
/// topic (created with `cleanup.policy=compact`) refuses a keyless record with
/// INVALID_RECORD, as Kafka.
#[test]
fn null_values_round_trip_and_compacted_topics_refuse_keyless_records() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    let admin: AdminClient<DefaultClientContext> = config(&b).create().expect("admin client");
    let topic =
        NewTopic::new("classes", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    for r in futures::executor::block_on(admin.create_topics(
        [&topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("CreateTopics")
    {
        r.expect("compacted topic created");
    }
    let producer: FutureProducer = config(&b).set("acks", "all").create().expect("producer");
    let send = |record: FutureRecord<'_, str, str>| {
        futures::executor::block_on(producer.send_result(record).expect("queued"))
            .expect("delivery")
            .map_err(|(e, _)| e)
    };
    send(FutureRecord::to("classes").key("mia").payload("3a")).expect("acked");
    send(FutureRecord::to("classes").key("leo").payload("")).expect("acked");
    // No payload: a null value.
    send(FutureRecord::to("classes").key("mia")).expect("acked");
    let e = send(FutureRecord::to("classes").payload("no key")).expect_err("refused");
    assert!(
        matches!(
            e,
            rdkafka::error::KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::InvalidRecord
            )
        ),
        "{e:?}"
    );

    let consumer: BaseConsumer = config(&b)
        .set("group.id", "brook-broker-test")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("classes", 0, Offset::Beginning)
        .expect("assign partition");
    consumer.assign(&tpl).expect("assign");
    let mut got: Vec<(i64, String, Option<Vec<u8>>)> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "read {got:?} within 30 s"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            let key = String::from_utf8(m.key().expect("key").to_vec()).expect("utf-8");
            got.push((m.offset(), key, m.payload().map(<[u8]>::to_vec)));
        }
    }
    assert_eq!(
        got,
        vec![
            (0, "mia".to_string(), Some(b"3a".to_vec())),
            (1, "leo".to_string(), Some(Vec::new())),
            (2, "mia".to_string(), None),
        ]
    );
}

/// A compacted topic served to librdkafka: while the broker's maintenance compacts
/// closed segments, a consumer reading from the beginning gets each key's latest
/// record at the offset it was acknowledged with (older versions gone, the gaps
/// passed over) and a tombstone as a null value, and its position reaches the end.
#[test]
fn rdkafka_reads_a_compacted_topic_with_gaps() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    let admin: AdminClient<DefaultClientContext> = config(&b).create().expect("admin client");
    let topic = NewTopic::new("accounts", 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.bytes", "1024")
        .set("min.cleanable.dirty.ratio", "0.01");
    for r in futures::executor::block_on(admin.create_topics(
        [&topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("CreateTopics")
    {
        r.expect("compacted topic created");
    }
    let producer: FutureProducer = config(&b).set("acks", "all").create().expect("producer");
    // key -> (offset, value) of its latest record, as acknowledged.
    let mut latest = std::collections::BTreeMap::new();
    let total = 200;
    for i in 0..total {
        let key = format!("k{}", i % 10);
        let value = (i + 1 < total).then(|| format!("{key} version {i} {}", "x".repeat(30)));
        let mut record = FutureRecord::<str, str>::to("accounts").key(&key);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        let offset = futures::executor::block_on(producer.send_result(record).expect("queued"))
            .expect("delivery")
            .expect("acked")
            .offset;
        latest.insert(key, (offset, value.map(String::into_bytes)));
    }
    let end = total as i64;

    // Read from the beginning until compaction has visibly run (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let got = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction within 30 s"
        );
        let consumer: BaseConsumer = config(&b)
            .set("group.id", "brook-broker-test")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "100")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("accounts", 0, Offset::Beginning)
            .expect("assign partition");
        consumer.assign(&tpl).expect("assign");
        let mut got: Vec<(i64, String, Option<Vec<u8>>)> = Vec::new();
        let read_deadline = std::time::Instant::now() + Duration::from_secs(20);
        while got.last().is_none_or(|(o, _, _)| *o + 1 < end) {
            assert!(
                std::time::Instant::now() < read_deadline,
                "read {} records",
                got.len()
            );
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m.expect("a record");
                let key = String::from_utf8(m.key().expect("key").to_vec()).expect("utf-8");
                got.push((m.offset(), key, m.payload().map(<[u8]>::to_vec)));
            }
        }
        let position = consumer.position().expect("position");
        assert_eq!(
            position.find_partition("accounts", 0).map(|e| e.offset()),
            Some(Offset::Offset(end)),
            "the position reaches the end"
        );
        if got.len() < total {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Offsets only grow, every key's latest record is there at its offset, and older
    // versions are gone from the compacted part.
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{got:?}");
    for (key, (offset, value)) in &latest {
        assert!(
            got.contains(&(*offset, key.clone(), value.clone())),
            "{key} latest at {offset} missing"
        );
    }
    assert_eq!(
        got.iter().rfind(|r| r.1 == "k9").map(|r| r.2.clone()),
        Some(None),
        "the tombstone reads back as a null value"
    );
}

/// `transaction.timeout.ms` (semantics.md §1, §1a): a transaction a writer left open
/// in the data directory holds back read_committed Kafka consumers only until its
/// timeout; the broker's log maintenance then aborts it, and librdkafka reads the
/// record behind it, without the aborted one.
#[test]
fn the_broker_aborts_a_transaction_left_open_after_its_timeout() {
    use brook::log::{Log, LogOptions, ProducerRecord, TopicConfig};
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open the log");
        log.create_topic("t", 1, TopicConfig::default())
            .expect("create t");
        let mut w = log
            .init_transactions_with_timeout("crashed-writer", 2_000)
            .expect("session");
        w.begin().expect("begin");
        w.send("t", vec![ProducerRecord::new("open")])
            .expect("send");
        log.topic("t")
            .expect("t")
            .append(vec![ProducerRecord::new("after")])
            .expect("append");
        // The writer goes away undecided, as a crashed one.
    }
    let process = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), dir.path(), &[]);
    let got = read_all(&process.bootstrap(), "t", 1, 1, "read_committed");
    assert_eq!(got, vec![(0, 1, String::new(), "after".to_string())]);
}
