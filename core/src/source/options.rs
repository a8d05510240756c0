//! What the record sources (the log, Kafka, files) share about their settings:
//! whether the input ends, and what happens to a record that does not decode.

use std::sync::Arc;

use crate::bad_record::{BadRecordCounts, BadRecords};

/// A source's shared settings, held in a field `options` of the source and set through
/// its builder methods ([`source_option_methods!`](crate::source_option_methods) adds
/// the bad-record ones).
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// Whether the input ends: at its end as each reader sees it when it starts
    /// (true), or never, the reader waiting for what is appended (false, the default).
    pub bounded: bool,
    /// What happens to a record that does not decode (semantics.md §5); default fail.
    pub bad_records: BadRecords,
}

impl SourceOptions {
    /// The counts of skipped and dead-lettered records, shared by every reader (and
    /// every clone) of the source.
    pub fn bad_record_counter(&self) -> Arc<BadRecordCounts> {
        Arc::clone(self.bad_records.counts())
    }
}

/// Adds a source's bad-record builder methods, `on_bad_record(BadRecords)` and
/// `bad_record_counter()`, inside an `impl` block of a source type that keeps a
/// [`SourceOptions`] in a field named `options`; one definition, so the log, Kafka and
/// file sources document and behave alike.
#[macro_export]
macro_rules! source_option_methods {
    () => {
        /// What to do with a record that does not decode (semantics.md §5); the
        /// error and the dead-letter line name its position (see the source's docs).
        /// Default: fail.
        pub fn on_bad_record(mut self, bad: $crate::bad_record::BadRecords) -> Self {
            self.options.bad_records = bad;
            self
        }

        /// The counts of skipped and dead-lettered records of this source (all its
        /// subtasks and clones).
        pub fn bad_record_counter(&self) -> ::std::sync::Arc<$crate::bad_record::BadRecordCounts> {
            self.options.bad_record_counter()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_record::BadRecordPolicy;

    #[test]
    fn a_source_follows_its_input_and_fails_on_bad_records_by_default() {
        let o = SourceOptions::default();
        assert!(!o.bounded);
        assert_eq!(o.bad_records.policy(), BadRecordPolicy::Fail);
    }

    #[test]
    fn clones_share_the_bad_record_counts() {
        let o = SourceOptions {
            bounded: true,
            bad_records: BadRecords::skip(),
        };
        let clone = o.clone();
        assert!(clone
            .bad_records
            .handle("{", "t/0@3", "invalid JSON")
            .is_ok());
        assert_eq!(o.bad_record_counter().skipped(), 1);
    }
}
