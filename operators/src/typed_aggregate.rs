//! The aggregates of a YAML window step on typed state (issue 18 step 4): with the
//! input's schema known at plan time, each aggregate reads one typed column and keeps a
//! typed accumulator, instead of JSON values ([`crate::row_aggregate`], the row path).
//!
//! A row travels to the window as a [`KeyedRow`]: its key ([`GroupKey`]) and the one
//! value ([`Cell`]) each aggregate with a field reads, inline (no allocation per row).
//! The accumulator of a key and window is one [`AccCell`] per aggregate, inline too.
//!
//! # Which aggregates
//! Inline here: `count()`; `count(f)` of a field of any type; `sum`, `avg` of an `int64`
//! or `float64` field; `min`, `max`, `first`, `last` of an `int64`, `float64`,
//! `timestamp` or `bool` field. On the heap ([`crate::heap_aggregate`]):
//! `count_distinct(f)` of any field, `min`/`max`/`first`/`last` of a `string` field. A
//! field of a type a YAML schema cannot declare (a list, a struct) keeps the row path. The results are those of the row path
//! ([`crate::row_aggregate`]'s semantics, as SQL): `count` an `int64`; `sum` of the
//! field's type, `null` over no values; `avg` a `float64`, `null` over no values;
//! `min`/`max` of the field's type, the first of equal values kept; `first`/`last` the
//! first and the latest non-null value to arrive (by an arrival number kept with it,
//! which a session merge compares, as the row path's). Two differences at
//! the edges of 64 bits (docs/semantics.md §5a): the sum of an `int64` field wraps on
//! overflow, as Flink's `SUM(BIGINT)` (the row path turns it into a float), and the
//! average of an `int64` field adds its values as `f64`s, exact while the sum stays
//! within ±2^53 (the row path sums exactly).
//!
//! Mistakes in the aggregate list are plan-time errors when the schema is known
//! ([`plan_aggregates`]): a field the input lacks, `sum`/`avg` of a field that is not a
//! number.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema, TimeUnit};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use brook_sql::schema::field_names;

use crate::group_key::GroupKey;
use crate::row_aggregate::{seq_base, AggFunc, AggSpec};
use crate::window::AggregateFunction;

/// One value an aggregate reads from a row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Cell {
    /// `null`.
    Null,
    /// An `int64` value, or `1` for a non-null value `count(f)` reads of another type.
    Int(i64),
    /// A `float64` value.
    Float(f64),
}

/// The values of one row's aggregates (those with a field, in aggregate order).
pub type Cells = SmallVec<[Cell; INLINE_CELLS]>;

/// How many values a [`KeyedRow`] carries without allocating: a window whose
/// aggregates read more fields reads them from its rows instead
/// ([`crate::heap_aggregate`]), so no row allocates.
pub const INLINE_CELLS: usize = 2;

/// A row on its way to a typed window: its key, the values its aggregates read, and
/// (`R`) where it came from: nothing (`()`), or with a late output its whole row
/// ([`SourceRow`]), which leaves the window as it came in if it is late.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedRow<R = ()> {
    /// The key fields' values.
    pub key: GroupKey,
    /// One value per aggregate that reads a field, in aggregate order.
    pub cells: Cells,
    /// Where it came from.
    pub row: R,
}

/// The whole of a row of an input batch: the batch (shared by its rows) and its index.
#[derive(Debug, Clone)]
pub struct SourceRow {
    /// The rows of the input batch.
    pub rows: Arc<RecordBatch>,
    /// This row's index in it.
    pub index: usize,
}

impl PartialEq for SourceRow {
    /// The same row of the same batch.
    fn eq(&self, other: &SourceRow) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows) && self.index == other.index
    }
}

/// What a [`KeyedRow`] keeps of its row.
pub trait RowOrigin: Clone + Send + 'static {
    /// What the rows of one batch share.
    type Shared;
    /// Once per input batch.
    fn share(rows: &RecordBatch) -> Self::Shared;
    /// Row `index` of that batch.
    fn at(shared: &Self::Shared, index: usize) -> Self;
}

impl RowOrigin for () {
    type Shared = ();

