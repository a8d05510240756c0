//! A source's schema inferred from a sample of its records, by arrow-json's and
//! arrow-csv's inference, narrowed to the types a spec can declare
//! ([`FieldType`](crate::schema::FieldType)).
//!
//! Rules (arrow's): fields in the order they first appear in the sample (the new fields
//! of one record in that record's order: serde_json's `preserve_order`, see
//! Cargo.toml); JSON integers are `int64`, numbers with a fraction or exponent
//! `float64` (a field with both is `float64`), strings `string` (JSON has no timestamp
//! type: declare `timestamp` fields). CSV cells are tried as bool, int64, float64, then
//! timestamp (RFC 3339 / ISO 8601 text), else string. A field that is null (or empty in
//! CSV) in every sampled record is `string`, as it can hold any value as text. Nested
//! values (JSON objects and arrays) and CSV dates without a time are errors naming the
//! field: a spec cannot declare them yet.

use std::io::Cursor;

use arrow_schema::{DataType, SchemaRef};

use crate::schema::{schema_of, FieldType, SchemaError};

/// Infers the schema of newline-delimited JSON objects from the first `max_records`
/// records of `sample` (all of them if `None`), fields in first-seen order (see above).
///
/// # Errors
/// [`SchemaError::Sample`] if the sample is not JSON objects,
/// [`SchemaError::UnsupportedType`] naming a nested field, [`SchemaError::NoFields`]
/// for an empty sample.
pub fn infer_json(sample: &[u8], max_records: Option<usize>) -> Result<SchemaRef, SchemaError> {
    let (schema, _) = arrow_json::reader::infer_json_schema(Cursor::new(sample), max_records)
        .map_err(|e| SchemaError::Sample(e.to_string()))?;
    narrow(
        schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type())),
    )
}

/// As [`infer_json`], but a field whose values a schema cannot hold (nested objects or
/// arrays) is left out of the schema instead of failing, and named in the second value:
/// for rows that keep such fields but whose expressions cannot read them (`brook run`'s
/// row steps, issue 18 step 2).
///
/// # Errors
/// As [`infer_json`], without `UnsupportedType`.
pub fn infer_json_scalars(
    sample: &[u8],
    max_records: Option<usize>,
) -> Result<(SchemaRef, Vec<String>), SchemaError> {
    let (schema, _) = arrow_json::reader::infer_json_schema(Cursor::new(sample), max_records)
        .map_err(|e| SchemaError::Sample(e.to_string()))?;
    let mut left_out = Vec::new();
    let fields = schema.fields().iter().filter(|f| {
        let keep =
            matches!(f.data_type(), DataType::Null) || FieldType::of(f.data_type()).is_some();
        if !keep {
            left_out.push(f.name().clone());
        }
        keep
    });
    let schema = narrow(fields.map(|f| (f.name().as_str(), f.data_type())))?;
    Ok((schema, left_out))
}

/// Infers the schema of CSV records with a header line (the field names) from the first
/// `max_records` records of `sample` (all if `None`).
///
/// # Errors
/// As [`infer_json`]; [`SchemaError::DuplicateField`] if the header repeats a name.
pub fn infer_csv(sample: &[u8], max_records: Option<usize>) -> Result<SchemaRef, SchemaError> {
    let (schema, _) = arrow_csv::reader::Format::default()
        .with_header(true)
        .infer_schema(Cursor::new(sample), max_records)
        .map_err(|e| SchemaError::Sample(e.to_string()))?;
    narrow(
        schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type())),
    )
}

