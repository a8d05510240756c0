//! The log cleaner: compacts the closed segments of a partition whose topic has
//! `cleanup.policy=compact` (or `compact,delete`), as Kafka's log cleaner. The
//! decisions are [`crate::compaction`]'s; this file reads and writes.
//!
//! A pass: choose the cleanable segments; read them once to build the offset map
//! (latest offset per key); then for each segment write a compacted copy aside
//! (`<base>.log.cleaned`, fsynced) and swap it in with one rename over the original
//! (old index files removed first, new ones written after). Finally the cleaner's
//! state (`cleaner.json`: the first dirty offset and, per segment, when it was first
//! cleaned and whether it kept tombstones) is stored atomically. Offsets are never
//! changed: a segment keeps its base offset and its next offset, and its surviving
//! records keep theirs (batches are split where records were removed).
//!
//! Crash safety: before the rename the original is untouched (an unfinished copy is
//! removed on open); after it the copy is complete and fsynced. A crash before the
//! state is stored makes the next pass clean those segments again, which changes
//! nothing (compaction is idempotent) except that their tombstones' delete horizon
//! starts again (they are kept longer, never shorter).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::compaction::{self, Entry, Kind, OffsetMap};
use crate::error::{IoContext, LogError, Result};
use crate::format::{self, BatchHeader, FormatError, RecordRef};
use crate::partition::{sync_dir, AbortedTxn, CleanableSegment, Partition};
use crate::record::{Header, ProducerRecord};
use crate::segment::{cleaned_path, ReadProgress, Segment};

/// The cleaner's state file in a partition's directory.
pub(crate) const CLEANER_STATE: &str = "cleaner.json";

/// One pass at a time in the process (Kafka's default `log.cleaner.threads=1`): two
/// passes on one partition (the maintenance thread and a direct call) would write
/// the same `.cleaned` file.
static CLEANER: Mutex<()> = Mutex::new(());

/// Bytes read per step while cleaning.
const CHUNK_BYTES: usize = 4 << 20;

/// What a compaction pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionStats {
    /// Segments rewritten.
    pub segments: usize,
    /// Records kept in them.
    pub records_kept: u64,
    /// Records removed (older versions, expired tombstones, aborted, keyless).
    pub records_removed: u64,
    /// Distinct keys in the offset map.
    pub keys: usize,
}

/// Where a test stops a pass, to check what a crash there leaves behind.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanerFault {
    /// After the first compacted copy was written aside, before its swap.
    AfterWriteAside,
    /// Right after the first swap's rename.
    AfterSwap,
}

/// The cleaner's durable state of one partition.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CleanerState {
    /// Offsets below this have been cleaned at least once.
    first_dirty_offset: u64,
    /// Per cleaned segment (by base offset).
    segments: BTreeMap<u64, CleanedSegment>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CleanedSegment {
    /// When the segment was first cleaned (ms): its tombstones' delete horizon is
    /// this plus `delete.retention.ms` (as Kafka's KIP-534 delete horizon).
    first_cleaned_ms: i64,
    /// Whether it kept tombstones the last time it was cleaned.
    tombstones: bool,
}

impl CleanerState {
    fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(CLEANER_STATE);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| LogError::Corrupt {
                path: path.clone(),
                position: e.column() as u64,
                reason: format!("cleaner state does not parse: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(LogError::Io {
                op: "read",
                path,
                source: e,
            }),
        }
    }

    /// Writes atomically: temporary file, fsync, rename, fsync of the directory.
    fn store(&self, dir: &Path) -> Result<()> {
        let path = dir.join(CLEANER_STATE);
        let tmp = dir.join("cleaner.json.tmp");
        // Serialising integers and booleans cannot fail.
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        fs::write(&tmp, text).ctx("write", &tmp)?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .ctx("fsync", &tmp)?;
        fs::rename(&tmp, &path).ctx("rename", &path)?;
        sync_dir(dir)
    }
}

