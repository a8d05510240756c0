//! Batches out as JSON or CSV text, for sinks (issue 18: sinks encode from batches):
//! JSON objects (one per line in a file, one per message in a topic) with arrow-json's
//! encoder, and CSV rows with arrow-csv's writer.
//!
//! The text is the one the row path writes for the same rows (`brook_operators::
//! batch_rows::row_at`, then serde): fields in the schema's order, a null field written
//! as `null` (JSON) or an empty field (CSV), a non-finite float as null, a timestamp as
//! its milliseconds since the epoch (UTC; a finer unit truncated toward zero), and a
//! cell of any other type (a date, a decimal, ...) as arrow's display text. Numbers may
//! be spelled differently (`1.0e21` where serde writes `1e21`); their values are the
//! same.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch, StructArray};
use arrow_json::writer::{make_encoder, EncoderOptions};
use arrow_schema::{ArrowError, DataType, Field, Schema, TimeUnit};

use crate::values::value_at;

/// A batch that could not be encoded (a column of a type the encoders do not take;
/// after [`row_form`] there is none).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the batch: {0}")]
pub struct EncodeError(#[from] ArrowError);

/// `batch` with every column in the form the row path writes it (see the
/// [module docs](self)): timestamps as `int64` milliseconds, non-finite floats null,
/// other floats `float64`, cells of types without a JSON form as text. Columns already
/// in that form are shared, not copied.
///
/// # Errors
/// A column arrow cannot cast to its form.
pub fn row_form(batch: &RecordBatch) -> Result<RecordBatch, EncodeError> {
    let schema = batch.schema_ref();
    let mut changed = false;
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match column_form(column)? {
            Some(c) => {
                changed = true;
                fields.push(Field::new(field.name(), c.data_type().clone(), true));
                columns.push(c);
            }
            None => {
                fields.push(field.as_ref().clone());
                columns.push(Arc::clone(column));
            }
        }
    }
    if !changed {
        return Ok(batch.clone());
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// A column's row-path form, if it is not already in it.
fn column_form(column: &ArrayRef) -> Result<Option<ArrayRef>, ArrowError> {
    use arrow_cast::cast::cast;
    Ok(match column.data_type() {
        DataType::Null
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View => None,
        DataType::Float64 => finite(column.as_primitive::<Float64Type>()),
        DataType::Float16 | DataType::Float32 => {
            let wide = cast(column, &DataType::Float64)?;
            Some(finite(wide.as_primitive::<Float64Type>()).unwrap_or(wide))
        }
        DataType::Timestamp(unit, _) => {
            // `value_at`'s arithmetic: seconds times 1000, finer units divided
            // (toward zero), so both paths give the same milliseconds.
            let ms = cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            let ms = ms.as_primitive::<TimestampMillisecondType>();
            let ms = match unit {
                TimeUnit::Second => {
                    let s = cast(column, &DataType::Timestamp(TimeUnit::Second, None))?;
                    s.as_primitive::<arrow_array::types::TimestampSecondType>()
                        .unary::<_, Int64Type>(|v| v.saturating_mul(1000))
                }
                _ => ms.reinterpret_cast::<Int64Type>(),
            };
            Some(Arc::new(ms))
        }
        _ => Some(display(column)?),
    })
}

/// `column` as arrow's display text (`values::value_at`'s for these types: a binary
/// value's hex digits, a struct's `{a: 1, b: x}`, a date's ISO text), nulls kept.
fn display(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    use std::fmt::Write;

    use arrow_array::builder::StringBuilder;
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default();
    let f = ArrayFormatter::try_new(column.as_ref(), &options)?;
    let mut b = StringBuilder::with_capacity(column.len(), column.len() * 8);
    for i in 0..column.len() {
        if column.is_null(i) {
            b.append_null();
        } else {
            write!(b, "{}", f.value(i)).map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            b.append_value("");
        }
    }
    Ok(Arc::new(b.finish()))
}

/// `floats` with NaN and infinities made null, if it has any (JSON has no such numbers;
/// the row path writes them as null).
fn finite(floats: &Float64Array) -> Option<ArrayRef> {
    if floats.values().iter().all(|v| v.is_finite()) {
        return None;
    }
    Some(Arc::new(
        floats.unary_opt::<_, Float64Type>(|v| v.is_finite().then_some(v)),
    ))
}

/// Appends each row of `batch` to `out` as a JSON object (every field, nulls as
/// `null`), calling `after_row(row, out)` after each: a JSON-lines file pushes `\n`, a
/// topic notes where the row's message ends.
///
/// # Errors
/// See [`row_form`].
pub fn json_rows(
    batch: &RecordBatch,
    out: &mut Vec<u8>,
    mut after_row: impl FnMut(usize, &mut Vec<u8>),
) -> Result<(), EncodeError> {
    if batch.num_rows() == 0 {
        return Ok(());
    }
    let rows = row_form(batch)?;
    let field = Arc::new(Field::new_struct(
        "",
        rows.schema_ref().fields().clone(),
        false,
    ));
    let array = StructArray::from(rows);
    let options = EncoderOptions::default().with_explicit_nulls(true);
    let mut encoder = make_encoder(&field, &array, &options)?;
    for row in 0..array.len() {
        encoder.encode(row, out);
        after_row(row, out);
    }
    Ok(())
}

/// Appends the rows of `batch` to `out` as CSV (RFC 4180 quoting, `\n` line ends),
/// after a header of the schema's field names when `header`.
///
/// # Errors
/// See [`row_form`].
pub fn csv_rows(batch: &RecordBatch, header: bool, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let rows = row_form(batch)?;
    let mut writer = arrow_csv::WriterBuilder::new()
        .with_header(header)
        .build(out);
    // An empty batch writes the header alone.
    writer.write(&rows)?;
    // Flushes the csv writer's buffer into `out`.
    writer.into_inner();
    Ok(())
}

/// The text of row `row` of `column` as a message key: a string as it is, a null
/// `null`, anything else its JSON text (as the row path's `key_field`).
pub fn key_text(column: &dyn Array, row: usize, into: &mut Vec<u8>) {
    if !column.is_null(row) {
        match column.data_type() {
            DataType::Utf8 => {
                return into.extend_from_slice(column.as_string::<i32>().value(row).as_bytes())
            }
            DataType::LargeUtf8 => {
                return into.extend_from_slice(column.as_string::<i64>().value(row).as_bytes())
            }
            DataType::Utf8View => {
                return into.extend_from_slice(column.as_string_view().value(row).as_bytes())
            }
            _ => {}
        }
    }
    match value_at(column, row) {
        serde_json::Value::String(s) => into.extend_from_slice(s.as_bytes()),
        other => into.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{
        BooleanArray, Date32Array, Float32Array, Int64Array, StringArray,
        TimestampMicrosecondArray, TimestampSecondArray,
    };
    use serde_json::{Map, Value};

    use super::*;

    fn batch() -> RecordBatch {
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(-3)])),
            ),
            (
                "name",
                Arc::new(StringArray::from(vec![Some("a \"q\"\nb"), Some(""), None])),
            ),
            (
                "x",
                Arc::new(Float64Array::from(vec![
                    Some(2.0),
                    Some(f64::NAN),
                    Some(0.1),
                ])),
            ),
            (
                "f32",
                Arc::new(Float32Array::from(vec![1.5, f32::INFINITY, -0.25])),
            ),
            (
                "ok",
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            ),
            (
                "us",
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_500),
                    Some(-1_500),
                    None,
                ])),
            ),
            ("s", Arc::new(TimestampSecondArray::from(vec![1, -2, 3]))),
            (
                "day",
                Arc::new(Date32Array::from(vec![Some(0), Some(19_000), None])),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// The row the row path makes of row `i` (`batch_rows::row_at`).
    fn row_path(b: &RecordBatch, i: usize) -> Value {
        let mut obj = Map::new();
        for (f, c) in b.schema_ref().fields().iter().zip(b.columns()) {
            obj.insert(f.name().clone(), value_at(c.as_ref(), i));
        }
        Value::Object(obj)
    }

    #[test]
    fn json_rows_are_the_row_paths_rows() {
        let b = batch();
        let mut out = Vec::new();
        let mut ends = Vec::new();
        json_rows(&b, &mut out, |row, out| {
            ends.push((row, out.len()));
        })
        .unwrap();
        assert_eq!(ends.len(), 3);
        let mut start = 0;
        for (row, end) in ends {
            let text = std::str::from_utf8(&out[start..end]).unwrap();
            // The row path's field order too (serde_json keeps it: preserve_order).
            let got: Value = serde_json::from_str(text).unwrap();
            assert_eq!(got, row_path(&b, row), "row {row}: {text}");
            let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["id", "name", "x", "f32", "ok", "us", "s", "day"]);
            start = end;
        }
        let first = std::str::from_utf8(&out).unwrap();
        assert!(
            first.starts_with(r#"{"id":1,"name":"a \"q\"\nb","x":2.0,"#),
            "{first}"
        );
    }

    #[test]
    fn csv_rows_are_the_row_paths_cells() {
        let b = batch();
        let mut out = Vec::new();
        csv_rows(&b, true, &mut out).unwrap();
        csv_rows(&b.slice(2, 1), false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "id,name,x,f32,ok,us,s,day\n\
             1,\"a \"\"q\"\"\nb\",2.0,1.5,true,1,1000,1970-01-01\n\
             ,,,,,-1,-2000,2022-01-08\n\
             -3,,0.1,-0.25,false,,3000,\n\
             -3,,0.1,-0.25,false,,3000,\n"
        );
        let mut header_only = Vec::new();
        csv_rows(&b.slice(0, 0), true, &mut header_only).unwrap();
        assert_eq!(header_only, b"id,name,x,f32,ok,us,s,day\n");
    }

    #[test]
    fn keys_are_strings_as_they_are_and_json_text_otherwise() {
        let b = batch();
        let key = |col: usize, row: usize| {
            let mut k = Vec::new();
            key_text(b.column(col).as_ref(), row, &mut k);
            String::from_utf8(k).unwrap()
        };
        assert_eq!(key(1, 0), "a \"q\"\nb");
        assert_eq!(key(1, 2), "null");
        assert_eq!(key(0, 0), "1");
        assert_eq!(key(0, 1), "null");
        assert_eq!(key(2, 0), "2.0");
        assert_eq!(key(4, 0), "true");
    }

    /// Types without a JSON form (binary, a struct) are written as the row path writes
    /// them: arrow's display text (hex digits, `{a: 1, b: x}`), not cast.
    #[test]
    fn binary_and_struct_cells_are_their_display_text() {
        use arrow_array::{BinaryArray, StructArray};
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let st = StructArray::from(vec![
            (
                Arc::new(Field::new("a", DataType::Int64, true)),
                Arc::clone(&ids),
            ),
            (Arc::new(Field::new("b", DataType::Utf8, true)), names),
        ]);
        let b = RecordBatch::try_from_iter([
            (
                "bin",
                Arc::new(BinaryArray::from(vec![
                    Some(&b"abc"[..]),
                    Some(&[0xff, 0][..]),
                ])) as ArrayRef,
            ),
            ("st", Arc::new(st) as ArrayRef),
        ])
        .unwrap();
        let mut out = Vec::new();
        json_rows(&b, &mut out, |_, out| out.push(b'\n')).unwrap();
        let rows: Vec<Value> = std::str::from_utf8(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows, [row_path(&b, 0), row_path(&b, 1)]);
        assert_eq!(
            rows[1],
            serde_json::json!({"bin": "ff00", "st": "{a: 2, b: y}"})
        );
        let mut csv = Vec::new();
        csv_rows(&b, true, &mut csv).unwrap();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "bin,st\n616263,\"{a: 1, b: x}\"\nff00,\"{a: 2, b: y}\"\n"
        );
    }
}
