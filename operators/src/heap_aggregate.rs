//! The aggregates of a typed window that read their rows: those whose accumulators own
//! heap values, `count_distinct(f)` of a field of any type (a set of its values) and
//! `min`, `max`, `first`, `last` of a `string` field (an owned string), and the inline
//! ones ([`crate::typed_aggregate`]) of a window that has such an aggregate or reads
//! more fields than a row carries inline ([`INLINE_CELLS`]).
//!
//! Rows reach it as [`KeyedRow<SourceRow>`] with no values: the batch they came in
//! (shared) and their index, from which each aggregate reads its column, so nothing is
//! allocated per row, except a string `last` whose value outgrows the one kept and a
//! distinct value not seen before.
//!
//! # Results (those of the row path, [`crate::row_aggregate`])
//! - `count_distinct`: an `int64`, the number of distinct non-null values; `float64`
//!   values compare as numbers (`-0.0` is `0.0`), as the row path's canonical text.
//! - `min`/`max` of strings: by their UTF-8 bytes (Rust's `str` order, the row path's),
//!   the first of equal values kept; `first`/`last`: the first and the latest non-null
//!   value to arrive, by the arrival number the inline aggregates use, which a session
//!   merge compares. `null` over no values.

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::Array;
use serde::{Deserialize, Serialize};

use crate::row_aggregate::AggFunc;
#[cfg(doc)]
use crate::typed_aggregate::INLINE_CELLS;
use crate::typed_aggregate::{
    beats, Cell, KeyedRow, Read, SourceRow, TypedAcc, TypedAgg, TypedAggregate, TypedFunc,
    TypedResult, WindowValues,
};
use crate::window::AggregateFunction;

/// Where an aggregate's result is: in the inline aggregates' results, or the `k`-th
/// heap aggregate's.
#[derive(Debug, Clone, Copy)]
enum Place {
    Inline(usize),
    Heap(usize),
}

/// A heap aggregate: its function and the column it reads, and how.
#[derive(Debug, Clone, Copy)]
struct HeapAgg {
    func: TypedFunc,
    column: usize,
    read: Read,
}

/// The aggregates of a typed window, some of them on the heap.
#[derive(Debug, Clone)]
pub struct HeapAggregate {
    inline: TypedAggregate,
    /// The column each inline aggregate reads, and how (`None`: `count()`).
    inline_reads: Vec<Option<(usize, Read)>>,
    heap: Vec<HeapAgg>,
    /// Each aggregate's result, in the step's order.
    order: Vec<Place>,
}

/// One heap aggregate's accumulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HeapCell {
    /// `min`/`max`/`first`/`last` of strings: the value, and `n` as an inline cell's
    /// (0: no value yet; `min`/`max`: 1; `first`/`last`: the value's arrival number).
    Text {
        /// The value kept.
        value: String,
        /// See above.
        n: i64,
    },
    /// `count_distinct` of integers, timestamps, booleans (0, 1) and floats (their
    /// bits, `-0.0` as `0.0`).
    Ints(HashSet<i64>),
    /// `count_distinct` of strings.
    Texts(HashSet<Box<str>>),
}

/// The accumulator of a [`HeapAggregate`]: the inline cells and the heap ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeapAcc {
    inline: TypedAcc,
    heap: Vec<HeapCell>,
}

/// A [`HeapAggregate`]'s result: one cell per aggregate (`null` at a string's place),
/// and the strings by their place.
#[derive(Debug, Clone, PartialEq)]
pub struct HeapResult {
    cells: TypedResult,
    texts: Vec<(usize, String)>,
}

impl WindowValues for HeapResult {
    fn cell(&self, j: usize) -> Cell {
        self.cells.get(j).copied().unwrap_or(Cell::Null)
    }

    fn text(&self, j: usize) -> Option<&str> {
        self.texts
            .iter()
            .find(|(k, _)| *k == j)
            .map(|(_, s)| s.as_str())
    }
}