/// The inferred Arrow types as [`FieldType`]s (all-null fields as `string`).
fn narrow<'a>(
    fields: impl Iterator<Item = (&'a str, &'a DataType)>,
) -> Result<SchemaRef, SchemaError> {
    let mut typed = Vec::new();
    for (name, data_type) in fields {
        let ty = match data_type {
            DataType::Null => FieldType::String,
            other => FieldType::of(other).ok_or_else(|| SchemaError::UnsupportedType {
                field: name.to_string(),
                found: other.to_string(),
            })?,
        };
        typed.push((name.to_string(), ty));
    }
    schema_of(typed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(schema: &SchemaRef) -> Vec<(String, Option<FieldType>)> {
        schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), FieldType::of(f.data_type())))
            .collect()
    }

    #[test]
    fn json_sample_types_in_first_seen_order_by_record() {
        let sample = br#"{"student": "ana", "price_cents": 250, "paid": true}
{"student": "bo", "price_cents": 199, "weight": 0.5, "note": null}
"#;
        let schema = infer_json(sample, None).expect("valid sample");
        assert_eq!(
            types(&schema),
            [
                ("student".to_string(), Some(FieldType::String)),
                ("price_cents".to_string(), Some(FieldType::Int64)),
                ("paid".to_string(), Some(FieldType::Bool)),
                ("weight".to_string(), Some(FieldType::Float64)),
                ("note".to_string(), Some(FieldType::String)),
            ]
        );
    }

    #[test]
    fn json_integers_and_floats_in_one_field_are_float64() {
        let schema = infer_json(b"{\"v\": 1}\n{\"v\": 1.5}\n", None).expect("valid sample");
        assert_eq!(
            types(&schema),
            [("v".to_string(), Some(FieldType::Float64))]
        );
    }

    #[test]
    fn only_the_first_records_are_sampled() {
        // The third record's float is past the sample: the field stays int64.
        let schema =
            infer_json(b"{\"v\": 1}\n{\"v\": 2}\n{\"v\": 2.5}\n", Some(2)).expect("valid sample");
        assert_eq!(types(&schema), [("v".to_string(), Some(FieldType::Int64))]);
    }

    #[test]
    fn json_nested_values_name_the_field() {
        let err = infer_json(b"{\"a\": 1, \"tags\": [\"x\"]}\n", None).expect_err("nested");
        match &err {
            SchemaError::UnsupportedType { field, .. } => assert_eq!(field, "tags"),
            other => panic!("expected UnsupportedType, got {other:?}"),
        }
        assert!(err
            .to_string()
            .starts_with("schema.tags: the sample's values are List"));
    }

    #[test]
    fn json_sample_that_is_not_json_is_an_error() {
        let err = infer_json(b"{\"a\": 1}\nnot json\n", None).expect_err("bad sample");
        assert!(matches!(err, SchemaError::Sample(_)), "{err:?}");
        assert_eq!(infer_json(b"", None), Err(SchemaError::NoFields));
    }

    #[test]
    fn csv_sample_types_from_the_cells() {
        let sample = b"item,price_cents,weight,paid,at,note\n\
                       milk,250,0.5,true,2024-01-02T03:04:05Z,\n\
                       tea,199,1,false,2024-01-02T03:04:06.5Z,\n";
        let schema = infer_csv(sample, None).expect("valid sample");
        assert_eq!(
            types(&schema),
            [
                ("item".to_string(), Some(FieldType::String)),
                ("price_cents".to_string(), Some(FieldType::Int64)),
                ("weight".to_string(), Some(FieldType::Float64)),
                ("paid".to_string(), Some(FieldType::Bool)),
                ("at".to_string(), Some(FieldType::Timestamp)),
                ("note".to_string(), Some(FieldType::String)),
            ]
        );
    }

    #[test]
    fn csv_dates_and_repeated_header_names_are_errors() {
        let err = infer_csv(b"day\n2024-01-02\n", None).expect_err("date");
        assert!(
            err.to_string()
                .starts_with("schema.day: the sample's values are Date32"),
            "{err}"
        );
        let err = infer_csv(b"a,a\n1,2\n", None).expect_err("duplicate");
        assert_eq!(
            err,
            SchemaError::DuplicateField {
                field: "a".to_string()
            }
        );
    }
}