impl Partition {
    /// Runs a compaction pass if the topic compacts and one is due (by
    /// `min.cleanable.dirty.ratio`, or tombstones past their delete horizon); the
    /// background maintenance calls this. Returns what the pass did, `None` when none
    /// ran.
    ///
    /// # Errors
    /// I/O errors, [`LogError::Corrupt`] for a segment that fails its checks,
    /// [`LogError::Closed`].
    pub fn compact(&self) -> Result<Option<CompactionStats>> {
        self.compact_pass(None)
    }

    /// [`Partition::compact`] stopped at `fault` with an error, as a crash there would
    /// stop it (for tests of crash safety).
    #[doc(hidden)]
    pub fn compact_interrupted(&self, fault: CleanerFault) -> Result<Option<CompactionStats>> {
        self.compact_pass(Some(fault))
    }

    fn compact_pass(&self, fault: Option<CleanerFault>) -> Result<Option<CompactionStats>> {
        // One snapshot of the topic's configuration for the whole pass: an alter
        // during the pass applies from the next one.
        let config = self.config();
        if !config.cleanup_policy.compacts() {
            return Ok(None);
        }
        // Nothing is left half-done under this lock by a panic (files are swapped by
        // rename), so a poisoned lock is still good.
        let _one_pass = CLEANER.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock().now_ms();
        let cleanable = self.cleanable(now, config.min_compaction_lag_ms)?;
        if cleanable.segments.is_empty() {
            return Ok(None);
        }
        let dir = self.dir().to_path_buf();
        let mut state = CleanerState::load(&dir)?;
        // Segments whose tombstones' delete horizon has passed.
        let expired: BTreeSet<u64> = state
            .segments
            .iter()
            .filter(|(_, s)| {
                s.first_cleaned_ms
                    .saturating_add(config.delete_retention_ms)
                    <= now
            })
            .map(|(base, _)| *base)
            .collect();
        let (clean, dirty) = cleanable.segments.iter().fold((0, 0), |(c, d), s| {
            if s.next_offset <= state.first_dirty_offset {
                (c + s.size, d)
            } else {
                (c, d + s.size)
            }
        });
        let tombstones_due = cleanable.segments.iter().any(|s| {
            state
                .segments
                .get(&s.base_offset)
                .is_some_and(|c| c.tombstones)
                && expired.contains(&s.base_offset)
        });
        if !compaction::pass_due(
            clean,
            dirty,
            config.min_cleanable_dirty_ratio.0,
            tombstones_due,
        ) {
            return Ok(None);
        }

        // Pass 1: the latest offset of every key in the cleanable range.
        let mut map = OffsetMap::default();
        for seg in &cleanable.segments {
            for_each_batch(seg, |_, h| {
                if let Some(b) = h {
                    let kind = kind_of(b.header, &cleanable.aborted);
                    for r in &b.records {
                        map.note(&entry(r, kind));
                    }
                }
                Ok(())
            })?;
        }

        // Pass 2: each segment compacted aside and swapped in.
        let mut stats = CompactionStats {
            keys: map.len(),
            ..Default::default()
        };
        for seg in &cleanable.segments {
            let tombstones_expired = expired.contains(&seg.base_offset);
            let path = cleaned_path(&dir, seg.base_offset);
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .ctx("create", &path)?;
            let mut written = 0u64;
            let mut kept_tombstones = false;
            let mut removed = 0u64;
            let mut out = Vec::new();
            for_each_batch(seg, |raw, h| {
                let Some(b) = h else {
                    // The end of a chunk: write what it left.
                    file.write_all_at(&out, written).ctx("write", &path)?;
                    written += out.len() as u64;
                    out.clear();
                    return Ok(());
                };
                let kind = kind_of(b.header, &cleanable.aborted);
                let keep: Vec<bool> = b
                    .records
                    .iter()
                    .map(|r| compaction::survives(&entry(r, kind), &map, tombstones_expired))
                    .collect();
                let kept = keep.iter().filter(|k| **k).count();
                stats.records_kept += kept as u64;
                removed += (keep.len() - kept) as u64;
                kept_tombstones |= b.records.iter().zip(&keep).any(|(r, k)| *k && r.tombstone);
                if kept == keep.len() {
                    // Unchanged: the batch as it was, CRC and all.
                    out.extend_from_slice(raw);
                } else {
                    rewrite(&mut out, b.header, &b.records, &keep);
                }
                Ok(())
            })?;
            stats.records_removed += removed;
            let first_clean = CleanedSegment {
                first_cleaned_ms: now,
                tombstones: false,
            };
            if removed == 0 {
                // Nothing to remove: the original stays (no rewrite), only noted as
                // cleaned.
                drop(file);
                fs::remove_file(&path).ctx("remove", &path)?;
                state
                    .segments
                    .entry(seg.base_offset)
                    .or_insert(first_clean)
                    .tombstones = kept_tombstones;
                continue;
            }
            file.set_len(written).ctx("truncate", &path)?;
            file.sync_all().ctx("fsync", &path)?;
            drop(file);
            if fault == Some(CleanerFault::AfterWriteAside) {
                return Err(LogError::Internal(
                    "compaction interrupted after writing aside (injected)".into(),
                ));
            }
            let new = Segment::open_cleaned(
                &dir,
                seg.base_offset,
                config.index_interval_bytes,
                seg.next_offset,
                now,
            )?;
            let interrupt = fault == Some(CleanerFault::AfterSwap);
            if self.swap_cleaned(new, seg.size, interrupt)? {
                stats.segments += 1;
                state
                    .segments
                    .entry(seg.base_offset)
                    .or_insert(first_clean)
                    .tombstones = kept_tombstones;
            }
        }
        if let Some(last) = cleanable.segments.last() {
            state.first_dirty_offset = state.first_dirty_offset.max(last.next_offset);
        }
        // Segments deleted by retention meanwhile are forgotten.
        let start = self.log_start_offset();
        state.segments.retain(|base, _| *base >= start);
        state.store(&dir)?;
        info!(
            topic = self.topic(),
            partition = self.id(),
            segments = stats.segments,
            kept = stats.records_kept,
            removed = stats.records_removed,
            keys = stats.keys,
            "compacted"
        );
        Ok(Some(stats))
    }
}