    #[inline]
    fn share(_: &RecordBatch) {}

    #[inline]
    fn at((): &(), _: usize) {}
}

impl RowOrigin for SourceRow {
    type Shared = Arc<RecordBatch>;

    fn share(rows: &RecordBatch) -> Arc<RecordBatch> {
        Arc::new(rows.clone())
    }

    fn at(shared: &Arc<RecordBatch>, index: usize) -> SourceRow {
        SourceRow {
            rows: Arc::clone(shared),
            index,
        }
    }
}

/// What an aggregate reads from its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Whether the value is null (`count(f)` of a non-numeric field).
    Presence,
    /// An `int64` column.
    Int,
    /// A `float64` column.
    Float,
    /// A `timestamp` column (ms, no zone): its ms as an integer (`min`, `max`, `first`,
    /// `last`).
    Time,
    /// A `bool` column: false 0, true 1 (`min`, `max`, `first`, `last`; false < true as
    /// on the row path).
    Bool,
    /// A `string` column, read from the row itself by the accumulators that own heap
    /// values ([`crate::heap_aggregate`]).
    Text,
}

/// An aggregate of a typed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypedFunc {
    /// `count()`.
    CountRows,
    /// `count(f)`.
    CountValues,
    /// `sum(f)`, `avg(f)`, `min(f)`, `max(f)`, `first(f)`, `last(f)` of an `int64` field.
    Int(AggFunc),
    /// The same of a `float64` field.
    Float(AggFunc),
    /// `count_distinct(f)` of a field of any type (a set of its values,
    /// [`crate::heap_aggregate`]).
    Distinct,
    /// `min(f)`, `max(f)`, `first(f)`, `last(f)` of a `string` field (an owned string,
    /// [`crate::heap_aggregate`]).
    Text(AggFunc),
}

impl TypedFunc {
    /// Whether its accumulator owns heap values (and reads its row, not a [`Cell`]).
    pub fn on_heap(self) -> bool {
        matches!(self, TypedFunc::Distinct | TypedFunc::Text(_))
    }
}

/// One aggregate: its output name, function and input column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedAgg {
    /// The output field.
    pub name: String,
    /// The function.
    pub func: TypedFunc,
    /// The input column it reads and how (`None` for `count()`).
    pub column: Option<(usize, Read)>,
}

impl TypedAgg {
    /// The type of its output column.
    pub fn output_type(&self) -> DataType {
        match (self.func, self.column) {
            (TypedFunc::CountRows | TypedFunc::CountValues | TypedFunc::Distinct, _) => {
                DataType::Int64
            }
            (TypedFunc::Text(_), _) => DataType::Utf8,
            (TypedFunc::Int(AggFunc::Avg) | TypedFunc::Float(_), _) => DataType::Float64,
            // The input's type back (min/max/first/last of a timestamp or bool).
            (TypedFunc::Int(_), Some((_, Read::Time))) => {
                DataType::Timestamp(TimeUnit::Millisecond, None)
            }
            (TypedFunc::Int(_), Some((_, Read::Bool))) => DataType::Boolean,
            (TypedFunc::Int(_), _) => DataType::Int64,
        }
    }
}

