//! Idempotent and transactional producers through `brook broker`, with librdkafka (the
//! `rdkafka` crate): an idempotent producer's records arrive once with dense offsets;
//! a transaction committed and one aborted are seen by read_committed and
//! read_uncommitted consumers as Kafka's; a second producer with the same
//! transactional id fences the first; consume-transform-produce commits the group's
//! offsets only with its transaction; kafka-python (from PyPI, installed by the test)
//! does the same from Python. The broker is the real binary, killed when a test ends.

// Reading back waits with a deadline (librdkafka's poll returns early on its own
// events, so a count of polls is no bound).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook_testkit::broker::{client_config as config, create_topic, kafka_python, BrokerProcess};
use brook_testkit::process::wait_bounded;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, FutureProducer, FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(10);

struct Broker {
    process: BrokerProcess,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let process = BrokerProcess::start(
            Path::new(env!("CARGO_BIN_EXE_brook")),
            dir.path(),
            &["--group-min-session-timeout-ms", "500"],
        );
        Broker { process, _dir: dir }
    }

    fn bootstrap(&self) -> String {
        self.process.bootstrap()
    }
}

/// Reads every partition of `topic` from the beginning until `n` records arrived
/// (bounded); returns `(partition, offset, value)` in the order each partition gave
/// them.
fn read(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    n: usize,
    isolation: &str,
) -> Vec<(i32, i64, String)> {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", "brook-txn-test-reader")
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
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{isolation}: {} of {n} records read within 30 s: {got:?}",
            got.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            let value = String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("utf-8");
            got.push((m.partition(), m.offset(), value));
        }
    }
    got
}

fn values(records: &[(i32, i64, String)]) -> Vec<String> {
    let mut v: Vec<String> = records.iter().map(|r| r.2.clone()).collect();
    v.sort();
    v
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    v.sort();
    v
}

#[test]
fn an_idempotent_producer_writes_each_record_once_with_dense_offsets() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "idem", 3);
    const N: usize = 600;
    let producer: FutureProducer = config(&b)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        // Small batches, several in flight per partition: the sequence checks see
        // many batches per producer and partition.
        .set("batch.num.messages", "20")
        .create()
        .expect("producer");
    let deliveries: Vec<_> = (0..N)
        .map(|i| {
            let value = format!("r{i}");
            producer
                .send_result(
                    FutureRecord::<(), _>::to("idem")
                        .partition((i % 3) as i32)
                        .payload(&value),
                )
                .expect("queued")
        })
        .collect();
    let mut acked = Vec::new();
    for d in deliveries {
        let delivery = futures::executor::block_on(d)
            .expect("delivery")
            .unwrap_or_else(|(e, _)| panic!("not acknowledged: {e}"));
        acked.push((delivery.partition, delivery.offset));
    }
    for p in 0..3 {
        let offsets: Vec<i64> = acked.iter().filter(|a| a.0 == p).map(|a| a.1).collect();
        assert_eq!(
            offsets,
            (0..(N / 3) as i64).collect::<Vec<_>>(),
            "partition {p}"
        );
    }
    let got = read(&b, "idem", 3, N, "read_uncommitted");
    assert_eq!(values(&got), names("r", N));
    let consumer: BaseConsumer = config(&b).create().expect("consumer");
    for p in 0..3 {
        let marks = consumer
            .fetch_watermarks("idem", p, TIMEOUT)
            .expect("watermarks");
        assert_eq!(
            marks,
            (0, (N / 3) as i64),
            "partition {p}: no duplicates stored"
        );
    }
}

fn transactional(bootstrap: &str, id: &str) -> BaseProducer {
    let producer: BaseProducer = config(bootstrap)
        .set("transactional.id", id)
        .set("transaction.timeout.ms", "60000")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    producer
}

fn send(producer: &BaseProducer, topic: &str, partition: i32, value: &str) {
    producer
        .send(
            BaseRecord::<(), _>::to(topic)
                .partition(partition)
                .payload(value),
        )
        .expect("queued");
}

