//! `brook run` jobs on a data directory a running `brook broker` holds (README "The log
//! as a Kafka broker", semantics.md §1a "Jobs on a served log"): the job's `log`
//! sources and sinks go through the broker instead of failing with "in use", so
//! `brook produce` feeds a running job from another process, and a job SIGKILLed and
//! restored from its checkpoints still writes every input record exactly once (read
//! read_committed).
//!
//! Kills: `BROOK_SERVED_KILLS` (default 4); `BROOK_KILL_SEED` fixes the moments.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use brook::core::time::{Clock, Stopwatch, SystemClock};
use brook::kafka::admin::{produce, read_to_end};
use rand::{Rng, SeedableRng};

use brook_testkit::binary::{
    brook_command, command_line, expect_success, run_brook_ok, run_brook_with_input,
};
use brook_testkit::broker::BrokerProcess;
use brook_testkit::files::latest_checkpoint;
use brook_testkit::process::{wait_for, KillOnDrop};

fn brook(data: &Path, args: &[&str]) -> Command {
    brook_command(Path::new(env!("CARGO_BIN_EXE_brook")), data, args)
}

fn start_broker(data: &Path) -> BrokerProcess {
    BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), data, &[])
}

/// A job copying topic `input` to topic `output` (keyed by `id`), checkpointing every
/// 50 ms; `bounded: false` follows the input. Its source declares a schema, so it reads
/// the records through the broker straight into Arrow batches (the copies keep `id`
/// alone).
fn copy_job(dir: &Path, output: &str, bounded: bool) -> PathBuf {
    let yaml = format!(
        r#"
name: copy
checkpoint_interval: 50ms
parallelism: 2
sources:
  - {{ name: in, connector: log, topic: input, bounded: {bounded}, schema: {{ id: int64 }} }}
sinks:
  - {{ name: out, connector: log, topic: {output}, key_field: id }}
"#
    );
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// How often each `id` is in `topic`, read through the broker read_committed.
fn committed_ids(bootstrap: &str, topic: &str) -> BTreeMap<i64, usize> {
    let mut ids = BTreeMap::new();
    for r in read_to_end(bootstrap, topic, true).unwrap() {
        let v: serde_json::Value = serde_json::from_str(&r.value).unwrap();
        // The declared schema's field alone: the records were read into its batches.
        assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{v}");
        *ids.entry(v["id"].as_i64().unwrap()).or_insert(0) += 1;
    }
    ids
}

#[test]
fn a_job_reads_what_brook_produce_appends_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = start_broker(&data);
    run_brook_ok(&mut brook(
        &data,
        &["topic", "create", "input", "--partitions", "2"],
    ));
    run_brook_ok(&mut brook(
        &data,
        &["topic", "create", "output", "--partitions", "3"],
    ));
    let job = copy_job(dir.path(), "output", false);
    // Before the change: "in use" (the broker holds the log's lock).
    let mut running = KillOnDrop(
        brook(&data, &["run", "--quiet"])
            .arg(&job)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Five `brook produce` processes, one after another, while the job runs.
    for round in 0..5 {
        let lines: String = (0..40)
            .map(|i| format!("{{\"id\":{},\"round\":{round}}}\n", round * 40 + i))
            .collect();
        let mut cmd = brook(&data, &["produce", "input", "--key-field", "id"]);
        let out = run_brook_with_input(&mut cmd, lines.as_bytes());
        expect_success(&command_line(&cmd), &out);
        if let Some(status) = running.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            running
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("the job ended ({status}) while records were produced: {err}");
        }
    }
    let bootstrap = broker.bootstrap();
    let ids = wait_for(
        "the job's committed output to hold all 200 records",
        Duration::from_secs(30),
        || {
            let ids = committed_ids(&bootstrap, "output");
            (ids.len() == 200).then_some(ids)
        },
    );
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (0..200).collect::<Vec<_>>()
    );
    // The job still follows its input.
    assert!(running.try_wait().unwrap().is_none(), "the job ended");
}

