//! `brook verify` (docs/semantics.md §4a) through the real binary: every example job
//! (examples/jobs/, each run with checkpoints) keeps exactly-once over at least 20
//! SIGKILLs, a third of them after a completed checkpoint where the job runs long enough,
//! the user's outputs are left alone, an order-dependent job is said to be so, and an
//! at-least-once sink is caught with its duplicates.
//!
//! Kills: `BROOK_VERIFY_KILLS` (default 20); `BROOK_VERIFY_SEED` fixes the moments.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use brook_testkit::binary::{brook_command, run_brook, run_brook_ok, run_brook_with_input};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_brook"))
}

fn kills() -> String {
    std::env::var("BROOK_VERIFY_KILLS").unwrap_or_else(|_| "20".into())
}

/// `brook --data-dir DATA verify SPEC --kills K [--seed S] ARGS...`.
fn verify(data: &Path, spec: &Path, kills: &str, args: &[&str]) -> std::process::Command {
    let mut a = vec![
        "verify",
        spec.to_str().expect("UTF-8 path"),
        "--kills",
        kills,
    ];
    let seed = std::env::var("BROOK_VERIFY_SEED").ok();
    if let Some(s) = &seed {
        a.extend(["--seed", s]);
    }
    a.extend(args);
    brook_command(&bin(), data, &a)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The number N of "exactly-once held over N kills" in `out`.
fn kills_held(out: &str) -> u32 {
    let line = out
        .lines()
        .find(|l| l.starts_with("exactly-once held over "))
        .unwrap_or_else(|| panic!("no verdict in:\n{out}"));
    line["exactly-once held over ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"))
}

fn min_kills() -> u32 {
    kills().parse().expect("BROOK_VERIFY_KILLS is a number")
}

/// What the killed run went through, from its line "killed run: K kills (A after a
/// completed checkpoint), R restores from a checkpoint...".
#[derive(Debug)]
struct KilledRun {
    kills: u32,
    after_checkpoint: u32,
    restores: u32,
}

fn killed_run(out: &str) -> KilledRun {
    let line = out
        .lines()
        .find(|l| l.starts_with("killed run: "))
        .unwrap_or_else(|| panic!("no killed run in:\n{out}"));
    let numbers: Vec<u32> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    match numbers[..] {
        [kills, after_checkpoint, restores, ..] => KilledRun {
            kills,
            after_checkpoint,
            restores,
        },
        _ => panic!("not a killed run: {line:?}"),
    }
}

