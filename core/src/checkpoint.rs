//! Checkpoint vocabulary (semantics.md §4): the in-band [`CheckpointBarrier`], and what
//! operators, sources and sinks hand to a checkpoint and get back on restore.
//!
//! Keyed state is written per key group ([`StateSnapshot::put_keyed`]), so a restore
//! with another parallelism gives each subtask exactly the key groups it now owns.
//! Operator (non-keyed) state is a list of blobs; on restore every subtask sees the
//! blobs of all former subtasks (Flink's union list state) and keeps what it needs.

use std::collections::BTreeMap;

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

/// The state one operator subtask puts into a checkpoint.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateSnapshot {
    keyed: BTreeMap<KeyGroup, Vec<u8>>,
    operator: Option<Vec<u8>>,
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

    /// Whether nothing was stored.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_none()
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
        StateSnapshot { keyed, operator }
    }
}

/// What one operator subtask gets back on restore: the keyed state of the key groups
/// it owns now (from whichever former subtask owned them) and the operator state of
/// every former subtask.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoredState {
    keyed: BTreeMap<KeyGroup, Vec<u8>>,
    operator: Vec<Vec<u8>>,
}

impl RestoredState {
    /// Collects, from the snapshots of all former subtasks, what a subtask owning
    /// `range` gets.
    pub fn collect<'a>(
        snapshots: impl IntoIterator<Item = &'a StateSnapshot>,
        range: KeyGroupRange,
    ) -> Self {
        let mut r = RestoredState::default();
        for s in snapshots {
            for (kg, b) in &s.keyed {
                if range.contains(*kg) {
                    r.keyed.entry(*kg).or_default().extend_from_slice(b);
                }
            }
            if let Some(o) = &s.operator {
                r.operator.push(o.clone());
            }
        }
        r
    }

    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_empty()
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
