//! Conformance with Apache Flink: each case in `tests/conformance/` (a copy of the
//! shared samples) and, when `BROOK_CONFORMANCE_DIR` names a folder, each case there too
//! runs as a YAML job through `brook run`; the main and late outputs must equal Flink's
//! (`NAME.flink.jsonl`). Rows may differ in order only within one watermark step. Each
//! case runs twice, the window on typed state (issue 18): with a `late_output` (whose
//! late rows leave as they came in) and without (main output only). The row path's
//! window gives the same main and late rows (`src/spec/typed_window_tests.rs`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use brook_testkit::binary::{command_line, expect_success, run_brook};
use serde_json::{json, Value};

fn cases() -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")];
    if let Ok(d) = std::env::var("BROOK_CONFORMANCE_DIR") {
        dirs.push(PathBuf::from(d));
    }
    let mut out = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".json") && !name.ends_with(".flink.json") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The YAML window of a case.
fn window_yaml(w: &Value) -> String {
    let offset = w
        .get("offset_ms")
        .and_then(Value::as_i64)
        .map(|o| format!(", offset: {o}"))
        .unwrap_or_default();
    match w["kind"].as_str().unwrap() {
        "tumbling" => format!("{{kind: tumbling, size: {}{offset}}}", w["size_ms"]),
        "hopping" | "sliding" => format!(
            "{{kind: hopping, size: {}, slide: {}{offset}}}",
            w["size_ms"], w["slide_ms"]
        ),
        "session" => format!("{{kind: session, gap: {}}}", w["gap_ms"]),
        k => panic!("unknown window kind {k}"),
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Checks that `got` is `want` with rows reordered only within runs of equal `step`.
fn same_up_to_step_order(case: &str, what: &str, got: &[Value], want: &[(Value, String)]) {
    let rows: Vec<String> = got.iter().map(Value::to_string).collect();
    assert_eq!(
        rows.len(),
        want.len(),
        "{case}: {what}: {} rows, Flink emitted {}\n got: {rows:#?}\nwant: {want:#?}",
        rows.len(),
        want.len()
    );
    let mut i = 0;
    while i < want.len() {
        let step = &want[i].1;
        let j = (i..want.len())
            .find(|&j| &want[j].1 != step)
            .unwrap_or(want.len());
        let mut a: Vec<&String> = rows[i..j].iter().collect();
        let mut b: Vec<String> = want[i..j].iter().map(|(v, _)| v.to_string()).collect();
        a.sort();
        b.sort();
        assert_eq!(
            a,
            b.iter().collect::<Vec<_>>(),
            "{case}: {what}: rows {i}..{j} (emitted at watermark {step}) differ\n got: {rows:#?}"
        );
        i = j;
    }
}

/// Runs one case; with `late`, with a late output (checked too).
fn run_case(path: &Path, late: bool) {
    let case = path.file_stem().unwrap().to_string_lossy().into_owned();
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let flink = path.with_file_name(format!("{case}.flink.jsonl"));
    let dir = tempfile::tempdir().unwrap();
    let events: String = spec["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{e}\n"))
        .collect();
    std::fs::write(dir.path().join("events.jsonl"), events).unwrap();
    assert_eq!(spec["aggregate"], "count_sum", "{case}: unknown aggregate");
    let yaml = format!(
        r#"
name: conformance
sources:
  - name: events
    connector: file
    path: events.jsonl
    event_time: ts
    watermark: {{ out_of_orderness: {}, interval: 0 }}
steps:
  - key_by: [key]
  - name: windows
    window: {}
    allowed_lateness: {}
    aggregate: {{ count: count(), sum: sum(value) }}
{}
sinks:
  - {{ name: main, connector: file, path: main.jsonl, input: windows }}
{}
"#,
        spec["out_of_orderness_ms"],
        window_yaml(&spec["window"]),
        spec.get("allowed_lateness_ms").cloned().unwrap_or(json!(0)),
        if late { "    late_output: late" } else { "" },
        if late {
            "  - { name: late, connector: file, path: late.jsonl }"
        } else {
            ""
        },
    );
    std::fs::write(dir.path().join("job.yaml"), &yaml).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_brook"));
    run.arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["run", "--quiet"])
        .arg(dir.path().join("job.yaml"));
    let out = run_brook(&mut run);
    expect_success(&format!("{case}: {}", command_line(&run)), &out);
    let mut main = Vec::new();
    let mut late_rows = Vec::new();
    for mut row in read_jsonl(&flink) {
        let obj = row.as_object_mut().unwrap();
        let stream = obj.remove("stream").unwrap();
        let step = obj
            .remove("watermark")
            .map(|w| w.to_string())
            .unwrap_or_default();
        // brook writes the key fields, the window, then the aggregates.
        let row: BTreeMap<String, Value> = obj.clone().into_iter().collect();
        let row = serde_json::to_value(row).unwrap();
        match stream.as_str() {
            Some("main") => main.push((row, step)),
            // Late records keep their arrival order.
            _ => {
                let n = late_rows.len().to_string();
                late_rows.push((row, n));
            }
        }
    }
    let canon = |v: Vec<Value>| -> Vec<Value> {
        v.into_iter()
            .map(|r| {
                let m: BTreeMap<String, Value> = serde_json::from_value(r).unwrap();
                serde_json::to_value(m).unwrap()
            })
            .collect()
    };
    let got_main = canon(read_jsonl(&dir.path().join("main.jsonl")));
    let got_late = canon(read_jsonl(&dir.path().join("late.jsonl")));
    let what = if late { "" } else { " (typed state)" };
    same_up_to_step_order(&case, &format!("main output{what}"), &got_main, &main);
    if late {
        same_up_to_step_order(&case, "late output", &got_late, &late_rows);
    }
}

#[test]
fn brook_matches_flink_on_every_conformance_case() {
    let cases = cases();
    assert!(cases.len() >= 2, "no conformance cases found");
    for c in cases {
        run_case(&c, true);
        run_case(&c, false);
    }
}
