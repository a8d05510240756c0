//! The `brook` command line against a temporary data directory: topic commands, produce
//! with `--key-field` (Kafka's partitioner), consume (JSON lines, groups, `--offset`),
//! group describe, and bad input (non-zero exit, a one-line error naming the problem,
//! nothing already written lost).

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use brook::log::partitioner::partition_for_key;
use serde_json::{json, Value};

use brook_testkit::binary::{
    brook_command, command_line, expect_failure, expect_success, run_brook_err,
    run_brook_with_input,
};
use brook_testkit::consumed::{json_lines, positions};
use brook_testkit::process::KillOnDrop;

struct Brook {
    dir: tempfile::TempDir,
}

impl Brook {
    fn new() -> Self {
        Brook {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        brook_command(
            Path::new(env!("CARGO_BIN_EXE_brook")),
            self.data_dir(),
            args,
        )
    }

    /// Runs a command to its end with `stdin`; returns the command line and its output.
    fn run(&self, args: &[&str], stdin: &str) -> (String, Output) {
        let mut cmd = self.command(args);
        let out = run_brook_with_input(&mut cmd, stdin.as_bytes());
        (command_line(&cmd), out)
    }

    /// Runs a command that must succeed; returns its stdout and stderr.
    fn ok_with_stderr(&self, args: &[&str], stdin: &str) -> (String, String) {
        let (what, out) = self.run(args, stdin);
        expect_success(&what, &out);
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        (stdout, stderr)
    }

    fn ok(&self, args: &[&str], stdin: &str) -> String {
        self.ok_with_stderr(args, stdin).0
    }

    /// Runs a command that must fail; returns its one `error:` line. Besides that line,
    /// stderr may only hold produce's count of what it wrote.
    fn fail(&self, args: &[&str], stdin: &str) -> String {
        let (what, out) = self.run(args, stdin);
        let stderr = expect_failure(&what, &out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "one error line expected:\n{stderr}");
        for line in stderr.lines() {
            assert!(
                line.starts_with("error:") || line.starts_with("produced "),
                "unexpected stderr line {line:?} in:\n{stderr}"
            );
        }
        errors[0].to_string()
    }

    /// Every record of `topic`, as printed by `consume --from-beginning`.
    fn consume_all(&self, topic: &str) -> Vec<Value> {
        let out = self.ok(&["consume", topic, "--from-beginning"], "");
        json_lines(&out)
    }
}

fn sorted_values(recs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = recs.iter().map(|r| r["value"].to_string()).collect();
    v.sort();
    v
}

#[test]
fn topic_create_list_describe_add_partitions_delete() {
    let b = Brook::new();
    assert_eq!(b.ok(&["topic", "list"], ""), "");
    let out = b.ok(&["topic", "create", "orders", "--partitions", "3"], "");
    assert_eq!(out.trim(), "created topic orders with 3 partition(s)");
    b.ok(
        &[
            "topic",
            "create",
            "audit.log-2",
            "--partitions",
            "1",
            "--retention",
            "none",
        ],
        "",
    );
    assert_eq!(b.ok(&["topic", "list"], ""), "audit.log-2\norders\n");
    let err = b.fail(&["topic", "create", "orders", "--partitions", "2"], "");
    assert!(err.contains("\"orders\" already exists"), "{err}");

    b.ok(&["produce", "orders", "--key", "k"], "a\nb\n");
    let desc = b.ok(&["topic", "describe", "orders"], "");
    let lines: Vec<&str> = desc.lines().collect();
    assert!(lines[0].starts_with("topic orders  partitions 3"), "{desc}");
    assert!(lines[0].contains("retention 604800000ms"), "{desc}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "PARTITION",
            "START",
            "END",
            "STABLE",
            "BYTES",
            "SEGMENTS",
            "FUTURE-HELD"
        ]
    );
    let rows: Vec<Vec<u64>> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().map(|f| f.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{desc}");
    let kp = u64::from(partition_for_key(b"k", 3));
    for (p, row) in rows.iter().enumerate() {
        let p = p as u64;
        assert_eq!(row[0], p);
        assert_eq!(row[1], 0, "start");
        assert_eq!(row[2], if p == kp { 2 } else { 0 }, "end of {p}: {desc}");
        assert_eq!(row[3], row[2], "stable = end without transactions: {desc}");
        assert_eq!(row[4] > 0, p == kp, "bytes of {p}: {desc}");
        assert_eq!(row[5], 1, "segments");
        assert_eq!(row[6], 0, "segments held by future timestamps");
    }
    assert!(b
        .ok(&["topic", "describe", "audit.log-2"], "")
        .contains("retention none"));

    let (out, err) = b.ok_with_stderr(&["topic", "add-partitions", "orders", "5"], "");
    assert_eq!(out.trim(), "topic orders now has 5 partition(s)");
    assert!(
        err.contains("warning") && err.contains("from 3 to 5"),
        "adding partitions warns: {err}"
    );
    let desc = b.ok(&["topic", "describe", "orders"], "");
    assert!(desc.starts_with("topic orders  partitions 5"), "{desc}");
    assert_eq!(desc.lines().count(), 2 + 5);
    let err = b.fail(&["topic", "add-partitions", "orders", "4"], "");
    assert!(
        err.contains("partitions") && err.contains("already has 5"),
        "{err}"
    );
    // The records survive growing the topic.
    assert_eq!(b.consume_all("orders").len(), 2);

    let out = b.ok(&["topic", "delete", "orders"], "");
    assert_eq!(out.trim(), "deleted topic orders");
    assert_eq!(b.ok(&["topic", "list"], ""), "audit.log-2\n");
    assert!(!b.data_dir().join("topics").join("orders").exists());
    let err = b.fail(&["topic", "describe", "orders"], "");
    assert!(err.contains("unknown topic \"orders\""), "{err}");
    // A topic of the same name starts empty.
    b.ok(&["topic", "create", "orders", "--partitions", "1"], "");
    assert!(b.consume_all("orders").is_empty());
}

#[test]
fn produce_with_key_field_uses_kafkas_partitioner() {
    let b = Brook::new();
    b.ok(&["topic", "create", "sales", "--partitions", "7"], "");
    // Keys with known Kafka partitions (from Kafka's murmur2 test vectors, by hand:
    // (murmur2(key) & 0x7fffffff) % 7): "abc" -> 4, "21" -> 3, "foobar" -> 0.
    let mut input = String::from(
        "{\"user\":\"abc\",\"n\":0}\n{\"user\":\"21\",\"n\":1}\n{\"user\":\"foobar\",\"n\":2}\n",
    );
    let mut lines = 3;
    for i in 0..60 {
        input.push_str(&format!(
            "{{\"user\":\"user-{}\",\"n\":{}}}\n",
            i % 20,
            lines
        ));
        lines += 1;
    }
    // A number key is its JSON text; a missing or null key means no key.
    input.push_str(&format!("{{\"user\":42,\"n\":{lines}}}\n"));
    input.push_str(&format!("{{\"n\":{}}}\n", lines + 1));
    input.push_str(&format!("{{\"user\":null,\"n\":{}}}\n", lines + 2));
    lines += 3;
    input.push('\n'); // blank lines are skipped
    let (_, err) = b.ok_with_stderr(&["produce", "sales", "--key-field", "user"], &input);
    assert!(
        err.contains(&format!("produced {lines} record(s) to sales")),
        "{err}"
    );

    let recs = b.consume_all("sales");
    assert_eq!(recs.len(), lines);
    let mut by_n = vec![None; lines];
    for r in &recs {
        let obj = r.as_object().unwrap();
        let mut fields: Vec<&str> = obj.keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["key", "offset", "partition", "timestamp", "value"]);
        assert!(r["timestamp"].as_i64().unwrap() > 1_500_000_000_000, "{r}");
        let n = r["value"]["n"].as_u64().unwrap() as usize;
        assert!(by_n[n].is_none(), "record {n} printed twice");
        by_n[n] = Some(r.clone());
        let p = r["partition"].as_u64().unwrap() as u32;
        match &r["key"] {
            Value::String(k) => {
                assert_eq!(p, partition_for_key(k.as_bytes(), 7), "{r}");
                let user = &r["value"]["user"];
                let expected = user.as_str().map_or_else(|| user.to_string(), String::from);
                assert_eq!(k, &expected, "{r}");
            }
            Value::Null => assert!(r["value"]["user"].is_null(), "{r}"),
            other => panic!("key printed as {other}"),
        }
    }
    let partition_of = |n: usize| by_n[n].as_ref().unwrap()["partition"].as_u64().unwrap();
    assert_eq!(partition_of(0), 4, "\"abc\"");
    assert_eq!(partition_of(1), 3, "\"21\"");
    assert_eq!(partition_of(2), 0, "\"foobar\"");
    assert_eq!(by_n[63].as_ref().unwrap()["key"], json!("42"));
    // The value is the line, printed as JSON.
    assert_eq!(
        by_n[0].as_ref().unwrap()["value"],
        json!({"user": "abc", "n": 0})
    );
    // Per partition, offsets are dense and follow the input order.
    for p in 0..7u64 {
        let ns: Vec<(u64, u64)> = recs
            .iter()
            .filter(|r| r["partition"] == json!(p))
            .map(|r| {
                (
                    r["offset"].as_u64().unwrap(),
                    r["value"]["n"].as_u64().unwrap(),
                )
            })
            .collect();
        for (i, w) in ns.iter().enumerate() {
            assert_eq!(w.0, i as u64, "partition {p}: {ns:?}");
        }
        assert!(
            ns.windows(2).all(|w| w[0].1 < w[1].1),
            "partition {p}: {ns:?}"
        );
    }
}

