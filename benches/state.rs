//! `cargo bench --bench state`: what keyed state on RocksDB and checkpoints cost,
//! each against a baseline measured in the same run (issue 5).
//!
//! 1. **backends**: the window workloads W1 and W4 of `docs/workloads.md` (shared
//!    docs) through the engine at parallelism 1 (source -> key_by -> window -> COUNT
//!    and SUM -> checking sink), with the state in memory (the baseline: heap state,
//!    the window operator's fast path), in memory as bytes
//!    (`MemoryStateBackend::serialized`: the general path RocksDB takes, without
//!    RocksDB), on RocksDB with its write-back cache, and on RocksDB without it
//!    (`write_cache_bytes(0)`); events/s and events per CPU-second, ratios to memory.
//! 2. **checkpoint**: a backend filled with N keys (1 M and 10 M; a `u64` key and a
//!    16-byte value in one state, `compose_key` keys over 128 key groups); the time
//!    and bytes of a full native RocksDB checkpoint, of an incremental one after 1 %
//!    of the keys changed, and of the memory backend's key-group blobs (serialized,
//!    written and fsynced: the baseline); then restore times: RocksDB at the same key
//!    groups (files taken over), RocksDB as 1 of 2 subtasks (half the key groups), and
//!    memory from its blobs (all and half). Every restore is checked entry by entry.
//! 3. **interval**: W1 on RocksDB through the engine with a checkpoint every second
//!    against none; how many checkpoints completed, how long they took and what they
//!    wrote.
//!
//! Every job's rows are verified (workloads.md's checks, and each backend's rows
//! against the memory run's), and so is every restored state.
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only runs each part
//! on a few thousand events or keys, in seconds.
//!
//! Environment (bench mode only, except the last two): `BROOK_BENCH_SCALE` (default
//! 1.0) multiplies event and key counts; `BROOK_BENCH_REPS` (default 3) is the number
//! of interleaved rounds of parts 1 and 3 (tables show medians); `BROOK_BENCH_ONLY`
//! runs one part (`backends`, `checkpoint`, `interval`) or one workload of part 1
//! (`W1`, `W4`); `BROOK_BENCH_DIR` is where RocksDB and the checkpoints write
//! (default: the system's temporary directory), `BROOK_BENCH_WM_MS` the sources'
//! watermark interval (default 200 ms).
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use brook::core::checkpoint::{RestoredState, SnapshotStorage, StateSnapshot};
use brook::core::keys::{key_group_for_key, key_group_range, KeyGroup, KeyGroupRange};
use brook::engine::{latest_complete, CheckpointConfig, JobConfig, StateBackendFactory};
use brook::state::backend::compose_key;
use brook::state::snapshot::{restore_keyed, snapshot_keyed};
use brook::state::{
    KeyedStateBackend, MemoryStateBackend, RocksDbOptions, RocksDbStateBackend, TimerService,
};

#[path = "common/workloads.rs"]
mod workloads;

use workloads::{fmt_rate, median, run_job, Run, Settings, Workload};

/// Key groups (the engine's default max parallelism).
const KEY_GROUPS: u32 = 128;

// ---------------------------------------------------------------------------------
// 1. The window workloads on each backend
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    MemoryBytes,
    Rocks,
    RocksNoCache,
}

impl Backend {
    const ALL: [Backend; 4] = [
        Backend::Memory,
        Backend::MemoryBytes,
        Backend::Rocks,
        Backend::RocksNoCache,
    ];

    fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory (baseline)",
            Backend::MemoryBytes => "memory, as bytes",
            Backend::Rocks => "rocksdb, write cache 8 MiB",
            Backend::RocksNoCache => "rocksdb, no write cache",
        }
    }

    /// The factory of this backend; RocksDB instances live under `dir`.
    fn factory(self, dir: &Path) -> StateBackendFactory {
        match self {
            Backend::Memory => StateBackendFactory::memory(),
            Backend::MemoryBytes => StateBackendFactory::new("memory-bytes", |_| {
                Ok(Box::new(MemoryStateBackend::serialized()))
            }),
            Backend::Rocks => StateBackendFactory::rocksdb(dir, RocksDbOptions::default()),
            Backend::RocksNoCache => {
                StateBackendFactory::rocksdb(dir, RocksDbOptions::default().write_cache_bytes(0))
            }
        }
    }
}

