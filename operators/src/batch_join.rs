//! Joins of YAML jobs on batches (issue 18): a `join` step whose two inputs are batches
//! with schemas known at plan time and key fields of the same types.
//!
//! The step runs as
//!
//! `ToEncodedRows` (chained to each input) → the engine's join (interval, window or
//! temporal, keyed by [`GroupKey`]) → `PairsToBatch` (chained)
//!
//! so the join keeps Flink's behaviour exactly as every other join of brook (the same
//! operators, buffers in keyed state, timers, late records, left outer joins,
//! checkpoints and restores at another parallelism), while each waiting row is its
//! key and its arrow-row encoding (one byte string per row, no JSON object and no
//! field names), and results leave as Arrow batches of the join's schema: the left's
//! fields, then the right's but the key fields, a right field whose name the left has
//! written as `right_prefix` + name (the row path's [`crate::row::join_rows`]).
//!
//! Both sides' keys must be of the same types (so equal values make equal
//! [`GroupKey`]s, and hash to the same key group); otherwise the step is planned on
//! JSON rows, where such keys never match either (`1` and `"1"` differ).

use std::sync::Arc;

use arrow_array::{new_null_array, ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{Field, Schema, SchemaRef};
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use serde::{Deserialize, Serialize};

use crate::batch_rows::row_at;
use crate::group_key::{GroupKey, KeyCodec};
use crate::row::Row;
use crate::row_batch::{row_times, RowBatch};

/// Where an output column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Src {
    Left(usize),
    Right(usize),
}

/// One side of a join: its key and its rows' encoding.
#[derive(Debug)]
pub struct JoinSide {
    schema: SchemaRef,
    keys: KeyCodec,
    rows: RowConverter,
}

impl JoinSide {
    fn new(schema: &SchemaRef, on: &[String]) -> Result<Self, String> {
        let keys = KeyCodec::new(schema, on)?;
        let fields: Vec<SortField> = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let rows = RowConverter::new(fields).map_err(|e| format!("cannot encode its rows: {e}"))?;
        Ok(JoinSide {
            schema: Arc::clone(schema),
            keys,
            rows,
        })
    }

    /// The rows' columns from their encodings.
    fn columns<'a>(&self, rows: impl Iterator<Item = &'a [u8]>) -> OpResult<Vec<ArrayRef>> {
        let parser = self.rows.parser();
        self.rows
            .convert_rows(rows.map(|r| parser.parse(r)))
            .map_err(OperatorError::other)
    }
}

/// A join step planned on batches.
#[derive(Debug)]
pub struct JoinPlan {
    left: JoinSide,
    right: JoinSide,
    output: SchemaRef,
    columns: Vec<Src>,
}

impl JoinPlan {
    /// Plans a join of rows of `left` and `right` on their `on` fields; `Ok(None)` when
    /// the two sides' key fields differ in type (the row path's case).
    ///
    /// # Errors
    /// A key field a side lacks, or a type arrow-row cannot encode.
    pub fn new(
        left: &SchemaRef,
        right: &SchemaRef,
        on: &[String],
        right_prefix: &str,
    ) -> Result<Option<JoinPlan>, String> {
        let (l, r) = (JoinSide::new(left, on)?, JoinSide::new(right, on)?);
        if l.keys.types() != r.keys.types() {
            return Ok(None);
        }
        let (output, columns) = join_fields(left, right, on, right_prefix);
        Ok(Some(JoinPlan {
            left: l,
            right: r,
            output,
            columns,
        }))
    }

    /// The schema of the join's rows.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
    }
}

/// The schema of a join's rows ([`crate::row::join_rows`]): the left's fields, then the
/// right's except the `on` fields, a right field whose name the left has written as
/// `right_prefix` + name; every field nullable (a left outer join's unmatched rows have
/// no right fields).
pub fn join_schema(
    left: &SchemaRef,
    right: &SchemaRef,
    on: &[String],
    right_prefix: &str,
) -> SchemaRef {
    join_fields(left, right, on, right_prefix).0
}

/// [`join_schema`], and where each of its columns comes from.
fn join_fields(
    left: &SchemaRef,
    right: &SchemaRef,
    on: &[String],
    right_prefix: &str,
) -> (SchemaRef, Vec<Src>) {
    let mut fields: Vec<Field> = left
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let mut columns: Vec<Src> = (0..fields.len()).map(Src::Left).collect();
    for (j, f) in right.fields().iter().enumerate() {
        if on.contains(f.name()) {
            continue;
        }
        let name = if left.index_of(f.name()).is_ok() {
            format!("{right_prefix}{}", f.name())
        } else {
            f.name().clone()
        };
        let field = Field::new(&name, f.data_type().clone(), true);
        // A prefixed name the left also has: the row keeps one value (the right's
        // overwrites), so the schema keeps one field.
        match fields.iter().position(|g| g.name() == &name) {
            Some(i) => {
                fields[i] = field;
                columns[i] = Src::Right(j);
            }
            None => {
                fields.push(field);
                columns.push(Src::Right(j));
            }
        }
    }
    (Arc::new(Schema::new(fields)), columns)
}