#[test]
fn read_committed_sees_committed_transactions_only_and_read_uncommitted_sees_all() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "orders", 2);
    let producer = transactional(&b, "order-writer");
    // Committed, aborted, committed: the aborted records lie between committed ones in
    // both partitions, so a reader that did not skip them would meet them first.
    for (prefix, commit) in [("c", true), ("a", false), ("d", true)] {
        producer.begin_transaction().expect("begin");
        for i in 0..6 {
            send(&producer, "orders", i % 2, &format!("{prefix}{i}"));
        }
        if commit {
            producer.commit_transaction(TIMEOUT).expect("commit");
        } else {
            producer.flush(TIMEOUT).expect("flush");
            producer.abort_transaction(TIMEOUT).expect("abort");
        }
    }
    let committed = read(&b, "orders", 2, 12, "read_committed");
    let mut want = names("c", 6);
    want.extend(names("d", 6));
    want.sort();
    assert_eq!(values(&committed), want);
    let everything = read(&b, "orders", 2, 18, "read_uncommitted");
    let mut want_all = want.clone();
    want_all.extend(names("a", 6));
    want_all.sort();
    assert_eq!(values(&everything), want_all);
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "fenced", 1);
    let zombie = transactional(&b, "writer");
    zombie.begin_transaction().expect("begin");
    send(&zombie, "fenced", 0, "zombie");
    zombie.flush(TIMEOUT).expect("flush");

    let fresh = transactional(&b, "writer");
    let err = zombie
        .commit_transaction(TIMEOUT)
        .expect_err("the fenced producer cannot commit");
    let fenced = match &err {
        KafkaError::Transaction(e) => e.is_fatal() || e.code() == RDKafkaErrorCode::ProducerFenced,
        _ => false,
    };
    assert!(fenced, "expected a fencing error, got {err}");

    fresh.begin_transaction().expect("begin");
    send(&fresh, "fenced", 0, "fresh");
    fresh.commit_transaction(TIMEOUT).expect("commit");
    // The zombie's open transaction was aborted when the new session started.
    let got = read(&b, "fenced", 1, 1, "read_committed");
    assert_eq!(values(&got), vec!["fresh".to_string()]);
    let all = read(&b, "fenced", 1, 2, "read_uncommitted");
    assert_eq!(
        values(&all),
        vec!["fresh".to_string(), "zombie".to_string()]
    );
}

#[test]
fn after_a_broker_sigkill_a_new_session_aborts_the_open_transaction_and_keeps_the_committed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = Path::new(env!("CARGO_BIN_EXE_brook"));
    let first = BrokerProcess::start(binary, dir.path(), &[]);
    let b = first.bootstrap();
    create_topic(&b, "ledger", 1);
    let writer = transactional(&b, "ledger-writer");
    writer.begin_transaction().expect("begin");
    send(&writer, "ledger", 0, "kept");
    writer.commit_transaction(TIMEOUT).expect("commit");
    writer.begin_transaction().expect("begin");
    send(&writer, "ledger", 0, "open");
    writer.flush(TIMEOUT).expect("flush");
    drop(writer);
    // SIGKILL (KillOnDrop), with the second transaction open in the log.
    drop(first);

    let second = BrokerProcess::start(binary, dir.path(), &[]);
    let b = second.bootstrap();
    // The id's new session (epoch bumped from the log's persisted state) aborts the
    // open transaction, which held the last stable offset: a read_committed reader
    // gets past it.
    let writer = transactional(&b, "ledger-writer");
    writer.begin_transaction().expect("begin");
    send(&writer, "ledger", 0, "after");
    writer.commit_transaction(TIMEOUT).expect("commit");
    let got = read(&b, "ledger", 1, 2, "read_committed");
    assert_eq!(
        got.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(),
        vec!["kept", "after"]
    );
}

