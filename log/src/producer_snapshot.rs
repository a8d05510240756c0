//! Producer-state snapshots: `<offset>.snapshot` in a partition's directory holds the
//! [`ProducerStates`] after every batch below `offset` (Kafka's
//! `<offset>.snapshot` of `ProducerStateManager`). One is written when a segment rolls
//! while there is producer state (`offset` = the new segment's base; written before
//! that segment is created) and when the partition is closed (`offset` = the log
//! end); on open the state is the newest snapshot at or below the log end plus the
//! producers' batches after it, so the rebuild reads at most the active segment (a
//! newest snapshot before the active segment means there was no state when it
//! began). Snapshots above the log end (their batches were cut by recovery) are
//! deleted; the [`KEEP`] newest are kept. Retention may delete the segments a
//! snapshot covers: the state stays (as Kafka's since KAFKA-7190), until it expires.
//!
//! ```text
//! version        u8    1
//! producers      u32   N
//! N times:
//!   producer_id    u64
//!   epoch          u16
//!   last_append_ms i64
//!   batches        u8    M <= 5
//!   M times: first_sequence i32, last_sequence i32, first_offset u64
//! crc32c         u32   of every byte before it
//! ```
//! Integers are little-endian. A snapshot that fails its CRC or does not parse is
//! deleted with a warning and the next older one (or the whole log) is used.

use std::collections::VecDeque;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::error::{IoContext, Result};
use crate::producer_state::{ProducerEntry, ProducerStates, SequenceRange, PRODUCER_WINDOW};

/// Suffix of a snapshot file.
pub(crate) const SUFFIX: &str = ".snapshot";
/// Suffix of a snapshot being written.
const TMP_SUFFIX: &str = ".snapshot.tmp";
/// How many snapshots are kept (the newest): one more than needed, so a damaged newest
/// one still leaves a bound on the rebuild.
pub(crate) const KEEP: usize = 2;
const VERSION: u8 = 1;

