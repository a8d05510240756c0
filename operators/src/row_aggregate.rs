//! Named aggregates over the fields of dynamic rows, for window steps in YAML jobs.
//!
//! [`AggSpec`] is one aggregate parsed from text (`"sum(price)"`); [`RowAggregate`]
//! computes a list of them per key and window as an [`AggregateFunction<Row>`] and emits
//! one row: the key fields, then each aggregate under its output name, in the order
//! given. [`window_row`] adds `window_start` and `window_end` after the key fields.
//!
//! # Semantics (as SQL)
//! - `count()` counts records; `count(f)` counts records where `f` is present and not
//!   `null`. Every other function skips `null` and missing values.
//! - `sum(f)`: integers are summed exactly (in 128 bits); the result is an integer while
//!   every value was an integer and the sum fits in `i64` (or `u64`), otherwise an `f64`.
//!   A non-numeric value is skipped ([`RowAggregate::check`] reports it first).
//!   The sum of no values is `null`.
//! - `avg(f)`: an `f64`; `null` when there are no values.
//! - `min(f)` / `max(f)`: numbers compare numerically (integers and floats exactly),
//!   strings lexicographically by bytes (so ISO dates order correctly). Across types:
//!   booleans < numbers < strings. Arrays and objects are skipped. Of equal values the
//!   first is kept.
//! - `first(f)` / `last(f)`: the first and last non-null value by arrival (processing)
//!   order, as Flink's `FIRST_VALUE`/`LAST_VALUE`, not by event time.
//! - `count_distinct(f)`: the exact number of distinct non-null values, compared as
//!   canonical JSON (object keys sorted; `1` and `1.0` are the same value).
//!
//! # Merging (session windows)
//! Each [`RowAggregate`] numbers the records it adds (an arrival sequence; clones start
//! from the same number and continue independently). `first`/`last` keep the sequence
//! number of their value, and [`AggregateFunction::merge`] keeps the value with the
//! smaller (first) or larger (last) number, so merging accumulators gives the same
//! result as adding all records to one in arrival order. The sequence is not part of a
//! checkpoint of the function itself: after a restore it continues above the largest
//! number seen in an accumulator that receives a record, and every new function starts
//! numbering at the wall-clock time of its creation in ns (µs × 1000 of headroom per
//! ms), so records added after a restore (in a later process) always number above
//! those of the restored accumulators, including when a new session window merges with
//! a restored one.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use brook_core::time::Millis;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::row::Row;
use crate::window::AggregateFunction;

/// The aggregate functions, for messages.
const FUNCTIONS: &str = "count(), count(field), sum(field), min(field), max(field), avg(field), first(field), last(field), count_distinct(field)";

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFunc {
    /// `count()`: records; `count(f)`: non-null values of `f`.
    Count,
    /// `sum(f)`.
    Sum,
    /// `min(f)`.
    Min,
    /// `max(f)`.
    Max,
    /// `avg(f)`, an `f64`.
    Avg,
    /// `first(f)`: the first non-null value by arrival.
    First,
    /// `last(f)`: the last non-null value by arrival.
    Last,
    /// `count_distinct(f)`: distinct non-null values.
    CountDistinct,
}

impl AggFunc {
    /// The function's name in aggregate text (`"sum"`).
    pub const fn name(self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
            AggFunc::First => "first",
            AggFunc::Last => "last",
            AggFunc::CountDistinct => "count_distinct",
        }
    }

    fn from_name(name: &str) -> Option<AggFunc> {
        Some(match name {
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "avg" => AggFunc::Avg,
            "first" => AggFunc::First,
            "last" => AggFunc::Last,
            "count_distinct" => AggFunc::CountDistinct,
            _ => return None,
        })
    }
}

/// One aggregate: a function and the field it reads (`None` only for `count()`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AggSpec {
    /// The function.
    pub func: AggFunc,
    /// The top-level field it reads; `None` for `count()`.
    pub field: Option<String>,
}

impl AggSpec {
    /// Parses `"count()"`, `"count(f)"`, `"sum(f)"`, `"min(f)"`, `"max(f)"`, `"avg(f)"`,
    /// `"first(f)"`, `"last(f)"` or `"count_distinct(f)"`. Whitespace around the name,
    /// the parentheses and the field is ignored, function names are case-insensitive,
    /// and the field is any JSON key without `(`, `)` or `,`.
    ///
    /// # Errors
    /// A message naming the text and listing the functions.
    pub fn parse(text: &str) -> Result<AggSpec, String> {
        let err = |why: &str| {
            format!("invalid aggregate \"{text}\": {why} (expected one of {FUNCTIONS})")
        };
        let t = text.trim();
        let Some((name, rest)) = t.split_once('(') else {
            return Err(err("expected function(field)"));
        };
        let Some(inner) = rest.trim_end().strip_suffix(')') else {
            return Err(err("missing closing parenthesis"));
        };
        if inner.contains(['(', ')', ',']) {
            return Err(err("a field name cannot contain '(', ')' or ','"));
        }
        let name = name.trim().to_ascii_lowercase();
        let Some(func) = AggFunc::from_name(&name) else {
            return Err(err(&format!("unknown function \"{name}\"")));
        };
        let field = inner.trim();
        if field.is_empty() {
            return match func {
                AggFunc::Count => Ok(AggSpec { func, field: None }),
                _ => Err(err(&format!("{name}() needs a field"))),
            };
        }
        Ok(AggSpec {
            func,
            field: Some(field.to_string()),
        })
    }
}

