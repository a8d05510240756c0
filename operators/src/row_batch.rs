//! The record of a YAML job's stateless path (issue 18 step 3): a whole Arrow
//! [`RecordBatch`] of the step's schema as **one engine record**, with each row's event
//! time beside it.
//!
//! The engine moves records one by one through its channels and counts them; a
//! [`RowBatch`] of ~1–8 K rows crosses an operator as one record, so the per-record
//! costs of the engine (a `StreamRecord`, a channel slot) are paid once per batch. The
//! engine's metrics count a [`RowBatch`]'s rows, not the batch (`rows_of`), so the
//! records a job reports read and written are the same as on the row path.
//!
//! Event time: each row keeps its own timestamp (`timestamps`, as each row of the row
//! path keeps its `StreamRecord::timestamp`), so a row-based step after the batch path
//! (a window, a join) sees exactly the times it would have seen. The engine record's
//! own timestamp is the batch's maximum (docs/semantics.md §5a).

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;
use brook_core::element::{Batch, StreamRecord};
use brook_core::time::Millis;

/// A batch of rows of one schema, with their event times (ms since the epoch).
#[derive(Debug, Clone)]
pub struct RowBatch {
    /// The rows.
    pub columns: RecordBatch,
    /// Each row's event time (`columns.num_rows()` long; a null is a row without one),
    /// or `None` where no row has one.
    pub timestamps: Option<Arc<Int64Array>>,
}

impl RowBatch {
    /// Rows without event times.
    pub fn new(columns: RecordBatch) -> Self {
        RowBatch {
            columns,
            timestamps: None,
        }
    }

    /// The number of rows.
    pub fn num_rows(&self) -> usize {
        self.columns.num_rows()
    }

    /// Row `row`'s event time.
    pub fn timestamp(&self, row: usize) -> Option<Millis> {
        let t = self.timestamps.as_ref()?;
        t.is_valid(row).then(|| t.value(row))
    }

    /// The latest event time of its rows: the engine record's timestamp.
    pub fn max_timestamp(&self) -> Option<Millis> {
        self.timestamps.as_ref().and_then(|t| max_value(t.as_ref()))
    }

    /// The rows at `indices`, in their order, with their event times.
    ///
    /// # Errors
    /// arrow's, for an index out of range.
    pub fn take(&self, indices: &arrow_array::UInt32Array) -> Result<RowBatch, ArrowError> {
        let columns = arrow_select::take::take_record_batch(&self.columns, indices)?;
        let timestamps = match &self.timestamps {
            Some(t) => {
                let taken = arrow_select::take::take(t.as_ref(), indices, None)?;
                // take keeps the array's type: Int64 in, Int64 out.
                taken
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .map(Arc::new)
            }
            None => None,
        };
        Ok(RowBatch {
            columns,
            timestamps,
        })
    }

    /// As one engine record.
    pub fn into_record(self) -> StreamRecord<RowBatch> {
        let ts = self.max_timestamp();
        StreamRecord {
            value: self,
            timestamp: ts,
        }
    }
}

/// Rows' event times as a [`RowBatch::timestamps`] column: `None` when no row has one.
pub fn row_times(times: impl IntoIterator<Item = Option<Millis>>) -> Option<Arc<Int64Array>> {
    let t: Int64Array = times.into_iter().collect();
    (t.null_count() < t.len()).then(|| Arc::new(t))
}

/// The largest non-null value .
fn max_value(t: &Int64Array) -> Option<Millis> {
    if t.null_count() == 0 {
        t.values().iter().copied().max()
    } else {
        t.iter().flatten().max()
    }
}

/// The rows of an engine batch, counting a [`RowBatch`] as its rows and any other
/// record as one: the engine's records-in/out metrics (a check of the record type per
/// engine batch, not per record).
pub fn rows_of<T: 'static>(batch: &Batch<T>) -> u64 {
    match (batch as &dyn std::any::Any).downcast_ref::<Batch<RowBatch>>() {
        Some(b) => b.iter().map(|r| r.value.num_rows() as u64).sum(),
        None => batch.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::ArrayRef;

    fn batch(n: i64) -> RowBatch {
        let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        let columns = RecordBatch::try_from_iter([("n", col)]).expect("one column");
        RowBatch {
            columns,
            timestamps: Some(Arc::new(Int64Array::from(vec![Some(5), None, Some(9)]))),
        }
    }

    #[test]
    fn a_row_batch_counts_as_its_rows() {
        let b: Batch<RowBatch> = vec![batch(3).into_record(), batch(3).into_record()];
        assert_eq!(rows_of(&b), 6);
        let plain: Batch<u64> = vec![StreamRecord::new(1), StreamRecord::new(2)];
        assert_eq!(rows_of(&plain), 2);
    }

    #[test]
    fn rows_without_times_have_no_time_column() {
        assert!(row_times([None, None]).is_none());
        assert!(row_times([]).is_none());
        let t = row_times([None, Some(4)]).expect("one time");
        assert_eq!((t.is_null(0), t.value(1)), (true, 4));
    }

    #[test]
    fn the_record_time_is_the_latest_row_time() {
        let r = batch(3).into_record();
        assert_eq!(r.timestamp, Some(9));
        assert_eq!(r.value.timestamp(1), None);
        assert_eq!(r.value.timestamp(2), Some(9));
    }
}
