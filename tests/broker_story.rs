//! The seed's story (docs/seed.md: snack sales, the billing and the analytics team)
//! played by separate OS processes with Kafka clients brook did not write, against a
//! real `brook broker` (issue 17's acceptance test).
//!
//! Topic `snack-sales` (3 partitions). Two producers append all the time: librdkafka
//! (examples/rdkafka_client.rs) and kafka-python (tests/broker/kafka_python_producer.py).
//! Group `billing`: four librdkafka members (cooperative-sticky, commit after printing)
//! joining one by one; with 3 partitions the fourth sits idle. Group `analytics`: one
//! kafka-python member (tests/broker/kafka_python_analytics.py). Then:
//! - a billing member that owns a partition is SIGKILLed: the group learns of it only
//!   when its session times out (no LeaveGroup came), and its partition moves to the
//!   idle member, the others keep theirs;
//! - another member leaves cleanly (LeaveGroup): its partition moves at once, well
//!   before the session timeout;
//! - the producers stop; every acknowledged record is in the log exactly once with
//!   dense offsets; billing consumed every record at least once, and read twice only
//!   the killed member's records after its last commit (the rule asserted: docs/
//!   semantics.md §1a, "at least once across a crash"); analytics read every record
//!   exactly once; both groups' committed offsets reach the log end (no lag), read
//!   through the Kafka protocol (OffsetFetch, ListOffsets) and shown by `brook group
//!   describe` through the running broker with the live members.

// Deadlines while waiting for processes, and the time a rebalance took.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use brook::kafka::admin::{committed_offsets, create_topic};
use brook_testkit::binary::{example_binary, run_brook_ok};
use brook_testkit::broker::{kafka_python_command, BrokerProcess};
use brook_testkit::child_lines::ChildLines;
use brook_testkit::process::KillOnDrop;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

const TOPIC: &str = "snack-sales";
const PARTITIONS: i32 = 3;
/// billing's session timeout (ms); its members heartbeat every tenth of it.
const SESSION_MS: u64 = 4000;
const WAIT: Duration = Duration::from_secs(30);

/// One record as a consumer printed it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Consumed {
    partition: i32,
    offset: i64,
    value: String,
}

/// A client process: closing its stdin ends it cleanly; its stdout says what it did.
struct Client {
    name: String,
    child: KillOnDrop,
    stdin: Option<ChildStdin>,
    out: ChildLines,
}

impl Client {
    fn start(name: &str, mut cmd: Command) -> Client {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdin = child.stdin.take();
        let out = ChildLines::read(&mut child);
        Client {
            name: name.to_owned(),
            child: KillOnDrop(child),
            stdin,
            out,
        }
    }

    /// Its partitions after its latest rebalance; `None` before its first.
    fn assignment(&self) -> Option<BTreeSet<i32>> {
        let lines = self.out.lines();
        let last = lines.iter().rev().find(|l| l.starts_with("assigned"))?;
        Some(
            last["assigned".len()..]
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect(),
        )
    }

    fn records(&self) -> Vec<Consumed> {
        parse_records(&self.out.lines())
    }

    /// Closes its stdin and waits for it to end cleanly; everything it printed.
    fn stop(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the client") {
                let lines = self.out.finish();
                assert!(status.success(), "{} ended with {status}", self.name);
                return lines;
            }
            assert!(Instant::now() < deadline, "{} did not end", self.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no LeaveGroup, no last commit. Everything it printed.
    fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
        self.out.finish()
    }
}

fn parse_records(lines: &[String]) -> Vec<Consumed> {
    lines
        .iter()
        .filter_map(|l| {
            let mut f = l.strip_prefix("record ")?.splitn(3, ' ');
            Some(Consumed {
                partition: f.next()?.parse().ok()?,
                offset: f.next()?.parse().ok()?,
                value: f.next()?.to_owned(),
            })
        })
        .collect()
}

