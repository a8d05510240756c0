//! `map` and `select` steps: fields computed by SQL expressions over a batch's columns,
//! each expression over the input row (not over fields computed beside it).
//!
//! `map` adds the fields to the row, or replaces a field of the same name in its place
//! (the old YAML `map`'s rule); `select` keeps only them, in the order given.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};

use crate::compile::{Compiled, Compiler};
use crate::error::{EvalError, PlanError};

/// Where an output column comes from.
#[derive(Debug, Clone, Copy)]
enum Column {
    /// The input's column at this index, unchanged.
    Input(usize),
    /// The computed field at this index.
    Computed(usize),
}

/// Computed fields planned against a schema, and the output schema.
#[derive(Debug, Clone)]
pub struct Projection {
    /// `map` or `select`.
    step: &'static str,
    input: SchemaRef,
    output: SchemaRef,
    fields: Vec<Compiled>,
    columns: Vec<Column>,
}

impl Projection {
    /// Plans a `map`: `fields` (`[("dollars", "price_cents / 100.0")]`) added to the
    /// input's, or replacing one of the same name in its place.
    ///
    /// # Errors
    /// A [`PlanError`] at `map.<field>`; [`PlanError::Fields`] if a field is given
    /// twice or none is.
    pub fn map(schema: &SchemaRef, fields: &[(&str, &str)]) -> Result<Self, PlanError> {
        if fields.is_empty() {
            return Err(PlanError::Fields {
                at: "map".to_string(),
                reason: "no fields: a map computes at least one".to_string(),
            });
        }
        let compiled = compile_all(schema, "map", fields)?;
        let mut columns: Vec<Column> = (0..schema.fields().len()).map(Column::Input).collect();
        let mut out: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        for (i, c) in compiled.iter().enumerate() {
            let (name, _) = fields[i];
            let field = Field::new(name, c.data_type.clone(), true);
            match schema.index_of(name) {
                Ok(at) => {
                    columns[at] = Column::Computed(i);
                    out[at] = field;
                }
                Err(_) => {
                    columns.push(Column::Computed(i));
                    out.push(field);
                }
            }
        }
        Ok(Projection {
            step: "map",
            input: schema.clone(),
            output: Arc::new(Schema::new(out)),
            fields: compiled,
            columns,
        })
    }

    /// Plans a `select`: only `fields`, in their order.
    ///
    /// # Errors
    /// A [`PlanError`] at `select.<field>`; [`PlanError::Fields`] if a field is given
    /// twice or none is.
    pub fn select(schema: &SchemaRef, fields: &[(&str, &str)]) -> Result<Self, PlanError> {
        if fields.is_empty() {
            return Err(PlanError::Fields {
                at: "select".to_string(),
                reason: "no fields: a select keeps at least one".to_string(),
            });
        }
        let compiled = compile_all(schema, "select", fields)?;
        let out: Vec<Field> = compiled
            .iter()
            .zip(fields)
            .map(|(c, (name, _))| Field::new(*name, c.data_type.clone(), true))
            .collect();
        Ok(Projection {
            step: "select",
            input: schema.clone(),
            output: Arc::new(Schema::new(out)),
            columns: (0..compiled.len()).map(Column::Computed).collect(),
            fields: compiled,
        })
    }

    /// The input schema.
    pub fn input_schema(&self) -> &SchemaRef {
        &self.input
    }

    /// The output schema, known at plan time: the next step plans against it.
    pub fn schema(&self) -> &SchemaRef {
        &self.output
    }

    /// The names of the computed fields, in the order given.
    pub fn field_names(&self) -> impl Iterator<Item = &str> + '_ {
        // Each field was compiled at `<step>.<name>`.
        self.fields.iter().map(|c| {
            c.at.strip_prefix(self.step)
                .and_then(|r| r.strip_prefix('.'))
                .unwrap_or(c.at.as_str())
        })
    }

    /// Only the computed fields' columns of `batch`, in the order given: for a caller
    /// that keeps its own rows and adds the computed values to them (`brook run`'s row
    /// steps, issue 18 step 2).
    ///
    /// # Errors
    /// As [`Projection::apply`].
    pub fn evaluate_fields(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, EvalError> {
        check_schema(self.step, &self.input, batch)?;
        self.fields.iter().map(|f| f.evaluate(batch)).collect()
    }

    /// The output batch of `batch`: one row per input row.
    ///
    /// # Errors
    /// [`EvalError`] naming the field whose expression failed, or a batch of another
    /// schema than the planned one.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, EvalError> {
        check_schema(self.step, &self.input, batch)?;
        let computed = self
            .fields
            .iter()
            .map(|f| f.evaluate(batch))
            .collect::<Result<Vec<ArrayRef>, EvalError>>()?;
        let columns: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|c| match *c {
                Column::Input(i) => batch.column(i).clone(),
                Column::Computed(i) => computed[i].clone(),
            })
            .collect();
        // Each computed column has its planned type and the batch's length, so this
        // cannot fail; should it, the error names the step.
        RecordBatch::try_new(self.output.clone(), columns).map_err(|e| EvalError::Expr {
            at: self.step.to_string(),
            expr: String::new(),
            reason: e.to_string(),
        })
    }
}

