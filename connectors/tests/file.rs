#![allow(clippy::unwrap_used)]
//! The file source and sink through the engine: round trips (JSON lines, CSV, gzip,
//! parallel output), bad-record policies and follow mode.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use brook_connectors::{FileSink, FileSource};
use brook_core::bad_record::BadRecords;
use brook_core::operator::SubtaskInfo;
use brook_core::source::Source;
use brook_core::time::Stopwatch;
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{EngineError, JobConfig, StreamEnvironment};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    id: u64,
    name: String,
    score: f64,
    ok: bool,
    note: Option<String>,
}

fn rows(n: u64) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            id: i,
            // Quoting: commas, quotes and a newline; and a numeric-looking string.
            name: match i % 4 {
                0 => format!("user {i}"),
                1 => format!("a, \"b\"\nc{i}"),
                2 => format!("{}", 1000 + i),
                _ => format!("ünï {i}"),
            },
            score: i as f64 * 0.5,
            ok: i % 3 == 0,
            note: (i % 2 == 0).then(|| format!("n{i}")),
        })
        .collect()
}

fn write<T: Serialize + Clone + Send + Sync + 'static>(
    values: Vec<T>,
    sink: FileSink<T>,
    parallelism: u32,
) {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    env.source(VecSource::new(values)).sink(sink);
    env.execute("write").unwrap();
}

fn read<T: for<'de> Deserialize<'de> + Clone + Send + Sync + 'static>(
    source: FileSource<T>,
    parallelism: u32,
) -> Result<Vec<T>, EngineError> {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let out = CollectSink::new();
    env.source(source).sink(out.clone());
    env.execute("read")?;
    assert!(out.records().iter().all(|r| r.timestamp.is_none()));
    Ok(out.values())
}

/// The only subtask of a source at parallelism 1.
fn one_subtask() -> SubtaskInfo {
    SubtaskInfo {
        name: "source".into(),
        index: 0,
        parallelism: 1,
        max_parallelism: 128,
    }
}

fn sorted(mut v: Vec<Row>) -> Vec<Row> {
    v.sort_by_key(|r| r.id);
    v
}

#[test]
fn jsonl_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    write(rows(3000), FileSink::jsonl(&path), 1);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3000);
    // One file, one split: order is kept.
    assert_eq!(
        read(FileSource::jsonl::<Row>(&path), 1).unwrap(),
        rows(3000)
    );
}

#[test]
fn csv_round_trip_into_structs_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.csv");
    write(rows(2500), FileSink::csv(&path), 1);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("id,name,score,ok,note\n"), "{text:.80}");
    assert_eq!(read(FileSource::csv::<Row>(&path), 1).unwrap(), rows(2500));

    let values = read(FileSource::csv::<Value>(&path), 1).unwrap();
    assert_eq!(values.len(), 2500);
    assert_eq!(
        values[1],
        json!({"id": 1, "name": "a, \"b\"\nc1", "score": 0.5, "ok": false, "note": null})
    );
    // A numeric-looking string is inferred as a number in a Value.
    assert_eq!(
        values[2],
        json!({"id": 2, "name": 1002, "score": 1.0, "ok": false, "note": "n2"})
    );
}

#[test]
fn gzip_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("rows.jsonl.gz");
    let csv = dir.path().join("rows.csv.gz");
    write(rows(5000), FileSink::jsonl(&jsonl), 1);
    write(rows(5000), FileSink::csv(&csv), 1);
    for p in [&jsonl, &csv] {
        assert_eq!(
            fs::read(p).unwrap()[..2],
            [0x1f, 0x8b],
            "{} is gzip",
            p.display()
        );
    }
    assert_eq!(
        read(FileSource::jsonl::<Row>(&jsonl), 1).unwrap(),
        rows(5000)
    );
    assert_eq!(read(FileSource::csv::<Row>(&csv), 1).unwrap(), rows(5000));
}

/// An empty `.gz` file (an exactly-once sink's subtask that wrote nothing leaves one)
/// holds no records, beside a gzip file that does.
#[test]
fn an_empty_gzip_file_is_read_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a-empty.jsonl.gz"), b"").unwrap();
    write(rows(10), FileSink::jsonl(dir.path().join("b.jsonl.gz")), 1);
    assert_eq!(
        read(FileSource::jsonl::<Row>(dir.path()), 1).unwrap(),
        rows(10)
    );
}

#[test]
fn parallel_sink_writes_one_file_per_subtask_and_a_directory_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sink = FileSink::<Row>::jsonl(out.join("rows.jsonl.gz"));
    write(rows(4000), sink.clone(), 3);
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["rows-0.jsonl.gz", "rows-1.jsonl.gz", "rows-2.jsonl.gz"]
    );
    assert_eq!(sink.path_for(1, 3), out.join("rows-1.jsonl.gz"));
    let got = read(FileSource::jsonl::<Row>(&out), 2).unwrap();
    assert_eq!(sorted(got), rows(4000));
}