#[test]
fn consume_with_a_group_continues_where_it_stopped() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "3"], "");
    let input: String = (0..12)
        .map(|i| format!("{{\"id\":\"k{i}\",\"i\":{i}}}\n"))
        .collect();
    b.ok(&["produce", "t", "--key-field", "id"], &input);
    let all = b.consume_all("t");
    assert_eq!(all.len(), 12);

    // Without --from-beginning and without commits a group starts at the end.
    let (out, err) = b.ok_with_stderr(&["consume", "t", "--group", "late"], "");
    assert_eq!(out, "");
    assert!(err.contains("no new records"), "{err}");

    let first = json_lines(&b.ok(
        &[
            "consume",
            "t",
            "--group",
            "g",
            "--from-beginning",
            "--max",
            "5",
        ],
        "",
    ));
    assert_eq!(first.len(), 5);
    let describe = |b: &Brook, g: &str| -> Vec<(u64, String, u64, String)> {
        let out = b.ok(&["group", "describe", g], "");
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "TOPIC",
                "PARTITION",
                "COMMITTED",
                "END",
                "STABLE",
                "LAG",
                "MEMBER"
            ]
        );
        lines
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f[0], "t");
                assert_eq!(f[3], f[4], "no transactions: the stable offset is the end");
                assert_eq!(f[6], "-", "no member in another process");
                (
                    f[1].parse().unwrap(),
                    f[2].to_string(),
                    f[3].parse().unwrap(),
                    f[5].to_string(),
                )
            })
            .collect()
    };
    let end_of = |p: u64| all.iter().filter(|r| r["partition"] == json!(p)).count() as u64;
    let printed_in = |recs: &[Value], p: u64| {
        recs.iter()
            .filter(|r| r["partition"] == json!(p))
            .map(|r| r["offset"].as_u64().unwrap() + 1)
            .max()
            .unwrap_or(0)
    };
    let rows = describe(&b, "g");
    assert_eq!(rows.len(), 3);
    for (p, committed, end, lag) in &rows {
        let c = printed_in(&first, *p);
        assert_eq!(committed, &c.to_string(), "partition {p}: {rows:?}");
        assert_eq!(*end, end_of(*p));
        assert_eq!(lag, &(end_of(*p) - c).to_string());
    }

    // The second run prints exactly the rest.
    let second = json_lines(&b.ok(&["consume", "t", "--group", "g"], ""));
    assert_eq!(second.len(), 7);
    let mut both = positions(&first);
    both.extend(positions(&second));
    both.sort_unstable();
    let mut expected = positions(&all);
    expected.sort_unstable();
    assert_eq!(both, expected, "each record once across the two runs");
    for (p, committed, end, lag) in describe(&b, "g") {
        assert_eq!(committed, end.to_string(), "partition {p}");
        assert_eq!(lag, "0");
    }
    // Nothing left for the group, and new records are picked up.
    assert!(b.ok(&["consume", "t", "--group", "g"], "").is_empty());
    b.ok(&["produce", "t"], "{\"i\":99}\n");
    let third = json_lines(&b.ok(&["consume", "t", "--group", "g"], ""));
    assert_eq!(third.len(), 1);
    assert_eq!(third[0]["value"], json!({"i": 99}));

    // The group that started at the end (and printed nothing) also continues from where
    // it stopped: it sees the records produced since, as a Kafka consumer group would.
    let late = json_lines(&b.ok(&["consume", "t", "--group", "late"], ""));
    assert_eq!(positions(&late), vec![(positions(&third)[0])]);
    for (p, committed, end, _) in describe(&b, "late") {
        assert_eq!(committed, end.to_string(), "partition {p}");
    }

    let groups = b.ok(&["group", "list"], "");
    assert_eq!(groups, "g\nlate\n");
    let err = b.fail(&["group", "describe", "nobody"], "");
    assert!(err.contains("\"nobody\""), "{err}");
}

