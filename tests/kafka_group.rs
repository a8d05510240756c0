//! Scale-out through a Kafka consumer group (`assignment: group`, README "Kafka"): two
//! `brook run` processes join one group and split a 4-partition topic; each runs a
//! windowed job per partition it holds. The second process's arrival moves partitions
//! (with their state) off the first; then the second is killed with SIGKILL, the first
//! takes its partitions over from their latest checkpoints, more input arrives, and
//! the committed output equals a single failure-free run over all the input exactly.
//!
//! Needs `BROOK_KAFKA_BOOTSTRAP`: the tests are ignored unless asked for (`-- --ignored`;
//! `scripts/test.sh` starts a broker and runs them).

// Wall-clock time names topics uniquely and dates records (brokers delete old ones);
// the test waits for processes with deadlines.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook::kafka::admin::{committed_offsets, create_topic, produce};

use brook_testkit::binary::{run_brook_err, run_brook_ok};
use brook_testkit::kafka::{base_ms, bootstrap, produce_events, unique, values};

const PARTITIONS: i64 = 4;
const KEYS: i64 = 48;
/// Events per phase: before the kill, after it.
const PHASE: i64 = 10_000;

/// Events `from..to`: 48 keys, a key's events all in partition `key % 4` (the
/// co-partitioning group mode needs), disorder under the watermark's 100 ms.
fn events(bootstrap: &str, topic: &str, base: i64, from: i64, to: i64) {
    produce_events(bootstrap, topic, PARTITIONS, KEYS, base, from..to);
}

/// One event per partition far ahead in event time: its watermark fires every window
/// of the real events (its own window stays open in a job that follows the topic).
fn trailers(bootstrap: &str, topic: &str, base: i64) {
    produce(
        bootstrap,
        topic,
        (0..PARTITIONS).map(|p| {
            let ts = base + 600_000;
            let v = serde_json::json!({ "key": format!("end{p}"), "value": 0, "ts": ts });
            (p as i32, None, v.to_string(), Some(ts))
        }),
    )
    .expect("write the trailers");
}

/// How the job's source is assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// brook assigns the partitions; ends at the topic's end (the reference).
    Plain,
    /// The consumer group assigns them; follows the topic.
    Group,
    /// The consumer group assigns them; each partition's job ends at its end.
    GroupBounded,
}

fn spec(dir: &Path, bootstrap: &str, input: &str, output: &str, mode: Mode) -> PathBuf {
    let group_mode = mode != Mode::Plain;
    let source = match mode {
        Mode::Plain => "bounded: true",
        // A dead member is noticed after 6 s (by a broker that expires members).
        Mode::Group => "assignment: group\n    properties: { session.timeout.ms: \"6000\", heartbeat.interval.ms: \"500\" }",
        Mode::GroupBounded => "assignment: group\n    bounded: true",
    };
    let group = if group_mode {
        format!("brook-group-test-{input}")
    } else {
        format!("brook-group-test-clean-{input}")
    };
    // Transactional ids derive from the job's name: one per test and mode.
    let name = format!("kg-{}-{mode:?}", input.rsplit('-').next().unwrap_or("x")).to_lowercase();
    let yaml = format!(
        r#"
name: {name}
checkpoint_interval: 100ms
sources:
  - name: events
    connector: kafka
    bootstrap: "{bootstrap}"
    topic: {input}
    group: {group}
    {source}
    event_time: ts
    watermark: {{ out_of_orderness: 100ms, interval: 0 }}
steps:
  - key_by: [key]
  - name: per-second
    window: {{ kind: tumbling, size: 1s }}
    aggregate: {{ n: count(), total: sum(value) }}
sinks:
  - {{ name: out, connector: kafka, bootstrap: "{bootstrap}", topic: {output}, key_field: key }}
"#
    );
    let path = dir.join(if group_mode {
        "group.yaml"
    } else {
        "plain.yaml"
    });
    std::fs::write(&path, yaml).expect("write the spec");
    path
}

/// The committed rows of `topic`, sorted, without the trailers' windows.
fn rows(bootstrap: &str, topic: &str) -> Vec<String> {
    let mut v = values(bootstrap, topic, true);
    v.retain(|v| !v.contains("\"end"));
    v
}

/// The rows of one run over all of `input` with brook assigning the partitions.
fn reference(bootstrap: &str, input: &str) -> Vec<String> {
    let clean = tempfile::tempdir().expect("a temporary directory");
    let clean_out = unique("kafka-group-clean");
    create_topic(bootstrap, &clean_out, 3).expect("create the output topic");
    let plain = spec(clean.path(), bootstrap, input, &clean_out, Mode::Plain);
    run_brook_ok(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(clean.path().join("data"))
            .args(["run", "--quiet", "--parallelism", "2"])
            .arg(&plain),
    );
    rows(bootstrap, &clean_out)
}