#[test]
fn csv_of_json_objects_takes_its_header_from_the_first_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.csv");
    let values = vec![
        json!({"b": 1, "a": "x", "c": null}),
        json!({"a": "y,z", "b": 2.5, "c": true}),
        json!({"a": "w", "b": 3, "c": {"nested": [1]}}),
    ];
    write(values, FileSink::csv(&path), 1);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        // The first record's field order (JSON objects keep their order).
        "b,a,c\n1,x,\n2.5,\"y,z\",true\n3,w,\"{\"\"nested\"\":[1]}\"\n"
    );
    let back = read(FileSource::csv::<Value>(&path), 1).unwrap();
    assert_eq!(back[1], json!({"a": "y,z", "b": 2.5, "c": true}));
}

#[test]
fn inputs_are_files_directories_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    fs::create_dir(&a).unwrap();
    fs::write(a.join("2.jsonl"), "2\n3\n").unwrap();
    fs::write(a.join("1.jsonl"), "0\n\n1\r\n   \n").unwrap();
    fs::create_dir(a.join("sub")).unwrap();
    fs::write(a.join("sub").join("x.jsonl"), "99\n").unwrap();
    let single = dir.path().join("single.jsonl");
    fs::write(&single, "\u{feff}4\n5").unwrap();

    let src = FileSource::jsonl::<i64>(vec![a.clone(), single.clone()]);
    assert_eq!(
        src.files().unwrap(),
        vec![a.join("1.jsonl"), a.join("2.jsonl"), single.clone()]
    );
    // One subtask reads its splits in order: directory files sorted, then the file.
    assert_eq!(read(src, 1).unwrap(), vec![0, 1, 2, 3, 4, 5]);

    let missing = dir.path().join("missing.jsonl");
    let err = read(FileSource::jsonl::<i64>(&missing), 1).unwrap_err();
    assert!(err.to_string().contains("missing.jsonl"), "{err}");
}

fn bad_jsonl(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bad.jsonl");
    fs::write(
        &path,
        "{\"id\": 1}\n{\"id\": 2}\n{\"id\": oops}\n\n{\"id\": \"x\"}\n{\"id\": 3}\n",
    )
    .unwrap();
    path
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Id {
    id: u64,
}

#[test]
fn bad_record_fail_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_jsonl(dir.path());
    let err = read(FileSource::jsonl::<Id>(&path), 1).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, EngineError::Task { .. }), "{msg}");
    assert!(msg.contains(&format!("{}:3", path.display())), "{msg}");
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn bad_record_skip_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_jsonl(dir.path());
    let src = FileSource::jsonl::<Id>(&path).on_bad_record(BadRecords::skip());
    let counter = src.bad_record_counter();
    let got = read(src, 1).unwrap();
    assert_eq!(got, vec![Id { id: 1 }, Id { id: 2 }, Id { id: 3 }]);
    assert_eq!(counter.skipped(), 2);
    assert_eq!(counter.dead_lettered(), 0);
}

