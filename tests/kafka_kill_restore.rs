//! Exactly once through crashes with Kafka (README "Kafka"): a windowed job reads a
//! 4-partition topic of a real broker and writes per-second aggregates to another
//! topic with Kafka transactions; a `brook run` child is killed with SIGKILL at random
//! moments and restored from its latest checkpoint each time; the output a
//! `read_committed` reader sees then equals the output of a run without failures
//! exactly: no row lost, none twice.
//!
//! Needs `BROOK_KAFKA_BOOTSTRAP`: the tests are ignored unless asked for (`-- --ignored`;
//! `scripts/test.sh` starts a broker and runs them). Kills: `BROOK_KAFKA_KILL_ITERATIONS` (default 6); `BROOK_KILL_SEED`
//! fixes the moments.

// Wall-clock time names topics uniquely and dates records (brokers delete old ones).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook::kafka::admin::{committed_offsets, create_topic};
use rand::{Rng, SeedableRng};

use brook_testkit::binary::run_brook_ok;
use brook_testkit::kafka::{base_ms, bootstrap, produce_events, unique, values};

const EVENTS: i64 = 20_000;
const PARTITIONS: i64 = 4;

/// 20,000 events of 50 keys over 4 partitions (by key), from an hour ago, with
/// disorder under the watermark's 100 ms.
fn input(bootstrap: &str) -> String {
    let topic = unique("kafka-events");
    create_topic(bootstrap, &topic, PARTITIONS as i32).expect("create the input topic");
    produce_events(bootstrap, &topic, PARTITIONS, 50, base_ms(), 0..EVENTS);
    topic
}

fn spec(dir: &Path, bootstrap: &str, input: &str, output: &str) -> PathBuf {
    let yaml = format!(
        r#"
name: kafka-windows
checkpoint_interval: 50ms
sources:
  - name: events
    connector: kafka
    bootstrap: "{bootstrap}"
    topic: {input}
    group: brook-kill-test
    bounded: true
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
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).expect("write the spec");
    path
}