#[test]
fn a_job_through_the_broker_killed_and_restored_writes_every_record_exactly_once() {
    const RECORDS: i64 = 20_000;
    let kills: usize = std::env::var("BROOK_SERVED_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("BROOK_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("BROOK_KILL_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = start_broker(&data);
    let bootstrap = broker.bootstrap();
    run_brook_ok(&mut brook(
        &data,
        &["topic", "create", "input", "--partitions", "2"],
    ));
    // Record times of today: with times of 1970 the topics' 7-day time retention
    // deletes every segment that rolls (a transaction marker, stamped now, is more
    // than `segment.ms` after a 1970 first batch, so the segment rolls before it).
    let base_ms = SystemClock.now_ms();
    produce(
        &bootstrap,
        "input",
        (0..RECORDS).map(|i| {
            let v = serde_json::json!({ "id": i, "ts": base_ms + i });
            ((i % 2) as i32, None, v.to_string(), Some(base_ms + i))
        }),
    )
    .unwrap();
    let run = |job: &Path, restore: bool| {
        let mut c = brook(&data, &["run", "--quiet"]);
        c.arg(job).stdout(Stdio::null()).stderr(Stdio::piped());
        if restore {
            c.args(["--restore", "latest"]);
        }
        c
    };
    let checkpoints = data.join("checkpoints/copy");
    let has_checkpoint = || latest_checkpoint(&checkpoints).is_some();

    // How long a clean run takes, so that kills come while it runs.
    run_brook_ok(&mut brook(
        &data,
        &["topic", "create", "clean", "--partitions", "3"],
    ));
    let started = Stopwatch::start();
    run_brook_ok(&mut run(&copy_job(dir.path(), "clean", true), false));
    let clean_ms = started.elapsed_nanos() / 1_000_000;
    let clean = committed_ids(&bootstrap, "clean");
    assert_eq!(clean.len(), RECORDS as usize);
    std::fs::remove_dir_all(&checkpoints).unwrap();

    let mut attempt = 0;
    let mut output = String::new();
    let mut job = PathBuf::new();
    let mut done = 0;
    let mut finished_early = 0;
    // Attempts that restored a checkpoint (the last one included).
    let mut restores = 0;
    while done < kills {
        if attempt == 0 || output.is_empty() {
            // A fresh output topic (and no checkpoints) for a fresh start.
            attempt += 1;
            output = format!("out{attempt}");
            run_brook_ok(&mut brook(
                &data,
                &["topic", "create", &output, "--partitions", "3"],
            ));
            job = copy_job(dir.path(), &output, true);
            let _ = std::fs::remove_dir_all(&checkpoints);
        }
        let restore = has_checkpoint();
        let mut child = run(&job, restore).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(
            rng.gen_range(clean_ms / 5..clean_ms.max(50)),
        ));
        // The last kill comes after a checkpoint at least, so the final run restores
        // (random kill times alone may all come before the first one completes).
        if done + 1 == kills {
            let waited = Stopwatch::start();
            while !has_checkpoint()
                && child.try_wait().unwrap().is_none()
                && waited.elapsed_nanos() < 30_000_000_000
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "a run failed: {status}");
            // It got to the end before the kill: start over from nothing.
            finished_early += 1;
            assert!(finished_early < 20, "the job is too fast to be killed");
            output.clear();
            continue;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        done += 1;
        restores += usize::from(restore);
    }
    // The last run restores what the kills left, so exactly-once is tested across
    // restores (else it would be a clean run).
    assert!(
        has_checkpoint(),
        "no checkpoint after {done} kills (seed {seed})"
    );
    restores += 1;
    eprintln!("{done} kills, {restores} attempts restored a checkpoint");
    let out = run_brook_ok(&mut run(&job, true));
    let ids = committed_ids(&bootstrap, &output);
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(5).collect();
    let missing: Vec<i64> = (0..RECORDS)
        .filter(|i| !ids.contains_key(i))
        .take(5)
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && ids.len() == RECORDS as usize,
        "after {done} kills (seed {seed}): {} ids, some twice {twice:?}, some missing {missing:?}; {}",
        ids.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    // Restoring the finished job writes nothing again.
    run_brook_ok(&mut run(&job, true));
    assert_eq!(committed_ids(&bootstrap, &output), ids);
    drop(broker);
}
