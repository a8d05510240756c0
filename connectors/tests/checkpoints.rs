//! Checkpoints through the connectors (semantics.md §4): a job that fails part-way and
//! is restored from its latest complete checkpoint reads every input record exactly
//! once (log, files, generator), and the exactly-once `FileSink` ends with the output
//! of a run without failure.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_connectors::{FileSink, FileSource, GeneratorEvent, GeneratorSource, LogSink, LogSource};
use brook_core::operator::{OpResult, OperatorError};
use brook_core::operator::{Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{InputStatus, Source};
use brook_engine::testing::{CollectSink, CountPerKey, VecSource};
use brook_engine::{latest_complete, CheckpointConfig, JobConfig, StreamEnvironment};
use brook_log::{IsolationLevel, Log, LogOptions, ProducerRecord, ReadLimit, TopicConfig};

const KEYS: u64 = 10;

fn config(dir: &Path, parallelism: u32, restore: bool) -> JobConfig {
    JobConfig {
        checkpoint: Some(CheckpointConfig::new(dir, 20)),
        restore: restore.then(|| Arc::new(latest_complete(dir).unwrap())),
        ..JobConfig::with_parallelism(parallelism)
    }
}

/// Runs `source -> map(to a record number, slow, may fail) -> key_by -> count`.
/// Returns the counts per key (or the error) and how many records the map saw.
fn count_job<S>(
    source: S,
    number: fn(&S::Out) -> u64,
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: bool,
) -> (Result<BTreeMap<u64, u64>, String>, u64)
where
    S: Source,
    S::Out: Clone + Send + 'static,
{
    let env = StreamEnvironment::new(config(dir, parallelism, restore));
    let out = CollectSink::new();
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    env.source(source)
        .map(move |r: S::Out| {
            let i = number(&r);
            s.fetch_add(1, Ordering::SeqCst);
            // Slow enough for checkpoints to complete between the source's polls.
            std::thread::sleep(Duration::from_micros(20));
            assert!(fail_at != Some(i), "injected failure at record {i}");
            i
        })
        .key_by(|i: &u64| i % KEYS)
        .process(|| CountPerKey)
        .sink(out.clone());
    let r = env.execute("counts").map_err(|e| e.to_string());
    (
        r.map(|_| out.values().into_iter().collect()),
        seen.load(Ordering::SeqCst),
    )
}

fn expected(n: u64) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        *m.entry(i % KEYS).or_insert(0) += 1;
    }
    m
}

/// Fails at record `fail_at` at parallelism `before`, restores at `after`: every
/// record counted exactly once, and the restored run did not start over.
fn fail_then_restore<S>(
    make: impl Fn() -> S,
    number: fn(&S::Out) -> u64,
    n: u64,
    fail_at: u64,
    before: u32,
    after: u32,
) where
    S: Source,
    S::Out: Clone + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = count_job(make(), number, dir.path(), before, Some(fail_at), false);
    let err = first.unwrap_err();
    assert!(err.contains("injected failure"), "{err}");
    let (second, seen) = count_job(make(), number, dir.path(), after, None, true);
    assert_eq!(second.unwrap(), expected(n));
    assert!(seen < n, "the restored run read all {seen} records again");
}

const N: u64 = 20_000;

// ---------------------------------------------------------------- log

fn log_with_numbers(dir: &Path, partitions: u32, n: u64) -> Log {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    log.create_topic("numbers", partitions, TopicConfig::default())
        .unwrap();
    let topic = log.topic("numbers").unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let records = chunk
            .iter()
            .map(|i| ProducerRecord {
                key: Some(bytes::Bytes::from(i.to_string())),
                value: bytes::Bytes::from(i.to_string()),
                timestamp: Some(*i as i64),
                headers: Vec::new(),
                tombstone: false,
            })
            .collect();
        topic.append(records).unwrap();
    }
    log
}

#[test]
fn log_source_restored_reads_every_record_once() {
    let data = tempfile::tempdir().unwrap();
    let log = log_with_numbers(data.path(), 4, N);
    let make = || LogSource::json::<u64>(&log, "numbers").bounded(true);
    fail_then_restore(make, |i| *i, N, 15_000, 1, 1);
    fail_then_restore(make, |i| *i, N, 15_000, 2, 3);
}

