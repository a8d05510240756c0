//! Checkpoint vocabulary (semantics.md §4): the in-band [`CheckpointBarrier`], and what
//! operators, sources and sinks hand to a checkpoint and get back on restore.
//!
//! Keyed state is written per key group ([`StateSnapshot::put_keyed`]), so a restore
//! with another parallelism gives each subtask exactly the key groups it now owns.
//! Operator (non-keyed) state is a list of blobs; on restore every subtask sees the
//! blobs of all former subtasks (Flink's union list state) and keeps what it needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::keys::{KeyGroup, KeyGroupRange};
use crate::time::Millis;

/// A checkpoint's number: increasing within a job, over restores too.
pub type CheckpointId = u64;

/// Marks a position in a stream: everything before it belongs to checkpoint `id`.
/// Sources inject it between two records; a task with several inputs waits until the
/// barrier arrived on all of them (alignment) before it snapshots its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointBarrier {
    /// The checkpoint.
    pub id: CheckpointId,
    /// When the coordinator triggered it (ms, processing time).
    pub timestamp: Millis,
}

/// Where a checkpoint lets an operator subtask keep files of its own: a state
/// backend's native snapshot (RocksDB's SST files) instead of key-group blobs.
/// Checkpoints offer it; savepoints do not (they are self-contained and portable).
///
/// File references in a [`NativeKeyedState`] are relative to `root`, the directory
/// that holds the job's `chk-<id>` directories and their `shared` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStorage {
    /// The checkpoints directory of the job.
    pub root: PathBuf,
    /// This subtask's own directory for this checkpoint, relative to `root`
    /// (`chk-<id>/<task>-op<vertex>`; not yet created).
    pub private_dir: PathBuf,
    /// Files shared by successive checkpoints, relative to `root` (`shared`): a file
    /// that did not change since an earlier checkpoint is referenced, not copied
    /// (incremental checkpoints). Names there must be unique within the job.
    pub shared_dir: PathBuf,
}

/// Keyed state kept as the files of a state backend's own format (Flink's
/// incremental RocksDB state handle): a restore at the same key groups opens the files
/// as they are; any other restore reads the entries of its key groups out of them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NativeKeyedState {
    /// The backend's format (`rocksdb/1`).
    pub format: String,
    /// The key groups whose entries the files hold.
    pub key_groups: KeyGroupRange,
    /// `(name in the backend's directory, path relative to the checkpoints root)`.
    pub files: Vec<(String, String)>,
    /// Identity of the backend instance that wrote the files, so a restored instance
    /// can share them with its own later checkpoints.
    pub instance: String,
    /// Entries held (over all states).
    pub entries: u64,
}

impl NativeKeyedState {
    /// The files under the shared directory, relative to the checkpoints root.
    pub fn shared_files(&self) -> impl Iterator<Item = &str> {
        self.files
            .iter()
            .map(|(_, p)| p.as_str())
            .filter(|p| p.starts_with("shared/"))
    }
}

/// The state one operator subtask puts into a checkpoint.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateSnapshot {
    keyed: BTreeMap<KeyGroup, Vec<u8>>,
    operator: Option<Vec<u8>>,
    #[serde(default)]
    native: Vec<NativeKeyedState>,
    /// Offered by the checkpoint; not part of the stored snapshot.
    #[serde(skip)]
    storage: Option<SnapshotStorage>,
}

