//! `brook run`: YAML jobs end to end through the binary.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use brook_testkit::binary::{
    command_line, expect_failure, expect_success, run_brook, run_brook_err, run_brook_ok,
};
use brook_testkit::metrics::{free_addr, metric, scrape_metrics};
use brook_testkit::process::{wait_bounded, wait_for, KillOnDrop};

/// `brook --data-dir DIR/data ARGS`.
fn brook_command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_brook"));
    c.arg("--data-dir").arg(dir.join("data")).args(args);
    c
}

fn brook(dir: &Path, args: &[&str]) -> Output {
    run_brook(&mut brook_command(dir, args))
}

/// [`brook`], which must succeed.
fn brook_ok(dir: &Path, args: &[&str]) -> Output {
    run_brook_ok(&mut brook_command(dir, args))
}

/// [`brook`], which must fail: its stderr.
fn brook_err(dir: &Path, args: &[&str]) -> String {
    run_brook_err(&mut brook_command(dir, args))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Sorted by their text with object keys in order, whatever order the fields have.
fn sorted(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by_key(|x| match x {
        Value::Object(m) => {
            let m: std::collections::BTreeMap<_, _> = m.iter().collect();
            serde_json::to_string(&m).unwrap()
        }
        other => other.to_string(),
    });
    v
}

const SALES: &str = r#"{"student":"mia","item":"chocolate milk","price_cents":120}
{"student":"leo","item":"apple","price_cents":50}
not json at all
{"student":"ava","item":"chocolate milk","price_cents":130}
{"student":"mia","item":"chocolate milk"}
"#;

#[test]
fn a_yaml_job_filters_maps_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    // A price that is not an int64, as the declared schema says.
    let sales = format!(
        "{SALES}{}\n",
        r#"{"student":"zoe","item":"chocolate milk","price_cents":"free"}"#
    );
    std::fs::write(dir.path().join("sales.jsonl"), sales).unwrap();
    let spec = r#"
name: milk
dead_letter: dead.jsonl
sources:
  - name: sales
    connector: file
    path: sales.jsonl
    schema: {student: string, item: string, price_cents: int64}
steps:
  - filter: "item = 'chocolate milk'"
  - select: {who: student, dollars: "price_cents / 100.0"}
sinks:
  - {name: out, connector: file, path: out.jsonl}
"#;
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let o = brook_ok(
        dir.path(),
        &["run", dir.path().join("job.yaml").to_str().unwrap()],
    );
    let out = sorted(lines(&dir.path().join("out.jsonl")));
    assert_eq!(
        out,
        sorted(vec![
            serde_json::json!({"who": "mia", "dollars": 1.2}),
            serde_json::json!({"who": "ava", "dollars": 1.3}),
            // A missing field is null (SQL), not an error.
            serde_json::json!({"who": "mia", "dollars": null})
        ])
    );
    // The line that is not JSON and the one whose price does not fit the declared
    // schema (naming the field) are the source's dead letters: it reads straight into
    // batches of the schema.
    let dead = lines(&dir.path().join("dead.jsonl"));
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().any(
        |d| d["position"].as_str().unwrap().ends_with("sales.jsonl:3")
            && d["raw"] == "not json at all"
    ));
    assert!(dead.iter().any(|d| d["reason"]
        .as_str()
        .unwrap()
        .contains("field `price_cents`")
        && d["raw"].as_str().unwrap().contains("free")));
    let err = stderr(&o);
    assert!(err.contains("dead-lettered              2"), "{err}");
    // Records read are the ones that reached the job (as for a line that is not JSON).
    assert!(
        err.contains("read                       4 records"),
        "{err}"
    );
}

#[test]
fn parallelism_does_not_change_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"
name: gen
sources:
  - {name: events, connector: generator, count: 20000, keys: 50}
steps:
  - filter: 'value % 3 = 0'
  - map: {double: "value * 2"}
  - key_by: [key]
  - select: {key: key, double: double}
sinks:
  - {name: out, connector: file, path: out.jsonl, parallelism: 1}
"#;
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let mut results = Vec::new();
    for p in ["1", "2", "4"] {
        brook_ok(
            dir.path(),
            &[
                "run",
                dir.path().join("job.yaml").to_str().unwrap(),
                "--parallelism",
                p,
                "--quiet",
            ],
        );
        results.push(sorted(lines(&dir.path().join("out.jsonl"))));
    }
    assert_eq!(
        results[0].len(),
        (0..20000).filter(|i| (i % 100) % 3 == 0).count()
    );
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
}

