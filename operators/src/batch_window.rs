//! A YAML window step on typed state (issue 18 step 4): the plan, and the two operators
//! at its edges.
//!
//! Where the window's input schema is known at plan time and every aggregate can be
//! typed ([`crate::typed_aggregate`]), the step runs as
//!
//! `ToKeyedRows` (chained to the input) → key exchange on [`GroupKey`] → the engine's
//! [`crate::window::WindowOperator`] with [`TypedAggregate`] → `ResultsToBatch` (chained)
//!
//! so the window keeps Flink's behaviour exactly as every other window of brook
//! (assigners, triggers, allowed lateness, session merging, checkpoints and restores at
//! another parallelism, the in-memory fast paths and RocksDB), while rows cross it as a
//! key and a few inline values instead of JSON objects, and its results leave as Arrow
//! batches of a schema known at plan time: the key fields (their input types),
//! `window_start`, `window_end` (`int64`, ms), then the aggregates in order — the fields
//! of the row path's rows ([`crate::row_aggregate::window_row`]).

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};

use crate::group_key::{GroupKey, KeyCodec};
use crate::heap_aggregate::HeapAggregate;
use crate::row_aggregate::AggSpec;
use crate::row_batch::{row_times, RowBatch};
use crate::typed_aggregate::{
    inline_collect, plan_aggregates, Cell, Cells, KeyedRow, Read, RowOrigin, SourceRow, TypedAgg,
    TypedAggregate, TypedResult, WindowValues, INLINE_CELLS,
};
use crate::window::WindowResult;

/// A window step planned on typed state.
#[derive(Debug, Clone)]
pub struct WindowColumns {
    input: SchemaRef,
    /// Shared by every subtask's operators (arrow-row's converter works through `&`).
    codec: Arc<KeyCodec>,
    aggs: Vec<TypedAgg>,
    output: SchemaRef,
}

/// Why a window step cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowPlanError {
    /// A key field the input lacks, or of a type that cannot be a key.
    Key(String),
    /// (aggregate's output name, reason).
    Aggregate(String, String),
}

impl WindowColumns {
    /// Plans a window keyed by `key_fields` computing `aggregates` on rows of `input`.
    /// `Ok(None)`: some aggregate needs the row path.
    ///
    /// # Errors
    /// A key field the input lacks; an aggregate of a field the input lacks, or `sum` /
    /// `avg` of a field that is not a number.
    pub fn plan(
        input: &SchemaRef,
        key_fields: &[String],
        aggregates: &[(String, AggSpec)],
    ) -> Result<Option<WindowColumns>, WindowPlanError> {
        let codec = KeyCodec::new(input, key_fields).map_err(WindowPlanError::Key)?;
        let Some(aggs) = plan_aggregates(input, aggregates)
            .map_err(|(name, reason)| WindowPlanError::Aggregate(name, reason))?
        else {
            return Ok(None);
        };
        let mut fields: Vec<Field> = key_fields
            .iter()
            .zip(codec.types())
            .map(|(name, ty)| Field::new(name, ty.clone(), true))
            .collect();
        fields.push(Field::new("window_start", DataType::Int64, false));
        fields.push(Field::new("window_end", DataType::Int64, false));
        for a in &aggs {
            fields.push(Field::new(&a.name, a.output_type(), true));
        }
        Ok(Some(WindowColumns {
            input: Arc::clone(input),
            codec: Arc::new(codec),
            aggs,
            output: Arc::new(Schema::new(fields)),
        }))
    }

