//! Sinks of a YAML job that encode straight from its Arrow batches (issue 18): a
//! `file` sink's JSON lines or CSV rows and `stdout`'s lines ([`BatchLines`]), a `log`
//! or `kafka` sink's
//! messages ([`BatchMessages`]), with brook-sql's encoders. The text is the row path's
//! for the same rows (`brook_sql::encode`), so a job writes the same output whichever
//! path its rows take.

use std::sync::Arc;

use arrow_array::{new_null_array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use brook_connectors::file::{EncodeError as FileEncodeError, FileEncoder};
use brook_core::element::Batch;
use brook_core::operator::{OpResult, SubtaskInfo};
use brook_core::sink::{EncodeError, Messages, Sink, SinkWriter, ValueEncoder};
use brook_operators::row_batch::RowBatch;
use brook_sql::encode::{csv_rows, json_rows, key_text};

/// A `file` sink's encoder of batches: every row a JSON line or a CSV row.
#[derive(Debug, Default)]
pub(super) struct BatchLines {
    /// The CSV header is in the file.
    header_written: bool,
    /// The columns of the header already in the file (a restored writer's), if they
    /// could be read: rows are written in its order.
    columns: Option<Vec<String>>,
}

impl BatchLines {
    /// `rows` with the columns of the file's header, in its order, as the row path
    /// writes a restored CSV file: a field the header lacks is an error, a column the
    /// rows lack is empty.
    fn in_header_order(&self, rows: &RecordBatch) -> Result<RecordBatch, String> {
        let Some(columns) = &self.columns else {
            return Ok(rows.clone());
        };
        let schema = rows.schema_ref();
        if let Some(extra) = schema.fields().iter().find(|f| !columns.contains(f.name())) {
            return Err(format!(
                "field {:?} is not in the CSV header (taken from the file: {})",
                extra.name(),
                columns.join(",")
            ));
        }
        if schema.fields().len() == columns.len()
            && schema
                .fields()
                .iter()
                .zip(columns)
                .all(|(f, c)| f.name() == c)
        {
            return Ok(rows.clone());
        }
        let mut fields = Vec::with_capacity(columns.len());
        let mut arrays = Vec::with_capacity(columns.len());
        for c in columns {
            match schema.index_of(c) {
                Ok(i) => {
                    fields.push(schema.field(i).clone());
                    arrays.push(Arc::clone(rows.column(i)));
                }
                Err(_) => {
                    fields.push(Field::new(c, DataType::Utf8, true));
                    arrays.push(new_null_array(&DataType::Utf8, rows.num_rows()));
                }
            }
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| e.to_string())
    }
}

impl FileEncoder for BatchLines {
    type In = RowBatch;

    fn json(&mut self, batch: &Batch<RowBatch>, out: &mut Vec<u8>) -> Result<(), FileEncodeError> {
        for (record, r) in batch.iter().enumerate() {
            json_rows(&r.value.columns, out, |_, out| out.push(b'\n')).map_err(|e| {
                FileEncodeError {
                    record,
                    reason: e.to_string(),
                }
            })?;
        }
        Ok(())
    }

    fn csv(&mut self, batch: &Batch<RowBatch>, out: &mut Vec<u8>) -> Result<(), FileEncodeError> {
        for (record, r) in batch.iter().enumerate() {
            if r.value.num_rows() == 0 {
                // The row path writes its header with the first row.
                continue;
            }
            let rows = self
                .in_header_order(&r.value.columns)
                .map_err(|reason| FileEncodeError { record, reason })?;
            csv_rows(&rows, !self.header_written, out).map_err(|e| FileEncodeError {
                record,
                reason: e.to_string(),
            })?;
            self.header_written = true;
        }
        Ok(())
    }

    fn csv_header_written(&mut self, columns: Option<Vec<String>>) {
        self.header_written = true;
        self.columns = columns;
    }
}

/// A `log` or `kafka` sink's encoder of batches: a message per row, its value the
/// row's JSON object, its key the `key_field` column's text (as the row path's: a
/// string as it is, a null `null`, another value its JSON text), its timestamp the
/// row's event time.
#[derive(Debug, Clone, Default)]
pub(super) struct BatchMessages {
    /// The key field (checked against the input's schema at plan time).
    key: Option<Arc<str>>,
}

impl BatchMessages {
    /// Messages keyed by field `key`, if any.
    pub(super) fn new(key: Option<&str>) -> Self {
        BatchMessages {
            key: key.map(Arc::from),
        }
    }
}

impl ValueEncoder for BatchMessages {
    type In = RowBatch;

    fn encode(&mut self, batch: &Batch<RowBatch>, out: &mut Messages) -> Result<(), EncodeError> {
        for (record, r) in batch.iter().enumerate() {
            let rows = &r.value;
            let key_column = self.key.as_ref().map(|k| {
                rows.columns
                    .schema_ref()
                    .index_of(k)
                    .ok()
                    .map(|i| rows.columns.column(i))
            });
            // Values first, all rows at once; then keys, each after the values.
            let mut ends = Vec::with_capacity(rows.num_rows());
            let start = out.buf().len();
            json_rows(&rows.columns, out.buf(), |_, buf| ends.push(buf.len())).map_err(|e| {
                EncodeError {
                    record,
                    reason: e.to_string(),
                }
            })?;
            let mut value_start = start;
            for (row, &value_end) in ends.iter().enumerate() {
                let key = key_column.map(|c| {
                    let key_start = out.buf().len();
                    // No such field: the empty key, as the row path's.
                    if let Some(c) = c {
                        key_text(c.as_ref(), row, out.buf());
                    }
                    key_start..out.buf().len()
                });
                out.push(key, value_start..value_end, rows.timestamp(row));
                value_start = value_end;
            }
        }
        Ok(())
    }
}

/// The `blackhole` sink of the batch path: drops every batch (the engine counts its
/// rows as written).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchBlackhole;

impl Sink for BatchBlackhole {
    type In = RowBatch;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = RowBatch>>> {
        Ok(Box::new(BatchBlackhole))
    }
}

impl SinkWriter for BatchBlackhole {
    type In = RowBatch;

    fn write_batch(&mut self, batch: Batch<RowBatch>) -> OpResult {
        drop(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use brook_log::{IsolationLevel, Log, LogOptions, TopicConfig};
    use brook_testkit::log_job::topic_records;

    /// What a job wrote: its files' text and its topic's messages (key, value,
    /// timestamp), and the names of its vertices.
    type Written = (
        Vec<String>,
        Vec<(Option<String>, String, Option<i64>)>,
        Vec<String>,
    );

    /// Runs `yaml` on `log`, on batches from the source to the sinks, or (`rows`) with
    /// the source's rows as JSON (the row path) throughout.
    fn run(yaml: &str, log: &Log, files: &[std::path::PathBuf], rows: bool) -> Written {
        let built = crate::spec::build_local(yaml, log, |v| {
            if rows {
                v.source_batches[0] = None;
            }
        });
        let result = built.env.execute("sinks").expect("runs");
        let names = result.vertices.iter().map(|(n, _)| n.clone()).collect();
        let texts = files
            .iter()
            .map(|f| std::fs::read_to_string(f).expect("output"))
            .collect();
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("utf-8");
        let mut messages: Vec<_> = topic_records(log, "out", IsolationLevel::ReadCommitted)
            .iter()
            .map(|r| {
                (
                    r.key.as_deref().map(text),
                    text(&r.value),
                    Some(r.timestamp),
                )
            })
            .collect();
        messages.sort();
        (texts, messages, names)
    }

    /// A job whose rows are batches writes its file (JSON lines, CSV) and topic sinks
    /// straight from them, with no vertex turning them into rows, and writes exactly
    /// what the row path writes for the same input: the same lines, the same CSV, the
    /// same messages with the same keys (a string key as it is, a null one `null`, a
    /// number its text) and timestamps.
    #[test]
    fn file_and_topic_sinks_write_batches_as_the_row_path_writes_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.jsonl");
        let mut text = String::new();
        for i in 0..3000 {
            let item = match i % 9 {
                0 => "null".to_string(),
                1 => "\"say \\\"hi\\\", ok\"".to_string(),
                n => format!("\"i{n}\""),
            };
            let ok = if i % 5 == 0 { "null" } else { "true" };
            text.push_str(&format!(
                "{{\"item\": {item}, \"cents\": {}, \"ok\": {ok}, \"ts\": {}}}\n",
                i % 211,
                i * 10
            ));
        }
        std::fs::write(&input, text).expect("write");
        let files = [dir.path().join("out.jsonl"), dir.path().join("out.csv")];
        let yaml = format!(
            r#"
name: sinks
sources:
  - name: sales
    connector: file
    path: {}
    schema: {{item: string, cents: int64, ok: bool, ts: int64}}
    event_time: ts
steps:
  - {{name: some, filter: "cents % 3 <> 0"}}
  - {{name: priced, map: {{dollars: "cents / 100.0", k: "cents % 4"}}}}
sinks:
  - {{name: lines, connector: file, path: {}}}
  - {{name: rows, connector: file, path: {}}}
  - {{name: by-item, connector: log, topic: out, key_field: item, input: priced}}
"#,
            input.display(),
            files[0].display(),
            files[1].display(),
        );
        let fresh_log = || {
            let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("open");
            let _ = log.delete_topic("out");
            log.create_topic("out", 3, TopicConfig::default())
                .expect("topic");
            log
        };
        let (batch_files, batch_messages, names) = run(&yaml, &fresh_log(), &files, false);
        assert!(
            !names.iter().any(|n| n.ends_with("-rows")),
            "no vertex makes rows: {names:?}"
        );
        let (row_files, row_messages, row_names) = run(&yaml, &fresh_log(), &files, true);
        assert!(
            row_names.iter().all(|n| !n.ends_with("-rows")),
            "{row_names:?}"
        );
        assert_eq!(batch_files[0].lines().count(), 1990);
        assert_eq!(batch_files[0], row_files[0]);
        assert_eq!(batch_files[1], row_files[1]);
        assert!(
            batch_files[1].starts_with("item,cents,ok,ts,dollars,k\n"),
            "{}",
            &batch_files[1][..80]
        );
        assert_eq!(batch_messages.len(), 1990);
        assert_eq!(batch_messages, row_messages);
        assert!(batch_messages
            .iter()
            .any(|m| m.0.as_deref() == Some("null")));
        assert!(batch_messages
            .iter()
            .any(|m| m.0.as_deref() == Some("say \"hi\", ok")));
        assert!(batch_messages.iter().all(|m| m.2.is_some()));
    }

    /// A restored CSV writer writes its rows in the order of the header already in the
    /// file, as the row path does, and refuses a field the header lacks (which it would
    /// otherwise write under the wrong column).
    #[test]
    fn a_restored_csv_file_keeps_its_headers_columns() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, Int64Array, RecordBatch};
        use brook_connectors::file::FileEncoder;
        use brook_core::element::StreamRecord;
        use brook_operators::row_batch::RowBatch;

        use super::BatchLines;

        let rows = |fields: &[(&str, i64)]| {
            let columns: Vec<(&str, ArrayRef)> = fields
                .iter()
                .map(|(n, v)| (*n, Arc::new(Int64Array::from(vec![*v])) as ArrayRef))
                .collect();
            vec![StreamRecord {
                value: RowBatch::new(RecordBatch::try_from_iter(columns).expect("batch")),
                timestamp: None,
            }]
        };
        let mut enc = BatchLines::default();
        enc.csv_header_written(Some(vec![
            "key".into(),
            "b".into(),
            "a".into(),
            "gone".into(),
        ]));
        let mut out = Vec::new();
        enc.csv(&rows(&[("key", 1), ("a", 10), ("b", 100)]), &mut out)
            .expect("encodes");
        assert_eq!(String::from_utf8(out).expect("utf-8"), "1,100,10,\n");
        let err = enc
            .csv(
                &rows(&[("key", 1), ("a", 10), ("extra", 5)]),
                &mut Vec::new(),
            )
            .expect_err("a field the header lacks");
        assert_eq!(
            err.reason,
            "field \"extra\" is not in the CSV header (taken from the file: key,b,a,gone)"
        );
        // A fresh file: header and rows in the schema's order.
        let mut fresh = BatchLines::default();
        let mut out = Vec::new();
        fresh
            .csv(&rows(&[("key", 1), ("a", 10)]), &mut out)
            .expect("encodes");
        assert_eq!(String::from_utf8(out).expect("utf-8"), "key,a\n1,10\n");
    }
}
