//! Moving a consumer group's committed offsets by hand, as Kafka's
//! `kafka-consumer-groups --reset-offsets`: to the earliest or latest offset, to the
//! first offset at or after a time, or to an explicit offset (kept within the log, as
//! Kafka's tool does). The target of each partition is decided by [`target`], a pure
//! function; [`crate::Log::reset_offsets`] gathers the facts and commits.

/// Where to move a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The log start offset (`--to-earliest`).
    Earliest,
    /// The log end offset (`--to-latest`).
    Latest,
    /// The first offset whose record has a timestamp at or after this time (ms since
    /// the epoch); the log end offset when no record has (`--to-datetime`).
    Timestamp(i64),
    /// This offset, moved into [log start, log end] when outside (`--to-offset`).
    Offset(u64),
}

/// One partition of a reset plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetResetRow {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The group's committed offset before the reset, if any.
    pub current: Option<u64>,
    /// The offset the group gets.
    pub new_offset: u64,
    /// Set when an explicit offset was outside the log and moved to its start or end
    /// (Kafka's tool warns the same way): the offset asked for.
    pub clamped_from: Option<u64>,
}

/// The new offset of a partition whose log spans `[start, end]`; `at_time` is the
/// first offset at or after the time of a [`ResetTo::Timestamp`] (`None`: no record
/// that late). Returns the offset and, for an explicit offset outside the log, the
/// offset asked for.
pub fn target(to: ResetTo, start: u64, end: u64, at_time: Option<u64>) -> (u64, Option<u64>) {
    match to {
        ResetTo::Earliest => (start, None),
        ResetTo::Latest => (end, None),
        ResetTo::Timestamp(_) => (at_time.unwrap_or(end).clamp(start, end), None),
        ResetTo::Offset(o) if o < start => (start, Some(o)),
        ResetTo::Offset(o) if o > end => (end, Some(o)),
        ResetTo::Offset(o) => (o, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_kafkas() {
        assert_eq!(target(ResetTo::Earliest, 3, 9, None), (3, None));
        assert_eq!(target(ResetTo::Latest, 3, 9, None), (9, None));
        assert_eq!(target(ResetTo::Timestamp(5), 3, 9, Some(6)), (6, None));
        // No record at or after the time: the end, as Kafka's tool.
        assert_eq!(target(ResetTo::Timestamp(5), 3, 9, None), (9, None));
        assert_eq!(target(ResetTo::Offset(5), 3, 9, None), (5, None));
        assert_eq!(target(ResetTo::Offset(3), 3, 9, None), (3, None));
        assert_eq!(target(ResetTo::Offset(9), 3, 9, None), (9, None));
        assert_eq!(target(ResetTo::Offset(1), 3, 9, None), (3, Some(1)));
        assert_eq!(target(ResetTo::Offset(100), 3, 9, None), (9, Some(100)));
    }
}