/// Checks `aggregates` (output name, aggregate) against the window's input `schema`,
/// and plans them on typed state when every one can be.
///
/// Returns `Ok(None)` when some aggregate needs the row path: one of a field whose type
/// a YAML schema cannot declare (a list or a struct an inferred schema may hold).
///
/// # Errors
/// (output name, reason) for a field the schema lacks, or `sum`/`avg` of a field that
/// is not a number.
pub fn plan_aggregates(
    schema: &Schema,
    aggregates: &[(String, AggSpec)],
) -> Result<Option<Vec<TypedAgg>>, (String, String)> {
    let mut planned = Vec::with_capacity(aggregates.len());
    let mut typed = true;
    for (name, spec) in aggregates {
        let Some(field) = &spec.field else {
            planned.push(TypedAgg {
                name: name.clone(),
                func: TypedFunc::CountRows,
                column: None,
            });
            continue;
        };
        let Ok(i) = schema.index_of(field) else {
            return Err((
                name.clone(),
                format!(
                    "{spec}: unknown field `{field}` (the input has {})",
                    field_names(schema)
                ),
            ));
        };
        let ty = schema.field(i).data_type();
        let numeric = ty.is_numeric();
        if matches!(spec.func, AggFunc::Sum | AggFunc::Avg) && !numeric {
            return Err((
                name.clone(),
                format!("{spec}: `{field}` is {ty}, not a number"),
            ));
        }
        let (func, read) = match (spec.func, ty) {
            (AggFunc::Count, DataType::Int64) => (TypedFunc::CountValues, Read::Int),
            (AggFunc::Count, DataType::Float64) => (TypedFunc::CountValues, Read::Float),
            (AggFunc::Count, _) => (TypedFunc::CountValues, Read::Presence),
            (AggFunc::CountDistinct, DataType::Int64) => (TypedFunc::Distinct, Read::Int),
            (AggFunc::CountDistinct, DataType::Float64) => (TypedFunc::Distinct, Read::Float),
            (AggFunc::CountDistinct, DataType::Timestamp(TimeUnit::Millisecond, None)) => {
                (TypedFunc::Distinct, Read::Time)
            }
            (AggFunc::CountDistinct, DataType::Boolean) => (TypedFunc::Distinct, Read::Bool),
            (AggFunc::CountDistinct, DataType::Utf8) => (TypedFunc::Distinct, Read::Text),
            (
                f @ (AggFunc::Min | AggFunc::Max | AggFunc::First | AggFunc::Last),
                DataType::Utf8,
            ) => (TypedFunc::Text(f), Read::Text),
            (f, DataType::Int64) if f != AggFunc::CountDistinct => (TypedFunc::Int(f), Read::Int),
            (f, DataType::Float64) if f != AggFunc::CountDistinct => {
                (TypedFunc::Float(f), Read::Float)
            }
            // Values of one order as integers; `sum`/`avg` of them was refused above.
            (
                f @ (AggFunc::Min | AggFunc::Max | AggFunc::First | AggFunc::Last),
                DataType::Timestamp(TimeUnit::Millisecond, None),
            ) => (TypedFunc::Int(f), Read::Time),
            (
                f @ (AggFunc::Min | AggFunc::Max | AggFunc::First | AggFunc::Last),
                DataType::Boolean,
            ) => (TypedFunc::Int(f), Read::Bool),
            _ => {
                typed = false;
                continue;
            }
        };
        planned.push(TypedAgg {
            name: name.clone(),
            func,
            column: Some((i, read)),
        });
    }
    Ok(typed.then_some(planned))
}

/// One aggregate's accumulator: two words, read by the aggregate's function (a tag
/// per cell would make it three; the accumulators of a window's keys are most of its
/// memory). All zero is empty for every function.
///
/// - `count`: `n` the count.
/// - `sum` of integers: `v` the sum (wrapping, as a Java `long`), `n` the values.
/// - `sum` of floats, `avg`: `v` the sum's `f64` bits, `n` the values (an integer
///   field's values are added as floats: exact while the sum stays within 2^53).
/// - `min`/`max`: `v` the value (an `i64`, or an `f64`'s bits), `n` 1 once there is one.
/// - `first`/`last`: `v` the value, `n` its arrival number (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AccCell {
    v: u64,
    n: i64,
}

impl AccCell {
    #[inline]
    fn float(self) -> f64 {
        f64::from_bits(self.v)
    }

    #[inline]
    fn add_float(&mut self, x: f64, n: i64) {
        self.v = (self.float() + x).to_bits();
        self.n += n;
    }

    /// Keeps `x` if it is the first value or beats the kept one.
    #[inline]
    fn pick_int(&mut self, x: i64, max: bool) {
        if self.n == 0 || beats(x, self.v as i64, max) {
            self.v = x as u64;
            self.n = 1;
        }
    }

    #[inline]
    fn pick_float(&mut self, x: f64, max: bool) {
        if self.n == 0 || beats(x, self.float(), max) {
            self.v = x.to_bits();
            self.n = 1;
        }
    }
}

