//! Model-based property test of a partition: random sequences of appends, reads, reads by
//! timestamp, rolls, clock advances, retention and close/reopen (clean and unclean) must
//! behave like a plain in-memory model (`docs/semantics.md` §1).
//!
//! The model keeps every record ever appended per partition, the log start offset, and the
//! segments and batches it expects from the documented rules (one append = one batch;
//! roll before a batch that would grow a non-empty segment past `segment_bytes` or whose
//! largest timestamp is more than `segment_ms` after the active segment's first batch's
//! (Kafka's `segment.ms` rule, which survives reopening); `roll` is a no-op on an empty segment;
//! retention deletes whole closed segments, oldest first, as Kafka: by size while the
//! partition without the oldest segment is still `>= retention_bytes`, by time while the
//! oldest segment's newest record is more than `retention_ms` old).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use brook_core::time::{Clock, ManualClock};
use brook_log::partitioner::partition_for_key;
use brook_log::{
    FsyncPolicy, Header, Log, LogError, LogOptions, Partition, ProducerRecord, ReadLimit, Record,
    Topic, TopicConfig,
};
use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const TOPIC: &str = "model";
const START_MS: i64 = 1_700_000_000_000;
/// Batch header bytes, as documented in `brook_log::format`.
const BATCH_HEADER: u64 = 38;
/// `max_record_bytes` of the topic; generated records are smaller (at most 182 bytes).
const MAX_RECORD: usize = 400;

// ---- generated input ---------------------------------------------------------------

#[derive(Debug, Clone)]
struct Rec {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// Offset from the clock's current time; `None` lets the log stamp the record.
    ts_delta: Option<i64>,
    /// An absolute timestamp instead (extremes and negative times), if set.
    ts_abs: Option<i64>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

#[derive(Debug, Clone, Copy)]
enum Reopen {
    /// `Log::close`, then drop.
    Close,
    /// Drop the last handle (which closes).
    Drop,
    /// Close, then delete the `.clean-shutdown` marker: the next open recovers.
    Unclean,
}

#[derive(Debug, Clone)]
enum Op {
    /// One batch to one partition.
    Append {
        partition: usize,
        records: Vec<Rec>,
    },
    /// Keyed records through `Topic::append` (one batch per partition).
    AppendKeyed {
        records: Vec<Rec>,
    },
    /// A batch with one record over `max_record_bytes` (value of `big` bytes) at `at`:
    /// refused, nothing written. `partition` 2 and 3 go through `Topic::append`.
    AppendTooLarge {
        partition: usize,
        records: Vec<Rec>,
        at: usize,
        big: usize,
    },
    Read {
        partition: usize,
        offset: u64,
        max_records: usize,
        max_bytes: usize,
    },
    ReadByTimestamp {
        partition: usize,
        pick: u8,
        raw: i64,
    },
    Roll {
        partition: usize,
    },
    Advance(i64),
    Retention,
    Reopen(Reopen),
}

#[derive(Debug, Clone)]
struct Setup {
    partitions: u32,
    segment_bytes: u64,
    index_interval_bytes: u64,
    segment_ms: Option<i64>,
    retention_ms: Option<i64>,
    retention_bytes: Option<u64>,
    fsync: FsyncPolicy,
}

fn arb_rec(keyed: bool) -> impl Strategy<Value = Rec> {
    let key = if keyed {
        prop::collection::vec(any::<u8>(), 0..12)
            .prop_map(Some)
            .boxed()
    } else {
        prop::option::weighted(0.6, prop::collection::vec(any::<u8>(), 0..12)).boxed()
    };
    (
        key,
        prop::collection::vec(any::<u8>(), 0..120),
        prop::option::weighted(0.7, -100_000i64..100_000),
        prop::option::weighted(
            0.04,
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(0i64),
                Just(-1i64),
                any::<i64>()
            ],
        ),
        prop::collection::vec(
            (
                "[a-z]{0,4}",
                prop::option::of(prop::collection::vec(any::<u8>(), 0..6)),
            ),
            0..2,
        ),
    )
        .prop_map(|(key, value, ts_delta, ts_abs, headers)| Rec {
            key,
            value,
            ts_delta,
            ts_abs,
            headers,
        })
}