#[test]
fn invalid_specs_fail_before_running_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {filter: 'value >'}\nsinks:\n  - {name: o, connector: stdout}\n";
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let o = brook(
        dir.path(),
        &["run", dir.path().join("job.yaml").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("invalid job spec: steps[0] (step-1).filter: cannot parse `value >`"),
        "{}",
        stderr(&o)
    );
    let o = brook(
        dir.path(),
        &[
            "run",
            dir.path().join("job.yaml").to_str().unwrap(),
            "--set",
            "steps.0.filter=value > 1",
            "--set",
            "sinks.o.connector=carrier-pigeon",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown variant `carrier-pigeon`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_job_reads_and_writes_log_topics() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["sales", "milk"] {
        assert!(
            brook(dir.path(), &["topic", "create", t, "--partitions", "3"])
                .status
                .success()
        );
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["produce", "sales", "--key-field", "student"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SALES.replace("not json at all\n", "").as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let spec = r#"
name: log-to-log
sources:
  - {name: sales, connector: log, topic: sales}
steps:
  - filter: "item = 'chocolate milk' AND price_cents IS NOT NULL"
sinks:
  - {name: milk, connector: log, topic: milk, key_field: student}
"#;
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    brook_ok(
        dir.path(),
        &[
            "run",
            dir.path().join("job.yaml").to_str().unwrap(),
            "--parallelism",
            "2",
        ],
    );
    let o = brook(dir.path(), &["consume", "milk", "--from-beginning"]);
    let got: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut students: Vec<&str> = got.iter().map(|r| r["key"].as_str().unwrap()).collect();
    students.sort();
    assert_eq!(students, vec!["ava", "mia"]);
    for r in &got {
        let expected =
            brook::log::partitioner::partition_for_key(r["key"].as_str().unwrap().as_bytes(), 3);
        assert_eq!(r["partition"], expected, "{r}");
    }
}

#[test]
fn metrics_are_served_while_a_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "name: slow\nsources:\n  - {name: g, connector: generator, count: 400, rate: 200}\nsinks:\n  - {name: o, connector: file, path: out.jsonl}\n";
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_brook"))
        .args([
            "run",
            dir.path().join("job.yaml").to_str().unwrap(),
            "--metrics-addr",
            &addr,
            "--quiet",
        ])
        .spawn()
        .unwrap();
    let mut body = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(mut s) = TcpStream::connect(&addr) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            s.read_to_string(&mut body).unwrap();
            break;
        }
    }
    assert!(child.wait().unwrap().success());
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("brook_records_out_total{operator=\"g\",subtask=\"0\"}"),
        "{body}"
    );
    // No watermark yet is no sample, not i64::MIN (-9223372036854776000 as a float).
    assert!(
        !body.contains("-9223372036854776") && !body.contains("-9223372036854775808"),
        "{body}"
    );
}

/// `brook run job.yaml | head -1`: a closed standard output ends the run quietly, with
/// status 0, as any command line program whose reader went away; with checkpoints too
/// (the checkpoint in flight when it ends is no warning).
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let plain = "name: many\nsources:\n  - {name: g, connector: generator, count: 100000000}\nsinks:\n  - {name: o, connector: stdout}\n";
    let checkpointed = "name: many\ncheckpoint_interval: 50ms\nsources:\n  - {name: g, connector: generator, count: 100000000, keys: 10, watermark: {out_of_orderness: 0s}}\nsteps:\n  - key_by: [key]\n  - {window: {kind: tumbling, size: 1s}, aggregate: {n: count()}}\nsinks:\n  - {name: o, connector: stdout}\n";
    for spec in [plain, checkpointed] {
        run_until_stdout_closes(spec);
    }
}

fn run_until_stdout_closes(spec: &str) {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("run")
        .arg(dir.path().join("job.yaml"))
        .env_remove("BROOK_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here, as `head -1` exits after its line.
    assert!(first.starts_with('{'), "{first}");
    let out = child.wait_with_output().unwrap();
    expect_success("brook run | head -1", &out);
    let err = stderr(&out);
    assert!(
        !err.to_lowercase().contains("error") && !err.contains("pipe") && !err.contains("WARN"),
        "{err}"
    );
}

/// Writes job `slow` (300 generated rows at 200 a second, checkpoints every 100 ms, a
/// file sink `out.jsonl`) into `dir` and starts a `brook run` of it on `dir/data`:
/// the spec's path and the running child.
fn start_slow_job(dir: &Path) -> (std::path::PathBuf, std::process::Child) {
    let spec = "name: slow\ncheckpoint_interval: 100ms\nsources:\n  - {name: g, connector: generator, count: 300, rate: 200}\nsinks:\n  - {name: o, connector: file, path: out.jsonl}\n";
    let job = dir.join("job.yaml");
    std::fs::write(&job, spec).unwrap();
    let first = Command::new(env!("CARGO_BIN_EXE_brook"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["run", "--quiet"])
        .arg(&job)
        .spawn()
        .unwrap();
    (job, first)
}

/// One `brook run` of a job per data directory: a second is refused at once naming the
/// first's process, and the first finishes with all its output (two used to commit
/// over each other: "cannot commit ... the pending part ... is gone").
#[test]
fn a_second_run_of_a_running_job_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (job, mut first) = start_slow_job(dir.path());
    // It holds the job's lock from its start (before it reads or writes anything).
    let lock = dir.path().join("data/jobs/slow.lock");
    let pid = first.id().to_string();
    for i in 0.. {
        if std::fs::read_to_string(&lock).is_ok_and(|t| t.trim() == pid) {
            break;
        }
        assert!(i < 400, "the first run did not take {}", lock.display());
        std::thread::sleep(Duration::from_millis(25));
    }
    let second = brook(dir.path(), &["run", "--quiet", job.to_str().unwrap()]);
    let err = stderr(&second);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.contains("job slow is already running") && err.contains(&format!("process {pid}")),
        "{err}"
    );
    assert!(first.wait().unwrap().success());
    let out = lines(&dir.path().join("out.jsonl"));
    assert_eq!(out.len(), 300);
    let distinct: std::collections::BTreeSet<String> = out.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), 300, "every record once");
    // Once it ended, the job runs again.
    brook_ok(dir.path(), &["run", "--quiet", job.to_str().unwrap()]);
}

