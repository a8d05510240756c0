//! Aligned checkpoints and restore (semantics.md §4): a job that fails part-way and is
//! restored from its latest complete checkpoint ends with the state of a run without
//! failure (every record counted exactly once), also at another parallelism; damaged
//! checkpoints are skipped.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::time::Millis;
use brook_engine::testing::{CollectSink, CountPerKey, VecSource};
use brook_engine::{
    latest_complete, CheckpointConfig, JobConfig, StateBackendFactory, StreamEnvironment,
};
use brook_state::RocksDbOptions;

const N: u64 = 3_000;
const KEYS: u64 = 10;

type Counts = CollectSink<(u64, u64)>;

/// Runs the job; with `fail_at`, the source side fails at that record. Returns the
/// per-key counts (when it finished) and how many records the source side saw.
fn run(
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: bool,
) -> (Result<BTreeMap<u64, u64>, String>, u64) {
    run_on(Backend::Memory, dir, parallelism, fail_at, restore)
}

/// Where the job keeps its keyed state.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    /// RocksDB, working directory under the checkpoint directory's parent.
    RocksDb,
}

fn run_on(
    backend: Backend,
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: bool,
) -> (Result<BTreeMap<u64, u64>, String>, u64) {
    let restore = restore.then(|| latest_complete(dir).unwrap());
    let (env, out, seen) = job_on(backend, dir, parallelism, fail_at, restore);
    let r = env.execute("counts").map_err(|e| e.to_string());
    let counts = r.map(|_| out.values().into_iter().collect());
    (counts, seen.load(Ordering::SeqCst))
}

/// The job: count per key, checkpointing into `dir` every 20 ms.
fn job(
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: Option<brook_engine::RestoredCheckpoint>,
) -> (StreamEnvironment, Counts, Arc<AtomicU64>) {
    job_on(Backend::Memory, dir, parallelism, fail_at, restore)
}

fn job_on(
    backend: Backend,
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: Option<brook_engine::RestoredCheckpoint>,
) -> (StreamEnvironment, Counts, Arc<AtomicU64>) {
    let restore = restore.map(Arc::new);
    let state_backend = match backend {
        Backend::Memory => StateBackendFactory::memory(),
        Backend::RocksDb => StateBackendFactory::rocksdb(
            dir.with_extension("state"),
            RocksDbOptions::new().memory_bytes(16 << 20),
        ),
    };
    let config = JobConfig {
        checkpoint: Some(CheckpointConfig::new(dir, 20)),
        restore,
        state_backend,
        ..JobConfig::with_parallelism(parallelism)
    };
    let env = StreamEnvironment::new(config);
    let out = CollectSink::new();
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    let input: Vec<(u64, Millis)> = (0..N).map(|i| (i, i as i64)).collect();
    env.from_source(
        // Splits that do not depend on the parallelism, so positions carry over.
        VecSource::with_timestamps(input).splits(4).poll_size(10),
        brook_core::watermark::WatermarkStrategy::for_monotonous_timestamps(),
    )
    .map(move |i: u64| {
        s.fetch_add(1, Ordering::SeqCst);
        // Slow enough for several checkpoints to complete during the run.
        std::thread::sleep(Duration::from_micros(200));
        assert!(fail_at != Some(i), "injected failure at record {i}");
        i
    })
    .key_by(|i: &u64| i % KEYS)
    .process(|| CountPerKey)
    .sink(out.clone());
    (env, out, seen)
}

fn expected() -> BTreeMap<u64, u64> {
    (0..KEYS).map(|k| (k, N / KEYS)).collect()
}

fn fail_then_restore(before: u32, after: u32) {
    fail_then_restore_on((Backend::Memory, before), (Backend::Memory, after));
}

