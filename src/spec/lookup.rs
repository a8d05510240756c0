//! Lookup tables for `enrich` steps: a file (JSON lines or CSV, read when the step
//! opens) or a log topic (read to its end when the step opens, then followed: rows
//! appended while the job runs update the table).

use std::path::PathBuf;
use std::sync::Arc;

use brook_connectors::csv_row_to_json;
use brook_core::operator::{OpResult, OperatorError};
use brook_log::{IsolationLevel, Partition, ReadLimit};
use brook_operators::enrich::TableSource;
use brook_operators::row::Row;

use super::FileFormat;

/// A table file, read whole on every `load` (each subtask reads it once).
#[derive(Debug, Clone)]
pub(crate) struct FileTable {
    pub(crate) path: PathBuf,
    pub(crate) format: FileFormat,
}

impl TableSource for FileTable {
    fn load(&mut self) -> OpResult<Vec<Row>> {
        let bad = |what: String| {
            OperatorError::failed(format!("lookup table {}: {what}", self.path.display()))
        };
        let raw = std::fs::read(&self.path).map_err(|e| bad(e.to_string()))?;
        let text = if self.path.extension().is_some_and(|x| x == "gz") {
            let mut s = String::new();
            std::io::Read::read_to_string(
                &mut flate2::read::GzDecoder::new(raw.as_slice()),
                &mut s,
            )
            .map_err(|e| bad(format!("not gzip text: {e}")))?;
            s
        } else {
            String::from_utf8(raw).map_err(|e| bad(format!("not UTF-8: {e}")))?
        };
        match self.format {
            FileFormat::Csv => {
                let mut r = csv::Reader::from_reader(text.as_bytes());
                let headers = r.headers().map_err(|e| bad(e.to_string()))?.clone();
                r.records()
                    .enumerate()
                    .map(|(i, rec)| {
                        rec.map(|rec| csv_row_to_json(&headers, &rec))
                            .map_err(|e| bad(format!("row {}: {e}", i + 2)))
                    })
                    .collect()
            }
            FileFormat::Jsonl => text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| {
                    serde_json::from_str(l).map_err(|e| bad(format!("line {}: {e}", i + 1)))
                })
                .collect(),
        }
    }
}

/// A log topic as a table: every committed record's value is a JSON row; later rows
/// of a key replace earlier ones.
#[derive(Debug, Clone)]
pub(crate) struct LogTable {
    pub(crate) topic: String,
    pub(crate) partitions: Vec<Arc<Partition>>,
    /// Next offset to read, per partition.
    pub(crate) next: Vec<u64>,
}

impl LogTable {
    fn read_new(&mut self) -> OpResult<Vec<Row>> {
        let mut rows = Vec::new();
        for (p, next) in self.partitions.iter().zip(self.next.iter_mut()) {
            // Cheap when nothing is new: the end offset is an atomic read.
            while p.end_offset(IsolationLevel::ReadCommitted) > *next {
                let mut failed = None;
                let summary = p
                    .read_with_isolated(
                        *next,
                        ReadLimit::records(10_000),
                        IsolationLevel::ReadCommitted,
                        |r| {
                            if failed.is_some() {
                                return;
                            }
                            match serde_json::from_slice::<Row>(r.value) {
                                Ok(row) => rows.push(row),
                                Err(e) => failed = Some(format!("offset {}: {e}", r.offset)),
                            }
                        },
                    )
                    .map_err(|e| {
                        OperatorError::failed(format!("lookup table topic {}: {e}", self.topic))
                    })?;
                if let Some(f) = failed {
                    return Err(OperatorError::failed(format!(
                        "lookup table topic {} partition {}: {f}",
                        self.topic,
                        p.id()
                    )));
                }
                if summary.next_offset <= *next {
                    break;
                }
                *next = summary.next_offset;
            }
        }
        Ok(rows)
    }
}

impl TableSource for LogTable {
    fn load(&mut self) -> OpResult<Vec<Row>> {
        self.next = vec![0; self.partitions.len()];
        self.read_new()
    }

    fn poll_updates(&mut self) -> OpResult<Vec<Row>> {
        self.read_new()
    }
}
