//! `brook broker` with SASL SCRAM users, through Kafka clients brook did not write:
//! librdkafka (the `rdkafka` crate, and kcat) and kafka-python authenticate with
//! SCRAM-SHA-256 and SCRAM-SHA-512, produce and consume; a wrong password gets an
//! authentication error and nothing is written; a client without SASL gets nothing;
//! a non-loopback listener is refused without users. The broker is the real binary.
//!
//! Only loopback traffic: the non-loopback listener binds the wildcard address
//! (0.0.0.0) and the clients reach it on 127.0.0.1.

// Waiting for clients' errors needs a deadline.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook_testkit::binary::{expect_success, run_brook_err, run_brook_ok, run_brook_with_input};
use brook_testkit::broker::BrokerProcess;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const USER: &str = "alice";
const PASSWORD: &str = "alice-secret";

fn brook() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brook"))
}

/// A data directory with topic `sales` (2 partitions), `py-sasl` (1) and user
/// alice.
struct DataDir {
    dir: tempfile::TempDir,
}

impl DataDir {
    fn new() -> DataDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (topic, partitions) in [("sales", "2"), ("py-sasl", "1")] {
            run_brook_ok(brook().arg("--data-dir").arg(dir.path()).args([
                "topic",
                "create",
                topic,
                "--partitions",
                partitions,
            ]));
        }
        let out = run_brook_with_input(
            brook()
                .arg("--data-dir")
                .arg(dir.path())
                .args(["broker", "user", "add", USER]),
            format!("{PASSWORD}\n").as_bytes(),
        );
        expect_success("brook broker user add", &out);
        DataDir { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> PathBuf {
        self.path().join("broker.stderr")
    }

    /// The broker on `listen` (its extra arguments after), logging into
    /// [`DataDir::log`]; clients connect to 127.0.0.1 on its port.
    fn broker(&self, listen: &str, extra: &[&str]) -> (BrokerProcess, String) {
        let log = self.log();
        let broker = BrokerProcess::start_on(
            Path::new(env!("CARGO_BIN_EXE_brook")),
            self.path(),
            listen,
            extra,
            Some(&log),
        );
        let bootstrap = format!("127.0.0.1:{}", broker.addr.port());
        (broker, bootstrap)
    }

    fn broker_log(&self) -> String {
        std::fs::read_to_string(self.log()).expect("broker log")
    }
}

/// Client settings; `sasl`: `(mechanism, password)`, or plaintext.
fn config(bootstrap: &str, sasl: Option<(&str, &str)>) -> ClientConfig {
    let mut c = brook_testkit::broker::client_config(bootstrap);
    if let Some((mechanism, password)) = sasl {
        c.set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanisms", mechanism)
            .set("sasl.username", USER)
            .set("sasl.password", password);
    }
    c
}

/// Produces `n` records `{tag}-{i}` into partition `partition` of `sales`; the
/// delivery results.
fn produce(
    producer: &FutureProducer<impl ClientContext + 'static>,
    tag: &str,
    partition: i32,
    n: usize,
) -> Vec<Result<(), KafkaError>> {
    let deliveries: Vec<_> = (0..n)
        .map(|i| {
            let value = format!("{tag}-{i}");
            let record = FutureRecord::<(), _>::to("sales")
                .partition(partition)
                .payload(&value);
            producer.send_result(record).expect("queued")
        })
        .collect();
    deliveries
        .into_iter()
        .map(
            |d| match futures::executor::block_on(d).expect("delivery") {
                Ok(_) => Ok(()),
                Err((e, _)) => Err(e),
            },
        )
        .collect()
}

/// Every value of partition `partition` of `sales`, read from the beginning until
/// `n` arrived (bounded).
fn read(consumer: &BaseConsumer, partition: i32, n: usize) -> Vec<String> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("sales", partition, Offset::Beginning)
        .expect("assign");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} records within 30 s",
            got.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("a record");
            got.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("utf-8"));
        }
    }
    got
}

