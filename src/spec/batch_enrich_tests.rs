//! An `enrich` step on batches (its input's and its table's schemas known at plan time)
//! gives the rows the row path gives (rows read as JSON, `LookupEnrich`), on random
//! input: keys with nulls and keys the table lacks, tables with repeated keys (the last
//! row wins) and null fields, each `missing` policy; and its mistakes are found when
//! the job is planned. (With an empty table the two differ by design: the row path
//! knows no table fields to set to null; batches have the table's schema.)

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// Runs `yaml` on a log of its own; `rows`: its enrich step on JSON rows (the row
/// path). The sink's rows, sorted.
fn run(yaml: &str, rows: bool, out: &std::path::Path) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = brook_log::Log::open(dir.path(), brook_log::LogOptions::default()).expect("log");
    let built = build_local(yaml, &log, |v| {
        if rows {
            v.enrich_and_joins_on_rows();
        }
    });
    built.env.execute("enrich").expect("runs");
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    rows.sort_by_key(|r| r.to_string());
    rows
}

fn job(dir: &std::path::Path, missing: &str, fields: &str) -> String {
    format!(
        r#"
name: enrich
sources:
  - name: sales
    connector: file
    path: {dir}/sales.jsonl
    schema: {{n: int64, cents: int64}}
steps:
  - name: with-table
    enrich:
      table: {{connector: file, path: {dir}/table.jsonl, schema: {{id: int64, name: string, score: int64}}}}
      on: [n]
      table_key: [id]
      missing: {missing}{fields}
    on_bad_record: skip
  - filter: "cents >= 0"
sinks:
  - {{name: out, connector: file, path: {dir}/out.jsonl}}
"#,
        dir = dir.display()
    )
}

fn write_lines(path: &std::path::Path, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("write");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn enrich_on_batches_gives_the_rows_of_the_row_path(
        sales in prop::collection::vec((prop::option::weighted(0.9, 0i64..8), -5i64..100), 1..80),
        table in prop::collection::vec((0i64..6, 0u8..4, prop::option::of(0i64..9)), 1..20),
        missing in prop::sample::select(vec!["nulls", "drop", "bad_record"]),
        only_score in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sales: Vec<Value> = sales.iter().map(|(n, c)| json!({"n": n, "cents": c})).collect();
        let table: Vec<Value> = table
            .iter()
            .map(|(id, name, score)| json!({"id": id, "name": format!("t{name}"), "score": score}))
            .collect();
        write_lines(&dir.path().join("sales.jsonl"), &sales);
        write_lines(&dir.path().join("table.jsonl"), &table);
        let fields = if only_score { "\n      fields: [score]" } else { "" };
        let yaml = job(dir.path(), missing, fields);
        let out = dir.path().join("out.jsonl");
        let batches = run(&yaml, false, &out);
        std::fs::remove_file(&out).ok();
        let rows = run(&yaml, true, &out);
        prop_assert_eq!(batches, rows);
    }
}

#[test]
fn an_enrich_step_on_batches_is_planned_with_its_output_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_lines(
        &dir.path().join("sales.jsonl"),
        &[json!({"n": 1, "cents": 5})],
    );
    write_lines(
        &dir.path().join("table.jsonl"),
        &[json!({"id": 1, "name": "one", "score": 3})],
    );
    let v = validate(parse(&job(dir.path(), "nulls", "")).expect("parses")).expect("valid");
    let StepOp::Enrich(e) = &v.steps[0].op else {
        panic!("an enrich step")
    };
    let plan = e.planned.as_ref().expect("planned on batches");
    let fields: Vec<&str> = plan
        .output_schema()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(fields, ["n", "cents", "name", "score"]);
    // The filter after it was planned against that schema too.
    let StepOp::Sql(_, planned) = &v.steps[1].op else {
        panic!("a filter")
    };
    assert!(planned.is_some());
}

#[test]
fn enrich_mistakes_are_found_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_lines(
        &dir.path().join("sales.jsonl"),
        &[json!({"n": 1, "cents": 5})],
    );
    write_lines(
        &dir.path().join("table.jsonl"),
        &[json!({"id": 1, "name": "one", "score": 3})],
    );
    let err = |yaml: String| {
        validate(parse(&yaml).expect("parses"))
            .expect_err("a mistake")
            .to_string()
    };
    let base = job(dir.path(), "nulls", "");
    let e = err(base.replace("on: [n]", "on: [m]"));
    assert!(
        e.contains("steps[0] (with-table).enrich.on: field \"m\" is not in the input (its fields: n, cents)"),
        "{e}"
    );
    let e = err(base.replace("table_key: [id]", "table_key: [ident]"));
    assert!(
        e.contains("steps[0] (with-table).enrich.table_key: field \"ident\" is not in the lookup table (its fields: id, name, score)"),
        "{e}"
    );
    let e = err(job(dir.path(), "nulls", "\n      fields: [rank]"));
    assert!(
        e.contains(
            "steps[0] (with-table).enrich.fields: field \"rank\" is not in the lookup table"
        ),
        "{e}"
    );
    let e = err(base.replace("score: int64}", "score: integer}"));
    assert!(
        e.contains("steps[0] (with-table).enrich.table.schema.score: unknown type"),
        "{e}"
    );
    // A filter after it sees the table's fields and their types.
    let e = err(base.replace("cents >= 0", "rank > 3"));
    assert!(e.contains("steps[1]"), "{e}");
}
