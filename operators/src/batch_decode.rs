//! Records as read (JSON objects, CSV lines with their fields in the schema's order)
//! straight into one [`RowBatch`] of a schema, each row with the event time read from
//! its own field: how a source with a declared schema reads into batches without
//! making rows first (issue 18; the file source's decoder is in the spec's
//! `columnar.rs`).
//!
//! A record that does not fit the schema, and a row whose time field is not a valid
//! timestamp, is returned by its position with the reason (the field named), for the
//! source's `on_bad_record`; the other rows make the batch, in order.

use arrow_array::BooleanArray;
use arrow_schema::SchemaRef;
use brook_core::time::Millis;
use brook_sql::decode::{Format, RecordDecoder};
use brook_sql::schema::field_names;

use crate::row_batch::{row_times, RowBatch};
use crate::row_sql::misfit_reason;
use crate::row_time::EventTimeField;

/// A record left out of the batch: its position among those decoded and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// From 0, in the order given.
    pub index: usize,
    /// Why, naming the field.
    pub reason: String,
}

/// Decodes records into batches of one schema with event times (see the
/// [module docs](self)).
#[derive(Debug, Clone)]
pub struct TimedDecoder {
    decoder: RecordDecoder,
    /// The event time's field and its column in the schema.
    time: Option<(EventTimeField, usize)>,
}

impl TimedDecoder {
    /// Records of `format` into batches of `schema`, each row's event time read from
    /// `time`'s field (rows without event time if `None`).
    ///
    /// # Errors
    /// `time`'s field is not in `schema`.
    pub fn new(
        schema: SchemaRef,
        format: Format,
        time: Option<EventTimeField>,
    ) -> Result<Self, String> {
        let time = match time {
            Some(t) => {
                let column = schema.index_of(&t.field).map_err(|_| {
                    format!(
                        "the event time field `{}` is not in the schema (it has {})",
                        t.field,
                        field_names(&schema)
                    )
                })?;
                Some((t, column))
            }
            None => None,
        };
        Ok(TimedDecoder {
            decoder: RecordDecoder::new(schema, format),
            time,
        })
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        self.decoder.schema()
    }