/// The log's end offsets of `sales`, read as the authenticated user.
fn end_offsets(bootstrap: &str) -> Vec<i64> {
    let consumer: BaseConsumer = config(bootstrap, Some(("SCRAM-SHA-256", PASSWORD)))
        .create()
        .expect("consumer");
    (0..2)
        .map(|p| {
            consumer
                .fetch_watermarks("sales", p, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .collect()
}

#[test]
fn rdkafka_authenticates_with_scram_sha_256_and_512_on_a_non_loopback_listener() {
    let data = DataDir::new();
    let (_broker, b) = data.broker("0.0.0.0:0", &["--advertised-host", "127.0.0.1"]);
    for (partition, mechanism) in [(0, "SCRAM-SHA-256"), (1, "SCRAM-SHA-512")] {
        let producer: FutureProducer = config(&b, Some((mechanism, PASSWORD)))
            .set("acks", "all")
            .create()
            .expect("producer");
        for r in produce(&producer, mechanism, partition, 20) {
            r.unwrap_or_else(|e| panic!("{mechanism}: {e}\n{}", data.broker_log()));
        }
        let consumer: BaseConsumer = config(&b, Some((mechanism, PASSWORD)))
            .set("group.id", "sasl-test")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let expected: Vec<String> = (0..20).map(|i| format!("{mechanism}-{i}")).collect();
        assert_eq!(read(&consumer, partition, 20), expected, "{mechanism}");
    }
    assert_eq!(end_offsets(&b), vec![20, 20]);
}

/// Errors librdkafka reports for the client (its error callback).
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

impl ClientContext for Errors {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0
            .lock()
            .expect("errors")
            .push(format!("{error}: {reason}"));
    }
}

/// Waits (at most 15 s) for an error containing `text`.
fn wait_for_error(errors: &Errors, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(e) = errors
            .0
            .lock()
            .expect("errors")
            .iter()
            .find(|e| e.contains(text))
        {
            return e.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no client error with {text:?} within 15 s: {:?}",
            errors.0.lock().expect("errors")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_wrong_password_or_no_sasl_gets_an_authentication_error_and_writes_nothing() {
    let data = DataDir::new();
    // Loopback: with users configured, SASL is required there too.
    let (_broker, b) = data.broker("127.0.0.1:0", &[]);

    let wrong = Errors::default();
    let producer: FutureProducer<Errors> = config(&b, Some(("SCRAM-SHA-256", "not-the-password")))
        .set("message.timeout.ms", "3000")
        .create_with_context(wrong.clone())
        .expect("producer");
    let e = wait_for_error(&wrong, "SASL authentication error");
    assert!(e.contains("Invalid user credentials"), "{e}");
    for r in produce(&producer, "wrong", 0, 3) {
        assert!(r.is_err(), "a record was acknowledged to a wrong password");
    }

    // A client that does not authenticate at all: its Metadata request closes the
    // connection, nothing is served.
    let plain = Errors::default();
    let producer: FutureProducer<Errors> = config(&b, None)
        .set("message.timeout.ms", "3000")
        .create_with_context(plain.clone())
        .expect("producer");
    for r in produce(&producer, "plain", 1, 3) {
        assert!(
            r.is_err(),
            "a record was acknowledged without authentication"
        );
    }
    let metadata = producer
        .client()
        .fetch_metadata(Some("sales"), Duration::from_secs(2));
    assert!(metadata.is_err(), "metadata served without authentication");

    assert_eq!(end_offsets(&b), vec![0, 0]);
    let log = data.broker_log();
    assert!(
        log.contains("SASL authentication failed: invalid proof for user \"alice\""),
        "{log}"
    );
    assert!(
        log.contains(
            "SASL authentication failed: unexpected Metadata request before authentication"
        ),
        "{log}"
    );
}

#[test]
fn kcat_over_sasl() {
    let kcat = Path::new("/usr/bin/kcat");
    assert!(
        kcat.exists(),
        "kcat is missing: scripts/setup.sh installs it"
    );
    let data = DataDir::new();
    let (_broker, b) = data.broker("0.0.0.0:0", &["--advertised-host", "127.0.0.1"]);
    let sasl = |mechanism: &str, password: &str| -> Vec<String> {
        [
            "-b",
            &b,
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            &format!("sasl.mechanisms={mechanism}"),
            "-X",
            &format!("sasl.username={USER}"),
            "-X",
            &format!("sasl.password={password}"),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let produced = run_brook_with_input(
        Command::new(kcat)
            .args(sasl("SCRAM-SHA-256", PASSWORD))
            .args(["-P", "-t", "sales", "-p", "0"]),
        b"mia apple\nleo pear\n",
    );
    expect_success("kcat -P", &produced);
    let consumed = run_brook_ok(
        Command::new(kcat)
            .args(sasl("SCRAM-SHA-512", PASSWORD))
            .args([
                "-C",
                "-t",
                "sales",
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-f",
                "%o %s\n",
            ]),
    );
    assert_eq!(
        String::from_utf8_lossy(&consumed.stdout),
        "0 mia apple\n1 leo pear\n"
    );
    let refused = run_brook_err(
        Command::new(kcat)
            .args(sasl("SCRAM-SHA-512", "wrong"))
            .args(["-L", "-m", "3"]),
    );
    assert!(refused.contains("Authentication failed"), "{refused}");
}

#[test]
fn kafka_python_over_sasl() {
    let python_path = brook_testkit::broker::kafka_python(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    let data = DataDir::new();
    let (_broker, b) = data.broker("127.0.0.1:0", &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broker/kafka_python_sasl.py");
    let out = run_brook_ok(
        Command::new("python3")
            .arg(script)
            .args([&b, USER, PASSWORD])
            .env("PYTHONPATH", &python_path),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("ok\n"), "{stdout}");
    let log = data.broker_log();
    assert!(
        log.contains("SASL authentication failed: invalid proof for user \"alice\""),
        "{log}"
    );
}

#[test]
fn a_non_loopback_listener_needs_users_and_an_advertised_host() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = |extra: &[&str]| {
        run_brook_err(
            brook()
                .arg("--data-dir")
                .arg(dir.path())
                .args(["broker", "--listen", "0.0.0.0:0"])
                .args(extra),
        )
    };
    let e = broker(&[]);
    assert!(
        e.contains("is not loopback and SASL is not configured"),
        "{e}"
    );
    assert!(e.contains("brook broker user add NAME"), "{e}");

    let users = dir.path().join("users.scram");
    let out = run_brook_with_input(
        brook()
            .arg("--data-dir")
            .arg(dir.path())
            .args(["broker", "user", "add", USER]),
        b"pw\n",
    );
    expect_success("brook broker user add", &out);
    let e = broker(&[]);
    assert!(e.contains("pass --advertised-host"), "{e}");

    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = broker(&["--advertised-host", "127.0.0.1"]);
    assert!(e.contains("chmod 600"), "{e}");

    let e = broker(&["--sasl-users", "/nonexistent/users.scram"]);
    assert!(e.contains("/nonexistent/users.scram"), "{e}");

    let bad_name = run_brook_with_input(
        brook()
            .arg("--data-dir")
            .arg(dir.path())
            .args(["broker", "user", "add", "al ice"]),
        b"pw\n",
    );
    assert!(!bad_name.status.success());
    assert!(
        String::from_utf8_lossy(&bad_name.stderr).contains("user name \"al ice\" has ' '"),
        "{bad_name:?}"
    );
}
