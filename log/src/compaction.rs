//! Log compaction's decisions (`cleanup.policy=compact`), as Kafka's log cleaner:
//! which segments may be cleaned, whether a pass is due, and which records survive.
//! Pure functions over record facts (key, offset, tombstone, kind); the cleaner
//! ([`crate::cleaner`]) reads and writes the files.
//!
//! The rules (`docs/semantics.md` §1, after Kafka's `LogCleaner`):
//! - only closed segments are cleaned, and only a prefix of them that ends at or before
//!   the last stable offset (records of undecided transactions are never touched) and
//!   whose newest record is at least `min.compaction.lag.ms` old;
//! - a data record survives when it is the latest data record of its key in the
//!   cleaned range; a record without a key is removed (Kafka's cleaner drops them too);
//! - a tombstone (null value) that is the latest of its key survives until its
//!   segment was first cleaned `delete.retention.ms` ago, then it is removed;
//! - records of aborted transactions are removed; transaction markers (control
//!   records) are kept.

use std::collections::HashMap;

/// What kind of record the cleaner is looking at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A plain record or one of a committed transaction.
    Data,
    /// A record of an aborted transaction.
    Aborted,
    /// A transaction marker.
    Control,
}

/// The facts of one record the decisions need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    /// Its key (`None`: keyless).
    pub(crate) key: Option<&'a [u8]>,
    /// Its offset.
    pub(crate) offset: u64,
    /// Whether its value is null.
    pub(crate) tombstone: bool,
    /// Data, aborted or control.
    pub(crate) kind: Kind,
}

/// The latest offset of every key in the cleaned range (Kafka's offset map). Keys are
/// copied: the map outlives the read buffers.
#[derive(Debug, Default)]
pub(crate) struct OffsetMap(HashMap<Box<[u8]>, u64>);

impl OffsetMap {
    /// Notes a record, read in offset order.
    pub(crate) fn note(&mut self, e: &Entry<'_>) {
        if let (Kind::Data, Some(key)) = (e.kind, e.key) {
            match self.0.get_mut(key) {
                Some(latest) => *latest = (*latest).max(e.offset),
                None => {
                    self.0.insert(key.into(), e.offset);
                }
            }
        }
    }

