//! The examples under `examples/` produce what the README says: the YAML jobs run with
//! the `brook` binary on their data, the scripts run in a temporary copy of `examples/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use brook_testkit::binary::run_brook_ok;
use serde_json::{json, Value};

const MIN: i64 = 60_000;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `brook run examples/jobs/<job>` with a data directory in `dir` and `--set` values.
fn run_job(dir: &Path, job: &str, set: &[String]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_brook"));
    c.arg("--data-dir")
        .arg(dir.join("data"))
        .arg("run")
        .arg(root().join("examples/jobs").join(job));
    for s in set {
        c.args(["--set", s]);
    }
    run_brook_ok(&mut c)
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn file_rows(path: &Path) -> Vec<Value> {
    json_lines(&std::fs::read_to_string(path).expect("the output file exists"))
}

/// Sorted by their text (rows fired by one watermark come in no fixed order).
fn sorted(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by_key(|r| r.to_string());
    v
}

/// Copies `examples/` into a temp dir and runs `examples/<script>` there with the test
/// build of `brook`; returns the dir (results land in its `results/`) and the output.
fn run_script(script: &str) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().expect("a temp dir");
    copy_dir(&root().join("examples"), &dir.path().join("examples"));
    let o = run_brook_ok(
        Command::new("bash")
            .arg(dir.path().join("examples").join(script))
            .env("BROOK", env!("CARGO_BIN_EXE_brook"))
            .env("BROOK_DATA_DIR", dir.path().join("data")),
    );
    (dir, o)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let path: PathBuf = e.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(e.file_name()));
        } else {
            std::fs::copy(&path, to.join(e.file_name())).expect("copy");
        }
    }
}

/// Example 1: the per-minute job over the log topic gives the rows of the same job over
/// the file, and the two groups have their own offsets and lag.
#[test]
fn snack_sales_groups_shows_windows_and_each_groups_lag() {
    let (dir, o) = run_script("snack_sales_groups.sh");
    let out = text(&o.stdout);
    let from_log = sorted(
        json_lines(&out)
            .into_iter()
            .filter(|r| r.get("window_start").is_some())
            .collect(),
    );
    let late = dir.path().join("late.jsonl");
    let file_job = run_job(
        dir.path(),
        "sales_per_minute.yaml",
        &[format!("sinks.late.path={}", late.display())],
    );
    let from_file = sorted(json_lines(&text(&file_job.stdout)));
    assert_eq!(from_log.len(), 25, "{out}");
    assert_eq!(from_log, from_file);
    let sales: i64 = from_log
        .iter()
        .map(|r| r["sales"].as_i64().expect("sales"))
        .sum();
    assert_eq!(sales, 30);

    // `brook group describe G`: per partition TOPIC PARTITION COMMITTED END STABLE LAG.
    let lag = |group: &str| -> (i64, i64) {
        let section = out
            .split(&format!("$ brook group describe {group}\n"))
            .nth(1)
            .expect("the group is described");
        section
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("snack-sales"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let n = |i: usize| f[i].parse::<i64>().unwrap_or(0);
                (n(2), n(5))
            })
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    assert_eq!(lag("billing"), (30, 0), "{out}");
    assert_eq!(lag("analytics"), (5, 25), "{out}");
}

/// Example 2: only the chocolate-milk sales, in dollars.
#[test]
fn chocolate_milk_keeps_only_chocolate_milk() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let o = run_job(dir.path(), "chocolate_milk.yaml", &[]);
    let mut rows: Vec<(String, String, f64)> = json_lines(&text(&o.stdout))
        .iter()
        .map(|r| {
            (
                r["student"].as_str().expect("student").to_string(),
                r["item"].as_str().expect("item").to_string(),
                r["dollars"].as_f64().expect("dollars"),
            )
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        rows,
        vec![
            ("ivy".to_string(), "chocolate milk".to_string(), 1.2),
            ("theo".to_string(), "chocolate milk".to_string(), 1.2),
        ]
    );
}

/// Example 5: sessions per student with a 10-minute gap; kai's late game joins two of
/// his sessions.
#[test]
fn play_sessions_merge_and_split_by_the_gap() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let o = run_job(dir.path(), "play_sessions.yaml", &[]);
    let t = 1_767_607_200_000; // 2026-01-05 10:00 UTC
    let s = |student: &str, from: i64, to: i64, games: i64, kinds: i64, played: i64| {
        json!({"student": student, "window_start": t + from * MIN, "window_end": t + to * MIN,
               "games": games, "kinds": kinds, "played_min": played})
    };
    assert_eq!(
        sorted(json_lines(&text(&o.stdout))),
        sorted(vec![
            s("ava", 0, 17, 3, 2, 7),
            s("ava", 30, 45, 2, 1, 5),
            s("kai", 1, 29, 3, 2, 18),
            s("leo", 2, 39, 4, 2, 27),
            s("mia", 5, 15, 1, 1, 0),
            s("mia", 41, 51, 1, 1, 0),
        ])
    );
    // With the watermark 5 minutes behind, kai's first session has fired when his game
    // of 10:10 comes: it joins only the session of 10:19.
    let o = run_job(
        dir.path(),
        "play_sessions.yaml",
        &["sources.games.watermark.out_of_orderness=5m".to_string()],
    );
    let kai: Vec<Value> = json_lines(&text(&o.stdout))
        .into_iter()
        .filter(|r| r["student"] == "kai")
        .collect();
    assert_eq!(
        sorted(kai),
        sorted(vec![s("kai", 1, 11, 1, 1, 0), s("kai", 10, 29, 2, 2, 9)])
    );
}