/// A row waiting in a join: its key and the row in arrow-row's encoding of its side's
/// schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedRow {
    /// The row's key (the `on` fields).
    pub key: GroupKey,
    /// The whole row.
    pub row: Box<[u8]>,
}

/// A result of a join: the left row and the right one (none for an unmatched left row
/// of a left outer join).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedRows {
    /// The left row's encoding.
    pub left: Box<[u8]>,
    /// The right row's.
    pub right: Option<Box<[u8]>>,
}

impl JoinedRows {
    /// The result of `left` and `right`.
    pub fn of(left: &EncodedRow, right: Option<&EncodedRow>) -> Self {
        JoinedRows {
            left: left.row.clone(),
            right: right.map(|r| r.row.clone()),
        }
    }
}

/// Which side of the plan an operator works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The left input.
    Left,
    /// The right input.
    Right,
}

fn side(plan: &JoinPlan, side: Side) -> &JoinSide {
    match side {
        Side::Left => &plan.left,
        Side::Right => &plan.right,
    }
}

/// Batches of one side into [`EncodedRow`]s, each with its row's event time.
#[derive(Debug)]
pub struct ToEncodedRows {
    plan: Arc<JoinPlan>,
    side: Side,
    keys: Vec<GroupKey>,
}

impl ToEncodedRows {
    /// For the `side` input of `plan`.
    pub fn new(plan: Arc<JoinPlan>, side: Side) -> Self {
        ToEncodedRows {
            plan,
            side,
            keys: Vec::new(),
        }
    }
}

impl Operator for ToEncodedRows {
    type In = RowBatch;
    type Out = EncodedRow;

    fn process_batch(
        &mut self,
        batch: Batch<RowBatch>,
        _ctx: &mut OperatorContext,
        out: &mut Output<EncodedRow>,
    ) -> OpResult {
        let s = side(&self.plan, self.side);
        for record in batch {
            let rows = record.value;
            s.keys
                .keys(&rows.columns, &mut self.keys)
                .map_err(OperatorError::other)?;
            let encoded = s
                .rows
                .convert_columns(rows.columns.columns())
                .map_err(OperatorError::other)?;
            out.reserve(rows.num_rows());
            for (i, key) in self.keys.drain(..).enumerate() {
                out.collect(
                    EncodedRow {
                        key,
                        row: encoded.row(i).as_ref().into(),
                    },
                    rows.timestamp(i),
                );
            }
        }
        Ok(())
    }
}

/// A join's results into one batch of the join's schema per engine batch, each row
/// with its result's time.
#[derive(Debug)]
pub struct PairsToBatch {
    plan: Arc<JoinPlan>,
}

impl PairsToBatch {
    /// For the results of `plan`.
    pub fn new(plan: Arc<JoinPlan>) -> Self {
        PairsToBatch { plan }
    }
}