/// Batches of 1..20 records, small ones more often (so reads span several batches).
fn arb_batch(keyed: bool) -> impl Strategy<Value = Vec<Rec>> {
    prop_oneof![
        prop::collection::vec(arb_rec(keyed), 1..4),
        prop::collection::vec(arb_rec(keyed), 1..20),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..2, arb_batch(false))
            .prop_map(|(partition, records)| Op::Append { partition, records }),
        2 => arb_batch(true).prop_map(|records| Op::AppendKeyed { records }),
        1 => (0usize..4, arb_batch(false), any::<usize>(), MAX_RECORD - 17..700).prop_map(
            |(partition, records, at, big)| Op::AppendTooLarge {
                partition,
                records,
                at,
                big,
            }
        ),
        7 => (0usize..2, any::<u64>(), 1usize..60, 0usize..4_000).prop_map(
            |(partition, offset, max_records, max_bytes)| Op::Read {
                partition,
                offset,
                max_records,
                max_bytes,
            }
        ),
        4 => (0usize..2, 0u8..5, any::<i64>())
            .prop_map(|(partition, pick, raw)| Op::ReadByTimestamp { partition, pick, raw }),
        2 => (0usize..2).prop_map(|partition| Op::Roll { partition }),
        3 => (0i64..60_000).prop_map(Op::Advance),
        3 => Just(Op::Retention),
        2 => prop_oneof![
            Just(Reopen::Close),
            Just(Reopen::Drop),
            Just(Reopen::Unclean)
        ]
        .prop_map(Op::Reopen),
    ]
}

fn arb_setup() -> impl Strategy<Value = Setup> {
    (
        1u32..=2,
        1024u64..4096,
        1u64..600,
        prop::option::weighted(0.5, 5_000i64..100_000),
        prop::option::weighted(0.7, 10_000i64..200_000),
        prop::option::weighted(0.6, 1024u64..10_000),
        prop_oneof![Just(FsyncPolicy::Never), Just(FsyncPolicy::Interval(5_000))],
    )
        .prop_map(
            |(
                partitions,
                segment_bytes,
                index_interval_bytes,
                segment_ms,
                retention_ms,
                retention_bytes,
                fsync,
            )| Setup {
                partitions,
                segment_bytes,
                index_interval_bytes,
                segment_ms,
                retention_ms,
                retention_bytes,
                fsync,
            },
        )
}

// ---- the model ---------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Stored {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    ts: i64,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

#[derive(Debug, Clone, Copy)]
struct SegM {
    base: u64,
    next: u64,
    size: u64,
    max_ts: i64,
    created_ms: i64,
    /// Largest timestamp of the first batch (Kafka's rolling-based timestamp).
    first_ts: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct BatchM {
    base: u64,
    next: u64,
    len: u64,
}

#[derive(Debug)]
struct PartM {
    /// Every record ever appended; index = offset.
    records: Vec<Stored>,
    start: u64,
    segments: Vec<SegM>,
    batches: Vec<BatchM>,
}

impl PartM {
    fn new(now: i64) -> Self {
        PartM {
            records: Vec::new(),
            start: 0,
            segments: vec![SegM {
                base: 0,
                next: 0,
                size: 0,
                max_ts: i64::MIN,
                created_ms: now,
                first_ts: None,
            }],
            batches: Vec::new(),
        }
    }

    fn end(&self) -> u64 {
        self.records.len() as u64
    }

    fn roll(&mut self, now: i64) {
        let active = *self.segments.last().unwrap();
        if active.size > 0 {
            self.segments.push(SegM {
                base: active.next,
                next: active.next,
                size: 0,
                max_ts: i64::MIN,
                created_ms: now,
                first_ts: None,
            });
        }
    }

    fn append(&mut self, recs: Vec<Stored>, setup: &Setup, now: i64) {
        let len = BATCH_HEADER + recs.iter().map(encoded_len).sum::<u64>();
        let active = *self.segments.last().unwrap();
        let too_big = active.size + len > setup.segment_bytes;
        let max_ts = recs.iter().map(|r| r.ts).max().unwrap();
        // Kafka's rule: the batch's time more than segment_ms after the first batch's.
        let waited = match active.first_ts {
            Some(first) if first >= 0 => max_ts.saturating_sub(first),
            _ => now - active.created_ms,
        };
        let too_old = setup.segment_ms.is_some_and(|ms| waited > ms);
        if too_big || too_old {
            self.roll(now);
        }
        let base = self.end();
        let n = recs.len() as u64;
        let active = self.segments.last_mut().unwrap();
        if active.size == 0 {
            active.first_ts = Some(max_ts);
        }
        active.next += n;
        active.size += len;
        active.max_ts = active.max_ts.max(max_ts);
        self.batches.push(BatchM {
            base,
            next: base + n,
            len,
        });
        self.records.extend(recs);
    }

