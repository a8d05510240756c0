//! Consumer groups of separate clients through `brook broker` (issue 17, step 2):
//! librdkafka consumers (the `rdkafka` crate) in one group split a 4-partition topic,
//! a third joins and a member leaves, with every record consumed once and committed;
//! a member SIGKILLed (kafka-python, another process) loses its partitions once its
//! session times out; kafka-python commits (ListGroups and DescribeGroups show it as
//! the one member) and a second run resumes from the commit; a static member
//! (`group.instance.id`) restarts and gets its partitions back without a rebalance.
//! The broker is the real binary, with a 500 ms minimum session timeout so the
//! timeouts stay short.

// Waiting for rebalances polls the consumers with a deadline.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook_testkit::binary::run_brook_ok;
use brook_testkit::broker::{client_config as config, create_topic, kafka_python, BrokerProcess};
use brook_testkit::process::{wait_bounded, KillOnDrop};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const PARTITIONS: i32 = 4;

fn start(dir: &Path) -> BrokerProcess {
    BrokerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_brook")),
        dir,
        &["--group-min-session-timeout-ms", "500"],
    )
}

/// Produces `n` records numbered from `first`, spread over the partitions.
fn produce(bootstrap: &str, topic: &str, first: usize, n: usize) {
    let producer: BaseProducer = config(bootstrap).create().expect("producer");
    for i in first..first + n {
        let value = format!("sale {i}");
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        producer
            .send(
                BaseRecord::<(), String>::to(topic)
                    .payload(&value)
                    .partition(partition),
            )
            .expect("queue");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

fn member(bootstrap: &str, group: &str, name: &str, topic: &str) -> BaseConsumer {
    member_with(bootstrap, group, name, topic, "range")
}

/// A group member with the assignor `strategy` (librdkafka's
/// `partition.assignment.strategy`).
fn member_with(
    bootstrap: &str,
    group: &str,
    name: &str,
    topic: &str,
    strategy: &str,
) -> BaseConsumer {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", group)
        .set("client.id", name)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "3000")
        .set("heartbeat.interval.ms", "200")
        .set("partition.assignment.strategy", strategy)
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|l| l.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer, committing each record it gets (synchronously), until
/// `done` holds of their assignments and `want` records were consumed, or 20 s.
fn poll_until(
    consumers: &[&BaseConsumer],
    seen: &mut BTreeMap<String, usize>,
    want: usize,
    done: impl Fn(&[BTreeSet<i32>]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for c in consumers {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                *seen.entry(value).or_default() += 1;
                c.commit_message(&m, CommitMode::Sync).expect("commit");
            }
        }
        let sets: Vec<BTreeSet<i32>> = consumers.iter().map(|c| assigned(c)).collect();
        if done(&sets) && seen.len() >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no rebalance to the expected assignment in 20 s: {sets:?}, {} of {want} records",
            seen.len()
        );
    }
}

/// Every partition owned by exactly one consumer, each owning at least one.
fn split(sets: &[BTreeSet<i32>]) -> bool {
    let total: usize = sets.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
    total == PARTITIONS as usize && union.len() == total && sets.iter().all(|s| !s.is_empty())
}

#[test]
fn rdkafka_members_split_the_partitions_and_rebalance_on_join_and_leave() {
    members_split_and_rebalance("range");
}

/// The incremental protocol (KIP-429) on the classic group protocol: revoked
/// partitions come back in a second rebalance the clients ask for.
#[test]
fn cooperative_sticky_members_split_the_partitions_and_rebalance() {
    members_split_and_rebalance("cooperative-sticky");
}