impl Operator for PairsToBatch {
    type In = JoinedRows;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<JoinedRows>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        let n = batch.len();
        if n == 0 {
            return Ok(());
        }
        let plan = &self.plan;
        let left = plan
            .left
            .columns(batch.iter().map(|r| r.value.left.as_ref()))?;
        let matched = batch.iter().filter(|r| r.value.right.is_some()).count();
        let right: Vec<ArrayRef> = if matched == n {
            plan.right
                .columns(batch.iter().filter_map(|r| r.value.right.as_deref()))?
        } else if matched == 0 {
            plan.right
                .schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect()
        } else {
            // The matched rows' columns, spread over all rows (null where none).
            let present = plan
                .right
                .columns(batch.iter().filter_map(|r| r.value.right.as_deref()))?;
            let mut next = 0u32;
            let indices: UInt32Array = batch
                .iter()
                .map(|r| {
                    r.value.right.as_ref().map(|_| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            present
                .iter()
                .map(|c| arrow_select::take::take(c.as_ref(), &indices, None))
                .collect::<Result<_, _>>()
                .map_err(OperatorError::other)?
        };
        let columns: Vec<ArrayRef> = plan
            .columns
            .iter()
            .map(|c| match *c {
                Src::Left(i) => Arc::clone(&left[i]),
                Src::Right(j) => Arc::clone(&right[j]),
            })
            .collect();
        let columns = RecordBatch::try_new(Arc::clone(&plan.output), columns)
            .map_err(OperatorError::other)?;
        let timestamps = row_times(batch.iter().map(|r| r.timestamp));
        out.push(
            RowBatch {
                columns,
                timestamps,
            }
            .into_record(),
        );
        Ok(())
    }
}

/// A side's late rows back into JSON rows (the join's late output, which takes the late
/// rows of both inputs, of two schemas), each with its event time.
#[derive(Debug)]
pub struct LateEncodedRows {
    plan: Arc<JoinPlan>,
    side: Side,
}

impl LateEncodedRows {
    /// For the late rows of the `side` input of `plan`.
    pub fn new(plan: Arc<JoinPlan>, side: Side) -> Self {
        LateEncodedRows { plan, side }
    }
}

impl Operator for LateEncodedRows {
    type In = EncodedRow;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<EncodedRow>,
        _ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        let s = side(&self.plan, self.side);
        let columns = s.columns(batch.iter().map(|r| r.value.row.as_ref()))?;
        let rows =
            RecordBatch::try_new(Arc::clone(&s.schema), columns).map_err(OperatorError::other)?;
        for (i, r) in batch.iter().enumerate() {
            out.collect(row_at(&rows, i), r.timestamp);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, StringArray};
    use brook_core::element::StreamRecord;
    use brook_testkit::operator::{HarnessSetup, OperatorHarness};
    use serde_json::json;

    fn schema(fields: &[(&str, arrow_schema::DataType)]) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    fn plan() -> Arc<JoinPlan> {
        use arrow_schema::DataType::{Float64, Int64, Utf8};
        let left = schema(&[("k", Int64), ("n", Int64)]);
        let right = schema(&[("k", Int64), ("n", Utf8), ("paid", Float64)]);
        Arc::new(
            JoinPlan::new(&left, &right, &["k".into()], "p_")
                .expect("plans")
                .expect("keys of one type"),
        )
    }

    fn harness<O: Operator>(op: O) -> OperatorHarness<O> {
        let mut h = HarnessSetup::new("join").harness(op).expect("harness");
        h.open().expect("opens");
        h
    }

    /// Rows of the right input, encoded.
    fn right_rows(plan: &Arc<JoinPlan>) -> Vec<StreamRecord<EncodedRow>> {
        let columns = RecordBatch::try_new(
            Arc::clone(&plan.right.schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(Float64Array::from(vec![Some(2.5), Some(1.0)])),
            ],
        )
        .expect("batch");
        let rows = RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(vec![7, 9]))),
        };
        let mut h = harness(ToEncodedRows::new(Arc::clone(plan), Side::Right));
        h.process_batch(vec![rows.into_record()]).expect("encodes");
        h.take_records()
    }

    #[test]
    fn rows_are_encoded_with_their_keys_and_times_and_decoded_as_they_came() {
        let plan = plan();
        let encoded = right_rows(&plan);
        assert_eq!(encoded.len(), 2);
        assert_eq!(encoded[0].value.key, GroupKey::Int(Some(1)));
        assert_eq!(encoded[1].value.key, GroupKey::Int(None));
        assert_eq!(
            (encoded[0].timestamp, encoded[1].timestamp),
            (Some(7), Some(9))
        );
        let mut late = harness(LateEncodedRows::new(Arc::clone(&plan), Side::Right));
        late.process_batch(encoded).expect("decodes");
        let out = late.take_records();
        let rows: Vec<_> = out.iter().map(|r| (r.value.clone(), r.timestamp)).collect();
        assert_eq!(
            rows,
            vec![
                (json!({"k": 1, "n": "a", "paid": 2.5}), Some(7)),
                (json!({"k": null, "n": null, "paid": 1.0}), Some(9)),
            ]
        );
    }

    #[test]
    fn results_become_one_batch_with_nulls_for_unmatched_left_rows() {
        let plan = plan();
        let left_cols = RecordBatch::try_new(
            Arc::clone(&plan.left.schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![10, 20])),
            ],
        )
        .expect("batch");
        let mut enc = harness(ToEncodedRows::new(Arc::clone(&plan), Side::Left));
        enc.process_batch(vec![RowBatch::new(left_cols).into_record()])
            .expect("encodes");
        let left = enc.take_records();
        let right = right_rows(&plan);
        let pairs = vec![
            StreamRecord {
                value: JoinedRows::of(&left[0].value, Some(&right[0].value)),
                timestamp: Some(7),
            },
            StreamRecord {
                value: JoinedRows::of(&left[1].value, None),
                timestamp: Some(12),
            },
        ];
        let mut h = harness(PairsToBatch::new(Arc::clone(&plan)));
        h.process_batch(pairs).expect("gathers");
        let out = h.take_records();
        assert_eq!(out.len(), 1);
        let b = &out[0].value;
        let rows: Vec<_> = (0..b.num_rows()).map(|i| row_at(&b.columns, i)).collect();
        assert_eq!(
            rows,
            vec![
                json!({"k": 1, "n": 10, "p_n": "a", "paid": 2.5}),
                json!({"k": 2, "n": 20, "p_n": null, "paid": null}),
            ]
        );
        assert_eq!((b.timestamp(0), b.timestamp(1)), (Some(7), Some(12)));
    }
}