    /// Kafka's order: size-based deletion, then time-based; never the active segment.
    fn apply_retention(&mut self, setup: &Setup, now: i64) -> usize {
        let before = self.segments.len();
        if let Some(max) = setup.retention_bytes {
            let mut total: u64 = self.segments.iter().map(|s| s.size).sum();
            while self.segments.len() > 1 && total - self.segments[0].size >= max {
                total -= self.segments[0].size;
                self.segments.remove(0);
            }
        }
        if let Some(ms) = setup.retention_ms {
            while self.segments.len() > 1
                && i128::from(now) - i128::from(self.segments[0].max_ts) > i128::from(ms)
            {
                self.segments.remove(0);
            }
        }
        self.start = self.segments[0].base;
        before - self.segments.len()
    }
}

/// Encoded size of one record, from the format documented in `brook_log::format`.
fn encoded_len(r: &Stored) -> u64 {
    let headers: usize = r
        .headers
        .iter()
        .map(|(k, v)| 2 + k.len() + 4 + v.as_ref().map_or(0, Vec::len))
        .sum();
    (8 + 4 + r.key.as_ref().map_or(0, Vec::len) + 4 + r.value.len() + 2 + headers) as u64
}

fn producer_record(r: &Rec, now: i64) -> ProducerRecord {
    ProducerRecord {
        key: r.key.clone().map(Bytes::from),
        value: Bytes::from(r.value.clone()),
        timestamp: r.ts_abs.or(r.ts_delta.map(|d| now + d)),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k.clone(),
                value: v.clone().map(Bytes::from),
            })
            .collect(),
        tombstone: false,
    }
}

fn stored(r: &Rec, now: i64) -> Stored {
    Stored {
        key: r.key.clone(),
        value: r.value.clone(),
        ts: r.ts_abs.unwrap_or(r.ts_delta.map_or(now, |d| now + d)),
        headers: r.headers.clone(),
    }
}

// ---- checks ------------------------------------------------------------------------

fn same_record(got: &Record, offset: u64, want: &Stored) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.offset, offset);
    prop_assert_eq!(got.timestamp, want.ts, "timestamp of offset {}", offset);
    prop_assert_eq!(
        got.key.as_deref(),
        want.key.as_deref(),
        "key of offset {}",
        offset
    );
    prop_assert_eq!(
        &got.value[..],
        &want.value[..],
        "value of offset {}",
        offset
    );
    let headers: Vec<(String, Option<Vec<u8>>)> = got
        .headers
        .iter()
        .map(|h| (h.key.clone(), h.value.as_ref().map(|v| v.to_vec())))
        .collect();
    prop_assert_eq!(&headers, &want.headers, "headers of offset {}", offset);
    Ok(())
}

