//! `enrich` from a log-topic table in a `brook run` job on a data directory that a
//! running `brook broker` serves (semantics.md §1a "Jobs on a served log"): the table
//! is read through the broker with the same rows, tombstones and updates as in-process.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use brook::kafka::admin::read_to_end;
use serde_json::{json, Value};

use brook_testkit::binary::{
    brook_command, command_line, expect_success, run_brook_err, run_brook_ok, run_brook_with_input,
};
use brook_testkit::broker::BrokerProcess;
use brook_testkit::process::{wait_for, KillOnDrop};

fn brook(data: &Path, args: &[&str]) -> Command {
    brook_command(Path::new(env!("CARGO_BIN_EXE_brook")), data, args)
}

fn start_broker(data: &Path) -> BrokerProcess {
    BrokerProcess::start(Path::new(env!("CARGO_BIN_EXE_brook")), data, &[])
}

fn produce(data: &Path, args: &[&str], lines: &str) {
    let mut cmd = brook(data, &[&["produce"], args].concat());
    let out = run_brook_with_input(&mut cmd, lines.as_bytes());
    expect_success(&command_line(&cmd), &out);
}

/// The table topic `classes` (2 partitions, keyed by student): mia's row replaced,
/// leo's deleted by a tombstone (`--null-marker`), ann's kept.
fn write_classes(data: &Path) {
    run_brook_ok(&mut brook(
        data,
        &["topic", "create", "classes", "--partitions", "2"],
    ));
    produce(
        data,
        &["classes", "--key-separator", "|", "--null-marker", "NULL"],
        "mia|{\"student\":\"mia\",\"class\":\"3a\"}\n\
         leo|{\"student\":\"leo\",\"class\":\"2c\"}\n\
         ann|{\"student\":\"ann\",\"class\":\"1b\"}\n\
         mia|{\"student\":\"mia\",\"class\":\"4b\"}\n\
         leo|NULL\n",
    );
}

/// A job enriching topic `sales` with `classes` into `out.jsonl` (two subtasks, each
/// with its own copy of the table).
fn enrich_job(dir: &Path, table_topic: &str) -> PathBuf {
    let yaml = format!(
        r#"
name: classify
parallelism: 2
sources:
  - {{ name: sales, connector: log, topic: sales }}
steps:
  - name: classes
    enrich: {{ table: {{ connector: log, topic: {table_topic} }}, on: [student] }}
sinks:
  - {{ name: out, connector: file, path: {}, parallelism: 1 }}
"#,
        dir.join("out.jsonl").display()
    );
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Runs the enrich job on a fresh data directory, served by a broker when `served`,
/// and returns its output rows, sorted.
fn enriched(served: bool) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = served.then(|| start_broker(&data));
    write_classes(&data);
    run_brook_ok(&mut brook(
        &data,
        &["topic", "create", "sales", "--partitions", "1"],
    ));
    produce(
        &data,
        &["sales"],
        "{\"student\":\"mia\",\"sale\":1}\n\
         {\"student\":\"leo\",\"sale\":2}\n\
         {\"student\":\"ann\",\"sale\":3}\n\
         {\"student\":\"zoe\",\"sale\":4}\n",
    );
    let job = enrich_job(dir.path(), "classes");
    // Not --quiet: the job says when it goes through a broker.
    let out = run_brook_ok(brook(&data, &["run"]).arg(&job).stdin(Stdio::null()));
    if served {
        // The job did go through the broker.
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("served by a broker"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(broker);
    let mut rows: Vec<Value> = std::fs::read_to_string(dir.path().join("out.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows.sort_by_key(|r| r["sale"].as_i64());
    rows
}

/// The same job gives the same output in-process and through the broker: the latest
/// row per key, a tombstoned key missing (its rows get nulls, as an unknown key's).
#[test]
fn a_log_table_through_the_broker_holds_what_it_holds_in_process() {
    let expected = vec![
        json!({"student": "mia", "sale": 1, "class": "4b"}),
        json!({"student": "leo", "sale": 2, "class": null}),
        json!({"student": "ann", "sale": 3, "class": "1b"}),
        json!({"student": "zoe", "sale": 4, "class": null}),
    ];
    assert_eq!(enriched(false), expected, "in-process");
    assert_eq!(enriched(true), expected, "through the broker");
}

/// An unknown table topic is refused before the job starts, naming the step's field,
/// with the same message through the broker as in-process.
#[test]
fn an_unknown_table_topic_names_the_steps_field() {
    let error = |served: bool| {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let _broker = served.then(|| start_broker(&data));
        run_brook_ok(&mut brook(
            &data,
            &["topic", "create", "sales", "--partitions", "1"],
        ));
        let job = enrich_job(dir.path(), "nope");
        run_brook_err(brook(&data, &["run", "--quiet"]).arg(&job))
    };
    for (mode, err) in [("in-process", error(false)), ("served", error(true))] {
        assert!(
            err.contains("classes.enrich.table.topic: ") && err.contains("nope"),
            "{mode}: {err}"
        );
    }
}

/// Through the broker the table follows its topic while the job runs (as in-process):
/// once an update is read, every later sale gets it, none the old row.
#[test]
fn a_log_table_through_the_broker_follows_its_topic() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = start_broker(&data);
    for t in ["classes", "sales", "out"] {
        run_brook_ok(&mut brook(
            &data,
            &["topic", "create", t, "--partitions", "1"],
        ));
    }
    let table = |class: &str| {
        produce(
            &data,
            &["classes", "--key-field", "student"],
            &format!("{{\"student\":\"mia\",\"class\":\"{class}\"}}\n"),
        );
    };
    table("3a");
    let yaml = r#"
name: follow
checkpoint_interval: 50ms
sources:
  - { name: sales, connector: log, topic: sales, bounded: false }
steps:
  - enrich: { table: { connector: log, topic: classes }, on: [student] }
sinks:
  - { name: out, connector: log, topic: out }
"#;
    let job = dir.path().join("follow.yaml");
    std::fs::write(&job, yaml).unwrap();
    let _running = KillOnDrop(
        brook(&data, &["run", "--quiet"])
            .arg(&job)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let bootstrap = broker.bootstrap();
    let classes = || -> Vec<Value> {
        read_to_end(&bootstrap, "out", true)
            .unwrap()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.value).unwrap()["class"].clone())
            .collect()
    };
    let mut sale = 0;
    let mut sell = || {
        sale += 1;
        produce(
            &data,
            &["sales"],
            &format!("{{\"student\":\"mia\",\"sale\":{sale}}}\n"),
        );
        sale
    };
    let first = sell();
    wait_for("the first sale's output", Duration::from_secs(30), || {
        (classes().len() == first as usize).then_some(())
    });
    assert_eq!(classes(), vec![json!("3a")]);
    table("4b");
    // The update reaches the job's table some time after it is written: sales until
    // one shows it (bounded), then one more.
    wait_for(
        "a sale enriched with the update",
        Duration::from_secs(30),
        || {
            let n = sell();
            wait_for("the sale's output", Duration::from_secs(30), || {
                (classes().len() == n as usize).then_some(())
            });
            classes().contains(&json!("4b")).then_some(())
        },
    );
    let last = sell();
    let got = wait_for("the last sale's output", Duration::from_secs(30), || {
        let c = classes();
        (c.len() == last as usize).then_some(c)
    });
    let switched = got.iter().position(|c| c == &json!("4b")).unwrap();
    assert!(
        got[..switched].iter().all(|c| c == &json!("3a"))
            && got[switched..].iter().all(|c| c == &json!("4b")),
        "{got:?}"
    );
}