#[test]
fn crash_replay_keeps_exactly_once_over_the_kills_and_leaves_its_output_alone() {
    let dir = tempfile::tempdir().unwrap();
    let spec = root().join("examples/jobs/crash_replay.yaml");
    // The example's own output file (relative to the spec): verify writes elsewhere.
    let output = root().join("results/crash_replay/per_minute.jsonl");
    let before = std::fs::read(&output).ok();
    let out = run_brook_ok(&mut verify(&dir.path().join("data"), &spec, &kills(), &[]));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(kills_held(&stdout) >= min_kills(), "{stdout}");
    assert!(
        stdout.contains("sink out (file ") && stdout.contains("rows, as in the reference run"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("may depend on the order"),
        "a generator is in order:\n{stdout}"
    );
    assert_eq!(
        std::fs::read(&output).ok(),
        before,
        "{} changed",
        output.display()
    );
    // The data directory was only read (here it did not even exist).
    assert!(!dir.path().join("data").exists());
}

/// A CSV sink, gzip-compressed, at another parallelism on every restore: verify reads
/// the committed files as the rows they hold (the header of each file is not a row, a
/// `.gz` file is decompressed), so it finds exactly the rows of the JSON-lines run.
#[test]
fn a_gzipped_csv_sink_is_compared_by_its_rows_over_rescaled_restores() {
    let dir = tempfile::tempdir().unwrap();
    let spec = root().join("examples/jobs/crash_replay.yaml");
    let out = run_brook_ok(&mut verify(
        &dir.path().join("data"),
        &spec,
        &kills(),
        &["--rescale", "--set", "sinks.0.path=per_minute.csv.gz"],
    ));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(kills_held(&stdout) >= min_kills(), "{stdout}");
    assert!(
        stdout.contains("sink out (file ")
            && stdout.contains(": 600 rows, as in the reference run"),
        "{stdout}"
    );
}

/// Fills the topic `snack-sales` (3 partitions, keyed by student) of the log at `data`
/// with the example's 30 sales repeated 100 times, a day apart.
fn snack_sales(data: &Path) {
    run_brook_ok(&mut brook_command(
        &bin(),
        data,
        &["topic", "create", "snack-sales", "--partitions", "3"],
    ));
    let sales = std::fs::read_to_string(root().join("examples/data/snack_sales.jsonl")).unwrap();
    let mut lines = String::new();
    for day in 0..100i64 {
        for l in sales.lines() {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ts"] = (v["ts"].as_i64().unwrap() + day * 86_400_000).into();
            lines.push_str(&v.to_string());
            lines.push('\n');
        }
    }
    let out = run_brook_with_input(
        &mut brook_command(
            &bin(),
            data,
            &["produce", "snack-sales", "--key-field", "student"],
        ),
        lines.as_bytes(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn snack_sales_from_the_log_keeps_exactly_once_and_its_topic_is_only_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    snack_sales(&data);
    let topic = data.join("topics/snack-sales");
    let files = |d: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut v = Vec::new();
        for p in std::fs::read_dir(d).unwrap().flatten() {
            for f in std::fs::read_dir(p.path()).into_iter().flatten().flatten() {
                v.push((f.path(), std::fs::read(f.path()).unwrap_or_default()));
            }
        }
        v.sort();
        v
    };
    let before = files(&topic);
    let spec = root().join("examples/jobs/snack_sales_log.yaml");
    // A watermark after every row: one reader, so the output is fixed by the input.
    let out = run_brook_ok(&mut verify(
        &data,
        &spec,
        &kills(),
        // Checkpoints often enough that an attempt's first one is seldom the job's
        // last: the job reads its 3000 rows in a few of them.
        &[
            "--set",
            "sources.sales.watermark.interval=0",
            "--checkpoint-interval",
            "25ms",
        ],
    ));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(kills_held(&stdout) >= min_kills(), "{stdout}");
    // Every third attempt waits for a checkpoint and is killed within an interval
    // after it, so the next one restores it, however slowly the process starts.
    let run = killed_run(&stdout);
    assert!(
        run.after_checkpoint >= min_kills() / 4 && run.restores >= min_kills() / 4,
        "{run:?}\n{stdout}"
    );
    assert!(
        stdout.contains("sink out (stdout, through a file sink): 2500 rows"),
        "{stdout}"
    );
    assert!(!stdout.contains("may depend on the order"), "{stdout}");
    assert_eq!(files(&topic), before, "the input topic changed");
    for made in ["checkpoints", "state", "jobs"] {
        assert!(
            !data.join(made).exists(),
            "verify made {made} in the data directory"
        );
    }
}

#[test]
fn a_periodic_watermark_over_the_log_is_said_to_depend_on_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    snack_sales(&data);
    let spec = root().join("examples/jobs/snack_sales_log.yaml");
    let out = run_brook_ok(&mut verify(&data, &spec, "3", &[]));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("the output may depend on the order in which rows arrive")
            && stdout.contains("sources[0] (sales): watermarks every 200 ms"),
        "{stdout}"
    );
}

/// A job of its own with a stdout sink checked as printed: at-least-once, since rows
/// printed after the last checkpoint are printed again after a restore.
#[test]
fn an_at_least_once_sink_is_reported_with_its_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        r#"
name: at-least-once
sources:
  - { name: g, connector: generator, count: 3000, keys: 5, step_ms: 1000, rate: 1500, watermark: { out_of_orderness: 0s } }
steps:
  - key_by: [key]
  - { name: w, window: { kind: tumbling, size: 10s }, aggregate: { n: count(), total: sum(value) } }
sinks:
  - { name: out, connector: stdout }
"#,
    )
    .unwrap();
    let mut cmd = verify(
        &dir.path().join("data"),
        &spec,
        &kills(),
        &["--check-stdout-as-is"],
    );
    let out = run_brook(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("exactly-once violated: 1 sinks differ from the reference run"),
        "{stderr}"
    );
    assert!(
        stdout.contains("sink out (stdout, as printed): ") && stdout.contains("  duplicated: {"),
        "{stdout}"
    );
    assert!(stderr.contains("repeat with --seed "), "{stderr}");
}

/// The example jobs verified here, each with the set-up of its input (a log topic).
const EXAMPLES: &[&str] = &[
    "chocolate_milk",
    "crash_replay",
    "crash_replay_totals",
    "hot_key",
    "late_bus",
    "orders_payments",
    "play_sessions",
    "sale_classes",
    "sales_per_minute",
    "snack_sales_log",
];

