//! The schema of a job's records, fixed when the job is planned: declared in a spec
//! (`schema: {field: type, ...}`) or inferred from a sample (`infer.rs`).
//!
//! Every field is nullable: a record without the field has null there, as Flink's JSON
//! format does by default (`json.fail-on-missing-field: false`). A record's fields that
//! the schema does not name are ignored, as in Flink.

use std::fmt;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// The type of a field in a spec's `schema`, and its Arrow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// `string`: UTF-8 text (Arrow `Utf8`).
    String,
    /// `int64`: a signed 64-bit integer (Arrow `Int64`).
    Int64,
    /// `float64`: an IEEE 754 double (Arrow `Float64`).
    Float64,
    /// `bool` (Arrow `Boolean`).
    Bool,
    /// `timestamp`: milliseconds since the Unix epoch, UTC (Arrow `Timestamp(ms)` without a
    /// zone, Flink's `TIMESTAMP(3)`). In JSON an integer (ms) or an RFC 3339 string; in
    /// CSV an RFC 3339 / ISO 8601 text.
    Timestamp,
}

impl FieldType {
    /// Every type, in the order error messages list them.
    pub const ALL: [FieldType; 5] = [
        FieldType::String,
        FieldType::Int64,
        FieldType::Float64,
        FieldType::Bool,
        FieldType::Timestamp,
    ];

    /// The name a spec writes.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Int64 => "int64",
            FieldType::Float64 => "float64",
            FieldType::Bool => "bool",
            FieldType::Timestamp => "timestamp",
        }
    }

    /// The Arrow type of a column of this type.
    pub fn data_type(self) -> DataType {
        match self {
            FieldType::String => DataType::Utf8,
            FieldType::Int64 => DataType::Int64,
            FieldType::Float64 => DataType::Float64,
            FieldType::Bool => DataType::Boolean,
            FieldType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
        }
    }

    /// The type a spec names `name`, if any.
    pub fn from_name(name: &str) -> Option<FieldType> {
        FieldType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The type of an Arrow column, if it is one of ours. Any timestamp unit or zone
    /// counts as `timestamp` (decoding converts it to milliseconds, UTC).
    pub fn of(data_type: &DataType) -> Option<FieldType> {
        match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(FieldType::String),
            DataType::Int64 => Some(FieldType::Int64),
            DataType::Float64 => Some(FieldType::Float64),
            DataType::Boolean => Some(FieldType::Bool),
            DataType::Timestamp(_, _) => Some(FieldType::Timestamp),
            _ => None,
        }
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A schema that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A declared field's type is not one of [`FieldType::ALL`].
    #[error("schema.{field}: unknown type `{type_name}` (types: string, int64, float64, bool, timestamp)")]
    UnknownType {
        /// The field.
        field: String,
        /// The type as written.
        type_name: String,
    },
    /// A field name is empty.
    #[error("schema: a field name is empty")]
    EmptyName,
    /// The schema names no field.
    #[error("schema: no fields")]
    NoFields,
    /// A field is named twice (in a CSV header, say).
    #[error("schema.{field}: the field is named twice")]
    DuplicateField {
        /// The field.
        field: String,
    },
    /// An inferred field's values have a type a schema cannot hold (nested objects or
    /// arrays in JSON, dates without a time in CSV).
    #[error("schema.{field}: the sample's values are {found}, which a schema cannot hold yet (types: string, int64, float64, bool, timestamp)")]
    UnsupportedType {
        /// The field.
        field: String,
        /// The Arrow type the sample gave.
        found: String,
    },
    /// The sample could not be read (not JSON / CSV).
    #[error("schema inference: {0}")]
    Sample(String),
}

/// The names of `schema`'s fields as an error message lists them: `a, b, c`.
pub fn field_names(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    names.join(", ")
}

/// Builds the Arrow schema of declared `(field, type name)` pairs, in their order (a
/// spec's `schema:` mapping keeps the order it is written in).
///
/// # Errors
/// [`SchemaError::UnknownType`] naming the field, [`SchemaError::EmptyName`],
/// [`SchemaError::DuplicateField`], [`SchemaError::NoFields`].
pub fn declared<'a, I>(fields: I) -> Result<SchemaRef, SchemaError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut typed = Vec::new();
    for (name, type_name) in fields {
        let ty = FieldType::from_name(type_name).ok_or_else(|| SchemaError::UnknownType {
            field: name.to_string(),
            type_name: type_name.to_string(),
        })?;
        typed.push((name.to_string(), ty));
    }
    schema_of(typed)
}

/// Builds the Arrow schema of typed fields, in their order; every field nullable.
///
/// # Errors
/// As [`declared`], without `UnknownType`.
pub fn schema_of(fields: Vec<(String, FieldType)>) -> Result<SchemaRef, SchemaError> {
    if fields.is_empty() {
        return Err(SchemaError::NoFields);
    }
    let mut out: Vec<Field> = Vec::with_capacity(fields.len());
    for (name, ty) in fields {
        if name.is_empty() {
            return Err(SchemaError::EmptyName);
        }
        if out.iter().any(|f| f.name() == &name) {
            return Err(SchemaError::DuplicateField { field: name });
        }
        out.push(Field::new(name, ty.data_type(), true));
    }
    Ok(Arc::new(Schema::new(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_fields_keep_their_order_and_types() {
        let s = declared([
            ("item", "string"),
            ("price_cents", "int64"),
            ("ts", "timestamp"),
        ])
        .expect("valid schema");
        let names: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["item", "price_cents", "ts"]);
        assert_eq!(s.field(1).data_type(), &DataType::Int64);
        assert_eq!(
            s.field(2).data_type(),
            &DataType::Timestamp(TimeUnit::Millisecond, None)
        );
        assert!(s.fields().iter().all(|f| f.is_nullable()));
    }

    #[test]
    fn every_type_name_round_trips() {
        for t in FieldType::ALL {
            assert_eq!(FieldType::from_name(t.name()), Some(t));
            assert_eq!(FieldType::of(&t.data_type()), Some(t));
        }
    }

    #[test]
    fn an_unknown_type_names_the_field_and_lists_the_types() {
        let err = declared([("price", "integer")]).expect_err("unknown type");
        assert_eq!(
            err.to_string(),
            "schema.price: unknown type `integer` (types: string, int64, float64, bool, timestamp)"
        );
    }

    #[test]
    fn duplicate_empty_and_no_fields_are_errors() {
        assert_eq!(
            declared([("a", "int64"), ("a", "string")])
                .expect_err("dup")
                .to_string(),
            "schema.a: the field is named twice"
        );
        assert_eq!(declared([("", "int64")]), Err(SchemaError::EmptyName));
        assert_eq!(declared([]), Err(SchemaError::NoFields));
    }
}