    /// The latest offset of `key`, if it has a data record in the range.
    pub(crate) fn latest(&self, key: &[u8]) -> Option<u64> {
        self.0.get(key).copied()
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Whether a record survives a pass, given the offset map of the cleaned range and
/// whether the delete horizon of its segment has passed (tombstones are then removed).
pub(crate) fn survives(e: &Entry<'_>, map: &OffsetMap, tombstones_expired: bool) -> bool {
    match e.kind {
        Kind::Control => true,
        Kind::Aborted => false,
        Kind::Data => {
            let Some(key) = e.key else {
                return false;
            };
            let latest = map.latest(key).is_none_or(|o| o <= e.offset);
            latest && !(e.tombstone && tombstones_expired)
        }
    }
}

/// What the cleaner needs to know of a closed segment to choose the cleanable range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentFacts {
    /// The offset after its last record (or gap).
    pub(crate) next_offset: u64,
    /// Its newest record's timestamp (ms).
    pub(crate) max_timestamp: i64,
}

/// How many of the closed segments (oldest first) may be cleaned at `now`: the
/// longest prefix whose segments end at or before the last stable offset `stable`
/// and whose newest record is at least `min_lag_ms` old (Kafka's first uncleanable
/// offset).
pub(crate) fn cleanable_count(
    closed: &[SegmentFacts],
    stable: u64,
    now: i64,
    min_lag_ms: i64,
) -> usize {
    closed
        .iter()
        .take_while(|s| {
            s.next_offset <= stable && s.max_timestamp <= now.saturating_sub(min_lag_ms)
        })
        .count()
}

/// Whether a pass is due: the not yet cleaned ("dirty") bytes are at least
/// `min_dirty_ratio` of the cleanable bytes (Kafka's `min.cleanable.dirty.ratio`), or
/// a cleaned segment holds tombstones whose delete horizon has passed.
pub(crate) fn pass_due(
    clean_bytes: u64,
    dirty_bytes: u64,
    min_dirty_ratio: f64,
    tombstones_due: bool,
) -> bool {
    if tombstones_due {
        return true;
    }
    let total = clean_bytes + dirty_bytes;
    dirty_bytes > 0 && dirty_bytes as f64 >= min_dirty_ratio * total as f64
}

/// The offsets that survive one pass over `entries` (in offset order), with
/// `expired(offset)` saying whether a record's delete horizon has passed.
#[cfg(test)]
pub(crate) fn compact(entries: &[Entry<'_>], expired: impl Fn(u64) -> bool) -> Vec<u64> {
    let mut map = OffsetMap::default();
    for e in entries {
        map.note(e);
    }
    entries
        .iter()
        .filter(|e| survives(e, &map, expired(e.offset)))
        .map(|e| e.offset)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A record of the model: key (small alphabet, `None` keyless), tombstone, kind.
    #[derive(Debug, Clone)]
    struct Rec {
        key: Option<u8>,
        tombstone: bool,
        kind: Kind,
    }

    fn arb_rec() -> impl Strategy<Value = Rec> {
        (
            proptest::option::weighted(0.95, 0u8..6),
            proptest::bool::weighted(0.2),
            prop_oneof![8 => Just(Kind::Data), 1 => Just(Kind::Aborted), 1 => Just(Kind::Control)],
        )
            .prop_map(|(key, tombstone, kind)| Rec {
                key,
                tombstone,
                kind,
            })
    }

    /// The model: the table a log means (key → its last data record), read naively.
    fn table(recs: &[(u64, &Rec)]) -> BTreeMap<u8, (u64, bool)> {
        let mut t = BTreeMap::new();
        for (offset, r) in recs {
            if let (Kind::Data, Some(k)) = (r.kind, r.key) {
                t.insert(k, (*offset, r.tombstone));
            }
        }
        t
    }

    proptest! {
        #[test]
        fn compaction_keeps_exactly_the_latest_record_per_key(
            recs in proptest::collection::vec(arb_rec(), 0..80),
            gaps in proptest::collection::vec(1u64..4, 80),
            horizon in 0u64..200,
        ) {
            // Offsets with gaps, as after an earlier pass.
            let mut offset = 0;
            let with_offsets: Vec<(u64, &Rec)> = recs.iter().zip(&gaps).map(|(r, g)| {
                offset += g;
                (offset, r)
            }).collect();
            let keys: Vec<[u8; 1]> = with_offsets.iter().map(|(_, r)| [r.key.unwrap_or(0)]).collect();
            let entries: Vec<Entry<'_>> = with_offsets.iter().zip(&keys).map(|((o, r), k)| Entry {
                key: r.key.map(|_| &k[..]),
                offset: *o,
                tombstone: r.tombstone,
                kind: r.kind,
            }).collect();
            let expired = |o: u64| o < horizon;
            let kept = compact(&entries, expired);

            // The model's answer: the latest data record per key, minus tombstones past
            // their horizon, plus every marker.
            let model = table(&with_offsets);
            let mut want: Vec<u64> = model
                .values()
                .filter(|(o, tomb)| !(*tomb && expired(*o)))
                .map(|(o, _)| *o)
                .collect();
            want.extend(with_offsets.iter().filter(|(_, r)| r.kind == Kind::Control).map(|(o, _)| *o));
            want.sort_unstable();
            prop_assert_eq!(&kept, &want);

            // Reading the compacted log as a table gives the same table, except for
            // deleted keys whose tombstone is gone (absent either way).
            let survivors: Vec<(u64, &Rec)> = with_offsets.iter().filter(|(o, _)| kept.contains(o)).copied().collect();
            let live = |t: BTreeMap<u8, (u64, bool)>| -> BTreeMap<u8, u64> {
                t.into_iter().filter(|(_, (_, tomb))| !tomb).map(|(k, (o, _))| (k, o)).collect()
            };
            prop_assert_eq!(live(table(&survivors)), live(model));

            // A second pass changes nothing (the cleaner may run again after a crash).
            let again: Vec<Entry<'_>> = entries.iter().filter(|e| kept.contains(&e.offset)).copied().collect();
            prop_assert_eq!(compact(&again, expired), kept);
        }
    }

    #[test]
    fn the_cleanable_range_stops_at_young_or_unstable_segments() {
        let seg = |next_offset, max_timestamp| SegmentFacts {
            next_offset,
            max_timestamp,
        };
        let closed = [seg(10, 100), seg(20, 200), seg(30, 300)];
        assert_eq!(cleanable_count(&closed, 100, 1000, 0), 3);
        // An undecided transaction from offset 15 on: only the first segment.
        assert_eq!(cleanable_count(&closed, 15, 1000, 0), 1);
        // min.compaction.lag.ms 750 at 1000: records newer than 250 stay.
        assert_eq!(cleanable_count(&closed, 100, 1000, 750), 2);
    }

    #[test]
    fn a_pass_is_due_by_dirty_ratio_or_expired_tombstones() {
        assert!(!pass_due(100, 0, 0.0, false));
        assert!(pass_due(50, 50, 0.5, false));
        assert!(!pass_due(60, 40, 0.5, false));
        assert!(pass_due(100, 0, 0.5, true));
    }
}
