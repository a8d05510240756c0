//! Dynamic rows (JSON objects): the records of YAML job specs, and the helpers their
//! keyed steps and joins use. Their `filter`, `map` and `select` steps are SQL
//! expressions evaluated over batches ([`crate::row_sql`]).

use serde_json::{Map, Value};

/// A dynamic row.
pub type Row = Value;

/// The key of a row for `key_by`: the canonical JSON text of the key fields' values
/// (missing fields are `null`).
pub fn row_key(row: &Row, fields: &[String]) -> String {
    let vals: Vec<&Value> = fields
        .iter()
        .map(|f| row.get(f).unwrap_or(&Value::Null))
        .collect();
    serde_json::to_string(&vals).unwrap_or_default()
}

/// A row in a form keyed state can hold: state is encoded with bincode, which cannot
/// read a self-describing `serde_json::Value`, so the row is kept as its JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRow(pub Row);

impl serde::Serialize for StoredRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for StoredRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text)
            .map(StoredRow)
            .map_err(serde::de::Error::custom)
    }
}

/// The row of a join: the left row's fields, then the right row's (when there is
/// one), except its `key` fields (equal to the left's); a right field whose name the
/// left row has is written as `right_prefix` + name.
pub fn join_rows(left: &Row, right: Option<&Row>, key: &[String], right_prefix: &str) -> Row {
    let mut out = match left {
        Value::Object(m) => m.clone(),
        other => {
            let mut m = Map::new();
            m.insert("left".into(), other.clone());
            m
        }
    };
    match right {
        Some(Value::Object(r)) => {
            for (k, v) in r {
                if key.contains(k) {
                    continue;
                }
                if out.contains_key(k) {
                    out.insert(format!("{right_prefix}{k}"), v.clone());
                } else {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        Some(other) => {
            out.insert(format!("{right_prefix}value"), other.clone());
        }
        None => {}
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_canonical() {
        let r = json!({"a": 1, "b": "x"});
        assert_eq!(
            row_key(&r, &["b".into(), "a".into(), "c".into()]),
            "[\"x\",1,null]"
        );
    }
}