fn fail_then_restore_on((b1, before): (Backend, u32), (b2, after): (Backend, u32)) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cp");
    let dir = &dir;
    let (first, _) = run_on(b1, dir, before, Some(2_500), false);
    let err = first.unwrap_err();
    assert!(err.contains("injected failure"), "{err}");
    let restored = latest_complete(dir).unwrap();
    assert!(restored.id >= 1);
    let (second, seen) = run_on(b2, dir, after, None, true);
    assert_eq!(second.unwrap(), expected());
    // The restored run resumed after the checkpoint, not from the start.
    assert!(seen < N, "the restored run read all {seen} records again");
}

#[test]
fn a_restored_job_counts_every_record_exactly_once() {
    fail_then_restore(1, 1);
}

#[test]
fn state_follows_its_key_groups_to_another_parallelism() {
    fail_then_restore(2, 1);
    fail_then_restore(2, 3);
}

#[test]
fn rocksdb_state_is_restored_exactly_once_at_any_parallelism_and_on_either_backend() {
    use Backend::{Memory, RocksDb};
    fail_then_restore_on((RocksDb, 1), (RocksDb, 1));
    fail_then_restore_on((RocksDb, 2), (RocksDb, 3));
    fail_then_restore_on((RocksDb, 2), (RocksDb, 1));
    // Native files read into memory, and key-group blobs written into RocksDB.
    fail_then_restore_on((RocksDb, 2), (Memory, 1));
    fail_then_restore_on((Memory, 1), (RocksDb, 2));
}

/// RocksDB checkpoints share SST files in `shared/`: every file a kept checkpoint
/// lists is there, and nothing else is (files of dropped checkpoints are deleted).
#[test]
fn shared_state_files_are_exactly_those_of_the_kept_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cp");
    let (r, _) = run_on(Backend::RocksDb, &dir, 2, None, false);
    assert_eq!(r.unwrap(), expected());
    let mut listed = std::collections::BTreeSet::new();
    let mut kept = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let meta = e.unwrap().path().join("_metadata");
        let Ok(text) = std::fs::read_to_string(&meta) else {
            continue;
        };
        kept += 1;
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for f in v["files"].as_array().unwrap() {
            for s in f["shared"].as_array().into_iter().flatten() {
                listed.insert(s.as_str().unwrap().to_string());
            }
        }
    }
    assert!((1..=3).contains(&kept), "{kept} checkpoints kept");
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(dir.join("shared"))
        .unwrap()
        .map(|e| format!("shared/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    assert!(!listed.is_empty(), "RocksDB checkpoints are native");
    assert_eq!(present, listed);
    // The working directories went with the job.
    let state = dir.with_extension("state");
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
}

#[test]
fn a_damaged_checkpoint_is_skipped_for_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = run(dir.path(), 1, Some(2_500), false);
    assert!(first.is_err());
    let newest = latest_complete(dir.path()).unwrap();
    // Damage one file of the newest checkpoint.
    let file = std::fs::read_dir(&newest.path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "state"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let older = latest_complete(dir.path()).unwrap();
    assert!(older.id < newest.id, "{} then {}", newest.id, older.id);
    // A checkpoint without metadata (incomplete) is skipped too.
    std::fs::remove_file(older.path.join("_metadata")).unwrap();
    let oldest = latest_complete(dir.path()).unwrap();
    assert!(oldest.id < older.id);
    let (second, _) = run(dir.path(), 1, None, true);
    assert_eq!(second.unwrap(), expected());
}

#[test]
fn a_job_without_failure_keeps_the_last_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (r, seen) = run(dir.path(), 2, None, false);
    assert_eq!(r.unwrap(), expected());
    assert_eq!(seen, N);
    let complete = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("_metadata").exists())
        .count();
    assert!(
        (1..=3).contains(&complete),
        "{complete} complete checkpoints kept"
    );
    let _ = AtomicBool::new(false);
}

