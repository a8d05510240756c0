//! `brook topic`, `produce`, `consume` and `group` on a data directory that a running
//! `brook broker` holds: they go through the broker (Kafka protocol, librdkafka)
//! instead of failing with "in use"; two `brook consume --group` processes split the
//! partitions; `brook group describe` shows the members; `brook topic alter`
//! (IncrementalAlterConfigs) and `brook group reset-offsets` (refused while the group
//! has a member, as Kafka's tool) work through the broker too; and a `broker.addr`
//! left by a SIGKILLed broker is not trusted (the commands open the log in-process).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use brook::log::partitioner::partition_for_key;
use brook_testkit::binary::{
    brook_command, command_line, expect_success, run_brook, run_brook_err, run_brook_ok,
    run_brook_with_input,
};
use brook_testkit::broker::{client_config, BrokerProcess};
use brook_testkit::consumed::{json_lines, positions};
use brook_testkit::process::{wait_for, KillOnDrop};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

fn brook(dir: &Path, args: &[&str]) -> Command {
    brook_command(Path::new(env!("CARGO_BIN_EXE_brook")), dir, args)
}

fn start(dir: &Path) -> BrokerProcess {
    BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), dir, &[])
}

/// stdout of a command that must succeed.
fn ok(dir: &Path, args: &[&str]) -> String {
    String::from_utf8(run_brook_ok(&mut brook(dir, args)).stdout).unwrap()
}

/// (stdout, stderr) of a command fed `input` that must succeed.
fn ok_with_input(dir: &Path, args: &[&str], input: &str) -> (String, String) {
    let mut cmd = brook(dir, args);
    let out = run_brook_with_input(&mut cmd, input.as_bytes());
    expect_success(&command_line(&cmd), &out);
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The partition table of `brook group describe`: (topic, partition) -> the other
/// columns (committed, end, stable, lag, member).
fn lag_rows(text: &str) -> BTreeMap<(String, u64), Vec<String>> {
    text.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            ((f[0].clone(), f[1].parse().unwrap()), f[2..].to_vec())
        })
        .collect()
}

/// The members of `brook group describe` (after its blank line): member id ->
/// (client id, host, partitions).
fn members(text: &str) -> BTreeMap<String, (String, String, String)> {
    text.lines()
        .skip_while(|l| !l.is_empty())
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), (f[1].into(), f[2].into(), f[3].into()))
        })
        .collect()
}

#[test]
fn topic_produce_consume_and_group_go_through_a_running_broker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The directory exists with a topic made in-process; then the broker holds it.
    ok(d, &["topic", "create", "before", "--partitions", "1"]);
    let broker = start(d);

    // Without the broker route each of these fails with "in use".
    ok(d, &["topic", "create", "sales", "--partitions", "3"]);
    assert_eq!(ok(d, &["topic", "list"]), "before\nsales\n");
    let input: String = (0..30)
        .map(|i| format!("{{\"user\":\"u{}\",\"n\":{i}}}\n", i % 7))
        .collect();
    let (_, err) = ok_with_input(d, &["produce", "sales", "--key-field", "user"], &input);
    assert!(err.contains("produced 30 record(s) to sales"), "{err}");

    let recs = json_lines(&ok(d, &["consume", "sales", "--from-beginning"]));
    assert_eq!(recs.len(), 30);
    let mut seen = BTreeSet::new();
    for r in &recs {
        // Keys land where Kafka's (and brook's in-process) murmur2 partitioner puts
        // them, and each partition's offsets are dense from 0 in produce order.
        let key = r["key"].as_str().unwrap();
        let p = partition_for_key(key.as_bytes(), 3) as u64;
        assert_eq!(r["partition"].as_u64().unwrap(), p, "{r}");
        assert_eq!(r["value"]["user"].as_str().unwrap(), key);
        seen.insert(r["value"]["n"].as_u64().unwrap());
    }
    assert_eq!(seen, (0..30).collect());
    let mut per_partition: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (p, o) in positions(&recs) {
        per_partition.entry(p).or_default().push(o);
    }
    for offsets in per_partition.values() {
        let n = offsets.len() as u64;
        assert_eq!(*offsets, (0..n).collect::<Vec<_>>());
    }

    // describe: the offsets the broker reports; sizes and future-held segments are the
    // broker's (`-`).
    let described = ok(d, &["topic", "describe", "sales"]);
    let ends: BTreeMap<u64, u64> = described
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(&f[4..], ["-", "-", "-"], "{described}");
            (f[0].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    let want: BTreeMap<u64, u64> = (0..3)
        .map(|p| (p, per_partition.get(&p).map_or(0, |v| v.len() as u64)))
        .collect();
    assert_eq!(ends, want, "{described}");

    // A group reads 10, commits, and the next run goes on from there.
    let first = json_lines(&ok(
        d,
        &[
            "consume",
            "sales",
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "10",
        ],
    ));
    let rest = json_lines(&ok(d, &["consume", "sales", "--group", "billing"]));
    assert_eq!(first.len() + rest.len(), 30);
    let mut all = positions(&first);
    all.extend(positions(&rest));
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 30, "every record once");
    let described = ok(d, &["group", "describe", "billing"]);
    for ((topic, p), cols) in lag_rows(&described) {
        assert_eq!(topic, "sales");
        let end = want[&p].to_string();
        assert_eq!(cols, [end.as_str(), &end, &end, "0", "-"], "{described}");
    }
    assert!(ok(d, &["group", "list"]).lines().any(|g| g == "billing"));
    drop(broker);
}