/// Two `brook run`s under different names (what the refusal above suggests) or on
/// different data directories must not write one output file: the second is refused,
/// naming the first's process and the file, and the first finishes with all its rows
/// (the second used to cut the file back on each commit, and the first failed with
/// "the file has N bytes, fewer than the M committed before it").
#[test]
fn a_second_run_writing_a_running_jobs_output_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (job, mut first) = start_slow_job(dir.path());
    // It takes its locks before it writes anything: once its first checkpoint has
    // committed rows, it holds them.
    let out = dir.path().join("out.jsonl");
    let pid = first.id().to_string();
    for i in 0.. {
        if std::fs::metadata(&out).is_ok_and(|m| m.len() > 0) {
            break;
        }
        assert!(i < 400, "the first run did not commit to {}", out.display());
        std::thread::sleep(Duration::from_millis(25));
    }
    let job = job.to_str().unwrap();
    let renamed = brook(dir.path(), &["run", "--quiet", job, "--set", "name=other"]);
    let other_dir = brook(&dir.path().join("elsewhere"), &["run", "--quiet", job]);
    for second in [renamed, other_dir] {
        let err = stderr(&second);
        assert_eq!(second.status.code(), Some(1), "{err}");
        assert!(
            err.contains("sinks[0] (o).path")
                && err.contains("is being written by another run")
                && err.contains(&format!("process {pid}"))
                && err.contains("--set sinks.o.path="),
            "{err}"
        );
    }
    assert!(first.wait().unwrap().success());
    let out = lines(&out);
    let distinct: std::collections::BTreeSet<String> = out.iter().map(Value::to_string).collect();
    assert_eq!((out.len(), distinct.len()), (300, 300), "every record once");
}

/// Keyed state in RocksDB (the default), in memory by the spec, and in memory by the
/// command line: the same windows; RocksDB's working directory is gone afterwards.
#[test]
fn state_backends_give_the_same_windows_and_rocksdb_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let sales: String = (0..300)
        .map(|i| {
            format!(
                "{{\"student\":\"s{}\",\"item\":\"i{}\",\"price_cents\":{},\"ts\":{}}}\n",
                i % 7,
                i % 5,
                i % 13,
                i * 1_000
            )
        })
        .collect();
    std::fs::write(dir.path().join("sales.jsonl"), sales).unwrap();
    let spec = |backend: &str, out: &str| {
        format!(
            r#"
name: per-minute
{backend}
sources:
  - {{name: sales, connector: file, path: sales.jsonl, event_time: ts, watermark: {{out_of_orderness: 1s}}}}
steps:
  - key_by: [item]
  - window: {{kind: tumbling, size: 1m}}
    aggregate: {{n: count(), cents: sum(price_cents), students: count_distinct(student)}}
sinks:
  - {{name: out, connector: file, path: {out}}}
"#
        )
    };
    let run = |name: &str, backend: &str, args: &[&str]| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, spec(backend, &format!("{name}.jsonl"))).unwrap();
        let mut all = vec!["run", path.to_str().unwrap(), "--quiet"];
        all.extend_from_slice(args);
        brook_ok(dir.path(), &all);
        sorted(lines(&dir.path().join(format!("{name}.jsonl"))))
    };
    let rocks = run("rocks", "", &["--checkpoint-interval", "50ms"]);
    assert_eq!(rocks.len(), 5 * 5, "5 items over 5 minutes");
    let state = dir.path().join("data/state/per-minute");
    assert!(state.is_dir());
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "run dir removed"
    );
    assert_eq!(run("spec", "state_backend: memory", &[]), rocks);
    assert_eq!(
        run(
            "cli",
            "state_backend: rocksdb",
            &["--state-backend", "memory"]
        ),
        rocks
    );
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, spec("state_backend: disk", "bad.jsonl")).unwrap();
    let err = brook_err(dir.path(), &["run", path.to_str().unwrap()]);
    assert!(err.contains("state_backend"), "{err}");
}