impl StateSnapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores the state of key group `kg` (appended to what is already stored for it).
    pub fn put_keyed(&mut self, kg: KeyGroup, bytes: &[u8]) {
        self.keyed.entry(kg).or_default().extend_from_slice(bytes);
    }

    /// Stores this subtask's operator (non-keyed) state.
    pub fn put_operator(&mut self, bytes: Vec<u8>) {
        self.operator = Some(bytes);
    }

    /// A snapshot whose keyed state may go into files in `storage`.
    pub fn with_storage(storage: SnapshotStorage) -> Self {
        StateSnapshot {
            storage: Some(storage),
            ..Self::default()
        }
    }

    /// Where native snapshots may write files (checkpoints only).
    pub fn storage(&self) -> Option<&SnapshotStorage> {
        self.storage.as_ref()
    }

    /// Stores keyed state written as files of a backend's own format.
    pub fn put_native(&mut self, state: NativeKeyedState) {
        self.native.push(state);
    }

    /// The keyed state stored as native files.
    pub fn native(&self) -> &[NativeKeyedState] {
        &self.native
    }

    /// Whether nothing was stored.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_none() && self.native.is_empty()
    }

    /// The keyed state by key group.
    pub fn keyed(&self) -> &BTreeMap<KeyGroup, Vec<u8>> {
        &self.keyed
    }

    /// The operator state.
    pub fn operator(&self) -> Option<&[u8]> {
        self.operator.as_deref()
    }

    /// Rebuilds a snapshot (when reading a checkpoint).
    pub fn from_parts(keyed: BTreeMap<KeyGroup, Vec<u8>>, operator: Option<Vec<u8>>) -> Self {
        StateSnapshot {
            keyed,
            operator,
            ..Self::default()
        }
    }
}

/// What one operator subtask gets back on restore: the keyed state of the key groups
/// it owns now (from whichever former subtask owned them) and the operator state of
/// every former subtask.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoredState {
    keyed: BTreeMap<KeyGroup, Vec<u8>>,
    operator: Vec<Vec<u8>>,
    native: Vec<NativeKeyedState>,
    root: Option<PathBuf>,
    key_groups: Option<KeyGroupRange>,
}

impl RestoredState {
    /// Collects, from the snapshots of all former subtasks, what a subtask owning
    /// `range` gets.
    pub fn collect<'a>(
        snapshots: impl IntoIterator<Item = &'a StateSnapshot>,
        range: KeyGroupRange,
    ) -> Self {
        let mut r = RestoredState {
            key_groups: Some(range),
            ..RestoredState::default()
        };
        for s in snapshots {
            for (kg, b) in &s.keyed {
                if range.contains(*kg) {
                    r.keyed.entry(*kg).or_default().extend_from_slice(b);
                }
            }
            if let Some(o) = &s.operator {
                r.operator.push(o.clone());
            }
            r.native.extend(
                s.native
                    .iter()
                    .filter(|n| n.key_groups.overlaps(range))
                    .cloned(),
            );
        }
        r
    }

    /// Sets the checkpoints root that native file references are relative to.
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// Native keyed state that holds key groups of this subtask, with the directory
    /// its file references are relative to.
    pub fn native(&self) -> (&[NativeKeyedState], Option<&Path>) {
        (&self.native, self.root.as_deref())
    }

    /// The key groups the restored subtask owns (`None` for a state not made by
    /// [`RestoredState::collect`]).
    pub fn key_groups(&self) -> Option<KeyGroupRange> {
        self.key_groups
    }

    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_empty() && self.native.is_empty()
    }

    /// The keyed state of each key group this subtask owns.
    pub fn keyed(&self) -> impl Iterator<Item = (KeyGroup, &[u8])> {
        self.keyed.iter().map(|(k, v)| (*k, v.as_slice()))
    }

    /// The operator state of every former subtask.
    pub fn operator(&self) -> &[Vec<u8>] {
        &self.operator
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_group_range;

    #[test]
    fn restore_gives_each_subtask_its_key_groups_from_any_former_subtask() {
        // Written by 2 subtasks (key groups 0..64 and 64..128), restored on 3.
        let mut a = StateSnapshot::new();
        let mut b = StateSnapshot::new();
        for kg in 0..128u32 {
            let s = if kg < 64 { &mut a } else { &mut b };
            s.put_keyed(kg as KeyGroup, &[kg as u8]);
        }
        a.put_operator(vec![1]);
        b.put_operator(vec![2]);
        let mut seen = Vec::new();
        for i in 0..3 {
            let r = RestoredState::collect([&a, &b], key_group_range(128, 3, i));
            assert_eq!(r.operator(), &[vec![1], vec![2]]);
            seen.extend(r.keyed().map(|(kg, bytes)| {
                assert_eq!(bytes, &[kg as u8]);
                kg
            }));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..128).map(|k| k as KeyGroup).collect::<Vec<_>>());
    }
}