/// Compaction through a running broker: `topic create --config cleanup.policy=compact`
/// reaches CreateTopics, `topic describe` shows the compaction configs DescribeConfigs
/// reports, `produce --null-marker` sends a null value through librdkafka (a tombstone,
/// not an empty value) and `consume` prints it as null.
#[test]
fn tombstones_and_compaction_configs_go_through_a_running_broker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _broker = start(d);
    ok(
        d,
        &[
            "topic",
            "create",
            "classes",
            "--partitions",
            "1",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "delete.retention.ms=1000",
        ],
    );
    let described = ok(d, &["topic", "describe", "classes"]);
    assert!(described.contains("cleanup.policy compact"), "{described}");
    assert!(
        described.contains("delete.retention.ms 1000"),
        "{described}"
    );
    let (_, err) = ok_with_input(
        d,
        &[
            "produce",
            "classes",
            "--key-separator",
            ":",
            "--null-marker",
            "<null>",
        ],
        "mia:3a\nleo:\nmia:<null>\n",
    );
    assert!(err.contains("produced 3 record(s)"), "{err}");
    let recs = json_lines(&ok(d, &["consume", "classes", "--from-beginning"]));
    let got: Vec<(&str, &Value)> = recs
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), &r["value"]))
        .collect();
    assert_eq!(
        got,
        vec![
            ("mia", &Value::from("3a")),
            ("leo", &Value::from("")),
            ("mia", &Value::Null),
        ]
    );
}

/// Keys whose records land on each of `partitions` partitions, `per` of each.
fn balanced_input(partitions: u32, per: usize) -> String {
    let mut counts = vec![0; partitions as usize];
    let mut input = String::new();
    for i in 0.. {
        if counts.iter().all(|c| *c == per) {
            break;
        }
        let key = format!("k{i}");
        let p = partition_for_key(key.as_bytes(), partitions) as usize;
        if counts[p] < per {
            counts[p] += 1;
            input.push_str(&format!("{{\"key\":\"{key}\",\"i\":{i}}}\n"));
        }
    }
    input
}