/// The snapshot's bytes.
pub(crate) fn encode(states: &ProducerStates) -> Vec<u8> {
    let mut b = Vec::with_capacity(9 + states.len() * (19 + PRODUCER_WINDOW * 16));
    b.push(VERSION);
    b.extend_from_slice(&(states.len() as u32).to_le_bytes());
    for (id, e) in states.iter() {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&e.epoch.to_le_bytes());
        b.extend_from_slice(&e.last_append_ms.to_le_bytes());
        // At most PRODUCER_WINDOW (5) batches are kept, so the count fits a u8.
        b.push(e.batches.len() as u8);
        for r in &e.batches {
            b.extend_from_slice(&r.first_sequence.to_le_bytes());
            b.extend_from_slice(&r.last_sequence.to_le_bytes());
            b.extend_from_slice(&r.first_offset.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Parses a snapshot; `None` when it is damaged.
pub(crate) fn decode(bytes: &[u8]) -> Option<ProducerStates> {
    let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = Reader { b: body };
    if r.take::<1>()? != [VERSION] {
        return None;
    }
    let count = u32::from_le_bytes(r.take()?);
    let mut states = ProducerStates::default();
    for _ in 0..count {
        let id = u64::from_le_bytes(r.take()?);
        let epoch = u16::from_le_bytes(r.take()?);
        let last_append_ms = i64::from_le_bytes(r.take()?);
        let [m] = r.take::<1>()?;
        if usize::from(m) > PRODUCER_WINDOW {
            return None;
        }
        let mut batches = VecDeque::with_capacity(PRODUCER_WINDOW);
        for _ in 0..m {
            batches.push_back(SequenceRange {
                first_sequence: i32::from_le_bytes(r.take()?),
                last_sequence: i32::from_le_bytes(r.take()?),
                first_offset: u64::from_le_bytes(r.take()?),
            });
        }
        states.insert(
            id,
            ProducerEntry {
                epoch,
                batches,
                last_append_ms,
            },
        );
    }
    r.b.is_empty().then_some(states)
}

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.b.split_at_checked(N)?;
        self.b = rest;
        head.try_into().ok()
    }
}

fn path(dir: &Path, offset: u64) -> PathBuf {
    dir.join(format!("{}{SUFFIX}", crate::segment::segment_stem(offset)))
}

/// The offsets of the snapshots in `dir`, ascending.
fn list(dir: &Path) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).ctx("list", dir)? {
        let entry = entry.ctx("list", dir)?;
        let name = entry.file_name();
        if let Some(offset) = name
            .to_str()
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push(offset);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Writes the snapshot of `states` at `offset` (written aside and renamed into place,
/// so a crash leaves the whole file or none; fsynced when `durable`), then deletes
/// the older ones but the [`KEEP`] newest and the newest at or below `active_base`
/// (the active segment's base: the one a rebuild falls back to when recovery cuts the
/// batches after the newer ones).
pub(crate) fn write(
    dir: &Path,
    offset: u64,
    states: &ProducerStates,
    durable: bool,
    active_base: u64,
) -> Result<()> {
    place(dir, offset, states, durable)?;
    if durable {
        crate::partition::sync_dir(dir)?;
    }
    prune(dir, offset, active_base)
}

/// Writes the snapshot of `states` at `offset` aside and renames it into place (a
/// crash leaves the whole file or none), fsyncing its data before the rename when
/// `durable`; returns its path. Without `durable` nothing is fsynced: a segment
/// roll writes its snapshot so under the partition's lock (it survives a process
/// crash, as the page cache does) and its [`RollSnapshot`] fsyncs it later without
/// the lock, as Kafka's `UnifiedLog.roll` takes the snapshot without a flush and
/// leaves that to the scheduled `flush-log`.
pub(crate) fn place(
    dir: &Path,
    offset: u64,
    states: &ProducerStates,
    durable: bool,
) -> Result<PathBuf> {
    let final_path = path(dir, offset);
    let tmp = dir.join(format!(
        "{}{TMP_SUFFIX}",
        crate::segment::segment_stem(offset)
    ));
    {
        let mut f = fs::File::create(&tmp).ctx("create", &tmp)?;
        f.write_all(&encode(states)).ctx("write", &tmp)?;
        if durable {
            f.sync_data().ctx("fsync", &tmp)?;
        }
    }
    fs::rename(&tmp, &final_path).ctx("rename", &tmp)?;
    Ok(final_path)
}

/// Deletes the snapshots older than `offset` (the one just written) but the [`KEEP`] newest and the newest at or below `active_base` (the active
/// segment's base: the one a rebuild falls back to when recovery cuts the batches
/// after the newer ones). Snapshots newer than `offset` (taken by later rolls whose
/// fsync has not run yet) are neither counted nor deleted.
fn prune(dir: &Path, offset: u64, active_base: u64) -> Result<()> {
    let all: Vec<u64> = list(dir)?.into_iter().filter(|o| *o <= offset).collect();
    let anchor = all.iter().rev().find(|o| **o <= active_base).copied();
    for old in &all[..all.len().saturating_sub(KEEP)] {
        if Some(*old) == anchor {
            continue;
        }
        let p = path(dir, *old);
        fs::remove_file(&p).ctx("remove", &p)?;
    }
    Ok(())
}

/// The snapshot a segment roll placed without fsync ([`place`]) under the
/// partition's lock, finished by the roll's flush without the lock
/// ([`crate::flush::RollFlush`]).
#[derive(Debug)]
pub(crate) struct RollSnapshot {
    /// Its offset: the base of the segment the roll created.
    pub(crate) offset: u64,
    pub(crate) path: PathBuf,
}

impl RollSnapshot {
    /// fsyncs the snapshot's data when `durable` (the directory's fsync that makes
    /// its rename durable is the caller's).
    pub(crate) fn sync(&self, durable: bool) -> Result<()> {
        if durable {
            fs::File::open(&self.path)
                .and_then(|f| f.sync_data())
                .ctx("fsync", &self.path)?;
        }
        Ok(())
    }

    /// Deletes the older snapshots ([`prune`]), once this one is durable.
    pub(crate) fn prune_older(&self, dir: &Path) -> Result<()> {
        prune(dir, self.offset, self.offset)
    }
}

/// The newest intact snapshot at or below `end_offset` and its offset. Snapshots above
/// it (of batches cut by recovery), damaged ones and unfinished ones (a crash before
/// the rename) are deleted.
pub(crate) fn load_latest(dir: &Path, end_offset: u64) -> Result<Option<(u64, ProducerStates)>> {
    for entry in fs::read_dir(dir).ctx("list", dir)? {
        let p = entry.ctx("list", dir)?.path();
        if p.to_str().is_some_and(|n| n.ends_with(TMP_SUFFIX)) {
            fs::remove_file(&p).ctx("remove", &p)?;
        }
    }
    for offset in list(dir)?.into_iter().rev() {
        let p = path(dir, offset);
        if offset > end_offset {
            warn!(path = %p.display(), end_offset, "removing a producer-state snapshot past the log end");
            fs::remove_file(&p).ctx("remove", &p)?;
            continue;
        }
        let bytes = fs::read(&p).ctx("read", &p)?;
        match decode(&bytes) {
            Some(states) => return Ok(Some((offset, states))),
            None => {
                warn!(path = %p.display(), "removing a damaged producer-state snapshot");
                fs::remove_file(&p).ctx("remove", &p)?;
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ProducerMark;

    fn states() -> ProducerStates {
        let mut s = ProducerStates::default();
        for (id, epoch, seq, offset) in [(7u64, 1u16, 0i32, 10u64), (7, 1, 3, 13), (9, 0, 40, 20)] {
            s.appended(
                &ProducerMark {
                    producer_id: id,
                    epoch,
                    base_sequence: seq,
                },
                3,
                offset,
                1_000,
            );
        }
        s
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_detected() {
        let s = states();
        let bytes = encode(&s);
        assert_eq!(decode(&bytes), Some(s));
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert_eq!(decode(&b), None, "byte {i}");
        }
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut {cut}");
        }
    }

    #[test]
    fn the_newest_intact_snapshot_at_or_below_the_end_is_loaded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let s = states();
        write(dir.path(), 5, &ProducerStates::default(), false, 5).expect("write");
        write(dir.path(), 10, &s, false, 10).expect("write");
        write(dir.path(), 30, &s, false, 30).expect("write");
        // Only the two newest are kept...
        assert_eq!(list(dir.path()).expect("list"), vec![10, 30]);
        // A log cut back to 20 by recovery: the snapshot at 30 goes.
        let loaded = load_latest(dir.path(), 20).expect("load");
        assert_eq!(loaded, Some((10, s.clone())));
        assert_eq!(list(dir.path()).expect("list"), vec![10]);
        // An unfinished one is removed.
        let tmp = dir.path().join(format!("00000000000000000009{TMP_SUFFIX}"));
        fs::write(&tmp, b"half").expect("write");
        load_latest(dir.path(), 20).expect("load");
        assert!(!tmp.exists());
        // A damaged one is removed.
        fs::write(path(dir.path(), 10), b"junk").expect("write");
        assert_eq!(load_latest(dir.path(), 20).expect("load"), None);
        assert!(list(dir.path()).expect("list").is_empty());
        // Besides the two newest, the newest at or below the active segment's base is
        // kept (for closes within the active segment).
        write(dir.path(), 30, &s, false, 30).expect("write");
        write(dir.path(), 32, &s, false, 30).expect("write");
        write(dir.path(), 35, &s, false, 30).expect("write");
        assert_eq!(list(dir.path()).expect("list"), vec![30, 32, 35]);
        write(dir.path(), 36, &s, false, 30).expect("write");
        assert_eq!(list(dir.path()).expect("list"), vec![30, 35, 36]);
    }
}
