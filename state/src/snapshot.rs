//! Snapshots of keyed state and timers per key group, for checkpoints (semantics.md
//! §4): each key group's entries and timers are one blob, so a restore with another
//! parallelism hands every subtask exactly the key groups it owns.

use std::collections::BTreeMap;

use brook_core::checkpoint::{RestoredState, StateSnapshot};
use brook_core::keys::{KeyGroup, KeyGroupRange};
use brook_core::time::Millis;
use serde::{Deserialize, Serialize};

use crate::backend::KeyedStateBackend;
use crate::rocksdb::RocksDbStateBackend;
use crate::timers::{TimeDomain, Timer, TimerService};
use crate::{Result, StateError};

/// Version of the key-group blob format.
const FORMAT_VERSION: u8 = 1;

/// One key group's state: `(state, full key, value)` entries and timers
/// `(event time?, time, key, namespace)`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyGroupState {
    entries: Vec<(String, Vec<u8>, Vec<u8>)>,
    timers: Vec<(bool, Millis, Vec<u8>, Vec<u8>)>,
}

fn key_group_of(full_key: &[u8]) -> KeyGroup {
    match full_key {
        [a, b, ..] => KeyGroup::from(u16::from_be_bytes([*a, *b])),
        _ => 0,
    }
}

fn codec(op: &'static str) -> impl FnOnce(bincode::Error) -> StateError {
    move |source| StateError::Codec {
        state: "snapshot".into(),
        op,
        source,
    }
}

/// Writes every entry of `backend` and every timer of `timers` into `snap`: timers
/// one blob per key group; entries as the backend's native files when the snapshot
/// offers storage (a checkpoint) and the backend has a native format (RocksDB:
/// incremental), else in the key-group blobs. `key_groups` are the subtask's.
///
/// # Errors
/// [`StateError::Codec`] if a blob cannot be encoded; the backend's error when its
/// native snapshot fails.
pub fn snapshot_keyed(
    backend: &mut dyn KeyedStateBackend,
    timers: &TimerService,
    snap: &mut StateSnapshot,
    key_groups: KeyGroupRange,
) -> Result<()> {
    let mut groups: BTreeMap<KeyGroup, KeyGroupState> = BTreeMap::new();
    let native = match snap.storage().cloned() {
        Some(storage) => backend.snapshot_native(&storage, key_groups)?,
        None => None,
    };
    match native {
        Some(n) => snap.put_native(n),
        None => backend.for_each_entry(&mut |state, key, value| {
            groups.entry(key_group_of(key)).or_default().entries.push((
                state.to_string(),
                key.to_vec(),
                value.to_vec(),
            ));
        }),
    }
    for (domain, t) in timers.iter() {
        groups.entry(t.key_group).or_default().timers.push((
            domain == TimeDomain::EventTime,
            t.timestamp,
            t.key.clone(),
            t.namespace.clone(),
        ));
    }
    for (kg, g) in groups {
        let mut blob = vec![FORMAT_VERSION];
        bincode::serialize_into(&mut blob, &g).map_err(codec("encode"))?;
        snap.put_keyed(kg, &blob);
    }
    Ok(())
}

/// Puts the entries and timers of the restored key groups back: native files taken
/// over by the backend where it can (same format and key groups), else read entry by
/// entry; then the key-group blobs.
///
/// # Errors
/// [`StateError::Codec`] for a blob of another format or a damaged one;
/// [`StateError::RocksDb`] when native files cannot be read.
pub fn restore_keyed(
    restored: &RestoredState,
    backend: &mut dyn KeyedStateBackend,
    timers: &mut TimerService,
) -> Result<()> {
    restore_native(restored, backend)?;
    for (kg, blob) in restored.keyed() {
        let Some((&version, rest)) = blob.split_first() else {
            continue;
        };
        if version != FORMAT_VERSION {
            return Err(StateError::Codec {
                state: "snapshot".into(),
                op: "decode",
                source: Box::new(bincode::ErrorKind::Custom(format!(
                    "key group {kg}: format version {version}, this brook reads {FORMAT_VERSION}"
                ))),
            });
        }
        let g: KeyGroupState = bincode::deserialize(rest).map_err(codec("decode"))?;
        for (state, key, value) in g.entries {
            backend.put(&state, &key, value);
        }
        for (event, timestamp, key, namespace) in g.timers {
            let domain = if event {
                TimeDomain::EventTime
            } else {
                TimeDomain::ProcessingTime
            };
            timers.register(
                domain,
                Timer {
                    timestamp,
                    key_group: kg,
                    key,
                    namespace,
                },
            );
        }
    }
    Ok(())
}

/// Restores the native keyed state of `restored` into `backend` (see
/// [`restore_keyed`]); operators that keep timers elsewhere call this and read the
/// blobs themselves.
///
/// # Errors
/// [`StateError::RocksDb`] when native files cannot be read, or the restore lacks the
/// checkpoint directory or the key groups.
pub fn restore_native(restored: &RestoredState, backend: &mut dyn KeyedStateBackend) -> Result<()> {
    let (native, root) = restored.native();
    if native.is_empty() {
        return Ok(());
    }
    let (Some(root), Some(range)) = (root, restored.key_groups()) else {
        return Err(StateError::RocksDb {
            path: Default::default(),
            op: "restore",
            message: "native state without its checkpoint directory or key groups".into(),
        });
    };
    if backend.restore_native(native, root, range)? {
        return Ok(());
    }
    for n in native {
        RocksDbStateBackend::read_native(n, root, range, &mut |state, key, value| {
            backend.put(state, key, value.to_vec())
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{compose_key, MemoryStateBackend};
    use brook_core::keys::key_group_range;

    #[test]
    fn state_and_timers_survive_a_restore_at_another_parallelism() {
        let mut b = MemoryStateBackend::new();
        let mut t = TimerService::new();
        let mut k = Vec::new();
        for kg in 0..128u32 {
            compose_key(&mut k, kg, &[kg as u8], b"ns");
            b.put("count", &k, vec![kg as u8; 3]);
            t.register(
                TimeDomain::EventTime,
                Timer {
                    timestamp: i64::from(kg),
                    key_group: kg,
                    key: vec![kg as u8],
                    namespace: Vec::new(),
                },
            );
        }
        let mut snap = StateSnapshot::new();
        snapshot_keyed(&mut b, &t, &mut snap, key_group_range(128, 1, 0)).unwrap();
        let mut total = 0;
        for i in 0..3 {
            let range = key_group_range(128, 3, i);
            let r = RestoredState::collect([&snap], range);
            let (mut b2, mut t2) = (MemoryStateBackend::new(), TimerService::new());
            restore_keyed(&r, &mut b2, &mut t2).unwrap();
            b2.for_each_entry(&mut |_, key, v| {
                assert!(range.contains(key_group_of(key)));
                assert_eq!(v[0] as u32, key_group_of(key));
            });
            assert_eq!(b2.len(), t2.len(TimeDomain::EventTime));
            total += b2.len();
        }
        assert_eq!(total, 128);
    }
}