#[test]
fn bad_record_dead_letter_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_jsonl(dir.path());
    let dlq = dir.path().join("dead.jsonl");
    // Two sources sharing one dead-letter file, each subtask appending.
    let csv = dir.path().join("bad.csv");
    fs::write(&csv, "id,name\n1,\"multi\nline\"\n2,b,extra\nzz,c\n").unwrap();
    let src =
        FileSource::jsonl::<Id>(&path).on_bad_record(BadRecords::dead_letter_file(&dlq).unwrap());
    let counter = src.bad_record_counter();
    assert_eq!(read(src, 1).unwrap().len(), 3);
    assert_eq!(counter.dead_lettered(), 2);
    assert_eq!(counter.skipped(), 0);

    let csv_src =
        FileSource::csv::<Id>(&csv).on_bad_record(BadRecords::dead_letter_file(&dlq).unwrap());
    let csv_counter = csv_src.bad_record_counter();
    assert_eq!(read(csv_src, 1).unwrap(), vec![Id { id: 1 }]);
    assert_eq!(csv_counter.dead_lettered(), 2);

    let lines: Vec<Value> = fs::read_to_string(&dlq)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let p = path.display();
    assert_eq!(lines[0]["raw"], "{\"id\": oops}");
    assert_eq!(lines[0]["position"], format!("{p}:3"));
    assert!(lines[0]["reason"]
        .as_str()
        .unwrap()
        .contains("invalid JSON"));
    assert_eq!(lines[1]["raw"], "{\"id\": \"x\"}");
    assert_eq!(lines[1]["position"], format!("{p}:5"));
    // CSV rows: positions count physical lines (the quoted field spans two).
    let c = csv.display();
    assert_eq!(lines[2]["raw"], "2,b,extra");
    assert_eq!(lines[2]["position"], format!("{c}:4"));
    assert!(
        lines[2]["reason"].as_str().unwrap().contains("3 fields"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3]["raw"], "zz,c");
    assert_eq!(lines[3]["position"], format!("{c}:5"));
    assert!(
        lines[3]["reason"].as_str().unwrap().contains("\"id\""),
        "{}",
        lines[3]
    );
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let watch = Stopwatch::start();
    while !cond() {
        assert!(
            watch.elapsed_nanos() < 10_000_000_000,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn follow_mode_picks_up_appended_lines_and_never_a_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("growing.jsonl");
    fs::write(&path, "{\"id\": 1}\n{\"id\": 2}\n").unwrap();

    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let out = CollectSink::new();
    // Fail on bad records: a partial line read as a record would fail the job.
    env.source(FileSource::jsonl::<Id>(&path).follow(true))
        .sink(out.clone());
    let job = env.start("follow").unwrap();
    wait_for("the first lines", || out.values().len() == 2);

    let appender = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(b"{\"id\": 3}\n{\"id\"").unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(150));
            f.write_all(b": 4}\n{\"id\": 5}\n").unwrap();
        })
    };
    wait_for("the line appended whole", || out.values().len() >= 3);
    // The partial line is held back, not emitted nor failed.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!job.is_finished());
    appender.join().unwrap();
    wait_for("the completed lines", || out.values().len() == 5);
    assert_eq!(
        out.values(),
        (1..=5).map(|id| Id { id }).collect::<Vec<_>>()
    );
    assert!(!job.is_finished());
    job.cancel();
    assert!(matches!(job.join(), Err(EngineError::Cancelled)));
}

#[test]
fn gzip_files_cannot_be_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.jsonl.gz");
    write(vec![1i64], FileSink::jsonl(&path), 1);
    let err = read(FileSource::jsonl::<i64>(&path).follow(true), 1).unwrap_err();
    assert!(err.to_string().contains("follow"), "{err}");
}

#[test]
fn a_checkpointed_position_it_did_not_write_fails_the_restore_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    fs::write(&a, "1\n").unwrap();
    fs::write(&b, "2\n").unwrap();
    let src = FileSource::jsonl::<i64>(vec![&a, &b]);
    let splits = src.enumerate_splits(1).unwrap();
    let info = one_subtask();
    // a's position has a version this source never wrote; b has none (starts as new).
    let positions = HashMap::from([(a.display().to_string(), vec![9; 18])]);
    let err = match src.restore_reader(&info, splits, &positions) {
        Ok(_) => panic!("a position this source did not write was restored"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err,
        format!(
            "invalid restore: the checkpointed position of {} is not one this source wrote",
            a.display()
        )
    );
}

/// Found by the `file_records` fuzz target (fuzz/crashes/): a checkpointed CSV position
/// that falls inside the header (a file changed since the checkpoint) made the reader's
/// next snapshot subtract past zero (a panic in debug builds, a wrapped offset in
/// release). The restore must fail or read on, and every snapshot stay a valid position.
#[test]
fn a_csv_position_inside_the_header_never_breaks_the_snapshot() {
    use brook_core::operator::Output;
    use brook_core::source::InputStatus;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    // A header row ended by a lone `\r` with the next row on the same line, then rows.
    let mut content = b"\n3\x1c\x9e\x01\x00{\"order\": 0,\" method\": \"cash\", \"ts\": 1767\r\x00\x00\x00\x00\x00\x00\x0026?8980000}\n".to_vec();
    content.extend_from_slice(b"{\"order\": 1, \"method\": \"card\", \"ts\": 1767269400001}\n");
    fs::write(&path, &content).unwrap();
    // Version 1, offset 7 (inside the header), line 0x2c307b622c610200, csv_header set:
    // the position the fuzzer made.
    let position = [
        0x01, 0x07, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0x61, 0x2c, 0x62, 0x7b, 0x30, 0x2c, 0x32,
    ];
    let src = FileSource::csv::<Value>(&path).on_bad_record(BadRecords::fail());
    let splits = src.enumerate_splits(1).unwrap();
    let info = one_subtask();
    let positions = HashMap::from([(path.display().to_string(), position.to_vec())]);
    let Ok(mut reader) = src.restore_reader(&info, splits, &positions) else {
        return;
    };
    let mut out = Output::new();
    for _ in 0..100 {
        match reader.poll_next(&mut out) {
            Ok(InputStatus::End) | Err(_) => {
                let _ = reader.snapshot_positions();
                return;
            }
            Ok(_) => {
                out.drain();
                let _ = reader.snapshot_positions();
            }
        }
    }
    panic!("a bounded file source did not end");
}