/// The records of one batch, decoded.
struct DecodedBatch<'a> {
    header: &'a BatchHeader,
    records: Vec<RecordRef<'a>>,
}

fn kind_of(h: &BatchHeader, aborted: &[AbortedTxn]) -> Kind {
    if h.is_control() {
        Kind::Control
    } else if h
        .txn
        .is_some_and(|m| aborted.iter().any(|a| a.covers(&m, h.base_offset)))
    {
        Kind::Aborted
    } else {
        Kind::Data
    }
}

fn entry<'a>(r: &RecordRef<'a>, kind: Kind) -> Entry<'a> {
    Entry {
        key: r.key,
        offset: r.offset,
        tombstone: r.tombstone,
        kind,
    }
}

/// Calls `f` with every batch of the segment (its bytes and its decoded records),
/// then once more with no batch after each chunk read, in order.
fn for_each_batch<F>(seg: &CleanableSegment, mut f: F) -> Result<()>
where
    F: FnMut(&[u8], Option<&DecodedBatch<'_>>) -> Result<()>,
{
    let mut view = seg.view.clone();
    let mut failed: Option<LogError> = None;
    loop {
        let mut progress = ReadProgress {
            next_offset: seg.base_offset,
            ..Default::default()
        };
        let done = view.read(
            seg.base_offset,
            u64::MAX,
            usize::MAX,
            CHUNK_BYTES,
            &mut progress,
            &mut |batch: &Bytes, h: &BatchHeader, _max| {
                if failed.is_some() {
                    return Ok(0);
                }
                let mut records = Vec::with_capacity(h.record_count as usize);
                format::for_each_record(batch, h, 0, usize::MAX, |r| records.push(r))?;
                let decoded = DecodedBatch { header: h, records };
                if let Err(e) = f(batch, Some(&decoded)) {
                    failed = Some(e);
                    // Stops the read; the error returned is `failed`'s.
                    return Err(FormatError::BadHeader("cleaner stopped".into()));
                }
                // Passed over as far as the read's budget goes: the bytes count.
                Ok(0)
            },
        );
        if let Some(e) = failed.take() {
            return Err(e);
        }
        let done = done?;
        f(&[], None)?;
        if done || progress.bytes == 0 {
            return Ok(());
        }
        view.start += progress.bytes as u64;
    }
}

/// Writes the surviving records of a batch (`keep[i]` for `records[i]`) as batches
/// of consecutive offsets, of the batch's kind (plain, or of its transaction), each
/// record with its offset, timestamp, key, value (or null) and headers.
fn rewrite(out: &mut Vec<u8>, h: &BatchHeader, records: &[RecordRef<'_>], keep: &[bool]) {
    let mut run: Vec<ProducerRecord> = Vec::new();
    let mut run_base = 0u64;
    let flush = |out: &mut Vec<u8>, run: &mut Vec<ProducerRecord>, base: u64| {
        if run.is_empty() {
            return;
        }
        // Every record has its timestamp, so `now` is unused. A producer's batch keeps
        // its producer fields, the base sequence moved on to the run's first record.
        match (h.producer, h.txn) {
            (Some(p), txn) => {
                let skipped = (base - h.base_offset) as u32;
                let p = format::ProducerMark {
                    base_sequence: format::increment_sequence(p.base_sequence, skipped),
                    ..p
                };
                format::encode_producer_batch(out, base, run, 0, p, txn)
            }
            (None, Some(mark)) => format::encode_txn_batch(out, base, run, 0, mark),
            (None, None) => format::encode_batch(out, base, run, 0),
        };
        run.clear();
    };
    for (r, k) in records.iter().zip(keep) {
        if !*k {
            flush(out, &mut run, run_base);
            continue;
        }
        if run.is_empty() {
            run_base = r.offset;
        }
        run.push(ProducerRecord {
            key: r.key.map(Bytes::copy_from_slice),
            value: Bytes::copy_from_slice(r.value),
            timestamp: Some(r.timestamp),
            headers: r
                .headers
                .iter()
                .map(|hd| Header {
                    key: hd.key.to_string(),
                    value: hd.value.map(Bytes::copy_from_slice),
                })
                .collect(),
            tombstone: r.tombstone,
        });
    }
    flush(out, &mut run, run_base);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ProducerMark;

    #[test]
    fn a_producers_batch_keeps_its_producer_fields_with_the_sequence_moved_on() {
        let producer = ProducerMark {
            producer_id: 7,
            epoch: 2,
            base_sequence: 10,
        };
        let records: Vec<ProducerRecord> = (0..4u8)
            .map(|i| ProducerRecord::keyed(vec![i], "v").with_timestamp(1))
            .collect();
        let mut batch = Vec::new();
        format::encode_producer_batch(&mut batch, 100, &records, 1, producer, None);
        let h = format::check_batch(&batch).expect("batch");
        let mut refs = Vec::new();
        format::for_each_record(&batch, &h, 0, usize::MAX, |r| refs.push(r)).expect("records");
        // Records 100 and 101 removed: one batch of 102..=103, sequences 12..=13.
        let mut out = Vec::new();
        rewrite(&mut out, &h, &refs, &[false, false, true, true]);
        let rewritten = format::check_batch(&out).expect("rewritten batch");
        assert_eq!(rewritten.base_offset, 102);
        assert_eq!(
            rewritten.producer,
            Some(ProducerMark {
                base_sequence: 12,
                ..producer
            })
        );
        assert_eq!(rewritten.producer.map(|p| p.last_sequence(2)), Some(13));
    }
}
