//! A `filter` step: the rows of a batch for which an SQL condition is true. A null
//! condition drops the row, as SQL's `WHERE` does (Flink SQL, DataFusion).

use arrow_array::cast::AsArray;
use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef};

use crate::compile::{Compiled, Compiler};
use crate::error::{EvalError, PlanError};

/// A condition planned against a schema.
#[derive(Debug, Clone)]
pub struct Filter {
    schema: SchemaRef,
    condition: Compiled,
}

impl Filter {
    /// Plans `condition` (`item = 'chocolate milk'`) against the input `schema`.
    ///
    /// # Errors
    /// A [`PlanError`] at `filter`: syntax, an unknown column, a type mismatch, or a
    /// condition that is not a bool ([`PlanError::NotBool`]).
    pub fn plan(schema: &SchemaRef, condition: &str) -> Result<Self, PlanError> {
        let compiler = Compiler::new(schema)?;
        let condition = compiler.compile("filter", condition)?;
        // A null literal is a valid (if useless) condition: it drops every row.
        if !matches!(condition.data_type, DataType::Boolean | DataType::Null) {
            return Err(PlanError::NotBool {
                at: condition.at.clone(),
                expr: condition.source.clone(),
                found: condition.data_type.to_string(),
            });
        }
        Ok(Filter {
            schema: compiler.schema().clone(),
            condition,
        })
    }

    /// The input (and output) schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The condition on every row of `batch`: a row passes where the mask is true (not
    /// where it is false or null).
    ///
    /// # Errors
    /// As [`Filter::apply`].
    pub fn mask(&self, batch: &RecordBatch) -> Result<BooleanArray, EvalError> {
        crate::projection::check_schema("filter", &self.schema, batch)?;
        let mask = self.condition.evaluate(batch)?;
        Ok(match mask.data_type() {
            DataType::Boolean => mask.as_boolean().clone(),
            // `filter: "null"`: no row passes.
            _ => BooleanArray::new_null(batch.num_rows()),
        })
    }

    /// The rows of `batch` for which the condition is true, in their order.
    ///
    /// # Errors
    /// [`EvalError`] if the condition fails on the batch, or the batch has another schema
    /// than the planned one.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, EvalError> {
        let mask = self.mask(batch)?;
        arrow_select::filter::filter_record_batch(batch, &mask)
            .map_err(|e| self.condition.eval_error(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringArray};

    use super::*;
    use crate::schema::declared;

    fn sales() -> SchemaRef {
        declared([
            ("item", "string"),
            ("price_cents", "int64"),
            ("userId", "string"),
        ])
        .expect("valid schema")
    }

    fn batch() -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("chocolate milk"),
                Some("tea"),
                None,
                Some("chocolate milk"),
            ])),
            Arc::new(Int64Array::from(vec![
                Some(250),
                Some(120),
                Some(300),
                None,
            ])),
            Arc::new(StringArray::from(vec!["a", "b", "c", "d"])),
        ];
        RecordBatch::try_new(sales(), columns).expect("matching columns")
    }

    fn users(b: &RecordBatch) -> Vec<String> {
        b.column(2)
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap_or("-").to_string())
            .collect()
    }

    #[test]
    fn keeps_the_rows_whose_condition_is_true_and_drops_null_ones() {
        let f = Filter::plan(&sales(), "item = 'chocolate milk'").expect("plans");
        assert_eq!(users(&f.apply(&batch()).expect("applies")), ["a", "d"]);
        // Row c has a null item, row d a null price: the condition is null, not true.
        let f = Filter::plan(&sales(), "item <> 'tea' AND price_cents >= 200").expect("plans");
        assert_eq!(users(&f.apply(&batch()).expect("applies")), ["a"]);
        let f = Filter::plan(&sales(), "price_cents IS NULL OR item IS NULL").expect("plans");
        assert_eq!(users(&f.apply(&batch()).expect("applies")), ["c", "d"]);
    }

    #[test]
    fn identifiers_are_case_sensitive_as_in_flink() {
        let f = Filter::plan(&sales(), "userId IN ('b', 'c')").expect("plans");
        assert_eq!(users(&f.apply(&batch()).expect("applies")), ["b", "c"]);
        let err = Filter::plan(&sales(), "userid = 'b'").expect_err("no such column");
        assert!(matches!(err, PlanError::UnknownColumn { ref column, .. } if column == "userid"));
    }

    #[test]
    fn an_unknown_column_is_named_with_the_columns() {
        let err = Filter::plan(&sales(), "prize > 100").expect_err("unknown column");
        assert_eq!(
            err.to_string(),
            "filter: unknown column `prize` in `prize > 100` (columns: item, price_cents, userId)"
        );
    }

    #[test]
    fn a_type_mismatch_is_a_plan_error_naming_the_types() {
        let err = Filter::plan(&sales(), "item / 100 > 1").expect_err("string arithmetic");
        match &err {
            PlanError::TypeMismatch { at, reason, .. } => {
                assert_eq!(at, "filter");
                assert!(
                    reason.contains("Utf8") && reason.contains("Int64"),
                    "{reason}"
                );
            }
            other => panic!("expected TypeMismatch, got {other:?}"),
        }
        assert!(err
            .to_string()
            .starts_with("filter: type mismatch in `item / 100 > 1`: "));
    }

    #[test]
    fn a_condition_that_is_not_a_bool_is_an_error() {
        let err = Filter::plan(&sales(), "price_cents + 1").expect_err("not a bool");
        assert_eq!(
            err.to_string(),
            "filter: `price_cents + 1` is of type Int64, a filter must be a bool"
        );
    }

    #[test]
    fn syntax_errors_unknown_functions_and_aggregates_are_plan_errors() {
        let err = Filter::plan(&sales(), "item = ").expect_err("syntax");
        assert!(matches!(err, PlanError::Syntax { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("filter: cannot parse `item = `: "),
            "{err}"
        );
        let err = Filter::plan(&sales(), "item = 'a' garbage").expect_err("trailing tokens");
        assert!(matches!(err, PlanError::Syntax { .. }), "{err:?}");
        let err = Filter::plan(&sales(), "nosuch(item)").expect_err("unknown function");
        assert!(matches!(err, PlanError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains("nosuch"), "{err}");
        let err = Filter::plan(&sales(), "sum(price_cents) > 1").expect_err("aggregate");
        assert!(matches!(err, PlanError::Invalid { .. }), "{err:?}");
    }

    #[test]
    fn functions_and_sql_syntax_are_available() {
        let f = Filter::plan(
            &sales(),
            "upper(item) LIKE 'CHOC%' AND starts_with(userId, 'a') \
             AND CASE WHEN price_cents > 100 THEN true ELSE false END",
        )
        .expect("plans");
        assert_eq!(users(&f.apply(&batch()).expect("applies")), ["a"]);
    }

    #[test]
    fn a_batch_of_another_schema_is_an_error() {
        let f = Filter::plan(&sales(), "item = 'tea'").expect("plans");
        let other = declared([("item", "string")]).expect("valid schema");
        let b = RecordBatch::try_new(
            other,
            vec![Arc::new(StringArray::from(vec!["tea"])) as ArrayRef],
        )
        .expect("matching columns");
        let err = f.apply(&b).expect_err("wrong schema");
        assert!(matches!(err, EvalError::Schema { .. }), "{err:?}");
    }
}