/// Polls `ok` every 50 ms until it holds; fails after [`WAIT`] showing each client's
/// assignment. Returns how long it took.
fn wait_until(what: &str, clients: &[&Client], mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        let states: Vec<String> = clients
            .iter()
            .map(|c| {
                format!(
                    "{}: {:?}, {} records",
                    c.name,
                    c.assignment(),
                    c.records().len()
                )
            })
            .collect();
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {what}: {states:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// Every live member has had its first rebalance, the assignments split the
/// partitions, and `busy` of them hold partitions.
fn settled(members: &[&Client], busy: usize) -> bool {
    let Some(sets) = members
        .iter()
        .map(|m| m.assignment())
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
    let total: usize = sets.iter().map(BTreeSet::len).sum();
    total == PARTITIONS as usize
        && union.len() == total
        && sets.iter().filter(|s| !s.is_empty()).count() == busy
}

fn rdkafka_client(args: &[&str]) -> Command {
    let mut cmd = Command::new(example_binary("rdkafka_client"));
    cmd.args(args);
    cmd
}

fn kafka_python(script: &str, args: &[&str]) -> Command {
    let mut cmd = kafka_python_command(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &format!("tests/broker/{script}"),
    );
    cmd.args(args);
    cmd
}

/// The log end of each partition (ListOffsets, latest).
fn log_ends(bootstrap: &str) -> BTreeMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("a consumer");
    (0..PARTITIONS)
        .map(|p| {
            let (_, high) = c
                .fetch_watermarks(TOPIC, p, Duration::from_secs(10))
                .expect("ListOffsets");
            (p, high)
        })
        .collect()
}

/// How many records `produced N` says a producer wrote (all acknowledged).
fn produced(lines: &[String]) -> usize {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("produced ")?.parse().ok())
        .unwrap_or_else(|| panic!("no `produced N`: {lines:?}"))
}

/// The number of times billing read each (partition, offset).
fn read_counts(records: &[Consumed]) -> BTreeMap<(i32, i64), usize> {
    let mut n = BTreeMap::new();
    for r in records {
        *n.entry((r.partition, r.offset)).or_insert(0) += 1;
    }
    n
}

/// `brook group describe GROUP` on the data directory a broker serves (it goes through
/// the broker).
fn describe(data_dir: &Path, group: &str) -> String {
    let out = run_brook_ok(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["group", "describe", group]),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The partition table of `brook group describe`: partition -> committed, end,
/// stable end and lag.
fn lag_rows(text: &str) -> BTreeMap<i32, [String; 4]> {
    text.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let cols = [f.get(2)?, f.get(3)?, f.get(4)?, f.get(5)?].map(|c| c.to_string());
            Some((f.get(1)?.parse().ok()?, cols))
        })
        .collect()
}

/// How many members `brook group describe` lists (the lines after its blank line and
/// the members' header).
fn member_lines(text: &str) -> usize {
    text.lines().skip_while(|l| !l.is_empty()).skip(2).count()
}

