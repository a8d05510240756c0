//! Which partition a record goes to.
//!
//! Keyed records use Kafka's default partitioner, `toPositive(murmur2(key)) % N`, where
//! `murmur2` is MurmurHash2 (32-bit) with Kafka's seed `0x9747b28c` and `toPositive`
//! clears the sign bit, so a key lands on the same partition number as it would in
//! Kafka with the same partition count. Keyless records are spread round-robin.

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

#[cfg(test)]
mod tests {
    use super::*;

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
