//! The batch path of YAML jobs at the spec's edges (issue 18 step 3): what turns a
//! source's records into [`RowBatch`]es of its schema, and the sinks that take
//! batches. Between them `filter`, `map` and `select` run on the batches
//! ([`brook_operators::batch_sql`]); any other step or sink gets rows, converted once
//! at that boundary ([`brook_operators::batch_rows`]).

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use brook_connectors::{CsvRow, FileDecoder, GeneratorEvent, RecordAt};
use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_core::source::{MessageAt, ValueDecoder};
use brook_core::time::Millis;
use brook_operators::batch_decode::TimedDecoder;
use brook_operators::row_batch::{row_times, RowBatch};
use csv::StringRecord;

use brook_core::watermark::WatermarkStrategy;
use brook_sql::decode::Format;

use super::{SourceTime, SpecError};
use brook_sql::schema::SchemaError;

/// The schema of generated events: `{key, ts, value}`, all `int64`; the one their
/// steps are planned against (`schema.rs`) and their batches have.
///
/// # Errors
/// None in practice (three distinct fields of a known type); a [`SchemaError`] should
/// the declared form change.
pub(crate) fn generator_schema() -> Result<SchemaRef, SchemaError> {
    brook_sql::schema::declared([("key", "int64"), ("ts", "int64"), ("value", "int64")])
}

/// Generated events into one batch per engine batch, each row with its event's time.
#[derive(Debug, Clone)]
pub(crate) struct GeneratorBatches {
    pub(crate) schema: SchemaRef,
}

impl Operator for GeneratorBatches {
    type In = GeneratorEvent;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<GeneratorEvent>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        // Keys are below `keys` (a u64 the spec takes as at most i64::MAX in practice:
        // 10 000 by default); a larger one wraps as the row path's JSON would not, so
        // it saturates instead.
        let key: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch
                .iter()
                .map(|r| i64::try_from(r.value.key).unwrap_or(i64::MAX)),
        ));
        let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch.iter().map(|r| r.value.ts),
        ));
        let value: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch.iter().map(|r| r.value.value),
        ));
        let timestamps = row_times(batch.iter().map(|r| r.timestamp));
        // The engine records' latest time: the batch's (one pass over the records, not
        // another over the new column).
        let at = batch.iter().filter_map(|r| r.timestamp).max();
        let columns = RecordBatch::try_new(Arc::clone(&self.schema), vec![key, ts, value])
            .map_err(OperatorError::other)?;
        out.collect(
            RowBatch {
                columns,
                timestamps,
            },
            at,
        );
        Ok(())
    }
}

/// Whether a source with a declared `schema` reads straight into batches of it:
/// unless its watermarks are emitted after every record (`interval: 0`), which needs
/// each row's time seen before the next row's, or its event time's field is not in
/// the schema as a `string`, `int64` or `float64` (the field's value as written, which
/// the event time's `format` reads as on a row: a `timestamp` column would already be
/// arrow's reading of it). Those keep the row path. Without an event-time field a log
/// or Kafka record's time is its message's timestamp.
pub(crate) fn reads_batches(schema: &SchemaRef, time: &SourceTime) -> bool {
    let as_written = |field: &str| {
        schema.field_with_name(field).is_ok_and(|f| {
            matches!(
                f.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Int64 | DataType::Float64
            )
        })
    };
    match time {
        None => true,
        Some((ts, wm)) => wm.interval_ms > 0 && ts.as_ref().is_none_or(|t| as_written(&t.field)),
    }
}

/// The watermarks of a source that reads into batches: as its row path's
/// (`out_of_orderness`, `interval`, `idle_timeout`), with no timestamp assigner: each
/// batch's record carries its latest row's time ([`RowBatch::into_record`]).
pub(crate) fn batch_strategy(time: &SourceTime) -> WatermarkStrategy<RowBatch> {
    let Some((_, wm)) = time else {
        return WatermarkStrategy::no_watermarks();
    };
    let mut st =
        WatermarkStrategy::<RowBatch>::for_bounded_out_of_orderness(wm.out_of_orderness_ms)
            .with_emit_interval(wm.interval_ms);
    if let Some(t) = wm.idle_timeout_ms {
        st = st.with_idleness(t);
    }
    st
}