/// A YAML interval join (left outer): each order with its payment within 15 minutes,
/// unpaid orders alone; and a temporal join of the orders with the price list valid at
/// their time.
#[test]
fn yaml_joins_pair_orders_with_payments_and_prices() {
    let dir = tempfile::tempdir().unwrap();
    let min = 60_000;
    let orders: String = (0..6)
        .map(|i| {
            format!(
                "{{\"order\":{i},\"item\":\"i{}\",\"ts\":{}}}\n",
                i % 2,
                i * 10 * min
            )
        })
        .collect();
    // Orders 0 and 3 are paid in time, 1 too late (20 min), the others never.
    let payments = format!(
        "{{\"order\":0,\"amount\":5,\"ts\":{}}}\n{{\"order\":1,\"amount\":7,\"ts\":{}}}\n{{\"order\":3,\"amount\":9,\"ts\":{}}}\n",
        2 * min,
        30 * min,
        35 * min
    );
    // Item i0 costs 100 until minute 25, then 120; i1 costs 50 from the start.
    let prices = format!(
        "{{\"item\":\"i0\",\"price\":100,\"ts\":0}}\n{{\"item\":\"i1\",\"price\":50,\"ts\":0}}\n{{\"item\":\"i0\",\"price\":120,\"ts\":{}}}\n",
        25 * min
    );
    for (f, text) in [
        ("orders", orders),
        ("payments", payments),
        ("prices", prices),
    ] {
        std::fs::write(dir.path().join(format!("{f}.jsonl")), text).unwrap();
    }
    let spec = r#"
name: joins
sources:
  - {name: orders, connector: file, path: orders.jsonl, event_time: ts, watermark: {out_of_orderness: 0s}}
  - {name: payments, connector: file, path: payments.jsonl, event_time: ts, watermark: {out_of_orderness: 0s}}
  - {name: prices, connector: file, path: prices.jsonl, event_time: ts, watermark: {out_of_orderness: 0s}}
steps:
  - name: paid
    join: {kind: interval, left: orders, right: payments, on: [order], between: [0s, 15m], type: left_outer}
  - name: priced
    join: {kind: temporal, left: orders, right: prices, on: [item]}
sinks:
  - {name: paid-out, connector: file, path: paid.jsonl, input: paid}
  - {name: priced-out, connector: file, path: priced.jsonl, input: priced}
"#;
    std::fs::write(dir.path().join("joins.yaml"), spec).unwrap();
    brook_ok(
        dir.path(),
        &[
            "run",
            dir.path().join("joins.yaml").to_str().unwrap(),
            "--quiet",
        ],
    );
    let min = 60_000i64;
    let paid = sorted(lines(&dir.path().join("paid.jsonl")));
    let want: Vec<Value> = (0..6i64)
        .map(|i| {
            let mut row =
                serde_json::json!({"order": i, "item": format!("i{}", i % 2), "ts": i * 10 * min});
            let pay = match i {
                0 => Some((5, 2 * min)),
                3 => Some((9, 35 * min)),
                _ => None,
            };
            if let Some((amount, ts)) = pay {
                row["amount"] = amount.into();
                row["payments_ts"] = ts.into();
            }
            row
        })
        .collect();
    assert_eq!(paid, sorted(want));
    let priced = sorted(lines(&dir.path().join("priced.jsonl")));
    let prices: Vec<(i64, i64)> = priced
        .iter()
        .map(|r| (r["order"].as_i64().unwrap(), r["price"].as_i64().unwrap()))
        .collect();
    let mut prices = prices;
    prices.sort_unstable();
    // Orders at 0, 10, ..., 50 minutes; i0 (even orders) 100 before minute 25.
    assert_eq!(
        prices,
        vec![(0, 100), (1, 50), (2, 100), (3, 50), (4, 120), (5, 50)]
    );

    // A join without its interval names the field.
    let bad = spec.replace(", between: [0s, 15m]", "");
    std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
    let err = brook_err(
        dir.path(),
        &["run", dir.path().join("bad.yaml").to_str().unwrap()],
    );
    assert!(err.contains("join.between"), "{err}");
}