/// A `brook run` worker whose stderr lines are collected.
struct Worker {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    fn start(data: &Path, checkpoints: &Path, job: &Path) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(data)
            .arg("run")
            .arg("--checkpoint-dir")
            .arg(checkpoints)
            .arg(job)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start brook");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l.lock().expect("lines").push(line);
            }
        });
        Worker { child, lines }
    }

    fn said(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// The partitions of the last assignment it reported.
    fn assigned(&self) -> Option<String> {
        self.said().iter().rev().find_map(|l| {
            l.split_once("assigned partitions ")
                .map(|(_, p)| p.to_string())
        })
    }
}

/// Sends a Kafka `LeaveGroup` (v0: group id, member id) for `member` to the broker at
/// `bootstrap` (the group's coordinator: a single broker) and returns its error code.
fn leave_group(bootstrap: &str, group: &str, member: &str) -> i16 {
    use std::io::{Read, Write};
    fn string(buf: &mut Vec<u8>, s: &str) {
        buf.extend_from_slice(&(s.len() as i16).to_be_bytes());
        buf.extend_from_slice(s.as_bytes());
    }
    let mut body = Vec::new();
    body.extend_from_slice(&13i16.to_be_bytes()); // api key: LeaveGroup
    body.extend_from_slice(&0i16.to_be_bytes()); // version 0
    body.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    string(&mut body, "brook-test");
    string(&mut body, group);
    string(&mut body, member);
    let mut conn = std::net::TcpStream::connect(bootstrap).expect("connect to the broker");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    conn.write_all(&(body.len() as i32).to_be_bytes())
        .and_then(|()| conn.write_all(&body))
        .expect("send LeaveGroup");
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).expect("the LeaveGroup response");
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    conn.read_exact(&mut resp).expect("the LeaveGroup response");
    assert!(resp.len() >= 6, "a short LeaveGroup response: {resp:?}");
    assert_eq!(&resp[..4], &7i32.to_be_bytes(), "correlation id");
    let code = i16::from_be_bytes([resp[4], resp[5]]);
    eprintln!("LeaveGroup for {member}: error code {code}");
    code
}