#[test]
fn consume_from_explicit_offsets() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "2"], "");
    // `--key` sends every line to one partition.
    let p = u64::from(partition_for_key(b"same", 2));
    let q = 1 - p;
    b.ok(&["produce", "t", "--key", "same"], "a\nb\nc\nd\n");
    b.ok(&["produce", "t", "--key", "other"], "x\n");
    assert_eq!(u64::from(partition_for_key(b"other", 2)), q, "test setup");

    let out = json_lines(&b.ok(&["consume", "t", "--offset", &format!("{p}:2")], ""));
    assert_eq!(positions(&out), vec![(p, 2), (p, 3)]);
    assert_eq!(out[0]["value"], json!("c"));
    assert_eq!(out[0]["key"], json!("same"));
    let out = json_lines(&b.ok(
        &[
            "consume",
            "t",
            "--offset",
            &format!("{p}:3"),
            "--offset",
            &format!("{q}:0"),
        ],
        "",
    ));
    let mut got = positions(&out);
    got.sort_unstable();
    let mut want = vec![(p, 3), (q, 0)];
    want.sort_unstable();
    assert_eq!(got, want);
    let out = json_lines(&b.ok(
        &["consume", "t", "--offset", &format!("{p}:0"), "--max", "3"],
        "",
    ));
    assert_eq!(sorted_values(&out), ["\"a\"", "\"b\"", "\"c\""]);
    // At the end: nothing. Past the end or a missing partition: an error (naming the
    // end, as Kafka's OffsetOutOfRange).
    assert!(b
        .ok(&["consume", "t", "--offset", &format!("{p}:4")], "")
        .is_empty());
    let err = b.fail(&["consume", "t", "--offset", &format!("{p}:999")], "");
    assert!(
        err.contains(&format!("--offset {p}:999: past the end of partition {p}"))
            && err.contains("ends at offset 4"),
        "{err}"
    );
    let err = b.fail(&["consume", "t", "--offset", "7:0"], "");
    assert!(err.contains("no partition 7"), "{err}");
    let err = b.fail(&["consume", "t", "--offset", "zero"], "");
    assert!(err.contains("--offset") && err.contains("zero"), "{err}");
}

