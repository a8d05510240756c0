//! Full and read-only disks (issue 20): the log, the checkpoint writer and the RocksDB
//! state backend fail with an error naming the path, lose nothing acknowledged, and
//! go on once space returns. Each test mounts a small tmpfs (`testkit::tmpfs`), which
//! needs root: they are `#[ignore]`d, and `scripts/test.sh` runs them with `--ignored`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use brook::log::{Log, LogError, LogOptions, Partition, ProducerRecord, ReadLimit, TopicConfig};
use brook_testkit::binary::{brook_command, run_brook_ok};
use brook_testkit::process::{wait_for, KillOnDrop};
use brook_testkit::tmpfs::Tmpfs;

fn options() -> LogOptions {
    LogOptions {
        maintenance_interval_ms: None,
        ..LogOptions::default()
    }
}

/// Record `n`: key `k<n>`, a value of about 1 KiB that starts with `n`.
fn record(n: u64) -> ProducerRecord {
    let mut value = format!("{n:08}:").into_bytes();
    value.resize(1000, b'x');
    ProducerRecord::keyed(format!("k{n}"), value)
}

fn batch(first: u64) -> Vec<ProducerRecord> {
    (first..first + 8).map(record).collect()
}

/// The values of every record of `p`, from its start.
fn values(p: &Partition) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = p.log_start_offset();
    loop {
        let got = p.read(at, ReadLimit::default()).unwrap();
        let Some(last) = got.last() else {
            return out;
        };
        at = last.offset + 1;
        out.extend(got.into_iter().map(|r| r.value.to_vec()));
    }
}

fn expected(n: u64) -> Vec<Vec<u8>> {
    (0..n).map(|i| record(i).value.to_vec()).collect()
}

fn contains_path(message: &str, dir: &Path) -> bool {
    message.contains(dir.to_str().unwrap())
}

/// Appends batches of 8 records until one fails: (records acknowledged, the error).
fn fill(p: &Partition) -> (u64, LogError) {
    let mut n = 0;
    loop {
        match p.append(&batch(n)) {
            Ok(info) => {
                assert_eq!(info.base_offset, n, "offsets follow the acknowledged ones");
                n += 8;
            }
            Err(e) => return (n, e),
        }
        assert!(n < 100_000, "the disk never filled");
    }
}

#[test]
#[ignore = "mounts a tmpfs, which needs root: scripts/test.sh runs it"]
fn a_full_disk_fails_appends_naming_the_segment_and_keeps_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), 1024);
    let data = disk.path().join("data");
    let log = Log::open(&data, options()).unwrap();
    // Small segments: the disk fills across several rolls and their index files.
    let config = TopicConfig {
        segment_bytes: 64 << 10,
        ..TopicConfig::default()
    };
    log.create_topic("t", 1, config).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();

    let (acked, err) = fill(&p);
    assert!(acked > 0, "nothing fitted: {err}");
    let message = err.to_string();
    assert!(
        matches!(err, LogError::Io { .. })
            && contains_path(&message, &data)
            && message.contains("No space left on device"),
        "{message}"
    );
    // Still full: the same, and every acknowledged record reads back meanwhile.
    let again = p.append(&batch(acked)).unwrap_err().to_string();
    assert!(contains_path(&again, &data), "{again}");
    assert_eq!(values(&p), expected(acked));

    // Space returns: appends go on right after the acknowledged records.
    disk.resize(8 << 10);
    for first in (acked..acked + 64).step_by(8) {
        assert_eq!(p.append(&batch(first)).unwrap().base_offset, first);
    }
    assert_eq!(values(&p), expected(acked + 64));
    drop(p);
    log.close().unwrap();
    drop(log);
    let log = Log::open(&data, options()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(values(&p), expected(acked + 64), "after reopening");
}

#[test]
#[ignore = "mounts a tmpfs, which needs root: scripts/test.sh runs it"]
fn a_full_disk_at_close_and_reopen_keeps_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), 1024);
    let data = disk.path().join("data");
    let log = Log::open(&data, options()).unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    let (acked, _) = fill(&p);
    drop(p);
    // The close writes the active segment's index files and the clean-shutdown marker:
    // on a full disk it fails naming the file, or succeeds with what fits.
    if let Err(e) = log.close() {
        assert!(contains_path(&e.to_string(), &data), "{e}");
    }
    drop(log);
    // Still full: the log opens (a missing or short index is rebuilt from the data).
    let log = Log::open(&data, options()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(values(&p), expected(acked), "reopened on a full disk");
    drop(p);
    let _ = log.close();
    drop(log);
    disk.resize(8 << 10);
    let log = Log::open(&data, options()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(values(&p), expected(acked), "reopened with space");
    assert_eq!(p.append(&batch(acked)).unwrap().base_offset, acked);
}

#[test]
#[ignore = "mounts a tmpfs, which needs root: scripts/test.sh runs it"]
fn a_read_only_data_directory_is_refused_naming_it_and_opens_once_writable() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), 4096);
    let data = disk.path().join("data");
    let log = Log::open(&data, options()).unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    for first in (0..80).step_by(8) {
        p.append(&batch(first)).unwrap();
    }
    drop(p);
    log.close().unwrap();
    drop(log);

    disk.set_read_only(true);
    let err = Log::open(&data, options()).unwrap_err().to_string();
    assert!(
        contains_path(&err, &data) && err.contains("Read-only file system"),
        "{err}"
    );
    disk.set_read_only(false);
    let log = Log::open(&data, options()).unwrap();
    let p = log.topic("t").unwrap().partition(0).unwrap();
    assert_eq!(values(&p), expected(80));
    assert_eq!(p.append(&batch(80)).unwrap().base_offset, 80);
}