impl fmt::Display for AggSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({})",
            self.func.name(),
            self.field.as_deref().unwrap_or("")
        )
    }
}

/// A JSON value stored in an accumulator without `serde_json::Value` (bincode 1 cannot
/// deserialize it): scalars as themselves, arrays and objects as JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Datum {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Json(String),
}

impl Datum {
    fn from_value(v: &Value) -> Datum {
        let mut d = Datum::Null;
        d.assign(v);
        d
    }

    /// Sets `self` to `v`, reusing `self`'s string buffer when both are strings.
    fn assign(&mut self, v: &Value) {
        match (&mut *self, v) {
            (Datum::Str(s), Value::String(new)) => {
                s.clear();
                s.push_str(new);
            }
            _ => {
                *self = match v {
                    Value::Null => Datum::Null,
                    Value::Bool(b) => Datum::Bool(*b),
                    Value::Number(n) => number_datum(n),
                    Value::String(s) => Datum::Str(s.clone()),
                    Value::Array(_) | Value::Object(_) => Datum::Json(v.to_string()),
                }
            }
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Datum::Null => Value::Null,
            Datum::Bool(b) => Value::Bool(*b),
            Datum::Int(i) => Value::from(*i),
            Datum::UInt(u) => Value::from(*u),
            Datum::Float(f) => float_value(*f),
            Datum::Str(s) => Value::String(s.clone()),
            Datum::Json(t) => serde_json::from_str(t).unwrap_or(Value::Null),
        }
    }

    /// Whether `self` replaces `cur` as the `min` (`want` Less) or `max` (Greater): it
    /// is further in that direction, or it is an integer of the same value as the float
    /// `cur` (`-18` over `-18.0`), so the result is one value whatever order records
    /// arrive in or accumulators merge (a proptest found either being returned).
    fn beats(&self, cur: &Datum, want: Ordering) -> bool {
        match self.compare(cur) {
            Ordering::Equal => {
                matches!(cur, Datum::Float(_)) && matches!(self, Datum::Int(_) | Datum::UInt(_))
            }
            o => o == want,
        }
    }

    /// The order of `min`/`max`: booleans < numbers < strings (others last; never stored).
    fn compare(&self, other: &Datum) -> Ordering {
        fn rank(d: &Datum) -> u8 {
            match d {
                Datum::Bool(_) => 0,
                Datum::Int(_) | Datum::UInt(_) | Datum::Float(_) => 1,
                Datum::Str(_) => 2,
                Datum::Null | Datum::Json(_) => 3,
            }
        }
        match (self, other) {
            (Datum::Bool(a), Datum::Bool(b)) => a.cmp(b),
            (Datum::Str(a), Datum::Str(b)) => a.cmp(b),
            _ => match (self.num(), other.num()) {
                (Some(a), Some(b)) => a.compare(b),
                _ => rank(self).cmp(&rank(other)),
            },
        }
    }

    fn num(&self) -> Option<Num> {
        match self {
            Datum::Int(i) => Some(Num::Int(i128::from(*i))),
            Datum::UInt(u) => Some(Num::Int(i128::from(*u))),
            Datum::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }
}

fn number_datum(n: &Number) -> Datum {
    if let Some(i) = n.as_i64() {
        Datum::Int(i)
    } else if let Some(u) = n.as_u64() {
        Datum::UInt(u)
    } else {
        Datum::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// A finite `f64` as a JSON number; `null` otherwise (JSON has no NaN or infinity).
fn float_value(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// A JSON number read without allocating.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::Int(i128::from(i))
        } else if let Some(u) = n.as_u64() {
            Num::Int(i128::from(u))
        } else {
            Num::Float(n.as_f64().unwrap_or(f64::NAN))
        }
    }

    /// Exact numeric comparison (JSON numbers are never NaN).
    fn compare(self, other: Num) -> Ordering {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Num::Int(a), Num::Float(b)) => int_float_cmp(a, b),
            (Num::Float(a), Num::Int(b)) => int_float_cmp(b, a).reverse(),
        }
    }
}

/// Compares an integer with a float exactly.
fn int_float_cmp(a: i128, b: f64) -> Ordering {
    const LIMIT: f64 = 1.7e38; // below i128::MAX (about 1.701e38)
    if b.is_nan() {
        return Ordering::Equal;
    }
    if b >= LIMIT {
        return Ordering::Less;
    }
    if b <= -LIMIT {
        return Ordering::Greater;
    }
    let whole = b.trunc();
    // In range, so the cast is exact.
    match a.cmp(&(whole as i128)) {
        Ordering::Equal => 0.0_f64.partial_cmp(&(b - whole)).unwrap_or(Ordering::Equal),
        o => o,
    }
}

/// Writes `v` as canonical JSON: object keys sorted, integral floats that fit in `i64`
/// written as integers.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => {
                let _ = write!(out, "{i}");
            }
            (None, Some(u), _) => {
                let _ = write!(out, "{u}");
            }
            (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => {
                let _ = write!(out, "{}", f as i64);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(&Value::String(k.clone()), out);
                out.push(':');
                canonical(&o[k], out);
            }
            out.push('}');
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {
            let _ = write!(out, "{v}");
        }
    }
}

