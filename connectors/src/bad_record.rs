//! Bad records in sources: the readers hand raw bytes to the job's
//! [`brook_core::bad_record::BadRecords`] handler (semantics.md §5).

use brook_core::bad_record::BadRecords;
use brook_core::operator::OpResult;

/// Handles one bad record read as bytes: `fail` returns the error naming `position`,
/// `skip` and `dead-letter` count it (and write it out).
pub(crate) fn handle(bad: &BadRecords, raw: &[u8], position: String, reason: String) -> OpResult {
    bad.handle(&String::from_utf8_lossy(raw), &position, &reason)
}