#[test]
fn log_restore_below_the_log_start_fails_naming_the_offsets() {
    let data = tempfile::tempdir().unwrap();
    let log = Log::open(data.path(), LogOptions::default()).unwrap();
    let config = TopicConfig {
        segment_bytes: 1024,
        retention_ms: Some(1),
        ..TopicConfig::default()
    };
    log.create_topic("old", 1, config).unwrap();
    let topic = log.topic("old").unwrap();
    for i in 0..200i64 {
        topic
            .append(vec![ProducerRecord {
                key: None,
                value: bytes::Bytes::from(i.to_string()),
                timestamp: Some(i),
                headers: Vec::new(),
                tombstone: false,
            }])
            .unwrap();
    }
    let source = LogSource::json::<u64>(&log, "old").bounded(true);
    let info = info(0, 1);
    let splits = source.enumerate_splits(1).unwrap();
    // A position at offset 5: [version 1, u64 LE].
    let mut pos = vec![1u8];
    pos.extend_from_slice(&5u64.to_le_bytes());
    let positions: HashMap<String, Vec<u8>> = [("old/0".to_string(), pos)].into();
    // Still stored: resumes there.
    let mut reader = source
        .restored_reader(&info, splits.clone(), &positions)
        .unwrap();
    let got = drain(&mut reader);
    assert_eq!(got.first(), Some(&5));
    assert_eq!(got.len(), 195);
    // Retention deletes the oldest segments.
    let deleted = topic.partition(0).unwrap().apply_retention(10_000).unwrap();
    assert!(deleted > 0);
    let start = topic.partition(0).unwrap().log_start_offset();
    assert!(start > 5);
    let err = source
        .restored_reader(&info, splits, &positions)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("old/0") && err.contains("offset 5") && err.contains(&start.to_string()),
        "{err}"
    );
}

// ---------------------------------------------------------------- files

fn info(index: u32, parallelism: u32) -> SubtaskInfo {
    SubtaskInfo {
        name: "test".into(),
        index,
        parallelism,
        max_parallelism: 128,
    }
}

fn drain<T: Send + 'static>(reader: &mut dyn brook_core::source::SourceReader<Out = T>) -> Vec<T> {
    let mut out = Output::with_capacity(16);
    let mut got = Vec::new();
    for _ in 0..10_000 {
        let status = reader.poll_next(&mut out).unwrap();
        got.extend(out.take().into_iter().map(|r| r.value));
        if status != InputStatus::MoreAvailable {
            break;
        }
    }
    got
}

/// Writes `0..n` over `files` files (JSON lines or CSV with a quoted multi-line
/// field, some gzip): record `i` is in file `i % files`.
fn write_files(dir: &Path, n: u64, files: u64, csv: bool) -> PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    for f in 0..files {
        let gz = f % 3 == 2;
        let ext = if csv { "csv" } else { "jsonl" };
        let name = format!("part-{f:02}.{ext}{}", if gz { ".gz" } else { "" });
        let mut text = String::new();
        if csv {
            text.push_str("i,note\n");
        }
        for i in (f..n).step_by(files as usize) {
            if csv {
                text.push_str(&format!("{i},\"line one\nline two\"\n"));
            } else {
                text.push_str(&format!("{i}\n"));
                if i % 7 == 0 {
                    text.push('\n');
                }
            }
        }
        let path = input.join(name);
        if gz {
            let mut e = flate2::write::GzEncoder::new(
                std::fs::File::create(path).unwrap(),
                flate2::Compression::fast(),
            );
            e.write_all(text.as_bytes()).unwrap();
            e.finish().unwrap();
        } else {
            std::fs::write(path, text).unwrap();
        }
    }
    input
}

#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, PartialEq)]
struct Row {
    i: u64,
    note: String,
}

#[test]
fn file_source_restored_reads_every_line_once() {
    let data = tempfile::tempdir().unwrap();
    let input = write_files(data.path(), N, 6, false);
    let make = || FileSource::jsonl::<u64>(&input);
    // File `i % 6` holds record `i`, files are read in turn: 15004 is in the fifth.
    fail_then_restore(make, |i| *i, N, 15_004, 1, 1);
    fail_then_restore(make, |i| *i, N, 15_004, 2, 3);
}

#[test]
fn csv_file_source_restored_reads_every_row_once() {
    let data = tempfile::tempdir().unwrap();
    let input = write_files(data.path(), N, 6, true);
    let make = || FileSource::csv::<Row>(&input);
    fail_then_restore(make, |r| r.i, N, 15_004, 2, 1);
}