fn wait_for(what: &str, secs: u64, workers: &[&Worker], mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        if Instant::now() > deadline {
            let said: Vec<Vec<String>> = workers.iter().map(|w| w.said()).collect();
            panic!("timed out waiting for {what}; the workers said: {said:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test --test kafka_group -- --ignored`"]
fn two_processes_share_a_topic_and_one_takes_over_the_others_partitions_exactly_once() {
    let bootstrap = bootstrap();
    let base = base_ms();
    let input = unique("kafka-group-in");
    create_topic(&bootstrap, &input, PARTITIONS as i32).expect("create the input topic");
    let output = unique("kafka-group-out");
    create_topic(&bootstrap, &output, 3).expect("create the output topic");
    events(&bootstrap, &input, base, 0, PHASE);

    let dir = tempfile::tempdir().expect("a temporary directory");
    let checkpoints = dir.path().join("shared-checkpoints");
    let job = spec(dir.path(), &bootstrap, &input, &output, Mode::Group);
    let mut a = Worker::start(&dir.path().join("a"), &checkpoints, &job);
    wait_for("the first worker's assignment", 60, &[&a], || {
        a.assigned().is_some_and(|p| p == "[0, 1, 2, 3]")
    });
    let mut b = Worker::start(&dir.path().join("b"), &checkpoints, &job);
    // The group shares the partitions out: two each.
    wait_for("the partitions to be shared", 60, &[&a, &b], || {
        let (pa, pb) = (a.assigned(), b.assigned());
        pa.is_some_and(|p| p.matches(',').count() == 1)
            && pb.is_some_and(|p| p.matches(',').count() == 1)
    });
    // The second worker's partitions came with the first one's state.
    wait_for("the second worker to restore", 30, &[&a, &b], || {
        b.said()
            .iter()
            .any(|l| l.contains(": restoring checkpoint"))
    });
    wait_for("output of both workers", 60, &[&a, &b], || {
        rows(&bootstrap, &output).len() > 100
    });
    std::thread::sleep(Duration::from_millis(500));
    b.child.kill().expect("SIGKILL the second worker");
    b.child.wait().expect("reap it");
    let b_had = b.assigned().expect("it had partitions");
    eprintln!("killed the worker holding {b_had}");
    // A Kafka broker notices the dead member after session.timeout.ms (6 s here) and
    // removes it from the group; noida-db (the CI broker) never expires members, so
    // the test removes it as the session timeout would: a LeaveGroup in its name.
    let member = b
        .said()
        .iter()
        .rev()
        .find_map(|l| {
            let rest = l.split_once(": member ")?.1;
            Some(rest.split_once(": assigned")?.0.to_string())
        })
        .expect("the dead worker's member id");
    leave_group(&bootstrap, &format!("brook-group-test-{input}"), &member);

    events(&bootstrap, &input, base, PHASE, 2 * PHASE);
    trailers(&bootstrap, &input, base);
    wait_for(
        "the first worker to take every partition",
        60,
        &[&a],
        || a.assigned().is_some_and(|p| p == "[0, 1, 2, 3]"),
    );

    // The reference: one run over all the input, brook assigning the partitions.
    let want = reference(&bootstrap, &input);
    // 20 s of event time, 48 keys: about 960 per-second rows.
    assert!(want.len() > 900, "{} rows", want.len());

    wait_for("the whole output", 90, &[&a], || {
        rows(&bootstrap, &output).len() >= want.len()
    });
    // Time for duplicates, if any, to show.
    std::thread::sleep(Duration::from_secs(2));
    let got = rows(&bootstrap, &output);
    let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).collect();
    let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).collect();
    assert!(
        got == want,
        "{} rows vs {} of the clean run; missing: {:?}, not in the clean run: {:?}",
        got.len(),
        want.len(),
        &missing[..missing.len().min(3)],
        &extra[..extra.len().min(3)]
    );

    // SIGTERM: the worker stops its partitions with a checkpoint and leaves the group.
    let term = Command::new("kill")
        .args(["-TERM", &a.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    let status = a.child.wait().expect("reap the first worker");
    assert!(status.success(), "{status}: {:#?}", a.said());
    assert!(
        a.said()
            .iter()
            .any(|l| l.contains("stopped with a checkpoint")),
        "{:#?}",
        a.said()
    );
    let after = rows(&bootstrap, &output);
    assert_eq!(after, got, "stopping wrote rows");

    // The group's offsets follow the checkpoints, committed by its members: every
    // partition was read to its end (its events and its trailer).
    let committed = committed_offsets(&bootstrap, &format!("brook-group-test-{input}"), &input)
        .expect("the group's offsets");
    let ends: std::collections::BTreeMap<i32, i64> = (0..PARTITIONS as i32)
        .map(|p| {
            let n = (0..2 * PHASE)
                .filter(|i| ((i * 7919) % KEYS) % PARTITIONS == p as i64)
                .count() as i64;
            (p, n + 1)
        })
        .collect();
    assert_eq!(committed, ends);
}

/// `bounded: true` in group mode: each partition's job ends at the partition's end and
/// leaves `_finished`; the process exits once all have; run again, it finds every
/// partition finished and writes nothing.
#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test --test kafka_group -- --ignored`"]
fn a_bounded_group_job_runs_every_partition_to_its_end_once() {
    let bootstrap = bootstrap();
    let base = base_ms();
    let input = unique("kafka-group-bounded-in");
    create_topic(&bootstrap, &input, PARTITIONS as i32).expect("create the input topic");
    events(&bootstrap, &input, base, 0, PHASE);
    let output = unique("kafka-group-bounded-out");
    create_topic(&bootstrap, &output, 3).expect("create the output topic");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let checkpoints = dir.path().join("checkpoints");
    let job = spec(dir.path(), &bootstrap, &input, &output, Mode::GroupBounded);
    for run in 0..2 {
        let mut w = Worker::start(&dir.path().join("data"), &checkpoints, &job);
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = w.child.try_wait().expect("poll the worker") {
                break s;
            }
            assert!(Instant::now() < deadline, "still running: {:#?}", w.said());
            std::thread::sleep(Duration::from_millis(100));
        };
        // Give the stderr reader a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(200));
        let said = w.said();
        assert!(status.success(), "run {run}: {status}: {said:#?}");
        assert!(
            said.iter().any(|l| l.contains("every partition finished")),
            "{said:#?}"
        );
        let started = said.iter().filter(|l| l.contains(": starting")).count();
        assert_eq!(
            started,
            if run == 0 { 4 } else { 0 },
            "run {run}: {said:#?}"
        );
        for p in 0..PARTITIONS {
            assert!(checkpoints.join(format!("p{p}/_finished")).exists());
        }
    }
    let got = rows(&bootstrap, &output);
    let want = reference(&bootstrap, &input);
    assert!(want.len() > 400, "{} rows", want.len());
    assert_eq!(got, want);

    // Another job pointed at these checkpoints is refused, and so is a group job
    // without a shared checkpoint directory.
    let other = spec(dir.path(), &bootstrap, &input, &output, Mode::Group);
    let err = run_brook_err(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("run")
            .arg("--checkpoint-dir")
            .arg(&checkpoints)
            .arg(&other),
    );
    assert!(err.contains("holds the checkpoints of"), "{err}");
    let err = run_brook_err(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("run")
            .arg(&job),
    );
    assert!(err.contains("needs --checkpoint-dir"), "{err}");
}
