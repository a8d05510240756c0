//! A checkpoint restores across the modes of `brook run` (semantics.md §1a "Jobs on a
//! served log"): a log → log job SIGKILLed while it runs with the log in-process is
//! restored through a `brook broker` on the same data directory, and the other way
//! round; the output topic, read read_committed, then holds every input record
//! exactly once, and no transaction is left undecided.
//!
//! Before: the restore failed with "a committable in the checkpoint is not one this
//! sink wrote" (the in-process log sink's committable is a prepared log transaction,
//! the Kafka sink's the checkpoint's records).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use brook::core::time::{Clock, SystemClock};
use brook::log::{IsolationLevel, Log, LogOptions, ProducerRecord, TopicConfig};

use brook_testkit::binary::{brook_command, run_brook_ok};
use brook_testkit::broker::BrokerProcess;
use brook_testkit::files::latest_checkpoint;
use brook_testkit::log_job::{topic_rows, undecided_records};
use brook_testkit::process::{wait_for, KillOnDrop};

fn brook(data: &Path, args: &[&str]) -> Command {
    brook_command(Path::new(env!("CARGO_BIN_EXE_brook")), data, args)
}

fn run(data: &Path, job: &Path, restore: bool) -> Command {
    let mut c = brook(data, &["run", "--quiet"]);
    c.arg(job).stdout(Stdio::null()).stderr(Stdio::piped());
    if restore {
        c.args(["--restore", "latest"]);
    }
    c
}

/// Topic `input` (2 partitions) with `records` records `{"id": i}` stamped today (a
/// 1970 time would fall to the topics' time retention), and an empty topic `out` (3
/// partitions), written in-process before any broker starts.
fn setup(data: &Path, records: i64) {
    let log = Log::open(data, LogOptions::default()).unwrap();
    let input = log
        .create_topic("input", 2, TopicConfig::default())
        .unwrap();
    log.create_topic("out", 3, TopicConfig::default()).unwrap();
    let base_ms = SystemClock.now_ms();
    for p in 0..2u32 {
        let batch: Vec<ProducerRecord> = (0..records)
            .filter(|i| i % 2 == i64::from(p))
            .map(|i| {
                let v = serde_json::json!({ "id": i }).to_string();
                ProducerRecord::new(v).with_timestamp(base_ms + i)
            })
            .collect();
        input.partition(p).unwrap().append(&batch).unwrap();
    }
}

/// A job copying `input` to `out` (keyed by `id`), checkpointing every 50 ms.
fn copy_job(dir: &Path) -> PathBuf {
    let yaml = r#"
name: copy
checkpoint_interval: 50ms
parallelism: 2
sources:
  - { name: in, connector: log, topic: input, bounded: true }
sinks:
  - { name: out, connector: log, topic: out, key_field: id }
"#;
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// How often each id is in `out`, read committed in-process (no broker running).
fn committed_ids(data: &Path) -> BTreeMap<i64, usize> {
    let mut ids = BTreeMap::new();
    for row in topic_rows(data, IsolationLevel::ReadCommitted) {
        let v: serde_json::Value = serde_json::from_str(&row).unwrap();
        *ids.entry(v["id"].as_i64().unwrap()).or_insert(0) += 1;
    }
    ids
}

fn assert_exactly_once(data: &Path, records: i64) {
    let ids = committed_ids(data);
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(5).collect();
    let missing: Vec<i64> = (0..records)
        .filter(|i| !ids.contains_key(i))
        .take(5)
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && ids.len() == records as usize,
        "{} ids, some twice {twice:?}, some missing {missing:?}",
        ids.len()
    );
    assert_eq!(
        undecided_records(data),
        0,
        "a transaction is left undecided"
    );
}

/// Whether the newest complete checkpoint in `checkpoints` holds `committable` (bytes
/// of a sink committable, stored as they are in its task files).
fn latest_checkpoint_holds(checkpoints: &Path, committable: &[u8]) -> bool {
    let Some(id) = latest_checkpoint(checkpoints) else {
        return false;
    };
    let files = std::fs::read_dir(checkpoints.join(format!("chk-{id}"))).unwrap();
    files.flatten().any(|f| {
        std::fs::read(f.path())
            .is_ok_and(|b| b.windows(committable.len()).any(|w| w == committable))
    })
}

/// Runs the job and SIGKILLs it once its newest complete checkpoint holds a
/// committable of its log sink with `committable` in it (output pending: what the
/// restore must commit). `None` when the run ended before (too fast for these
/// records): the caller starts over with more.
fn kill_after_a_checkpoint(data: &Path, job: &Path, committable: &[u8]) -> Option<()> {
    let mut child = KillOnDrop(run(data, job, false).spawn().unwrap());
    let checkpoints = data.join("checkpoints/copy");
    let ended = wait_for(
        "a checkpoint with the log sink's output pending",
        Duration::from_secs(60),
        || {
            if latest_checkpoint_holds(&checkpoints, committable) {
                return Some(false);
            }
            child.try_wait().unwrap().map(|_| true)
        },
    );
    child.kill().unwrap();
    child.wait().unwrap();
    (!ended).then_some(())
}

/// Sets up a fresh data directory, calls `before_run` on it (what it returns, a
/// broker, lives on), and SIGKILLs the job's first run after a checkpoint holding
/// `committable`; then `kept` (given the data directory) says whether the attempt is
/// one to restore. Doubles the records until a run is slow enough for that.
fn killed_first_run<T>(
    dir: &Path,
    committable: &[u8],
    mut before_run: impl FnMut(&Path) -> T,
    kept: impl Fn(&Path) -> bool,
) -> (PathBuf, PathBuf, i64, T) {
    let mut records = 40_000;
    for attempt in 0..4 {
        let data = dir.join(format!("data{attempt}"));
        setup(&data, records);
        let job = copy_job(dir);
        let held = before_run(&data);
        if kill_after_a_checkpoint(&data, &job, committable).is_some() && kept(&data) {
            return (data, job, records, held);
        }
        records *= 2;
    }
    panic!("the job ended before a kill after a checkpoint with output in every attempt");
}

#[test]
fn a_checkpoint_taken_in_process_restores_through_a_broker() {
    let dir = tempfile::tempdir().unwrap();
    // The kill must leave output pending: the open (or prepared) transactions of the
    // log sink, which the restore must commit or abort (else the run had ended).
    // In-process the committable is a prepared log transaction of the sink.
    let (data, job, records, ()) = killed_first_run(
        dir.path(),
        br#""transactional_id":"copy.out."#,
        |_| (),
        |data| undecided_records(data) > 0,
    );

    let broker = BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), &data, &[]);
    // Through the broker: the log sinks are the Kafka connector's.
    run_brook_ok(&mut run(&data, &job, true));
    drop(broker);
    assert_exactly_once(&data, records);
}

#[test]
fn a_checkpoint_taken_through_a_broker_restores_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_brook"));
    // Through a broker the committable is the Kafka sink's records of a checkpoint.
    let (data, job, records, broker) = killed_first_run(
        dir.path(),
        br#""records":[["#,
        |data| BrokerProcess::start(&binary, data, &[]),
        |_| true,
    );
    // SIGKILL the broker too: the log is free, so the restore runs in-process.
    drop(broker);
    run_brook_ok(&mut run(&data, &job, true));
    assert_exactly_once(&data, records);
}
