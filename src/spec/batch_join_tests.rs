//! A `join` step on batches (both inputs' schemas known at plan time, keys of one type)
//! gives the rows the row path gives (joins of JSON rows), on random input: each kind
//! of join, inner and left outer, keys with nulls, a right field whose name the left
//! has (prefixed), null fields. Each input file is in time order within its
//! out-of-orderness, so no row is late whatever the order the two files are read in
//! (a row is late only when behind its own source's watermark too); the late output's
//! plumbing is checked on its own.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// The rows of the JSON-lines file `path`, sorted (none if it does not exist), without
/// their null fields: an unmatched left row of a left outer join has the right's fields
/// null on batches (a row has its schema's fields, as Flink SQL's `LEFT JOIN`), and
/// none on JSON rows.
fn rows_of(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut rows: Vec<Value> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("json");
            if let Value::Object(m) = &mut v {
                m.retain(|_, x| !x.is_null());
            }
            v
        })
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// Runs `yaml`; `rows`: its join on JSON rows. The `out` and `late` files' rows.
fn run(yaml: &str, dir: &std::path::Path, rows: bool) -> (Vec<Value>, Vec<Value>) {
    let (out, late) = (dir.join("out.jsonl"), dir.join("late.jsonl"));
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&late);
    let mut valid = validate(parse(yaml).expect("parses")).expect("valid");
    let StepOp::Join(j) = &valid.steps[0].op else {
        panic!("a join")
    };
    assert!(j.planned.is_some(), "planned on batches");
    if rows {
        valid.enrich_and_joins_on_rows();
    }
    let built = build(&valid, brook_engine::JobConfig::with_parallelism(1), None).expect("builds");
    built.env.execute("join").expect("runs");
    (rows_of(&out), rows_of(&late))
}

fn job(dir: &std::path::Path, join: &str, late: bool) -> String {
    let (late_output, late_sink) = if late {
        (
            "\n    late_output: late",
            format!(
                "\n  - {{name: late, connector: file, path: {}}}",
                dir.join("late.jsonl").display()
            ),
        )
    } else {
        ("", String::new())
    };
    format!(
        r#"
name: join
sources:
  - {{name: orders, connector: file, path: {dir}/orders.jsonl, schema: {{k: int64, n: int64, ts: int64}}, event_time: ts, watermark: {{out_of_orderness: 50}}}}
  - {{name: payments, connector: file, path: {dir}/payments.jsonl, schema: {{k: int64, n: string, paid: float64, ts: int64}}, event_time: ts, watermark: {{out_of_orderness: 50}}}}
steps:
  - name: joined
    join: {join}{late_output}
sinks:
  - {{name: out, connector: file, path: {dir}/out.jsonl, input: joined}}{late_sink}
"#,
        dir = dir.display()
    )
}

/// `n` rows of one input: keys 0..4 or null, times rising by 0..30 with a jitter of
/// up to 40 back (within the out-of-orderness of 50).
fn input() -> impl Strategy<Value = Vec<(Option<i64>, Option<i64>, i64, i64)>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.9, 0i64..4),
            prop::option::weighted(0.8, 0i64..100),
            0i64..30,
            0i64..40,
        ),
        0..60,
    )
}

fn with_times(
    rows: &[(Option<i64>, Option<i64>, i64, i64)],
) -> Vec<(Option<i64>, Option<i64>, i64)> {
    let mut t = 0;
    rows.iter()
        .map(|(k, v, step, jitter)| {
            t += step;
            (*k, *v, (t - jitter).max(0))
        })
        .collect()
}