#[test]
fn bad_input_fails_with_one_line_and_keeps_what_was_written() {
    let b = Brook::new();
    b.ok(
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "2",
            "--max-record-bytes",
            "100",
        ],
        "",
    );
    b.ok(&["produce", "t"], "first\nsecond\n");
    let kept = |b: &Brook| sorted_values(&b.consume_all("t"));
    let mut expected = vec!["\"first\"".to_string(), "\"second\"".to_string()];
    assert_eq!(kept(&b), expected);

    // Unknown topic.
    for args in [
        &["produce", "nope"][..],
        &["consume", "nope"],
        &["topic", "describe", "nope"],
        &["topic", "delete", "nope"],
        &["topic", "add-partitions", "nope", "3"],
    ] {
        let err = b.fail(args, "x\n");
        assert!(err.contains("unknown topic \"nope\""), "{args:?}: {err}");
    }
    // Names that are paths.
    for name in ["a/b", "..", "../escape", ".", "a\\b"] {
        let err = b.fail(&["topic", "create", name, "--partitions", "1"], "");
        assert!(
            err.contains("invalid topic name") && err.contains(&format!("{name:?}")),
            "{name}: {err}"
        );
    }
    assert!(!b.data_dir().join("escape").exists());
    assert!(!b.data_dir().join("topics").join("a").exists());
    assert_eq!(b.ok(&["topic", "list"], ""), "t\n");
    // Zero partitions, bad sizes.
    let err = b.fail(&["topic", "create", "z", "--partitions", "0"], "");
    assert!(
        err.contains("partitions") && err.contains("at least 1"),
        "{err}"
    );
    let err = b.fail(
        &[
            "topic",
            "create",
            "z",
            "--partitions",
            "1",
            "--segment-bytes",
            "10",
        ],
        "",
    );
    assert!(err.contains("segment-bytes"), "{err}");
    assert_eq!(b.ok(&["topic", "list"], ""), "t\n");

    // A line that is not JSON with --key-field: the lines before it are written, the
    // ones after it are not.
    let input = "{\"k\":\"a\",\"v\":1}\n{\"k\":\"b\",\"v\":2}\nnot json\n{\"k\":\"c\",\"v\":3}\n";
    let err = b.fail(&["produce", "t", "--key-field", "k"], input);
    assert!(
        err.contains("line 3") && err.contains("not valid JSON"),
        "{err}"
    );
    expected.extend([
        "{\"k\":\"a\",\"v\":1}".to_string(),
        "{\"k\":\"b\",\"v\":2}".to_string(),
    ]);
    expected.sort();
    assert_eq!(kept(&b), expected);
    // A JSON line that is not an object.
    let err = b.fail(&["produce", "t", "--key-field", "k"], "[1,2]\n");
    assert!(err.contains("line 1") && err.contains("object"), "{err}");
    assert_eq!(kept(&b), expected);

    // A record over --max-record-bytes, after some good ones and in a later batch.
    let big = "x".repeat(150);
    let input = format!("ok1\nok2\n{big}\nafter\n");
    let err = b.fail(&["produce", "t", "--batch", "1"], &input);
    assert!(
        err.contains("line 3") && err.contains("100 bytes") && err.contains("exceeds"),
        "{err}"
    );
    expected.extend(["\"ok1\"".to_string(), "\"ok2\"".to_string()]);
    expected.sort();
    assert_eq!(kept(&b), expected);
    // The same with everything in one batch.
    let err = b.fail(&["produce", "t"], &format!("ok3\n{big}\n"));
    assert!(err.contains("line 2"), "{err}");
    expected.push("\"ok3\"".to_string());
    expected.sort();
    assert_eq!(kept(&b), expected);
}