#[test]
fn two_consume_group_processes_split_the_partitions_and_read_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _broker = {
        std::fs::create_dir_all(d).unwrap();
        start(d)
    };
    ok(d, &["topic", "create", "sales", "--partitions", "4"]);

    // Two members of group billing in two processes; each stops after 200 records,
    // its two partitions' worth.
    let member = || {
        let mut c = brook(
            d,
            &[
                "consume",
                "sales",
                "--group",
                "billing",
                "--from-beginning",
                "--follow",
                "--max",
                "200",
            ],
        );
        KillOnDrop(
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    let a = member();
    let b = member();

    // `brook group describe` shows both members (client id, host) with two
    // partitions each once the group has settled.
    let described = wait_for(
        "two members with two partitions each",
        Duration::from_secs(30),
        || {
            let out = brook(d, &["group", "describe", "billing"])
                .output()
                .unwrap();
            let text = String::from_utf8(out.stdout).unwrap();
            let m = members(&text);
            (m.len() == 2
                && m.values()
                    .all(|(_, _, parts)| parts.split(',').count() == 2))
            .then_some(text)
        },
    );
    let m = members(&described);
    let mut assigned: Vec<&str> = m
        .values()
        .flat_map(|(_, _, parts)| parts.split(','))
        .collect();
    assigned.sort_unstable();
    assert_eq!(
        assigned,
        ["sales/0", "sales/1", "sales/2", "sales/3"],
        "{described}"
    );
    for (client, host, _) in m.values() {
        assert_eq!(client, "brook-cli", "{described}");
        assert!(host.contains("127.0.0.1"), "{described}");
    }
    // The partition table names each partition's member.
    for ((_, p), cols) in lag_rows(&described) {
        let owner = &cols[4];
        assert!(
            m.get(owner)
                .is_some_and(|(_, _, parts)| parts.split(',').any(|x| x == format!("sales/{p}"))),
            "{described}"
        );
    }

    // While they wait, another process produces 100 records into each partition.
    let (_, err) = ok_with_input(
        d,
        &["produce", "sales", "--key-field", "key"],
        &balanced_input(4, 100),
    );
    assert!(err.contains("produced 400 record(s)"), "{err}");

    let mut got = Vec::new();
    let mut partitions = Vec::new();
    for mut child in [a, b] {
        // Up to 200 lines of JSON: within a pipe's buffer, read after the exit.
        let status = wait_for("a member to finish", Duration::from_secs(60), || {
            child.try_wait().unwrap()
        });
        let mut stdout = String::new();
        let mut stderr = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(status.success(), "a member failed: {status}\n{stderr}");
        let out_text = stdout;
        let recs = json_lines(&out_text);
        assert_eq!(recs.len(), 200);
        let ps: BTreeSet<u64> = positions(&recs).iter().map(|(p, _)| *p).collect();
        assert_eq!(ps.len(), 2, "each member read its two partitions");
        partitions.push(ps);
        got.extend(positions(&recs));
    }
    assert!(partitions[0].is_disjoint(&partitions[1]));
    got.sort_unstable();
    let want: Vec<(u64, u64)> = (0..4).flat_map(|p| (0..100).map(move |o| (p, o))).collect();
    assert_eq!(got, want, "every record exactly once");

    // Both committed what they printed and left: no lag, no members.
    let described = ok(d, &["group", "describe", "billing"]);
    let rows = lag_rows(&described);
    assert_eq!(rows.len(), 4, "{described}");
    for cols in rows.values() {
        assert_eq!(cols, &["100", "100", "100", "0", "-"], "{described}");
    }
    assert!(members(&described).is_empty(), "{described}");
}

#[test]
fn a_stale_broker_addr_after_a_sigkill_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d).unwrap();
    let broker = start(d);
    ok(d, &["topic", "create", "sales", "--partitions", "2"]);
    ok_with_input(d, &["produce", "sales", "--key", "a"], "1\n2\n");
    // SIGKILL: the lock dies with the broker, its address file stays behind.
    drop(broker);
    assert!(brook_broker::read_address(d).is_some());

    // In-process again: the log's own view (bytes and segments, not `-`).
    ok_with_input(d, &["produce", "sales", "--key", "a"], "3\n");
    let described = ok(d, &["topic", "describe", "sales"]);
    for l in described.lines().skip(2) {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(
            f[4].parse::<u64>().is_ok() && f[5].parse::<u64>().is_ok(),
            "{described}"
        );
    }
    let recs = json_lines(&ok(d, &["consume", "sales", "--from-beginning"]));
    let values: Vec<i64> = recs.iter().map(|r| r["value"].as_i64().unwrap()).collect();
    assert_eq!(values, [1, 2, 3]);
}