/// A typed window's accumulator: one cell per aggregate, inline for up to two.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedAcc(pub(crate) SmallVec<[AccCell; 2]>);

// As a sequence of cells, by hand: smallvec's `serde` feature would rebuild every crate
// that uses smallvec (parking_lot's dependents, DataFusion among them).
impl Serialize for TypedAcc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for TypedAcc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<AccCell>::deserialize(d).map(|v| TypedAcc(v.into_iter().collect()))
    }
}

/// A typed window's result: one value per aggregate.
pub type TypedResult = SmallVec<[Cell; 4]>;

/// A window result's values, by the aggregate's place in the step.
pub trait WindowValues: Clone + Send + 'static {
    /// The `j`-th aggregate's value (`null` for a string).
    fn cell(&self, j: usize) -> Cell;
    /// The `j`-th aggregate's value if it is a string (`None`: `null` or not a string).
    fn text(&self, j: usize) -> Option<&str>;
}

impl WindowValues for TypedResult {
    #[inline]
    fn cell(&self, j: usize) -> Cell {
        self.get(j).copied().unwrap_or(Cell::Null)
    }

    #[inline]
    fn text(&self, _: usize) -> Option<&str> {
        None
    }
}

/// The aggregates of a typed window step.
#[derive(Debug)]
pub struct TypedAggregate {
    aggs: Vec<(TypedFunc, Option<usize>)>,
    /// The arrival sequence of `first`/`last` values, as the row path's
    /// (`row_aggregate`): numbers from the wall clock, above every earlier process's.
    seq: AtomicU64,
}

impl Clone for TypedAggregate {
    fn clone(&self) -> Self {
        TypedAggregate {
            aggs: self.aggs.clone(),
            seq: AtomicU64::new(self.seq.load(AtomicOrdering::Relaxed)),
        }
    }
}

impl TypedAggregate {
    /// The aggregates `planned` (by [`plan_aggregates`]) whose accumulators are inline
    /// (those [`TypedFunc::on_heap`] are left out: [`crate::heap_aggregate`] keeps
    /// them); the `k`-th with a column reads `cells[k]` of each row.
    pub fn new(planned: &[TypedAgg]) -> TypedAggregate {
        let mut slot = 0;
        let aggs = planned
            .iter()
            .filter(|a| !a.func.on_heap())
            .map(|a| {
                let s = a.column.map(|_| {
                    slot += 1;
                    slot - 1
                });
                (a.func, s)
            })
            .collect();
        TypedAggregate {
            aggs,
            seq: AtomicU64::new(seq_base()),
        }
    }

    /// Adds value `value` (`Cell::Int(1)` for `count()`) of the `k`-th aggregate to
    /// its `cell`.
    #[inline]
    pub(crate) fn add_value(&self, k: usize, cell: &mut AccCell, value: Cell) {
        let Some((func, _)) = self.aggs.get(k) else {
            return;
        };
        match (func, value) {
            // Left out by `new`.
            (_, Cell::Null) | (TypedFunc::Distinct | TypedFunc::Text(_), _) => {}
            (TypedFunc::CountRows | TypedFunc::CountValues, _) => cell.n += 1,
            (TypedFunc::Int(AggFunc::Sum), Cell::Int(v)) => {
                cell.v = (cell.v as i64).wrapping_add(v) as u64;
                cell.n += 1;
            }
            (TypedFunc::Int(AggFunc::Avg), Cell::Int(v)) => cell.add_float(v as f64, 1),
            (TypedFunc::Float(AggFunc::Sum | AggFunc::Avg), Cell::Float(v)) => {
                cell.add_float(v, 1);
            }
            // `first`: the first value, `last`: the latest, each with its arrival
            // number (in `n`), which a session merge compares.
            (
                TypedFunc::Int(AggFunc::First) | TypedFunc::Float(AggFunc::First),
                Cell::Int(_) | Cell::Float(_),
            ) if cell.n != 0 => {}
            (
                TypedFunc::Int(AggFunc::First | AggFunc::Last)
                | TypedFunc::Float(AggFunc::First | AggFunc::Last),
                Cell::Int(v),
            ) => {
                cell.v = v as u64;
                cell.n = self.next_seq(cell.n);
            }
            (
                TypedFunc::Int(AggFunc::First | AggFunc::Last)
                | TypedFunc::Float(AggFunc::First | AggFunc::Last),
                Cell::Float(v),
            ) => {
                cell.v = v.to_bits();
                cell.n = self.next_seq(cell.n);
            }
            (TypedFunc::Int(f), Cell::Int(v)) => cell.pick_int(v, *f == AggFunc::Max),
            (TypedFunc::Float(f), Cell::Float(v)) => cell.pick_float(v, *f == AggFunc::Max),
            // A value of another type than planned: the conversion reads each
            // column by its planned type, so none comes.
            _ => {}
        }
    }