/// The sum of the numeric values seen: integers exactly, floats apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct SumState {
    ints: i128,
    floats: f64,
    has_float: bool,
    n: u64,
}

impl SumState {
    fn add(&mut self, n: &Number) {
        match Num::of(n) {
            // 2^64 values of at most 2^64 cannot overflow i128; saturate regardless.
            Num::Int(i) => self.ints = self.ints.saturating_add(i),
            Num::Float(f) => {
                self.floats += f;
                self.has_float = true;
            }
        }
        self.n += 1;
    }

    fn merge(&mut self, other: &SumState) {
        self.ints = self.ints.saturating_add(other.ints);
        self.floats += other.floats;
        self.has_float |= other.has_float;
        self.n += other.n;
    }

    fn total(&self) -> f64 {
        self.ints as f64 + self.floats
    }

    fn sum(&self) -> Value {
        if self.n == 0 {
            Value::Null
        } else if self.has_float {
            float_value(self.total())
        } else if let Some(n) = Number::from_i128(self.ints) {
            Value::Number(n)
        } else {
            float_value(self.ints as f64)
        }
    }

    fn avg(&self) -> Value {
        if self.n == 0 {
            Value::Null
        } else {
            float_value(self.total() / self.n as f64)
        }
    }
}

/// One aggregate's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum AggState {
    Count(u64),
    Sum(SumState),
    Min(Option<Datum>),
    Max(Option<Datum>),
    /// The value and its arrival sequence number.
    First(Option<(u64, Datum)>),
    Last(Option<(u64, Datum)>),
    Distinct(BTreeSet<String>),
}

impl AggState {
    fn new(func: AggFunc) -> AggState {
        match func {
            AggFunc::Count => AggState::Count(0),
            AggFunc::Sum | AggFunc::Avg => AggState::Sum(SumState::default()),
            AggFunc::Min => AggState::Min(None),
            AggFunc::Max => AggState::Max(None),
            AggFunc::First => AggState::First(None),
            AggFunc::Last => AggState::Last(None),
            AggFunc::CountDistinct => AggState::Distinct(BTreeSet::new()),
        }
    }
}

/// The accumulator of a [`RowAggregate`]: the key values of the first record and one
/// state per aggregate. Serializes with bincode 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowAcc {
    /// Values of the key fields, from the first record added (`None` while empty).
    keys: Option<Vec<Datum>>,
    /// The largest arrival sequence number given to a record of this accumulator.
    seq: u64,
    states: Vec<AggState>,
}

/// The names `window_row` adds; an aggregate or key cannot use them.
const WINDOW_FIELDS: [&str; 2] = ["window_start", "window_end"];

/// Aggregates over rows: computes `aggregates` per key and window and emits one row of
/// the key fields and the aggregates by output name, in the given order (see the
/// [module docs](self) for the semantics).
#[derive(Debug)]
pub struct RowAggregate {
    key_fields: Vec<String>,
    aggregates: Vec<(String, AggSpec)>,
    /// Whether some aggregate depends on arrival order (first/last).
    ordered: bool,
    /// The arrival sequence (see the module docs).
    seq: AtomicU64,
}

impl Clone for RowAggregate {
    fn clone(&self) -> Self {
        RowAggregate {
            key_fields: self.key_fields.clone(),
            aggregates: self.aggregates.clone(),
            ordered: self.ordered,
            seq: AtomicU64::new(self.seq.load(AtomicOrdering::Relaxed)),
        }
    }
}

/// Where a new [`RowAggregate`] starts numbering records: the wall clock in ms × 10⁶,
/// above every number handed out by an earlier process (fewer than 10⁶ records per ms).
pub(crate) fn seq_base() -> u64 {
    use brook_core::time::{Clock, SystemClock};
    u64::try_from(SystemClock.now_ms())
        .unwrap_or(0)
        .saturating_mul(1_000_000)
}

impl RowAggregate {
    /// Aggregates `aggregates` (output name, aggregate) per key of `key_fields`.
    ///
    /// # Errors
    /// When an output name repeats, equals a key field, or is `window_start` or
    /// `window_end`, or a key field repeats.
    pub fn new(
        key_fields: Vec<String>,
        aggregates: Vec<(String, AggSpec)>,
    ) -> Result<RowAggregate, String> {
        let mut seen = BTreeSet::new();
        for k in &key_fields {
            if !seen.insert(k.as_str()) {
                return Err(format!("key field \"{k}\" is listed twice"));
            }
            if WINDOW_FIELDS.contains(&k.as_str()) {
                return Err(format!(
                    "key field \"{k}\" clashes with the window field of that name"
                ));
            }
        }
        for (name, spec) in &aggregates {
            if WINDOW_FIELDS.contains(&name.as_str()) {
                return Err(format!(
                    "aggregate \"{name}\" ({spec}) clashes with the window field of that name"
                ));
            }
            if key_fields.contains(name) {
                return Err(format!(
                    "aggregate \"{name}\" ({spec}) clashes with the key field of that name"
                ));
            }
            if !seen.insert(name.as_str()) {
                return Err(format!("aggregate name \"{name}\" is used twice"));
            }
        }
        let ordered = aggregates
            .iter()
            .any(|(_, s)| matches!(s.func, AggFunc::First | AggFunc::Last));
        Ok(RowAggregate {
            key_fields,
            aggregates,
            ordered,
            seq: AtomicU64::new(seq_base()),
        })
    }

