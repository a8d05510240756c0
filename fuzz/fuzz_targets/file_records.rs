//! The file source's record decoders (connectors/src/file/): JSON lines and CSV (an
//! incremental csv-core parser, rows into typed records or inferred JSON values),
//! plain or gzip, from the start or from a checkpointed position, as a job reads them.
//!
//! Input: a control byte, a checkpointed position (u16 length and bytes; empty = read
//! from the start), then the file's bytes. Control bits: 1 = CSV (else JSON lines),
//! 2 = skip bad records (else the first fails the read), 4 = typed records (else
//! `serde_json::Value`), 8 = gzip.
//!
//! What must hold: reading ends, or fails with an error, without a panic or a hang.
#![no_main]

use std::collections::HashMap;
use std::io::Write;

use brook_connectors::file::FileSplit;
use brook_connectors::FileSource;
use brook_core::bad_record::BadRecords;
use brook_core::operator::{Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// A typed record as a job declares one: strings, numbers, a flag, optional fields.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Sale {
    student: String,
    item: Option<String>,
    price_cents: i64,
    ratio: Option<f64>,
    paid: Option<bool>,
    count: Option<u32>,
}

fn read<T: DeserializeOwned + Send + 'static>(
    source: FileSource<T>,
    path: &std::path::Path,
    position: &[u8],
) {
    let info = SubtaskInfo {
        name: "fuzz".into(),
        index: 0,
        parallelism: 1,
        max_parallelism: 128,
    };
    let split = FileSplit {
        path: path.to_path_buf(),
    };
    let mut positions = HashMap::new();
    if !position.is_empty() {
        positions.insert(path.display().to_string(), position.to_vec());
    }
    let Ok(mut reader) = source.restore_reader(&info, vec![split], &positions) else {
        return;
    };
    let mut out = Output::new();
    // A bounded file ends: every poll reads lines or reaches the end, so a file of
    // a few KiB takes a handful of polls. Many more is a hang.
    for _ in 0..10_000 {
        match reader.poll_next(&mut out) {
            Ok(InputStatus::End) | Err(_) => {
                let _ = reader.snapshot_positions();
                return;
            }
            Ok(_) => {
                out.drain();
            }
        }
    }
    panic!("a bounded file source did not end");
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let pieces = brook_fuzz::split(rest, 2);
    let (position, content) = (pieces[0], pieces[1]);
    let dir = brook_fuzz::scratch_dir();
    let csv = ctl & 1 != 0;
    let gzip = ctl & 8 != 0;
    let name = match (csv, gzip) {
        (true, false) => "in.csv",
        (true, true) => "in.csv.gz",
        (false, false) => "in.jsonl",
        (false, true) => "in.jsonl.gz",
    };
    let path = dir.path().join(name);
    let bytes = if gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(content).expect("gzip into memory");
        enc.finish().expect("gzip into memory")
    } else {
        content.to_vec()
    };
    std::fs::write(&path, bytes).expect("a scratch file");
    let bad = || {
        if ctl & 2 != 0 {
            BadRecords::skip()
        } else {
            BadRecords::fail()
        }
    };
    match (csv, ctl & 4 != 0) {
        (false, false) => read(
            FileSource::jsonl::<serde_json::Value>(path.clone()).on_bad_record(bad()),
            &path,
            position,
        ),
        (false, true) => read(
            FileSource::jsonl::<Sale>(path.clone()).on_bad_record(bad()),
            &path,
            position,
        ),
        (true, false) => read(
            FileSource::csv::<serde_json::Value>(path.clone()).on_bad_record(bad()),
            &path,
            position,
        ),
        (true, true) => read(
            FileSource::csv::<Sale>(path.clone()).on_bad_record(bad()),
            &path,
            position,
        ),
    }
});
