//! Records (JSON objects, CSV lines) decoded into [`RecordBatch`]es of a fixed schema,
//! with every record that does not fit reported by its position and field, so that a
//! source can route it to `on_bad_record`.
//!
//! The fast path hands all records of a call to one arrow decoder, checking that each
//! yields exactly one row. Only when that fails is each record decoded on its own to
//! find the bad ones; the good ones still come out as one batch, in their order.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

/// The encoding of the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per record. Fields the schema does not name are ignored; a missing
    /// field is null.
    Json,
    /// One CSV line per record (no header), its fields in the schema's order; an empty
    /// cell is null.
    Csv,
}

/// A record that does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// Its position in the records given to [`RecordDecoder::decode`], from 0.
    pub index: usize,
    /// The field whose value does not fit, if the record got that far (`None`: the record
    /// is not JSON / has another number of CSV fields).
    pub field: Option<String>,
    /// Why, in arrow's or serde_json's words.
    pub reason: String,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "record {}: field `{field}`: {}", self.index, self.reason),
            None => write!(f, "record {}: {}", self.index, self.reason),
        }
    }
}

/// The outcome of decoding some records.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The records that fit, in their order.
    pub batch: RecordBatch,
    /// The records that did not, by position.
    pub bad: Vec<BadRecord>,
}

/// Decodes records of one [`Format`] into batches of one schema.
#[derive(Debug, Clone)]
pub struct RecordDecoder {
    schema: SchemaRef,
    format: Format,
}

impl RecordDecoder {
    /// A decoder into `schema` (from [`crate::schema`] or [`crate::infer`]).
    pub fn new(schema: SchemaRef, format: Format) -> Self {
        RecordDecoder { schema, format }
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Decodes `records` (one record each) into one batch of those that fit; the others
    /// are in [`Decoded::bad`] with their position and field. Never fails: a record that
    /// arrow rejects is a bad record.
    pub fn decode<R: AsRef<[u8]>>(&self, records: &[R]) -> Decoded {
        if records.is_empty() {
            return Decoded {
                batch: RecordBatch::new_empty(self.schema.clone()),
                bad: Vec::new(),
            };
        }
        if let Ok(batch) = self.decode_all(records) {
            return Decoded {
                batch,
                bad: Vec::new(),
            };
        }
        self.decode_each(records)
    }

    /// The fast path: all records through one decoder.
    fn decode_all<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<RecordBatch, ArrowError> {
        let mut decoder = BatchDecoder::new(&self.schema, self.format, records.len(), None)?;
        for r in records {
            decoder.feed(r.as_ref())?;
        }
        decoder.finish()
    }

    /// The slow path: each record alone; the good rows concatenated.
    fn decode_each<R: AsRef<[u8]>>(&self, records: &[R]) -> Decoded {
        let mut rows = Vec::with_capacity(records.len());
        let mut bad = Vec::new();
        for (index, r) in records.iter().enumerate() {
            match self.decode_one(r.as_ref()) {
                Ok(row) => rows.push(row),
                Err((field, reason)) => bad.push(BadRecord {
                    index,
                    field,
                    reason,
                }),
            }
        }
        let batch = match arrow_select::concat::concat_batches(&self.schema, &rows) {
            Ok(batch) => batch,
            // Every row was decoded into `self.schema`, so concatenation cannot fail;
            // should it, no record is lost silently: all are reported.
            Err(e) => {
                return Decoded {
                    batch: RecordBatch::new_empty(self.schema.clone()),
                    bad: (0..records.len())
                        .map(|index| BadRecord {
                            index,
                            field: None,
                            reason: e.to_string(),
                        })
                        .collect(),
                }
            }
        };
        Decoded { batch, bad }
    }

    /// One record as a one-row batch, or the field and reason it does not fit.
    fn decode_one(&self, record: &[u8]) -> Result<RecordBatch, (Option<String>, String)> {
        match decode_alone(&self.schema, self.format, None, record) {
            Ok(batch) => Ok(batch),
            Err(reason) => Err(match self.format {
                Format::Json => blame_json(&self.schema, record, reason),
                Format::Csv => blame_csv(&self.schema, record, reason),
            }),
        }
    }
}

/// One arrow decoder (JSON or CSV) fed record by record. The CSV one is boxed: it is
/// four times the JSON one's size, and one is built per call (not per record).
enum BatchDecoder {
    Json(arrow_json::reader::Decoder),
    Csv(Box<arrow_csv::reader::Decoder>),
}

impl BatchDecoder {
    /// Room for `rows` rows (at least 1) in one batch; a CSV decoder of only the
    /// `projection` columns if given.
    fn new(
        schema: &SchemaRef,
        format: Format,
        rows: usize,
        projection: Option<usize>,
    ) -> Result<Self, ArrowError> {
        let rows = rows.max(1);
        Ok(match format {
            Format::Json => BatchDecoder::Json(
                arrow_json::ReaderBuilder::new(schema.clone())
                    .with_batch_size(rows)
                    .build_decoder()?,
            ),
            Format::Csv => {
                let mut b = arrow_csv::ReaderBuilder::new(schema.clone())
                    .with_header(false)
                    .with_batch_size(rows);
                if let Some(column) = projection {
                    b = b.with_projection(vec![column]);
                }
                BatchDecoder::Csv(Box::new(b.build_decoder()))
            }
        })
    }

