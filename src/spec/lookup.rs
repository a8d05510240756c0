//! Lookup tables for `enrich` steps: a file (JSON lines or CSV, read when the step
//! opens) or a log topic (read to its end when the step opens, then followed: rows
//! appended while the job runs update the table), in this process ([`LogTable`]) or
//! through the broker that serves the log ([`ServedTable`]); what a record means to
//! the table is [`TableUpdate::from_record`] in both.

use std::path::PathBuf;
use std::sync::Arc;

use brook_connectors::csv_row_to_json;
use brook_core::operator::{OpResult, OperatorError};
use brook_kafka::{KafkaTable, TableFollower, TableRecord};
use brook_log::{IsolationLevel, Partition, ReadLimit};
use brook_operators::enrich::{TableSource, TableUpdate};
use brook_operators::row::Row;

use super::FileFormat;

/// A table file, read whole on every `load` (each subtask reads it once).
#[derive(Debug, Clone)]
pub(crate) struct FileTable {
    pub(crate) path: PathBuf,
    pub(crate) format: FileFormat,
}

impl TableSource for FileTable {
    fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
        Ok(self.rows()?.into_iter().map(TableUpdate::Upsert).collect())
    }
}

impl FileTable {
    fn rows(&self) -> OpResult<Vec<Row>> {
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
/// of a key replace earlier ones, and a tombstone (a null value) deletes the row of
/// its record key ([`TableUpdate::Delete`]). Such topics are best compacted
/// (`cleanup.policy=compact`), keyed by the table key, so they keep only the latest
/// row per key.
#[derive(Debug, Clone)]
pub(crate) struct LogTable {
    pub(crate) topic: String,
    pub(crate) partitions: Vec<Arc<Partition>>,
    /// Next offset to read, per partition.
    pub(crate) next: Vec<u64>,
}

impl LogTable {
    fn read_new(&mut self) -> OpResult<Vec<TableUpdate>> {
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
                            let value = (!r.tombstone).then_some(r.value);
                            match TableUpdate::from_record(r.key, value) {
                                Ok(u) => rows.push(u),
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
    fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
        // From each partition's start: retention or compaction may have removed the
        // first offsets.
        self.next = self
            .partitions
            .iter()
            .map(|p| p.log_start_offset())
            .collect();
        self.read_new()
    }

    fn poll_updates(&mut self) -> OpResult<Vec<TableUpdate>> {
        self.read_new()
    }
}

/// A log topic as a table on a served log (`brook broker`, `brook runner`): read
/// through the broker with the Kafka connector's [`KafkaTable`] (read_committed, every
/// partition from its start to its end at load, then followed), with the same rows,
/// tombstones and updates as [`LogTable`] in this process.
#[derive(Debug)]
pub(crate) struct ServedTable {
    table: KafkaTable,
    topic: String,
    /// The reader once loaded.
    follower: Option<TableFollower>,
}

impl ServedTable {
    pub(crate) fn new(table: KafkaTable, topic: &str) -> Self {
        ServedTable {
            table,
            topic: topic.to_string(),
            follower: None,
        }
    }

    fn failed(&self, e: OperatorError) -> OperatorError {
        OperatorError::failed(format!("lookup table topic {}: {e}", self.topic))
    }
}

/// Adds `r` to `rows` as [`LogTable`] does, naming the partition and offset when it
/// is not a table record.
fn push_record(r: TableRecord<'_>, rows: &mut Vec<TableUpdate>) -> OpResult {
    let u = TableUpdate::from_record(r.key, r.value).map_err(|e| {
        OperatorError::failed(format!(
            "partition {}: offset {}: {e}",
            r.partition, r.offset
        ))
    })?;
    rows.push(u);
    Ok(())
}

impl TableSource for ServedTable {
    fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
        let mut rows = Vec::new();
        let follower = self
            .table
            .load(|r| push_record(r, &mut rows))
            .map_err(|e| self.failed(e))?;
        self.follower = Some(follower);
        Ok(rows)
    }

    fn poll_updates(&mut self) -> OpResult<Vec<TableUpdate>> {
        let mut rows = Vec::new();
        if let Some(f) = &mut self.follower {
            if let Err(e) = f.poll(|r| push_record(r, &mut rows)) {
                return Err(self.failed(e));
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
    use serde_json::json;

    use super::*;

    /// A tombstone in a log-topic table is a deletion of its key, in order with the
    /// rows around it.
    #[test]
    fn a_tombstone_in_a_log_table_deletes_its_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let topic = log
            .create_topic("classes", 1, TopicConfig::default())
            .expect("topic");
        topic
            .append(vec![
                ProducerRecord::keyed("mia", r#"{"student":"mia","class":"3a"}"#),
                ProducerRecord::tombstone("mia"),
            ])
            .expect("append");
        let mut table = LogTable {
            topic: "classes".into(),
            partitions: topic.partitions(),
            next: Vec::new(),
        };
        assert_eq!(
            table.load().expect("load"),
            vec![
                TableUpdate::Upsert(json!({"student": "mia", "class": "3a"})),
                TableUpdate::Delete(b"mia".to_vec()),
            ]
        );
        topic
            .append(vec![ProducerRecord::tombstone("leo")])
            .expect("append");
        assert_eq!(
            table.poll_updates().expect("poll"),
            vec![TableUpdate::Delete(b"leo".to_vec())]
        );
    }
}
