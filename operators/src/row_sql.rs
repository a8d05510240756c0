//! `filter`, `map` and `select` steps of YAML jobs: SQL expressions (DataFusion's
//! dialect, planned by brook-sql) evaluated over a whole batch of rows at once.
//!
//! This is the row path: where a step's input comes as JSON rows ([`Row`]: after a
//! source that does not yield batches yet, a keyed exchange, a window or a join; issue
//! 18 step 3 put the rest on batches, [`crate::batch_sql`]), this operator takes the
//! engine's batch of rows, turns it **once per batch** into an Arrow
//! `RecordBatch` of the step's input schema (the rows serialised into one reused buffer
//! and decoded by brook-sql's decoder), evaluates the planned expressions with arrow's
//! kernels over the columns, and then:
//! - `filter`: passes on the rows (unchanged, moved) whose condition is true;
//! - `map`: adds the computed fields to each row, replacing one of the same name in
//!   its place;
//! - `select`: makes each row of exactly the computed fields.
//!
//! A row that does not fit the input schema (a field of another type) goes to the step's
//! `on_bad_record` with the field named. An expression that fails on the batch (integer
//! division by zero) is evaluated again row by row, so that only the failing rows go to
//! `on_bad_record`.
//!
//! The input schema is fixed when the job is planned (a source's declared or inferred
//! schema, through the steps before). Where it cannot be known then (after a source
//! without a schema that is read only when the job runs, an `enrich` or a join), the
//! step is planned on its first batch, against the schema inferred from that batch's
//! rows; a planning error then fails the job with the same message.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_sql::decode::{Format, RecordDecoder};
use brook_sql::values::value_at;
use brook_sql::{EvalError, Filter, PlanError, Projection};
use serde_json::{Map, Value};

use crate::row::Row;

/// What a `filter`, `map` or `select` step computes: its SQL expressions as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlStep {
    /// Keep the rows for which the condition is true (not false, not null).
    Filter(String),
    /// Add or replace fields: (name, expression), in order.
    Map(Vec<(String, String)>),
    /// Keep only these fields: (name, expression), in order.
    Select(Vec<(String, String)>),
}

/// A [`SqlStep`] planned against its input schema.
#[derive(Debug, Clone)]
pub struct PlannedSql {
    decoder: RecordDecoder,
    kind: Planned,
}

#[derive(Debug, Clone)]
enum Planned {
    Filter(Filter),
    Map(Projection),
    Select(Projection),
}

/// A step applied to a batch of its input ([`PlannedSql::apply`]).
pub(crate) enum Applied {
    /// A filter's condition per row (a row passes where it is true).
    Mask(BooleanArray),
    /// A map's or select's output rows, one per input row.
    Batch(RecordBatch),
}

/// A step's values on a batch.
enum Evaluated {
    Mask(BooleanArray),
    Columns(Vec<ArrayRef>),
}

impl SqlStep {
    /// Plans the step against its input `schema`.
    ///
    /// # Errors
    /// A [`PlanError`] naming the expression's place (`filter`, `map.dollars`) and,
    /// where it is one, the column.
    pub fn plan(&self, schema: &SchemaRef) -> Result<PlannedSql, PlanError> {
        let kind = match self {
            SqlStep::Filter(condition) => Planned::Filter(Filter::plan(schema, condition)?),
            SqlStep::Map(fields) => Planned::Map(Projection::map(schema, &borrowed(fields))?),
            SqlStep::Select(fields) => {
                Planned::Select(Projection::select(schema, &borrowed(fields))?)
            }
        };
        Ok(PlannedSql {
            decoder: RecordDecoder::new(schema.clone(), Format::Json),
            kind,
        })
    }
}

fn borrowed(fields: &[(String, String)]) -> Vec<(&str, &str)> {
    fields
        .iter()
        .map(|(n, e)| (n.as_str(), e.as_str()))
        .collect()
}