fn members_split_and_rebalance(strategy: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "sales", PARTITIONS);
    let mut seen = BTreeMap::new();
    // A group id with a character topic names cannot have: Kafka takes any.
    let member = |name: &str| member_with(&bootstrap, "billing:eu", name, "sales", strategy);

    // Records are produced once the group is stable and all read (and committed)
    // before the next rebalance, so a new owner of a partition starts exactly at the
    // previous owner's commit: a record read twice means a commit was lost or not
    // honoured (auto.offset.reset=earliest would start it from 0).
    let a = member("a");
    let b = member("b");
    poll_until(&[&a, &b], &mut seen, 0, split);
    produce(&bootstrap, "sales", 0, 100);
    poll_until(&[&a, &b], &mut seen, 100, split);
    assert_eq!((assigned(&a).len(), assigned(&b).len()), (2, 2));

    let c = member("c");
    poll_until(&[&a, &b, &c], &mut seen, 100, split);
    produce(&bootstrap, "sales", 100, 100);
    poll_until(&[&a, &b, &c], &mut seen, 200, split);

    // b leaves cleanly (LeaveGroup): its partitions go to a and c.
    drop(b);
    poll_until(&[&a, &c], &mut seen, 200, split);
    produce(&bootstrap, "sales", 200, 100);
    poll_until(&[&a, &c], &mut seen, 300, split);

    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "consumed more than once: {twice:?}");
    assert_eq!(seen.len(), 300);
    // The group's committed offsets are the ends of the partitions.
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition("sales", p);
    }
    let committed = a
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let offsets: Vec<Offset> = committed.elements().iter().map(|e| e.offset()).collect();
    assert_eq!(offsets, vec![Offset::Offset(75); 4]);

    // They are the log's committed offsets: `brook group describe` shows them (and
    // no lag) once the broker is gone.
    drop((a, c));
    drop(broker);
    let out = run_brook_ok(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(["group", "describe", "billing:eu"]),
    );
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    let want: Vec<Vec<String>> = (0..PARTITIONS)
        .map(|p| {
            ["sales", &p.to_string(), "75", "75", "75", "0", "-"]
                .map(str::to_owned)
                .to_vec()
        })
        .collect();
    assert_eq!(rows, want);
}