#[test]
fn a_second_process_gets_a_lock_error() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "1"], "");
    b.ok(&["produce", "t"], "one\n");
    let mut follower = KillOnDrop(
        b.command(&["consume", "t", "--from-beginning", "--follow"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Once it printed the record it has the log open.
    let mut lines = BufReader::new(follower.0.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["value"], json!("one"));

    for args in [&["topic", "list"][..], &["produce", "t"], &["consume", "t"]] {
        let err = b.fail(args, "two\n");
        assert!(
            err.contains("in use by another brook process")
                && err.contains(&b.data_dir().display().to_string()),
            "{args:?}: {err}"
        );
    }
    assert!(
        follower.0.try_wait().unwrap().is_none(),
        "the follower keeps running"
    );
    drop(follower);
    // After the holder is gone (killed, so not closed cleanly), everything is there.
    b.ok(&["produce", "t"], "two\n");
    assert_eq!(sorted_values(&b.consume_all("t")), ["\"one\"", "\"two\""]);
}

/// A group whose committed offset was deleted by retention (applied when a command
/// starts) goes on by the reset policy in the same run: from the log start with `--from-beginning` (`earliest`), from the end
/// without (`latest`); either way its next run continues from where this one stopped.
#[test]
fn a_group_behind_the_log_start_follows_the_reset_policy() {
    let b = Brook::new();
    let create = [
        "topic",
        "create",
        "t",
        "--partitions",
        "1",
        "--retention",
        "1500ms",
        "--segment-bytes",
        "1KiB",
    ];
    b.ok(&create, "");
    // One record per append; two do not fit in a segment: one segment per record.
    let input: String = (0..5)
        .map(|i| format!("{i}{}\n", "x".repeat(600)))
        .collect();
    b.ok(&["produce", "t", "--batch", "1"], &input);
    for g in ["early", "late"] {
        let first = json_lines(&b.ok(
            &[
                "consume",
                "t",
                "--group",
                g,
                "--from-beginning",
                "--max",
                "1",
            ],
            "",
        ));
        assert_eq!(positions(&first), vec![(0, 0)]);
    }

    // Every command applies retention when it starts: once the records are older than
    // the retention, the next command deletes the four closed segments.
    std::thread::sleep(std::time::Duration::from_millis(1_600));
    let desc = b.ok(&["topic", "describe", "t"], "");
    let row: Vec<u64> = desc
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(row[1..3], [4, 5], "start and end: {desc}");

    let committed = |g: &str| -> Vec<String> {
        let out = b.ok(&["group", "describe", g], "");
        let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
        [row[2], row[3], row[5]]
            .iter()
            .map(|f| f.to_string())
            .collect()
    };
    let early = json_lines(&b.ok(
        &["consume", "t", "--group", "early", "--from-beginning"],
        "",
    ));
    assert_eq!(positions(&early), vec![(0, 4)]);
    assert_eq!(committed("early"), ["5", "5", "0"]);
    let late = json_lines(&b.ok(&["consume", "t", "--group", "late"], ""));
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(committed("late"), ["5", "5", "0"]);

    b.ok(&["produce", "t"], "new\n");
    for g in ["early", "late"] {
        let next = json_lines(&b.ok(&["consume", "t", "--group", g], ""));
        assert_eq!(positions(&next), vec![(0, 5)], "{g}");
        assert_eq!(next[0]["value"], json!("new"));
    }
}

#[test]
fn consume_reads_committed_records_by_default_and_all_with_read_uncommitted() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "1"], "");
    b.ok(&["produce", "t"], "plain-0\n");
    {
        // Transactions from a writer in this process (the CLI has no transactional
        // produce): one committed, one aborted, one left open.
        let log = brook_log::Log::open(b.data_dir(), brook_log::LogOptions::default()).unwrap();
        let mut w = log.init_transactions("writer").unwrap();
        let rec = |v: &str| vec![brook_log::ProducerRecord::new(v.to_string())];
        w.begin().unwrap();
        w.send("t", rec("committed")).unwrap();
        w.commit_transaction().unwrap();
        w.begin().unwrap();
        w.send("t", rec("aborted")).unwrap();
        w.abort_transaction().unwrap();
        w.begin().unwrap();
        w.send("t", rec("open")).unwrap();
        log.topic("t").unwrap().append(rec("plain-1")).unwrap();
        log.close().unwrap();
    }
    let values = |out: &str| -> Vec<String> {
        json_lines(out)
            .iter()
            .map(|r| r["value"].as_str().unwrap().to_string())
            .collect()
    };
    // Offsets: plain-0 0, committed 1, marker 2, aborted 3, marker 4, open 5, plain-1 6.
    let committed = b.ok(&["consume", "t", "--from-beginning", "--group", "g"], "");
    assert_eq!(values(&committed), ["plain-0", "committed"]);
    let all = b.ok(
        &[
            "consume",
            "t",
            "--from-beginning",
            "--isolation",
            "read-uncommitted",
        ],
        "",
    );
    assert_eq!(
        values(&all),
        ["plain-0", "committed", "aborted", "open", "plain-1"]
    );
    assert_eq!(positions(&json_lines(&all))[3], (0, 5));
    // The group committed up to the last stable offset (past the markers and the
    // aborted record): no lag against it, 2 offsets behind the end.
    let desc = b.ok(&["group", "describe", "g"], "");
    let row: Vec<&str> = desc.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[2..6], ["5", "7", "5", "0"], "{desc}");
    let err = b.fail(&["consume", "t", "--isolation", "sometimes"], "");
    assert!(err.contains("isolation"), "{err}");
}