/// A group member of `group` on `topic` that has its partitions (bounded wait).
fn member(bootstrap: &str, group: &str, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("session.timeout.ms", "3000")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

fn committed(consumer: &BaseConsumer, topic: &str) -> Offset {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let c = consumer
        .committed_offsets(tpl, TIMEOUT)
        .expect("committed offsets");
    c.find_partition(topic, 0)
        .map_or(Offset::Invalid, |e| e.offset())
}

#[test]
fn consume_transform_produce_commits_the_group_offsets_only_with_the_transaction() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "raw", 1);
    create_topic(&b, "cooked", 1);
    let plain: BaseProducer = config(&b).create().expect("producer");
    for i in 0..5 {
        send(&plain, "raw", 0, &format!("raw{i}"));
    }
    plain.flush(TIMEOUT).expect("flush");

    let consumer = member(&b, "cooks", "raw");
    let mut input = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while input.len() < 5 {
        assert!(
            Instant::now() < deadline,
            "read {} of 5 inputs",
            input.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            input.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("utf-8"));
        }
    }
    let metadata = consumer.group_metadata().expect("group metadata");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset("raw", 0, Offset::Offset(5))
        .expect("offset");

    let producer = transactional(&b, "cook");
    // First attempt aborted: neither the output nor the offsets count.
    producer.begin_transaction().expect("begin");
    for v in &input {
        send(&producer, "cooked", 0, &format!("cooked-{v}"));
    }
    producer
        .send_offsets_to_transaction(&offsets, &metadata, TIMEOUT)
        .expect("send offsets");
    producer.flush(TIMEOUT).expect("flush");
    producer.abort_transaction(TIMEOUT).expect("abort");
    assert_eq!(
        committed(&consumer, "raw"),
        Offset::Invalid,
        "offsets of an aborted transaction"
    );

    // Second attempt committed: both.
    producer.begin_transaction().expect("begin");
    for v in &input {
        send(&producer, "cooked", 0, &format!("cooked-{v}"));
    }
    producer
        .send_offsets_to_transaction(&offsets, &metadata, TIMEOUT)
        .expect("send offsets");
    producer.commit_transaction(TIMEOUT).expect("commit");
    assert_eq!(committed(&consumer, "raw"), Offset::Offset(5));
    let out = read(&b, "cooked", 1, 5, "read_committed");
    let mut want: Vec<String> = input.iter().map(|v| format!("cooked-{v}")).collect();
    want.sort();
    assert_eq!(values(&out), want);
}

#[test]
fn kafka_python_idempotent_and_transactional_producers() {
    let broker = Broker::start();
    let python_path = kafka_python(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    let child = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broker/kafka_python_txn.py"))
        .arg(broker.bootstrap())
        .env("PYTHONPATH", python_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    let (ok, out) = match wait_bounded(child, Duration::from_secs(90)) {
        Ok(o) => (o.status.success(), o),
        Err(o) => (false, o),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        ok && stdout.contains("ok"),
        "kafka_python_txn.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_transaction_left_open_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let broker = Broker::start();
    let b = broker.bootstrap();
    create_topic(&b, "stalled", 1);
    let stuck: BaseProducer = config(&b)
        .set("transactional.id", "stuck-writer")
        .set("transaction.timeout.ms", "1500")
        // librdkafka wants its socket timeout within the transaction timeout.
        .set("socket.timeout.ms", "1500")
        .set("message.timeout.ms", "1500")
        .create()
        .expect("transactional producer");
    stuck.init_transactions(TIMEOUT).expect("init_transactions");
    stuck.begin_transaction().expect("begin");
    send(&stuck, "stalled", 0, "never committed");
    stuck.flush(TIMEOUT).expect("flush");
    let started = Instant::now();
    // A plain record after the open transaction: read_committed readers get it only
    // once the transaction is decided, which its 1.5 s timeout does.
    let plain: FutureProducer = config(&b).create().expect("producer");
    futures::executor::block_on(
        plain.send(
            FutureRecord::<(), _>::to("stalled")
                .partition(0)
                .payload("after"),
            TIMEOUT,
        ),
    )
    .expect("plain record appended");
    let got = read(&b, "stalled", 1, 1, "read_committed");
    assert_eq!(values(&got), vec!["after".to_string()]);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "read_committed got past the open transaction before its timeout ({:?})",
        started.elapsed()
    );
    // The coordinator bumped the session's epoch when it aborted: the late commit fails.
    let err = stuck
        .commit_transaction(TIMEOUT)
        .expect_err("the timed-out transaction cannot commit");
    assert!(
        matches!(&err, KafkaError::Transaction(_)),
        "expected a transaction error, got {err}"
    );
    let all = read(&b, "stalled", 1, 2, "read_uncommitted");
    assert_eq!(
        values(&all),
        vec!["after".to_string(), "never committed".to_string()]
    );
}
