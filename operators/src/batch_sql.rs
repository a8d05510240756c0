//! `filter`, `map` and `select` steps of YAML jobs on the batch path (issue 18 step 3):
//! the planned SQL expressions evaluated on each [`RowBatch`] directly, with no row
//! and no JSON text in between.
//!
//! - `filter`: the rows whose condition is true (not false, not null: SQL's `WHERE`),
//!   with their event times; a batch that keeps no row is dropped, one that keeps all
//!   passes unchanged.
//! - `map` / `select`: the projection's output batch; event times unchanged.
//!
//! An expression that fails on a batch (integer division by zero) is evaluated again
//! row by row, so that only the failing rows go to the step's `on_bad_record` (the row
//! as JSON, the reason naming the expression's place), as on the row path
//! ([`crate::row_sql`]).

use std::sync::Arc;

use arrow_array::{Array, Int64Array};
use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};

use crate::batch_rows::row_at;
use crate::row_batch::RowBatch;
use crate::row_sql::{Applied, PlannedSql};

/// The operator of a `filter`, `map` or `select` step on batches.
#[derive(Debug)]
pub struct BatchSql {
    planned: Arc<PlannedSql>,
    bad: BadRecords,
}

impl BatchSql {
    /// The step planned against its input's schema; rows it cannot evaluate go to `bad`.
    pub fn new(planned: Arc<PlannedSql>, bad: BadRecords) -> Self {
        BatchSql { planned, bad }
    }

    /// The step's result of `rows` (that it evaluated to `applied`) to `out`.
    /// Emits what `applied` made of `rows`, whose engine record had timestamp `at` (its
    /// latest row's time: kept while every row is, not computed again).
    fn emit(
        applied: Applied,
        rows: RowBatch,
        at: Option<i64>,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        let result = match applied {
            Applied::Batch(columns) => {
                let rows = RowBatch {
                    columns,
                    timestamps: rows.timestamps,
                };
                out.collect(rows, at);
                return Ok(());
            }
            Applied::Mask(mask) => {
                let kept = mask.true_count();
                if kept == 0 {
                    return Ok(());
                }
                if kept == rows.num_rows() {
                    out.collect(rows, at);
                    return Ok(());
                } else {
                    // A null in the mask is not kept (the kernels' rule, SQL's).
                    let columns = arrow_select::filter::filter_record_batch(&rows.columns, &mask)
                        .map_err(OperatorError::other)?;
                    let timestamps = match &rows.timestamps {
                        Some(t) => {
                            let t = arrow_select::filter::filter(t.as_ref(), &mask)
                                .map_err(OperatorError::other)?;
                            // filter keeps the array's type: Int64 in, Int64 out.
                            t.as_any()
                                .downcast_ref::<Int64Array>()
                                .cloned()
                                .map(Arc::new)
                        }
                        None => None,
                    };
                    RowBatch {
                        columns,
                        timestamps,
                    }
                }
            }
        };
        if result.num_rows() > 0 {
            out.push(result.into_record());
        }
        Ok(())
    }
}

impl Operator for BatchSql {
    type In = RowBatch;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<RowBatch>,
        ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        for record in batch {
            let (rows, at) = (record.value, record.timestamp);
            if rows.num_rows() == 0 {
                continue;
            }
            match self.planned.apply(&rows.columns) {
                Ok(applied) => Self::emit(applied, rows, at, out)?,
                // The batch failed as a whole: row by row, to find the failing ones.
                Err(_) => {
                    for i in 0..rows.num_rows() {
                        let one = RowBatch {
                            columns: rows.columns.slice(i, 1),
                            timestamps: rows.timestamps.as_ref().map(|t| Arc::new(t.slice(i, 1))),
                        };
                        match self.planned.apply(&one.columns) {
                            Ok(applied) => {
                                let at = one.max_timestamp();
                                Self::emit(applied, one, at, out)?;
                            }
                            Err(e) => self.bad.handle(
                                &row_at(&rows.columns, i).to_string(),
                                &ctx.info().to_string(),
                                &e.to_string(),
                            )?,
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_sql::SqlStep;
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
    use brook_sql::schema::declared;
    use brook_testkit::operator::OperatorHarness;
    use serde_json::json;

    fn sales(items: &[&str], prices: &[i64], times: &[i64]) -> Batch<RowBatch> {
        let schema = declared([("item", "string"), ("price", "int64")]).expect("valid");
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(items.to_vec())),
            Arc::new(Int64Array::from(prices.to_vec())),
        ];
        let columns = RecordBatch::try_new(schema, cols).expect("fits");
        vec![RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(times.to_vec()))),
        }
        .into_record()]
    }

    fn op(step: SqlStep, bad: BadRecords) -> BatchSql {
        let schema = declared([("item", "string"), ("price", "int64")]).expect("valid");
        BatchSql::new(Arc::new(step.plan(&schema).expect("plans")), bad)
    }

    fn rows(
        out: &[brook_core::element::StreamRecord<RowBatch>],
    ) -> Vec<(serde_json::Value, Option<i64>)> {
        out.iter()
            .flat_map(|r| {
                (0..r.value.num_rows()).map(|i| (row_at(&r.value.columns, i), r.value.timestamp(i)))
            })
            .collect()
    }

    #[test]
    fn filter_keeps_the_true_rows_with_their_times() {
        let f = op(
            SqlStep::Filter("item = 'milk' AND price > 50".into()),
            BadRecords::default(),
        );
        let input = sales(
            &["milk", "milk", "tea", "milk"],
            &[60, 40, 90, 70],
            &[1, 2, 3, 4],
        );
        let out = OperatorHarness::run_batch(f, input).expect("runs");
        assert_eq!(out.len(), 1, "one batch in, one out");
        assert_eq!(out[0].timestamp, Some(4), "the batch's latest time");
        assert_eq!(
            rows(&out),
            vec![
                (json!({"item": "milk", "price": 60}), Some(1)),
                (json!({"item": "milk", "price": 70}), Some(4)),
            ]
        );
    }

    #[test]
    fn map_computes_columns_and_only_failing_rows_are_bad() {
        let bad = BadRecords::new(
            BadRecordPolicy::Skip,
            Arc::new(BadRecordCounts::default()),
            None,
        );
        let m = op(
            SqlStep::Map(vec![("per".into(), "100 / price".into())]),
            bad.clone(),
        );
        let out = OperatorHarness::run_batch(m, sales(&["a", "b", "c"], &[50, 0, 25], &[7, 8, 9]))
            .expect("runs");
        assert_eq!(
            rows(&out),
            vec![
                (json!({"item": "a", "price": 50, "per": 2}), Some(7)),
                (json!({"item": "c", "price": 25, "per": 4}), Some(9)),
            ]
        );
        assert_eq!(bad.counts().skipped(), 1, "the row dividing by zero");

        let failing = op(
            SqlStep::Map(vec![("per".into(), "100 / price".into())]),
            BadRecords::default(),
        );
        let e = OperatorHarness::run_batch(failing, sales(&["b"], &[0], &[1]))
            .expect_err("fails under the default policy");
        assert!(e.to_string().contains("map.per"), "{e}");
    }
}