    /// The next arrival number for a cell holding number `held` (0: none): above
    /// `held`, so a restored accumulator's order is kept.
    #[inline]
    pub(crate) fn next_seq(&self, held: i64) -> i64 {
        let s = self.seq.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        let held = held.max(0) as u64;
        if s > held {
            return s as i64;
        }
        self.seq.fetch_max(held + 1, AtomicOrdering::Relaxed);
        (held + 1) as i64
    }
}

/// Whether `new` replaces `cur` as the `min` (`max` false) or `max`: strictly further in
/// that direction (the first of equal values is kept).
#[inline]
pub(crate) fn beats<T: PartialOrd>(new: T, cur: T, max: bool) -> bool {
    if max {
        new > cur
    } else {
        new < cur
    }
}

impl<R> AggregateFunction<KeyedRow<R>> for TypedAggregate {
    type Acc = TypedAcc;
    type Out = TypedResult;

    fn create_accumulator(&self) -> TypedAcc {
        TypedAcc(SmallVec::from_elem(AccCell::default(), self.aggs.len()))
    }

    #[inline]
    fn add(&self, acc: &mut TypedAcc, row: &KeyedRow<R>) {
        for (k, ((_, slot), cell)) in self.aggs.iter().zip(acc.0.iter_mut()).enumerate() {
            let value = match slot {
                Some(s) => row.cells.get(*s).copied().unwrap_or(Cell::Null),
                None => Cell::Int(1),
            };
            self.add_value(k, cell, value);
        }
    }

    fn merge(&self, acc: &mut TypedAcc, other: TypedAcc) {
        for (((func, _), cell), o) in self.aggs.iter().zip(acc.0.iter_mut()).zip(other.0) {
            match func {
                TypedFunc::CountRows | TypedFunc::CountValues => cell.n += o.n,
                TypedFunc::Int(AggFunc::Sum) => {
                    cell.v = (cell.v as i64).wrapping_add(o.v as i64) as u64;
                    cell.n += o.n;
                }
                TypedFunc::Int(AggFunc::Avg) | TypedFunc::Float(AggFunc::Sum | AggFunc::Avg) => {
                    cell.add_float(o.float(), o.n);
                }
                _ if o.n == 0 => {}
                TypedFunc::Int(AggFunc::First) | TypedFunc::Float(AggFunc::First) => {
                    if cell.n == 0 || o.n < cell.n {
                        *cell = o;
                    }
                }
                TypedFunc::Int(AggFunc::Last) | TypedFunc::Float(AggFunc::Last) => {
                    if o.n > cell.n {
                        *cell = o;
                    }
                }
                TypedFunc::Int(f) => cell.pick_int(o.v as i64, *f == AggFunc::Max),
                TypedFunc::Float(f) => cell.pick_float(o.float(), *f == AggFunc::Max),
                // Left out by `new`.
                TypedFunc::Distinct | TypedFunc::Text(_) => {}
            }
        }
    }

