//! The log's per-partition gauges on the Prometheus endpoints of the processes that hold
//! the log (brook::log_metrics): `brook broker --metrics-addr` and `brook run
//! --metrics-addr` with the log in-process (the runner's `/metrics`: tests/runner.rs).
//! A segment kept past time retention by a record stamped in the future shows as
//! `brook_log_segments_held_by_future_timestamps` 1.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use brook_testkit::broker::BrokerProcess;
use brook_testkit::future_segment::segment_held_by_a_future_timestamp;
use brook_testkit::metrics::{free_addr, metric, scrape_metrics};
use brook_testkit::process::{wait_for, KillOnDrop};

const HELD: &str = "brook_log_segments_held_by_future_timestamps{topic=\"t\",partition=\"0\"}";

/// Scrapes `addr` until the held-segment gauge is 1 (the log's maintenance runs its
/// retention pass every second), and returns that body.
fn scrape_until_held(addr: &str) -> String {
    wait_for(
        "the held segment in the metrics",
        Duration::from_secs(20),
        || scrape_metrics(addr).filter(|body| metric(body, HELD) == Some(1.0)),
    )
}

#[test]
fn the_broker_serves_the_logs_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    segment_held_by_a_future_timestamp(&data, "t");
    let addr = free_addr();
    let _broker = BrokerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_brook")),
        &data,
        &["--metrics-addr", &addr],
    );
    let body = scrape_until_held(&addr);
    let at = |name: &str| metric(&body, &format!("{name}{{topic=\"t\",partition=\"0\"}}"));
    assert_eq!(at("brook_log_end_offset"), Some(2.0), "{body}");
    assert_eq!(at("brook_log_start_offset"), Some(0.0), "{body}");
    assert!(
        at("brook_log_size_bytes").is_some_and(|b| b > 0.0),
        "{body}"
    );
    assert!(
        body.contains("# TYPE brook_log_segments_held_by_future_timestamps gauge"),
        "{body}"
    );
}

#[test]
fn a_job_with_the_log_in_process_serves_the_logs_gauges_beside_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    segment_held_by_a_future_timestamp(&data, "t");
    let job = dir.path().join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "name: follow\nsources:\n  - {{name: t, connector: log, topic: t, bounded: false, on_bad_record: skip}}\nsinks:\n  - {{name: o, connector: file, path: {}}}\n",
            dir.path().join("out.jsonl").display()
        ),
    )
    .unwrap();
    let addr = free_addr();
    let _job = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_brook"))
            .arg("--data-dir")
            .arg(&data)
            .args(["run", "--quiet", "--metrics-addr", &addr])
            .arg(&job)
            .env_remove("BROOK_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let body = scrape_until_held(&addr);
    // The job's own series are still there.
    assert!(
        body.contains("brook_records_out_total{operator=\"t\""),
        "{body}"
    );
}
