//! Boundary conversions between the batch path of YAML jobs ([`RowBatch`]) and the row
//! path ([`Row`]): where a row-based step (`key_by`, a window, a join, `enrich`, the
//! log or Kafka sink, ...) follows a batch step, its batches become rows **once**, each
//! row with its own event time (issue 18 step 3).
//!
//! A row is a JSON object of the batch's fields in the schema's order, each cell as
//! brook-sql's [`value_at`] gives it: the same row the row path makes for the same
//! input (a map's computed fields after the input's, a replaced field in its place).

use arrow_array::RecordBatch;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};
use brook_sql::values::value_at;
use serde_json::{Map, Value};

use crate::row::Row;
use crate::row_batch::RowBatch;

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
}