    /// The key fields.
    pub fn key_fields(&self) -> &[String] {
        &self.key_fields
    }

    /// The aggregates, as (output name, aggregate).
    pub fn aggregates(&self) -> &[(String, AggSpec)] {
        &self.aggregates
    }

    /// Checks `row` before [`AggregateFunction::add`]: the row must be a JSON object, and
    /// a field read by `sum` or `avg` must be missing, `null` or a number.
    ///
    /// # Errors
    /// A message naming the field, the value and the aggregate, e.g.
    /// `field "price": "abc" is not a number (sum(price))`.
    pub fn check(&self, row: &Row) -> Result<(), String> {
        let Some(obj) = row.as_object() else {
            return Err(format!("expected a JSON object, got {row}"));
        };
        for (_, spec) in &self.aggregates {
            if !matches!(spec.func, AggFunc::Sum | AggFunc::Avg) {
                continue;
            }
            let Some(f) = &spec.field else { continue };
            match obj.get(f) {
                None | Some(Value::Null) | Some(Value::Number(_)) => {}
                Some(v) => return Err(format!("field \"{f}\": {v} is not a number ({spec})")),
            }
        }
        Ok(())
    }

    fn next_seq(&self, acc: &mut RowAcc) -> u64 {
        let mut s = self.seq.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        if s <= acc.seq {
            // A restored accumulator: continue above its numbers.
            s = acc.seq + 1;
            self.seq.fetch_max(s, AtomicOrdering::Relaxed);
        }
        acc.seq = s;
        s
    }
}

impl AggregateFunction<Row> for RowAggregate {
    type Acc = RowAcc;
    type Out = Row;

    fn create_accumulator(&self) -> RowAcc {
        RowAcc {
            keys: None,
            seq: 0,
            states: self
                .aggregates
                .iter()
                .map(|(_, s)| AggState::new(s.func))
                .collect(),
        }
    }