/// `enrich` from a CSV file: the class of each sale's student; a student missing from
/// the list gets nulls (default), is dropped, or goes to the dead letters.
#[test]
fn yaml_enrich_adds_the_lookup_rows_fields() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sales.jsonl"),
        "{\"student\":\"mia\",\"cents\":120}\n{\"student\":\"zoe\",\"cents\":50}\n{\"student\":\"leo\",\"cents\":90}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("students.csv"),
        "name,class,teacher\nmia,3a,kim\nleo,4b,ray\n",
    )
    .unwrap();
    let run = |missing: &str| {
        let spec = format!(
            r#"
name: classes
dead_letter: dead.jsonl
sources:
  - {{name: sales, connector: file, path: sales.jsonl}}
steps:
  - enrich: {{table: {{connector: file, path: students.csv}}, on: [student], table_key: [name], fields: [class]{missing}}}
sinks:
  - {{name: out, connector: file, path: out.jsonl}}
"#
        );
        std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
        let _ = std::fs::remove_file(dir.path().join("dead.jsonl"));
        brook_ok(
            dir.path(),
            &[
                "run",
                dir.path().join("job.yaml").to_str().unwrap(),
                "--quiet",
            ],
        );
        sorted(lines(&dir.path().join("out.jsonl")))
    };
    let mia = serde_json::json!({"student": "mia", "cents": 120, "class": "3a"});
    let leo = serde_json::json!({"student": "leo", "cents": 90, "class": "4b"});
    let zoe = serde_json::json!({"student": "zoe", "cents": 50, "class": null});
    assert_eq!(run(""), sorted(vec![mia.clone(), leo.clone(), zoe]));
    assert_eq!(
        run(", missing: drop"),
        sorted(vec![mia.clone(), leo.clone()])
    );
    assert_eq!(run(", missing: bad_record"), sorted(vec![mia, leo]));
    let dead = lines(&dir.path().join("dead.jsonl"));
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]["reason"].as_str().unwrap().contains("zoe"),
        "{dead:?}"
    );
}

/// `enrich` from a log topic while the job runs: an update of the table takes effect
/// for sales read after it, not for those before.
#[test]
fn a_log_lookup_table_follows_its_topic() {
    use brook::log::{Log, LogOptions, ProducerRecord, TopicConfig};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("data"), LogOptions::default()).unwrap();
    for t in ["sales", "classes", "out"] {
        log.create_topic(t, 1, TopicConfig::default()).unwrap();
    }
    let put = |topic: &str, row: serde_json::Value| {
        log.topic(topic)
            .unwrap()
            .partition(0)
            .unwrap()
            .append(&[ProducerRecord::new(serde_json::to_vec(&row).unwrap())])
            .unwrap();
    };
    put(
        "classes",
        serde_json::json!({"student": "mia", "class": "3a"}),
    );
    let spec = brook::spec::parse(
        r#"
name: follow
sources:
  - {name: sales, connector: log, topic: sales, bounded: false}
steps:
  - enrich: {table: {connector: log, topic: classes}, on: [student]}
sinks:
  - {name: out, connector: log, topic: out}
"#,
    )
    .unwrap();
    let valid = brook::spec::validate(spec).unwrap();
    let built =
        brook::spec::build(&valid, brook::engine::JobConfig::default(), Some(&log)).unwrap();
    let job = built.env.start("follow").unwrap();
    let out = log.topic("out").unwrap().partition(0).unwrap();
    let wait_for = |n: u64| {
        // Up to 30 s.
        for _ in 0..3000 {
            if out.end_offset(brook::log::IsolationLevel::ReadCommitted) >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no output");
    };
    put("sales", serde_json::json!({"student": "mia", "sale": 1}));
    wait_for(1);
    put(
        "classes",
        serde_json::json!({"student": "mia", "class": "4b"}),
    );
    put("sales", serde_json::json!({"student": "mia", "sale": 2}));
    wait_for(2);
    job.cancel();
    let _ = job.join();
    let mut rows = Vec::new();
    out.read_with(0, brook::log::ReadLimit::records(10), |r| {
        rows.push(serde_json::from_slice::<Value>(r.value).unwrap())
    })
    .unwrap();
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"student": "mia", "sale": 1, "class": "3a"}),
            serde_json::json!({"student": "mia", "sale": 2, "class": "4b"}),
        ]
    );
}

/// A small HTTP service for `async_enrich`: `GET /students/{name}` answers
/// `{"class": ...}` after a delay that differs per name (so answers come back out of
/// order), 404 for `zoe`, and 2 s late for `slow`. Returns its address and a request
/// counter.
fn student_service() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let hits = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&hits);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/students/{name}",
                axum::routing::get(
                    move |axum::extract::Path(name): axum::extract::Path<String>| {
                        let h = Arc::clone(&h);
                        async move {
                            h.fetch_add(1, Ordering::SeqCst);
                            let delay = match name.as_str() {
                                "slow" => 2_000,
                                n => 5 * (n.len() as u64 % 4) + 5 * u64::from(n.as_bytes()[0] % 3),
                            };
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            if name == "zoe" {
                                return Err(axum::http::StatusCode::NOT_FOUND);
                            }
                            Ok(axum::Json(
                                serde_json::json!({"class": format!("class-{name}")}),
                            ))
                        }
                    },
                ),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (rx.recv().unwrap(), hits)
}