fn brook(data: &Path, job: &Path, restore: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_brook"));
    c.arg("--data-dir")
        .arg(data)
        .args(["run", "--quiet", "--parallelism", "2"])
        .arg(job);
    if restore {
        c.args(["--restore", "latest"]);
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

fn has_checkpoint(data: &Path) -> bool {
    std::fs::read_dir(data.join("checkpoints/kafka-windows"))
        .map(|d| d.flatten().any(|e| e.path().join("_metadata").exists()))
        .unwrap_or(false)
}

#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test --test kafka_kill_restore -- --ignored`"]
fn killed_and_restored_kafka_job_commits_exactly_the_output_of_a_clean_run() {
    let bootstrap = bootstrap();
    let iterations: usize = std::env::var("BROOK_KAFKA_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("BROOK_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("BROOK_KILL_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let events = input(&bootstrap);

    // The reference: one run without failures.
    let clean = tempfile::tempdir().expect("a temporary directory");
    let clean_out = unique("kafka-clean");
    create_topic(&bootstrap, &clean_out, 3).expect("create the output topic");
    let job = spec(clean.path(), &bootstrap, &events, &clean_out);
    let started = Instant::now();
    let out = run_brook_ok(&mut brook(&clean.path().join("data"), &job, false));
    let clean_ms = started.elapsed().as_millis() as u64;
    let want = values(&bootstrap, &clean_out, true);
    // 20 s of event time, 50 keys: about 1000 per-second rows.
    assert!(
        want.len() > 900,
        "{} rows; brook said: {}",
        want.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("clean run: {} rows in {clean_ms} ms", want.len());
    // Completed checkpoints committed the source's offsets to its group (monitoring).
    let committed =
        committed_offsets(&bootstrap, "brook-kill-test", &events).expect("the group's offsets");
    assert!(
        committed.values().any(|o| *o > 0),
        "no offsets committed: {committed:?}"
    );

    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    let mut output = unique("kafka-killed");
    create_topic(&bootstrap, &output, 3).expect("create the output topic");
    let mut job = spec(dir.path(), &bootstrap, &events, &output);
    let (mut kills, mut finished_early) = (0, 0);
    while kills < iterations {
        let mut child = brook(&data, &job, has_checkpoint(&data))
            .spawn()
            .expect("start brook");
        std::thread::sleep(Duration::from_millis(
            rng.gen_range(clean_ms / 10..clean_ms.max(20)),
        ));
        if let Some(status) = child.try_wait().expect("poll the child") {
            if !status.success() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!("a run failed ({status}): {err}");
            }
            // The job got to the end before the kill: start over from nothing.
            finished_early += 1;
            assert!(finished_early < 20, "the job is too fast to be killed");
            let _ = std::fs::remove_dir_all(data.join("checkpoints"));
            output = unique("kafka-killed");
            create_topic(&bootstrap, &output, 3).expect("create the output topic");
            job = spec(dir.path(), &bootstrap, &events, &output);
            continue;
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap the child");
        kills += 1;
    }
    run_brook_ok(&mut brook(&data, &job, has_checkpoint(&data)));
    let got = values(&bootstrap, &output, true);
    let uncommitted = values(&bootstrap, &output, false);
    eprintln!(
        "after {kills} kills: {} committed rows, {} read uncommitted",
        got.len(),
        uncommitted.len()
    );
    // A job killed after its last commit but before it exited is restored: its final
    // checkpoint records the end of the input, so the restore writes nothing again.
    run_brook_ok(&mut brook(&data, &job, true));
    let again = values(&bootstrap, &output, true);
    assert_eq!(
        again.len(),
        got.len(),
        "restoring the finished job wrote {} rows again",
        again.len() - got.len()
    );
    let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).collect();
    let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).collect();
    assert!(
        got == want,
        "rows differ after {kills} kills (seed {seed}): {} vs {} rows; missing: {:?}, not in the clean run: {:?}",
        got.len(),
        want.len(),
        &missing[..missing.len().min(3)],
        &extra[..extra.len().min(3)]
    );
}

/// Idleness means no data, not a busy reader: with a short `idle_timeout`, partitions
/// whose records wait behind others (a backlog, backpressure) must not go idle, or the
/// watermark runs ahead on the other partitions and their records turn up late. The
/// input's disorder is within the bound, so no record may be late.
#[test]
#[ignore = "needs a Kafka broker: `source scripts/kafka-broker.sh`, then `cargo test --test kafka_kill_restore -- --ignored`"]
fn partitions_with_records_waiting_do_not_go_idle() {
    let bootstrap = bootstrap();
    let events = input(&bootstrap);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let late = dir.path().join("late.jsonl");
    let yaml = format!(
        r#"
name: kafka-idleness
sources:
  - name: events
    connector: kafka
    bootstrap: "{bootstrap}"
    topic: {events}
    bounded: true
    event_time: ts
    watermark: {{ out_of_orderness: 100ms, idle_timeout: 50ms }}
steps:
  - key_by: [key]
  - name: per-second
    window: {{ kind: tumbling, size: 1s }}
    aggregate: {{ n: count() }}
    late_output: late
sinks:
  - {{ name: out, connector: file, path: {out}, input: per-second }}
  - {{ name: late, connector: file, path: {late} }}
"#,
        out = dir.path().join("out.jsonl").display(),
        late = late.display(),
    );
    let job = dir.path().join("job.yaml");
    std::fs::write(&job, yaml).expect("write the spec");
    // One reader for four partitions, and a small channel: the reader is often
    // held back.
    run_brook_ok(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["run", "--quiet", "--parallelism", "1"])
            .arg(&job),
    );
    let late_rows = std::fs::read_to_string(&late).unwrap_or_default();
    assert_eq!(
        late_rows.lines().count(),
        0,
        "late records: {}",
        late_rows.lines().take(3).collect::<Vec<_>>().join("\n")
    );
    let rows = std::fs::read_to_string(dir.path().join("out.jsonl")).expect("the output");
    assert!(rows.lines().count() > 900, "{} rows", rows.lines().count());
}
