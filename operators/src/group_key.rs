//! The key of a YAML window step on typed state (issue 18 step 4): the values of its
//! `key_by` fields in one hashable, serializable value, made for a whole batch at once
//! and turned back into key columns for the window's output batch.
//!
//! - One `int64` key field (the common case: ids): the value itself
//!   ([`GroupKey::Int`]), no encoding and no allocation.
//! - One `string` key field: the string ([`GroupKey::Str`]).
//! - Any other key fields: arrow-row's encoding of the key columns
//!   ([`GroupKey::Encoded`]), one byte string per row that compares equal exactly when
//!   the key values do (nulls included), and that arrow-row decodes back into columns.
//!
//! In keyed state (bincode) a key is stored with its variant; shown to people (hot keys
//! on the dashboard and in `/metrics`, through serde_json) it is its value: `42`,
//! `"milk"`, `null`.
//! - No key fields (a window over the whole stream, Flink's `windowAll`): one key for
//!   every row.
//!
//! Keys hash to key groups with brook's key hash like every other key
//! ([`brook_core::keys::hash_key`]), so a restore at another parallelism moves each
//! key's windows with it.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::{Deserialize, Serialize};

/// The key of one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupKey {
    /// The value of the one `int64` key field (`None`: null), or the one key of a window
    /// without key fields (`None`).
    Int(Option<i64>),
    /// The value of the one `string` key field (`None`: null).
    Str(Option<Box<str>>),
    /// The key fields' values encoded by arrow-row.
    Encoded(Box<[u8]>),
}

/// How a key is stored (bincode): with its variant.
#[derive(Serialize)]
enum StoredRef<'a> {
    Int(Option<i64>),
    Str(Option<&'a str>),
    Encoded(&'a [u8]),
}

/// [`StoredRef`] read back (the same encoding: `&str` and `Box<str>`, `&[u8]` and
/// `Box<[u8]>` serialize alike).
#[derive(Deserialize)]
enum Stored {
    Int(Option<i64>),
    Str(Option<Box<str>>),
    Encoded(Box<[u8]>),
}

impl Serialize for GroupKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return match self {
                GroupKey::Int(v) => v.serialize(s),
                GroupKey::Str(v) => v.serialize(s),
                GroupKey::Encoded(b) => s.collect_seq(b.iter()),
            };
        }
        match self {
            GroupKey::Int(v) => StoredRef::Int(*v),
            GroupKey::Str(v) => StoredRef::Str(v.as_deref()),
            GroupKey::Encoded(b) => StoredRef::Encoded(b),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for GroupKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Stored::deserialize(d)? {
            Stored::Int(v) => GroupKey::Int(v),
            Stored::Str(v) => GroupKey::Str(v),
            Stored::Encoded(b) => GroupKey::Encoded(b),
        })
    }
}

/// How a step's key fields become [`GroupKey`]s and back.
#[derive(Debug)]
pub struct KeyCodec {
    /// The key fields' positions in the input schema.
    columns: Vec<usize>,
    /// Their types, in key order.
    types: Vec<DataType>,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// No key fields: every row has the key `Int(None)`.
    Whole,
    /// One `int64` field.
    Int,
    /// One `string` field.
    Str,
    /// Anything else.
    Rows(RowConverter),
}

impl KeyCodec {
    /// The codec of the fields `key_fields` of `schema`.
    ///
    /// # Errors
    /// A message naming a field the schema lacks or whose type arrow-row cannot encode.
    pub fn new(schema: &SchemaRef, key_fields: &[String]) -> Result<KeyCodec, String> {
        let mut columns = Vec::with_capacity(key_fields.len());
        let mut types = Vec::with_capacity(key_fields.len());
        for f in key_fields {
            let i = schema
                .index_of(f)
                .map_err(|_| format!("unknown key field `{f}`"))?;
            columns.push(i);
            types.push(schema.field(i).data_type().clone());
        }
        let kind = match types.as_slice() {
            [] => Kind::Whole,
            [DataType::Int64] => Kind::Int,
            [DataType::Utf8] => Kind::Str,
            _ => {
                let fields = types.iter().cloned().map(SortField::new).collect();
                Kind::Rows(RowConverter::new(fields).map_err(|e| {
                    format!("key fields {}: cannot be a key: {e}", key_fields.join(", "))
                })?)
            }
        };
        Ok(KeyCodec {
            columns,
            types,
            kind,
        })
    }

    /// The keys of every row of `batch` (of the schema the codec was made for), into
    /// `out` (cleared first).
    ///
    /// # Errors
    /// arrow-row's, should a column not have the planned type.
    pub fn keys(&self, batch: &RecordBatch, out: &mut Vec<GroupKey>) -> Result<(), ArrowError> {
        out.clear();
        let n = batch.num_rows();
        match &self.kind {
            Kind::Whole => out.resize(n, GroupKey::Int(None)),
            Kind::Int => {
                let col = batch.column(self.columns[0]);
                let ints = col.as_primitive_opt::<Int64Type>().ok_or_else(|| {
                    ArrowError::InvalidArgumentError(format!(
                        "key column is {}, not Int64",
                        col.data_type()
                    ))
                })?;
                if ints.null_count() == 0 {
                    out.extend(ints.values().iter().map(|v| GroupKey::Int(Some(*v))));
                } else {
                    out.extend(ints.iter().map(GroupKey::Int));
                }
            }
            Kind::Str => {
                let col = batch.column(self.columns[0]);
                let strings = col.as_string_opt::<i32>().ok_or_else(|| {
                    ArrowError::InvalidArgumentError(format!(
                        "key column is {}, not Utf8",
                        col.data_type()
                    ))
                })?;
                out.extend(strings.iter().map(|v| GroupKey::Str(v.map(Box::from))));
            }
            Kind::Rows(conv) => {
                let cols: Vec<ArrayRef> = self
                    .columns
                    .iter()
                    .map(|i| Arc::clone(batch.column(*i)))
                    .collect();
                let rows = conv.convert_columns(&cols)?;
                out.extend(rows.iter().map(|r| GroupKey::Encoded(r.as_ref().into())));
            }
        }
        Ok(())
    }