    fn get_result(&self, acc: &TypedAcc) -> TypedResult {
        inline_collect(
            self.aggs
                .iter()
                .zip(acc.0.iter())
                .map(|((func, _), cell)| match func {
                    TypedFunc::CountRows | TypedFunc::CountValues => Cell::Int(cell.n),
                    _ if cell.n == 0 => Cell::Null,
                    TypedFunc::Int(AggFunc::Avg) | TypedFunc::Float(AggFunc::Avg) => {
                        Cell::Float(cell.float() / cell.n as f64)
                    }
                    TypedFunc::Int(_) => Cell::Int(cell.v as i64),
                    TypedFunc::Float(_) => Cell::Float(cell.float()),
                    // Left out by `new`.
                    TypedFunc::Distinct | TypedFunc::Text(_) => Cell::Null,
                }),
        )
    }
}

/// `cells` (of known length) as a [`SmallVec`], filled in place when they fit inline:
/// `collect` goes through `extend`'s capacity checks per item, a measurable cost per
/// row and per result.
#[inline]
pub(crate) fn inline_collect<const N: usize>(
    cells: impl ExactSizeIterator<Item = Cell>,
) -> SmallVec<[Cell; N]>
where
    [Cell; N]: smallvec::Array<Item = Cell>,
{
    let n = cells.len();
    if n > N {
        return cells.collect();
    }
    let mut buf = [Cell::Null; N];
    for (slot, c) in buf.iter_mut().zip(cells) {
        *slot = c;
    }
    SmallVec::from_buf_and_len(buf, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("item", DataType::Utf8, true),
        ])
    }

    fn aggs(list: &[(&str, &str)]) -> Vec<(String, AggSpec)> {
        list.iter()
            .map(|(n, s)| (n.to_string(), AggSpec::parse(s).expect("parses")))
            .collect()
    }

    fn run(list: &[(&str, &str)], rows: &[&[Cell]]) -> TypedResult {
        let planned = plan_aggregates(&schema(), &aggs(list))
            .expect("valid")
            .expect("typed");
        let f = TypedAggregate::new(&planned);
        let mut acc = AggregateFunction::<KeyedRow>::create_accumulator(&f);
        for cells in rows {
            let row = KeyedRow {
                key: GroupKey::Int(None),
                cells: cells.iter().copied().collect(),
                row: (),
            };
            f.add(&mut acc, &row);
        }
        AggregateFunction::<KeyedRow>::get_result(&f, &acc)
    }

    #[test]
    fn results_follow_sql() {
        let got = run(
            &[
                ("c", "count()"),
                ("cn", "count(n)"),
                ("s", "sum(n)"),
                ("a", "avg(n)"),
                ("lo", "min(x)"),
                ("hi", "max(x)"),
                ("ci", "count(item)"),
            ],
            &[
                &[
                    Cell::Int(4),
                    Cell::Int(4),
                    Cell::Int(4),
                    Cell::Float(2.5),
                    Cell::Float(2.5),
                    Cell::Int(1),
                ],
                &[
                    Cell::Null,
                    Cell::Null,
                    Cell::Null,
                    Cell::Float(-1.0),
                    Cell::Float(-1.0),
                    Cell::Null,
                ],
                &[
                    Cell::Int(-1),
                    Cell::Int(-1),
                    Cell::Int(-1),
                    Cell::Null,
                    Cell::Null,
                    Cell::Int(1),
                ],
            ],
        );
        assert_eq!(
            got.as_slice(),
            [
                Cell::Int(3),
                Cell::Int(2),
                Cell::Int(3),
                Cell::Float(1.5),
                Cell::Float(-1.0),
                Cell::Float(2.5),
                Cell::Int(2)
            ]
        );
    }

    #[test]
    fn no_values_give_null_and_int_sums_wrap_as_flink() {
        let got = run(&[("s", "sum(n)"), ("a", "avg(x)"), ("m", "min(n)")], &[]);
        assert_eq!(got.as_slice(), [Cell::Null, Cell::Null, Cell::Null]);
        let got = run(
            &[("s", "sum(n)")],
            &[&[Cell::Int(i64::MAX)], &[Cell::Int(1)]],
        );
        assert_eq!(got.as_slice(), [Cell::Int(i64::MIN)]);
    }

    #[test]
    fn merging_equals_adding_everything_to_one() {
        let planned = plan_aggregates(
            &schema(),
            &aggs(&[
                ("c", "count()"),
                ("s", "sum(x)"),
                ("m", "max(n)"),
                ("a", "avg(n)"),
            ]),
        )
        .expect("valid")
        .expect("typed");
        let f = TypedAggregate::new(&planned);
        let rows: Vec<KeyedRow> = (0..10)
            .map(|i| KeyedRow {
                key: GroupKey::Int(Some(1)),
                cells: [
                    Cell::Float(f64::from(i) / 4.0),
                    Cell::Int(i64::from(i % 7)),
                    Cell::Int(i64::from(i)),
                ]
                .into_iter()
                .collect(),
                row: (),
            })
            .collect();
        let new = || AggregateFunction::<KeyedRow>::create_accumulator(&f);
        let mut all = new();
        rows.iter().for_each(|r| f.add(&mut all, r));
        let (mut a, mut b) = (new(), new());
        rows[..4].iter().for_each(|r| f.add(&mut a, r));
        rows[4..].iter().for_each(|r| f.add(&mut b, r));
        AggregateFunction::<KeyedRow>::merge(&f, &mut a, b);
        let result = |acc| AggregateFunction::<KeyedRow>::get_result(&f, acc);
        assert_eq!(result(&a), result(&all));
    }

    #[test]
    fn mistakes_are_named_and_other_aggregates_need_rows() {
        let err = plan_aggregates(&schema(), &aggs(&[("t", "sum(nosuch)")])).expect_err("unknown");
        assert_eq!(
            err,
            (
                "t".to_string(),
                "sum(nosuch): unknown field `nosuch` (the input has n, x, item)".to_string()
            )
        );
        let err = plan_aggregates(&schema(), &aggs(&[("t", "avg(item)")])).expect_err("string");
        assert_eq!(err.1, "avg(item): `item` is Utf8, not a number");
        let heap = plan_aggregates(
            &schema(),
            &aggs(&[
                ("f", "first(item)"),
                ("d", "count_distinct(n)"),
                ("m", "min(item)"),
            ]),
        )
        .expect("valid")
        .expect("typed");
        assert!(heap.iter().all(|a| a.func.on_heap()), "{heap:?}");
        let list = Schema::new(vec![Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        )]);
        assert_eq!(
            plan_aggregates(&list, &aggs(&[("t", "first(tags)")])),
            Ok(None),
            "a list needs rows"
        );
    }

    /// `first`/`last` keep the first and the latest value to arrive, nulls skipped; a
    /// merge (sessions) compares arrival numbers, whichever way it goes.
    #[test]
    fn first_and_last_follow_arrival_across_merges() {
        let planned = plan_aggregates(&schema(), &aggs(&[("f", "first(n)"), ("l", "last(x)")]))
            .expect("valid")
            .expect("typed");
        let f = TypedAggregate::new(&planned);
        let row = |n: Cell, x: Cell| KeyedRow {
            key: GroupKey::Int(None),
            cells: [n, x].into_iter().collect(),
            row: (),
        };
        let new = || AggregateFunction::<KeyedRow>::create_accumulator(&f);
        let (mut early, mut late) = (new(), new());
        f.add(&mut early, &row(Cell::Null, Cell::Float(0.5)));
        f.add(&mut early, &row(Cell::Int(7), Cell::Float(1.5)));
        f.add(&mut late, &row(Cell::Int(9), Cell::Float(2.5)));
        f.add(&mut late, &row(Cell::Int(11), Cell::Null));
        let result = |acc: &TypedAcc| AggregateFunction::<KeyedRow>::get_result(&f, acc);
        assert_eq!(result(&early).as_slice(), [Cell::Int(7), Cell::Float(1.5)]);
        let merge =
            |acc: &mut TypedAcc, other| AggregateFunction::<KeyedRow>::merge(&f, acc, other);
        let mut a = early.clone();
        merge(&mut a, late.clone());
        let mut b = late;
        merge(&mut b, early);
        assert_eq!(result(&a).as_slice(), [Cell::Int(7), Cell::Float(2.5)]);
        assert_eq!(result(&a), result(&b));
        assert_eq!(result(&new()).as_slice(), [Cell::Null, Cell::Null]);
    }
}