/// A decoder that holds lines and emits each flush's lines as one record, so the test
/// can see which lines the reader flushed together.
#[derive(Default)]
struct Held {
    lines: Vec<String>,
}

impl brook_connectors::FileDecoder for Held {
    type Out = Vec<String>;

    fn json(
        &mut self,
        line: &[u8],
        at: brook_connectors::RecordAt<'_>,
        _bad: &BadRecords,
        _out: &mut brook_core::operator::Output<Vec<String>>,
    ) -> brook_core::operator::OpResult<usize> {
        let name = Path::new(at.file).file_name().unwrap().to_string_lossy();
        self.lines.push(format!(
            "{name}:{}:{}",
            at.line,
            String::from_utf8_lossy(line)
        ));
        Ok(1)
    }

    fn csv(
        &mut self,
        row: brook_connectors::CsvRow<'_>,
        at: brook_connectors::RecordAt<'_>,
        _bad: &BadRecords,
        _out: &mut brook_core::operator::Output<Vec<String>>,
    ) -> brook_core::operator::OpResult<usize> {
        let header: Vec<&str> = row.headers.iter().collect();
        self.lines.push(format!(
            "{}:{}:{}",
            header.join("+"),
            at.line,
            String::from_utf8_lossy(row.raw)
        ));
        Ok(1)
    }

    fn flush(
        &mut self,
        _bad: &BadRecords,
        out: &mut brook_core::operator::Output<Vec<String>>,
    ) -> brook_core::operator::OpResult {
        if !self.lines.is_empty() {
            out.collect(std::mem::take(&mut self.lines), None);
        }
        Ok(())
    }
}

/// A decoder that holds records is flushed before the reader turns to another file
/// (each record it emits comes from one split, marked as that split) and at the end of
/// every poll (a checkpoint after the poll has every line read emitted).
#[test]
fn a_holding_decoder_is_flushed_per_file_and_per_poll() {
    use brook_core::operator::Output;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    fs::write(&a, "1\n2\n").unwrap();
    fs::write(&b, "3\n").unwrap();
    let src = FileSource::jsonl_with(vec![&a, &b], Held::default).follow(true);
    let splits = src.enumerate_splits(1).unwrap();
    let info = one_subtask();
    let mut reader = src.create_reader(&info, splits).unwrap();
    let mut out = Output::new();
    reader.poll_next(&mut out).unwrap();
    // (A run may start after the last record: the reader went back to a, which had
    // nothing more.)
    let runs: Vec<(usize, u32)> = out.split_runs().filter(|(i, _)| *i < out.len()).collect();
    let got: Vec<Vec<String>> = out.drain().map(|r| r.value).collect();
    assert_eq!(
        got,
        vec![
            vec!["a.jsonl:1:1".to_string(), "a.jsonl:2:2".to_string()],
            vec!["b.jsonl:1:3".to_string()],
        ]
    );
    assert_eq!(
        runs,
        vec![(0, 0), (1, 1)],
        "each record marked with its file"
    );
    // Lines appended to a: read and emitted by the next poll, before any snapshot.
    fs::OpenOptions::new()
        .append(true)
        .open(&a)
        .unwrap()
        .write_all(b"4\n")
        .unwrap();
    reader.poll_next(&mut out).unwrap();
    let got: Vec<Vec<String>> = out.drain().map(|r| r.value).collect();
    assert_eq!(got, vec![vec!["a.jsonl:3:4".to_string()]]);
    let positions: HashMap<String, Vec<u8>> =
        reader.snapshot_positions().unwrap().into_iter().collect();
    // Version 1, then a's offset after its 3 lines (6 bytes).
    assert_eq!(
        positions[&a.display().to_string()][..9],
        [1, 6, 0, 0, 0, 0, 0, 0, 0]
    );
}

/// A holding decoder of CSV gets each data row with the file's header, its first line
/// and its raw text (a quoted field may span lines).
#[test]
fn a_holding_csv_decoder_gets_the_header_and_raw_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.csv");
    fs::write(&path, "id,name\n1,\"two\nlines\"\n3,x\n").unwrap();
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let out = CollectSink::new();
    env.source(FileSource::csv_with(&path, Held::default))
        .sink(out.clone());
    env.execute("read").unwrap();
    assert_eq!(
        out.values(),
        vec![vec![
            "id+name:2:1,\"two\nlines\"".to_string(),
            "id+name:4:3,x".to_string()
        ]]
    );
}