fn write(dir: &std::path::Path, name: &str, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(dir.join(name), text).expect("write");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn joins_on_batches_give_the_rows_of_the_row_path(
        orders in input(),
        payments in input(),
        kind in prop::sample::select(vec![
            "{kind: interval, left: orders, right: payments, on: [k], between: [-20, 40]",
            "{kind: window, left: orders, right: payments, on: [k], window: {kind: tumbling, size: 100}",
            "{kind: window, left: orders, right: payments, on: [k], window: {kind: hopping, size: 100, slide: 50}",
            "{kind: temporal, left: orders, right: payments, on: [k]",
        ]),
        outer in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let orders: Vec<Value> = with_times(&orders)
            .into_iter()
            .map(|(k, n, ts)| json!({"k": k, "n": n, "ts": ts}))
            .collect();
        let payments: Vec<Value> = with_times(&payments)
            .into_iter()
            .map(|(k, v, ts)| {
                json!({"k": k, "n": v.map(|v| format!("p{v}")), "paid": v.map(|v| v as f64 / 4.0), "ts": ts})
            })
            .collect();
        write(dir.path(), "orders.jsonl", &orders);
        write(dir.path(), "payments.jsonl", &payments);
        let join = format!("{kind}{}}}", if outer { ", type: left_outer" } else { "" });
        let yaml = job(dir.path(), &join, false);
        let batches = run(&yaml, dir.path(), false);
        let rows = run(&yaml, dir.path(), true);
        prop_assert_eq!(batches, rows);
    }
}

/// The output schema on batches: the left's fields, the right's but the key, a right
/// field the left also has prefixed; and the steps after it planned against it.
#[test]
fn a_join_on_batches_is_planned_with_its_output_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "orders.jsonl",
        &[json!({"k": 1, "n": 1, "ts": 0})],
    );
    write(
        dir.path(),
        "payments.jsonl",
        &[json!({"k": 1, "n": "a", "paid": 1.0, "ts": 0})],
    );
    let yaml = job(
        dir.path(),
        "{kind: interval, left: orders, right: payments, on: [k], between: [0, 10]}",
        false,
    );
    let v = validate(parse(&yaml).expect("parses")).expect("valid");
    let StepOp::Join(j) = &v.steps[0].op else {
        panic!("a join")
    };
    let plan = j.planned.as_ref().expect("planned on batches");
    let fields: Vec<String> = plan
        .output_schema()
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    assert_eq!(
        fields,
        [
            "k: Int64",
            "n: Int64",
            "ts: Int64",
            "payments_n: Utf8",
            "paid: Float64",
            "payments_ts: Int64"
        ]
    );
    // Keys of two types: the row path (where they never match either).
    let yaml = yaml.replace(
        "payments.jsonl, schema: {k: int64",
        "payments.jsonl, schema: {k: string",
    );
    let v = validate(parse(&yaml).expect("parses")).expect("valid");
    let StepOp::Join(j) = &v.steps[0].op else {
        panic!("a join")
    };
    assert!(j.planned.is_none());
}

/// Late rows of both inputs leave by the late output as they came in: JSON rows of
/// their own input's fields, exactly an input row each.
#[test]
fn late_rows_of_a_join_on_batches_go_to_its_late_output_as_they_came() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Each file jumps ahead then back by far more than the out-of-orderness: the rows
    // after the jump are late once the watermark has passed them.
    let mut orders = Vec::new();
    let mut payments = Vec::new();
    for i in 0..20_000i64 {
        let ts = if i % 1000 == 999 { 0 } else { i * 10 };
        orders.push(json!({"k": i % 7, "n": i, "ts": ts}));
        payments.push(json!({"k": i % 7, "n": format!("p{i}"), "paid": 1.5, "ts": ts}));
    }
    write(dir.path(), "orders.jsonl", &orders);
    write(dir.path(), "payments.jsonl", &payments);
    let yaml = job(
        dir.path(),
        "{kind: interval, left: orders, right: payments, on: [k], between: [0, 0]}",
        true,
    );
    let (out, late) = run(&yaml, dir.path(), false);
    assert!(!out.is_empty());
    // How many are late depends on how the two files' reads interleave: 12 of the 40
    // rows that jump back in three runs here, none in one CI run (a row is late only
    // once the other file's watermark passed it too), so the count is not asserted;
    // the operators' own test checks the rows' round trip.
    for r in &late {
        assert!(
            orders.contains(r) || payments.contains(r),
            "a late row is an input row as it came in: {r}"
        );
    }
}