    /// Adds one row. Never panics; allocates only for the first row (the key values),
    /// `first`/`last` of strings and arrays/objects, and `count_distinct`.
    fn add(&self, acc: &mut RowAcc, row: &Row) {
        let obj = row.as_object();
        let get = |f: &Option<String>| -> Option<&Value> {
            match (obj, f) {
                (Some(o), Some(f)) => o.get(f).filter(|v| !v.is_null()),
                _ => None,
            }
        };
        if acc.keys.is_none() {
            acc.keys = Some(
                self.key_fields
                    .iter()
                    .map(|k| {
                        obj.and_then(|o| o.get(k))
                            .map_or(Datum::Null, Datum::from_value)
                    })
                    .collect(),
            );
        }
        let seq = if self.ordered { self.next_seq(acc) } else { 0 };
        for ((_, spec), state) in self.aggregates.iter().zip(acc.states.iter_mut()) {
            let v = get(&spec.field);
            match state {
                AggState::Count(n) => {
                    if spec.field.is_none() || v.is_some() {
                        *n += 1;
                    }
                }
                AggState::Sum(s) => {
                    if let Some(Value::Number(n)) = v {
                        s.add(n);
                    }
                }
                AggState::Min(m) | AggState::Max(m) => {
                    let want = if spec.func == AggFunc::Min {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    };
                    let candidate = match v {
                        Some(Value::Bool(b)) => Datum::Bool(*b),
                        Some(Value::Number(n)) => number_datum(n),
                        Some(Value::String(s)) => {
                            // Compare before copying, so a string that loses allocates nothing.
                            let wins = match m {
                                Some(cur) => str_vs(s, cur) == want,
                                None => true,
                            };
                            if wins {
                                match m {
                                    Some(d) => d.assign(v.unwrap_or(&Value::Null)),
                                    None => *m = Some(Datum::Str(s.clone())),
                                }
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    match m {
                        Some(cur) if !candidate.beats(cur, want) => {}
                        _ => *m = Some(candidate),
                    }
                }
                AggState::First(slot) => {
                    if let (None, Some(v)) = (&slot, v) {
                        *slot = Some((seq, Datum::from_value(v)));
                    }
                }
                AggState::Last(slot) => {
                    if let Some(v) = v {
                        match slot {
                            Some((s, d)) => {
                                *s = seq;
                                d.assign(v);
                            }
                            None => *slot = Some((seq, Datum::from_value(v))),
                        }
                    }
                }
                AggState::Distinct(set) => {
                    if let Some(v) = v {
                        let mut text = String::new();
                        canonical(v, &mut text);
                        set.insert(text);
                    }
                }
            }
        }
    }

    fn merge(&self, acc: &mut RowAcc, other: RowAcc) {
        if acc.keys.is_none() {
            acc.keys = other.keys;
        }
        acc.seq = acc.seq.max(other.seq);
        for (mine, theirs) in acc.states.iter_mut().zip(other.states) {
            match (mine, theirs) {
                (AggState::Count(a), AggState::Count(b)) => *a += b,
                (AggState::Sum(a), AggState::Sum(b)) => a.merge(&b),
                (AggState::Min(a), AggState::Min(b)) => pick(a, b, Ordering::Less),
                (AggState::Max(a), AggState::Max(b)) => pick(a, b, Ordering::Greater),
                (AggState::First(a), AggState::First(b)) => {
                    if let Some((sb, db)) = b {
                        if a.as_ref().is_none_or(|(sa, _)| sb < *sa) {
                            *a = Some((sb, db));
                        }
                    }
                }
                (AggState::Last(a), AggState::Last(b)) => {
                    if let Some((sb, db)) = b {
                        if a.as_ref().is_none_or(|(sa, _)| sb > *sa) {
                            *a = Some((sb, db));
                        }
                    }
                }
                (AggState::Distinct(a), AggState::Distinct(b)) => a.extend(b),
                // Accumulators of the same RowAggregate always line up.
                (m, _) => debug_assert!(false, "mismatched accumulator state {m:?}"),
            }
        }
    }

    fn get_result(&self, acc: &RowAcc) -> Row {
        let mut out = Map::new();
        for (i, k) in self.key_fields.iter().enumerate() {
            let v = acc
                .keys
                .as_ref()
                .and_then(|ks| ks.get(i))
                .map_or(Value::Null, Datum::to_value);
            out.insert(k.clone(), v);
        }
        for ((name, spec), state) in self.aggregates.iter().zip(&acc.states) {
            let v = match state {
                AggState::Count(n) => Value::from(*n),
                AggState::Sum(s) if spec.func == AggFunc::Avg => s.avg(),
                AggState::Sum(s) => s.sum(),
                AggState::Min(d) | AggState::Max(d) => {
                    d.as_ref().map_or(Value::Null, Datum::to_value)
                }
                AggState::First(d) | AggState::Last(d) => {
                    d.as_ref().map_or(Value::Null, |(_, d)| d.to_value())
                }
                AggState::Distinct(set) => Value::from(set.len() as u64),
            };
            out.insert(name.clone(), v);
        }
        Value::Object(out)
    }
}

/// How string `s` compares with the datum `d` in the `min`/`max` order.
fn str_vs(s: &str, d: &Datum) -> Ordering {
    match d {
        Datum::Str(cur) => s.cmp(cur.as_str()),
        // Strings come after booleans and numbers.
        Datum::Bool(_) | Datum::Int(_) | Datum::UInt(_) | Datum::Float(_) => Ordering::Greater,
        Datum::Null | Datum::Json(_) => Ordering::Less,
    }
}

/// Keeps in `a` whichever of `a` and `b` compares as `want` (the earlier on ties).
fn pick(a: &mut Option<Datum>, b: Option<Datum>, want: Ordering) {
    if let Some(b) = b {
        match a {
            Some(cur) if !b.beats(cur, want) => {}
            _ => *a = Some(b),
        }
    }
}

/// The final row of a window: the key fields (in `key_fields` order), `window_start`
/// and `window_end` (ms since the epoch, the window `[start, end)`), then the other
/// fields of `result` (the aggregates) in their order. A `result` that is not an object
/// is returned unchanged.
pub fn window_row(result: Row, key_fields: &[String], start: Millis, end: Millis) -> Row {
    let Value::Object(mut fields) = result else {
        return result;
    };
    let mut out = Map::new();
    for k in key_fields {
        if let Some(v) = fields.get_mut(k) {
            out.insert(k.clone(), v.take());
        }
    }
    out.insert(WINDOW_FIELDS[0].to_string(), Value::from(start));
    out.insert(WINDOW_FIELDS[1].to_string(), Value::from(end));
    for (k, v) in fields {
        if !key_fields.contains(&k) {
            out.insert(k, v);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn agg(keys: &[&str], aggs: &[(&str, &str)]) -> RowAggregate {
        RowAggregate::new(
            keys.iter().map(|k| k.to_string()).collect(),
            aggs.iter()
                .map(|(n, t)| (n.to_string(), AggSpec::parse(t).unwrap()))
                .collect(),
        )
        .unwrap()
    }

    fn run(a: &RowAggregate, rows: &[Value]) -> Value {
        let mut acc = a.create_accumulator();
        for r in rows {
            a.add(&mut acc, r);
        }
        a.get_result(&acc)
    }

    fn text(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[test]
    fn parse_specs() {
        let p = |t: &str| AggSpec::parse(t).unwrap();
        assert_eq!(
            p("count()"),
            AggSpec {
                func: AggFunc::Count,
                field: None
            }
        );
        assert_eq!(
            p("  count ( )  "),
            AggSpec {
                func: AggFunc::Count,
                field: None
            }
        );
        assert_eq!(
            p(" SUM( unit price ) "),
            AggSpec {
                func: AggFunc::Sum,
                field: Some("unit price".into())
            }
        );
        assert_eq!(p("count_distinct(user.id)").func, AggFunc::CountDistinct);
        for t in [
            "count(x)",
            "sum(x)",
            "min(x)",
            "max(x)",
            "avg(x)",
            "first(x)",
            "last(x)",
            "count_distinct(x)",
            "count()",
        ] {
            assert_eq!(p(t).to_string(), t);
        }
        for (bad, why) in [
            ("median(x)", "unknown function \"median\""),
            ("sum()", "sum() needs a field"),
            ("count_distinct( )", "count_distinct() needs a field"),
            ("sum(a, b)", "cannot contain"),
            ("sum(f(x))", "cannot contain"),
            ("sum(x", "missing closing parenthesis"),
            ("sum(x) y", "missing closing parenthesis"),
            ("price", "expected function(field)"),
            ("", "expected function(field)"),
        ] {
            let e = AggSpec::parse(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid aggregate \"{bad}\": {why}"))
                    || e.contains(why) && e.contains(&format!("\"{bad}\"")),
                "{bad}: {e}"
            );
            assert!(
                e.contains("count_distinct(field)"),
                "lists the functions: {e}"
            );
        }
    }

    #[test]
    fn new_rejects_clashing_names() {
        let spec = AggSpec::parse("count()").unwrap();
        let e = RowAggregate::new(vec!["k".into()], vec![("k".into(), spec.clone())]).unwrap_err();
        assert!(e.contains("\"k\""), "{e}");
        let e = RowAggregate::new(
            vec![],
            vec![("n".into(), spec.clone()), ("n".into(), spec.clone())],
        )
        .unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        let e = RowAggregate::new(vec![], vec![("window_end".into(), spec.clone())]).unwrap_err();
        assert!(e.contains("window_end"), "{e}");
        assert!(RowAggregate::new(vec!["k".into(), "k".into()], vec![]).is_err());
    }

    #[test]
    fn counts_with_nulls() {
        let a = agg(
            &[],
            &[
                ("all", "count()"),
                ("x", "count(x)"),
                ("d", "count_distinct(x)"),
            ],
        );
        let rows = [
            json!({"x": 1}),
            json!({"x": null}),
            json!({}),
            json!({"x": 1.0}),
            json!({"x": "1"}),
            json!({"x": 2}),
        ];
        assert_eq!(text(&run(&a, &rows)), r#"{"all":6,"x":4,"d":3}"#);
        assert_eq!(text(&run(&a, &[])), r#"{"all":0,"x":0,"d":0}"#);
    }

    #[test]
    fn count_distinct_is_canonical() {
        let a = agg(&[], &[("d", "count_distinct(x)")]);
        let rows = [
            json!({"x": {"a": 1, "b": [1, 2.0]}}),
            json!({"x": {"b": [1, 2], "a": 1}}),
            json!({"x": [1, 2]}),
            json!({"x": "[1,2]"}),
            json!({"x": true}),
            json!({"x": 0.5}),
        ];
        assert_eq!(run(&a, &rows)["d"], json!(5));
    }

    #[test]
    fn sums_and_averages() {
        let a = agg(&[], &[("s", "sum(x)"), ("a", "avg(x)")]);
        assert_eq!(text(&run(&a, &[])), r#"{"s":null,"a":null}"#);
        assert_eq!(
            text(&run(&a, &[json!({"x": null}), json!({})])),
            r#"{"s":null,"a":null}"#
        );
        let ints = [
            json!({"x": 1}),
            json!({"x": -4}),
            json!({"x": null}),
            json!({"x": 6}),
        ];
        assert_eq!(text(&run(&a, &ints)), r#"{"s":3,"a":1.0}"#);
        let mixed = [json!({"x": 1}), json!({"x": 0.5})];
        assert_eq!(text(&run(&a, &mixed)), r#"{"s":1.5,"a":0.75}"#);
        // Non-numbers are skipped by add (check reports them).
        let bad = [json!({"x": 2}), json!({"x": "3"}), json!({"x": true})];
        assert_eq!(text(&run(&a, &bad)), r#"{"s":2,"a":2.0}"#);
        // Exact beyond i64: u64, then f64.
        let big = [json!({"x": i64::MAX}), json!({"x": 1})];
        assert_eq!(run(&a, &big)["s"], json!(9_223_372_036_854_775_808_u64));
        let huge = [json!({"x": u64::MAX}), json!({"x": u64::MAX})];
        assert_eq!(run(&a, &huge)["s"], json!(u64::MAX as f64 * 2.0));
        // Overflowing on the way but not at the end stays an exact integer.
        let back = [
            json!({"x": i64::MAX}),
            json!({"x": i64::MAX}),
            json!({"x": -i64::MAX}),
            json!({"x": -5}),
        ];
        assert_eq!(run(&a, &back)["s"], json!(i64::MAX - 5));
        let neg = [json!({"x": i64::MIN}), json!({"x": -1})];
        assert_eq!(run(&a, &neg)["s"], json!(i64::MIN as f64 - 1.0));
    }

    #[test]
    fn min_max_numbers_strings_mixed() {
        let a = agg(&[], &[("lo", "min(x)"), ("hi", "max(x)")]);
        let nums = [
            json!({"x": 3}),
            json!({"x": -2.5}),
            json!({"x": null}),
            json!({"x": 10}),
            json!({}),
        ];
        assert_eq!(text(&run(&a, &nums)), r#"{"lo":-2.5,"hi":10}"#);
        let dates = [
            json!({"x": "2024-03-01"}),
            json!({"x": "2023-12-31"}),
            json!({"x": "2024-10-01"}),
        ];
        assert_eq!(
            text(&run(&a, &dates)),
            r#"{"lo":"2023-12-31","hi":"2024-10-01"}"#
        );
        // booleans < numbers < strings; arrays and objects skipped.
        let mixed = [
            json!({"x": "a"}),
            json!({"x": 5}),
            json!({"x": true}),
            json!({"x": [1]}),
            json!({"x": {"a": 1}}),
        ];
        assert_eq!(text(&run(&a, &mixed)), r#"{"lo":true,"hi":"a"}"#);
        // Exact integer/float comparison; an integer wins a tie with a float.
        let close = [
            json!({"x": 9_007_199_254_740_993_i64}),
            json!({"x": 9_007_199_254_740_992.0}),
        ];
        assert_eq!(
            text(&run(&a, &close)),
            r#"{"lo":9007199254740992.0,"hi":9007199254740993}"#
        );
        let ties = [json!({"x": 1}), json!({"x": 1.0})];
        assert_eq!(text(&run(&a, &ties)), r#"{"lo":1,"hi":1}"#);
        let ties = [json!({"x": 1.0}), json!({"x": 1})];
        assert_eq!(text(&run(&a, &ties)), r#"{"lo":1,"hi":1}"#);
        let bigu = [json!({"x": u64::MAX}), json!({"x": -1})];
        assert_eq!(
            text(&run(&a, &bigu)),
            format!(r#"{{"lo":-1,"hi":{}}}"#, u64::MAX)
        );
        assert_eq!(text(&run(&a, &[])), r#"{"lo":null,"hi":null}"#);
    }

    #[test]
    fn first_last_by_arrival_skip_nulls() {
        let a = agg(&[], &[("f", "first(x)"), ("l", "last(x)")]);
        let rows = [
            json!({"x": null}),
            json!({"x": "b"}),
            json!({"x": {"o": [1]}}),
            json!({"x": 3}),
            json!({"x": "z"}),
            json!({}),
        ];
        assert_eq!(text(&run(&a, &rows)), r#"{"f":"b","l":"z"}"#);
        let rows = [json!({"x": {"o": [1]}}), json!({"x": 2.5})];
        assert_eq!(text(&run(&a, &rows)), r#"{"f":{"o":[1]},"l":2.5}"#);
        assert_eq!(text(&run(&a, &[])), r#"{"f":null,"l":null}"#);
    }

    #[test]
    fn result_order_keys_then_aggregates_then_window() {
        let a = agg(
            &["student", "shop"],
            &[
                ("z_n", "count()"),
                ("a_total", "sum(cents)"),
                ("m", "max(cents)"),
            ],
        );
        let rows = [
            json!({"cents": 5, "shop": "north", "student": "mia"}),
            json!({"shop": "north", "student": "mia", "cents": 7}),
        ];
        let r = run(&a, &rows);
        assert_eq!(
            text(&r),
            r#"{"student":"mia","shop":"north","z_n":2,"a_total":12,"m":7}"#
        );
        let w = window_row(r, a.key_fields(), -1000, 4000);
        assert_eq!(
            text(&w),
            r#"{"student":"mia","shop":"north","window_start":-1000,"window_end":4000,"z_n":2,"a_total":12,"m":7}"#
        );
        // A missing key field is null; no keys puts the window first.
        let r = run(&agg(&["k"], &[("n", "count()")]), &[json!({})]);
        assert_eq!(text(&r), r#"{"k":null,"n":1}"#);
        let w = window_row(
            run(&agg(&[], &[("n", "count()")]), &[json!({})]),
            &[],
            0,
            10,
        );
        assert_eq!(text(&w), r#"{"window_start":0,"window_end":10,"n":1}"#);
        assert_eq!(window_row(json!(3), &[], 0, 1), json!(3));
    }

    #[test]
    fn check_reports_non_numbers_for_sum_and_avg() {
        let a = agg(
            &[],
            &[("s", "sum(price)"), ("m", "max(name)"), ("v", "avg(qty)")],
        );
        assert!(a
            .check(&json!({"price": 1, "qty": 2.5, "name": "x"}))
            .is_ok());
        assert!(a.check(&json!({"price": null})).is_ok());
        assert!(a.check(&json!({"name": 5})).is_ok());
        assert_eq!(
            a.check(&json!({"price": "abc"})).unwrap_err(),
            r#"field "price": "abc" is not a number (sum(price))"#
        );
        assert_eq!(
            a.check(&json!({"price": 1, "qty": [1]})).unwrap_err(),
            r#"field "qty": [1] is not a number (avg(qty))"#
        );
        assert!(a.check(&json!("row")).unwrap_err().contains("JSON object"));
        // add never panics on such rows.
        assert_eq!(
            text(&run(&a, &[json!("row"), json!({"price": "abc"})])),
            r#"{"s":null,"m":null,"v":null}"#
        );
    }

    /// Counts allocations per thread, to check that `add` on numbers does not allocate.
    /// Test-only; the one `unsafe` is delegating to the system allocator.
    #[allow(unsafe_code)]
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
        }

        struct Counting;

        // SAFETY: forwards to `System` unchanged; only counts.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
                // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
                // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }

        #[global_allocator]
        static GLOBAL: Counting = Counting;

        /// Allocations made by this thread so far.
        pub(super) fn allocations() -> u64 {
            ALLOCATIONS.with(Cell::get)
        }
    }

    #[test]
    fn add_on_numbers_does_not_allocate() {
        let a = agg(
            &["k"],
            &[
                ("n", "count()"),
                ("c", "count(x)"),
                ("s", "sum(x)"),
                ("a", "avg(x)"),
                ("lo", "min(x)"),
                ("hi", "max(x)"),
                ("ls", "min(name)"),
            ],
        );
        let rows: Vec<Value> = (0..100)
            .map(|i| json!({"k": "key", "x": if i % 3 == 0 { json!(i as f64 / 4.0) } else { json!(i - 50) }, "name": format!("n{}", i % 7 + 10)}))
            .collect();
        let mut acc = a.create_accumulator();
        a.add(&mut acc, &rows[0]); // the first row captures the key values
        let before = counting::allocations();
        for r in &rows[1..] {
            a.add(&mut acc, r);
        }
        let after = counting::allocations();
        assert_eq!(after - before, 0, "allocations in add");
        assert_eq!(a.get_result(&acc)["n"], json!(100));
        assert_eq!(a.get_result(&acc)["ls"], json!("n10"));
        // The counter works: count_distinct does allocate.
        let d = agg(&[], &[("d", "count_distinct(x)")]);
        let mut acc = d.create_accumulator();
        let before = counting::allocations();
        d.add(&mut acc, &rows[1]);
        assert!(counting::allocations() > before);
    }

    fn all_aggs() -> RowAggregate {
        agg(
            &["k"],
            &[
                ("n", "count()"),
                ("cx", "count(x)"),
                ("sx", "sum(x)"),
                ("ax", "avg(x)"),
                ("lo", "min(x)"),
                ("hi", "max(x)"),
                ("fx", "first(x)"),
                ("lx", "last(x)"),
                ("dx", "count_distinct(x)"),
                ("ls", "min(s)"),
                ("fs", "first(s)"),
                ("ts", "last(s)"),
            ],
        )
    }

    #[test]
    fn bincode_round_trip() {
        let a = all_aggs();
        let mut acc = a.create_accumulator();
        for r in [
            json!({"k": "a", "x": 1, "s": "q"}),
            json!({"k": "a", "x": 2.5, "s": null}),
            json!({"k": "a", "x": {"n": [1]}, "s": "b"}),
            json!({"k": "a", "x": u64::MAX}),
        ] {
            a.add(&mut acc, &r);
        }
        let bytes = bincode::serialize(&acc).unwrap();
        let back: RowAcc = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, acc);
        assert_eq!(a.get_result(&back), a.get_result(&acc));
        let empty = a.create_accumulator();
        let back: RowAcc = bincode::deserialize(&bincode::serialize(&empty).unwrap()).unwrap();
        assert_eq!(back, empty);
    }

    #[test]
    fn restored_accumulator_keeps_arrival_order() {
        let a = agg(&[], &[("f", "first(x)"), ("l", "last(x)")]);
        let mut old = a.create_accumulator();
        for i in 0..5 {
            a.add(&mut old, &json!({ "x": i }));
        }
        // A fresh function (after a restore) continues above the restored numbers.
        let fresh = agg(&[], &[("f", "first(x)"), ("l", "last(x)")]);
        let mut restored: RowAcc =
            bincode::deserialize(&bincode::serialize(&old).unwrap()).unwrap();
        fresh.add(&mut restored, &json!({"x": 5}));
        let mut newer = fresh.create_accumulator();
        fresh.add(&mut newer, &json!({"x": 6}));
        fresh.merge(&mut newer, restored);
        assert_eq!(text(&fresh.get_result(&newer)), r#"{"f":0,"l":6}"#);
    }

    fn value() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            (-50i64..50).prop_map(|i| Some(json!(i))),
            (-50i64..50).prop_map(|i| Some(json!(i as f64 / 2.0))),
            prop::sample::select(vec!["a", "b", "2024-01-01", "10"]).prop_map(|s| Some(json!(s))),
            any::<bool>().prop_map(|b| Some(json!(b))),
            Just(Some(json!({"o": [1, 2]}))),
        ]
    }

    fn row() -> impl Strategy<Value = Value> {
        (value(), value()).prop_map(|(x, s)| {
            let mut m = Map::new();
            m.insert("k".into(), json!("key"));
            if let Some(x) = x {
                m.insert("x".into(), x);
            }
            if let Some(s) = s {
                m.insert("s".into(), s);
            }
            Value::Object(m)
        })
    }

    proptest! {
        #[test]
        fn merge_equals_add_all(
            rows in prop::collection::vec((row(), any::<bool>()), 0..40),
            into_left in any::<bool>(),
        ) {
            let a = all_aggs();
            let mut whole = a.create_accumulator();
            let (mut left, mut right) = (a.create_accumulator(), a.create_accumulator());
            for (r, go_left) in &rows {
                a.add(&mut whole, r);
                a.add(if *go_left { &mut left } else { &mut right }, r);
            }
            let merged = if into_left {
                a.merge(&mut left, right);
                left
            } else {
                a.merge(&mut right, left);
                right
            };
            let expected = a.get_result(&whole);
            let got = a.get_result(&merged);
            // Same values, same order.
            prop_assert_eq!(text(&got), text(&expected));
            // And independent of the function instance that added them.
            let other = all_aggs();
            let alone = run(&other, &rows.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>());
            prop_assert_eq!(text(&alone), text(&expected));
        }
    }
}
