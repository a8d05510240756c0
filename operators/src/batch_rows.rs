//! Boundary conversions between the batch path of YAML jobs ([`RowBatch`]) and the row
//! path ([`Row`]): where a row-based step (a join, `enrich`, the log or Kafka sink, ...)
//! follows a batch step, its batches become rows **once**, each row with its own event
//! time (issue 18 step 3); where a step that runs on batches (a typed window, issue 18
//! step 4) follows rows of a schema known at plan time (a file source's), the rows
//! become batches of that schema ([`ToBatches`]).
//!
//! A row is a JSON object of the batch's fields in the schema's order, each cell as
//! brook-sql's [`value_at`] gives it: the same row the row path makes for the same
//! input (a map's computed fields after the input's, a replaced field in its place).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};
use brook_sql::decode::{Format, RecordDecoder};
use brook_sql::values::value_at;
use serde_json::{Map, Value};

use crate::row::Row;
use crate::row_batch::{row_times, RowBatch};
use crate::row_sql::{misfit_reason, RowTexts};

/// Row `row` of `columns` as a JSON object.
pub fn row_at(columns: &RecordBatch, row: usize) -> Row {
    let schema = columns.schema_ref();
    let mut obj = Map::with_capacity(columns.num_columns());
    for (field, column) in schema.fields().iter().zip(columns.columns()) {
        obj.insert(field.name().clone(), value_at(column.as_ref(), row));
    }
    Value::Object(obj)
}

/// Batches into rows, in order, each row with its event time.
#[derive(Debug, Default, Clone, Copy)]
pub struct ToRows;

impl Operator for ToRows {
    type In = RowBatch;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<RowBatch>,
        _ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        for record in batch {
            let rows = record.value;
            for i in 0..rows.num_rows() {
                out.collect(row_at(&rows.columns, i), rows.timestamp(i));
            }
        }
        Ok(())
    }
}

/// Rows into one batch of a schema per engine batch, each row with its event time. A
/// row that does not fit the schema (a field of another type) goes to `on_bad_record`
/// with the field named, as a `filter` on rows does ([`crate::row_sql`]).
#[derive(Debug)]
pub struct ToBatches {
    decoder: RecordDecoder,
    bad: BadRecords,
    /// The rows of the batch at hand.
    texts: RowTexts,
}

impl ToBatches {
    /// Rows into batches of `schema`; those that do not fit go to `bad`.
    pub fn new(schema: SchemaRef, bad: BadRecords) -> Self {
        ToBatches {
            decoder: RecordDecoder::new(schema, Format::Json),
            bad,
            texts: RowTexts::default(),
        }
    }
}

impl Operator for ToBatches {
    type In = Row;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        self.texts.fill(&batch)?;
        let records = self.texts.records();
        let decoded = self.decoder.decode(&records);
        let position = ctx.info().to_string();
        let mut bad = decoded.bad.iter().peekable();
        let mut times = Vec::with_capacity(batch.len());
        for (i, r) in batch.iter().enumerate() {
            if let Some(b) = bad.next_if(|b| b.index == i) {
                self.bad.handle(
                    &String::from_utf8_lossy(records[i]),
                    &position,
                    &misfit_reason(b),
                )?;
            } else {
                times.push(r.timestamp);
            }
        }
        if decoded.batch.num_rows() == 0 {
            return Ok(());
        }
        let timestamps = row_times(times);
        out.push(
            RowBatch {
                columns: decoded.batch,
                timestamps,
            }
            .into_record(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use brook_testkit::operator::OperatorHarness;
    use serde_json::json;

    #[test]
    fn batches_become_rows_with_their_times() {
        let cols: Vec<(&str, ArrayRef)> = vec![
            (
                "item",
                Arc::new(StringArray::from(vec![Some("milk"), None])),
            ),
            ("price", Arc::new(Int64Array::from(vec![60, 40]))),
        ];
        let columns = RecordBatch::try_from_iter(cols).expect("one length");
        let rows = RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(vec![Some(3), None]))),
        };
        let out = OperatorHarness::run_batch(ToRows, vec![rows.into_record()]).expect("runs");
        let got: Vec<(Value, Option<i64>)> =
            out.into_iter().map(|r| (r.value, r.timestamp)).collect();
        assert_eq!(
            got,
            vec![
                (json!({"item": "milk", "price": 60}), Some(3)),
                (json!({"item": null, "price": 40}), None),
            ]
        );
    }

    #[test]
    fn rows_become_batches_and_misfits_are_bad_records() {
        use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
        use brook_core::element::StreamRecord;
        let schema =
            brook_sql::schema::declared([("item", "string"), ("price", "int64")]).expect("schema");
        let counts = Arc::new(BadRecordCounts::default());
        let bad = BadRecords::new(BadRecordPolicy::Skip, Arc::clone(&counts), None);
        let rows = vec![
            StreamRecord::with_timestamp(json!({"item": "milk", "price": 60}), 3),
            StreamRecord::with_timestamp(json!({"item": "tea", "price": "cheap"}), 4),
            StreamRecord::new(json!({"price": 40, "other": true})),
        ];
        let out = OperatorHarness::run_batch(ToBatches::new(schema, bad), rows).expect("runs");
        assert_eq!(out.len(), 1);
        let b = &out[0].value;
        assert_eq!(row_at(&b.columns, 0), json!({"item": "milk", "price": 60}));
        assert_eq!(row_at(&b.columns, 1), json!({"item": null, "price": 40}));
        assert_eq!((b.timestamp(0), b.timestamp(1)), (Some(3), None));
        assert_eq!(counts.total(), 1);
    }
}
