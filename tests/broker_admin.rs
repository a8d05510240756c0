//! The broker's admin APIs with clients brook did not write: librdkafka's admin
//! client (the `rdkafka` crate) deletes topics, adds partitions and describes topic
//! and broker configs, kcat (Debian's, on librdkafka) sees and uses the added
//! partitions, and kafka-python's KafkaAdminClient does the same and deletes a
//! group's committed offsets (OffsetDelete). Both alter topic configs
//! (AlterConfigs, and kafka-python IncrementalAlterConfigs), and the log applies an
//! altered retention. The broker is the real binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use brook::kafka::alter_configs::{incremental_alter_topic_configs, AlterConfigsError, AlterOp};
use brook_testkit::broker::{
    admin_client, client_config as config, kafka_python, kafka_python_command, kcat, run_client_ok,
    BrokerProcess,
};
use brook_testkit::process::{wait_bounded, wait_for};
use rdkafka::admin::{
    AlterConfig, ConfigSource, NewPartitions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

fn start(dir: &Path) -> BrokerProcess {
    BrokerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_brook")),
        dir,
        &["--group-min-session-timeout-ms", "500"],
    )
}

/// Partition counts of every topic, from a fresh Metadata request.
fn partition_counts(bootstrap: &str) -> Vec<(String, usize)> {
    let consumer: BaseConsumer = config(bootstrap).create().expect("consumer");
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    let mut topics: Vec<(String, usize)> = metadata
        .topics()
        .iter()
        .map(|t| (t.name().to_owned(), t.partitions().len()))
        .collect();
    topics.sort();
    topics
}