/// `async_enrich` against a live HTTP service: rows keep their order (ordered), each
/// gets its answer; a 404 and a timeout follow `on_error`; the cache saves requests.
#[test]
fn yaml_async_enrich_asks_an_http_service() {
    use std::sync::atomic::Ordering;
    let (addr, hits) = student_service();
    let dir = tempfile::tempdir().unwrap();
    let names = ["mia", "leo", "ava", "kai", "zoe", "ines"];
    let sales: String = (0..60)
        .map(|i| {
            format!(
                "{{\"sale\":{i},\"student\":\"{}\"}}\n",
                names[i % names.len()]
            )
        })
        .collect();
    std::fs::write(dir.path().join("sales.jsonl"), sales).unwrap();
    let run = |extra: &str, input: &str| {
        let spec = format!(
            r#"
name: http
dead_letter: dead.jsonl
sources:
  - {{name: sales, connector: file, path: {input}}}
steps:
  - async_enrich: {{url: "http://{addr}/students/{{student}}", capacity: 8{extra}}}
sinks:
  - {{name: out, connector: file, path: out.jsonl}}
"#
        );
        std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
        hits.store(0, Ordering::SeqCst);
        let mut cmd = brook_command(
            dir.path(),
            &[
                "run",
                dir.path().join("job.yaml").to_str().unwrap(),
                "--quiet",
            ],
        );
        let o = run_brook(&mut cmd);
        // The spec behind the command line, should it end unexpectedly.
        let what = format!(
            "{} (async_enrich{extra}, input {input})",
            command_line(&cmd)
        );
        (o, what, hits.load(Ordering::SeqCst))
    };
    // Without a cache, one request per row; zoe's 404 drops her rows; order kept.
    let (o, what, requests) = run(", on_error: drop", "sales.jsonl");
    expect_success(&what, &o);
    assert_eq!(requests, 60);
    let out = lines(&dir.path().join("out.jsonl"));
    let want: Vec<Value> = (0..60)
        .filter(|i| names[i % names.len()] != "zoe")
        .map(|i| {
            let n = names[i % names.len()];
            serde_json::json!({"sale": i, "student": n, "class": format!("class-{n}")})
        })
        .collect();
    assert_eq!(
        out, want,
        "ordered: rows in input order, each with its answer"
    );
    // With a cache: far fewer requests, same rows; zoe to the dead letters.
    let (o, what, requests) = run(", on_error: bad_record, cache_ttl: 1m", "sales.jsonl");
    expect_success(&what, &o);
    assert!(requests < 30, "{requests} requests with a cache");
    assert_eq!(lines(&dir.path().join("out.jsonl")), want);
    assert_eq!(lines(&dir.path().join("dead.jsonl")).len(), 10);
    // With the answer's schema declared the rows leave as batches of it: the same rows.
    let (o, what, _) = run(", on_error: drop, schema: {class: string}", "sales.jsonl");
    expect_success(&what, &o);
    assert_eq!(lines(&dir.path().join("out.jsonl")), want);
    // An answer that does not fit it goes to the dead letters, naming the field.
    std::fs::remove_file(dir.path().join("dead.jsonl")).unwrap();
    let (o, what, _) = run(", on_error: drop, schema: {class: int64}", "sales.jsonl");
    expect_success(&what, &o);
    let dead = lines(&dir.path().join("dead.jsonl"));
    assert_eq!(dead.len(), 50, "every answered row: {dead:?}");
    assert!(
        dead[0]["reason"].as_str().unwrap().contains("class"),
        "{dead:?}"
    );
    // A URL field the input lacks is an error before the job runs.
    let spec = brook::spec::parse(&format!(
        "name: h\nsources:\n  - {{name: sales, connector: file, path: {}}}\nsteps:\n  - async_enrich: {{url: \"http://{addr}/s/{{pupil}}\"}}\nsinks:\n  - {{name: out, connector: stdout}}\n",
        dir.path().join("sales.jsonl").display()
    ))
    .unwrap();
    let err = brook::spec::validate(spec).unwrap_err().to_string();
    assert!(
        err.contains(
            "steps[0] (step-1).async_enrich.url: {pupil}: field \"pupil\" is not in the input"
        ),
        "{err}"
    );
    // An answer field the input has must keep its type (a row whose answer lacks it
    // keeps the input's value).
    let spec = brook::spec::parse(&format!(
        "name: h\nsources:\n  - {{name: sales, connector: file, path: {}}}\nsteps:\n  - async_enrich: {{url: \"http://{addr}/s/{{student}}\", schema: {{sale: string}}}}\nsinks:\n  - {{name: out, connector: stdout}}\n",
        dir.path().join("sales.jsonl").display()
    ))
    .unwrap();
    let err = brook::spec::validate(spec).unwrap_err().to_string();
    assert!(
        err.contains(
            "steps[0] (step-1).async_enrich.schema.sale: the input's field \"sale\" is Int64"
        ),
        "{err}"
    );
    // Unordered: the same rows, in any order.
    let (o, what, _) = run(", on_error: drop, ordered: false", "sales.jsonl");
    expect_success(&what, &o);
    assert_eq!(sorted(lines(&dir.path().join("out.jsonl"))), sorted(want));
    // A timeout passes the row unchanged with `pass`, and fails the job by default.
    std::fs::write(
        dir.path().join("slow.jsonl"),
        "{\"sale\":1,\"student\":\"slow\"}\n",
    )
    .unwrap();
    let (o, what, _) = run(", timeout: 200ms, on_error: pass", "slow.jsonl");
    expect_success(&what, &o);
    assert_eq!(
        lines(&dir.path().join("out.jsonl")),
        vec![serde_json::json!({"sale": 1, "student": "slow"})]
    );
    let (o, what, _) = run(", timeout: 200ms", "slow.jsonl");
    let err = expect_failure(&what, &o);
    assert!(err.contains("no answer within 200 ms"), "{err}");
}

