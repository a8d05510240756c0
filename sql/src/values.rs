//! One cell of a column as a JSON value: how `brook run`'s row steps put a computed
//! field back into a row (issue 18 step 2, while records still travel as JSON rows).
//!
//! Rules: null is `null`; booleans, integers and strings are themselves; a float is a
//! JSON number, or `null` when it is NaN or infinite (JSON has neither, as arrow-json's
//! writer); a timestamp is its milliseconds since the epoch (how a row holds event
//! times); any other type is its text as arrow displays it (dates, decimals).

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::Array;
use arrow_schema::{DataType, TimeUnit};
use serde_json::Value;

/// The value of `array` at `row` (`row < array.len()`).
pub fn value_at(array: &dyn Array, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).into(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).into(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).into(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).into(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).into(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).into(),
        DataType::Float16 => float(array.as_primitive::<Float16Type>().value(row).to_f64()),
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => array.as_string::<i32>().value(row).into(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).into(),
        DataType::Utf8View => array.as_string_view().value(row).into(),
        DataType::Timestamp(unit, _) => {
            let ms = match unit {
                TimeUnit::Second => array
                    .as_primitive::<TimestampSecondType>()
                    .value(row)
                    .saturating_mul(1000),
                TimeUnit::Millisecond => {
                    array.as_primitive::<TimestampMillisecondType>().value(row)
                }
                TimeUnit::Microsecond => {
                    array.as_primitive::<TimestampMicrosecondType>().value(row) / 1000
                }
                TimeUnit::Nanosecond => {
                    array.as_primitive::<TimestampNanosecondType>().value(row) / 1_000_000
                }
            };
            ms.into()
        }
        _ => display(array, row),
    }
}

fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

fn display(array: &dyn Array, row: usize) -> Value {
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    match ArrayFormatter::try_new(array, &FormatOptions::default()) {
        Ok(f) => Value::String(f.value(row).to_string()),
        // A type arrow cannot display (none of the scalar types an expression yields).
        Err(e) => Value::String(format!("<{}: {e}>", array.data_type())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
        TimestampMillisecondArray,
    };
    use serde_json::json;

    use super::*;

    #[test]
    fn cells_become_json_values() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(vec![Some(true), None])),
            Arc::new(Int64Array::from(vec![Some(-3), None])),
            Arc::new(Int32Array::from(vec![7, 8])),
            Arc::new(Float64Array::from(vec![2.5, f64::NAN])),
            Arc::new(StringArray::from(vec![Some("milk"), None])),
            Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000])),
        ];
        let row0: Vec<Value> = cols.iter().map(|c| value_at(c.as_ref(), 0)).collect();
        assert_eq!(
            row0,
            vec![
                json!(true),
                json!(-3),
                json!(7),
                json!(2.5),
                json!("milk"),
                json!(1000)
            ]
        );
        let row1: Vec<Value> = cols.iter().map(|c| value_at(c.as_ref(), 1)).collect();
        assert_eq!(
            row1,
            vec![
                Value::Null,
                Value::Null,
                json!(8),
                Value::Null,
                Value::Null,
                json!(2000)
            ]
        );
    }
}