fn check_read(
    p: &Partition,
    m: &PartM,
    offset: u64,
    max_records: usize,
    max_bytes: usize,
) -> Result<(), TestCaseError> {
    let (start, end) = (m.start, m.end());
    let limit = ReadLimit {
        max_records,
        max_bytes,
    };
    let res = p.read(offset, limit);
    if offset < start || offset > end {
        match res {
            Err(LogError::OffsetOutOfRange {
                topic,
                partition,
                requested,
                log_start,
                log_end,
            }) => {
                prop_assert_eq!(topic.as_str(), TOPIC);
                prop_assert_eq!(partition, p.id());
                prop_assert_eq!(requested, offset);
                prop_assert_eq!(log_start, start, "the error names the start offset");
                prop_assert_eq!(log_end, end);
            }
            other => prop_assert!(
                false,
                "read at {offset} outside [{start}, {end}] gave {other:?}"
            ),
        }
        return Ok(());
    }
    let got = res.map_err(|e| TestCaseError::fail(format!("read at {offset}: {e}")))?;
    if offset == end {
        prop_assert!(got.is_empty(), "read at the end returned {got:?}");
        return Ok(());
    }
    prop_assert!(
        !got.is_empty(),
        "read at {offset} < end {end} returned nothing"
    );
    prop_assert!(got.len() <= max_records, "{} > {max_records}", got.len());
    for (i, r) in got.iter().enumerate() {
        let o = offset + i as u64;
        same_record(r, o, &m.records[o as usize])?;
    }
    // Byte limit: batches are whole units; more than one is returned only within the
    // limit, and a read that stops short (of max_records and of the end) stops at a batch
    // boundary where the next batch would not fit.
    let last = offset + got.len() as u64;
    let touched: Vec<&BatchM> = m
        .batches
        .iter()
        .filter(|b| b.base < last && b.next > offset)
        .collect();
    let bytes: u64 = touched.iter().map(|b| b.len).sum();
    if touched.len() > 1 {
        prop_assert!(
            bytes <= max_bytes as u64,
            "read {} batches of {bytes} bytes with max_bytes {max_bytes}",
            touched.len()
        );
    }
    if got.len() < max_records && last < end {
        let next = m.batches.iter().find(|b| b.base == last);
        let Some(next) = next else {
            return Err(TestCaseError::fail(format!(
                "read from {offset} stopped inside a batch at {last} (max_records {max_records}, \
                 end {end})"
            )));
        };
        prop_assert!(
            bytes + next.len > max_bytes as u64,
            "read from {offset} stopped at {last} although the next batch ({} bytes) fits \
             ({bytes} read, max_bytes {max_bytes})",
            next.len
        );
    }
    Ok(())
}

fn check_offset_for_timestamp(p: &Partition, m: &PartM, ts: i64) -> Result<(), TestCaseError> {
    let want = (m.start..m.end()).find(|&o| m.records[o as usize].ts >= ts);
    let got = p
        .offset_for_timestamp(ts)
        .map_err(|e| TestCaseError::fail(format!("offset_for_timestamp({ts}): {e}")))?;
    prop_assert_eq!(got, want, "offset_for_timestamp({})", ts);
    Ok(())
}

fn check_partition(p: &Partition, m: &PartM) -> Result<(), TestCaseError> {
    let info = p.info();
    prop_assert_eq!(info.log_start_offset, m.start, "start of {}", p.id());
    prop_assert_eq!(info.log_end_offset, m.end(), "end of {}", p.id());
    prop_assert_eq!(p.log_start_offset(), m.start);
    prop_assert_eq!(p.log_end_offset(), m.end());
    prop_assert_eq!(info.segments, m.segments.len(), "segments of {}", p.id());
    let size: u64 = m.segments.iter().map(|s| s.size).sum();
    prop_assert_eq!(info.size_bytes, size, "size of {}", p.id());
    check_files(p.dir(), m)?;
    // Everything from the start offset on is still there, identical.
    let mut offset = m.start;
    while offset < m.end() {
        let got = p
            .read(offset, ReadLimit::records(1_000))
            .map_err(|e| TestCaseError::fail(format!("full read at {offset}: {e}")))?;
        prop_assert!(!got.is_empty());
        for (i, r) in got.iter().enumerate() {
            let o = offset + i as u64;
            same_record(r, o, &m.records[o as usize])?;
        }
        offset += got.len() as u64;
    }
    Ok(())
}

/// One `.log` file per live segment, named by its base offset, and no index file without
/// its segment.
fn check_files(dir: &Path, m: &PartM) -> Result<(), TestCaseError> {
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".log") {
            logs.push(stem.parse::<u64>().unwrap());
        } else if let Some(stem) = name
            .strip_suffix(".index")
            .or_else(|| name.strip_suffix(".timeindex"))
        {
            indexes.push(stem.parse::<u64>().unwrap());
        }
    }
    logs.sort_unstable();
    let bases: Vec<u64> = m.segments.iter().map(|s| s.base).collect();
    prop_assert_eq!(&logs, &bases, "segment files in {}", dir.display());
    for i in indexes {
        prop_assert!(logs.contains(&i), "index files of a deleted segment {i}");
    }
    Ok(())
}

// ---- the runner --------------------------------------------------------------------

struct World {
    dir: tempfile::TempDir,
    clock: ManualClock,
    setup: Setup,
    log: Option<Log>,
    topic: Option<Arc<Topic>>,
}