/// The decoder of a source at `field` reading records of `format` into batches of its
/// declared `schema`, with event `time`.
///
/// # Errors
/// The event time's field is not in the schema.
pub(crate) fn timed_decoder(
    schema: SchemaRef,
    format: Format,
    time: &SourceTime,
    field: &str,
) -> Result<TimedDecoder, SpecError> {
    let ts = time.as_ref().and_then(|(ts, _)| ts.clone());
    TimedDecoder::new(schema, format, ts)
        .map_err(|e| SpecError::new(format!("{field}.event_time"), e))
}

/// Makes each reader's [`MessageBatches`] for a log or Kafka source at `field` with the
/// declared `schema` and event `time`.
///
/// # Errors
/// As [`timed_decoder`].
pub(crate) fn message_batches(
    schema: SchemaRef,
    time: &SourceTime,
    field: &str,
) -> Result<impl Fn() -> MessageBatches + Send + Sync + Clone + 'static, SpecError> {
    let decoder = timed_decoder(schema, Format::Json, time, field)?;
    Ok(move || MessageBatches::new(decoder.clone()))
}

/// Records held until a flush decodes them together: their texts back to back, and
/// each one's position (`P`) and time.
#[derive(Debug, Default)]
struct Held<P> {
    text: Vec<u8>,
    /// Where each record ends in `text` (the next one starts there).
    ends: Vec<usize>,
    at: Vec<P>,
    /// Each record's own time (a message's), if it has one.
    times: Vec<Option<Millis>>,
    /// Where the held records come from (their file or topic), for positions.
    from: String,
    /// The records as written, where `text` holds them rewritten (CSV rows in the
    /// schema's order): what a bad one is reported as. Empty otherwise.
    raw: Vec<u8>,
    raw_ends: Vec<usize>,
}

impl<P> Held<P> {
    /// Holds the record just written to `text`, read from `from`.
    fn hold(&mut self, from: &str, at: P, time: Option<Millis>) -> usize {
        if self.ends.is_empty() && self.from != from {
            self.from.clear();
            self.from.push_str(from);
        }
        self.ends.push(self.text.len());
        self.at.push(at);
        self.times.push(time);
        1
    }

    /// Decodes the held records into one batch for `out`; a rejected one goes to `bad`
    /// at `position(from, at)`.
    fn flush(
        &mut self,
        decoder: &TimedDecoder,
        bad: &BadRecords,
        out: &mut Output<RowBatch>,
        position: impl Fn(&str, &P) -> String,
    ) -> OpResult {
        if self.ends.is_empty() {
            return Ok(());
        }
        let mut start = 0;
        let records: Vec<&[u8]> = self
            .ends
            .iter()
            .map(|&end| {
                let r = &self.text[start..end];
                start = end;
                r
            })
            .collect();
        let given = self
            .times
            .iter()
            .any(Option::is_some)
            .then_some(&self.times[..]);
        let (batch, rejected) = decoder.decode(&records, given);
        for r in rejected {
            let at = position(&self.from, &self.at[r.index]);
            let shown = if self.raw_ends.len() == self.ends.len() {
                let start = r.index.checked_sub(1).map_or(0, |i| self.raw_ends[i]);
                &self.raw[start..self.raw_ends[r.index]]
            } else {
                records[r.index]
            };
            bad.handle(&String::from_utf8_lossy(shown), &at, &r.reason)?;
        }
        self.raw.clear();
        self.raw_ends.clear();
        self.text.clear();
        self.ends.clear();
        self.at.clear();
        self.times.clear();
        if let Some(batch) = batch {
            out.push(batch.into_record());
        }
        Ok(())
    }
}