    /// The schema of the step's output batches.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
    }

    /// The aggregate function the window operator runs unless [`Self::reads_rows`].
    pub fn aggregate(&self) -> TypedAggregate {
        TypedAggregate::new(&self.aggs)
    }

    /// Whether the aggregates read their rows: when one keeps heap values
    /// (`count_distinct`, `min`/`max`/`first`/`last` of a string) or they read more
    /// fields than a row carries inline ([`INLINE_CELLS`]). Then the window runs
    /// [`Self::heap_aggregate`] on rows that keep their input rows ([`SourceRow`]) and
    /// carry no values, so no row allocates.
    pub fn reads_rows(&self) -> bool {
        let inline_reads = self
            .aggs
            .iter()
            .filter(|a| !a.func.on_heap() && a.column.is_some())
            .count();
        inline_reads > INLINE_CELLS || self.aggs.iter().any(|a| a.func.on_heap())
    }

    /// The aggregate function the window operator runs when [`Self::reads_rows`].
    pub fn heap_aggregate(&self) -> HeapAggregate {
        HeapAggregate::new(&self.aggs)
    }

    /// The schema of the step's input batches.
    pub fn input_schema(&self) -> &SchemaRef {
        &self.input
    }

    /// The operator before the exchange; its rows keep `R` of where they came from
    /// (`()`, or [`SourceRow`] for a late output).
    pub fn to_keyed_rows<R: RowOrigin>(&self) -> ToKeyedRows<R> {
        ToKeyedRows {
            codec: Arc::clone(&self.codec),
            // The inline aggregates' values, unless the aggregates read their rows.
            reads: if self.reads_rows() {
                Vec::new()
            } else {
                self.aggs.iter().filter_map(|a| a.column).collect()
            },
            keys: Vec::new(),
            _origin: std::marker::PhantomData,
        }
    }

    /// The operator after the window's late output: the late rows, as they came in.
    pub fn late_rows(&self) -> LateRows {
        LateRows {
            schema: Arc::clone(&self.input),
        }
    }

    /// The operator after the window (`O`: its aggregate's results).
    pub fn results_to_batch<O: WindowValues>(&self) -> ResultsToBatch<O> {
        ResultsToBatch {
            codec: Arc::clone(&self.codec),
            types: self.aggs.iter().map(TypedAgg::output_type).collect(),
            schema: Arc::clone(&self.output),
            _results: std::marker::PhantomData,
        }
    }
}

/// Batches into [`KeyedRow`]s, each with its row's event time.
#[derive(Debug)]
pub struct ToKeyedRows<R = ()> {
    codec: Arc<KeyCodec>,
    reads: Vec<(usize, Read)>,
    /// The keys of the batch at hand (reused).
    keys: Vec<GroupKey>,
    _origin: std::marker::PhantomData<fn() -> R>,
}