#[test]
fn file_positions_resume_mid_file_and_in_follow_mode() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("rows.csv");
    std::fs::write(&path, "i,note\n0,\"a\nb\"\n1,x\n2,\"c").unwrap();
    let source = FileSource::csv::<Row>(&path).follow(true);
    let splits = source.enumerate_splits(1).unwrap();
    let mut reader = source.create_reader(&info(0, 1), splits.clone()).unwrap();
    let got: Vec<u64> = drain(reader.as_mut()).into_iter().map(|r| r.i).collect();
    assert_eq!(got, vec![0, 1]);
    let positions: HashMap<String, Vec<u8>> =
        reader.snapshot_positions().unwrap().into_iter().collect();
    // The rest of the open row arrives; then a row more.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"\nd\"\n3,y\n").unwrap();
    let mut restored = source
        .restore_reader(&info(0, 1), splits, &positions)
        .unwrap();
    let got = drain(restored.as_mut());
    assert_eq!(
        got,
        vec![
            Row {
                i: 2,
                note: "c\nd".into()
            },
            Row {
                i: 3,
                note: "y".into()
            },
        ]
    );
    // Follow mode goes on after the restore.
    f.write_all(b"4,z\n").unwrap();
    let got = drain(restored.as_mut());
    assert_eq!(
        got,
        vec![Row {
            i: 4,
            note: "z".into()
        }]
    );
}

// ---------------------------------------------------------------- generator

#[test]
fn generator_restored_at_another_parallelism_emits_every_event_once() {
    let make = || {
        GeneratorSource::builder()
            .events(N)
            .keys(KEYS)
            .build()
            .unwrap()
    };
    let number = |e: &GeneratorEvent| e.ts as u64;
    fail_then_restore(make, number, N, 15_000, 1, 1);
    fail_then_restore(make, number, N, 15_000, 2, 3);
}

// ---------------------------------------------------------------- file sink

#[derive(Debug, Clone, serde::Serialize)]
struct OutRow {
    i: u64,
    key: u64,
}

/// `0..n` through a slow (maybe failing) map into an exactly-once `FileSink`.
fn sink_job(
    out: &Path,
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: bool,
) -> Result<(), String> {
    let env = StreamEnvironment::new(config(dir, parallelism, restore));
    let input: Vec<u64> = (0..3_000).collect();
    let stream = env
        .source(VecSource::new(input).splits(4).poll_size(25))
        .map(move |i: u64| {
            std::thread::sleep(Duration::from_micros(200));
            assert!(fail_at != Some(i), "injected failure at record {i}");
            OutRow { i, key: i % KEYS }
        });
    let is_csv = out.to_string_lossy().contains(".csv");
    if is_csv {
        stream.sink(FileSink::csv(out));
    } else {
        stream.sink(FileSink::jsonl(out));
    }
    env.execute("sink").map(|_| ()).map_err(|e| e.to_string())
}

fn read_text(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(bytes).unwrap()
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn sink_fail_then_restore(name: &str, parallelism: u32) {
    let clean = tempfile::tempdir().unwrap();
    let out = clean.path().join("out").join(name);
    sink_job(&out, &clean.path().join("chk"), parallelism, None, false).unwrap();

    let failing = tempfile::tempdir().unwrap();
    let out2 = failing.path().join("out").join(name);
    let chk = failing.path().join("chk");
    let err = sink_job(&out2, &chk, parallelism, Some(2_500), false).unwrap_err();
    assert!(err.contains("injected failure"), "{err}");
    assert!(latest_complete(&chk).unwrap().id >= 1);
    sink_job(&out2, &chk, parallelism, None, true).unwrap();

    let sink = FileSink::<OutRow>::jsonl(&out);
    let sink2 = FileSink::<OutRow>::jsonl(&out2);
    let mut lines = 0;
    for i in 0..parallelism {
        let want = read_text(&sink.path_for(i, parallelism));
        let got = read_text(&sink2.path_for(i, parallelism));
        assert_eq!(got, want, "{name} subtask {i}");
        lines += want.lines().count();
        if name.contains(".csv") {
            assert_eq!(want.lines().filter(|l| *l == "i,key").count(), 1);
        }
    }
    let header = usize::from(name.contains(".csv")) * parallelism as usize;
    assert_eq!(lines, 3_000 + header);
    // No pending part file is left.
    assert_eq!(
        files_in(out.parent().unwrap()),
        files_in(out2.parent().unwrap())
    );
}

#[test]
fn file_sink_output_after_fail_and_restore_equals_a_clean_run() {
    sink_fail_then_restore("out.jsonl", 1);
}

#[test]
fn file_sink_csv_gzip_in_parallel_after_fail_and_restore_equals_a_clean_run() {
    sink_fail_then_restore("out.csv.gz", 2);
}

fn batch(values: std::ops::Range<u64>) -> Vec<brook_core::element::StreamRecord<u64>> {
    values.map(brook_core::element::StreamRecord::new).collect()
}

#[test]
fn a_crash_between_prepare_and_commit_is_recovered_by_restore() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("n.jsonl");
    let sink = FileSink::<u64>::jsonl(&out);
    let info = info(0, 1);
    let mut w = sink.create_committing_writer(&info).unwrap();
    w.write_batch(batch(0..3)).unwrap();
    let c1 = w.prepare_commit(1).unwrap().unwrap();
    w.commit(1, vec![c1.clone()]).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n2\n");
    w.write_batch(batch(3..5)).unwrap();
    // Nothing is visible before the commit.
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n2\n");
    let c2 = w.prepare_commit(2).unwrap().unwrap();
    // Written after checkpoint 2's barrier: an aborted attempt's part.
    w.write_batch(batch(5..7)).unwrap();
    w.flush().unwrap();
    let c3 = w.prepare_commit(3).unwrap().unwrap();
    w.write_batch(batch(7..8)).unwrap();
    w.flush().unwrap();
    // Crash: checkpoint 2 completed (c2 stored) but was not committed, 3 never
    // completed.
    drop(w);
    let parts = files_in(dir.path());
    assert!(parts.len() >= 3, "{parts:?}");
    assert!(
        parts.iter().any(|p| p.starts_with(".n.jsonl.0.part-")),
        "{parts:?}"
    );
    // Restored from checkpoint 2: its committables (c1 again, c2) are committed once.
    let mut w = sink
        .restore_writer(&info, vec![c1.clone(), c2.clone()])
        .unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n2\n3\n4\n");
    assert_eq!(files_in(dir.path()), vec!["n.jsonl".to_string()]);
    // Committing again is harmless.
    w.commit(2, vec![c1.clone(), c2.clone()]).unwrap();
    w.write_batch(batch(5..6)).unwrap();
    w.finish().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n2\n3\n4\n5\n");
    drop(w);
    // Checkpoint 3's part was deleted by the restore: its committable cannot commit.
    assert!(sink.restore_writer(&info, vec![c3]).is_err());
}