impl PlannedSql {
    /// The schema of the step's output: the next step plans against it.
    pub fn output_schema(&self) -> &SchemaRef {
        match &self.kind {
            Planned::Filter(f) => f.schema(),
            Planned::Map(p) | Planned::Select(p) => p.schema(),
        }
    }

    /// The step on a batch of its input schema, as the batch path evaluates it
    /// ([`crate::batch_sql`]): a filter's mask, or a map's or select's output batch.
    ///
    /// # Errors
    /// As [`Filter::mask`] and [`Projection::apply`].
    pub(crate) fn apply(&self, batch: &RecordBatch) -> Result<Applied, EvalError> {
        match &self.kind {
            Planned::Filter(f) => f.mask(batch).map(Applied::Mask),
            Planned::Map(p) | Planned::Select(p) => p.apply(batch).map(Applied::Batch),
        }
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<Evaluated, EvalError> {
        match &self.kind {
            Planned::Filter(f) => f.mask(batch).map(Evaluated::Mask),
            Planned::Map(p) | Planned::Select(p) => {
                p.evaluate_fields(batch).map(Evaluated::Columns)
            }
        }
    }

    fn field_names(&self) -> Vec<String> {
        match &self.kind {
            Planned::Filter(_) => Vec::new(),
            Planned::Map(p) | Planned::Select(p) => p.field_names().map(str::to_string).collect(),
        }
    }
}

/// An engine batch of rows as JSON texts, newline-delimited in one buffer reused across
/// batches: what brook-sql's decoder (and, on a first batch, its inference) reads.
#[derive(Debug, Default)]
pub(crate) struct RowTexts {
    text: Vec<u8>,
    /// Where each row's text ends in `text` (its newline follows).
    ends: Vec<usize>,
}

impl RowTexts {
    /// Writes the rows of `batch`.
    ///
    /// # Errors
    /// serde_json's, should a row not serialize.
    pub(crate) fn fill(&mut self, batch: &Batch<Row>) -> OpResult {
        self.text.clear();
        self.ends.clear();
        for r in batch {
            serde_json::to_writer(&mut self.text, &r.value).map_err(OperatorError::other)?;
            self.ends.push(self.text.len());
            self.text.push(b'\n');
        }
        Ok(())
    }

    /// All rows' texts, newline-delimited.
    pub(crate) fn all(&self) -> &[u8] {
        &self.text
    }

    /// Each row's text, in order.
    pub(crate) fn records(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let record = &self.text[start..end];
                start = end + 1;
                record
            })
            .collect()
    }
}

/// Why a record did not fit the schema, naming the field where there is one.
pub(crate) fn misfit_reason(b: &brook_sql::decode::BadRecord) -> String {
    // arrow's reasons quote the value whole: a megabyte value is not repeated in every
    // log line and dead letter (the record itself is there in full).
    const MAX: usize = 300;
    let mut reason = b.reason.as_str();
    let cut = reason.len() > MAX;
    if cut {
        let mut end = MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason = &reason[..end];
    }
    let ellipsis = if cut { "..." } else { "" };
    match &b.field {
        Some(f) => format!("field `{f}`: {reason}{ellipsis}"),
        None => format!("{reason}{ellipsis}"),
    }
}

/// The operator of a `filter`, `map` or `select` step.
#[derive(Debug)]
pub struct RowSql {
    step: SqlStep,
    planned: Option<Arc<PlannedSql>>,
    names: Vec<String>,
    bad: BadRecords,
    /// The rows of the batch at hand.
    texts: RowTexts,
}

impl RowSql {
    /// The step, planned when the job was (`planned`), or to be planned on its first
    /// batch (`None`: the input schema was not known then); rows it cannot evaluate go
    /// to `bad`.
    pub fn new(step: SqlStep, planned: Option<Arc<PlannedSql>>, bad: BadRecords) -> Self {
        let names = planned
            .as_ref()
            .map(|p| p.field_names())
            .unwrap_or_default();
        RowSql {
            step,
            planned,
            names,
            bad,
            texts: RowTexts::default(),
        }
    }