/// A column read as the aggregates need it.
enum Column<'a> {
    Presence(&'a dyn Array),
    Int(&'a arrow_array::PrimitiveArray<Int64Type>),
    Float(&'a arrow_array::PrimitiveArray<Float64Type>),
    Time(&'a arrow_array::PrimitiveArray<TimestampMillisecondType>),
    Bool(&'a arrow_array::BooleanArray),
}

impl Column<'_> {
    // Inlined into the row loop: a call per cell was most of `ToKeyedRows`' time on W4.
    #[inline(always)]
    fn cell(&self, row: usize) -> Cell {
        match self {
            Column::Presence(a) => {
                if a.is_null(row) {
                    Cell::Null
                } else {
                    Cell::Int(1)
                }
            }
            Column::Int(a) => {
                if a.is_null(row) {
                    Cell::Null
                } else {
                    Cell::Int(a.value(row))
                }
            }
            Column::Float(a) => {
                if a.is_null(row) {
                    Cell::Null
                } else {
                    Cell::Float(a.value(row))
                }
            }
            Column::Time(a) => {
                if a.is_null(row) {
                    Cell::Null
                } else {
                    Cell::Int(a.value(row))
                }
            }
            Column::Bool(a) => {
                if a.is_null(row) {
                    Cell::Null
                } else {
                    Cell::Int(i64::from(a.value(row)))
                }
            }
        }
    }
}

impl<R: RowOrigin> Operator for ToKeyedRows<R> {
    type In = RowBatch;
    type Out = KeyedRow<R>;

    fn process_batch(
        &mut self,
        batch: Batch<RowBatch>,
        _ctx: &mut OperatorContext,
        out: &mut Output<KeyedRow<R>>,
    ) -> OpResult {
        for record in batch {
            let rows = record.value;
            let columns = &rows.columns;
            self.codec
                .keys(columns, &mut self.keys)
                .map_err(OperatorError::other)?;
            let mut cols = Vec::with_capacity(self.reads.len());
            for &(i, read) in &self.reads {
                let a = columns.column(i).as_ref();
                let wrong = || {
                    OperatorError::failed(format!(
                        "column {i} is {}, not the planned type",
                        a.data_type()
                    ))
                };
                cols.push(match read {
                    // No inline aggregate reads a string's value (see `reads`).
                    Read::Presence | Read::Text => Column::Presence(a),
                    Read::Int => Column::Int(a.as_primitive_opt().ok_or_else(wrong)?),
                    Read::Float => Column::Float(a.as_primitive_opt().ok_or_else(wrong)?),
                    Read::Time => Column::Time(a.as_primitive_opt().ok_or_else(wrong)?),
                    Read::Bool => Column::Bool(a.as_boolean_opt().ok_or_else(wrong)?),
                });
            }
            out.reserve(rows.num_rows());
            let shared = R::share(columns);
            for (row, key) in self.keys.drain(..).enumerate() {
                let cells: Cells = inline_collect(cols.iter().map(|c| c.cell(row)));
                let origin = R::at(&shared, row);
                out.collect(
                    KeyedRow {
                        key,
                        cells,
                        row: origin,
                    },
                    rows.timestamp(row),
                );
            }
        }
        Ok(())
    }
}

/// A typed window's late rows back into batches of its input's schema, as they came in
/// (one batch per engine batch, each row with its event time): the late output of
/// Flink's `sideOutputLateData`.
#[derive(Debug)]
pub struct LateRows {
    schema: SchemaRef,
}

impl Operator for LateRows {
    type In = KeyedRow<SourceRow>;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<KeyedRow<SourceRow>>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        // Late rows are few: one row's slice each, put together.
        let slices: Vec<RecordBatch> = batch
            .iter()
            .map(|r| r.value.row.rows.slice(r.value.row.index, 1))
            .collect();
        let columns = arrow_select::concat::concat_batches(&self.schema, &slices)
            .map_err(OperatorError::other)?;
        let times = row_times(batch.iter().map(|r| r.timestamp));
        let rows = RowBatch {
            columns,
            timestamps: times,
        };
        let at = rows.max_timestamp();
        out.collect(rows, at);
        Ok(())
    }
}

/// Window results into one batch per engine batch, each row with its result's time
/// (the window's max timestamp).
#[derive(Debug)]
pub struct ResultsToBatch<O = TypedResult> {
    codec: Arc<KeyCodec>,
    types: Vec<DataType>,
    schema: SchemaRef,
    _results: std::marker::PhantomData<fn(O)>,
}

impl<O: WindowValues> Operator for ResultsToBatch<O> {
    type In = WindowResult<GroupKey, O>;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<WindowResult<GroupKey, O>>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.len();
        let mut columns = self
            .codec
            .columns(batch.iter().map(|r| &r.value.key))
            .map_err(OperatorError::other)?;
        let starts = Int64Array::from_iter_values(batch.iter().map(|r| r.value.window.start));
        let ends = Int64Array::from_iter_values(batch.iter().map(|r| r.value.window.end));
        columns.push(Arc::new(starts));
        columns.push(Arc::new(ends));
        for (j, ty) in self.types.iter().enumerate() {
            let cell = |r: &brook_core::element::StreamRecord<WindowResult<GroupKey, O>>| {
                r.value.value.cell(j)
            };
            let col: ArrayRef = if *ty == DataType::Utf8 {
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for r in &batch {
                    b.append_option(r.value.value.text(j));
                }
                Arc::new(b.finish())
            } else if *ty == DataType::Float64 {
                let mut b = Float64Array::builder(n);
                for r in &batch {
                    match cell(r) {
                        Cell::Float(v) => b.append_value(v),
                        Cell::Int(v) => b.append_value(v as f64),
                        Cell::Null => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            } else {
                let mut b = Int64Array::builder(n);
                for r in &batch {
                    match cell(r) {
                        Cell::Int(v) => b.append_value(v),
                        // Planned as int64, so never a float; kept rather than lost.
                        Cell::Float(v) => b.append_value(v as i64),
                        Cell::Null => b.append_null(),
                    }
                }
                let ints: ArrayRef = Arc::new(b.finish());
                if *ty == DataType::Int64 {
                    ints
                } else {
                    // A timestamp's ms or a bool's 0/1 back to the input's type.
                    arrow_cast::cast(&ints, ty).map_err(OperatorError::other)?
                }
            };
            columns.push(col);
        }
        let timestamps = row_times(batch.iter().map(|r| r.timestamp));
        let columns = RecordBatch::try_new(Arc::clone(&self.schema), columns)
            .map_err(OperatorError::other)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_rows::row_at;
    use crate::window::TimeWindow;
    use brook_core::element::StreamRecord;
    use brook_testkit::operator::OperatorHarness;
    use serde_json::json;

    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("item", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
        ]))
    }

    fn aggs(list: &[(&str, &str)]) -> Vec<(String, AggSpec)> {
        list.iter()
            .map(|(n, s)| (n.to_string(), AggSpec::parse(s).expect("parses")))
            .collect()
    }

    #[test]
    fn the_output_schema_is_keys_window_then_aggregates() {
        let plan = WindowColumns::plan(
            &input(),
            &["item".into()],
            &aggs(&[("c", "count()"), ("total", "sum(x)"), ("mean", "avg(n)")]),
        )
        .expect("valid")
        .expect("typed");
        let fields: Vec<String> = plan
            .output_schema()
            .fields()
            .iter()
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect();
        assert_eq!(
            fields,
            [
                "item: Utf8",
                "window_start: Int64",
                "window_end: Int64",
                "c: Int64",
                "total: Float64",
                "mean: Float64"
            ]
        );
        assert_eq!(
            WindowColumns::plan(&input(), &["nope".into()], &aggs(&[("c", "count()")]))
                .expect_err("unknown key"),
            WindowPlanError::Key("unknown key field `nope`".into())
        );
    }

    /// A batch through the operator before the window and a result through the one
    /// after: keys and values survive, the result row has the row path's fields.
    #[test]
    fn rows_cross_the_window_as_keys_and_cells() {
        let plan = WindowColumns::plan(
            &input(),
            &["item".into(), "n".into()],
            &aggs(&[("c", "count()"), ("s", "sum(x)")]),
        )
        .expect("valid")
        .expect("typed");
        let columns = RecordBatch::try_new(
            input(),
            vec![
                Arc::new(arrow_array::StringArray::from(vec![Some("tea"), None])),
                Arc::new(Int64Array::from(vec![Some(1), Some(2)])),
                Arc::new(Float64Array::from(vec![Some(2.5), None])),
            ],
        )
        .expect("batch");
        let rows = RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(vec![10, 20]))),
        };
        let keyed = OperatorHarness::run_batch(plan.to_keyed_rows(), vec![rows.into_record()])
            .expect("runs");
        assert_eq!(keyed.len(), 2);
        assert_eq!(keyed[0].timestamp, Some(10));
        assert_eq!(keyed[0].value.cells.as_slice(), [Cell::Float(2.5)]);
        assert_eq!(keyed[1].value.cells.as_slice(), [Cell::Null]);

        let result = |k: &KeyedRow, c: i64| {
            StreamRecord::with_timestamp(
                WindowResult {
                    key: k.key.clone(),
                    window: TimeWindow::new(0, 1000),
                    value: [Cell::Int(c), Cell::Null]
                        .into_iter()
                        .collect::<TypedResult>(),
                },
                999,
            )
        };
        let out = OperatorHarness::run_batch(
            plan.results_to_batch(),
            vec![result(&keyed[1].value, 1), result(&keyed[0].value, 3)],
        )
        .expect("runs");
        assert_eq!(out.len(), 1);
        let b = &out[0].value;
        assert_eq!(b.timestamp(0), Some(999));
        assert_eq!(
            row_at(&b.columns, 0),
            json!({"item": null, "n": 2, "window_start": 0, "window_end": 1000, "c": 1, "s": null})
        );
        assert_eq!(
            row_at(&b.columns, 1),
            json!({"item": "tea", "n": 1, "window_start": 0, "window_end": 1000, "c": 3, "s": null})
        );
    }

    /// Rows carry at most [`INLINE_CELLS`] values (inline, no allocation); a window
    /// reading more fields, or one with a heap aggregate, reads them from its rows.
    #[test]
    fn windows_reading_many_fields_read_them_from_their_rows() {
        let two = aggs(&[("c", "count()"), ("s", "sum(x)"), ("m", "max(n)")]);
        let three = aggs(&[("s", "sum(x)"), ("m", "max(n)"), ("k", "count(item)")]);
        let heap = aggs(&[("d", "count_distinct(n)")]);
        for (list, reads_rows) in [(&two, false), (&three, true), (&heap, true)] {
            let plan = WindowColumns::plan(&input(), &["item".into()], list)
                .expect("valid")
                .expect("typed");
            assert_eq!(plan.reads_rows(), reads_rows, "{list:?}");
            let columns = RecordBatch::try_new(
                input(),
                vec![
                    Arc::new(arrow_array::StringArray::from(vec!["tea"])),
                    Arc::new(Int64Array::from(vec![1])),
                    Arc::new(Float64Array::from(vec![0.5])),
                ],
            )
            .expect("batch");
            let rows = RowBatch {
                columns,
                timestamps: Some(Arc::new(Int64Array::from(vec![10]))),
            };
            let keyed = OperatorHarness::run_batch(
                plan.to_keyed_rows::<SourceRow>(),
                vec![rows.into_record()],
            )
            .expect("runs");
            let cells = keyed[0].value.cells.len();
            assert_eq!(cells, if reads_rows { 0 } else { 2 }, "{list:?}");
            assert!(!keyed[0].value.cells.spilled());
        }
    }

    /// With a late output, keyed rows keep their whole rows, and late ones come back
    /// as they came in, in the order they were late, each with its own time.
    #[test]
    fn late_rows_leave_as_they_came_in() {
        let plan = WindowColumns::plan(&input(), &["item".into()], &aggs(&[("c", "count()")]))
            .expect("valid")
            .expect("typed");
        let columns = RecordBatch::try_new(
            input(),
            vec![
                Arc::new(arrow_array::StringArray::from(vec!["tea", "milk", "jam"])),
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
                Arc::new(Float64Array::from(vec![0.5, 1.5, 2.5])),
            ],
        )
        .expect("batch");
        let rows = RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(vec![10, 20, 30]))),
        };
        let keyed =
            OperatorHarness::run_batch(plan.to_keyed_rows::<SourceRow>(), vec![rows.into_record()])
                .expect("runs");
        assert_eq!(keyed.len(), 3);
        // The window's late output: the last row, then the first.
        let late = vec![keyed[2].clone(), keyed[0].clone()];
        let out = OperatorHarness::run_batch(plan.late_rows(), late).expect("runs");
        assert_eq!(out.len(), 1);
        let b = &out[0].value;
        assert_eq!(b.columns.schema_ref(), &input());
        assert_eq!(
            (0..b.num_rows())
                .map(|i| row_at(&b.columns, i))
                .collect::<Vec<_>>(),
            [
                json!({"item": "jam", "n": 3, "x": 2.5}),
                json!({"item": "tea", "n": 1, "x": 0.5})
            ]
        );
        assert_eq!((b.timestamp(0), b.timestamp(1)), (Some(30), Some(10)));
    }
}