/// The enrichment and join examples run as the README says, with the results it
/// describes.
#[test]
fn the_enrichment_and_join_examples_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let unpaid = dir.path().join("unpaid.jsonl");
    let o = brook_ok(
        dir.path(),
        &[
            "run",
            root.join("examples/jobs/orders_payments.yaml")
                .to_str()
                .unwrap(),
            "--quiet",
            "--set",
            &format!("sinks.unpaid-out.path={}", unpaid.display()),
        ],
    );
    let mut ids: Vec<i64> = lines(&unpaid)
        .iter()
        .map(|r| r["order"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    // No payment (orders 4, 8, 14, 18) or one later than 15 minutes (3, 6, 13, 16).
    assert_eq!(ids, vec![3, 4, 6, 8, 13, 14, 16, 18]);
    let paid = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(paid, 12);

    let dead = dir.path().join("dead.jsonl");
    let o = brook_ok(
        dir.path(),
        &[
            "run",
            root.join("examples/jobs/sale_classes.yaml")
                .to_str()
                .unwrap(),
            "--quiet",
            "--set",
            &format!("dead_letter={}", dead.display()),
        ],
    );
    let out: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(out
        .iter()
        .all(|r| r["class"].is_string() && r["student"] != "zoe"));
    let dead = lines(&dead);
    assert!(!dead.is_empty());
    assert_eq!(out.len() + dead.len(), 30, "every sale once");
}

/// A join counts every row behind its watermark in `brook_late_records_total` and
/// sends it to the step's `late_output` (semantics.md §3a; issue 15, item 3). The left
/// input is a bounded file: at its end its watermark is the maximum, so the join's is
/// the right input's, 99 after a payment at 100; a payment at 10 appended to the
/// followed right file then arrives behind it, whatever order the inputs were read in.
#[test]
fn a_join_counts_its_late_rows_and_sends_them_to_its_late_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("orders.jsonl"), "{\"order\":1,\"ts\":5}\n").unwrap();
    let payments = dir.path().join("payments.jsonl");
    std::fs::write(&payments, "{\"order\":1,\"amount\":3,\"ts\":100}\n").unwrap();
    let spec = r#"
name: late-join
parallelism: 1
sources:
  - {name: orders, connector: file, path: orders.jsonl, event_time: ts, watermark: {out_of_orderness: 0s, interval: 0}}
  - {name: payments, connector: file, path: payments.jsonl, follow: true, event_time: ts, watermark: {out_of_orderness: 0s, interval: 0}}
steps:
  - name: paid
    join: {kind: interval, left: orders, right: payments, on: [order], between: [0s, 1s]}
    late_output: late
sinks:
  - {name: out, connector: file, path: paid.jsonl, input: paid}
  - {name: late, connector: file, path: late.jsonl}