#[test]
fn snack_sales_teams_share_the_log_across_processes_crashes_and_leaves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = BrokerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_brook")),
        dir.path(),
        &["--group-min-session-timeout-ms", "500"],
    );
    let b = broker.bootstrap();
    create_topic(&b, TOPIC, PARTITIONS).expect("create snack-sales");

    // Sales arrive all the time from here until the end.
    let rk_producer = Client::start(
        "rdkafka producer",
        rdkafka_client(&["produce", &b, TOPIC, "rk"]),
    );
    let py_producer = Client::start(
        "kafka-python producer",
        kafka_python("kafka_python_producer.py", &[&b, TOPIC, "py"]),
    );
    let analytics = Client::start(
        "analytics",
        kafka_python("kafka_python_analytics.py", &[&b, TOPIC]),
    );

    // billing's members join one by one; each join rebalances, and the fourth finds
    // no partition left: it sits idle.
    let session = SESSION_MS.to_string();
    let mut billing: Vec<Client> = Vec::new();
    for i in 0..4 {
        billing.push(Client::start(
            &format!("billing-{i}"),
            rdkafka_client(&["consume", &b, TOPIC, "billing", &session]),
        ));
        let members: Vec<&Client> = billing.iter().collect();
        wait_until(
            &format!("billing's {} members to settle", i + 1),
            &members,
            || settled(&members, (i + 1).min(3)),
        );
    }
    let members: Vec<&Client> = billing.iter().chain([&analytics]).collect();
    wait_until("every busy member to read", &members, || {
        billing
            .iter()
            .filter(|m| m.assignment().is_some_and(|a| !a.is_empty()))
            .all(|m| !m.records().is_empty())
            && !analytics.records().is_empty()
    });
    let idle = billing
        .iter()
        .position(|m| m.assignment().is_some_and(|a| a.is_empty()))
        .expect("an idle member");
    assert_eq!(analytics.assignment(), Some((0..PARTITIONS).collect()));

    // SIGKILL a member that owns a partition: its partition moves to the idle member
    // once its session has timed out; the other two keep theirs (sticky).
    let victim = (0..4).find(|&i| i != idle).expect("a busy member");
    let before: Vec<BTreeSet<i32>> = billing
        .iter()
        .map(|m| m.assignment().unwrap_or_default())
        .collect();
    let lost = before[victim].clone();
    let victim_lines = billing.remove(victim).kill();
    let idle = if idle > victim { idle - 1 } else { idle };
    let members: Vec<&Client> = billing.iter().collect();
    let moved_after = wait_until("the killed member's partition to move", &members, || {
        billing[idle].assignment().as_ref() == Some(&lost)
    });
    let others: Vec<BTreeSet<i32>> = (0..4)
        .filter(|&i| i != victim)
        .map(|i| before[i].clone())
        .collect();
    let now: Vec<BTreeSet<i32>> = billing
        .iter()
        .map(|m| m.assignment().unwrap_or_default())
        .collect();
    let mut want = others.clone();
    want[idle] = lost.clone();
    assert_eq!(now, want, "only the lost partition moved");
    // The broker cannot know before the session expires: its last heartbeat was at
    // most a heartbeat interval (a tenth) before the kill.
    assert!(
        moved_after >= Duration::from_millis(SESSION_MS - SESSION_MS / 10),
        "moved after {moved_after:?}, before the {SESSION_MS} ms session timeout"
    );

    eprintln!("story: the killed member's partition {lost:?} moved after {moved_after:?}");

    // A member leaves cleanly: its partition moves at once (LeaveGroup), well
    // before a session timeout.
    let leaver = (0..billing.len())
        .find(|&i| i != idle)
        .expect("a busy member");
    let left = billing[leaver].assignment().unwrap_or_default();
    let leaver_lines = billing.remove(leaver).stop();
    assert_eq!(leaver_lines.last().map(String::as_str), Some("closed"));
    let members: Vec<&Client> = billing.iter().collect();
    let moved_after = wait_until("the leaver's partition to move", &members, || {
        settled(&members, 2)
    });
    // Without its LeaveGroup the leaver's partition could not move before its session
    // expired: at least nine tenths of the session timeout after it stopped.
    assert!(
        moved_after < Duration::from_millis(SESSION_MS - SESSION_MS / 10),
        "a clean leave took {moved_after:?} to rebalance"
    );
    eprintln!("story: the leaver's partition {left:?} moved after {moved_after:?}");
    let heir = billing
        .iter()
        .position(|m| m.assignment().is_some_and(|a| a.is_superset(&left)))
        .expect("an heir");
    let &gone = left.iter().next().expect("the leaver owned a partition");
    wait_until("the heir to read the leaver's partition", &members, || {
        billing[heir].records().iter().any(|r| r.partition == gone)
    });

    // The producers stop: every acknowledged record is in the log once, offsets dense.
    let n_rk = produced(&rk_producer.stop());
    let n_py = produced(&py_producer.stop());
    let ends = log_ends(&b);
    assert_eq!(ends.values().sum::<i64>(), (n_rk + n_py) as i64);
    let everything: BTreeSet<(i32, i64)> = ends
        .iter()
        .flat_map(|(&p, &end)| (0..end).map(move |o| (p, o)))
        .collect();

    // Both teams catch up and commit: no lag in either group.
    let earlier: Vec<Consumed> = [&victim_lines, &leaver_lines]
        .iter()
        .flat_map(|l| parse_records(l))
        .collect();
    let members: Vec<&Client> = billing.iter().chain([&analytics]).collect();
    wait_until("both groups to commit the log end", &members, || {
        let c = |g| committed_offsets(&b, g, TOPIC).expect("OffsetFetch");
        c("billing") == ends && c("analytics") == ends
    });
    // `brook group describe` through the running broker shows the same: no lag, and
    // the live members.
    for (group, live) in [("billing", billing.len()), ("analytics", 1)] {
        let described = describe(dir.path(), group);
        let rows = lag_rows(&described);
        let want: BTreeMap<i32, [String; 4]> = ends
            .iter()
            .map(|(&p, &end)| (p, [end, end, end, 0].map(|n| n.to_string())))
            .collect();
        assert_eq!(rows, want, "{described}");
        assert_eq!(member_lines(&described), live, "{described}");
    }
    let mut billing_read = earlier;
    for m in billing {
        billing_read.extend(parse_records(&m.stop()));
    }
    let analytics_read = parse_records(&analytics.stop());

    // analytics: every record once, the values the producers acknowledged.
    let mut values: Vec<&str> = analytics_read.iter().map(|r| r.value.as_str()).collect();
    values.sort_unstable();
    let mut want: Vec<String> = (0..n_rk)
        .map(|i| format!("rk-{i}"))
        .chain((0..n_py).map(|i| format!("py-{i}")))
        .collect();
    want.sort_unstable();
    assert_eq!(values, want);
    let at: BTreeMap<(i32, i64), &str> = analytics_read
        .iter()
        .map(|r| ((r.partition, r.offset), r.value.as_str()))
        .collect();
    assert_eq!(at.keys().copied().collect::<BTreeSet<_>>(), everything);

    // billing: every record at least once, each (partition, offset) the same record
    // analytics read; twice only on the killed member's partition, one contiguous run
    // ending at the last record the killed member printed (it had not committed them).
    for r in &billing_read {
        assert_eq!(
            at.get(&(r.partition, r.offset)),
            Some(&r.value.as_str()),
            "{r:?}"
        );
    }
    let counts = read_counts(&billing_read);
    assert_eq!(counts.keys().copied().collect::<BTreeSet<_>>(), everything);
    let twice: Vec<(i32, i64)> = counts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&k, _)| k)
        .collect();
    assert!(counts.values().all(|&n| n <= 2), "read thrice: {counts:?}");
    eprintln!(
        "story: {} records produced, billing read {} ({} twice), analytics {}",
        n_rk + n_py,
        billing_read.len(),
        twice.len(),
        analytics_read.len()
    );
    let &lost_partition = lost.iter().next().expect("the victim owned a partition");
    assert!(
        twice.iter().all(|&(p, _)| p == lost_partition),
        "read twice outside the killed member's partition {lost_partition}: {twice:?}"
    );
    if let (Some(first), Some(last)) = (twice.first(), twice.last()) {
        assert_eq!(
            last.1 - first.1 + 1,
            twice.len() as i64,
            "not one run: {twice:?}"
        );
        let victim_last = parse_records(&victim_lines)
            .iter()
            .filter(|r| r.partition == lost_partition)
            .map(|r| r.offset)
            .max();
        assert_eq!(Some(last.1), victim_last, "{twice:?}");
    }
    drop(broker);
}