/// `brook topic alter` through a running broker: IncrementalAlterConfigs SETs only
/// the configs given (a config set at creation stays), checked with the in-process
/// messages.
#[test]
fn topic_alter_goes_through_a_running_broker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _broker = start(d);
    ok(
        d,
        &[
            "topic",
            "create",
            "ledger",
            "--partitions",
            "1",
            "--config",
            "segment.bytes=4096",
        ],
    );
    let out = ok(
        d,
        &[
            "topic",
            "alter",
            "ledger",
            "--config",
            "retention.ms=60000",
            "--config",
            "cleanup.policy=compact,delete",
        ],
    );
    assert_eq!(
        out,
        "topic ledger: set retention.ms=60000\ntopic ledger: set cleanup.policy=compact,delete\n"
    );
    let described = ok(d, &["topic", "describe", "ledger"]);
    let first = described.lines().next().unwrap();
    assert!(first.contains("retention 60000ms"), "{described}");
    assert!(first.contains("segment-bytes 4096"), "{described}");
    assert!(
        first.contains("cleanup.policy compact,delete"),
        "{described}"
    );

    let err = run_brook_err(&mut brook(
        d,
        &["topic", "alter", "ledger", "--config", "retention.ms=soon"],
    ));
    assert!(err.contains("--config retention.ms=soon"), "{err}");
    let err = run_brook_err(&mut brook(
        d,
        &[
            "topic",
            "alter",
            "ledger",
            "--config",
            "compression.type=zstd",
        ],
    ));
    assert!(err.contains("compression.type"), "{err}");
    let err = run_brook_err(&mut brook(
        d,
        &["topic", "alter", "nothing", "--config", "retention.ms=1000"],
    ));
    assert!(err.contains("\"nothing\""), "{err}");
    assert!(ok(d, &["topic", "describe", "ledger"]).contains("retention 60000ms"));
}

/// The rows of `brook group reset-offsets`: (partition, current, new offset).
fn plan_rows(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(&f[..2], ["billing", "orders"], "{text}");
            (f[2].to_owned(), f[3].to_owned(), f[4].to_owned())
        })
        .collect()
}

fn row(p: &str, current: &str, new: &str) -> (String, String, String) {
    (p.to_owned(), current.to_owned(), new.to_owned())
}

/// The group's committed offset of orders/0, from `brook group describe`.
fn committed(d: &Path) -> String {
    let described = ok(d, &["group", "describe", "billing"]);
    lag_rows(&described)[&("orders".to_owned(), 0)][0].clone()
}

