//! A window step on typed state (issue 18 step 4), after a file source that reads
//! straight into batches of its declared schema, gives the rows the row path gives
//! (rows read as JSON, a window on JSON rows), on random input: keys of two types with
//! nulls, values with nulls, out-of-order times, late rows (dropped, or to a
//! `late_output` as they came in), one or two files (each its own split, with its own
//! watermark), each window kind and allowed lateness.

use std::path::Path;

use brook_engine::JobConfig;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// One input row: key, value, time.
type Event = (Option<u8>, Option<i64>, i64);

fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.9, 0u8..4),
            prop::option::weighted(0.8, -50i64..50),
            -400i64..400,
        ),
        1..120,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (k, v, jitter))| (k, v, (i as i64 * 37 + jitter).max(0)))
            .collect()
    })
}

/// Which aggregates a window computes.
#[derive(Debug, Clone, Copy)]
enum Aggs {
    Inline,
    Many,
    Heap,
}

fn job(
    dir: &Path,
    window: &str,
    lateness: i64,
    key_type: &str,
    float_values: bool,
    late: bool,
    aggs: Aggs,
) -> String {
    let aggs = match aggs {
        // Values carried by the rows.
        Aggs::Inline => "c: count(), s: sum(v)",
        // More fields than a row carries: read from the rows.
        Aggs::Many => "c: count(), cv: count(v), s: sum(v), a: avg(v), lo: min(v), hi: max(v), f: first(v), l: last(v), t0: min(at), tl: last(at), okmax: max(ok), okf: first(ok)",
        // And accumulators that own strings or sets of values.
        Aggs::Heap => "c: count(), s: sum(v), l: last(v), tl: last(at), d: count_distinct(v), ds: count_distinct(s), dok: count_distinct(ok), smin: min(s), smax: max(s), sf: first(s), sl: last(s)",
    };
    let out = dir.join("out.jsonl");
    let (late_output, late_sink) = if late {
        (
            "\n    late_output: late".to_string(),
            format!(
                "\n  - {{name: late, connector: file, path: {}}}",
                dir.join("late.jsonl").display()
            ),
        )
    } else {
        (String::new(), String::new())
    };
    let input = dir.join("in");
    let schema = format!(
        "{{k: {key_type}, v: {}, ts: int64, at: timestamp, ok: bool, s: string}}",
        if float_values { "float64" } else { "int64" }
    );
    format!(
        r#"
name: typed
sources:
  - name: in
    connector: file
    path: {}
    format: jsonl
    schema: {schema}
    event_time: ts
    watermark: {{out_of_orderness: 100}}
steps:
  - key_by: [k]
  - name: w
    window: {window}
    allowed_lateness: {lateness}
    aggregate: {{{aggs}}}{late_output}
sinks:
  - {{name: out, connector: file, path: {}, input: w}}{late_sink}
"#,
        input.display(),
        out.display()
    )
}

/// The rows of the JSON-lines file `path` (gone afterwards), sorted.
fn take_rows(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            // One form per number (the row path writes a count as u64, the same value).
            let v: Value = serde_json::from_str(l).expect("json");
            v.to_string()
        })
        .collect();
    lines.sort();
    lines
}