#[test]
fn every_example_job_is_verified_here() {
    let mut found: Vec<String> = std::fs::read_dir(root().join("examples/jobs"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    found.sort();
    assert_eq!(
        found, EXAMPLES,
        "a new example job needs its verify test in tests/verify.rs"
    );
}

/// `brook verify` of `examples/jobs/NAME.yaml` on the data directory `data`: it holds
/// over at least the kills asked for (each run with checkpoints, every 100 ms unless
/// the example sets its own) and says whether the output depends on arrival order.
fn verify_example(name: &str, data: &Path, set: &[&str]) -> String {
    let spec = root().join(format!("examples/jobs/{name}.yaml"));
    let mut args = Vec::new();
    for s in set {
        args.extend(["--set", s]);
    }
    let out = run_brook_ok(&mut verify(data, &spec, &kills(), &args));
    let stdout = text(&out.stdout);
    eprintln!("{name}:\n{stdout}");
    assert!(kills_held(&stdout) >= min_kills(), "{name}:\n{stdout}");
    assert!(
        killed_run(&stdout).kills >= min_kills(),
        "{name}:\n{stdout}"
    );
    stdout
}

/// A file-sourced example holds over the kills; the order of its files' rows fixes its
/// output (one reader per file).
fn verify_file_example(name: &str, set: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let stdout = verify_example(name, &dir.path().join("data"), set);
    assert!(
        stdout.contains("rows, as in the reference run"),
        "{name}:\n{stdout}"
    );
}

#[test]
fn chocolate_milk_keeps_exactly_once_over_the_kills() {
    verify_file_example("chocolate_milk", &[]);
}

#[test]
fn crash_replay_totals_keeps_exactly_once_over_the_kills() {
    // It reads crash_replay's per-minute rows: 600 of that shape.
    let dir = tempfile::tempdir().unwrap();
    let per_minute = dir.path().join("per_minute.jsonl");
    let rows: String = (0..600)
        .map(|i| {
            let start = (i / 6) * 60_000;
            format!(
                "{{\"item\":\"item-{}\",\"window_start\":{start},\"window_end\":{},\"sales\":{},\"cents\":{}}}\n",
                i % 6,
                start + 60_000,
                i % 7 + 1,
                i * 13 % 500
            )
        })
        .collect();
    std::fs::write(&per_minute, rows).unwrap();
    let input = format!("sources.rows.path={}", per_minute.display());
    verify_file_example("crash_replay_totals", &[&input]);
}

#[test]
fn late_bus_keeps_exactly_once_over_the_kills() {
    verify_file_example("late_bus", &[]);
}

#[test]
fn orders_payments_keeps_exactly_once_over_the_kills() {
    verify_file_example("orders_payments", &[]);
}

/// Its join runs on batches (each source's schema is declared): the rows waiting in
/// the join's keyed state are restored at another parallelism after every kill.
#[test]
fn orders_payments_keeps_exactly_once_over_rescaled_restores() {
    let dir = tempfile::tempdir().unwrap();
    let spec = root().join("examples/jobs/orders_payments.yaml");
    let out = run_brook_ok(&mut verify(
        &dir.path().join("data"),
        &spec,
        &kills(),
        &["--rescale"],
    ));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(kills_held(&stdout) >= min_kills(), "{stdout}");
    // (How many orders are unpaid may depend on arrival order: a payment can be late
    // behind the orders' watermark; verify says so and compares with its reference.)
    assert!(
        stdout.contains("sink unpaid-out (file ")
            && stdout.contains("rows, as in the reference run"),
        "{stdout}"
    );
}

#[test]
fn play_sessions_keeps_exactly_once_over_the_kills() {
    verify_file_example("play_sessions", &[]);
}

#[test]
fn sale_classes_keeps_exactly_once_over_the_kills() {
    verify_file_example("sale_classes", &[]);
}

#[test]
fn sales_per_minute_keeps_exactly_once_over_the_kills() {
    verify_file_example("sales_per_minute", &[]);
}

#[test]
fn hot_key_from_the_log_keeps_exactly_once_over_the_kills() {
    hot_key_from_the_log(&[]);
}

/// The same with the source's schema declared: the log's records are read straight
/// into Arrow batches (docs/semantics.md §5a), their positions checkpointed as before.
#[test]
fn hot_key_read_into_batches_from_the_log_keeps_exactly_once_over_the_kills() {
    hot_key_from_the_log(&[
        "sources.sales.schema={sale: int64, student: string, item: string, price_cents: int64, ts: int64}",
    ]);
}

fn hot_key_from_the_log(set: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    run_brook_ok(&mut brook_command(
        &bin(),
        &data,
        &["topic", "create", "hot-sales", "--partitions", "4"],
    ));
    let sales = std::fs::read(root().join("examples/data/hot_key_sales.jsonl")).unwrap();
    let out = run_brook_with_input(
        &mut brook_command(
            &bin(),
            &data,
            &["produce", "hot-sales", "--key-field", "student"],
        ),
        &sales,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = verify_example("hot_key", &data, set);
    assert!(
        stdout.contains("sink one-phase (file ") && stdout.contains("sink two-phase (file "),
        "{stdout}"
    );
}