#[test]
fn a_read_command_on_a_missing_data_directory_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("typo");
    let err = run_brook_err(
        std::process::Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(&missing)
            .args(["consume", "snack-sales", "--from-beginning"]),
    );
    assert!(err.contains("no data directory at"), "{err}");
    assert!(!missing.exists(), "nothing was created");
}

/// `topic alter` takes compaction's configs by Kafka's names: a topic altered to
/// `cleanup.policy=compact` shows them in `describe` and refuses keyless records from
/// then on (the open topic's config changed); a bad ratio is refused naming it.
#[test]
fn topic_alter_takes_the_compaction_configs() {
    let b = Brook::new();
    b.ok(&["topic", "create", "classes", "--partitions", "1"], "");
    b.ok(&["produce", "classes"], "keyless is fine here\n");
    let out = b.ok(
        &[
            "topic",
            "alter",
            "classes",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "delete.retention.ms=1h",
            "--config",
            "min.compaction.lag.ms=5000",
            "--config",
            "min.cleanable.dirty.ratio=0.1",
        ],
        "",
    );
    assert!(out.contains("set cleanup.policy=compact"), "{out}");
    let described = b.ok(&["topic", "describe", "classes"], "");
    assert!(described.contains("cleanup.policy compact"), "{described}");
    assert!(
        described.contains(
            "delete.retention.ms 3600000  min.compaction.lag.ms 5000  min.cleanable.dirty.ratio 0.1"
        ),
        "{described}"
    );
    let err = b.fail(&["produce", "classes"], "no key\n");
    assert!(err.contains("needs a key"), "{err}");
    let err = b.fail(
        &[
            "topic",
            "alter",
            "classes",
            "--config",
            "min.cleanable.dirty.ratio=2",
        ],
        "",
    );
    assert!(err.contains("min.cleanable.dirty.ratio"), "{err}");
}

/// A compacted topic from `topic create --config` (Kafka's names); `produce
/// --key-separator` with `--null-marker` sends tombstones, which `consume` prints
/// as a null value (an empty value stays ""); keyless lines are refused, naming why.
#[test]
fn a_compacted_topic_takes_keyed_records_and_tombstones() {
    let b = Brook::new();
    b.ok(
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
        "",
    );
    let described = b.ok(&["topic", "describe", "classes"], "");
    assert!(described.contains("cleanup.policy compact"), "{described}");
    assert!(
        described.contains("delete.retention.ms 1000"),
        "{described}"
    );
    b.ok(
        &[
            "produce",
            "classes",
            "--key-separator",
            "\t",
            "--null-marker",
            "<null>",
        ],
        "mia\t3a\nleo\t\nmia\t<null>\n",
    );
    let recs = b.consume_all("classes");
    let got: Vec<(String, Value)> = recs
        .iter()
        .map(|r| (r["key"].as_str().unwrap().to_string(), r["value"].clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("mia".to_string(), json!("3a")),
            ("leo".to_string(), json!("")),
            ("mia".to_string(), Value::Null),
        ]
    );
    let err = b.fail(&["produce", "classes"], "no key\n");
    assert!(err.contains("needs a key"), "{err}");
    let err = b.fail(
        &["produce", "classes", "--key-separator", ":"],
        "no separator\n",
    );
    assert!(err.contains("line 1: no key separator"), "{err}");
    let err = b.fail(
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--config",
            "cleanup.policy=shred",
        ],
        "",
    );
    assert!(err.contains("cleanup.policy"), "{err}");
}

