//! Operators on dynamic rows (JSON objects), with expressions in CEL (the Common
//! Expression Language, evaluated by the `cel` crate): what YAML job specs run.
//!
//! In an expression, each top-level field of the row is a variable (`price_cents * 2`,
//! `item == "chocolate milk"`), and `row` is the whole row (for fields whose names are
//! not identifiers: `row["unit price"]`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};
use cel::{Context, Program};
use serde_json::{Map, Value};

/// A dynamic row.
pub type Row = Value;

/// A compiled CEL expression.
#[derive(Debug)]
pub struct Expr {
    source: String,
    program: Program,
    /// The row fields the expression reads, so only those are converted per record.
    fields: Vec<String>,
    whole_row: bool,
}

impl Clone for Expr {
    fn clone(&self) -> Self {
        // Compiled from source that already compiled once, so this cannot fail.
        Expr::compile(&self.source)
            .unwrap_or_else(|_| unreachable!("recompiling a valid expression"))
    }
}

impl Expr {
    /// Compiles `source`.
    ///
    /// # Errors
    /// The parser's message.
    pub fn compile(source: &str) -> Result<Expr, String> {
        let program = Program::compile(source).map_err(|e| e.to_string())?;
        let refs = program.references();
        let vars: BTreeSet<String> = refs.variables().into_iter().map(str::to_string).collect();
        let whole_row = vars.contains("row");
        let fields = vars.into_iter().filter(|v| v != "row").collect();
        Ok(Expr {
            source: source.to_string(),
            program,
            fields,
            whole_row,
        })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates against `row` within `root` (a context holding the functions).
    ///
    /// # Errors
    /// A message naming the expression and what went wrong (an unknown field, a type
    /// mismatch, ...).
    pub fn eval(&self, root: &Context<'_>, row: &Row) -> Result<Value, String> {
        let mut ctx = root.new_inner_scope();
        // Fields the row lacks stay undeclared: `has(row.x) ? x : 0` and macro
        // variables (`[1, 2].exists(v, v > n)`) must not fail up front; an expression
        // that really reads a missing field fails with CEL's "undeclared reference".
        if let Some(obj) = row.as_object() {
            for f in &self.fields {
                if let Some(v) = obj.get(f) {
                    ctx.add_variable_from_value(f.as_str(), to_cel(v));
                }
            }
        }
        if self.whole_row {
            ctx.add_variable_from_value("row", to_cel(row));
        }
        let v = self
            .program
            .execute(&ctx)
            .map_err(|e| format!("{}: {e}", self.source))?;
        v.json()
            .map_err(|e| format!("{}: result cannot be a JSON value: {e:?}", self.source))
    }
}

/// Converts a JSON value for CEL. Integers become CEL `int` (signed) whenever they fit,
/// so `price * 2` works on JSON numbers; larger ones `uint`, others `double`.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => {
            let m: HashMap<cel::objects::Key, cel::Value> = o
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(m) })
        }
    }
}

fn position(ctx: &OperatorContext) -> String {
    ctx.info().to_string()
}

/// Keeps rows for which a CEL expression is `true`.
#[derive(Debug)]
pub struct RowFilter {
    expr: Expr,
    bad: BadRecords,
}

impl RowFilter {
    /// A filter on `expr`, with a bad-record policy for rows it cannot evaluate.
    pub fn new(expr: Expr, bad: BadRecords) -> Self {
        RowFilter { expr, bad }
    }
}

impl Operator for RowFilter {
    type In = Row;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        let root = Context::default();
        for r in batch {
            match self.expr.eval(&root, &r.value) {
                Ok(Value::Bool(true)) => out.push(r),
                Ok(Value::Bool(false)) => {}
                Ok(other) => self.bad.handle(
                    &r.value.to_string(),
                    &position(ctx),
                    &format!("{}: expected true or false, got {other}", self.expr.source),
                )?,
                Err(e) => self.bad.handle(&r.value.to_string(), &position(ctx), &e)?,
            }
        }
        Ok(())
    }
}

/// Computes fields: `map` adds (or replaces) them on the row, `select` keeps only them.
#[derive(Debug)]
pub struct RowMap {
    fields: Vec<(String, Expr)>,
    keep_others: bool,
    bad: BadRecords,
}

impl RowMap {
    /// Adds or replaces `fields` on every row (YAML `map`).
    pub fn map(fields: Vec<(String, Expr)>, bad: BadRecords) -> Self {
        RowMap {
            fields,
            keep_others: true,
            bad,
        }
    }