/// A file source's lines (or CSV rows) into batches of its declared schema (issue 18):
/// the records of one poll are held and decoded together by a [`TimedDecoder`], each
/// row with its event time; one that does not fit the schema or has no valid time goes
/// to `on_bad_record` at `path:line`.
///
/// CSV rows are matched to the schema by the file's header: a row of another width
/// than the header is bad; a header in the schema's order is decoded as written;
/// otherwise each row is written again with its fields in the schema's order (a field
/// the header lacks is empty, so null; columns the schema lacks are left out), and a
/// bad one is still reported as written.
pub(crate) struct FileBatches {
    decoder: TimedDecoder,
    /// Held records and their lines.
    held: Held<u64>,
    /// CSV: the header last seen, and for each schema field its column in it (`None`:
    /// the header is in the schema's order).
    csv_order: Option<(StringRecord, Option<Vec<Option<usize>>>)>,
}

impl FileBatches {
    pub(crate) fn new(decoder: TimedDecoder) -> Self {
        FileBatches {
            decoder,
            held: Held::default(),
            csv_order: None,
        }
    }

    /// For each schema field, its column in `headers`; `None` when they are the same.
    fn order(&mut self, headers: &StringRecord) -> Option<&[Option<usize>]> {
        if self.csv_order.as_ref().is_none_or(|(h, _)| h != headers) {
            let fields = self.decoder.schema().fields();
            let same = headers.len() == fields.len()
                && headers
                    .iter()
                    .zip(fields.iter())
                    .all(|(h, f)| h == f.name());
            let order = (!same).then(|| {
                fields
                    .iter()
                    .map(|f| headers.iter().position(|h| h == f.name()))
                    .collect()
            });
            self.csv_order = Some((headers.clone(), order));
        }
        self.csv_order.as_ref().and_then(|(_, o)| o.as_deref())
    }
}

impl FileDecoder for FileBatches {
    type Out = RowBatch;

    fn json(
        &mut self,
        line: &[u8],
        at: RecordAt<'_>,
        _bad: &BadRecords,
        _out: &mut Output<RowBatch>,
    ) -> OpResult<usize> {
        self.held.text.extend_from_slice(line);
        Ok(self.held.hold(at.file, at.line, None))
    }

    fn csv(
        &mut self,
        row: CsvRow<'_>,
        at: RecordAt<'_>,
        bad: &BadRecords,
        _out: &mut Output<RowBatch>,
    ) -> OpResult<usize> {
        // As the row path: a row of another width than the header is bad, whatever
        // the header's order (an unclosed quote makes one of the rest of the file).
        if row.fields.len() != row.headers.len() {
            let reason = format!(
                "the row has {} fields, the header has {}",
                row.fields.len(),
                row.headers.len()
            );
            bad.handle(&String::from_utf8_lossy(row.raw), &at.position(), &reason)?;
            return Ok(0);
        }
        match self.order(row.headers).map(<[_]>::to_vec) {
            None => self.held.text.extend_from_slice(row.raw),
            Some(order) => {
                self.held.raw.extend_from_slice(row.raw);
                self.held.raw_ends.push(self.held.raw.len());
                let mut w = csv::WriterBuilder::new()
                    .has_headers(false)
                    .terminator(csv::Terminator::Any(b'\n'))
                    .from_writer(std::mem::take(&mut self.held.text));
                let fields = order
                    .iter()
                    .map(|c| c.and_then(|c| row.fields.get(c)).unwrap_or_default());
                let written = w
                    .write_record(fields)
                    .and_then(|()| w.flush().map_err(Into::into));
                self.held.text = w
                    .into_inner()
                    .map_err(|e| OperatorError::other(e.into_error()))?;
                written.map_err(OperatorError::other)?;
                // Without the terminator the writer adds.
                self.held.text.pop();
            }
        }
        Ok(self.held.hold(at.file, at.line, None))
    }

    fn flush(&mut self, bad: &BadRecords, out: &mut Output<RowBatch>) -> OpResult {
        self.held.flush(&self.decoder, bad, out, |file, line| {
            format!("{file}:{line}")
        })
    }
}