"#;
    std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
    let addr = free_addr();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["run", "--quiet", "--metrics-addr", &addr])
            .arg(dir.path().join("job.yaml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let timeout = Duration::from_secs(20);
    let scrape = |series: &str| metric(&scrape_metrics(&addr)?, series);
    wait_for("the join's watermark at 99", timeout, || {
        (scrape("brook_watermark_ms{operator=\"paid\"")? >= 99.0).then_some(())
    });
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&payments)
        .unwrap();
    f.write_all(b"{\"order\":2,\"amount\":4,\"ts\":10}\n")
        .unwrap();
    wait_for("the late payment in the late output", timeout, || {
        let text = std::fs::read_to_string(dir.path().join("late.jsonl")).ok()?;
        (!text.is_empty()).then_some(())
    });
    let late = scrape("brook_late_records_total{operator=\"paid\"");
    // The split it came in names it too (issue 19): behind the payments file's own
    // watermark (99); the orders file brought none.
    let split_late = |source: &str| {
        let text = scrape_metrics(&addr)?;
        let line = text.lines().find(|l| {
            l.starts_with(&format!(
                "brook_split_late_records_total{{operator=\"{source}\""
            ))
        })?;
        line.rsplit(' ').next()?.parse::<f64>().ok()
    };
    // (Split figures are refreshed every 200 ms.)
    let payments_late = wait_for("the payments split's late record", timeout, || {
        split_late("payments").filter(|&n| n > 0.0)
    });
    let orders_late = split_late("orders");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(late, Some(1.0));
    assert_eq!((payments_late, orders_late), (1.0, Some(0.0)));
    assert_eq!(
        lines(&dir.path().join("late.jsonl")),
        vec![serde_json::json!({"order": 2, "amount": 4, "ts": 10})]
    );
    assert_eq!(
        lines(&dir.path().join("paid.jsonl")),
        vec![serde_json::json!({"order": 1, "ts": 5, "amount": 3, "payments_ts": 100})]
    );
}

/// Issue 15, item 6: a hopping window with a tiny slide (here 500,000 windows per
/// record, allowed by raising `max_windows_per_record`) keeps its task inside one batch
/// for minutes. SIGTERM must still stop the job within seconds, on the fast path
/// (`memory`: windows added a chunk at a time) and the general one (`rocksdb`: per
/// window).
#[test]
fn sigterm_stops_a_job_busy_with_a_record_in_many_windows() {
    for backend in ["memory", "rocksdb"] {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!(
            r#"
name: runaway
state_backend: {backend}
sources:
  - {{name: g, connector: generator, count: 1000000, keys: 1, watermark: {{}}}}
steps:
  - key_by: [key]
  - name: win
    window: {{kind: hopping, size: 500s, slide: 1ms, max_windows_per_record: 1000000}}
    aggregate: {{n: count()}}
sinks:
  - {{name: o, connector: file, path: out.jsonl}}
"#
        );
        std::fs::write(dir.path().join("job.yaml"), spec).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["run", dir.path().join("job.yaml").to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Deep inside the first records' windows by then.
        std::thread::sleep(Duration::from_millis(1500));
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let o = wait_bounded(child, Duration::from_secs(10)).unwrap_or_else(|o| {
            panic!(
                "{backend}: still running 10 s after SIGTERM: {}",
                stderr(&o)
            )
        });
        expect_success(&format!("{backend}: brook run (SIGTERM)"), &o);
        let err = stderr(&o);
        assert!(err.contains("job runaway canceled"), "{backend}: {err}");
        // The window was allowed, with a warning when the job started.
        assert!(
            err.contains("each record falls into up to 500000 windows"),
            "{backend}: {err}"
        );
    }
}

/// Issue 15, item 8: a Kafka source or sink whose brokers cannot be reached fails
/// after its `connect_timeout`, saying while it waits and at the end which address it
/// could not reach (no broker needed: nothing listens on port 1).
#[test]
fn an_unreachable_kafka_broker_fails_naming_the_address() {
    let cases = [
        (
            "source",
            // 6 s: one 5 s attempt (then a warning), one of 1 s.
            "sources:\n  - {name: k, connector: kafka, bootstrap: 127.0.0.1:1, topic: t, connect_timeout: 6s}\nsinks:\n  - {name: o, connector: stdout}\n",
            "6 s",
        ),
        (
            "sink",
            "sources:\n  - {name: g, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 127.0.0.1:1, topic: t, connect_timeout: 2s}\n",
            "2 s",
        ),
    ];
    for (what, body, waited) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("job.yaml"),
            format!("name: unreachable\n{body}"),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["run", dir.path().join("job.yaml").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_bounded(child, Duration::from_secs(20))
            .unwrap_or_else(|o| panic!("{what}: still running after 20 s: {}", stderr(&o)));
        let err = expect_failure(&format!("{what}: brook run"), &o);
        assert!(
            err.contains(&format!(
                "cannot reach Kafka at 127.0.0.1:1 within {waited} (connect_timeout)"
            )),
            "{what}: {err}"
        );
        if what == "source" {
            assert!(
                err.contains("cannot reach Kafka at 127.0.0.1:1 (retrying; 5 s of 6 s)"),
                "{what}: {err}"
            );
        }
    }
}