    /// Plans the step against the schema of the rows in `text` (the first batch).
    fn plan_on_first_batch(&mut self, ctx: &OperatorContext) -> OpResult<Arc<PlannedSql>> {
        let fail = |reason: String| OperatorError::failed(format!("{}: {reason}", ctx.info()));
        let (schema, _nested) = brook_sql::infer::infer_json_scalars(self.texts.all(), None)
            .map_err(|e| fail(format!("cannot infer the rows' schema: {e}")))?;
        let planned = Arc::new(self.step.plan(&schema).map_err(|e| fail(e.to_string()))?);
        self.names = planned.field_names();
        self.planned = Some(Arc::clone(&planned));
        Ok(planned)
    }
}

impl Operator for RowSql {
    type In = Row;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        self.texts.fill(&batch)?;
        let planned = match &self.planned {
            Some(p) => Arc::clone(p),
            None => self.plan_on_first_batch(ctx)?,
        };
        let records = self.texts.records();
        let decoded = planned.decoder.decode(&records);
        let whole = planned.evaluate(&decoded.batch);
        let position = ctx.info().to_string();
        let mut bad = decoded.bad.iter().peekable();
        let mut j = 0;
        for (i, r) in batch.into_iter().enumerate() {
            if let Some(b) = bad.next_if(|b| b.index == i) {
                self.bad.handle(
                    &String::from_utf8_lossy(records[i]),
                    &position,
                    &misfit_reason(b),
                )?;
                continue;
            }
            let row = j;
            j += 1;
            let alone;
            let (values, at) = match &whole {
                Ok(values) => (values, row),
                // The batch failed as a whole: this row alone, to find the failing ones.
                Err(_) => match planned.evaluate(&decoded.batch.slice(row, 1)) {
                    Ok(v) => {
                        alone = v;
                        (&alone, 0)
                    }
                    Err(e) => {
                        self.bad.handle(
                            &String::from_utf8_lossy(records[i]),
                            &position,
                            &e.to_string(),
                        )?;
                        continue;
                    }
                },
            };
            match values {
                Evaluated::Mask(mask) => {
                    if mask.is_valid(at) && mask.value(at) {
                        out.push(r);
                    }
                }
                Evaluated::Columns(columns) => {
                    let mut obj = match (&planned.kind, r.value) {
                        (Planned::Select(_), _) => Map::with_capacity(columns.len()),
                        (_, Value::Object(m)) => m,
                        // The decoder takes only objects, so this cannot happen; should
                        // it, the row is a bad record rather than lost.
                        (_, other) => {
                            self.bad.handle(
                                &other.to_string(),
                                &position,
                                "expected a JSON object",
                            )?;
                            continue;
                        }
                    };
                    for (name, column) in self.names.iter().zip(columns) {
                        obj.insert(name.clone(), value_at(column.as_ref(), at));
                    }
                    out.collect(Value::Object(obj), r.timestamp);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reason that quotes a huge value is cut (the record itself is kept whole).
    #[test]
    fn a_misfit_reason_is_cut_to_a_readable_length() {
        let b = brook_sql::decode::BadRecord {
            index: 0,
            field: Some("v".into()),
            reason: format!("failed to parse \"{}\" as Int64", "é".repeat(1000)),
        };
        let reason = misfit_reason(&b);
        assert!(reason.starts_with("field `v`: failed to parse"), "{reason}");
        assert!(reason.ends_with("..."), "{reason}");
        assert!(reason.len() < 330, "{}", reason.len());
    }
    use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
    use brook_core::element::StreamRecord;
    use brook_sql::schema::declared;
    use brook_testkit::operator::OperatorHarness;
    use serde_json::json;

    fn rows(v: Vec<Value>) -> Batch<Row> {
        v.into_iter().map(StreamRecord::new).collect()
    }

    fn sales() -> SchemaRef {
        declared([("item", "string"), ("price", "int64")]).expect("valid schema")
    }

    fn planned(step: &SqlStep) -> Option<Arc<PlannedSql>> {
        Some(Arc::new(step.plan(&sales()).expect("plans")))
    }

    fn skip() -> BadRecords {
        BadRecords::new(
            BadRecordPolicy::Skip,
            Arc::new(BadRecordCounts::default()),
            None,
        )
    }

    #[test]
    fn filter_passes_rows_unchanged_and_misfits_are_bad_records() {
        let step = SqlStep::Filter("item = 'milk' AND price > 50".into());
        let bad = skip();
        let f = RowSql::new(step.clone(), planned(&step), bad.clone());
        let input = rows(vec![
            json!({"item": "milk", "price": 60, "extra": [1]}),
            json!({"item": "milk", "price": 40}),
            json!({"item": "tea", "price": 90}),
            json!({"price": 1}),
            json!({"item": "milk", "price": "sixty"}),
        ]);
        let out = OperatorHarness::run_batch(f, input).expect("runs");
        assert_eq!(
            out.into_iter().map(|r| r.value).collect::<Vec<_>>(),
            vec![json!({"item": "milk", "price": 60, "extra": [1]})]
        );
        // The row without `item` has a null condition: dropped, not bad (SQL's WHERE).
        assert_eq!(bad.counts().skipped(), 1, "the row whose price is text");
    }

    #[test]
    fn map_and_select_compute_fields() {
        let step = SqlStep::Map(vec![
            ("dollars".into(), "price / 100.0".into()),
            ("item".into(), "item || '!'".into()),
        ]);
        let m = RowSql::new(step.clone(), planned(&step), BadRecords::default());
        let out = OperatorHarness::run_batch(m, rows(vec![json!({"item": "milk", "price": 60})]))
            .expect("runs");
        assert_eq!(
            out[0].value,
            json!({"item": "milk!", "price": 60, "dollars": 0.6})
        );
        assert_eq!(
            out[0]
                .value
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["item".to_string(), "price".into(), "dollars".into()]),
            "a replaced field stays in its place, a new one comes last"
        );

        let step = SqlStep::Select(vec![("p".into(), "price * 2".into())]);
        let s = RowSql::new(step.clone(), planned(&step), BadRecords::default());
        let out = OperatorHarness::run_batch(s, rows(vec![json!({"item": "milk", "price": 60})]))
            .expect("runs");
        assert_eq!(out[0].value, json!({"p": 120}));
    }

    #[test]
    fn only_the_rows_an_expression_fails_on_are_bad() {
        let step = SqlStep::Map(vec![("per".into(), "100 / price".into())]);
        let bad = skip();
        let m = RowSql::new(step.clone(), planned(&step), bad.clone());
        let out = OperatorHarness::run_batch(
            m,
            rows(vec![
                json!({"item": "a", "price": 50}),
                json!({"item": "b", "price": 0}),
                json!({"item": "c", "price": 25}),
            ]),
        )
        .expect("runs");
        let per: Vec<Value> = out.iter().map(|r| r.value["per"].clone()).collect();
        assert_eq!(per, vec![json!(2), json!(4)]);
        assert_eq!(bad.counts().skipped(), 1);

        let failing = RowSql::new(step.clone(), planned(&step), BadRecords::default());
        let e = OperatorHarness::run_batch(failing, rows(vec![json!({"price": 0})]))
            .expect_err("fails under the default policy");
        assert!(e.to_string().contains("map.per"), "{e}");
    }

    #[test]
    fn a_step_without_a_schema_is_planned_on_its_first_batch() {
        let step = SqlStep::Filter("n % 2 = 0".into());
        let f = RowSql::new(step, None, BadRecords::default());
        let out = OperatorHarness::run_batch(f, rows(vec![json!({"n": 1}), json!({"n": 2})]))
            .expect("runs");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, json!({"n": 2}));

        let f = RowSql::new(SqlStep::Filter("m > 1".into()), None, BadRecords::default());
        let e = OperatorHarness::run_batch(f, rows(vec![json!({"n": 1})])).expect_err("no m");
        assert!(e.to_string().contains("unknown column `m`"), "{e}");
    }
}