/// A log or Kafka source's values (JSON) into batches of its declared schema (issue
/// 18), as [`FileBatches`] does lines: the values of one partition's run within a poll
/// are decoded together, each row's time read from its event-time field or else the
/// message's timestamp; a bad one goes to `on_bad_record` at `topic/partition@offset`.
pub(crate) struct MessageBatches {
    decoder: TimedDecoder,
    /// Held values and their (partition, offset).
    held: Held<(i32, u64)>,
}

impl MessageBatches {
    pub(crate) fn new(decoder: TimedDecoder) -> Self {
        MessageBatches {
            decoder,
            held: Held::default(),
        }
    }
}

impl ValueDecoder for MessageBatches {
    type Out = RowBatch;

    fn value(
        &mut self,
        value: &[u8],
        timestamp: Option<Millis>,
        at: MessageAt<'_>,
        _bad: &BadRecords,
        _out: &mut Output<RowBatch>,
    ) -> OpResult<usize> {
        self.held.text.extend_from_slice(value);
        Ok(self
            .held
            .hold(at.topic, (at.partition, at.offset), timestamp))
    }

    fn flush(&mut self, bad: &BadRecords, out: &mut Output<RowBatch>) -> OpResult {
        self.held
            .flush(&self.decoder, bad, out, |topic, (partition, offset)| {
                format!("{topic}/{partition}@{offset}")
            })
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::JobConfig;

    fn valid(yaml: &str) -> crate::spec::ValidSpec {
        crate::spec::validate(crate::spec::parse(yaml).expect("parses")).expect("valid")
    }

    /// A file with a declared schema is read straight into batches: `filter` and `map`
    /// run on them with no vertex between the source and the steps, a line that does
    /// not fit (or has no valid time) is a bad record, and the rows keep their times.
    #[test]
    fn a_file_with_a_declared_schema_is_read_into_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.jsonl");
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!(
                "{{\"item\": \"i{}\", \"cents\": {i}, \"ts\": {}}}\n",
                i % 7,
                i * 10
            ));
        }
        text.push_str("{\"item\": \"x\", \"cents\": \"lots\", \"ts\": 1}\n");
        text.push_str("not json\n");
        text.push_str("{\"item\": \"x\", \"cents\": 5}\n");
        std::fs::write(&input, text).expect("write");
        let out = dir.path().join("out.jsonl");
        let yaml = format!(
            r#"
name: declared
sources:
  - name: sales
    connector: file
    path: {}
    schema: {{item: string, cents: int64, ts: int64}}
    event_time: ts
    on_bad_record: skip
steps:
  - {{name: big, filter: "cents >= 4990"}}
  - {{name: dollars, map: {{dollars: "cents / 100.0"}}}}
sinks:
  - {{name: out, connector: file, path: {}}}
"#,
            input.display(),
            out.display()
        );
        let valid = valid(&yaml);
        assert!(valid.source_batches[0].is_some());
        let built =
            crate::spec::build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
        let result = built.env.execute("declared").expect("runs");
        let names: Vec<&str> = result.vertices.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[..3], ["sales", "big", "dollars"], "{names:?}");
        assert_eq!(built.bad_records.total(), 3);
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&out)
            .expect("output")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(rows.len(), 10);
        assert_eq!(
            rows[0],
            serde_json::json!({"item": "i6", "cents": 4990, "ts": 49900, "dollars": 49.9})
        );
    }

    /// A CSV file's columns are matched to the declared schema by its header, in any
    /// order: a column the schema lacks is left out, a field the header lacks is null.
    #[test]
    fn csv_columns_are_matched_to_the_schema_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.csv");
        std::fs::write(&input, "note,cents,item\n\"a, b\",60,milk\n,40,\"tea\"\n").expect("write");
        let out = dir.path().join("out.jsonl");
        let yaml = format!(
            r#"
name: csv
sources:
  - {{name: s, connector: file, path: {}, schema: {{item: string, cents: int64, ts: int64}}}}
sinks:
  - {{name: out, connector: file, path: {}}}
"#,
            input.display(),
            out.display()
        );
        let built = crate::spec::build(&valid(&yaml), JobConfig::with_parallelism(1), None)
            .expect("builds");
        built.env.execute("csv").expect("runs");
        assert_eq!(
            std::fs::read_to_string(&out).expect("output"),
            "{\"item\":\"milk\",\"cents\":60,\"ts\":null}\n{\"item\":\"tea\",\"cents\":40,\"ts\":null}\n"
        );
    }

    /// A CSV row of another width than its header is a bad record whatever the
    /// header's order (an unclosed quote runs to the end of the file: one bad row, not
    /// a row of nulls), and a bad row is reported as written, at its line.
    #[test]
    fn csv_rows_of_another_width_are_bad_records_as_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.csv");
        std::fs::write(
            &input,
            "note,item,cents\na,milk,1\nb,tea\nc,jam,3,extra\nq,pie,lots\n\"oops,tea,2\nd,egg,4\n",
        )
        .expect("write");
        let (out, dead) = (dir.path().join("out.jsonl"), dir.path().join("dead.jsonl"));
        let yaml = format!(
            r#"
name: csv
dead_letter: {}
on_bad_record: dead-letter
sources:
  - {{name: s, connector: file, path: {}, schema: {{item: string, cents: int64}}}}
sinks:
  - {{name: out, connector: file, path: {}}}
"#,
            dead.display(),
            input.display(),
            out.display()
        );
        let built = crate::spec::build(&valid(&yaml), JobConfig::with_parallelism(1), None)
            .expect("builds");
        built.env.execute("csv").expect("runs");
        assert_eq!(
            std::fs::read_to_string(&out).expect("output"),
            "{\"item\":\"milk\",\"cents\":1}\n"
        );
        let dead: Vec<serde_json::Value> = std::fs::read_to_string(&dead)
            .expect("dead letters")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        // (A row of another width is reported as it is read, a misfit when its batch
        // is decoded: sorted by line.)
        let mut dead = dead;
        dead.sort_by_key(|d| d["position"].as_str().map(String::from));
        let got: Vec<(String, String)> = dead
            .iter()
            .map(|d| {
                let position = d["position"].as_str().expect("position");
                let line = position.rsplit(':').next().expect("line");
                (
                    line.to_string(),
                    d["raw"].as_str().expect("raw").to_string(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("3", "b,tea"),
                ("4", "c,jam,3,extra"),
                ("5", "q,pie,lots"),
                ("6", "\"oops,tea,2\nd,egg,4"),
            ]
            .map(|(l, r)| (l.to_string(), r.to_string()))
        );
        assert!(
            dead[0]["reason"] == "the row has 2 fields, the header has 3"
                && dead[2]["reason"]
                    .as_str()
                    .expect("reason")
                    .contains("field `cents`"),
            "{dead:?}"
        );
    }

    /// Rows read as JSON where batches would change what the job sees: without a
    /// declared schema (an inferred one may miss fields the first records lack), with
    /// watermarks after every record, or with the event time outside the schema.
    #[test]
    fn which_file_sources_are_read_into_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.jsonl");
        std::fs::write(&input, "{\"item\": \"milk\", \"ts\": 1}\n").expect("write");
        let batches = |source: &str| {
            let yaml = format!(
                "name: x\nsources:\n  - {{name: s, connector: file, path: {}, {source}}}\nsinks:\n  - {{name: o, connector: blackhole}}\n",
                input.display()
            );
            valid(&yaml).source_batches[0].is_some()
        };
        let schema = "schema: {item: string, ts: int64}";
        assert!(batches(schema));
        assert!(batches(&format!("{schema}, event_time: ts")));
        assert!(!batches("event_time: ts"));
        assert!(!batches(&format!(
            "{schema}, event_time: ts, watermark: {{interval: 0}}"
        )));
        assert!(!batches("schema: {item: string}, event_time: ts"));
        // A `timestamp` column is arrow's reading of the value, not the value as written
        // that the event time's format reads (`epoch_s`, a pattern in a time zone).
        assert!(!batches(
            "schema: {item: string, ts: timestamp}, event_time: {field: ts, format: epoch_s}"
        ));
    }

    /// A log topic with a declared schema is read straight into batches: each row's
    /// time is its record's timestamp (no `event_time`), a window over it gives what
    /// the row path gives, and a value that does not fit is a bad record at
    /// `topic/partition@offset`.
    #[test]
    fn a_log_topic_with_a_declared_schema_is_read_into_batches() {
        use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("open");
        let topic = log
            .create_topic("sales", 2, TopicConfig::default())
            .expect("topic");
        let mut records: Vec<ProducerRecord> = (0..3000i64)
            .map(|i| {
                let value = format!("{{\"item\": \"i{}\", \"cents\": {}}}", i % 5, i % 97);
                // Out of order by up to 300 ms: some records are late.
                ProducerRecord::keyed(format!("k{}", i % 7), value)
                    .with_timestamp(i * 10 - (i * 7919 % 31) * 10)
            })
            .collect();
        records.push(ProducerRecord::keyed(
            "k0",
            r#"{"item": "x", "cents": "lots"}"#,
        ));
        topic.append(records).expect("append");
        let out = dir.path().join("out.jsonl");
        let yaml = format!(
            r#"
name: from-log
on_bad_record: skip
sources:
  - name: sales
    connector: log
    topic: sales
    schema: {{item: string, cents: int64}}
    watermark: {{out_of_orderness: 100}}
steps:
  - key_by: [item]
  - {{name: w, window: {{kind: tumbling, size: 1000}}, aggregate: {{n: count(), total: sum(cents)}}}}
sinks:
  - {{name: out, connector: file, path: {}}}
"#,
            out.display()
        );
        let run = |rows: bool| {
            let built = crate::spec::build_local(&yaml, &log, |v| {
                if rows {
                    v.source_batches[0] = None;
                }
            });
            let result = built.env.execute("from-log").expect("runs");
            assert_eq!(built.bad_records.total(), 1);
            let names: Vec<String> = result.vertices.iter().map(|(n, _)| n.clone()).collect();
            let mut lines: Vec<String> = std::fs::read_to_string(&out)
                .expect("output")
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            (names, lines)
        };
        let (names, batches) = run(false);
        assert_eq!(names[..2], ["sales", "w-keys"], "no boundary: {names:?}");
        let (_, rows) = run(true);
        assert!(batches.len() > 100, "{batches:?}");
        assert_eq!(batches, rows);
    }

    /// A generator's rows through `filter` and `map` to a `blackhole` stay batches from
    /// the source to the sink (no vertex turns them into rows), and the job still
    /// reports rows read and written, not batches.
    #[test]
    fn a_stateless_job_runs_on_batches_from_source_to_sink() {
        let yaml = r#"
name: batches
sources:
  - {name: events, connector: generator, count: 20000, keys: 50}
steps:
  - {name: kept, filter: "value % 4 <> 0"}
  - {name: priced, map: {dollars: "value / 100.0", bucket: "key % 16"}}
sinks:
  - {name: out, connector: blackhole}
"#;
        let valid =
            crate::spec::validate(crate::spec::parse(yaml).expect("parses")).expect("valid");
        let built =
            crate::spec::build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
        let result = built.env.execute("batches").expect("runs");
        let count = |name: &str, f: fn(&brook_engine::metrics::VertexTotals) -> u64| {
            result
                .vertices
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| f(t))
        };
        assert_eq!(
            count("out", |t| t.records_in),
            Some(15_000),
            "rows, not batches"
        );
        assert_eq!(count("kept", |t| t.records_in), Some(20_000));
        let names: Vec<&str> = result.vertices.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            !names.iter().any(|n| n.ends_with("-rows")),
            "no boundary to rows: {names:?}"
        );
    }
}