    /// Projects every row to exactly `fields` (YAML `select`).
    pub fn select(fields: Vec<(String, Expr)>, bad: BadRecords) -> Self {
        RowMap {
            fields,
            keep_others: false,
            bad,
        }
    }
}

impl Operator for RowMap {
    type In = Row;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        let root = Context::default();
        'rows: for r in batch {
            let mut computed = Vec::with_capacity(self.fields.len());
            for (name, e) in &self.fields {
                match e.eval(&root, &r.value) {
                    Ok(v) => computed.push((name.clone(), v)),
                    Err(err) => {
                        self.bad
                            .handle(&r.value.to_string(), &position(ctx), &err)?;
                        continue 'rows;
                    }
                }
            }
            let mut obj = if self.keep_others {
                match r.value {
                    Value::Object(m) => m,
                    other => {
                        let reason = format!("expected a JSON object, got {other}");
                        self.bad
                            .handle(&other.to_string(), &position(ctx), &reason)?;
                        continue;
                    }
                }
            } else {
                Map::new()
            };
            for (k, v) in computed {
                obj.insert(k, v);
            }
            out.collect(Value::Object(obj), r.timestamp);
        }
        Ok(())
    }
}

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
    use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
    use brook_core::element::StreamRecord;
    use brook_testkit::operator::OperatorHarness;
    use serde_json::json;

    fn rows(v: Vec<Value>) -> Batch<Row> {
        v.into_iter().map(StreamRecord::new).collect()
    }

    #[test]
    fn filter_map_select() {
        let skip = BadRecords::new(
            BadRecordPolicy::Skip,
            Arc::new(BadRecordCounts::default()),
            None,
        );
        let f = RowFilter::new(
            Expr::compile("item == \"milk\" && price > 50").unwrap(),
            skip.clone(),
        );
        let input = rows(vec![
            json!({"item": "milk", "price": 60}),
            json!({"item": "milk", "price": 40}),
            json!({"item": "tea", "price": 90}),
            json!({"price": 1}),
        ]);
        let out = OperatorHarness::run_batch(f, input).unwrap();
        assert_eq!(
            out.into_iter().map(|r| r.value).collect::<Vec<_>>(),
            vec![json!({"item": "milk", "price": 60})]
        );
        assert_eq!(skip.counts().skipped(), 1, "the row without item");

        let fields = vec![
            (
                "dollars".to_string(),
                Expr::compile("double(price) / 100.0").unwrap(),
            ),
            (
                "label".to_string(),
                Expr::compile("row[\"item\"] + \"!\"").unwrap(),
            ),
        ];
        let m = RowMap::map(fields, BadRecords::default());
        let out = OperatorHarness::run_batch(m, rows(vec![json!({"item": "milk", "price": 60})]))
            .unwrap();
        assert_eq!(
            out[0].value,
            json!({"item": "milk", "price": 60, "dollars": 0.6, "label": "milk!"})
        );

        let s = RowMap::select(
            vec![("p".to_string(), Expr::compile("price * 2").unwrap())],
            BadRecords::default(),
        );
        let out = OperatorHarness::run_batch(s, rows(vec![json!({"item": "milk", "price": 60})]))
            .unwrap();
        assert_eq!(out[0].value, json!({"p": 120}));

        let failing = RowFilter::new(Expr::compile("price > 1").unwrap(), BadRecords::default());
        let e = OperatorHarness::run_batch(failing, rows(vec![json!({"item": "x"})])).unwrap_err();
        assert!(
            e.to_string()
                .contains("price > 1: Undeclared reference to 'price'"),
            "{e}"
        );
    }

    #[test]
    fn macros_and_optional_fields_evaluate() {
        let root = Context::default();
        let e = Expr::compile("[1, 2, 3].exists(x, x == id)").unwrap();
        assert_eq!(e.eval(&root, &json!({"id": 2})).unwrap(), json!(true));
        let e = Expr::compile("has(row.name) ? name : \"?\"").unwrap();
        assert_eq!(
            e.eval(&root, &json!({"name": "mia"})).unwrap(),
            json!("mia")
        );
        assert_eq!(e.eval(&root, &json!({})).unwrap(), json!("?"));
    }

    #[test]
    fn keys_are_canonical() {
        let r = json!({"a": 1, "b": "x"});
        assert_eq!(
            row_key(&r, &["b".into(), "a".into(), "c".into()]),
            "[\"x\",1,null]"
        );
    }
}
