//! The vectorized filter and map give the same rows and values as a row-at-a-time model
//! of SQL's rules (three-valued logic, null propagation, truncating integer division) on
//! random batches and random expressions.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::SchemaRef;
use brook_sql::schema::declared;
use brook_sql::{Filter, Projection};
use proptest::prelude::*;

/// One row of the model.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    k: Option<i64>,
    v: Option<i64>,
    f: Option<f64>,
    s: Option<String>,
    b: Option<bool>,
}

fn schema() -> SchemaRef {
    declared([
        ("k", "int64"),
        ("v", "int64"),
        ("f", "float64"),
        ("s", "string"),
        ("b", "bool"),
    ])
    .expect("valid schema")
}

fn batch(rows: &[Row]) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.k).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.v).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.f).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.s.clone()).collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            rows.iter().map(|r| r.b).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(schema(), columns).expect("matching columns")
}

fn rows_of(b: &RecordBatch) -> Vec<Row> {
    let k = b.column(0).as_primitive::<Int64Type>();
    let v = b.column(1).as_primitive::<Int64Type>();
    let f = b.column(2).as_primitive::<Float64Type>();
    let s = b.column(3).as_string::<i32>();
    let bo = b.column(4).as_boolean();
    (0..b.num_rows())
        .map(|i| Row {
            k: k.is_valid(i).then(|| k.value(i)),
            v: v.is_valid(i).then(|| v.value(i)),
            f: f.is_valid(i).then(|| f.value(i)),
            s: s.is_valid(i).then(|| s.value(i).to_string()),
            b: bo.is_valid(i).then(|| bo.value(i)),
        })
        .collect()
}

/// An integer expression.
#[derive(Debug, Clone)]
enum Int {
    K,
    V,
    Lit(i64),
    Add(Box<Int>, Box<Int>),
    Sub(Box<Int>, Box<Int>),
    Mul(Box<Int>, Box<Int>),
    /// Division and remainder by a non-zero literal (a zero divisor fails the batch).
    Div(Box<Int>, i64),
    Rem(Box<Int>, i64),
}