/// Bounded input ends with a final checkpoint (FLIP-147): restoring a finished job
/// resumes at the end of its input and reads and writes nothing again (a job killed
/// after its sinks' last commit would otherwise write its tail twice).
#[test]
fn a_finished_job_ends_with_a_final_checkpoint_at_the_end_of_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let (r, seen) = run(dir.path(), 2, None, false);
    assert_eq!(r.unwrap(), expected());
    assert_eq!(seen, N);
    let (again, seen) = run(dir.path(), 2, None, true);
    assert_eq!(seen, 0, "the restored run read records again");
    assert_eq!(again.unwrap(), BTreeMap::new());
}

/// Stop with checkpoint (the Kafka group mode's hand-over): the latest checkpoint is
/// taken at the stop, and a restore of it finishes the count exactly once.
#[test]
fn a_job_stopped_with_a_checkpoint_resumes_there() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cp");
    let (env, _out, seen) = job(&dir, 2, None, None);
    let handle = env.start("counts").unwrap();
    while seen.load(Ordering::SeqCst) < N / 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every record the map saw before the request was emitted before the barrier the
    // request injects, so the checkpoint covers it: a restore reads again at most
    // what came after (an older checkpoint would read more). Not timing-dependent.
    let at_request = seen.load(Ordering::SeqCst);
    let stopped = handle.stop_with_checkpoint().unwrap();
    assert!(stopped.is_none(), "the job ran to its end");
    let first = seen.load(Ordering::SeqCst);
    assert!(first < N, "{first}");
    let (second, seen) = run(&dir, 2, None, true);
    assert_eq!(second.unwrap(), expected());
    assert!(
        seen <= N - at_request,
        "read {seen} records again; {at_request} were seen before the stop was asked for"
    );
}

#[test]
fn a_savepoint_taken_while_running_restores_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let saves = dir.path().join("savepoints");
    let (env, out, _) = job(&dir.path().join("cp"), 2, None, None);
    let handle = env.start("counts").unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let path = handle.savepoint(&saves).unwrap();
    assert!(path.starts_with(&saves), "{}", path.display());
    // The coordinator's statistics cover the savepoint (a checkpoint too).
    let stats = Arc::clone(handle.metrics().checkpoints());
    let (completed, last) = (
        stats.completed.load(Ordering::Relaxed),
        stats.last_id.load(Ordering::Relaxed),
    );
    assert!(completed >= 1 && last >= 1, "{stats:?}");
    assert!(
        stats.last_size_bytes.load(Ordering::Relaxed) > 0,
        "{stats:?}"
    );
    let sp_id: u64 = path
        .file_name()
        .and_then(|n| n.to_str()?.strip_prefix("savepoint-")?.parse().ok())
        .unwrap();
    assert!(last >= sp_id, "the savepoint {sp_id} counts: {stats:?}");
    let prom = handle.metrics().prometheus();
    assert!(
        prom.contains("brook_checkpoints_completed_total "),
        "{prom}"
    );
    handle.join().unwrap();
    assert_eq!(
        out.values().into_iter().collect::<BTreeMap<_, _>>(),
        expected()
    );
    // The savepoint is not subject to retention, and restores at parallelism 3.
    let sp = brook_engine::RestoredCheckpoint::load(&path).unwrap();
    let (env, out, seen) = job(&dir.path().join("cp2"), 3, None, Some(sp));
    env.execute("counts").unwrap();
    assert_eq!(
        out.values().into_iter().collect::<BTreeMap<_, _>>(),
        expected()
    );
    assert!(seen.load(Ordering::SeqCst) < N);
}

#[test]
fn a_savepoint_needs_checkpointing() {
    let env = StreamEnvironment::new(JobConfig::default());
    env.source(VecSource::new(vec![1u8]))
        .sink(CollectSink::new());
    let h = env.start("no-checkpoints").unwrap();
    let err = h.savepoint(Path::new("/nonexistent")).unwrap_err();
    assert!(err.to_string().contains("checkpoint interval"), "{err}");
    h.join().unwrap();
}