#[test]
fn restore_cuts_output_committed_after_the_restored_checkpoint_and_a_half_commit() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("n.jsonl");
    let sink = FileSink::<u64>::jsonl(&out);
    let info = info(0, 1);
    let mut w = sink.create_committing_writer(&info).unwrap();
    w.write_batch(batch(0..2)).unwrap();
    let c1 = w.prepare_commit(1).unwrap().unwrap();
    w.write_batch(batch(2..4)).unwrap();
    let c2 = w.prepare_commit(2).unwrap().unwrap();
    // Checkpoint 1 committed; checkpoint 2's append crashed half-way.
    w.commit(1, vec![c1.clone()]).unwrap();
    drop(w);
    let mut f = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
    f.write_all(b"2\n").unwrap();
    let w = sink.restore_writer(&info, vec![c2.clone()]).unwrap();
    drop(w);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n2\n3\n");
    // Output beyond the restored checkpoint 1 (committed by 2) is cut off.
    let w = sink.restore_writer(&info, vec![c1]).unwrap();
    drop(w);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0\n1\n");
}

/// Issue 15: the output files and their committed lengths move with the subtasks. On
/// 1 → 2 → 1 → 2 (each a crash and a restore) every committed row stays: a file whose
/// writer no longer exists is carried at its committed length by a surviving subtask
/// and handed back to its writer when the parallelism has it again.
#[test]
fn file_sink_files_follow_the_subtasks_across_rescales() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FileSink::<u64>::jsonl(dir.path().join("n.jsonl"));
    let text = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let lines = |r: std::ops::Range<u64>| r.map(|i| format!("{i}\n")).collect::<String>();
    // Which committables each subtask of `p` is handed, from `(former subtask, its
    // committables)`.
    let hand = |restored: &[(u32, Vec<Vec<u8>>)], p: u32| -> Vec<Vec<Vec<u8>>> {
        (0..p)
            .map(|i| sink.restored_committables(restored, i, p))
            .collect()
    };

    // Parallelism 1: `n.jsonl` gets 0..3; checkpoint 2 (3..5) completes but the crash
    // comes before its commit.
    let mut w = sink.create_committing_writer(&info(0, 1)).unwrap();
    w.write_batch(batch(0..3)).unwrap();
    let c1 = w.prepare_commit(1).unwrap().unwrap();
    w.commit(1, vec![c1]).unwrap();
    w.write_batch(batch(3..5)).unwrap();
    let c2 = w.prepare_commit(2).unwrap().unwrap();
    drop(w);

    // Parallelism 2 from checkpoint 2: subtask 0 commits `n.jsonl`'s pending part and
    // carries the file; each subtask writes its own.
    let h = hand(&[(0, vec![c2])], 2);
    assert!(h[1].is_empty());
    let mut w0 = sink.restore_writer(&info(0, 2), h[0].clone()).unwrap();
    let mut w1 = sink.restore_writer(&info(1, 2), h[1].clone()).unwrap();
    assert_eq!(text("n.jsonl"), lines(0..5));
    w0.write_batch(batch(5..7)).unwrap();
    w1.write_batch(batch(7..9)).unwrap();
    let d0 = w0.prepare_commit(3).unwrap().unwrap();
    let d1 = w1.prepare_commit(3).unwrap().unwrap();
    w0.commit(3, vec![d0.clone()]).unwrap();
    w1.commit(3, vec![d1.clone()]).unwrap();
    drop((w0, w1));

    // Parallelism 1 from checkpoint 3: `n.jsonl` is the writer's own again, and it
    // carries `n-0.jsonl` and `n-1.jsonl`, which are left as they are.
    let h = hand(&[(0, vec![d0]), (1, vec![d1])], 1);
    let mut w = sink.restore_writer(&info(0, 1), h[0].clone()).unwrap();
    assert_eq!(text("n.jsonl"), lines(0..5));
    assert_eq!(text("n-0.jsonl"), lines(5..7));
    assert_eq!(text("n-1.jsonl"), lines(7..9));
    w.write_batch(batch(9..10)).unwrap();
    let e = w.prepare_commit(4).unwrap().unwrap();
    w.commit(4, vec![e.clone()]).unwrap();
    // Checkpoint 5 completes, then 10..11 are committed by a checkpoint that is
    // not restored: cut off again.
    w.write_batch(batch(10..11)).unwrap();
    let f = w.prepare_commit(5).unwrap().unwrap();
    w.commit(5, vec![f]).unwrap();
    drop(w);
    assert_eq!(text("n.jsonl"), lines(0..5) + &lines(9..11));

    // Parallelism 2 from checkpoint 4: the files go back to their writers with their
    // committed lengths, `n.jsonl` is carried by subtask 0 (cut back to checkpoint 4).
    let h = hand(&[(0, vec![e])], 2);
    assert_eq!(h.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 1]);
    let mut w0 = sink.restore_writer(&info(0, 2), h[0].clone()).unwrap();
    let mut w1 = sink.restore_writer(&info(1, 2), h[1].clone()).unwrap();
    assert_eq!(text("n.jsonl"), lines(0..5) + &lines(9..10));
    w0.write_batch(batch(10..11)).unwrap();
    w1.write_batch(batch(11..12)).unwrap();
    w0.finish().unwrap();
    w1.finish().unwrap();
    assert_eq!(text("n-0.jsonl"), lines(5..7) + &lines(10..11));
    assert_eq!(text("n-1.jsonl"), lines(7..9) + &lines(11..12));
    assert_eq!(
        files_in(dir.path()),
        vec!["n-0.jsonl", "n-1.jsonl", "n.jsonl"],
        "no part file is left"
    );
}

