//! What happens to a record that cannot be parsed or evaluated (semantics.md §5):
//! `fail` stops the job naming the record's position, `skip` drops and counts it,
//! `dead-letter` writes the raw record, its position and the reason to a dead-letter
//! output and counts it. Never a panic.

use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::operator::OperatorError;

/// The policy for bad records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BadRecordPolicy {
    /// Stop the job with an error naming the record's position (the default without
    /// a dead-letter output).
    #[default]
    Fail,
    /// Drop the record and count it.
    Skip,
    /// Write the record to the dead-letter output and count it.
    DeadLetter,
}

impl FromStr for BadRecordPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fail" => Ok(BadRecordPolicy::Fail),
            "skip" => Ok(BadRecordPolicy::Skip),
            "dead-letter" | "dead_letter" => Ok(BadRecordPolicy::DeadLetter),
            _ => Err(format!("{s:?} is not one of fail, skip, dead-letter")),
        }
    }
}

impl fmt::Display for BadRecordPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadRecordPolicy::Fail => "fail",
            BadRecordPolicy::Skip => "skip",
            BadRecordPolicy::DeadLetter => "dead-letter",
        })
    }
}

/// Counts of bad records, shared by all subtasks and clones of a handler.
#[derive(Debug, Default)]
pub struct BadRecordCounts {
    skipped: AtomicU64,
    dead_lettered: AtomicU64,
}

impl BadRecordCounts {
    /// Records dropped under `skip`.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Records written to the dead-letter output.
    pub fn dead_lettered(&self) -> u64 {
        self.dead_lettered.load(Ordering::Relaxed)
    }

    /// Bad records that did not stop the job.
    pub fn total(&self) -> u64 {
        self.skipped() + self.dead_lettered()
    }
}

/// A shared dead-letter output: JSON lines `{"raw", "position", "reason"}`.
pub type DeadLetterWriter = Arc<Mutex<Box<dyn Write + Send>>>;

/// Applies a [`BadRecordPolicy`]; cheap to clone (clones share counts and output).
#[derive(Clone)]
pub struct BadRecords {
    policy: BadRecordPolicy,
    counts: Arc<BadRecordCounts>,
    dead_letter: Option<DeadLetterWriter>,
    warned: Arc<AtomicBool>,
}

impl fmt::Debug for BadRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BadRecords")
            .field("policy", &self.policy)
            .field("counts", &self.counts)
            .finish()
    }
}

impl Default for BadRecords {
    fn default() -> Self {
        BadRecords::new(BadRecordPolicy::Fail, Arc::default(), None)
    }
}

impl BadRecords {
    /// A handler. `DeadLetter` without a writer behaves as `Skip` but still counts
    /// the records as dead-lettered; callers should supply one.
    pub fn new(
        policy: BadRecordPolicy,
        counts: Arc<BadRecordCounts>,
        dead_letter: Option<DeadLetterWriter>,
    ) -> Self {
        BadRecords {
            policy,
            counts,
            dead_letter,
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stop at the first bad record (the default).
    pub fn fail() -> Self {
        Self::new(BadRecordPolicy::Fail, Arc::default(), None)
    }

    /// Drop and count bad records.
    pub fn skip() -> Self {
        Self::new(BadRecordPolicy::Skip, Arc::default(), None)
    }

    /// Append bad records to the JSON-lines file at `path` (created if missing).
    ///
    /// # Errors
    /// The file cannot be opened for appending.
    pub fn dead_letter_file(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let w: Box<dyn Write + Send> = Box::new(f);
        Ok(Self::new(
            BadRecordPolicy::DeadLetter,
            Arc::default(),
            Some(Arc::new(Mutex::new(w))),
        ))
    }

    /// The policy.
    pub fn policy(&self) -> BadRecordPolicy {
        self.policy
    }

    /// The shared counts.
    pub fn counts(&self) -> &Arc<BadRecordCounts> {
        &self.counts
    }

    /// Handles one bad record: `raw` as read, `position` such as `sales.jsonl:17`,
    /// `reason` what was wrong.
    ///
    /// # Errors
    /// [`OperatorError::BadRecord`] under `fail`; an I/O error writing the dead letter.
    pub fn handle(&self, raw: &str, position: &str, reason: &str) -> Result<(), OperatorError> {
        if self.policy != BadRecordPolicy::Fail && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(%position, %reason, policy = %self.policy, "bad record (further ones are only counted)");
        }
        match self.policy {
            BadRecordPolicy::Fail => Err(OperatorError::BadRecord {
                position: Some(position.to_string()),
                reason: reason.to_string(),
            }),
            BadRecordPolicy::Skip => {
                self.counts.skipped.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            BadRecordPolicy::DeadLetter => {
                if let Some(w) = &self.dead_letter {
                    let mut line =
                        serde_json::json!({ "position": position, "raw": raw, "reason": reason })
                            .to_string();
                    line.push('\n');
                    // One write of a whole line, so lines of subtasks (and of other
                    // processes appending to the file) never interleave.
                    let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                    w.write_all(line.as_bytes())
                        .and_then(|()| w.flush())
                        .map_err(OperatorError::other)?;
                }
                self.counts.dead_lettered.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn policies() {
        let counts = Arc::new(BadRecordCounts::default());
        let fail = BadRecords::new(BadRecordPolicy::Fail, Arc::clone(&counts), None);
        let e = fail.handle("x", "in.jsonl:3", "not JSON").unwrap_err();
        assert_eq!(e.to_string(), "bad record at in.jsonl:3: not JSON");
        BadRecords::new(BadRecordPolicy::Skip, Arc::clone(&counts), None)
            .handle("x", "p", "r")
            .unwrap();
        let buf = Buf::default();
        let w: DeadLetterWriter = Arc::new(Mutex::new(Box::new(buf.clone())));
        BadRecords::new(BadRecordPolicy::DeadLetter, Arc::clone(&counts), Some(w))
            .handle("{oops", "in.jsonl:9", "EOF")
            .unwrap();
        assert_eq!(counts.skipped(), 1);
        assert_eq!(counts.dead_lettered(), 1);
        assert_eq!(counts.total(), 2);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "{\"position\":\"in.jsonl:9\",\"raw\":\"{oops\",\"reason\":\"EOF\"}\n"
        );
        assert_eq!(
            "dead-letter".parse::<BadRecordPolicy>().unwrap(),
            BadRecordPolicy::DeadLetter
        );
    }
}