/// Runs kcat with `args` (and `input` on stdin), at most 20 s; its stdout.
fn run_kcat(args: &[&str], input: &str) -> String {
    let mut child = Command::new(kcat(Path::new(env!("CARGO_MANIFEST_DIR"))))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kcat");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("write to kcat");
    }
    let output = match wait_bounded(child, Duration::from_secs(20)) {
        Ok(o) if o.status.success() => o,
        Ok(o) | Err(o) => panic!(
            "kcat {args:?} failed: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
    };
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn rdkafka_admin_deletes_topics_adds_partitions_and_describes_configs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    let (admin, options) = admin_client(&bootstrap);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let topics = [
        NewTopic::new("snacks", 2, TopicReplication::Fixed(1)).set("retention.ms", "60000"),
        NewTopic::new("drinks", 1, TopicReplication::Fixed(1)),
    ];
    let created = rt
        .block_on(admin.create_topics(&topics, &options))
        .expect("create topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    // DescribeConfigs: the topic's value that was set, a default, the broker's setting.
    let described = rt
        .block_on(admin.describe_configs(
            &[
                ResourceSpecifier::Topic("snacks"),
                ResourceSpecifier::Broker(0),
            ],
            &options,
        ))
        .expect("describe configs");
    let topic = described[0].as_ref().expect("topic configs");
    let retention = topic.get("retention.ms").expect("retention.ms");
    assert_eq!(retention.value.as_deref(), Some("60000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopic);
    assert!(!retention.is_default && !retention.is_read_only);
    let segment = topic.get("segment.bytes").expect("segment.bytes");
    assert_eq!(segment.value.as_deref(), Some("1073741824"));
    assert_eq!(segment.source, ConfigSource::Default);
    let broker_configs = described[1].as_ref().expect("broker configs");
    let min_session = broker_configs
        .get("group.min.session.timeout.ms")
        .expect("group.min.session.timeout.ms");
    assert_eq!(min_session.value.as_deref(), Some("500"));
    assert_eq!(min_session.source, ConfigSource::StaticBroker);
    assert!(min_session.is_read_only);

    // CreatePartitions: snacks grows to 5; drinks cannot shrink or stay.
    let grown = rt
        .block_on(admin.create_partitions(
            &[
                NewPartitions::new("snacks", 5),
                NewPartitions::new("drinks", 1),
            ],
            &options,
        ))
        .expect("create partitions");
    assert_eq!(grown[0], Ok("snacks".to_owned()));
    assert_eq!(
        grown[1],
        Err(("drinks".to_owned(), RDKafkaErrorCode::InvalidPartitions))
    );
    assert_eq!(
        partition_counts(&bootstrap),
        vec![("drinks".to_owned(), 1), ("snacks".to_owned(), 5)]
    );
    // kcat sees the new partitions and writes to and reads from the last one.
    let listing = run_kcat(&["-b", &bootstrap, "-L", "-t", "snacks"], "");
    assert!(
        listing.contains("topic \"snacks\" with 5 partitions"),
        "{listing}"
    );
    run_kcat(
        &["-b", &bootstrap, "-t", "snacks", "-P", "-p", "4", "-K:"],
        "k1:crisps\nk2:nuts\n",
    );
    let read = run_kcat(
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            "snacks",
            "-p",
            "4",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k=%s@%o\\n",
        ],
        "",
    );
    assert_eq!(read, "k1=crisps@0\nk2=nuts@1\n");

    // DeleteTopics: drinks goes (and may be created again, empty); an unknown topic
    // is an error of its own.
    let deleted = rt
        .block_on(admin.delete_topics(&["drinks", "nothing"], &options))
        .expect("delete topics");
    assert_eq!(deleted[0], Ok("drinks".to_owned()));
    assert_eq!(
        deleted[1],
        Err((
            "nothing".to_owned(),
            RDKafkaErrorCode::UnknownTopicOrPartition
        ))
    );
    assert_eq!(partition_counts(&bootstrap), vec![("snacks".to_owned(), 5)]);
    let listing = run_kcat(&["-b", &bootstrap, "-L"], "");
    assert!(!listing.contains("\"drinks\""), "{listing}");
    let again = rt
        .block_on(admin.create_topics(
            &[NewTopic::new("drinks", 3, TopicReplication::Fixed(1))],
            &options,
        ))
        .expect("create again");
    assert!(again.iter().all(Result::is_ok), "{again:?}");
}

#[test]
fn kafka_python_admin_describes_configs_adds_partitions_and_deletes() {
    let python_path = kafka_python(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broker/kafka_python_admin.py");
    let mut python = Command::new("python3");
    python
        .arg(&script)
        .arg(broker.bootstrap())
        .env("PYTHONPATH", &python_path);
    run_client_ok(python, "kafka-python admin");
}

/// rdkafka's AdminClient `alter_configs` (the legacy AlterConfigs: the whole set) on a
/// topic whose segments hold records of ten minutes ago: DescribeConfigs shows the
/// new retention, the log applies it (the closed segments go, the log start moves),
/// and librdkafka's IncrementalAlterConfigs changes one config (the others stay) or
/// is refused (an unknown config, naming it; an unknown topic).
#[test]
fn rdkafka_admin_alters_configs_and_the_log_applies_the_retention() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    let (admin, options) = admin_client(&bootstrap);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let topic =
        NewTopic::new("expiring", 1, TopicReplication::Fixed(1)).set("segment.bytes", "1024");
    let created = rt
        .block_on(admin.create_topics([&topic], &options))
        .expect("create topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let ten_minutes_ago = {
        use brook::core::time::{Clock, SystemClock};
        SystemClock.now_ms() - 600_000
    };
    // Four batches of ten 100-byte records: one segment each (segment.bytes 1024).
    for batch in 0..4 {
        let records = (0..10).map(|i| {
            let value = format!("{:0>100}", batch * 10 + i);
            (0, None, value, Some(ten_minutes_ago))
        });
        brook::kafka::admin::produce(&bootstrap, "expiring", records).expect("produce");
    }
    let consumer: BaseConsumer = config(&bootstrap).create().expect("consumer");
    let watermarks = || {
        consumer
            .fetch_watermarks("expiring", 0, Duration::from_secs(10))
            .expect("watermarks")
    };
    // The default retention (7 days) keeps them.
    assert_eq!(watermarks(), (0, 40));

    let retention = AlterConfig::new(ResourceSpecifier::Topic("expiring"))
        .set("retention.ms", "60000")
        .set("segment.bytes", "1024");
    let altered = rt
        .block_on(admin.alter_configs([&retention], &options))
        .expect("alter configs");
    assert_eq!(
        altered,
        vec![Ok(OwnedResourceSpecifier::Topic("expiring".into()))]
    );
    let described = rt
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic("expiring")], &options))
        .expect("describe configs");
    let configs = described[0].as_ref().expect("topic configs");
    let value = |name| configs.get(name).and_then(|e| e.value.clone());
    assert_eq!(value("retention.ms").as_deref(), Some("60000"));
    assert_eq!(
        configs.get("retention.ms").map(|e| &e.source),
        Some(&ConfigSource::DynamicTopic)
    );
    assert_eq!(value("segment.bytes").as_deref(), Some("1024"));
    // The broker's next retention pass deletes the closed segments (the active one
    // stays, as Kafka's): the log start moves, the end stays.
    let after = wait_for(
        "retention to delete segments",
        Duration::from_secs(20),
        || Some(watermarks()).filter(|(start, _)| *start > 0),
    );
    assert_eq!(after, (30, 40));

    // Refusals: the rdkafka crate's alter_configs reports every resource as altered
    // (it drops the per-resource errors), so they are read through librdkafka's
    // IncrementalAlterConfigs (brook_kafka::alter_configs, as `brook topic alter`).
    let incremental = |topic, config, value| {
        incremental_alter_topic_configs(
            admin.inner(),
            topic,
            &[(config, AlterOp::Set(value))],
            false,
            Duration::from_secs(10),
        )
    };
    match incremental("expiring", "compression.type", "zstd") {
        Err(AlterConfigsError::Refused { code, message }) => {
            assert_eq!(code, RDKafkaErrorCode::InvalidConfig);
            assert!(message.contains("compression.type"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match incremental("nothing", "retention.ms", "1000") {
        Err(AlterConfigsError::Refused { code, .. }) => {
            assert_eq!(code, RDKafkaErrorCode::UnknownTopicOrPartition);
        }
        other => panic!("{other:?}"),
    }
    incremental("expiring", "segment.ms", "3600000").expect("alter segment.ms");
    let described = rt
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic("expiring")], &options))
        .expect("describe configs");
    let configs = described[0].as_ref().expect("topic configs");
    let value = |name| configs.get(name).and_then(|e| e.value.as_deref());
    assert_eq!(value("retention.ms"), Some("60000"));
    assert_eq!(value("segment.ms"), Some("3600000"));
    assert_eq!(value("segment.bytes"), Some("1024"));
}

#[test]
fn kafka_python_admin_alters_topic_configs_incrementally_and_as_a_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let mut python = kafka_python_command(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/broker/kafka_python_configs.py",
    );
    python.arg(broker.bootstrap());
    run_client_ok(python, "kafka-python alter configs");
}

/// `brook_kafka::admin::produce` reports a record the broker refuses (over the
/// topic's max.message.bytes) instead of returning as if it was written.
#[test]
fn admin_produce_returns_the_first_failed_delivery() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    let (admin, options) = admin_client(&bootstrap);
    let topic =
        NewTopic::new("small", 1, TopicReplication::Fixed(1)).set("max.message.bytes", "1024");
    let created =
        futures::executor::block_on(admin.create_topics([&topic], &options)).expect("create topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let records = vec![
        (0, None, "fits".to_owned(), None),
        (0, None, "x".repeat(4000), None),
    ];
    let err = brook::kafka::admin::produce(&bootstrap, "small", records)
        .expect_err("a record over max.message.bytes is refused");
    let message = err.to_string();
    assert!(
        message.contains("delivery to \"small\" failed"),
        "{message}"
    );
}