    /// The records that fit, as one batch (`None` if none did), and those that did
    /// not, in order. Without an event-time field, each row's time is its record's in
    /// `given` (a message's timestamp), if given.
    pub fn decode<R: AsRef<[u8]>>(
        &self,
        records: &[R],
        given: Option<&[Option<Millis>]>,
    ) -> (Option<RowBatch>, Vec<Rejected>) {
        let decoded = self.decoder.decode(records);
        let mut rejected: Vec<Rejected> = decoded
            .bad
            .iter()
            .map(|b| Rejected {
                index: b.index,
                reason: misfit_reason(b),
            })
            .collect();
        let mut columns = decoded.batch;
        if columns.num_rows() == 0 {
            return (None, rejected);
        }
        let Some((time, at)) = &self.time else {
            let timestamps = given.and_then(|given| {
                let mut misfits = decoded.bad.iter().map(|b| b.index).peekable();
                row_times(
                    given
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| misfits.next_if_eq(i).is_none())
                        .map(|(_, t)| *t),
                )
            });
            let batch = RowBatch {
                columns,
                timestamps,
            };
            return (Some(batch), rejected);
        };
        let column = columns.column(*at).clone();
        let mut times: Vec<Option<Millis>> = Vec::with_capacity(columns.num_rows());
        let mut keep: Option<Vec<bool>> = None;
        // Rows of the batch are the records that fit, in order: `index` follows them.
        let mut misfits = decoded.bad.iter().map(|b| b.index).peekable();
        let mut index = 0;
        for row in 0..columns.num_rows() {
            while misfits.next_if_eq(&index).is_some() {
                index += 1;
            }
            match time.extract_at(column.as_ref(), row) {
                Ok(t) => times.push(Some(t)),
                Err(reason) => {
                    keep.get_or_insert_with(|| vec![true; columns.num_rows()])[row] = false;
                    rejected.push(Rejected { index, reason });
                }
            }
            index += 1;
        }
        if let Some(keep) = keep {
            rejected.sort_by_key(|r| r.index);
            if times.is_empty() {
                return (None, rejected);
            }
            columns = match arrow_select::filter::filter_record_batch(
                &columns,
                &BooleanArray::from(keep),
            ) {
                Ok(kept) => kept,
                // The mask is as long as the batch, so this cannot fail; should it,
                // every row is reported rather than lost.
                Err(e) => {
                    let all = (0..records.len()).map(|index| Rejected {
                        index,
                        reason: e.to_string(),
                    });
                    return (None, all.collect());
                }
            };
        }
        let batch = RowBatch {
            columns,
            timestamps: row_times(times),
        };
        (Some(batch), rejected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_rows::row_at;
    use crate::row_time::TimestampFormat;
    use serde_json::json;

    fn schema() -> SchemaRef {
        brook_sql::schema::declared([("item", "string"), ("cents", "int64"), ("ts", "string")])
            .expect("schema")
    }

    #[test]
    fn rows_get_their_times_and_misfits_and_bad_times_are_rejected_in_order() {
        let time = EventTimeField::new("ts", TimestampFormat::Rfc3339);
        let d = TimedDecoder::new(schema(), Format::Json, Some(time)).expect("ts is there");
        let records = [
            r#"{"item": "milk", "cents": 60, "ts": "1970-01-01T00:00:01Z"}"#,
            r#"{"item": "tea", "cents": "cheap", "ts": "1970-01-01T00:00:02Z"}"#,
            r#"{"item": "jam", "cents": 7, "ts": "yesterday"}"#,
            r#"{"item": "egg", "cents": 9}"#,
            r#"{"item": "oat", "cents": 3, "ts": "1970-01-01T00:00:05Z", "extra": 1}"#,
        ];
        let (batch, rejected) = d.decode(&records, None);
        let batch = batch.expect("two rows fit");
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(
            row_at(&batch.columns, 1),
            json!({"item": "oat", "cents": 3, "ts": "1970-01-01T00:00:05Z"})
        );
        assert_eq!(
            (batch.timestamp(0), batch.timestamp(1)),
            (Some(1000), Some(5000))
        );
        let at: Vec<usize> = rejected.iter().map(|r| r.index).collect();
        assert_eq!(at, vec![1, 2, 3]);
        assert!(rejected[0].reason.contains("field `cents`"), "{rejected:?}");
        assert!(
            rejected[1]
                .reason
                .contains("\"yesterday\" is not a timestamp in rfc3339"),
            "{rejected:?}"
        );
        assert_eq!(rejected[2].reason, "field \"ts\" is missing or null");
    }

    #[test]
    fn csv_lines_in_the_schemas_order_and_no_time() {
        let d = TimedDecoder::new(schema(), Format::Csv, None).expect("no time");
        let (batch, rejected) = d.decode(&["milk,60,x", "tea,lots,y"], None);
        let batch = batch.expect("one row fits");
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.timestamps, None);
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].index, 1);
        // Given times (a message's) follow the rows that fit.
        let (batch, _) = d.decode(
            &["tea,lots,y", "milk,60,x", "jam,7,z"],
            Some(&[Some(1), Some(2), None]),
        );
        let batch = batch.expect("two rows fit");
        assert_eq!((batch.timestamp(0), batch.timestamp(1)), (Some(2), None));
    }

    #[test]
    fn a_time_field_outside_the_schema_is_an_error() {
        let time = EventTimeField::new("when", TimestampFormat::EpochMillis);
        let e = TimedDecoder::new(schema(), Format::Json, Some(time)).expect_err("no such field");
        assert_eq!(
            e,
            "the event time field `when` is not in the schema (it has item, cents, ts)"
        );
    }
}