// ---------------------------------------------------------------- log sink

/// A sink that fails right after its inner writer wrote the batch holding record
/// `fail_at`: so the failed attempt surely leaves records of an undecided
/// transaction behind (a failure in the map could fall right after a barrier).
struct FailAfterWrite<S> {
    inner: S,
    fail_at: Option<u64>,
}

struct FailAfterWriteWriter {
    inner: Box<dyn SinkWriter<In = OutRow>>,
    fail_at: Option<u64>,
}

impl SinkWriter for FailAfterWriteWriter {
    type In = OutRow;
    fn write_batch(&mut self, batch: brook_core::element::Batch<OutRow>) -> OpResult {
        let hit = batch.iter().any(|r| Some(r.value.i) == self.fail_at);
        self.inner.write_batch(batch)?;
        if hit {
            return Err(OperatorError::failed(format!(
                "injected failure at record {:?}",
                self.fail_at
            )));
        }
        Ok(())
    }
    fn flush(&mut self) -> OpResult {
        self.inner.flush()
    }
    fn finish(&mut self) -> OpResult {
        self.inner.finish()
    }
    fn prepare_commit(
        &mut self,
        c: brook_core::checkpoint::CheckpointId,
    ) -> OpResult<Option<Vec<u8>>> {
        self.inner.prepare_commit(c)
    }
    fn commit(&mut self, c: brook_core::checkpoint::CheckpointId, cs: Vec<Vec<u8>>) -> OpResult {
        self.inner.commit(c, cs)
    }
    fn close(&mut self) {
        self.inner.close()
    }
}