/// A condition.
#[derive(Debug, Clone)]
enum Cond {
    Cmp(&'static str, Int, Int),
    StrEq(String),
    IsNull(&'static str),
    B,
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

impl Int {
    fn sql(&self) -> String {
        match self {
            Int::K => "k".to_string(),
            Int::V => "v".to_string(),
            Int::Lit(n) => format!("({n})"),
            Int::Add(a, b) => format!("({} + {})", a.sql(), b.sql()),
            Int::Sub(a, b) => format!("({} - {})", a.sql(), b.sql()),
            Int::Mul(a, b) => format!("({} * {})", a.sql(), b.sql()),
            Int::Div(a, d) => format!("({} / ({d}))", a.sql()),
            Int::Rem(a, d) => format!("({} % ({d}))", a.sql()),
        }
    }

    fn eval(&self, r: &Row) -> Option<i64> {
        Some(match self {
            Int::K => r.k?,
            Int::V => r.v?,
            Int::Lit(n) => *n,
            Int::Add(a, b) => a.eval(r)? + b.eval(r)?,
            Int::Sub(a, b) => a.eval(r)? - b.eval(r)?,
            Int::Mul(a, b) => a.eval(r)? * b.eval(r)?,
            Int::Div(a, d) => a.eval(r)? / d,
            Int::Rem(a, d) => a.eval(r)? % d,
        })
    }
}

impl Cond {
    fn sql(&self) -> String {
        match self {
            Cond::Cmp(op, a, b) => format!("({} {op} {})", a.sql(), b.sql()),
            Cond::StrEq(lit) => format!("(s = '{lit}')"),
            Cond::IsNull(col) => format!("({col} IS NULL)"),
            Cond::B => "b".to_string(),
            Cond::And(a, b) => format!("({} AND {})", a.sql(), b.sql()),
            Cond::Or(a, b) => format!("({} OR {})", a.sql(), b.sql()),
            Cond::Not(a) => format!("(NOT {})", a.sql()),
        }
    }

    /// SQL's three-valued logic: `None` is unknown (null).
    fn eval(&self, r: &Row) -> Option<bool> {
        match self {
            Cond::Cmp(op, a, b) => {
                let (a, b) = (a.eval(r)?, b.eval(r)?);
                Some(match *op {
                    "=" => a == b,
                    "<>" => a != b,
                    "<" => a < b,
                    "<=" => a <= b,
                    ">" => a > b,
                    _ => a >= b,
                })
            }
            Cond::StrEq(lit) => Some(r.s.as_deref()? == lit),
            Cond::IsNull(col) => Some(match *col {
                "k" => r.k.is_none(),
                "v" => r.v.is_none(),
                "f" => r.f.is_none(),
                "s" => r.s.is_none(),
                _ => r.b.is_none(),
            }),
            Cond::B => r.b,
            Cond::And(a, b) => match (a.eval(r), b.eval(r)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Cond::Or(a, b) => match (a.eval(r), b.eval(r)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            Cond::Not(a) => a.eval(r).map(|x| !x),
        }
    }
}

fn row() -> impl Strategy<Value = Row> {
    (
        proptest::option::weighted(0.9, -1000i64..1000),
        proptest::option::weighted(0.9, -1000i64..1000),
        proptest::option::weighted(0.9, -1000.0f64..1000.0),
        proptest::option::weighted(0.9, prop_oneof![Just("milk"), Just("tea"), Just("")]),
        proptest::option::weighted(0.9, any::<bool>()),
    )
        .prop_map(|(k, v, f, s, b)| Row {
            k,
            v,
            f,
            s: s.map(str::to_string),
            b,
        })
}

fn divisor() -> impl Strategy<Value = i64> {
    prop_oneof![-7i64..=-1, 1i64..=7]
}

fn int() -> impl Strategy<Value = Int> {
    let leaf = prop_oneof![Just(Int::K), Just(Int::V), (-50i64..50).prop_map(Int::Lit)];
    // Depth 3 keeps products of |values| < 1000 far from overflow.
    leaf.prop_recursive(3, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Int::Add(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Int::Sub(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Int::Mul(Box::new(a), Box::new(b))),
            (inner.clone(), divisor()).prop_map(|(a, d)| Int::Div(Box::new(a), d)),
            (inner, divisor()).prop_map(|(a, d)| Int::Rem(Box::new(a), d)),
        ]
    })
}

fn cond() -> impl Strategy<Value = Cond> {
    let leaf = prop_oneof![
        (
            prop_oneof![
                Just("="),
                Just("<>"),
                Just("<"),
                Just("<="),
                Just(">"),
                Just(">=")
            ],
            int(),
            int()
        )
            .prop_map(|(op, a, b)| Cond::Cmp(op, a, b)),
        prop_oneof![Just("milk"), Just("tea"), Just("")].prop_map(|s| Cond::StrEq(s.to_string())),
        prop_oneof![Just("k"), Just("v"), Just("f"), Just("s"), Just("b")].prop_map(Cond::IsNull),
        Just(Cond::B),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Cond::Not(Box::new(a))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn filter_keeps_the_rows_the_model_keeps(
        rows in proptest::collection::vec(row(), 0..40),
        c in cond(),
    ) {
        let sql = c.sql();
        let filter = Filter::plan(&schema(), &sql).expect("a valid condition plans");
        let out = filter.apply(&batch(&rows)).expect("no condition fails");
        let expected: Vec<Row> =
            rows.iter().filter(|r| c.eval(r) == Some(true)).cloned().collect();
        prop_assert_eq!(rows_of(&out), expected, "filter: {}", sql);
    }

    #[test]
    fn map_computes_the_values_the_model_computes(
        rows in proptest::collection::vec(row(), 0..40),
        e in int(),
        scale in -4.0f64..4.0,
    ) {
        let sql = e.sql();
        let scaled = format!("f * ({scale:?}) + v");
        let map = Projection::map(&schema(), &[("x", sql.as_str()), ("y", scaled.as_str())])
            .expect("a valid expression plans");
        let out = map.apply(&batch(&rows)).expect("no expression fails");
        prop_assert_eq!(rows_of(&out), rows.clone(), "the input columns pass unchanged");
        let x = out.column(5).as_primitive::<Int64Type>();
        let y = out.column(6).as_primitive::<Float64Type>();
        for (i, r) in rows.iter().enumerate() {
            prop_assert_eq!(x.is_valid(i).then(|| x.value(i)), e.eval(r), "x = {} at row {}", sql, i);
            // `v` is coerced to float64, then added: the same IEEE operations.
            let want = match (r.f, r.v) {
                (Some(f), Some(v)) => Some(f * scale + v as f64),
                _ => None,
            };
            prop_assert_eq!(y.is_valid(i).then(|| y.value(i)), want, "y = {} at row {}", scaled, i);
        }
    }
}
