//! A partition's segment files and their offset and time indexes
//! (log/src/segment.rs), as `Log::open` finds them on disk after a crash or a clean
//! shutdown: a closed segment with its `.index` and `.timeindex`, then the active one.
//!
//! Input: a control byte, the active segment's base offset (u16, relative to the
//! closed one's base 0), then the closed segment's data, offset index and time index
//! (each a u16 length and its bytes) and the active segment's data (the rest).
//! Control bits: 1 = a clean-shutdown marker (the indexes are trusted when they fit),
//! 2 = CRCs as given (else fixed up, to reach the records), 4 = a compacted topic.
//!
//! What must hold: opening either fails with an error or gives a partition whose
//! records read without a panic; an append then lands at the end offset and reads
//! back; and after a clean close the log reopens with the same records.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use brook_log::{
    CleanupPolicy, FsyncPolicy, IsolationLevel, Log, LogOptions, ProducerRecord, ReadLimit,
    TopicConfig,
};
use libfuzzer_sys::fuzz_target;

const TOPIC: &str = "t";

/// `topic.json` of a one-partition topic, deleting and compacting, as brook writes it.
fn topic_meta(compacted: bool) -> &'static [u8] {
    static META: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    let (plain, compact) = META.get_or_init(|| {
        let make = |policy| {
            let dir = brook_fuzz::scratch_dir();
            let log = Log::open(dir.path(), options()).expect("a new log");
            let config = TopicConfig {
                cleanup_policy: policy,
                ..TopicConfig::default()
            };
            log.create_topic(TOPIC, 1, config).expect("a new topic");
            log.close().expect("closing a new log");
            std::fs::read(dir.path().join("topics").join(TOPIC).join("topic.json"))
                .expect("topic.json")
        };
        (make(CleanupPolicy::Delete), make(CleanupPolicy::Compact))
    });
    if compacted {
        compact
    } else {
        plain
    }
}

fn options() -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Never,
        maintenance_interval_ms: None,
        ..LogOptions::default()
    }
}

/// Every record from the log start, read committed and uncommitted; `None` when a
/// read fails (a damaged segment is reported on read, not only on open).
fn read_all(log: &Log) -> Option<Vec<(u64, Vec<u8>)>> {
    let p = log.topic(TOPIC).ok()?.partition(0).ok()?;
    let limit = ReadLimit {
        max_records: 1000,
        max_bytes: 64 << 10,
    };
    let mut seen = None;
    for isolation in [IsolationLevel::ReadUncommitted, IsolationLevel::ReadCommitted] {
        let mut out = Vec::new();
        let mut offset = p.log_start_offset();
        let end = p.end_offset(isolation);
        for _ in 0..10_000 {
            let mut got = Vec::new();
            let s = p
                .read_with_isolated(offset, limit, isolation, |r| {
                    got.push((r.offset, r.value.to_vec()));
                })
                .ok()?;
            out.extend(got);
            if s.next_offset <= offset || s.next_offset >= end {
                break;
            }
            offset = s.next_offset;
        }
        if isolation == IsolationLevel::ReadUncommitted {
            seen = Some(out);
        }
    }
    seen
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("writing a scratch file");
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let ctl = data[0];
    let active_base = u64::from(u16::from_le_bytes([data[1], data[2]]));
    let pieces = brook_fuzz::split(&data[3..], 4);
    let (mut closed, index, time_index, mut active) =
        (pieces[0].to_vec(), pieces[1], pieces[2], pieces[3].to_vec());
    if ctl & 2 == 0 {
        brook_fuzz::fix_batch_crcs(&mut closed);
        brook_fuzz::fix_batch_crcs(&mut active);
    }

    let dir = brook_fuzz::scratch_dir();
    let topic_dir = dir.path().join("topics").join(TOPIC);
    let part = topic_dir.join("0");
    std::fs::create_dir_all(&part).expect("scratch directories");
    write(&topic_dir.join("topic.json"), topic_meta(ctl & 4 != 0));
    let mut active_base = active_base;
    if !closed.is_empty() || !index.is_empty() || !time_index.is_empty() {
        write(&part.join(format!("{:020}.log", 0)), &closed);
        write(&part.join(format!("{:020}.index", 0)), index);
        write(&part.join(format!("{:020}.timeindex", 0)), time_index);
    } else {
        active_base = 0;
    }
    write(&part.join(format!("{active_base:020}.log")), &active);
    if ctl & 1 != 0 {
        write(&dir.path().join(".clean-shutdown"), b"");
    }

    let Ok(log) = Log::open(dir.path(), options()) else {
        return;
    };
    let Some(before) = read_all(&log) else {
        return;
    };
    if let Ok(p) = log.topic(TOPIC).and_then(|t| t.partition(0)) {
        let ts = i64::from(ctl).wrapping_mul(0x1_0000_0001);
        let _ = p.offset_for_timestamp(ts);
        let _ = p.offset_for_timestamp(i64::MIN);
        let _ = p.offset_for_timestamp(i64::MAX);
        let _ = p.info();
        let end = p.end_offset(IsolationLevel::ReadUncommitted);
        if let Ok(info) = p.append(&[ProducerRecord::keyed("k", "appended")]) {
            assert_eq!(info.base_offset, end, "an append lands at the end offset");
            let back = p.read(info.base_offset, ReadLimit::default());
            if let Ok(back) = back {
                assert_eq!(back.first().map(|r| &r.value[..]), Some(&b"appended"[..]));
            }
        }
    }
    let Some(with_append) = read_all(&log) else {
        return;
    };
    assert!(with_append.len() >= before.len());
    if log.close().is_err() {
        return;
    }
    drop(log);
    let reopened = Log::open(dir.path(), options()).expect("a cleanly closed log reopens");
    let again = read_all(&reopened).expect("a cleanly closed log reads");
    assert_eq!(again, with_append, "a clean close and reopen keeps every record");
});