/// `brook group reset-offsets` through a running broker, as kafka-consumer-groups:
/// refused while a consumer (librdkafka, not brook's) is a member of the group;
/// once it left, `--dry-run` prints the plan and commits nothing, `--to-datetime`
/// finds offsets by time (ListOffsets), and the reset is an OffsetCommit without
/// member: the group's next consumer starts at the new offset. The output is the
/// same as in-process. `brook group delete` (DeleteGroups) is refused as long as the
/// member is there, and deletes the group once it is empty.
#[test]
fn group_reset_offsets_goes_through_a_running_broker_only_while_the_group_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let broker = start(d);
    ok(d, &["topic", "create", "orders", "--partitions", "1"]);
    let input: String = (0..10).map(|i| format!("{i}\n")).collect();
    ok_with_input(d, &["produce", "orders"], &input);
    let read = json_lines(&ok(
        d,
        &[
            "consume",
            "orders",
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "3",
        ],
    ));
    assert_eq!(read.len(), 3);
    assert_eq!(committed(d), "3");
    let reset = |extra: &[&str]| {
        let mut args = vec!["group", "reset-offsets", "billing", "--topic", "orders"];
        args.extend_from_slice(extra);
        brook(d, &args)
    };

    let member: BaseConsumer = client_config(&broker.bootstrap())
        .set("group.id", "billing")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    member.subscribe(&["orders"]).unwrap();
    wait_for("the member's assignment", Duration::from_secs(20), || {
        member.poll(Duration::from_millis(100));
        (member.assignment().ok()?.count() > 0).then_some(())
    });
    let err = run_brook_err(&mut reset(&["--to-earliest"]));
    assert!(err.contains("has 1 active member"), "{err}");
    assert_eq!(committed(d), "3");
    let err = run_brook_err(&mut brook(d, &["group", "delete", "billing"]));
    assert!(err.contains("still has 1 member(s)"), "{err}");
    // The broker refuses a commit without member id and generation by itself (what
    // the CLI sends, should a member join after its check), as Kafka's coordinator.
    let outsider: BaseConsumer = client_config(&broker.bootstrap())
        .set("group.id", "billing")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut at_zero = TopicPartitionList::new();
    at_zero
        .add_partition_offset("orders", 0, Offset::Offset(0))
        .unwrap();
    let refused = outsider
        .commit(&at_zero, CommitMode::Sync)
        .expect_err("a commit without member while the group has one");
    assert_eq!(
        refused.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownMemberId),
        "{refused}"
    );
    drop(outsider);
    // Closing leaves the group (LeaveGroup): it is empty once the broker has it.
    drop(member);
    let plan = wait_for("the group to be empty", Duration::from_secs(20), || {
        let out = run_brook(&mut reset(&["--to-offset", "7", "--dry-run"]));
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap())
    });
    assert_eq!(plan_rows(&plan), vec![row("0", "3", "7")]);
    assert_eq!(committed(d), "3", "a dry run commits nothing");
    // Every record is stamped now: the first at or after 2000 is 0, none after 2100.
    let by_time = |t: &str| {
        plan_rows(&ok(
            d,
            &[
                "group",
                "reset-offsets",
                "billing",
                "--topic",
                "orders",
                "--to-datetime",
                t,
                "--dry-run",
            ],
        ))
    };
    assert_eq!(by_time("2000-01-01T00:00:00Z"), vec![row("0", "3", "0")]);
    assert_eq!(by_time("2100-01-01T00:00:00Z"), vec![row("0", "3", "10")]);

    let done = String::from_utf8(run_brook_ok(&mut reset(&["--to-offset", "7"])).stdout).unwrap();
    assert_eq!(done, plan, "the same output as the dry run");
    assert_eq!(committed(d), "7");
    let rest = json_lines(&ok(d, &["consume", "orders", "--group", "billing"]));
    assert_eq!(positions(&rest), vec![(0, 7), (0, 8), (0, 9)]);

    // The same command in-process (the broker gone) prints the same.
    let served =
        String::from_utf8(run_brook_ok(&mut reset(&["--to-earliest", "--dry-run"])).stdout)
            .unwrap();
    drop(broker);
    let local = String::from_utf8(run_brook_ok(&mut reset(&["--to-earliest", "--dry-run"])).stdout)
        .unwrap();
    assert_eq!(served, local);
    assert_eq!(plan_rows(&local), vec![row("0", "10", "0")]);

    // `group delete` in-process, then through a broker again (DeleteGroups): the
    // group and its offsets go.
    assert_eq!(
        ok(d, &["group", "delete", "billing"]),
        "deleted group billing\n"
    );
    assert!(!ok(d, &["group", "list"]).lines().any(|g| g == "billing"));
    let _broker = start(d);
    let read = json_lines(&ok(
        d,
        &[
            "consume",
            "orders",
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "2",
        ],
    ));
    assert_eq!(read.len(), 2);
    assert_eq!(committed(d), "2");
    assert_eq!(
        ok(d, &["group", "delete", "billing"]),
        "deleted group billing\n"
    );
    assert!(!ok(d, &["group", "list"]).lines().any(|g| g == "billing"));
    let err = run_brook_err(&mut brook(d, &["group", "delete", "billing"]));
    assert!(
        err.contains("has no committed offsets and no members"),
        "{err}"
    );
}