/// Keyless records use the sticky partitioner with a random start per producer
/// (Kafka's default since 2.4, KIP-480): 20 one-line `brook produce` processes into 4
/// partitions do not all land on one partition, as they all did on partition 0 before.
/// Each process starts at a uniformly random partition, so all 20 agree by chance
/// with probability 4 · (1/4)^20 = 4^-19 ≈ 3.6e-12.
#[test]
fn keyless_records_of_separate_producers_use_more_than_one_partition() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "4"], "");
    for i in 0..20 {
        b.ok(&["produce", "t"], &format!("line-{i}\n"));
    }
    let recs = b.consume_all("t");
    assert_eq!(recs.len(), 20);
    let used: std::collections::BTreeSet<u64> =
        positions(&recs).into_iter().map(|(p, _)| p).collect();
    assert!(used.len() > 1, "all 20 producers used partitions {used:?}");
    // One `brook produce` of many lines is one producer: its batches move on from
    // partition to partition, so 4 batches of keyless lines fill all four.
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "4"], "");
    let input: String = (0..8).map(|i| format!("v{i}\n")).collect();
    b.ok(&["produce", "t", "--batch", "2"], &input);
    let mut per_partition = [0u32; 4];
    for (p, _) in positions(&b.consume_all("t")) {
        per_partition[p as usize] += 1;
    }
    assert_eq!(per_partition, [2, 2, 2, 2]);
}

/// A closed segment written more than `retention.ms` ago but holding a record stamped in
/// the future is kept (as Kafka) and reported: `topic describe` counts it in
/// FUTURE-HELD and the command warns, naming topic, partition and segment.
#[test]
fn a_segment_kept_by_a_future_timestamp_is_shown_and_warned_about() {
    let b = Brook::new();
    brook_testkit::future_segment::segment_held_by_a_future_timestamp(b.data_dir(), "t");
    let (out, err) = b.ok_with_stderr(&["topic", "describe", "t"], "");
    let row: Vec<u64> = out
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(
        (row[1], row[5], row[6]),
        (0, 2, 1),
        "start, segments, held: {out}"
    );
    assert!(err.contains("stamped in the future"), "{err}");
    for part in ["topic=t", "partition=0", "segment=0"] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
}

/// Commits `offset` for `group` on partition 0 of `topic` through the log's API (as a
/// tool that sets offsets would), in this process, before any command runs.
fn commit_offset(b: &Brook, group: &str, topic: &str, offset: u64) {
    use brook::log::{CommitIdentity, Log, LogOptions, TopicPartition};
    let log = Log::open(b.data_dir(), LogOptions::default()).unwrap();
    log.commit_offsets(
        group,
        &CommitIdentity::Standalone,
        &[(TopicPartition::new(topic, 0), offset)],
    )
    .unwrap();
    log.close().unwrap();
}

/// A group's committed offset past the log end (as Kafka's `auto.offset.reset`): `group
/// describe` marks it, `consume --group` resets it (default `latest`: the end, so the
/// next record is read; `earliest`: the start) instead of waiting there forever, and
/// `--auto-offset-reset none` fails naming group, topic, partition and offset.
#[test]
fn a_committed_offset_past_the_end_is_marked_and_reset() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "1"], "");
    b.ok(&["produce", "t"], "a\nb\n");
    for g in ["late", "early", "strict"] {
        commit_offset(&b, g, "t", 100);
    }
    let (out, err) = b.ok_with_stderr(&["group", "describe", "late"], "");
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[2..6], ["100", "2", "2", "out-of-range"], "{out}");
    assert!(err.contains("t-0 (log 0..2)"), "{err}");

    let err = b.fail(
        &[
            "consume",
            "t",
            "--group",
            "strict",
            "--auto-offset-reset",
            "none",
        ],
        "",
    );
    for part in [
        "\"strict\"",
        "t-0",
        "offset 100",
        "auto.offset.reset is none",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    let err = b.fail(
        &[
            "consume",
            "t",
            "--group",
            "strict",
            "--auto-offset-reset",
            "soon",
        ],
        "",
    );
    assert!(err.contains("--auto-offset-reset"), "{err}");

    let early = json_lines(&b.ok(
        &[
            "consume",
            "t",
            "--group",
            "early",
            "--auto-offset-reset",
            "earliest",
        ],
        "",
    ));
    assert_eq!(positions(&early), [(0, 0), (0, 1)]);

    assert!(b.ok(&["consume", "t", "--group", "late"], "").is_empty());
    let out = b.ok(&["group", "describe", "late"], "");
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[2..6], ["2", "2", "2", "0"], "reset to the end: {out}");
    b.ok(&["produce", "t"], "c\n");
    let next = json_lines(&b.ok(&["consume", "t", "--group", "late"], ""));
    assert_eq!(positions(&next), [(0, 2)]);
}