/// Compiles each field's expression at `<step>.<field>`; a field named twice is an error.
fn compile_all(
    schema: &SchemaRef,
    step: &str,
    fields: &[(&str, &str)],
) -> Result<Vec<Compiled>, PlanError> {
    let compiler = Compiler::new(schema)?;
    let mut compiled = Vec::with_capacity(fields.len());
    for (i, (name, source)) in fields.iter().enumerate() {
        if name.is_empty() {
            return Err(PlanError::Fields {
                at: step.to_string(),
                reason: "a field name is empty".to_string(),
            });
        }
        if fields[..i].iter().any(|(n, _)| n == name) {
            return Err(PlanError::Fields {
                at: format!("{step}.{name}"),
                reason: "the field is given twice".to_string(),
            });
        }
        compiled.push(compiler.compile(&format!("{step}.{name}"), source)?);
    }
    Ok(compiled)
}

/// A batch of another schema than the plan's would read the wrong columns: an error
/// (checked once per batch; the planned `Arc` itself passes at once).
pub(crate) fn check_schema(
    step: &str,
    planned: &SchemaRef,
    batch: &RecordBatch,
) -> Result<(), EvalError> {
    let actual = batch.schema_ref();
    if Arc::ptr_eq(planned, actual) || planned.fields() == actual.fields() {
        return Ok(());
    }
    Err(EvalError::Schema {
        at: step.to_string(),
        actual: names(actual),
        planned: names(planned),
    })
}

fn names(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::DataType;

    use super::*;
    use crate::schema::declared;

    fn sales() -> SchemaRef {
        declared([("item", "string"), ("price_cents", "int64")]).expect("valid schema")
    }

    fn batch() -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["milk", "tea", "pie"])),
            Arc::new(Int64Array::from(vec![Some(250), None, Some(5)])),
        ];
        RecordBatch::try_new(sales(), columns).expect("matching columns")
    }

    #[test]
    fn map_adds_fields_with_their_types() {
        let p = Projection::map(
            &sales(),
            &[
                ("dollars", "price_cents / 100.0"),
                ("half", "price_cents / 2"),
            ],
        )
        .expect("plans");
        let names: Vec<&str> = p
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["item", "price_cents", "dollars", "half"]);
        assert_eq!(p.schema().field(2).data_type(), &DataType::Float64);
        assert_eq!(p.schema().field(3).data_type(), &DataType::Int64);
        let out = p.apply(&batch()).expect("applies");
        assert_eq!(out.schema(), *p.schema());
        let dollars = out.column(2).as_primitive::<Float64Type>();
        assert_eq!(dollars.value(0), 2.5);
        assert!(dollars.is_null(1), "null in, null out");
        assert_eq!(dollars.value(2), 0.05);
        // Integer division truncates, as in SQL (and Rust).
        assert_eq!(out.column(3).as_primitive::<Int64Type>().value(2), 2);
    }

    #[test]
    fn map_replaces_a_field_in_its_place_reading_the_input_row() {
        let p = Projection::map(
            &sales(),
            &[("price_cents", "price_cents * 2"), ("was", "price_cents")],
        )
        .expect("plans");
        let out = p.apply(&batch()).expect("applies");
        let names: Vec<&str> = p
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["item", "price_cents", "was"]);
        assert_eq!(out.column(1).as_primitive::<Int64Type>().value(0), 500);
        assert_eq!(out.column(2).as_primitive::<Int64Type>().value(0), 250);
        // A replaced field may change its type.
        let p = Projection::map(&sales(), &[("item", "character_length(item)")]).expect("plans");
        assert_eq!(p.schema().field(0).data_type(), &DataType::Int32);
    }

    #[test]
    fn select_keeps_only_its_fields_in_order() {
        let p = Projection::select(
            &sales(),
            &[("cents", "price_cents"), ("name", "upper(item)")],
        )
        .expect("plans");
        let out = p.apply(&batch()).expect("applies");
        let names: Vec<&str> = p
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["cents", "name"]);
        assert_eq!(out.column(1).as_string::<i32>().value(1), "TEA");
    }

    #[test]
    fn plan_errors_name_the_field() {
        let err = Projection::map(&sales(), &[("ok", "1"), ("dollars", "price / 100.0")])
            .expect_err("unknown column");
        assert_eq!(
            err.to_string(),
            "map.dollars: unknown column `price` in `price / 100.0` (columns: item, price_cents)"
        );
        let err = Projection::select(&sales(), &[("x", "item * 2")]).expect_err("mismatch");
        assert!(
            matches!(err, PlanError::TypeMismatch { ref at, .. } if at == "select.x"),
            "{err:?}"
        );
        let err = Projection::map(&sales(), &[("x", "1"), ("x", "2")]).expect_err("twice");
        assert_eq!(err.to_string(), "map.x: the field is given twice");
        let err = Projection::map(&sales(), &[("x", "1 AS y")]).expect_err("alias");
        assert!(matches!(err, PlanError::Syntax { .. }), "{err:?}");
        assert!(Projection::map(&sales(), &[]).is_err());
        assert!(Projection::select(&sales(), &[]).is_err());
    }

    #[test]
    fn an_expression_failing_on_a_batch_names_the_field() {
        let p = Projection::map(&sales(), &[("bad", "price_cents / (price_cents - 5)")])
            .expect("plans");
        let err = p.apply(&batch()).expect_err("division by zero in row 3");
        match &err {
            EvalError::Expr { at, reason, .. } => {
                assert_eq!(at, "map.bad");
                assert!(reason.to_lowercase().contains("divide by zero"), "{reason}");
            }
            other => panic!("expected Expr, got {other:?}"),
        }
    }
}