impl<S: Sink<In = OutRow>> Sink for FailAfterWrite<S> {
    type In = OutRow;
    fn create_writer(&self, info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = OutRow>>> {
        let inner = self.inner.create_writer(info)?;
        Ok(Box::new(FailAfterWriteWriter {
            inner,
            fail_at: self.fail_at,
        }))
    }
    fn create_committing_writer(
        &self,
        info: &SubtaskInfo,
    ) -> OpResult<Box<dyn SinkWriter<In = OutRow>>> {
        let inner = self.inner.create_committing_writer(info)?;
        Ok(Box::new(FailAfterWriteWriter {
            inner,
            fail_at: self.fail_at,
        }))
    }
    fn restore_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<Box<dyn SinkWriter<In = OutRow>>> {
        let inner = self.inner.restore_writer(info, committables)?;
        Ok(Box::new(FailAfterWriteWriter {
            inner,
            fail_at: self.fail_at,
        }))
    }
    fn restored_committables(
        &self,
        restored: &[(u32, Vec<Vec<u8>>)],
        index: u32,
        parallelism: u32,
    ) -> Vec<Vec<u8>> {
        self.inner
            .restored_committables(restored, index, parallelism)
    }
}

/// `0..3000` through a slow map into an exactly-once `LogSink` (which may fail after
/// writing record `fail_at`).
fn log_sink_job(
    log: &Log,
    dir: &Path,
    parallelism: u32,
    fail_at: Option<u64>,
    restore: bool,
) -> Result<(), String> {
    let env = StreamEnvironment::new(config(dir, parallelism, restore));
    let input: Vec<u64> = (0..3_000).collect();
    env.source(VecSource::new(input).splits(4).poll_size(25))
        .map(move |i: u64| {
            std::thread::sleep(Duration::from_micros(200));
            OutRow { i, key: i % KEYS }
        })
        .sink(FailAfterWrite {
            inner: LogSink::json(log, "out")
                .key_by(|r: &OutRow| r.key.to_string())
                .transactional_id_prefix("sink-job"),
            fail_at,
        });
    env.execute("sink-job")
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Per partition, the values a reader of `isolation` sees, in offset order.
fn topic_values(log: &Log, topic: &str, isolation: IsolationLevel) -> Vec<Vec<String>> {
    log.topic(topic)
        .unwrap()
        .partitions()
        .iter()
        .map(|p| {
            let mut recs = Vec::new();
            let mut at = p.log_start_offset();
            while at < p.end_offset(isolation) {
                at = p
                    .read_into_isolated(at, ReadLimit::default(), isolation, &mut recs)
                    .unwrap()
                    .next_offset;
            }
            recs.iter()
                .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
                .collect()
        })
        .collect()
}

fn out_log(dir: &Path) -> Log {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    log.create_topic("out", 3, TopicConfig::default()).unwrap();
    log
}

/// Fails at parallelism `before`, restores at `after`; the topic's committed content
/// equals a run without failure, and read-uncommitted readers see the aborted
/// attempt's records too.
fn log_sink_fail_then_restore(before: u32, after: u32) {
    let clean_dir = tempfile::tempdir().unwrap();
    let clean = out_log(&clean_dir.path().join("log"));
    log_sink_job(&clean, &clean_dir.path().join("chk"), before, None, false).unwrap();
    let want = topic_values(&clean, "out", IsolationLevel::ReadCommitted);
    assert_eq!(want.iter().map(Vec::len).sum::<usize>(), 3_000);

    let failing_dir = tempfile::tempdir().unwrap();
    let log = out_log(&failing_dir.path().join("log"));
    let chk = failing_dir.path().join("chk");
    let err = log_sink_job(&log, &chk, before, Some(2_500), false).unwrap_err();
    assert!(err.contains("injected failure"), "{err}");
    assert!(latest_complete(&chk).unwrap().id >= 1);
    // The failed attempt's last transaction is still open: it holds back readers.
    let partial = topic_values(&log, "out", IsolationLevel::ReadCommitted);
    assert!(partial.iter().map(Vec::len).sum::<usize>() < 2_500);
    log_sink_job(&log, &chk, after, None, true).unwrap();

    let got = topic_values(&log, "out", IsolationLevel::ReadCommitted);
    if before == 1 && after == 1 {
        // One writer: even the order within each partition is the same.
        assert_eq!(got, want);
    }
    let sorted = |v: &Vec<Vec<String>>| -> Vec<Vec<String>> {
        v.iter()
            .map(|p| {
                let mut p = p.clone();
                p.sort();
                p
            })
            .collect()
    };
    assert_eq!(sorted(&got), sorted(&want), "committed content differs");
    let all = topic_values(&log, "out", IsolationLevel::ReadUncommitted);
    let leftovers = all.iter().map(Vec::len).sum::<usize>() - 3_000;
    assert!(leftovers > 0, "no aborted records: the test proves nothing");
    // Nothing is left undecided.
    for p in log.topic("out").unwrap().partitions() {
        assert_eq!(p.last_stable_offset(), p.log_end_offset());
    }
}

#[test]
fn log_sink_output_after_fail_and_restore_equals_a_clean_run() {
    log_sink_fail_then_restore(1, 1);
}

#[test]
fn log_sink_in_parallel_restored_at_lower_parallelism_equals_a_clean_run() {
    log_sink_fail_then_restore(2, 1);
}

#[test]
fn log_sink_crash_between_prepare_and_commit_is_recovered_by_restore() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("n", 1, TopicConfig::default()).unwrap();
    let sink = LogSink::<u64>::json(&log, "n").transactional_id_prefix("job");
    let info = info(0, 1);
    let committed = || topic_values(&log, "n", IsolationLevel::ReadCommitted).concat();
    let uncommitted = || topic_values(&log, "n", IsolationLevel::ReadUncommitted).concat();
    let strs = |r: std::ops::Range<u64>| r.map(|i| i.to_string()).collect::<Vec<_>>();
    let mut w = sink.create_committing_writer(&info).unwrap();
    w.write_batch(batch(0..3)).unwrap();
    let c1 = w.prepare_commit(1).unwrap().unwrap();
    w.commit(1, vec![c1.clone()]).unwrap();
    assert_eq!(committed(), strs(0..3));
    w.write_batch(batch(3..5)).unwrap();
    w.flush().unwrap();
    // Nothing is visible before the commit.
    assert_eq!(committed(), strs(0..3));
    assert_eq!(uncommitted(), strs(0..5));
    let c2 = w.prepare_commit(2).unwrap().unwrap();
    // Written after checkpoint 2's barrier: an aborted attempt's transactions.
    w.write_batch(batch(5..7)).unwrap();
    let c3 = w.prepare_commit(3).unwrap().unwrap();
    w.write_batch(batch(7..8)).unwrap();
    // Nothing to commit when nothing was written.
    let mut idle = sink.create_writer(&info).unwrap();
    assert!(idle.prepare_commit(9).unwrap().is_none());
    // Crash: checkpoint 2 completed (c2 stored) but was not committed, 3 never
    // completed.
    drop(w);
    assert_eq!(committed(), strs(0..3));
    // Restored from checkpoint 2: its committables (c1 again, c2) are committed once.
    let mut w = sink
        .restore_writer(&info, vec![c1.clone(), c2.clone()])
        .unwrap();
    assert_eq!(committed(), strs(0..5));
    assert_eq!(uncommitted(), strs(0..8));
    // Committing again is harmless.
    w.commit(2, vec![c1.clone(), c2.clone()]).unwrap();
    w.write_batch(batch(5..6)).unwrap();
    w.finish().unwrap();
    assert_eq!(committed(), strs(0..6));
    drop(w);
    // Checkpoint 3's transaction was aborted by the restore: it cannot be committed.
    let err = match sink.restore_writer(&info, vec![c3]) {
        Ok(_) => panic!("an aborted transaction was committed"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("aborted"), "{err}");
    // Not a committable of this sink.
    assert!(sink.restore_writer(&info, vec![vec![9, 9]]).is_err());
}

/// A writer closed without finishing (a canceled job) aborts its open transaction, so
/// the topic's last stable offset does not stay behind it, and keeps the prepared one
/// for the restore that commits it.
#[test]
fn log_sink_closed_without_finishing_aborts_only_its_open_transaction() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open the log");
    log.create_topic("n", 1, TopicConfig::default())
        .expect("create the topic");
    let sink = LogSink::<u64>::json(&log, "n").transactional_id_prefix("job");
    let info = info(0, 1);
    let committed = || topic_values(&log, "n", IsolationLevel::ReadCommitted).concat();
    let strs = |r: std::ops::Range<u64>| r.map(|i| i.to_string()).collect::<Vec<_>>();
    let stable_is_end = || {
        let p = &log.describe_topic("n").expect("describe").partitions[0];
        p.last_stable_offset == p.log_end_offset
    };
    let mut w = sink.create_committing_writer(&info).expect("a writer");
    w.write_batch(batch(0..3)).expect("write");
    let c1 = w
        .prepare_commit(1)
        .expect("prepare")
        .expect("a committable");
    w.write_batch(batch(3..5)).expect("write");
    w.close();
    // Open transaction aborted: nothing holds the last stable offset back but the
    // prepared one.
    assert_eq!(committed(), Vec::<String>::new());
    assert!(!stable_is_end(), "the prepared transaction still holds it");
    // The restore commits the prepared transaction; the aborted records never show.
    let mut w = sink
        .restore_writer(&info, vec![c1])
        .expect("restore commits the prepared transaction");
    assert_eq!(committed(), strs(0..3));
    assert!(stable_is_end());
    w.write_batch(batch(5..6)).expect("write");
    w.close();
    assert!(stable_is_end(), "closing aborted the open transaction");
    assert_eq!(committed(), strs(0..3));
}

/// `transaction.timeout.ms`: a prepared transaction the log aborted after the sink's
/// timeout (the job was not restored in time) fails the restore that needs it, naming
/// the transactional id and the transaction, instead of losing its records silently;
/// within the timeout the restore commits it.
#[test]
fn log_sink_restore_of_a_timed_out_transaction_fails_naming_it() {
    use brook_core::time::ManualClock;
    let dir = tempfile::tempdir().expect("a temp dir");
    let clock = ManualClock::new(1_700_000_000_000);
    let options = LogOptions {
        clock: clock.shared(),
        maintenance_interval_ms: None,
        ..LogOptions::default()
    };
    let log = Log::open(dir.path(), options).expect("open the log");
    log.create_topic("n", 1, TopicConfig::default())
        .expect("create the topic");
    let sink = LogSink::<u64>::json(&log, "n")
        .transactional_id_prefix("job")
        .transaction_timeout_ms(5_000);
    let info = info(0, 1);
    let committed = || topic_values(&log, "n", IsolationLevel::ReadCommitted).concat();
    let prepared = |n: std::ops::Range<u64>| {
        let mut w = sink.create_committing_writer(&info).expect("a writer");
        w.write_batch(batch(n)).expect("write");
        w.prepare_commit(1)
            .expect("prepare")
            .expect("a committable")
    };
    // Within the timeout the restore commits.
    let c = prepared(0..2);
    clock.advance(5_000);
    log.run_maintenance().expect("maintenance");
    drop(
        sink.restore_writer(&info, vec![c])
            .expect("restore in time"),
    );
    assert_eq!(committed(), vec!["0".to_string(), "1".to_string()]);
    // Past it the log aborts the transaction and the restore fails, naming it.
    let c = prepared(2..4);
    clock.advance(5_001);
    log.run_maintenance().expect("maintenance");
    let err = match sink.restore_writer(&info, vec![c]) {
        Ok(_) => panic!("a timed-out transaction was committed"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("\"job.test.0\"")
            && err.contains("transaction 1")
            && err.contains("transaction.timeout.ms (5000 ms)"),
        "{err}"
    );
    assert_eq!(committed(), vec!["0".to_string(), "1".to_string()]);
}

/// Stop with a savepoint (savepoint, then cancel) commits the sink's output up to the
/// savepoint at once, as Flink's stop-with-savepoint; the resumed job writes the rest,
/// exactly once.
#[test]
fn stop_with_savepoint_commits_the_output_before_the_job_ends() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (out, chk, saves) = (
        dir.path().join("out.jsonl"),
        dir.path().join("chk"),
        dir.path().join("savepoints"),
    );
    let job = |restore: Option<brook_engine::RestoredCheckpoint>| {
        let env = StreamEnvironment::new(JobConfig {
            // No periodic checkpoint before the savepoint: only it can commit.
            checkpoint: Some(CheckpointConfig::new(&chk, 3_600_000)),
            restore: restore.map(Arc::new),
            ..JobConfig::with_parallelism(1)
        });
        env.source(VecSource::new((0..2_000u64).collect()).poll_size(10))
            .map(|i: u64| {
                std::thread::sleep(Duration::from_micros(500));
                OutRow { i, key: i % KEYS }
            })
            .sink(FileSink::jsonl(&out));
        env
    };
    let handle = job(None).start("stop").expect("start");
    std::thread::sleep(Duration::from_millis(300));
    let savepoint = handle.savepoint(&saves).expect("a savepoint");
    handle.cancel();
    let _ = handle.join();
    let before = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(
        before > 0,
        "the savepoint's output is committed when the job stops"
    );
    assert!(before < 2_000, "{before}: the job was stopped early");
    let sp = brook_engine::RestoredCheckpoint::load(&savepoint).expect("load the savepoint");
    job(Some(sp)).execute("stop").expect("resume");
    let rows: Vec<u64> = std::fs::read_to_string(&out)
        .expect("output")
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("JSON")["i"]
                .as_u64()
                .expect("i")
        })
        .collect();
    assert_eq!(
        rows,
        (0..2_000).collect::<Vec<_>>(),
        "exactly once, in order"
    );
}
