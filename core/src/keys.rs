//! Key groups: how keyed state and keyed records are spread over parallel subtasks.
//!
//! As Flink's `KeyGroupRangeAssignment`: a key hashes to one of `max_parallelism` key
//! groups; subtask `i` of `p` owns a contiguous range of key groups. The key-group count
//! (`max_parallelism`) is stored with the job and its checkpoints and never re-derived,
//! so state follows its keys when the parallelism changes.
//!
//! Keys hash with XXH64 (seed 0) over their `std::hash::Hash` encoding, which is stable
//! for the standard types (integers, strings, tuples and vectors of them).

use std::hash::{Hash, Hasher};

/// The default number of key groups (Flink's default lower bound is 128 too).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The largest number of key groups (as Flink's `UPPER_BOUND_MAX_PARALLELISM`).
pub const MAX_MAX_PARALLELISM: u32 = 1 << 15;

/// A key group id in `0..max_parallelism`.
pub type KeyGroup = u32;

/// A contiguous, inclusive range of key groups owned by one subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    /// First key group.
    pub start: KeyGroup,
    /// Last key group (inclusive); `end < start` for an empty range.
    pub end: KeyGroup,
}

impl KeyGroupRange {
    /// Whether `kg` is in the range.
    pub fn contains(&self, kg: KeyGroup) -> bool {
        self.start <= kg && kg <= self.end
    }

    /// Whether the two ranges share a key group.
    pub fn overlaps(&self, other: KeyGroupRange) -> bool {
        !self.is_empty() && !other.is_empty() && self.start <= other.end && other.start <= self.end
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        if self.end < self.start {
            0
        } else {
            self.end - self.start + 1
        }
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stable 64-bit hash of a key.
pub fn hash_key<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(0);
    key.hash(&mut h);
    h.finish()
}

/// The key group of a key hash: `hash mod max_parallelism`.
#[inline]
pub fn key_group_for_hash(hash: u64, max_parallelism: u32) -> KeyGroup {
    let m = u64::from(max_parallelism.max(1));
    // The usual key-group counts are powers of two: a mask instead of a division.
    if m.is_power_of_two() {
        (hash & (m - 1)) as KeyGroup
    } else {
        (hash % m) as KeyGroup
    }
}

/// The key group of a key.
pub fn key_group_for_key<K: Hash + ?Sized>(key: &K, max_parallelism: u32) -> KeyGroup {
    key_group_for_hash(hash_key(key), max_parallelism)
}

/// The subtask (of `parallelism`) that owns key group `kg`, as Flink's
/// `computeOperatorIndexForKeyGroup`: `kg * parallelism / max_parallelism`.
#[inline]
pub fn subtask_for_key_group(max_parallelism: u32, parallelism: u32, kg: KeyGroup) -> u32 {
    let m = u64::from(max_parallelism.max(1));
    let x = u64::from(kg) * u64::from(parallelism);
    if m.is_power_of_two() {
        (x >> m.trailing_zeros()) as u32
    } else {
        (x / m) as u32
    }
}

/// The key groups subtask `index` of `parallelism` owns, as Flink's
/// `computeKeyGroupRangeForOperatorIndex`.
pub fn key_group_range(max_parallelism: u32, parallelism: u32, index: u32) -> KeyGroupRange {
    let (m, p, i) = (
        u64::from(max_parallelism),
        u64::from(parallelism.max(1)),
        u64::from(index),
    );
    let start = (i * m).div_ceil(p);
    let end = ((i + 1) * m - 1) / p;
    KeyGroupRange {
        start: start as u32,
        end: end as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ranges_partition_the_key_groups(max in 1u32..2000, par_seed in 1u32..2000) {
            let par = 1 + par_seed % max;
            let mut next = 0;
            for i in 0..par {
                let r = key_group_range(max, par, i);
                prop_assert_eq!(r.start, next);
                prop_assert!(!r.is_empty());
                for kg in [r.start, r.end] {
                    prop_assert_eq!(subtask_for_key_group(max, par, kg), i);
                }
                next = r.end + 1;
            }
            prop_assert_eq!(next, max);
        }

        #[test]
        fn a_key_moves_only_when_its_group_changes_owner(key in any::<u64>(), max in 1u32..512, p1 in 1u32..64, p2 in 1u32..64) {
            let kg = key_group_for_key(&key, max);
            prop_assert!(kg < max);
            let (p1, p2) = (p1.min(max), p2.min(max));
            prop_assert!(key_group_range(max, p1, subtask_for_key_group(max, p1, kg)).contains(kg));
            prop_assert!(key_group_range(max, p2, subtask_for_key_group(max, p2, kg)).contains(kg));
        }
    }

    #[test]
    fn hashing_is_stable() {
        // Pinned: a change here would move every stored key to another key group.
        assert_eq!(hash_key("mia"), hash_key(&"mia".to_string()));
        assert_eq!(
            key_group_for_key("mia", 128),
            key_group_for_key(&String::from("mia"), 128)
        );
        assert_eq!(
            key_group_range(128, 3, 0),
            KeyGroupRange { start: 0, end: 42 }
        );
        assert_eq!(
            key_group_range(128, 3, 1),
            KeyGroupRange { start: 43, end: 85 }
        );
        assert_eq!(
            key_group_range(128, 3, 2),
            KeyGroupRange {
                start: 86,
                end: 127
            }
        );
    }
}