fn python(script: &str, args: &[&str]) -> Command {
    let python_path = kafka_python(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    let mut cmd = Command::new("python3");
    cmd.arg(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/broker")
            .join(script),
    )
    .args(args)
    .env("PYTHONPATH", python_path);
    cmd
}

fn run_ok(cmd: &mut Command) -> String {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    let (ok, out) = match wait_bounded(child, Duration::from_secs(60)) {
        Ok(o) => (o.status.success(), o),
        Err(o) => (false, o),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        ok,
        "{cmd:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn kafka_python_commits_and_a_second_run_resumes_from_the_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "py-groups", PARTITIONS);
    produce(&bootstrap, "py-groups", 0, 40);
    let first = run_ok(&mut python(
        "kafka_python_group.py",
        &[&bootstrap, "py-groups", "40"],
    ));
    assert!(first.contains("consumed 40"), "{first}");
    produce(&bootstrap, "py-groups", 40, 8);
    let second = run_ok(&mut python(
        "kafka_python_group.py",
        &[&bootstrap, "py-groups", "8"],
    ));
    assert!(second.contains("consumed 8"), "{second}");
    // Nothing before the first run's commit is read again.
    assert!(second.contains("first sale 40"), "{second}");
}

#[test]
fn a_sigkilled_members_partitions_move_once_its_session_times_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "crash", PARTITIONS);
    let a = member(&bootstrap, "billing", "a", "crash");
    let mut seen = BTreeMap::new();
    poll_until(&[&a], &mut seen, 0, |s| s[0].len() == PARTITIONS as usize);
    // A kafka-python member in another process joins, takes half, and is killed.
    let child = python("kafka_python_member.py", &[&bootstrap, "crash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start python3");
    let mut child = KillOnDrop(child);
    poll_until(&[&a], &mut seen, 0, |s| s[0].len() == 2);
    child.kill().expect("SIGKILL the python member");
    let killed = Instant::now();
    poll_until(&[&a], &mut seen, 0, |s| s[0].len() == PARTITIONS as usize);
    // Its session (1 s from its last heartbeat, at most 200 ms before the kill) had
    // to time out first: no LeaveGroup came.
    assert!(
        killed.elapsed() >= Duration::from_millis(700),
        "{:?}",
        killed.elapsed()
    );
}

/// Counts a consumer's rebalance callbacks (librdkafka calls them on every
/// assignment change, revocations included).
#[derive(Clone, Default)]
struct CountRebalances(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rdkafka::ClientContext for CountRebalances {}

impl rdkafka::consumer::ConsumerContext for CountRebalances {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, _: &rdkafka::consumer::Rebalance<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl CountRebalances {
    fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A static member (`group.instance.id` = `instance`) of group `billing` on `sales`.
fn static_member(
    bootstrap: &str,
    instance: &str,
    counter: &CountRebalances,
) -> BaseConsumer<CountRebalances> {
    let consumer: BaseConsumer<CountRebalances> = config(bootstrap)
        .set("group.id", "billing")
        .set("group.instance.id", instance)
        .set("client.id", instance)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        // Longer than the restart below takes, so the broker keeps the member.
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "200")
        .create_with_context(counter.clone())
        .expect("consumer");
    consumer.subscribe(&["sales"]).expect("subscribe");
    consumer
}

fn assigned_to<C: rdkafka::consumer::ConsumerContext>(c: &BaseConsumer<C>) -> BTreeSet<i32> {
    c.assignment()
        .map(|l| l.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls `consumers` until `done` holds of their assignments, or 20 s.
fn poll_static_until(
    consumers: &[&BaseConsumer<CountRebalances>],
    done: impl Fn(&[BTreeSet<i32>]) -> bool,
) -> Vec<BTreeSet<i32>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for c in consumers {
            let _ = c.poll(Duration::from_millis(50));
        }
        let sets: Vec<BTreeSet<i32>> = consumers.iter().map(|c| assigned_to(c)).collect();
        if done(&sets) {
            return sets;
        }
        assert!(Instant::now() < deadline, "not reached in 20 s: {sets:?}");
    }
}

/// KIP-345: a static member that restarts (librdkafka sends no LeaveGroup for
/// it) and joins again with its `group.instance.id` gets its old partitions back at
/// once, and the other member sees no rebalance at all.
#[test]
fn a_restarted_static_member_gets_its_partitions_back_without_a_rebalance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "sales", PARTITIONS);
    let (count_a, count_b) = (CountRebalances::default(), CountRebalances::default());
    let a = static_member(&bootstrap, "a-instance", &count_a);
    let b = static_member(&bootstrap, "b-instance", &count_b);
    let before = poll_static_until(&[&a, &b], split);
    // Let the group settle (the first member's lone assignment is revoked when the
    // second joins), then take a's count.
    let settled = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settled {
        let _ = a.poll(Duration::from_millis(50));
        let _ = b.poll(Duration::from_millis(50));
    }
    let a_rebalances = count_a.count();

    drop(b);
    let count_b2 = CountRebalances::default();
    let b2 = static_member(&bootstrap, "b-instance", &count_b2);
    let after = poll_static_until(&[&a, &b2], |sets| !sets[1].is_empty());
    assert_eq!(after, before, "the restarted member got other partitions");
    // Some more polling: no rebalance reaches a, late or not.
    let quiet = Instant::now() + Duration::from_secs(2);
    while Instant::now() < quiet {
        let _ = a.poll(Duration::from_millis(50));
        let _ = b2.poll(Duration::from_millis(50));
    }
    assert_eq!(count_a.count(), a_rebalances, "a saw a rebalance");
    assert_eq!(assigned_to(&a), before[0]);
    assert_eq!(assigned_to(&b2), before[1]);
    // The restarted member reads its partitions.
    produce(&bootstrap, "sales", 0, 40);
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < 40 {
        for c in [&a, &b2] {
            if let Some(Ok(_)) = c.poll(Duration::from_millis(50)) {
                got += 1;
            }
        }
        assert!(Instant::now() < deadline, "{got} of 40 records read");
    }
}