/// Events per run of part 1 in bench mode, before `BROOK_BENCH_SCALE`: the same for
/// every backend of a workload, sized for RocksDB (the memory runs are short).
fn backend_events(w: Workload) -> u64 {
    match w {
        Workload::W4 => 1_000_000,
        _ => 500_000,
    }
}

fn job_config(backend: StateBackendFactory) -> JobConfig {
    JobConfig {
        state_backend: backend,
        ..JobConfig::with_parallelism(1)
    }
}

/// Events per second of wall-clock time (median round) and per CPU-second (all
/// rounds; CPU time has a 10 ms resolution).
fn rates(runs: &[Run], n: u64, bench: bool) -> (f64, Option<f64>) {
    let wall = n as f64 / median(runs.iter().map(|r| r.secs).collect());
    let cpu = if bench {
        let c: Option<f64> = runs.iter().map(|r| r.cpu_secs).sum();
        c.map(|c| (n * runs.len() as u64) as f64 / c.max(0.01))
    } else {
        // Meaningless on a smoke run's few milliseconds.
        None
    };
    (wall, cpu)
}

fn fmt_opt_rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), fmt_rate)
}

fn fmt_ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

fn backends(s: &Settings, dir: &Path) {
    if !s.only.is_empty() && !["backends", "W1", "W4"].contains(&s.only.as_str()) {
        return;
    }
    println!(
        "\nbackends: source -> key_by -> window -> (COUNT, SUM) -> check, p=1; each backend \
         beside memory, median of {}",
        s.rounds
    );
    println!(
        "{:<3} {:<27} {:>9} {:>10} {:>7} {:>11} {:>7}",
        "wl", "state", "events", "ev/s", "ratio", "ev/CPU-s", "ratio"
    );
    for w in [Workload::W1, Workload::W4] {
        if !s.only.is_empty() && s.only != "backends" && s.only != w.name() {
            continue;
        }
        let n = if s.bench {
            s.events(backend_events(w))
        } else {
            5_000
        };
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); Backend::ALL.len()];
        for round in 0..s.rounds {
            // Rotate which backend goes first.
            let mut memory_tally = None;
            for k in 0..Backend::ALL.len() {
                let i = (k + round) % Backend::ALL.len();
                let b = Backend::ALL[i];
                let run = run_job(w, n, job_config(b.factory(&dir.join("rocksdb"))));
                run.tally.verify(w, n, b.name());
                if b == Backend::Memory {
                    memory_tally = Some(run.tally);
                }
                eprintln!(
                    "{} {} round {round}: {:.3} s (cpu {:?})",
                    w.name(),
                    b.name(),
                    run.secs,
                    run.cpu_secs
                );
                runs[i].push(run);
            }
            let memory_tally = memory_tally.unwrap();
            for (b, r) in Backend::ALL.iter().zip(&runs) {
                assert_eq!(
                    r.last().unwrap().tally,
                    memory_tally,
                    "{} on {}: other rows than in memory",
                    w.name(),
                    b.name()
                );
            }
        }
        let (base, base_cpu) = rates(&runs[0], n, s.bench);
        for (b, r) in Backend::ALL.iter().zip(&runs) {
            let (wall, cpu) = rates(r, n, s.bench);
            println!(
                "{:<3} {:<27} {:>9} {:>10} {:>7.2} {:>11} {:>7}",
                w.name(),
                b.name(),
                n,
                fmt_rate(wall),
                wall / base,
                fmt_opt_rate(cpu),
                fmt_ratio(cpu, base_cpu)
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// 2. Checkpoint and restore of N keys
// ---------------------------------------------------------------------------------

/// The one state of part 2.
const STATE: &str = "value";

/// Fills `b` with keys `0..n`: key group from the key's hash, `compose_key(kg,
/// key's 8 bytes LE, no namespace)`, value `key LE | version 0 LE` (16 bytes).
/// Returns the number of keys per key group.
fn fill(b: &mut dyn KeyedStateBackend, n: u64) -> Vec<u64> {
    let mut per_group = vec![0u64; KEY_GROUPS as usize];
    let mut key = Vec::with_capacity(32);
    for k in 0..n {
        let kg = key_group_for_key(&k, KEY_GROUPS);
        per_group[kg as usize] += 1;
        compose_key(&mut key, kg, &k.to_le_bytes(), b"");
        // New keys: RocksDB skips the existence check behind its exact `len`.
        b.insert_new(STATE, &key, value(k, 0));
    }
    per_group
}

fn value(k: u64, version: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&k.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v
}

/// Whether key `k` is one of the 1 % that [`update`] changes.
fn updated(k: u64) -> bool {
    k % 100 == 7
}

/// Gives every 100th key (spread over all key groups) version 1.
fn update(b: &mut dyn KeyedStateBackend, n: u64) -> u64 {
    let mut key = Vec::with_capacity(32);
    let mut count = 0;
    for k in (0..n).filter(|k| updated(*k)) {
        compose_key(
            &mut key,
            key_group_for_key(&k, KEY_GROUPS),
            &k.to_le_bytes(),
            b"",
        );
        b.put(STATE, &key, value(k, 1));
        count += 1;
    }
    count
}

/// Panics unless `b` holds exactly the keys of `0..n` in `range`, each with its
/// value (version 1 for the updated keys when `after_update`).
fn check(b: &dyn KeyedStateBackend, n: u64, range: KeyGroupRange, want: u64, who: &str) {
    let (mut seen, mut bad) = (0u64, 0u64);
    b.for_each_entry(&mut |state, key, v| {
        seen += 1;
        let ok = state == STATE && key.len() == 18 && v.len() == 16 && {
            let kg = KeyGroup::from(u16::from_be_bytes([key[0], key[1]]));
            let k = u64::from_le_bytes(key[6..14].try_into().unwrap());
            let vk = u64::from_le_bytes(v[..8].try_into().unwrap());
            let version = u64::from_le_bytes(v[8..].try_into().unwrap());
            k < n
                && range.contains(kg)
                && kg == key_group_for_key(&k, KEY_GROUPS)
                && vk == k
                && version == u64::from(updated(k))
        };
        bad += u64::from(!ok);
    });
    assert_eq!(bad, 0, "{who}: {bad} wrong entries");
    assert_eq!(seen, want, "{who}: wrong number of entries");
    assert_eq!(b.len() as u64, want, "{who}: len() is not the entry count");
}

fn file_size(p: &Path) -> u64 {
    fs::metadata(p).map_or(0, |m| m.len())
}

/// Bytes of every file under `p`.
fn tree_size(p: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(p) else {
        return file_size(p);
    };
    entries
        .flatten()
        .map(|e| {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                tree_size(&e.path())
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

/// The files a native snapshot references (relative to `root`), with their sizes.
fn native_files(snap: &StateSnapshot, root: &Path) -> BTreeMap<String, u64> {
    snap.native()
        .iter()
        .flat_map(|n| n.files.iter())
        .map(|(_, rel)| (rel.clone(), file_size(&root.join(rel))))
        .collect()
}

/// Writes the key-group blobs of `snap` to `path` (key group, length, bytes) and
/// fsyncs it, as a checkpoint's task file; returns the bytes written.
fn write_blobs(snap: &StateSnapshot, path: &Path) -> u64 {
    let f = fs::File::create(path).unwrap();
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut bytes = 0;
    for (kg, blob) in snap.keyed() {
        w.write_all(&kg.to_le_bytes()).unwrap();
        w.write_all(&(blob.len() as u64).to_le_bytes()).unwrap();
        w.write_all(blob).unwrap();
        bytes += 12 + blob.len() as u64;
    }
    let f = w.into_inner().unwrap();
    f.sync_all().unwrap();
    bytes
}

/// Reads what [`write_blobs`] wrote.
fn read_blobs(path: &Path) -> StateSnapshot {
    let mut data = Vec::new();
    fs::File::open(path)
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    let mut keyed = BTreeMap::new();
    let mut rest = data.as_slice();
    while !rest.is_empty() {
        let kg = KeyGroup::from_le_bytes(rest[..4].try_into().unwrap());
        let len = u64::from_le_bytes(rest[4..12].try_into().unwrap()) as usize;
        keyed.insert(kg, rest[12..12 + len].to_vec());
        rest = &rest[12 + len..];
    }
    StateSnapshot::from_parts(keyed, None)
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// One line of the checkpoint table.
struct Step {
    what: &'static str,
    rocks_secs: f64,
    rocks_bytes: String,
    mem_secs: f64,
    mem_bytes: String,
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn fmt_secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

/// Fills both backends with `n` keys and measures checkpoints and restores.
fn checkpoint_at(n: u64, dir: &Path) -> Vec<Step> {
    let base = dir.join(format!("checkpoint-{n}"));
    let root = base.join("checkpoints");
    fs::create_dir_all(&root).unwrap();
    let all = key_group_range(KEY_GROUPS, 1, 0);
    let half = key_group_range(KEY_GROUPS, 2, 0);
    let timers = TimerService::new();
    let storage = |id: u32| SnapshotStorage {
        root: root.clone(),
        private_dir: format!("chk-{id}/task-op1").into(),
        shared_dir: "shared".into(),
    };
    let mut steps = Vec::new();

    // RocksDB: fill, full checkpoint, update 1 %, incremental checkpoint.
    let mut rocks =
        RocksDbStateBackend::open(&base.join("work"), RocksDbOptions::default()).unwrap();
    let t = Instant::now();
    let per_group = fill(&mut rocks, n);
    let rocks_fill = secs(t);
    let in_half: u64 = per_group[half.start as usize..=half.end as usize]
        .iter()
        .sum();
    let t = Instant::now();
    let mut full = StateSnapshot::with_storage(storage(1));
    snapshot_keyed(&mut rocks, &timers, &mut full, all).unwrap();
    let rocks_full = secs(t);
    let full_files = native_files(&full, &root);
    let full_bytes: u64 = full_files.values().sum();
    let t = Instant::now();
    let changed = update(&mut rocks, n);
    let rocks_update = secs(t);
    let t = Instant::now();
    let mut inc = StateSnapshot::with_storage(storage(2));
    snapshot_keyed(&mut rocks, &timers, &mut inc, all).unwrap();
    let rocks_inc = secs(t);
    let inc_files = native_files(&inc, &root);
    let inc_total: u64 = inc_files.values().sum();
    let inc_new: u64 = inc_files
        .iter()
        .filter(|(f, _)| !full_files.contains_key(*f))
        .map(|(_, s)| s)
        .sum();
    assert_eq!(rocks.len() as u64, n);
    drop(rocks);
    assert_eq!(inc.native().len(), 1);
    assert_eq!(inc.native()[0].entries, n);

    // Memory: fill, blobs, update 1 %, blobs again.
    let mut mem = MemoryStateBackend::new();
    let t = Instant::now();
    assert_eq!(fill(&mut mem, n), per_group);
    let mem_fill = secs(t);
    let blobs = base.join("blobs-1");
    let t = Instant::now();
    let mut snap = StateSnapshot::new();
    snapshot_keyed(&mut mem, &timers, &mut snap, all).unwrap();
    let mem_full_bytes = write_blobs(&snap, &blobs);
    let mem_full = secs(t);
    drop(snap);
    let t = Instant::now();
    assert_eq!(update(&mut mem, n), changed);
    let mem_update = secs(t);
    let blobs = base.join("blobs-2");
    let t = Instant::now();
    let mut snap = StateSnapshot::new();
    snapshot_keyed(&mut mem, &timers, &mut snap, all).unwrap();
    let mem_inc_bytes = write_blobs(&snap, &blobs);
    let mem_inc = secs(t);
    drop((snap, mem));

    steps.push(Step {
        what: "fill (insert_new of every key)",
        rocks_secs: rocks_fill,
        rocks_bytes: "-".into(),
        mem_secs: mem_fill,
        mem_bytes: "-".into(),
    });
    steps.push(Step {
        what: "full checkpoint",
        rocks_secs: rocks_full,
        rocks_bytes: mb(full_bytes),
        mem_secs: mem_full,
        mem_bytes: mb(mem_full_bytes),
    });
    steps.push(Step {
        what: "update 1 % of the keys",
        rocks_secs: rocks_update,
        rocks_bytes: "-".into(),
        mem_secs: mem_update,
        mem_bytes: "-".into(),
    });
    steps.push(Step {
        what: "checkpoint after 1 % updated",
        rocks_secs: rocks_inc,
        rocks_bytes: format!("{} new of {}", mb(inc_new), mb(inc_total)),
        mem_secs: mem_inc,
        mem_bytes: mb(mem_inc_bytes),
    });

    // Restores of the second checkpoint, each checked entry by entry.
    let native_restore = |range: KeyGroupRange, want: u64, name: &str| -> f64 {
        let mut b = RocksDbStateBackend::open(
            &base.join(format!("restore-{name}")),
            RocksDbOptions::default(),
        )
        .unwrap();
        let restored = RestoredState::collect([&inc], range).with_root(&root);
        let t = Instant::now();
        restore_keyed(&restored, &mut b, &mut TimerService::new()).unwrap();
        let took = secs(t);
        check(&b, n, range, want, &format!("rocksdb restore {name}"));
        took
    };
    let blob_restore = |range: KeyGroupRange, want: u64, name: &str| -> f64 {
        let mut b = MemoryStateBackend::new();
        let t = Instant::now();
        let snap = read_blobs(&blobs);
        let restored = RestoredState::collect([&snap], range);
        restore_keyed(&restored, &mut b, &mut TimerService::new()).unwrap();
        let took = secs(t);
        drop((snap, restored));
        check(&b, n, range, want, &format!("memory restore {name}"));
        took
    };
    steps.push(Step {
        what: "restore, same key groups",
        rocks_secs: native_restore(all, n, "all"),
        rocks_bytes: "-".into(),
        mem_secs: blob_restore(all, n, "all"),
        mem_bytes: "-".into(),
    });
    steps.push(Step {
        what: "restore, 1 of 2 subtasks",
        rocks_secs: native_restore(half, in_half, "half"),
        rocks_bytes: "-".into(),
        mem_secs: blob_restore(half, in_half, "half"),
        mem_bytes: "-".into(),
    });
    fs::remove_dir_all(&base).unwrap();
    steps
}

fn checkpoints(s: &Settings, dir: &Path) {
    if !s.only.is_empty() && s.only != "checkpoint" {
        return;
    }
    println!(
        "\ncheckpoint: N keys (u64 key, 16-byte value, one state, {KEY_GROUPS} key groups); \
         RocksDB native checkpoints beside the memory backend's key-group blobs (written, \
         fsynced); one run"
    );
    println!(
        "{:>6} {:<30} {:>10} {:>22} {:>10} {:>10} {:>9}",
        "keys", "step", "rocksdb", "rocksdb bytes", "memory", "mem bytes", "rocks/mem"
    );
    let sizes: Vec<u64> = if s.bench {
        [1_000_000.0, 10_000_000.0]
            .iter()
            .map(|k| ((k * s.scale) as u64).max(1000))
            .collect()
    } else {
        vec![5_000]
    };
    for n in sizes {
        for step in checkpoint_at(n, dir) {
            println!(
                "{:>6} {:<30} {:>10} {:>22} {:>10} {:>10} {:>9.2}",
                fmt_count(n),
                step.what,
                fmt_secs(step.rocks_secs),
                step.rocks_bytes,
                fmt_secs(step.mem_secs),
                step.mem_bytes,
                step.rocks_secs / step.mem_secs.max(1e-9)
            );
        }
    }
}

fn fmt_count(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(100_000) {
        format!("{} M", n as f64 / 1e6)
    } else {
        n.to_string()
    }
}

// ---------------------------------------------------------------------------------
// 3. Throughput with a checkpoint every second
// ---------------------------------------------------------------------------------

/// A complete checkpoint seen in the checkpoint directory while the job ran.
#[derive(Debug, Clone)]
struct Seen {
    id: u64,
    /// From the trigger to `_metadata` written (its mtime), ms.
    ms: f64,
    /// Bytes the checkpoint added: its `chk-<id>` directory and the shared files no
    /// earlier checkpoint referenced.
    new_bytes: u64,
}

/// Watches `dir` for complete checkpoints (a `chk-<id>` with `_metadata`) until
/// `stop`; the coordinator keeps the last 3, so polling every 25 ms sees them all.
fn watch_checkpoints(dir: PathBuf, stop: Arc<AtomicBool>) -> Vec<Seen> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut ids = BTreeSet::new();
    let mut shared_seen: BTreeSet<String> = BTreeSet::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        let mut found: Vec<(u64, PathBuf)> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let id = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                Some((id, e.path()))
            })
            .filter(|(id, _)| !ids.contains(id))
            .collect();
        found.sort();
        for (id, path) in found {
            let meta = path.join("_metadata");
            let (Ok(text), Ok(m)) = (fs::read_to_string(&meta), fs::metadata(&meta)) else {
                continue; // not complete (yet)
            };
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            let started = json["timestamp_ms"].as_i64().unwrap() as f64;
            let written = m
                .modified()
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1e3;
            let mut new_bytes = tree_size(&path);
            for f in json["files"].as_array().unwrap() {
                for s in f["shared"].as_array().into_iter().flatten() {
                    let s = s.as_str().unwrap().to_string();
                    if !shared_seen.contains(&s) {
                        new_bytes += file_size(&dir.join(&s));
                        shared_seen.insert(s);
                    }
                }
            }
            ids.insert(id);
            seen.push(Seen {
                id,
                ms: written - started,
                new_bytes,
            });
        }
        if last {
            return seen;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// Events per run of part 3 in bench mode (before `BROOK_BENCH_SCALE`): several
/// seconds of W1 on RocksDB.
const INTERVAL_EVENTS: u64 = 800_000;

fn interval(s: &Settings, dir: &Path) {
    if !s.only.is_empty() && s.only != "interval" {
        return;
    }
    let w = Workload::W1;
    let n = if s.bench {
        s.events(INTERVAL_EVENTS)
    } else {
        20_000
    };
    // A smoke run is short: its source is done (which ends checkpointing) after a few
    // ms, so checkpoints seldom complete there; the bench's runs last seconds.
    let interval_ms = if s.bench { 1000 } else { 20 };
    println!(
        "\ninterval: {} on RocksDB (write cache 8 MiB), p=1, a checkpoint every {interval_ms} ms \
         beside none, median of {}",
        w.name(),
        s.rounds
    );
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    let mut seen_all: Vec<Vec<Seen>> = Vec::new();
    for round in 0..s.rounds {
        for k in 0..2 {
            let checkpointing = (k + round) % 2 == 1;
            let mut config = job_config(Backend::Rocks.factory(&dir.join("rocksdb")));
            if !checkpointing {
                let run = run_job(w, n, config);
                run.tally.verify(w, n, "rocksdb");
                eprintln!(
                    "interval round {round}: none {:.3} s (cpu {:?})",
                    run.secs, run.cpu_secs
                );
                plain.push(run);
                continue;
            }
            let ck = dir.join(format!("interval-{round}"));
            fs::create_dir_all(&ck).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (ck, stop) = (ck.clone(), Arc::clone(&stop));
                std::thread::spawn(move || watch_checkpoints(ck, stop))
            };
            config.checkpoint = Some(CheckpointConfig::new(&ck, interval_ms));
            let run = run_job(w, n, config);
            stop.store(true, Ordering::SeqCst);
            let seen = watcher.join().unwrap();
            run.tally.verify(w, n, "rocksdb with checkpoints");
            if let Some(newest) = seen.last() {
                // The newest checkpoint is complete and readable.
                assert_eq!(latest_complete(&ck).unwrap().id, newest.id);
            }
            if s.bench {
                assert!(
                    seen.len() >= 2,
                    "only {} checkpoints completed: too short a run to measure them",
                    seen.len()
                );
            }
            eprintln!(
                "interval round {round}: checkpoints {:.3} s (cpu {:?}), {} checkpoints {:?}",
                run.secs,
                run.cpu_secs,
                seen.len(),
                seen.iter()
                    .map(|c| (c.id, c.ms as u64, c.new_bytes))
                    .collect::<Vec<_>>()
            );
            fs::remove_dir_all(&ck).unwrap();
            with.push(run);
            seen_all.push(seen);
        }
    }
    let (base, base_cpu) = rates(&plain, n, s.bench);
    let (wall, cpu) = rates(&with, n, s.bench);
    let counts: Vec<usize> = seen_all.iter().map(Vec::len).collect();
    let all: Vec<&Seen> = seen_all.iter().flatten().collect();
    let med = |f: &dyn Fn(&Seen) -> f64| {
        if all.is_empty() {
            0.0
        } else {
            median(all.iter().map(|c| f(c)).collect())
        }
    };
    println!(
        "{:<24} {:>9} {:>10} {:>7} {:>11} {:>7} {:>12} {:>9} {:>10}",
        "", "events", "ev/s", "ratio", "ev/CPU-s", "ratio", "checkpoints", "median", "new bytes"
    );
    println!(
        "{:<24} {:>9} {:>10} {:>7.2} {:>11} {:>7} {:>12} {:>9} {:>10}",
        "no checkpoints (base)",
        n,
        fmt_rate(base),
        1.0,
        fmt_opt_rate(base_cpu),
        fmt_ratio(base_cpu, base_cpu),
        "-",
        "-",
        "-"
    );
    println!(
        "{:<24} {:>9} {:>10} {:>7.2} {:>11} {:>7} {:>12} {:>9} {:>10}",
        format!("checkpoint every {interval_ms} ms"),
        n,
        fmt_rate(wall),
        wall / base,
        fmt_opt_rate(cpu),
        fmt_ratio(cpu, base_cpu),
        format!("{counts:?}"),
        format!("{:.0} ms", med(&|c| c.ms)),
        mb(med(&|c| c.new_bytes as f64) as u64)
    );
}

// ---------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------

fn main() {
    // `BROOK_LOG=info` shows the engine's log (checkpoints, state backends) on stderr.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("BROOK_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let s = Settings::from_env(3);
    let parent = std::env::var_os("BROOK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("brook-bench-state-")
        .tempdir_in(&parent)
        .unwrap();
    println!(
        "state: keyed state on RocksDB and checkpoints, each beside a baseline of the same \
         run ({})",
        if s.bench { "bench" } else { "smoke check" }
    );
    let t = Instant::now();
    backends(&s, dir.path());
    checkpoints(&s, dir.path());
    interval(&s, dir.path());
    eprintln!("state: {:.1} s", secs(t));
}