/// A value a heap aggregate reads.
enum Value<'a> {
    Int(i64),
    Text(&'a str),
}

/// Row `i` of `column` as `read` says; `None` for null (or a column not of the planned
/// type, which the batches' conversion to the planned schema rules out). A value that
/// is not a string is read as an inline aggregate reads it ([`cell_at`]).
#[inline]
fn value(column: &dyn Array, read: Read, i: usize) -> Option<Value<'_>> {
    if read == Read::Text {
        return (!column.is_null(i))
            .then(|| {
                column
                    .as_string_opt::<i32>()
                    .map(|a| Value::Text(a.value(i)))
            })
            .flatten();
    }
    match cell_at(column, read, i) {
        Cell::Null => None,
        Cell::Int(x) => Some(Value::Int(x)),
        // -0.0 and 0.0 are one value, as on the row path.
        Cell::Float(f) => Some(Value::Int(if f == 0.0 { 0.0 } else { f }.to_bits() as i64)),
    }
}

/// Row `i` of `column` as an inline aggregate reads it (see [`Read`]).
#[inline]
fn cell_at(column: &dyn Array, read: Read, i: usize) -> Cell {
    if column.is_null(i) {
        return Cell::Null;
    }
    let cell = match read {
        Read::Presence | Read::Text => Some(Cell::Int(1)),
        Read::Int => column
            .as_primitive_opt::<Int64Type>()
            .map(|a| Cell::Int(a.value(i))),
        Read::Float => column
            .as_primitive_opt::<Float64Type>()
            .map(|a| Cell::Float(a.value(i))),
        Read::Time => column
            .as_primitive_opt::<TimestampMillisecondType>()
            .map(|a| Cell::Int(a.value(i))),
        Read::Bool => column
            .as_boolean_opt()
            .map(|a| Cell::Int(i64::from(a.value(i)))),
    };
    // A column not of the planned type: none comes (see `value`).
    cell.unwrap_or(Cell::Null)
}

impl HeapAggregate {
    /// The aggregates `planned` (by [`crate::typed_aggregate::plan_aggregates`]).
    pub fn new(planned: &[TypedAgg]) -> HeapAggregate {
        let (mut inline, mut heap) = (0, Vec::new());
        let inline_reads = planned
            .iter()
            .filter(|a| !a.func.on_heap())
            .map(|a| a.column)
            .collect();
        let order = planned
            .iter()
            .map(|a| match (a.func.on_heap(), a.column) {
                (true, Some((column, read))) => {
                    heap.push(HeapAgg {
                        func: a.func,
                        column,
                        read,
                    });
                    Place::Heap(heap.len() - 1)
                }
                _ => {
                    inline += 1;
                    Place::Inline(inline - 1)
                }
            })
            .collect();
        HeapAggregate {
            inline: TypedAggregate::new(planned),
            inline_reads,
            heap,
            order,
        }
    }
}

/// Replaces `value` with `s`, reusing its buffer.
#[inline]
fn keep(value: &mut String, s: &str) {
    value.clear();
    value.push_str(s);
}

impl AggregateFunction<KeyedRow<SourceRow>> for HeapAggregate {
    type Acc = HeapAcc;
    type Out = HeapResult;

    fn create_accumulator(&self) -> HeapAcc {
        HeapAcc {
            inline: AggregateFunction::<KeyedRow<SourceRow>>::create_accumulator(&self.inline),
            heap: self
                .heap
                .iter()
                .map(|a| match (a.func, a.read) {
                    (TypedFunc::Distinct, Read::Text) => HeapCell::Texts(HashSet::new()),
                    (TypedFunc::Distinct, _) => HeapCell::Ints(HashSet::new()),
                    _ => HeapCell::Text {
                        value: String::new(),
                        n: 0,
                    },
                })
                .collect(),
        }
    }

