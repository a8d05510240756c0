//! Reads across the read path's internal boundaries: chunked reads (a read fetches at
//! most about 1 MiB at a time), batches bigger than a chunk, reads sized by the record
//! limit, several segments, and the reuse of read buffers (a buffer must never be
//! reused while a record still refers to it).
//!
//! Every read is checked against a model of the documented limits: records from the
//! requested offset on, at most `max_records`, and whole batches up to `max_bytes`
//! (at least one batch). `read_with` (borrowed records) must read exactly what
//! `read_into` (owned records) reads.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::thread;

use brook_log::format::{record_len, BATCH_HEADER_LEN};
use brook_log::{
    FsyncPolicy, Log, LogError, LogOptions, Partition, ProducerRecord, ReadLimit, ReadSummary,
    Record, RecordRef, TopicConfig,
};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// (offset, value) pairs a read must return.
type Expected = Vec<(u64, Bytes)>;

struct Batch {
    base: u64,
    values: Vec<Bytes>,
    bytes: usize,
}

/// A value that tells which offset it belongs to, `len` bytes long.
fn value(offset: u64, len: usize) -> Bytes {
    let mut v = format!("{offset}:").into_bytes();
    v.extend((0..len.saturating_sub(v.len())).map(|i| (offset as usize * 7 + i) as u8));
    v.truncate(len.max(1));
    Bytes::from(v)
}