/// Example 6: the bus's sales are late: all six go to the late file from the window
/// without lateness; with an hour of lateness four update two results and two are
/// dropped.
#[test]
fn late_bus_sales_go_to_the_side_output_or_update_results() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = |name: &str| dir.path().join(name);
    let o = run_job(
        dir.path(),
        "late_bus.yaml",
        &[
            format!("sinks.on-time-out.path={}", out("on_time.jsonl").display()),
            format!("sinks.late-sales.path={}", out("late.jsonl").display()),
            format!("sinks.lenient-out.path={}", out("lenient.jsonl").display()),
        ],
    );
    let nine = 1_767_690_000_000; // 2026-01-06 09:00 UTC
    let w = |from: i64, sales: i64, cents: i64, bus: i64| {
        json!({"window_start": nine + from * MIN, "window_end": nine + (from + 15) * MIN,
               "sales": sales, "cents": cents, "bus_sales": bus})
    };
    let on_time = vec![
        w(0, 4, 335, 0),
        w(15, 4, 335, 0),
        w(30, 4, 335, 0),
        w(45, 3, 245, 0),
        w(60, 4, 335, 0),
        w(75, 4, 335, 0),
        w(90, 3, 215, 0),
    ];
    assert_eq!(file_rows(&out("on_time.jsonl")), on_time);
    let late: Vec<String> = file_rows(&out("late.jsonl"))
        .iter()
        .map(|r| format!("{} {}", r["device"], r["at"]))
        .collect();
    assert_eq!(
        late,
        ["09:05", "09:11", "09:17", "09:24", "09:31", "09:38"]
            .map(|t| format!("\"bus-phone\" \"2026-01-06T{t}:00Z\""))
    );
    // In the order they were written: five on time, then the updates as the bus's
    // sales arrive (09:05 and 09:11 are past the lateness), then the last two.
    assert_eq!(
        file_rows(&out("lenient.jsonl")),
        vec![
            w(0, 4, 335, 0),
            w(15, 4, 335, 0),
            w(30, 4, 335, 0),
            w(45, 3, 245, 0),
            w(60, 4, 335, 0),
            w(15, 5, 425, 1),
            w(15, 6, 475, 2),
            w(30, 5, 410, 1),
            w(30, 6, 530, 2),
            w(75, 4, 335, 0),
            w(90, 3, 215, 0),
        ]
    );
    // 6 late for `on-time` (to its late output), 2 dropped by `lenient`.
    let err = text(&o.stderr);
    assert!(err.contains("late                       8"), "{err}");
}

/// Example 8: killed and restored, the job commits the rows of the uninterrupted run.
#[test]
fn crash_replay_restores_the_same_totals() {
    let (dir, o) = run_script("crash_replay.sh");
    let out = text(&o.stdout);
    assert!(out.contains("killed brook run"), "{out}");
    assert!(
        out.contains("same totals, and the same 600 per-minute rows"),
        "{out}"
    );
    assert!(
        text(&o.stderr).contains("restoring checkpoint"),
        "{}",
        text(&o.stderr)
    );
    let results = dir.path().join("results/crash_replay");
    for file in ["clean_totals.jsonl", "restored_totals.jsonl"] {
        let totals = file_rows(&results.join(file));
        assert_eq!(totals.len(), 6, "one row per item");
        let sum = |f: &str| -> i64 { totals.iter().map(|r| r[f].as_i64().expect(f)).sum() };
        // Sale i costs (i mod 100) + 40 cents: 60 times 0..100, plus 40 each.
        assert_eq!(
            (sum("sales"), sum("cents"), sum("minutes")),
            (6000, 60 * 4950 + 6000 * 40, 600)
        );
    }
}

/// The skew figure of an operator in the summary's "records in per subtask" table.
fn skew(summary: &str, operator: &str) -> f64 {
    let table = summary
        .split("records in per subtask")
        .nth(1)
        .expect("the per-subtask table");
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(operator))
        .unwrap_or_else(|| panic!("no line for {operator}: {summary}"));
    line.rsplit("skew ")
        .next()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no skew in {line:?}"))
}

/// Example 9: theo's sales load one partition and one window subtask; salting spreads
/// them, with the same results.
#[test]
fn hot_key_shows_the_skew_and_the_two_phase_fix() {
    let (_dir, o) = run_script("hot_key.sh");
    let out = text(&o.stdout);
    let err = text(&o.stderr);
    assert!(
        out.contains("one-phase and two-phase rows are the same"),
        "{out}"
    );
    let partition_skew: f64 = out
        .split("partition skew (max / mean): ")
        .nth(1)
        .and_then(|s| s.lines().next())
        .and_then(|s| s.parse().ok())
        .expect("the partition skew");
    // theo's 400 of 500 sales are in one partition of four: at least 3.2.
    assert!(partition_skew >= 3.2, "{out}");
    let one_phase = skew(&err, "per-student");
    let salted = skew(&err, "partial");
    eprintln!("skew: partitions {partition_skew}, one-phase {one_phase}, salted {salted}");
    assert!(one_phase >= 3.2, "{err}");
    assert!(salted < 1.5, "{err}");
}