/// The job's output rows and late rows (`late.jsonl` next to `out`), sorted; on
/// batches and typed state or (`rows`) on the row path from the source on.
fn run(yaml: &str, out: &Path, rows: bool) -> (Vec<String>, Vec<String>) {
    let mut valid = validate(parse(yaml).expect("parses")).expect("valid");
    assert!(valid.source_batches[0].is_some(), "read into batches");
    if rows {
        valid.source_batches[0] = None;
    }
    for s in &mut valid.steps {
        if let StepOp::Window(w) = &mut s.op {
            assert!(w.columns.is_some(), "planned on typed state");
            if rows {
                w.columns = None;
            }
        }
    }
    let built = build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
    built.env.execute("typed").expect("runs");
    (take_rows(out), take_rows(&out.with_file_name("late.jsonl")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 36, ..ProptestConfig::default() })]

    #[test]
    fn typed_windows_emit_what_the_row_path_emits(
        events in events(),
        window in prop::sample::select(vec![
            "{kind: tumbling, size: 1000}",
            "{kind: hopping, size: 1000, slide: 400}",
            "{kind: session, gap: 150}",
        ]),
        lateness in prop::sample::select(vec![0i64, 300]),
        string_keys in any::<bool>(),
        float_values in any::<bool>(),
        files in 1usize..=2,
        late in any::<bool>(),
        aggs in prop::sample::select(vec![Aggs::Inline, Aggs::Many, Aggs::Heap]),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let lines: Vec<String> = events
            .iter()
            .map(|(k, v, ts)| {
                // A timestamp (ms) and a bool that follow the value, null with it.
                let at = v.map(|v| 1_767_268_800_000 + v * 1000);
                let ok = v.map(|v| v % 3 == 0);
                // A string with its own nulls; "" among its values.
                let s = v.filter(|v| v % 5 != 0).map(|v| "s".repeat((v % 4).unsigned_abs() as usize));
                let k = match (k, string_keys) {
                    (None, _) => Value::Null,
                    (Some(k), true) => json!(format!("key-{k}")),
                    (Some(k), false) => json!(k),
                };
                let v = match (v, float_values) {
                    (None, _) => Value::Null,
                    (Some(v), true) => json!(*v as f64 / 4.0),
                    (Some(v), false) => json!(v),
                };
                format!("{}\n", json!({"k": k, "v": v, "ts": ts, "at": at, "ok": ok, "s": s}))
            })
            .collect();
        // Events go to the files in turn: each file is a split of its own.
        let input = dir.path().join("in");
        std::fs::create_dir(&input).expect("mkdir");
        for f in 0..files {
            let text: String = lines.iter().skip(f).step_by(files).cloned().collect();
            std::fs::write(input.join(format!("{f}.jsonl")), text).expect("write");
        }
        let key_type = if string_keys { "string" } else { "int64" };
        let yaml = job(dir.path(), window, lateness, key_type, float_values, late, aggs);
        let out = dir.path().join("out.jsonl");
        let (typed, typed_late) = run(&yaml, &out, false);
        let (rows, rows_late) = run(&yaml, &out, true);
        prop_assert!(!typed.is_empty());
        prop_assert_eq!(typed, rows);
        prop_assert_eq!(typed_late, rows_late);
    }
}

/// A window after a generator runs on batches from the source to a `blackhole`: no
/// vertex turns its rows into JSON.
#[test]
fn a_generated_window_job_stays_on_batches() {
    let yaml = r#"
name: w1
sources:
  - {name: events, connector: generator, count: 20000, keys: 100, event_time: ts, watermark: {out_of_orderness: 0}}
steps:
  - key_by: [key]
  - {name: w, window: {kind: tumbling, size: 1000}, aggregate: {count: count(), sum: sum(value)}}
  - {name: big, filter: "count > 5"}
sinks:
  - {name: out, connector: blackhole}
"#;
    let valid = validate(parse(yaml).expect("parses")).expect("valid");
    let built = build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
    let result = built.env.execute("w1").expect("runs");
    let names: Vec<&str> = result.vertices.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        !names.iter().any(|n| n.ends_with("-rows")),
        "no boundary to rows: {names:?}"
    );
    let written = result
        .vertices
        .iter()
        .find(|(n, _)| n == "out")
        .map(|(_, t)| t.records_in);
    // 20 windows of 1000 events over 100 keys: 10 per key and window.
    assert_eq!(written, Some(2000));
}

/// With the schema known, an aggregate of a field the input lacks, or `sum` of a string,
/// is an error before anything runs, naming the step and the aggregate.
#[test]
fn window_mistakes_are_plan_time_errors() {
    let yaml = |agg: &str| {
        format!(
            r#"
name: x
sources:
  - {{name: s, connector: log, topic: sales, schema: {{item: string, cents: int64, ts: int64}}, event_time: ts}}
steps:
  - key_by: [item]
  - {{name: w, window: {{kind: tumbling, size: 1s}}, aggregate: {{{agg}}}}}
sinks:
  - {{name: o, connector: stdout}}
"#
        )
    };
    for (agg, want) in [
        (
            "total: sum(nosuch)",
            "steps[1] (w).aggregate.total: sum(nosuch): unknown field `nosuch` (the input has item, cents, ts)",
        ),
        (
            "total: avg(item)",
            "steps[1] (w).aggregate.total: avg(item): `item` is Utf8, not a number",
        ),
    ] {
        let err = validate(parse(&yaml(agg)).expect("parses")).expect_err(agg);
        assert_eq!(err.to_string(), want);
    }
    // Aggregates that own strings or sets plan on typed state too.
    let v = validate(parse(&yaml("first: first(item), d: count_distinct(cents)")).expect("parses"))
        .expect("valid");
    assert!(v.steps.iter().any(
        |s| matches!(&s.op, StepOp::Window(w) if w.columns.as_ref().is_some_and(|c| c.reads_rows()))
    ));
}