    fn add(&self, acc: &mut HeapAcc, row: &KeyedRow<SourceRow>) {
        let (rows, i) = (&row.row.rows, row.row.index);
        for (k, (read, cell)) in self
            .inline_reads
            .iter()
            .zip(acc.inline.0.iter_mut())
            .enumerate()
        {
            let value = match read {
                Some((column, read)) => cell_at(rows.column(*column).as_ref(), *read, i),
                None => Cell::Int(1),
            };
            self.inline.add_value(k, cell, value);
        }
        for (agg, cell) in self.heap.iter().zip(acc.heap.iter_mut()) {
            let Some(v) = value(rows.column(agg.column).as_ref(), agg.read, i) else {
                continue;
            };
            match (cell, v) {
                (HeapCell::Ints(set), Value::Int(x)) => {
                    set.insert(x);
                }
                // Look up before copying: a value seen before allocates nothing.
                (HeapCell::Texts(set), Value::Text(s)) if !set.contains(s) => {
                    set.insert(s.into());
                }
                (HeapCell::Text { value, n }, Value::Text(s)) => match agg.func {
                    TypedFunc::Text(AggFunc::First) if *n != 0 => {}
                    TypedFunc::Text(AggFunc::First | AggFunc::Last) => {
                        keep(value, s);
                        *n = self.inline.next_seq(*n);
                    }
                    TypedFunc::Text(f)
                        if *n == 0 || beats(s, value.as_str(), f == AggFunc::Max) =>
                    {
                        keep(value, s);
                        *n = 1;
                    }
                    _ => {}
                },
                // A value of another kind than planned: none comes (see `value`).
                _ => {}
            }
        }
    }

    fn merge(&self, acc: &mut HeapAcc, other: HeapAcc) {
        AggregateFunction::<KeyedRow<SourceRow>>::merge(
            &self.inline,
            &mut acc.inline,
            other.inline,
        );
        for ((agg, cell), o) in self.heap.iter().zip(acc.heap.iter_mut()).zip(other.heap) {
            match (cell, o) {
                (HeapCell::Ints(a), HeapCell::Ints(b)) => a.extend(b),
                (HeapCell::Texts(a), HeapCell::Texts(b)) => a.extend(b),
                (HeapCell::Text { value, n }, HeapCell::Text { value: ov, n: on }) => {
                    let take = on != 0
                        && match agg.func {
                            TypedFunc::Text(AggFunc::First) => *n == 0 || on < *n,
                            TypedFunc::Text(AggFunc::Last) => on > *n,
                            TypedFunc::Text(f) => {
                                *n == 0 || beats(ov.as_str(), value.as_str(), f == AggFunc::Max)
                            }
                            _ => false,
                        };
                    if take {
                        (*value, *n) = (ov, on);
                    }
                }
                // Accumulators of one aggregate line up.
                _ => {}
            }
        }
    }