    /// Feeds one record, which must hold exactly one row: a record that holds two (or
    /// none, or half of one) would shift every later record's position.
    fn feed(&mut self, record: &[u8]) -> Result<(), ArrowError> {
        let rows = match self {
            BatchDecoder::Json(d) => {
                let before = d.len();
                let consumed = d.decode(record)?;
                if consumed < record.len() || d.has_partial_record() {
                    return Err(not_one_row("more or less than one JSON value"));
                }
                d.len() - before
            }
            BatchDecoder::Csv(d) => {
                let before = d.capacity();
                let consumed = d.decode(record)?;
                let ended = record.ends_with(b"\n") || d.decode(b"\n")? == 1;
                if consumed < record.len() || !ended {
                    return Err(not_one_row("more than one CSV line"));
                }
                before - d.capacity()
            }
        };
        match rows {
            1 => Ok(()),
            0 => Err(not_one_row(
                "no value (an empty record, or an unclosed quote)",
            )),
            _ => Err(not_one_row("more than one value")),
        }
    }

    /// The batch of everything fed.
    fn finish(self) -> Result<RecordBatch, ArrowError> {
        let batch = match self {
            BatchDecoder::Json(mut d) => d.flush()?,
            BatchDecoder::Csv(mut d) => d.flush()?,
        };
        batch.ok_or_else(|| ArrowError::JsonError("an empty record".to_string()))
    }
}

fn not_one_row(what: &str) -> ArrowError {
    ArrowError::ParseError(format!("the record holds {what}"))
}

/// One record alone: exactly one row, or arrow's reason.
fn decode_alone(
    schema: &SchemaRef,
    format: Format,
    projection: Option<usize>,
    record: &[u8],
) -> Result<RecordBatch, String> {
    let batch = BatchDecoder::new(schema, format, 1, projection)
        .and_then(|mut d| {
            d.feed(record)?;
            d.finish()
        })
        .map_err(|e| e.to_string())?;
    Ok(batch)
}

/// The field of a JSON record that does not fit: each of the schema's fields the record
/// has is decoded alone; the first that fails is named. A record that is not a JSON
/// object names no field.
fn blame_json(schema: &SchemaRef, record: &[u8], reason: String) -> (Option<String>, String) {
    let object = match serde_json::from_slice::<serde_json::Value>(record) {
        Ok(serde_json::Value::Object(o)) => o,
        Ok(other) => {
            let kind = match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a bool",
                _ => "null",
            };
            return (None, format!("expected a JSON object, got {kind}"));
        }
        Err(e) => return (None, format!("not JSON: {e}")),
    };
    for field in schema.fields() {
        let Some(value) = object.get(field.name()) else {
            continue;
        };
        let one = Arc::new(Schema::new(vec![field.as_ref().clone()]));
        let mut alone = serde_json::Map::new();
        alone.insert(field.name().clone(), value.clone());
        let bytes = serde_json::Value::Object(alone).to_string();
        if let Err(reason) = decode_alone(&one, Format::Json, None, bytes.as_bytes()) {
            return (Some(field.name().clone()), reason);
        }
    }
    (None, reason)
}