impl World {
    fn options(&self) -> LogOptions {
        LogOptions {
            fsync: self.setup.fsync,
            clock: self.clock.shared(),
            maintenance_interval_ms: None,
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    fn topic(&self) -> &Topic {
        self.topic.as_ref().unwrap()
    }

    fn partition(&self, p: usize) -> Arc<Partition> {
        self.topic().partition(p as u32).unwrap()
    }
}

fn run(setup: Setup, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(START_MS);
    let mut w = World {
        dir: tempfile::tempdir().unwrap(),
        clock,
        setup,
        log: None,
        topic: None,
    };
    let setup = w.setup.clone();
    let log = Log::open(w.dir.path(), w.options()).unwrap();
    let config = TopicConfig {
        retention_ms: setup.retention_ms,
        retention_bytes: setup.retention_bytes,
        segment_bytes: setup.segment_bytes,
        segment_ms: setup.segment_ms,
        index_interval_bytes: setup.index_interval_bytes,
        max_record_bytes: MAX_RECORD as u64,
        ..Default::default()
    };
    w.topic = Some(log.create_topic(TOPIC, setup.partitions, config).unwrap());
    w.log = Some(log);
    let n = setup.partitions as usize;
    let mut model: Vec<PartM> = (0..n).map(|_| PartM::new(START_MS)).collect();

    for op in ops {
        let now = w.clock.now_ms();
        match op {
            Op::Append { partition, records } => {
                let p = partition % n;
                let prs: Vec<ProducerRecord> =
                    records.iter().map(|r| producer_record(r, now)).collect();
                let info = w
                    .partition(p)
                    .append(&prs)
                    .map_err(|e| TestCaseError::fail(format!("append: {e}")))?;
                let end = model[p].end();
                prop_assert_eq!(info.partition, p as u32);
                prop_assert_eq!(info.base_offset, end);
                prop_assert_eq!(info.last_offset, end + records.len() as u64 - 1);
                model[p].append(
                    records.iter().map(|r| stored(r, now)).collect(),
                    &setup,
                    now,
                );
            }
            Op::AppendKeyed { records } => {
                let prs: Vec<ProducerRecord> =
                    records.iter().map(|r| producer_record(r, now)).collect();
                let infos = w
                    .topic()
                    .append(prs)
                    .map_err(|e| TestCaseError::fail(format!("keyed append: {e}")))?;
                let mut by_partition: Vec<Vec<Stored>> = vec![Vec::new(); n];
                for r in &records {
                    let key = r.key.as_deref().unwrap();
                    by_partition[partition_for_key(key, n as u32) as usize].push(stored(r, now));
                }
                let written: Vec<u32> = infos.iter().map(|i| i.partition).collect();
                let expected: Vec<u32> = (0..n as u32)
                    .filter(|&p| !by_partition[p as usize].is_empty())
                    .collect();
                prop_assert_eq!(written, expected, "partitions written by a keyed append");
                for (p, recs) in by_partition.into_iter().enumerate() {
                    if recs.is_empty() {
                        continue;
                    }
                    let info = infos.iter().find(|i| i.partition == p as u32).unwrap();
                    prop_assert_eq!(info.base_offset, model[p].end());
                    prop_assert_eq!(info.last_offset, model[p].end() + recs.len() as u64 - 1);
                    model[p].append(recs, &setup, now);
                }
            }
            Op::AppendTooLarge {
                partition,
                mut records,
                at,
                big,
            } => {
                let p = partition % n;
                let at = at % (records.len() + 1);
                records.insert(
                    at,
                    Rec {
                        key: None,
                        value: vec![7; big],
                        ts_delta: None,
                        ts_abs: None,
                        headers: Vec::new(),
                    },
                );
                let prs: Vec<ProducerRecord> =
                    records.iter().map(|r| producer_record(r, now)).collect();
                // Through the partition, or through the topic (which checks every record
                // before writing to any partition).
                let res = if partition < 2 {
                    w.partition(p).append(&prs).map(|_| ())
                } else {
                    w.topic().append(prs).map(|_| ())
                };
                match res {
                    Err(LogError::RecordTooLarge { index, size, max }) => {
                        prop_assert_eq!(index, at);
                        prop_assert_eq!(size, 18 + big);
                        prop_assert_eq!(max, MAX_RECORD);
                    }
                    other => prop_assert!(false, "oversized record accepted: {other:?}"),
                }
            }
            Op::Read {
                partition,
                offset,
                max_records,
                max_bytes,
            } => {
                let p = partition % n;
                let offset = offset % (model[p].end() + 4);
                check_read(&w.partition(p), &model[p], offset, max_records, max_bytes)?;
            }
            Op::ReadByTimestamp {
                partition,
                pick,
                raw,
            } => {
                let p = partition % n;
                let m = &model[p];
                let ts = match pick {
                    0 if !m.records.is_empty() => {
                        // A stored timestamp, or a neighbour of it.
                        let i = (raw.unsigned_abs() % m.records.len() as u64) as usize;
                        m.records[i].ts.saturating_add(raw % 3 - 1)
                    }
                    1 => now + raw % 150_000,
                    3 => {
                        // The newest timestamp of a live segment (the time index footer).
                        let i = (raw.unsigned_abs() % m.segments.len() as u64) as usize;
                        m.segments[i].max_ts
                    }
                    2 => {
                        if raw % 2 == 0 {
                            i64::MIN
                        } else {
                            i64::MAX
                        }
                    }
                    _ => raw,
                };
                check_offset_for_timestamp(&w.partition(p), m, ts)?;
            }
            Op::Roll { partition } => {
                let p = partition % n;
                w.partition(p).roll().unwrap();
                model[p].roll(now);
            }
            Op::Advance(ms) => w.clock.advance(ms),
            Op::Retention => {
                let starts: Vec<u64> = model.iter().map(|m| m.start).collect();
                let deleted = w
                    .log()
                    .run_maintenance()
                    .map_err(|e| TestCaseError::fail(format!("maintenance: {e}")))?;
                let expected: usize = model
                    .iter_mut()
                    .map(|m| m.apply_retention(&setup, now))
                    .sum();
                prop_assert_eq!(deleted, expected, "segments deleted by retention");
                for (p, m) in model.iter().enumerate() {
                    let part = w.partition(p);
                    let start = part.log_start_offset();
                    prop_assert!(start >= starts[p], "start offset moved back");
                    let active_base = m.segments.last().unwrap().base;
                    prop_assert!(start <= active_base, "retention passed the active segment");
                    // Below the new start is out of range, naming the new start.
                    if start > 0 {
                        check_read(&part, m, start - 1, 10, 1 << 20)?;
                    }
                }
            }
            Op::Reopen(how) => {
                w.topic = None;
                let log = w.log.take().unwrap();
                let marker = w.dir.path().join(".clean-shutdown");
                match how {
                    Reopen::Close => {
                        log.close().unwrap();
                        // Closed: further use fails, the marker is written.
                        prop_assert!(matches!(log.topic(TOPIC), Err(LogError::Closed)));
                        drop(log);
                        prop_assert!(marker.exists());
                    }
                    Reopen::Drop => {
                        drop(log);
                        prop_assert!(marker.exists());
                    }
                    Reopen::Unclean => {
                        log.close().unwrap();
                        drop(log);
                        std::fs::remove_file(&marker).unwrap();
                    }
                }
                let log = Log::open(w.dir.path(), w.options())
                    .map_err(|e| TestCaseError::fail(format!("reopen ({how:?}): {e}")))?;
                prop_assert!(!marker.exists(), "the marker is consumed by open");
                prop_assert_eq!(log.topics(), vec![TOPIC.to_string()]);
                w.topic = Some(log.topic(TOPIC).unwrap());
                w.log = Some(log);
                prop_assert_eq!(w.topic().partition_count(), setup.partitions);
                for m in &mut model {
                    m.segments.last_mut().unwrap().created_ms = now;
                }
            }
        }
        for (p, m) in model.iter().enumerate() {
            check_partition(&w.partition(p), m)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn partitions_behave_like_the_model(
        setup in arb_setup(),
        ops in prop::collection::vec(arb_op(), 1..60),
    ) {
        run(setup, ops)?;
    }
}

/// A fixed scenario, so the basic rules are checked even with few generated cases.
#[test]
fn retention_keeps_the_active_segment_and_reads_below_start_fail() {
    let a = |v: &str| Rec {
        key: None,
        value: v.as_bytes().to_vec(),
        ts_delta: Some(0),
        ts_abs: None,
        headers: Vec::new(),
    };
    let setup = Setup {
        partitions: 1,
        segment_bytes: 1024,
        index_interval_bytes: 64,
        segment_ms: None,
        retention_ms: Some(10_000),
        retention_bytes: None,
        fsync: FsyncPolicy::Never,
    };
    let big = "x".repeat(300);
    let mut ops = Vec::new();
    for _ in 0..3 {
        ops.push(Op::Append {
            partition: 0,
            records: vec![a(&big), a(&big)],
        });
    }
    ops.push(Op::Advance(20_000));
    ops.push(Op::Append {
        partition: 0,
        records: vec![a("fresh")],
    });
    ops.push(Op::Retention);
    ops.push(Op::Reopen(Reopen::Unclean));
    ops.push(Op::Read {
        partition: 0,
        offset: 0,
        max_records: 10,
        max_bytes: 1 << 20,
    });
    run(setup.clone(), ops).unwrap();

    // And directly: three full segments, all old; retention leaves only the active one.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let log = Log::open(
        dir.path(),
        LogOptions {
            fsync: FsyncPolicy::Never,
            clock: clock.shared(),
            maintenance_interval_ms: None,
        },
    )
    .unwrap();
    let config = TopicConfig {
        retention_ms: Some(10_000),
        segment_bytes: 1024,
        ..TopicConfig::default()
    };
    let t = log.create_topic(TOPIC, 1, config).unwrap();
    let p = t.partition(0).unwrap();
    for _ in 0..3 {
        let r = ProducerRecord::new(big.clone()).with_timestamp(START_MS);
        p.append(&[r.clone(), r]).unwrap();
    }
    assert_eq!(p.info().segments, 3);
    clock.advance(20_000);
    assert_eq!(log.run_maintenance().unwrap(), 2);
    assert_eq!(p.log_start_offset(), 4);
    assert_eq!(p.log_end_offset(), 6);
    let err = p.read(3, ReadLimit::default()).unwrap_err();
    assert!(
        matches!(err, LogError::OffsetOutOfRange { log_start: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("starts at 4"), "{err}");
    // The active segment is old too, but stays.
    clock.advance(1_000_000);
    assert_eq!(log.run_maintenance().unwrap(), 0);
    assert_eq!(p.read(4, ReadLimit::default()).unwrap().len(), 2);
}

/// Retention at its exact boundaries, as Kafka: by size, the oldest segment goes when the
/// partition without it is still at least `retention_bytes`; by time, when its newest
/// record is strictly more than `retention_ms` old.
#[test]
fn retention_boundaries_are_kafkas() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let log = Log::open(
        dir.path(),
        LogOptions {
            fsync: FsyncPolicy::Never,
            clock: clock.shared(),
            maintenance_interval_ms: None,
        },
    )
    .unwrap();
    // One record of 544 value bytes is a 600-byte batch: one batch per 1024-byte segment.
    let value = vec![b'v'; 600 - 38 - 18];
    let config = TopicConfig {
        retention_ms: Some(10_000),
        retention_bytes: Some(1_800),
        segment_bytes: 1024,
        segment_ms: None,
        ..TopicConfig::default()
    };
    let t = log.create_topic(TOPIC, 1, config).unwrap();
    let p = t.partition(0).unwrap();
    for i in 0..4 {
        let r = ProducerRecord::new(value.clone()).with_timestamp(START_MS + i);
        p.append(&[r]).unwrap();
    }
    let info = p.info();
    assert_eq!((info.segments, info.size_bytes), (4, 2_400));
    // 2400 - 600 = 1800 >= 1800: one segment goes; 1800 - 600 < 1800: no more.
    assert_eq!(log.run_maintenance().unwrap(), 1);
    assert_eq!(p.log_start_offset(), 1);
    assert_eq!(p.info().size_bytes, 1_800);
    assert_eq!(log.run_maintenance().unwrap(), 0);

    // Offset 1 has timestamp START_MS + 1: exactly retention_ms old, it stays.
    clock.set(START_MS + 1 + 10_000);
    assert_eq!(log.run_maintenance().unwrap(), 0);
    assert_eq!(p.log_start_offset(), 1);
    clock.advance(1);
    assert_eq!(log.run_maintenance().unwrap(), 1);
    assert_eq!(p.log_start_offset(), 2);
    // Far in the future every closed segment goes, the active one stays.
    clock.advance(1_000_000);
    assert_eq!(log.run_maintenance().unwrap(), 1);
    assert_eq!(p.log_start_offset(), 3);
    assert_eq!(p.read(3, ReadLimit::default()).unwrap()[0].value, value);
    assert_eq!(p.offset_for_timestamp(START_MS).unwrap(), Some(3));
}