fn open(dir: &std::path::Path) -> Log {
    Log::open(
        dir,
        LogOptions {
            fsync: FsyncPolicy::Never,
            maintenance_interval_ms: None,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Appends batches of mixed shapes: many small records, a few large ones (batches of
/// up to 3 MiB, bigger than a read chunk), single records.
fn fill(p: &Partition, rng: &mut StdRng, batches: usize) -> Vec<Batch> {
    let mut model = Vec::new();
    let mut next = 0u64;
    for _ in 0..batches {
        let (n, len) = match rng.gen_range(0..10) {
            0 => (rng.gen_range(1..=3), rng.gen_range(300_000..1_000_000)),
            1..=2 => (1, rng.gen_range(1..5_000)),
            _ => (rng.gen_range(1..=1500), rng.gen_range(1..300)),
        };
        let values: Vec<Bytes> = (0..n).map(|i| value(next + i as u64, len)).collect();
        let records: Vec<ProducerRecord> = values
            .iter()
            .map(|v| ProducerRecord::new(v.clone()))
            .collect();
        let bytes = BATCH_HEADER_LEN + records.iter().map(record_len).sum::<usize>();
        let info = p.append(&records).unwrap();
        assert_eq!(info.base_offset, next);
        model.push(Batch {
            base: next,
            values,
            bytes,
        });
        next += n as u64;
    }
    model
}

/// What a read must return: (offset, value) pairs.
fn expected(model: &[Batch], offset: u64, limit: ReadLimit) -> Expected {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for b in model {
        if b.base + b.values.len() as u64 <= offset {
            continue;
        }
        if out.len() == limit.max_records || (!out.is_empty() && bytes + b.bytes > limit.max_bytes)
        {
            break;
        }
        for (i, v) in b.values.iter().enumerate() {
            let o = b.base + i as u64;
            if o >= offset && out.len() < limit.max_records {
                out.push((o, v.clone()));
            }
        }
        bytes += b.bytes;
    }
    out
}

fn check(got: &[Record], want: &[(u64, Bytes)], offset: u64, limit: ReadLimit) {
    assert_eq!(
        got.len(),
        want.len(),
        "read at {offset} with {limit:?}: {} records, expected {}",
        got.len(),
        want.len()
    );
    for (g, (o, v)) in got.iter().zip(want) {
        assert_eq!(g.offset, *o, "read at {offset} with {limit:?}");
        assert!(
            g.value == v,
            "read at {offset} with {limit:?}: value of {o} differs"
        );
    }
}

fn random_limit(rng: &mut StdRng) -> ReadLimit {
    ReadLimit {
        max_records: match rng.gen_range(0..4) {
            0 => rng.gen_range(1..10),
            1 => rng.gen_range(1..2_000),
            2 => rng.gen_range(1..20_000),
            _ => usize::MAX,
        },
        max_bytes: match rng.gen_range(0..4) {
            0 => rng.gen_range(1..4_096),
            1 => rng.gen_range(1..(2 << 20)),
            2 => rng.gen_range(1..(8 << 20)),
            _ => usize::MAX,
        },
    }
}

#[test]
fn random_reads_match_the_limits_across_chunks_and_segments() {
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let config = TopicConfig {
        segment_bytes: 6 << 20,
        ..Default::default()
    };
    let p = log
        .create_topic("reads", 1, config)
        .unwrap()
        .partition(0)
        .unwrap();
    let model = fill(&p, &mut rng, 120);
    let end = p.log_end_offset();
    assert!(
        p.info().segments > 1,
        "the data should span several segments"
    );

    // Sequential reads with several limits cover everything exactly once.
    for limit in [
        ReadLimit::default(),
        ReadLimit::records(10_000),
        ReadLimit {
            max_records: usize::MAX,
            max_bytes: 1,
        },
    ] {
        let mut offset = 0;
        let mut out = Vec::new();
        while offset < end {
            out.clear();
            let n = p.read_into(offset, limit, &mut out).unwrap();
            check(&out, &expected(&model, offset, limit), offset, limit);
            offset += n as u64;
        }
    }
    // Random reads, some of them kept alive while later reads run.
    let mut kept: Vec<(Vec<Record>, Expected)> = Vec::new();
    for _ in 0..150 {
        let offset = rng.gen_range(0..end);
        let limit = random_limit(&mut rng);
        let got = p.read(offset, limit).unwrap();
        let want = expected(&model, offset, limit);
        check(&got, &want, offset, limit);
        if rng.gen_bool(0.2) {
            kept.push((got, want));
        }
    }
    for (got, want) in &kept {
        check(got, want, got[0].offset, ReadLimit::default());
    }
    // Reopening (unclean: the index is rebuilt by a scan) reads the same.
    drop(p);
    std::mem::drop(log);
    let log = open(dir.path());
    let p = log.topic("reads").unwrap().partition(0).unwrap();
    for _ in 0..30 {
        let offset = rng.gen_range(0..end);
        let limit = random_limit(&mut rng);
        check(
            &p.read(offset, limit).unwrap(),
            &expected(&model, offset, limit),
            offset,
            limit,
        );
    }
}

#[test]
fn records_kept_by_readers_are_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let p = log
        .create_topic("keep", 1, TopicConfig::default())
        .unwrap()
        .partition(0)
        .unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let model = Arc::new(fill(&p, &mut rng, 60));
    let end = p.log_end_offset();
    // Several threads read chunk-sized pieces, keep some of the records and drop
    // others (freeing buffers for reuse), then check what they kept.
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let p = Arc::clone(&p);
            let model = Arc::clone(&model);
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut kept = Vec::new();
                for _ in 0..40 {
                    let offset = rng.gen_range(0..end);
                    let limit = ReadLimit {
                        max_records: rng.gen_range(1..5_000),
                        max_bytes: 4 << 20,
                    };
                    let got = p.read(offset, limit).unwrap();
                    let want = expected(&model, offset, limit);
                    check(&got, &want, offset, limit);
                    if rng.gen_bool(0.3) {
                        kept.push((offset, limit, got, want));
                    }
                }
                for (offset, limit, got, want) in &kept {
                    check(got, want, *offset, *limit);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// A record with or without key, timestamp and headers (some with no value, some with
/// an empty one), of `len` value bytes.
fn mixed_record(rng: &mut StdRng, offset: u64, len: usize) -> ProducerRecord {
    let mut r = ProducerRecord::new(value(offset, len));
    if rng.gen_bool(0.3) {
        r.key = Some(Bytes::from(format!("k{}", rng.gen_range(0..1000))));
    }
    if rng.gen_bool(0.5) {
        r.timestamp = Some(rng.gen_range(-5..1_000_000));
    }
    if rng.gen_bool(0.2) {
        for i in 0..rng.gen_range(1..4) {
            let v = match rng.gen_range(0..3) {
                0 => None,
                1 => Some(Bytes::new()),
                _ => Some(Bytes::from(vec![i as u8; rng.gen_range(1..20)])),
            };
            r = r.with_header(format!("h{i}\u{e9}"), v);
        }
    }
    r
}

/// `read_with`, made owned, with its summary.
fn read_owned(p: &Partition, offset: u64, limit: ReadLimit) -> (Vec<Record>, ReadSummary) {
    let mut got = Vec::new();
    let summary = p
        .read_with(offset, limit, |r: RecordRef<'_>| {
            assert_eq!(r.headers.len(), r.headers.iter().count());
            got.push(r.to_record());
        })
        .unwrap();
    (got, summary)
}

/// `read_with` and `read_into` agree on one read: the same records (offset,
/// timestamp, key, value, headers) and a consistent summary.
fn same_read(p: &Partition, offset: u64, limit: ReadLimit) -> ReadSummary {
    let mut want = Vec::new();
    let n = p.read_into(offset, limit, &mut want).unwrap();
    let (got, summary) = read_owned(p, offset, limit);
    assert_eq!(got, want, "read at {offset} with {limit:?}");
    assert_eq!(summary.records, n, "read at {offset} with {limit:?}");
    let next = want.last().map_or(offset, |r| r.offset + 1);
    assert_eq!(summary.next_offset, next, "read at {offset} with {limit:?}");
    summary
}

#[test]
fn read_with_yields_what_read_into_yields() {
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let config = TopicConfig {
        segment_bytes: 4 << 20,
        ..Default::default()
    };
    let p = log
        .create_topic("with", 1, config)
        .unwrap()
        .partition(0)
        .unwrap();
    let mut next = 0u64;
    for _ in 0..100 {
        let (n, len) = match rng.gen_range(0..10) {
            0 => (rng.gen_range(1..=3), rng.gen_range(300_000..1_000_000)),
            1..=2 => (1, rng.gen_range(0..5_000)),
            _ => (rng.gen_range(1..=1500), rng.gen_range(0..300)),
        };
        let records: Vec<ProducerRecord> = (0..n)
            .map(|i| mixed_record(&mut rng, next + i as u64, len))
            .collect();
        p.append(&records).unwrap();
        next += n as u64;
    }
    let end = p.log_end_offset();
    assert!(p.info().segments > 1);

    // Sequential reads by `next_offset` cover everything exactly once.
    for limit in [
        ReadLimit::default(),
        ReadLimit::records(7_000),
        ReadLimit {
            max_records: usize::MAX,
            max_bytes: 1,
        },
    ] {
        let mut offset = 0;
        while offset < end {
            let s = same_read(&p, offset, limit);
            assert!(s.records > 0);
            offset = s.next_offset;
        }
        assert_eq!(offset, end);
    }
    for _ in 0..200 {
        let offset = rng.gen_range(0..end);
        same_read(&p, offset, random_limit(&mut rng));
    }
    // At the end, with no records allowed, and out of range.
    assert_eq!(
        same_read(&p, end, ReadLimit::default()),
        ReadSummary {
            records: 0,
            next_offset: end
        }
    );
    let zero = ReadLimit {
        max_records: 0,
        max_bytes: 1 << 20,
    };
    assert_eq!(same_read(&p, 3, zero).records, 0);
    let mut calls = 0;
    let err = p
        .read_with(end + 1, ReadLimit::default(), |_| calls += 1)
        .unwrap_err();
    assert!(
        matches!(err, LogError::OffsetOutOfRange { requested, log_end, .. } if requested == end + 1 && log_end == end),
        "{err:?}"
    );
    assert_eq!(calls, 0);
}

#[test]
fn read_with_reports_corruption_as_read_into_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let p = log
        .create_topic("bad", 1, TopicConfig::default())
        .unwrap()
        .partition(0)
        .unwrap();
    for b in 0..4u64 {
        let records: Vec<ProducerRecord> = (0..100)
            .map(|i| ProducerRecord::new(value(b * 100 + i, 50)))
            .collect();
        p.append(&records).unwrap();
    }
    p.roll().unwrap();
    // Flip a value byte in the third batch of the closed segment.
    let seg = std::fs::read_dir(p.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .min()
        .unwrap();
    let batch_len = BATCH_HEADER_LEN + 100 * record_len(&ProducerRecord::new(value(0, 50)));
    let at = 2 * batch_len + BATCH_HEADER_LEN + 40;
    let mut data = std::fs::read(&seg).unwrap();
    data[at] ^= 0x10;
    std::fs::write(&seg, &data).unwrap();

    let limit = ReadLimit::records(1_000);
    let mut out = Vec::new();
    let want = p.read_into(0, limit, &mut out).unwrap_err();
    let mut seen = Vec::new();
    let got = p.read_with(0, limit, |r| seen.push(r.offset)).unwrap_err();
    assert!(matches!(want, LogError::Corrupt { .. }), "{want:?}");
    assert_eq!(got.to_string(), want.to_string());
    // The batches before the damaged one were passed on, as read_into pushed them.
    assert_eq!(seen, out.iter().map(|r| r.offset).collect::<Vec<_>>());
    // Reads that stop before the damage, or start after it, are fine.
    same_read(&p, 0, ReadLimit::records(200));
    same_read(&p, 300, ReadLimit::default());
}

/// A reader taking fewer records per read than a batch holds continues from the batch
/// its last read stopped inside, without reading and checking it again (it read and
/// CRC-checked the whole batch once per slice: 20 times for 500 records at a time of a
/// 10 000-record batch). Shown by damaging the batch on disk after the first read: the
/// reads of the rest of it still get the records as they were.
#[test]
fn a_reader_continues_inside_a_big_batch_without_reading_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let p = log
        .create_topic("big", 1, TopicConfig::default())
        .unwrap()
        .partition(0)
        .unwrap();
    let records: Vec<ProducerRecord> = (0..10_000)
        .map(|i| ProducerRecord::new(value(i, 100)))
        .collect();
    p.append(&records).unwrap();
    let limit = ReadLimit::default();
    let mut out = Vec::new();
    assert_eq!(p.read_into(0, limit, &mut out).unwrap(), 500);
    // Flip a byte of the last record's value.
    let seg = std::fs::read_dir(p.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|path| path.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let mut data = std::fs::read(&seg).unwrap();
    let at = data.len() - 10;
    data[at] ^= 0x10;
    std::fs::write(&seg, &data).unwrap();
    let mut offset = 500;
    while offset < 10_000 {
        out.clear();
        let n = p.read_into(offset, limit, &mut out).unwrap();
        assert_eq!(n, 500);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.offset, offset + i as u64);
            assert_eq!(r.value, value(r.offset, 100));
        }
        offset += n as u64;
    }
    // Once the reader has passed the batch it is no longer kept: a read from its start
    // reads the file again and finds the damage.
    assert!(matches!(
        p.read_into(0, limit, &mut out),
        Err(LogError::Corrupt { .. })
    ));
}