/// The field of a CSV record that does not fit: after checking the record's field
/// count (as text), each column is decoded alone; the first that fails is named.
fn blame_csv(schema: &SchemaRef, record: &[u8], reason: String) -> (Option<String>, String) {
    let as_text = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    if let Err(reason) = decode_alone(&as_text, Format::Csv, None, record) {
        return (None, reason);
    }
    for (column, field) in schema.fields().iter().enumerate() {
        if let Err(reason) = decode_alone(schema, Format::Csv, Some(column), record) {
            return (Some(field.name().clone()), reason);
        }
    }
    (None, reason)
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
    use arrow_array::Array;

    use super::*;
    use crate::schema::declared;

    fn sales() -> SchemaRef {
        declared([
            ("item", "string"),
            ("price_cents", "int64"),
            ("weight", "float64"),
            ("paid", "bool"),
            ("ts", "timestamp"),
        ])
        .expect("valid schema")
    }

    #[test]
    fn json_records_decode_into_the_schema() {
        let d = RecordDecoder::new(sales(), Format::Json);
        let out = d.decode(&[
            r#"{"item": "milk", "price_cents": 250, "weight": 0.5, "paid": true, "ts": 1000, "extra": [1]}"#,
            r#"{"item": "tea", "ts": "1970-01-01T00:00:02Z"}"#,
        ]);
        assert!(out.bad.is_empty(), "{:?}", out.bad);
        let b = &out.batch;
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.schema(), sales());
        assert_eq!(b.column(0).as_string::<i32>().value(1), "tea");
        let price = b.column(1).as_primitive::<Int64Type>();
        assert_eq!(price.value(0), 250);
        assert!(price.is_null(1), "a missing field is null");
        assert_eq!(b.column(2).as_primitive::<Float64Type>().value(0), 0.5);
        assert!(b.column(3).as_boolean().value(0));
        let ts = b.column(4).as_primitive::<TimestampMillisecondType>();
        assert_eq!((ts.value(0), ts.value(1)), (1000, 2000));
    }

    #[test]
    fn json_bad_records_are_reported_by_position_and_field() {
        let d = RecordDecoder::new(sales(), Format::Json);
        let out = d.decode(&[
            r#"{"item": "milk", "price_cents": 250}"#,
            r#"{"item": "tea", "price_cents": "a lot"}"#,
            r#"{"item": "pie", "price_cents": 300}"#,
            r#"{"item": "cake", "paid": 3}"#,
            r#"not json"#,
            r#"[1, 2]"#,
            r#"{"item": "jam", "price_cents": 120}"#,
        ]);
        let items: Vec<&str> = out
            .batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(items, ["milk", "pie", "jam"], "the good records, in order");
        let where_: Vec<(usize, Option<&str>)> = out
            .bad
            .iter()
            .map(|b| (b.index, b.field.as_deref()))
            .collect();
        assert_eq!(
            where_,
            [
                (1, Some("price_cents")),
                (3, Some("paid")),
                (4, None),
                (5, None)
            ]
        );
        assert!(out.bad[0].reason.contains("a lot"), "{}", out.bad[0].reason);
        assert!(
            out.bad[2].reason.starts_with("not JSON: "),
            "{}",
            out.bad[2].reason
        );
        assert_eq!(
            out.bad[3].to_string(),
            "record 5: expected a JSON object, got an array"
        );
        assert!(
            out.bad[0]
                .to_string()
                .starts_with("record 1: field `price_cents`: "),
            "{}",
            out.bad[0]
        );
    }

    #[test]
    fn a_record_holding_two_objects_or_none_is_bad() {
        let d = RecordDecoder::new(sales(), Format::Json);
        // Four records, four values: only checking the row count would miss this.
        let out = d.decode(&[
            r#"{"item": "a"}"#,
            r#"{"item": "b"} {"item": "c"}"#,
            "  ",
            r#"{"item": "d"}"#,
        ]);
        let items: Vec<&str> = out
            .batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(items, ["a", "d"]);
        let bad: Vec<usize> = out.bad.iter().map(|b| b.index).collect();
        assert_eq!(bad, [1, 2]);
        // A truncated record must not swallow the next one.
        let out = d.decode(&[r#"{"item": "a""#, r#"{"item": "b"}"#]);
        let items: Vec<&str> = out
            .batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(items, ["b"]);
        assert_eq!(out.bad.len(), 1);
        assert_eq!(out.bad[0].index, 0);
        // Nor a CSV record with an unclosed quote, nor one of two lines.
        let d = RecordDecoder::new(sales(), Format::Csv);
        let out = d.decode(&["\"a,1,,,", "b,2,,,", "c,3,,,\nd,4,,,"]);
        let items: Vec<&str> = out
            .batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(items, ["b"]);
        let bad: Vec<usize> = out.bad.iter().map(|b| b.index).collect();
        assert_eq!(bad, [0, 2]);
    }

    #[test]
    fn csv_records_decode_and_bad_ones_name_the_field() {
        let d = RecordDecoder::new(sales(), Format::Csv);
        let out = d.decode(&[
            "milk,250,0.5,true,1970-01-01T00:00:01Z",
            "tea,cheap,0.5,true,1970-01-01T00:00:01Z\n",
            "\"pie, apple\",300,,false,",
            "cake,100,0.1,maybe,1970-01-01T00:00:01Z",
            "jam,120",
            "bun,90,0.2,true,yesterday",
        ]);
        let items: Vec<&str> = out
            .batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(items, ["milk", "pie, apple"]);
        let weight = out.batch.column(2).as_primitive::<Float64Type>();
        assert!(weight.is_null(1), "an empty cell is null");
        let where_: Vec<(usize, Option<&str>)> = out
            .bad
            .iter()
            .map(|b| (b.index, b.field.as_deref()))
            .collect();
        assert_eq!(
            where_,
            [
                (1, Some("price_cents")),
                (3, Some("paid")),
                (4, None),
                (5, Some("ts"))
            ]
        );
        assert!(
            out.bad[2].reason.contains("expected 5"),
            "{}",
            out.bad[2].reason
        );
    }

    #[test]
    fn no_records_give_an_empty_batch() {
        let d = RecordDecoder::new(sales(), Format::Json);
        let out = d.decode::<&str>(&[]);
        assert_eq!((out.batch.num_rows(), out.bad.len()), (0, 0));
        assert_eq!(out.batch.schema(), sales());
    }
}
