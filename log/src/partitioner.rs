//! Which partition a record goes to.
//!
//! Keyed records use Kafka's default partitioner, `toPositive(murmur2(key)) % N`, where
//! `murmur2` is MurmurHash2 (32-bit) with Kafka's seed `0x9747b28c` and `toPositive`
//! clears the sign bit, so a key lands on the same partition number as it would in
//! Kafka with the same partition count.
//!
//! Keyless records use a sticky partitioner, as Kafka's default for them since 2.4
//! (KIP-480; KIP-794 in 3.3) and librdkafka's `sticky.partitioning.linger.ms`: every
//! keyless record of one batch (one append) goes to the same partition, the next
//! batch to another, starting at a random partition per producer, so that short-lived
//! producers (one `brook produce` per line) do not all land on partition 0. With equal
//! load Kafka's uniform sticky partitioner spreads batches evenly; brook steps to the
//! next partition, which is exactly even.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};

/// Kafka's `murmur2` of `key`, as the signed 32-bit value Kafka's Java code computes.
pub fn murmur2(key: &[u8]) -> i32 {
    murmur2::murmur2(key, murmur2::KAFKA_SEED) as i32
}

/// The partition (of `partitions`) for `key`, as Kafka's default partitioner.
///
/// `partitions` must be positive.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    debug_assert!(partitions > 0);
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions.max(1)
}

/// Where the keyless records of a producer's batches go (see the module doc).
///
/// Shared by the appends of one producer (a [`crate::Topic`] in one process); two
/// batches appended at the same moment may share a partition, which only evens out
/// later.
#[derive(Debug)]
pub struct StickyPartitioner {
    /// The partition of the current batch, before `% partitions`.
    current: AtomicU32,
}

impl StickyPartitioner {
    /// Starting at partition `start` (modulo the partition count); tests inject it.
    pub fn starting_at(start: u32) -> Self {
        StickyPartitioner {
            current: AtomicU32::new(start),
        }
    }

    /// Starting at a random partition: std's per-process random hash keys, so no
    /// extra source of randomness is needed.
    pub fn random() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u8(0);
        Self::starting_at(h.finish() as u32)
    }

    /// The partition (of `partitions`, positive) the current batch's keyless records
    /// go to.
    pub fn partition(&self, partitions: u32) -> u32 {
        self.current.load(Ordering::Relaxed) % partitions.max(1)
    }

    /// A batch with keyless records was appended: the next goes to the next partition.
    pub fn batch_done(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_batches_move_to_the_next_partition_from_the_start() {
        let s = StickyPartitioner::starting_at(6);
        // One batch stays on one partition however often it asks.
        assert_eq!(s.partition(4), 2);
        assert_eq!(s.partition(4), 2);
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(s.partition(4));
            s.batch_done();
        }
        assert_eq!(seen, [2, 3, 0, 1, 2, 3, 0, 1]);
        // u32 wrap-around only changes which partition comes next, never its range.
        let s = StickyPartitioner::starting_at(u32::MAX);
        s.batch_done();
        assert!(s.partition(3) < 3);
    }

    /// Producers do not all start at the same partition (failing by chance needs 32
    /// random starts equal modulo 1024: probability 1024^-31).
    #[test]
    fn random_starts_differ() {
        let starts: std::collections::BTreeSet<u32> = (0..32)
            .map(|_| StickyPartitioner::random().partition(1024))
            .collect();
        assert!(starts.len() > 1, "{starts:?}");
    }

    /// The published test vectors of Kafka's `Utils.murmur2` (its `UtilsTest`).
    #[test]
    fn murmur2_matches_kafka_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key), expected, "{}", String::from_utf8_lossy(key));
        }
    }

    /// Partitions computed by hand from the vectors above: `(h & 0x7fffffff) % n`.
    #[test]
    fn keys_land_where_kafka_puts_them() {
        // -973932308 & 0x7fffffff = 1173551340; -790332482 & .. = 1357151166;
        // 479470107 stays; -58897971 & .. = 2088585677.
        assert_eq!(partition_for_key(b"21", 3), 1_173_551_340 % 3);
        assert_eq!(partition_for_key(b"21", 3), 0);
        assert_eq!(partition_for_key(b"foobar", 3), 1_357_151_166 % 3);
        assert_eq!(partition_for_key(b"foobar", 3), 0);
        assert_eq!(partition_for_key(b"abc", 7), 479_470_107 % 7);
        assert_eq!(partition_for_key(b"abc", 7), 4);
        assert_eq!(
            partition_for_key(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 10),
            7
        );
        for n in 1..50 {
            assert!(partition_for_key(b"a-little-bit-long-string", n) < n);
        }
    }
}