    /// The key columns of `keys` (as many rows), in key-field order: the columns of the
    /// window's output.
    ///
    /// # Errors
    /// arrow-row's, should a key not be one this codec's kind makes.
    pub fn columns<'a>(
        &self,
        keys: impl ExactSizeIterator<Item = &'a GroupKey>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        let mismatch = || ArrowError::InvalidArgumentError("a key of another kind".to_string());
        match &self.kind {
            Kind::Whole => Ok(Vec::new()),
            Kind::Int => {
                let mut b = Int64Array::builder(keys.len());
                for k in keys {
                    match k {
                        GroupKey::Int(v) => b.append_option(*v),
                        _ => return Err(mismatch()),
                    }
                }
                Ok(vec![Arc::new(b.finish())])
            }
            Kind::Str => {
                let mut b = StringBuilder::with_capacity(keys.len(), keys.len() * 8);
                for k in keys {
                    match k {
                        GroupKey::Str(v) => b.append_option(v.as_deref()),
                        _ => return Err(mismatch()),
                    }
                }
                Ok(vec![Arc::new(b.finish())])
            }
            Kind::Rows(conv) => {
                let parser = conv.parser();
                let mut rows = Vec::with_capacity(keys.len());
                for k in keys {
                    match k {
                        GroupKey::Encoded(bytes) => rows.push(parser.parse(bytes)),
                        _ => return Err(mismatch()),
                    }
                }
                conv.convert_rows(rows)
            }
        }
    }

    /// The key fields' types, in key order.
    pub fn types(&self) -> &[DataType] {
        &self.types
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, StringArray};
    use arrow_schema::{Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("item", DataType::Utf8, true),
            Field::new("price", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(1), Some(2)])),
                Arc::new(StringArray::from(vec![
                    Some("tea"),
                    Some("tea"),
                    None,
                    Some("tea"),
                ])),
                Arc::new(Float64Array::from(vec![1.5, 2.0, 1.5, 0.0])),
            ],
        )
        .expect("valid batch")
    }

    fn round_trip(fields: &[&str]) -> (Vec<GroupKey>, Vec<ArrayRef>) {
        let b = batch();
        let fields: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
        let codec = KeyCodec::new(b.schema_ref(), &fields).expect("codec");
        let mut keys = Vec::new();
        codec.keys(&b, &mut keys).expect("keys");
        let cols = codec.columns(keys.iter()).expect("columns");
        (keys, cols)
    }

    #[test]
    fn an_int_key_is_its_value() {
        let (keys, cols) = round_trip(&["id"]);
        assert_eq!(
            keys,
            [
                GroupKey::Int(Some(1)),
                GroupKey::Int(None),
                GroupKey::Int(Some(1)),
                GroupKey::Int(Some(2))
            ]
        );
        assert_eq!(cols[0].as_ref(), batch().column(0).as_ref());
    }

    #[test]
    fn other_keys_are_equal_exactly_when_their_values_are_and_decode_back() {
        let (keys, cols) = round_trip(&["item", "id"]);
        // (tea,1) (tea,null) (null,1) (tea,2): all distinct.
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(keys[i] == keys[j], i == j, "rows {i} and {j}");
            }
        }
        assert_eq!(cols[0].as_ref(), batch().column(1).as_ref());
        assert_eq!(cols[1].as_ref(), batch().column(0).as_ref());
        let (keys, _) = round_trip(&["price"]);
        assert_eq!(keys[0], keys[2]);
        assert_ne!(keys[0], keys[1]);
    }

    #[test]
    fn a_string_key_is_its_string() {
        let (keys, cols) = round_trip(&["item"]);
        assert_eq!(keys[0], GroupKey::Str(Some("tea".into())));
        assert_eq!(keys[2], GroupKey::Str(None));
        assert_eq!(cols[0].as_ref(), batch().column(1).as_ref());
    }

    /// Stored with their variant (bincode), shown as their value (JSON).
    #[test]
    fn keys_are_stored_exactly_and_shown_as_values() {
        let keys = [
            GroupKey::Int(Some(-7)),
            GroupKey::Int(None),
            GroupKey::Str(Some("milk".into())),
            GroupKey::Str(None),
            GroupKey::Encoded(vec![1, 2, 255].into()),
        ];
        for k in &keys {
            let bytes = bincode::serialize(k).expect("serializes");
            let back: GroupKey = bincode::deserialize(&bytes).expect("deserializes");
            assert_eq!(&back, k);
        }
        let shown: Vec<String> = keys
            .iter()
            .map(|k| serde_json::to_string(k).expect("json"))
            .collect();
        assert_eq!(shown, ["-7", "null", "\"milk\"", "null", "[1,2,255]"]);
    }

    #[test]
    fn no_key_fields_is_one_key() {
        let (keys, cols) = round_trip(&[]);
        assert!(keys.iter().all(|k| *k == GroupKey::Int(None)));
        assert!(cols.is_empty());
    }

    #[test]
    fn an_unknown_key_field_is_named() {
        let err = KeyCodec::new(batch().schema_ref(), &["nope".to_string()]).expect_err("unknown");
        assert_eq!(err, "unknown key field `nope`");
    }
}
