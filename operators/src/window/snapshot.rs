//! The window operator's state in checkpoints (issue 5, semantics.md §4).
//!
//! One blob per key group, the same on every path (general, fast tumbling/sliding,
//! fast sessions), so a checkpoint restores into any of them (a heap run restored on a
//! byte store, say). A blob is one or more *frames*; a restore at another parallelism
//! may get the frames of several former subtasks for one key group, concatenated:
//!
//! ```text
//! frame   = version: u8 (= 1) | payload length: u64 LE | payload
//! payload = entry*             (up to the payload length)
//! entry   = bincode((key, window, contents, trigger state, timers))
//! ```
//!
//! `timers` are the timers the general path keeps for the key and window (its
//! [`TimerSet`]): with the default event-time trigger, an event-time timer at the
//! window's max timestamp while it has not fired, and the cleanup timer. The fast
//! paths write (and read) exactly that, so "fired or not" survives a restore. The
//! watermark is not in the state: the sources re-emit the restored watermark before
//! any record.

use std::collections::BTreeMap;
use std::hash::Hash;

use brook_core::checkpoint::StateSnapshot;
use brook_core::keys::{key_group_for_key, KeyGroup};
use brook_core::operator::{OpResult, OperatorError};
use brook_core::time::Millis;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::fast::event_cleanup_time;
use super::trigger::{Domain, TimerSet, TriggerState};
use super::TimeWindow;

/// Version of the frame format.
pub(crate) const VERSION: u8 = 1;

/// Bytes before a frame's payload: version and length.
const HEADER: usize = 9;

/// Collects entries into one buffer per key group.
#[derive(Debug)]
pub(crate) struct Writer {
    max_parallelism: u32,
    groups: BTreeMap<KeyGroup, Vec<u8>>,
    failed: Option<bincode::Error>,
}

impl Writer {
    pub(crate) fn new(max_parallelism: u32) -> Self {
        Writer {
            max_parallelism,
            groups: BTreeMap::new(),
            failed: None,
        }
    }

    /// Adds the entry of `key` and window `w` to the key's key group.
    pub(crate) fn put<K: Hash + Serialize, S: Serialize>(
        &mut self,
        key: &K,
        w: &TimeWindow,
        contents: &S,
        trigger: &TriggerState,
        timers: &TimerSet,
    ) {
        if self.failed.is_some() {
            return;
        }
        let kg = key_group_for_key(key, self.max_parallelism);
        let buf = self.groups.entry(kg).or_insert_with(|| {
            let mut b = Vec::with_capacity(256);
            b.push(VERSION);
            b.extend_from_slice(&[0; 8]);
            b
        });
        if let Err(e) = bincode::serialize_into(buf, &(key, w, contents, trigger, timers)) {
            self.failed = Some(e);
        }
    }

    /// Writes one frame per key group into `snap`.
    pub(crate) fn finish(self, snap: &mut StateSnapshot) -> OpResult {
        if let Some(e) = self.failed {
            return Err(OperatorError::failed(format!(
                "window state: cannot encode an entry for a checkpoint: {e}"
            )));
        }
        for (kg, mut buf) in self.groups {
            let len = (buf.len() - HEADER) as u64;
            buf[1..HEADER].copy_from_slice(&len.to_le_bytes());
            snap.put_keyed(kg, &buf);
        }
        Ok(())
    }
}

/// One restored entry.
pub(crate) type Entry<K, S> = (K, TimeWindow, S, TriggerState, TimerSet);

fn corrupt(kg: KeyGroup, what: impl std::fmt::Display) -> OperatorError {
    OperatorError::failed(format!("window state of key group {kg}: {what}"))
}

/// Reads the frames of key group `kg`, calling `f` with each entry.
///
/// # Errors
/// A frame of an unknown version, a truncated or damaged frame, an entry that does not
/// decode, or a key that does not belong to `kg` (another max parallelism).
pub(crate) fn read<K, S>(
    kg: KeyGroup,
    mut bytes: &[u8],
    max_parallelism: u32,
    mut f: impl FnMut(Entry<K, S>) -> OpResult,
) -> OpResult
where
    K: Hash + DeserializeOwned,
    S: DeserializeOwned,
{
    while let Some((&version, rest)) = bytes.split_first() {
        if version != VERSION {
            return Err(corrupt(
                kg,
                format_args!("format version {version}, this brook reads version {VERSION}"),
            ));
        }
        let Some((len, rest)) = rest.split_first_chunk::<8>() else {
            return Err(corrupt(kg, "truncated frame header"));
        };
        let len = u64::from_le_bytes(*len);
        let Some((mut payload, rest)) = usize::try_from(len)
            .ok()
            .and_then(|l| (l <= rest.len()).then(|| rest.split_at(l)))
        else {
            return Err(corrupt(
                kg,
                format_args!("frame of {len} bytes, {} left", rest.len()),
            ));
        };
        while !payload.is_empty() {
            let e: Entry<K, S> = bincode::deserialize_from(&mut payload)
                .map_err(|e| corrupt(kg, format_args!("cannot decode an entry: {e}")))?;
            let actual = key_group_for_key(&e.0, max_parallelism);
            if actual != kg {
                return Err(corrupt(
                    kg,
                    format_args!(
                        "a key of key group {actual} (max parallelism {max_parallelism}); \
                         was the max parallelism changed?"
                    ),
                ));
            }
            f(e)?;
        }
        bytes = rest;
    }
    Ok(())
}

/// The timers the general path keeps for window `w` with the default event-time
/// trigger: the firing at its max timestamp while `pending`, and the cleanup.
pub(crate) fn event_time_timers(w: &TimeWindow, lateness: Millis, pending: bool) -> TimerSet {
    let mut t = TimerSet::default();
    if pending {
        t.insert(Domain::Event, w.max_timestamp());
    }
    let cleanup = event_cleanup_time(w, lateness);
    if cleanup != Millis::MAX {
        t.insert(Domain::Event, cleanup);
    }
    t
}

/// Whether window `w` is still to fire at its max timestamp (see
/// [`event_time_timers`]).
pub(crate) fn is_pending(w: &TimeWindow, timers: &TimerSet) -> bool {
    timers.contains(Domain::Event, w.max_timestamp())
}