/// Late rows of a typed window with a `late_output` leave as they came in, the rows the
/// row path's window sends there: a log topic of two partitions read into batches of
/// many rows, whose times run up to 960 ms out of order against a 100 ms bound, so
/// rows in the middle of a batch are late.
#[test]
fn late_rows_of_a_typed_window_are_the_row_paths() {
    use brook_log::{Log, LogOptions, ProducerRecord, TopicConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("open");
    let topic = log
        .create_topic("sales", 2, TopicConfig::default())
        .expect("topic");
    let records: Vec<ProducerRecord> = (0..40_000i64)
        .map(|i| {
            let ts = i * 10 - (i * 7919 % 97) * 10;
            let value = format!(
                "{{\"item\": \"i{}\", \"cents\": {}, \"ts\": {ts}}}",
                i % 5,
                i % 97
            );
            ProducerRecord::keyed(format!("k{}", i % 7), value).with_timestamp(ts)
        })
        .collect();
    // In chunks: each partition's reader gets runs of many rows per poll.
    for chunk in records.chunks(500) {
        topic.append(chunk.to_vec()).expect("append");
    }
    let out = dir.path().join("out.jsonl");
    let late = dir.path().join("late.jsonl");
    let yaml = format!(
        r#"
name: late
sources:
  - name: sales
    connector: log
    topic: sales
    schema: {{item: string, cents: int64, ts: int64}}
    event_time: ts
    watermark: {{out_of_orderness: 100, interval: 1ms}}
steps:
  - key_by: [item]
  - name: w
    window: {{kind: tumbling, size: 1000}}
    aggregate: {{n: count(), total: sum(cents)}}
    late_output: late
sinks:
  - {{name: out, connector: file, path: {}, input: w}}
  - {{name: late, connector: file, path: {}}}
"#,
        out.display(),
        late.display()
    );
    let run = |rows: bool| {
        let built = build_local(&yaml, &log, |v| {
            assert!(v
                .steps
                .iter()
                .any(|s| matches!(&s.op, StepOp::Window(w) if w.columns.is_some())));
            if rows {
                v.windows_on_rows();
            }
        });
        built.env.execute("late").expect("runs");
        (take_rows(&out), take_rows(&late))
    };
    let (typed, typed_late) = run(false);
    let (rows, rows_late) = run(true);
    assert!(!typed_late.is_empty(), "some rows are late");
    assert_eq!(typed, rows);
    assert_eq!(typed_late, rows_late);
}

/// A file whose records hold nested objects or arrays has no schema at plan time when
/// none is declared: its rows stay JSON rows, which keep those fields, and a window may
/// aggregate them (batches of the scalars alone would refuse it).
#[test]
fn nested_fields_keep_an_undeclared_file_on_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"ts\": 1, \"o\": {\"x\": 1}}\n{\"ts\": 2, \"o\": {\"x\": 1}}\n{\"ts\": 3, \"o\": {\"x\": 2}}\n",
    )
    .expect("write");
    let out = dir.path().join("out.jsonl");
    let yaml = format!(
        r#"
name: nested
sources:
  - {{name: in, connector: file, path: {}, event_time: ts, watermark: {{out_of_orderness: 0}}}}
steps:
  - {{name: w, window: {{kind: tumbling, size: 10000}}, aggregate: {{n: count(), d: count_distinct(o)}}}}
sinks:
  - {{name: out, connector: file, path: {}}}
"#,
        input.display(),
        out.display()
    );
    let valid = validate(parse(&yaml).expect("parses")).expect("valid");
    assert!(valid
        .steps
        .iter()
        .all(|s| !matches!(&s.op, StepOp::Window(w) if w.columns.is_some())));
    let built = build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
    built.env.execute("nested").expect("runs");
    assert_eq!(
        take_rows(&out),
        [r#"{"window_start":0,"window_end":10000,"n":3,"d":2}"#]
    );
}