/// `group reset-offsets` as kafka-consumer-groups --reset-offsets: each target, the plan
/// printed, `--dry-run` committing nothing, an offset outside the log moved into it
/// with a warning; consumers of the group then start at the new offsets.
#[test]
fn group_reset_offsets_moves_a_groups_offsets() {
    use brook::log::{Log, LogOptions, ProducerRecord};
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "1"], "");
    // 2024-01-01T00:00:00Z and every hour after it.
    const JAN1: i64 = 1_704_067_200_000;
    {
        let log = Log::open(b.data_dir(), LogOptions::default()).unwrap();
        let p = log.topic("t").unwrap().partition(0).unwrap();
        for i in 0..5 {
            let r = ProducerRecord::new(format!("v{i}")).with_timestamp(JAN1 + i * 3_600_000);
            p.append(&[r]).unwrap();
        }
        log.close().unwrap();
    }
    b.ok(&["consume", "t", "--group", "g", "--from-beginning"], "");
    let committed = |b: &Brook| -> String {
        let out = b.ok(&["group", "describe", "g"], "");
        out.lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    assert_eq!(committed(&b), "5");
    let reset = |args: &[&str]| {
        let mut all = vec!["group", "reset-offsets", "g", "--topic", "t"];
        all.extend_from_slice(args);
        b.ok_with_stderr(&all, "")
    };
    let plan_row = |out: &str| -> Vec<String> {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW-OFFSET"]
        );
        lines[1].split_whitespace().map(str::to_string).collect()
    };

    let (out, err) = reset(&["--to-earliest", "--dry-run"]);
    assert_eq!(plan_row(&out), ["g", "t", "0", "5", "0"]);
    assert!(err.contains("dry run"), "{err}");
    assert_eq!(committed(&b), "5", "a dry run commits nothing");

    let (out, _) = reset(&["--to-datetime", "2024-01-01T02:00:00"]);
    assert_eq!(plan_row(&out)[4], "2");
    assert_eq!(committed(&b), "2");
    let (out, _) = reset(&["--to-datetime", "2024-01-01T04:30:00+02:00"]);
    assert_eq!(
        plan_row(&out)[4],
        "3",
        "02:30 UTC: the first record at or after is 03:00"
    );
    let next = json_lines(&b.ok(&["consume", "t", "--group", "g"], ""));
    assert_eq!(positions(&next), [(0, 3), (0, 4)]);

    let (out, err) = reset(&["--to-offset", "99"]);
    assert_eq!(plan_row(&out)[4], "5");
    assert!(
        err.contains("offset 99 is outside t-0; it is set to 5"),
        "{err}"
    );
    let (out, _) = reset(&["--to-offset", "1"]);
    assert_eq!(plan_row(&out)[3..], ["5", "1"]);
    let (out, _) = reset(&["--to-latest"]);
    assert_eq!(plan_row(&out)[3..], ["1", "5"]);

    let err = b.fail(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-datetime",
            "yesterday",
        ],
        "",
    );
    assert!(err.contains("--to-datetime \"yesterday\""), "{err}");
    let err = b.fail(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "nope",
            "--to-latest",
        ],
        "",
    );
    assert!(err.contains("nope"), "{err}");
}

/// `topic alter --config NAME=VALUE` (as kafka-configs --alter) changes the stored
/// configs by Kafka's names; unknown names and bad values are errors naming them, and
/// nothing changes then.
#[test]
fn topic_alter_changes_configs_by_kafkas_names() {
    let b = Brook::new();
    b.ok(&["topic", "create", "t", "--partitions", "1"], "");
    let out = b.ok(
        &[
            "topic",
            "alter",
            "t",
            "--config",
            "retention.ms=3600000",
            "--config",
            "segment.bytes=2KiB",
            "--config",
            "segment.ms=-1",
        ],
        "",
    );
    assert!(out.contains("set retention.ms=3600000"), "{out}");
    let desc = b.ok(&["topic", "describe", "t"], "");
    let head = desc.lines().next().unwrap();
    for part in [
        "retention 3600000ms",
        "segment-bytes 2048",
        "segment-ms none",
    ] {
        assert!(head.contains(part), "{part:?} in {head}");
    }
    let err = b.fail(
        &["topic", "alter", "t", "--config", "retention.hours=1"],
        "",
    );
    assert!(
        err.contains("\"retention.hours\"") && err.contains("supported"),
        "{err}"
    );
    let err = b.fail(
        &[
            "topic",
            "alter",
            "t",
            "--config",
            "retention.ms=5",
            "--config",
            "segment.bytes=10",
        ],
        "",
    );
    assert!(
        err.contains("segment.bytes") && err.contains("between 1024"),
        "{err}"
    );
    let err = b.fail(&["topic", "alter", "t", "--config", "retention.ms"], "");
    assert!(err.contains("NAME=VALUE"), "{err}");
    let head = b.ok(&["topic", "describe", "t"], "");
    assert!(
        head.contains("retention 3600000ms"),
        "unchanged after errors: {head}"
    );
    let err = b.fail(
        &["topic", "alter", "nope", "--config", "retention.ms=5"],
        "",
    );
    assert!(err.contains("nope"), "{err}");
}