    fn get_result(&self, acc: &HeapAcc) -> HeapResult {
        let inline =
            AggregateFunction::<KeyedRow<SourceRow>>::get_result(&self.inline, &acc.inline);
        let mut texts = Vec::new();
        let cells = self
            .order
            .iter()
            .enumerate()
            .map(|(j, place)| match *place {
                Place::Inline(k) => inline.get(k).copied().unwrap_or(Cell::Null),
                Place::Heap(k) => match acc.heap.get(k) {
                    Some(HeapCell::Ints(set)) => Cell::Int(set.len() as i64),
                    Some(HeapCell::Texts(set)) => Cell::Int(set.len() as i64),
                    Some(HeapCell::Text { value, n }) => {
                        if *n != 0 {
                            texts.push((j, value.clone()));
                        }
                        Cell::Null
                    }
                    None => Cell::Null,
                },
            })
            .collect();
        HeapResult { cells, texts }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::group_key::GroupKey;
    use crate::row_aggregate::AggSpec;
    use crate::typed_aggregate::{plan_aggregates, Cells};

    fn batch(items: &[Option<&str>], n: &[Option<i64>], x: &[Option<f64>]) -> Arc<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("item", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
        ]));
        Arc::new(
            RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(StringArray::from(items.to_vec())),
                    Arc::new(Int64Array::from(n.to_vec())),
                    Arc::new(Float64Array::from(x.to_vec())),
                ],
            )
            .expect("batch"),
        )
    }

    fn plan(list: &[(&str, &str)], rows: &RecordBatch) -> HeapAggregate {
        let aggs: Vec<(String, AggSpec)> = list
            .iter()
            .map(|(n, s)| (n.to_string(), AggSpec::parse(s).expect("parses")))
            .collect();
        let planned = plan_aggregates(&rows.schema(), &aggs)
            .expect("valid")
            .expect("typed");
        HeapAggregate::new(&planned)
    }

    /// Rows `range` of `rows`, added to a new accumulator.
    fn acc(f: &HeapAggregate, rows: &Arc<RecordBatch>, range: std::ops::Range<usize>) -> HeapAcc {
        let mut acc = f.create_accumulator();
        for index in range {
            let row = KeyedRow {
                key: GroupKey::Int(None),
                // Read from the row, as every aggregate here.
                cells: Cells::new(),
                row: SourceRow {
                    rows: Arc::clone(rows),
                    index,
                },
            };
            f.add(&mut acc, &row);
        }
        acc
    }

    fn values(r: &HeapResult, n: usize) -> Vec<String> {
        (0..n)
            .map(|j| match r.text(j) {
                Some(s) => format!("'{s}'"),
                None => format!("{:?}", r.cell(j)),
            })
            .collect()
    }

    const AGGS: &[(&str, &str)] = &[
        ("c", "count()"),
        ("lo", "min(item)"),
        ("s", "sum(n)"),
        ("hi", "max(item)"),
        ("f", "first(item)"),
        ("l", "last(item)"),
        ("d", "count_distinct(item)"),
        ("dn", "count_distinct(n)"),
        ("dx", "count_distinct(x)"),
    ];

    fn rows() -> Arc<RecordBatch> {
        batch(
            &[
                Some("tea"),
                None,
                Some("jam"),
                Some("milk"),
                Some("tea"),
                None,
            ],
            &[Some(1), Some(2), None, Some(1), Some(3), None],
            &[Some(0.0), Some(-0.0), Some(1.5), None, Some(1.5), Some(2.0)],
        )
    }

    #[test]
    fn results_follow_the_row_path() {
        let rows = rows();
        let f = plan(AGGS, &rows);
        let a = acc(&f, &rows, 0..rows.num_rows());
        assert_eq!(
            values(&f.get_result(&a), AGGS.len()),
            [
                "Int(6)", "'jam'", "Int(7)", "'tea'", "'tea'", "'tea'", "Int(3)", "Int(3)",
                "Int(3)"
            ]
        );
        let empty = f.get_result(&f.create_accumulator());
        assert_eq!(
            values(&empty, AGGS.len()),
            ["Int(0)", "Null", "Null", "Null", "Null", "Null", "Int(0)", "Int(0)", "Int(0)"]
        );
    }

    /// Session merges: whichever way two accumulators merge, the result is that of
    /// one accumulator of all rows (first/last by arrival).
    #[test]
    fn merging_equals_adding_everything_to_one() {
        let rows = rows();
        let f = plan(AGGS, &rows);
        let all = f.get_result(&acc(&f, &rows, 0..6));
        let (early, late) = (acc(&f, &rows, 0..3), acc(&f, &rows, 3..6));
        let mut a = early.clone();
        f.merge(&mut a, late.clone());
        let mut b = late;
        f.merge(&mut b, early);
        assert_eq!(f.get_result(&a), all);
        assert_eq!(f.get_result(&b), all);
    }

    #[test]
    fn accumulators_survive_a_checkpoint() {
        let rows = rows();
        let f = plan(AGGS, &rows);
        let a = acc(&f, &rows, 0..6);
        let bytes = bincode::serialize(&a).expect("serializes");
        let back: HeapAcc = bincode::deserialize(&bytes).expect("deserializes");
        assert_eq!(back, a);
    }
}