// ---- The checkpoint writer and the RocksDB state backend, through `brook run`. ----

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_brook"))
}

/// A windowed job over a rate-limited generator (3 s), with a file sink committed at
/// checkpoints.
const JOB: &str = r#"
name: disk
sources:
  - { name: g, connector: generator, count: 6000, keys: 5, step_ms: 1000, rate: 2000, watermark: { out_of_orderness: 0s } }
steps:
  - key_by: [key]
  - { name: w, window: { kind: tumbling, size: 10s }, aggregate: { n: count(), total: sum(value) } }
sinks:
  - { name: out, connector: file, path: out/rows.jsonl }
"#;

/// The committed rows of the job's file sink under `dir`, sorted.
fn committed_rows(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for e in std::fs::read_dir(dir.join("out")).unwrap().flatten() {
        if !e.file_name().to_string_lossy().starts_with('.') {
            let text = std::fs::read_to_string(e.path()).unwrap();
            rows.extend(text.lines().map(str::to_string));
        }
    }
    rows.sort();
    rows
}

/// The job's rows without failures.
fn reference_rows() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.yaml"), JOB).unwrap();
    run_brook_ok(&mut brook_command(
        &bin(),
        &dir.path().join("data"),
        &[
            "run",
            "--quiet",
            dir.path().join("job.yaml").to_str().unwrap(),
        ],
    ));
    committed_rows(dir.path())
}

/// Writes a file into `dir` until the disk is full.
fn fill_disk(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    path
}

fn checkpoints_completed(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("_metadata").is_file())
        .count()
}

#[test]
#[ignore = "mounts a tmpfs, which needs root: scripts/test.sh runs it"]
fn a_full_checkpoint_disk_fails_the_checkpoints_naming_the_path_and_they_resume() {
    let reference = reference_rows();
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), 1024);
    let checkpoints = disk.path().join("checkpoints");
    let filler = fill_disk(disk.path());
    std::fs::write(dir.path().join("job.yaml"), JOB).unwrap();
    let stderr = dir.path().join("stderr");
    let mut cmd = brook_command(
        &bin(),
        &dir.path().join("data"),
        &[
            "run",
            "--quiet",
            dir.path().join("job.yaml").to_str().unwrap(),
            "--checkpoint-interval",
            "100ms",
            "--checkpoint-dir",
            checkpoints.to_str().unwrap(),
        ],
    );
    cmd.stderr(std::fs::File::create(&stderr).unwrap());
    let mut job = KillOnDrop(cmd.spawn().unwrap());
    wait_for(
        "a failed checkpoint naming the path",
        Duration::from_secs(20),
        || {
            let text = std::fs::read_to_string(&stderr).unwrap_or_default();
            (text.contains("checkpoint aborted") && contains_path(&text, &checkpoints))
                .then_some(())
        },
    );
    assert_eq!(checkpoints_completed(&checkpoints), 0);
    assert!(job.0.try_wait().unwrap().is_none(), "the job stopped");
    // Space returns: checkpoints complete again and the job ends with every row.
    std::fs::remove_file(&filler).unwrap();
    let status = job.0.wait().unwrap();
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(status.success(), "{text}");
    assert!(checkpoints_completed(&checkpoints) > 0, "{text}");
    assert_eq!(committed_rows(dir.path()), reference);
}

#[test]
#[ignore = "mounts a tmpfs, which needs root: scripts/test.sh runs it"]
fn a_full_state_disk_names_the_state_path_and_a_restore_loses_nothing() {
    let reference = reference_rows();
    let dir = tempfile::tempdir().unwrap();
    // The data directory (RocksDB's state under state/<job>) on the small disk; the
    // checkpoints elsewhere.
    let disk = Tmpfs::mount(&dir.path().join("disk"), 4096);
    let data = disk.path().join("data");
    let checkpoints = dir.path().join("checkpoints");
    std::fs::write(dir.path().join("job.yaml"), JOB).unwrap();
    let run = |restore: bool, stderr: &Path| {
        let spec = dir.path().join("job.yaml");
        let mut args = vec![
            "run",
            "--quiet",
            spec.to_str().unwrap(),
            "--checkpoint-interval",
            "100ms",
            "--checkpoint-dir",
            checkpoints.to_str().unwrap(),
        ];
        if restore {
            args.extend(["--restore", "latest"]);
        }
        let mut cmd = brook_command(&bin(), &data, &args);
        cmd.stderr(std::fs::File::create(stderr).unwrap());
        KillOnDrop(cmd.spawn().unwrap())
    };
    let first = dir.path().join("first.stderr");
    let mut job = run(false, &first);
    wait_for("a first checkpoint", Duration::from_secs(20), || {
        (checkpoints_completed(&checkpoints) > 0).then_some(())
    });
    let filler = fill_disk(disk.path());
    let state = data.join("state");
    wait_for(
        "an error naming the state path",
        Duration::from_secs(20),
        || {
            let text = std::fs::read_to_string(&first).unwrap_or_default();
            contains_path(&text, &state).then_some(())
        },
    );
    std::fs::remove_file(&filler).unwrap();
    let status = job.0.wait().unwrap();
    eprintln!("{}", std::fs::read_to_string(&first).unwrap_or_default());
    if !status.success() {
        // The job failed: a restore from the latest checkpoint, with space, finishes it.
        let second = dir.path().join("second.stderr");
        let mut again = run(true, &second);
        let status = again.0.wait().unwrap();
        let text = std::fs::read_to_string(&second).unwrap_or_default();
        assert!(status.success(), "{text}");
    }
    assert_eq!(committed_rows(dir.path()), reference);
}
