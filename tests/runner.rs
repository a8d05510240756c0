//! The runner (`brook runner`) with real processes: a windowed job over a log topic
//! is submitted, its process is SIGKILLed (and the runner itself), and the committed
//! output still equals a failure-free `brook run` of the same spec exactly; stop with
//! savepoint and resume; a builder-API binary (`examples/runner_job.rs`) supervised
//! the same way; the token (made in the data directory when none is given) and the
//! refusal of requests a web page could send (foreign `Host` or `Origin`, bodies that
//! are not JSON); ids and names that would leave the data directory; the runner's log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use brook::core::time::Stopwatch;

use brook::runner::api::{JobDetail, JobState};
use brook::runner::client::Client;
use brook::runner::status::ProcessState;

/// About 3-4 s of work for a debug build on one core (per-record watermarks).
const EVENTS: i64 = 30_000;

const BROOK: &str = env!("CARGO_BIN_EXE_brook");

use brook_testkit::binary::{example_binary, run_brook, run_brook_err, run_brook_ok};
use brook_testkit::http::raw_request;
use brook_testkit::log_job::{self, outputs};
use brook_testkit::process::wait_for;

fn produce(data: &Path) {
    log_job::produce(data, EVENTS);
}

/// The windowed job of tests/kill_restore.rs on memory state (sessions on RocksDB are
/// slow in debug builds).
fn spec(dir: &Path) -> PathBuf {
    log_job::spec(dir, "200ms", Some("memory"))
}

/// The output of a run without failures (computed once).
fn reference() -> &'static Vec<Vec<String>> {
    static REF: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    REF.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        produce(&data);
        let job = spec(dir.path());
        run_brook_ok(
            Command::new(BROOK)
                .arg("--data-dir")
                .arg(&data)
                .args(["run", "--quiet"])
                .arg(&job),
        );
        let want = outputs(dir.path(), &data);
        assert!(want[0].len() > 100 && !want[1].is_empty() && !want[2].is_empty());
        assert_eq!(want[3], want[0], "the log sink writes the per-second rows");
        want
    })
}

fn assert_same_output(got: &[Vec<String>], what: &str) {
    let want = reference();
    for (name, (g, w)) in ["per_second", "late", "sessions", "log topic out"]
        .iter()
        .zip(got.iter().zip(want))
    {
        assert_eq!(g.len(), w.len(), "{what}: {name}: row count");
        assert!(g == w, "{what}: {name}: rows differ from the clean run");
    }
}

/// A `brook runner` process on an ephemeral port; SIGKILLed when dropped. Its stderr
/// (its log) goes to `log`.
struct Runner {
    child: Child,
    url: String,
    data: PathBuf,
    /// The token it was given, else the one it made in the data directory.
    token: String,
    log: PathBuf,
}

impl Runner {
    /// A runner serving the data directory's log on an ephemeral port.
    fn start(data: &Path, token: Option<&str>) -> Runner {
        Runner::start_with(data, token, &["--broker-listen", "127.0.0.1:0"])
    }

    /// A runner whose jobs open the log in their own processes (`--no-broker`): the
    /// exactly-once comparisons with [`reference`] need that. Its single source
    /// subtask reads the two partitions in an order fixed by their offsets in-process,
    /// which makes the windows' late rows deterministic; through a broker the Kafka
    /// source interleaves them as the fetches arrive, so rows that are late by the
    /// watermark may differ from the reference's (as with Kafka itself).
    fn start_in_process(data: &Path) -> Runner {
        Runner::start_with(data, None, &["--no-broker"])
    }

    fn start_with(data: &Path, token: Option<&str>, extra: &[&str]) -> Runner {
        std::fs::create_dir_all(data).expect("data dir");
        let address = data.join("runner/address");
        let _ = std::fs::remove_file(&address);
        let log = data.with_extension("runner.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("the runner's log file");
        let mut c = Command::new(BROOK);
        c.arg("--data-dir")
            .arg(data)
            .args(["runner", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("BROOK_RUNNER_TOKEN")
            .env_remove("BROOK_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some(t) = token {
            c.args(["--token", t]);
        }
        let child = c.spawn().expect("start the runner");
        let addr = wait_for("the runner's address", Duration::from_secs(20), || {
            std::fs::read_to_string(&address)
                .ok()
                .filter(|a| !a.is_empty())
        });
        // Made before the address is written.
        let token = token.map_or_else(
            || brook::runner::read_token(data).expect("the runner's token file"),
            str::to_string,
        );
        Runner {
            child,
            url: format!("http://{addr}"),
            data: data.to_path_buf(),
            token,
            log,
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.url, Some(self.token.clone()))
    }

    /// What the runner logged so far.
    /// Its Prometheus metrics, fetched with its token.
    fn metrics(&self) -> String {
        rt().block_on(async {
            reqwest::Client::new()
                .get(format!("{}/metrics", self.url))
                .bearer_auth(&self.token)
                .send()
                .await?
                .text()
                .await
        })
        .expect("GET /metrics")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn job(&self, id: &str) -> JobDetail {
        rt().block_on(self.client().job(id))
            .expect("GET /jobs/{id}")
    }

    /// `brook --data-dir DATA ARGS` with `$BROOK_RUNNER` the runner's URL: the token is
    /// the data directory's (for the runner at the address written there).
    fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BROOK);
        c.arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .env("BROOK_RUNNER", &self.url)
            .env_remove("BROOK_RUNNER_TOKEN");
        c
    }

    fn submit(&self, args: &[&str]) -> String {
        let mut all = vec!["submit", "--json"];
        all.extend_from_slice(args);
        let out = run_brook_ok(&mut self.cli(&all));
        let d: JobDetail = serde_json::from_slice(&out.stdout).expect("submit's JSON");
        d.summary.id
    }

    /// Waits for a process of the job with at least one complete checkpoint; returns
    /// its pid.
    fn wait_for_checkpoint(&self, id: &str, attempt: u32) -> u32 {
        let pid = self.try_wait_for_running(id, attempt, 1);
        pid.unwrap_or_else(|| panic!("the job ended before it could be killed"))
    }

    /// The pid of attempt `attempt` of job `id` once it runs with `checkpoints`
    /// completed checkpoints; `None` if the job ends first.
    fn try_wait_for_running(&self, id: &str, attempt: u32, checkpoints: u64) -> Option<u32> {
        wait_for("a checkpoint of the job", Duration::from_secs(60), || {
            let d = self.job(id);
            if d.summary.state.is_terminal() {
                return Some(None);
            }
            let st = d.status?;
            (d.summary.attempts == attempt
                && st.state == ProcessState::Running
                && st.checkpoints.completed >= checkpoints)
                .then_some(Some(st.pid))
        })
    }

    fn wait_for_state(&self, id: &str, state: JobState) -> JobDetail {
        wait_for("the job's state", Duration::from_secs(120), || {
            let d = self.job(id);
            (d.summary.state == state).then_some(d)
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.kill();
        // Its job processes see their stdin close and stop.
        let _ = &self.data;
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn sigkill(pid: u32) {
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -9 {pid}");
}

/// A directory with the topic and the spec, and its data directory.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    produce(&data);
    let job = spec(dir.path());
    (dir, data, job)
}

#[test]
fn a_killed_job_process_restarts_from_its_checkpoint_with_exactly_once_output() {
    let _ = reference();
    let (dir, data, job) = setup();
    let runner = Runner::start_in_process(&data);
    let job_path = job.to_string_lossy().into_owned();
    let id = runner.submit(&[&job_path, "--restart", "fixed:attempts=5,delay=100ms"]);
    let started = Stopwatch::start();
    let mut kills = 0;
    for attempt in 1..=2 {
        // The first attempt after a checkpoint (something to restore), the restored
        // one as soon as it runs: it has less to do, and on a fast machine it may even
        // finish before it is seen running (one kill, then).
        let checkpoints = if attempt == 1 { 1 } else { 0 };
        let pid = match (
            runner.try_wait_for_running(&id, attempt, checkpoints),
            attempt,
        ) {
            (Some(pid), _) => pid,
            (None, 1) => panic!("the job ended before its first attempt could be killed"),
            (None, _) => break,
        };
        sigkill(pid);
        kills += 1;
    }
    let d = runner.wait_for_state(&id, JobState::Finished);
    eprintln!(
        "finished after {kills} kills in {:.1} s",
        started.elapsed_nanos() as f64 / 1e9
    );
    assert_eq!(d.summary.attempts, kills + 1, "{d:?}");
    let h = &d.attempt_history;
    for a in &h[..kills as usize] {
        assert_eq!(a.outcome.as_deref(), Some("killed by signal 9"), "{a:?}");
    }
    assert_eq!(h[kills as usize].outcome.as_deref(), Some("finished"));
    assert!(h[0].restored_from.is_none());
    for a in &h[1..] {
        let from = a
            .restored_from
            .as_ref()
            .expect("restored from a checkpoint");
        assert!(
            from.starts_with(&d.checkpoint_dir),
            "{} is a checkpoint of the job",
            from.display()
        );
    }
    assert_eq!(
        d.summary.last_failure.as_deref(),
        Some("killed by signal 9")
    );
    // The job's state is on disk, for the next runner.
    let text =
        std::fs::read_to_string(data.join(format!("runner/jobs/{id}/job.json"))).expect("job.json");
    assert!(text.contains("killed by signal 9") && text.contains("FINISHED"));
    drop(runner);
    assert_same_output(&outputs(dir.path(), &data), "after the kills");
}

#[test]
fn a_killed_runner_is_restarted_and_its_jobs_resume_with_exactly_once_output() {
    let _ = reference();
    let (dir, data, job) = setup();
    let mut runner = Runner::start_in_process(&data);
    let job_path = job.to_string_lossy().into_owned();
    let id = runner.submit(&[&job_path]);
    let pid = runner.wait_for_checkpoint(&id, 1);
    runner.kill();
    // The job process notices (its stdin closes) and stops.
    wait_for(
        "the orphaned job process to stop",
        Duration::from_secs(30),
        || (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()),
    );
    let runner = Runner::start_in_process(&data);
    let d = runner.wait_for_state(&id, JobState::Finished);
    assert_eq!(d.summary.attempts, 2, "{d:?}");
    assert_eq!(d.attempt_history[0].outcome.as_deref(), Some("lost"));
    assert!(d.attempt_history[1].restored_from.is_some(), "{d:?}");
    drop(runner);
    assert_same_output(&outputs(dir.path(), &data), "after a runner crash");
}

/// What `/metrics`, `brook job` and the status (what the dashboard draws) show of a
/// running job. The job follows its topic (`bounded: false`), so it is still running
/// however slow the machine is; it is canceled at the end.
#[test]
fn metrics_and_status_list_a_running_jobs_splits_hot_keys_and_checkpoints() {
    let (dir, data, job) = setup();
    let spec = std::fs::read_to_string(&job).expect("read the spec");
    let following = spec.replacen("topic: events\n", "topic: events\n    bounded: false\n", 1);
    assert_ne!(spec, following, "the spec's log source");
    let job = dir.path().join("following.yaml");
    std::fs::write(&job, following).expect("write the spec");
    let runner = Runner::start_in_process(&data);
    let job_path = job.to_string_lossy().into_owned();
    let id = runner.submit(&[&job_path]);
    runner.wait_for_checkpoint(&id, 1);

    let metrics = runner.metrics();
    for series in [
        format!("brook_job_up{{job=\"{id}\",name=\"windows\",state=\"RUNNING\"}} 1"),
        format!("brook_records_in_total{{job=\"{id}\",operator=\"per-second\"}}"),
        format!("brook_late_records_total{{job=\"{id}\",operator=\"per-second\"}}"),
        format!("brook_split_lag{{job=\"{id}\",operator=\"events\",split=\"events/0\"}}"),
        format!("brook_split_watermark_ms{{job=\"{id}\",operator=\"events\",subtask=\"0\",split=\"events/0\",idle=\"false\"}}"),
        format!("brook_split_late_records_total{{job=\"{id}\",operator=\"events\",subtask=\"0\",split=\"events/0\"}}"),
        format!("brook_last_checkpoint_size_bytes{{job=\"{id}\"}}"),
    ] {
        assert!(metrics.contains(&series), "{series} in:\n{metrics}");
    }
    // The keyed window's hottest keys (issue 19), in /metrics and in `brook job`;
    // writers publish them about once a second.
    let rank1 =
        format!("brook_hot_key_share{{job=\"{id}\",operator=\"per-second\",rank=\"1\",key=\"");
    wait_for(
        "the window's hot keys in /metrics",
        Duration::from_secs(20),
        || runner.metrics().contains(&rank1).then_some(()),
    );
    let out = run_brook(&mut runner.cli(&["job", &id]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("hot keys of per-second: ") && l.contains("% (subtask ")),
        "{text}"
    );
    let d = runner.job(&id);
    let st = d.status.expect("a status");
    let split = st
        .splits
        .iter()
        .find(|s| s.split == "events/0")
        .expect("split events/0");
    assert!(split.offset.is_some() && split.lag.is_some(), "{split:?}");
    assert!(st.checkpoints.last_size_bytes.is_some_and(|b| b > 0));
    // What the dashboard draws: the graph's edges, per-subtask figures and the
    // checkpoint history (issue 19).
    assert!(!st.edges.is_empty(), "{:?}", st.edges);
    assert!(st
        .operators
        .iter()
        .all(|o| o.subtasks.len() == o.parallelism as usize));
    assert!(
        st.checkpoints
            .history
            .iter()
            .any(|c| c.error.is_none() && c.size_bytes.is_some_and(|b| b > 0)),
        "{:?}",
        st.checkpoints.history
    );
    // In-memory state shares nothing between checkpoints: each adds all it holds.
    assert!(
        st.checkpoints.history.iter().any(|c| c.error.is_none()
            && c.full_size_bytes > c.size_bytes
            && c.incremental_bytes == c.full_size_bytes),
        "{:?}",
        st.checkpoints.history
    );

    run_brook_ok(&mut runner.cli(&["cancel", &id]));
    runner.wait_for_state(&id, JobState::Canceled);
}

/// Cancel with a savepoint right after the first checkpoint (the job runs a few
/// seconds: nothing slow between the two), then resume from it.
#[test]
fn cancel_with_savepoint_and_resume_commit_exactly_once() {
    let _ = reference();
    let (dir, data, job) = setup();
    let runner = Runner::start_in_process(&data);
    let job_path = job.to_string_lossy().into_owned();
    let id = runner.submit(&[&job_path]);
    runner.wait_for_checkpoint(&id, 1);
    let out = run_brook_ok(&mut runner.cli(&["cancel", &id, "--savepoint", "--json"]));
    let d: JobDetail = serde_json::from_slice(&out.stdout).expect("cancel's JSON");
    assert_eq!(d.summary.state, JobState::Canceled);
    let savepoint = d.savepoints.last().expect("a savepoint").clone();
    assert!(savepoint.join("_metadata").is_file());
    // The job stopped before its end: a resume has something left to do.
    assert!(runner
        .job(&id)
        .status
        .is_some_and(|s| s.state == ProcessState::Canceled));

    let sp = savepoint.to_string_lossy().into_owned();
    run_brook_ok(&mut runner.cli(&["resume", "--from-savepoint", &sp]));
    let d = runner.wait_for_state(&id, JobState::Finished);
    assert_eq!(d.summary.attempts, 2);
    assert_eq!(d.attempt_history[0].outcome.as_deref(), Some("canceled"));
    assert_eq!(
        d.attempt_history[1].restored_from.as_deref(),
        Some(savepoint.as_path())
    );
    drop(runner);
    assert_same_output(
        &outputs(dir.path(), &data),
        "after stop with savepoint and resume",
    );
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .expect("read output")
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn a_builder_api_binary_is_supervised_and_restarted_with_exactly_once_output() {
    let bin = example_binary("runner_job");
    let dir = tempfile::tempdir().expect("tempdir");
    // The binary on its own, without a runner.
    let clean = dir.path().join("clean.jsonl");
    run_brook_ok(
        Command::new(&bin)
            .arg(&clean)
            .arg("8000")
            .env_remove("BROOK_JOB_ID"),
    );
    let want = sorted_lines(&clean);
    assert!(want.len() > 20, "{} rows", want.len());

    let runner = Runner::start(&dir.path().join("data"), None);
    let supervised = dir.path().join("supervised.jsonl");
    let (b, o) = (
        bin.to_string_lossy().into_owned(),
        supervised.to_string_lossy().into_owned(),
    );
    let id = runner.submit(&[
        "--bin",
        &b,
        "--name",
        "runner-job",
        "--checkpoint-interval",
        "200ms",
        "--",
        &o,
        "8000",
    ]);
    let pid = runner.wait_for_checkpoint(&id, 1);
    let d = runner.job(&id);
    assert_eq!(d.summary.kind, "bin");
    let st = d.status.as_ref().expect("a status");
    assert!(st.operators.iter().any(|o| o.records_out > 0), "{st:?}");
    // Generator splits report their next event number and what is left of them.
    assert!(
        st.splits.len() == 16
            && st
                .splits
                .iter()
                .all(|s| s.offset.is_some() && s.lag.is_some()),
        "{st:?}"
    );
    sigkill(pid);
    let d = runner.wait_for_state(&id, JobState::Finished);
    assert_eq!(d.summary.attempts, 2, "{d:?}");
    assert_eq!(
        d.attempt_history[0].outcome.as_deref(),
        Some("killed by signal 9")
    );
    assert!(d.attempt_history[1].restored_from.is_some());
    assert_eq!(sorted_lines(&supervised), want, "exactly once after a kill");
}

fn status_of(url: &str, token: Option<&str>) -> u16 {
    rt().block_on(async {
        let mut req = reqwest::Client::new().get(format!("{url}/jobs"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.map(|r| r.status().as_u16())
    })
    .expect("GET /jobs")
}

#[test]
fn with_a_token_requests_without_it_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = Runner::start(&dir.path().join("data"), Some("s3cret"));
    assert_eq!(status_of(&runner.url, None), 401);
    assert_eq!(status_of(&runner.url, Some("wrong")), 401);
    assert_eq!(status_of(&runner.url, Some("s3cret")), 200);
    // The scheme in any case; a token given without one is refused.
    let raw = |value: &str| {
        rt().block_on(async {
            reqwest::Client::new()
                .get(format!("{}/jobs", runner.url))
                .header("authorization", value)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
        .expect("GET /jobs")
    };
    assert_eq!(raw("bearer s3cret"), 200);
    assert_eq!(raw("BEARER  s3cret"), 200);
    assert_eq!(raw("s3cret"), 401);
    assert_eq!(raw("Basic s3cret"), 401);
    let metrics = rt()
        .block_on(async {
            reqwest::get(format!("{}/metrics", runner.url))
                .await
                .map(|r| r.status().as_u16())
        })
        .expect("GET /metrics");
    assert_eq!(metrics, 401, "every endpoint checks the token");
    // The CLI takes it from the environment.
    let err = run_brook_err(&mut runner.cli(&["jobs"]));
    assert!(err.contains("token"));
    let out = run_brook_ok(
        Command::new(BROOK)
            .args(["jobs", "--json"])
            .env("BROOK_RUNNER", &runner.url)
            .env("BROOK_RUNNER_TOKEN", "s3cret"),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn without_a_token_the_runner_makes_one_and_refuses_what_a_web_page_could_send() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut runner = Runner::start(&data, None);
    // Made at the first start, readable by the runner's user only.
    let file = data.join("runner/token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("token file").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    assert_eq!(runner.token.len(), 64, "{}", runner.token);
    let job = serde_json::json!({
        "name": "sleeper",
        // Runs until the runner's first command (`cancel`) arrives on its stdin.
        "job": { "kind": "bin", "path": "/bin/sh", "args": ["-c", "read command"] },
    });
    let body = job.to_string();
    // (status, answer headers and body) of a request built by `f`.
    let send = |f: &dyn Fn(&reqwest::Client) -> reqwest::RequestBuilder| {
        rt().block_on(async {
            let r = f(&reqwest::Client::new()).send().await?;
            let status = r.status().as_u16();
            let cors = r
                .headers()
                .keys()
                .any(|k| k.as_str().starts_with("access-control-"));
            Ok::<_, reqwest::Error>((status, cors, r.text().await?))
        })
        .expect("request")
    };
    let url = |path: &str| format!("{}{path}", runner.url);
    // Loopback is no boundary: no token, no service.
    let (status, _, text) = send(&|c| c.get(url("/jobs")));
    assert_eq!(status, 401, "{text}");
    let (status, _, text) = send(&|c| {
        c.post(url("/jobs"))
            .header("content-type", "application/json")
            .body(body.clone())
    });
    assert_eq!(status, 401, "{text}");
    // A form or text/plain body (what a page may send without a preflight): 415.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "text/plain; charset=application/json",
    ] {
        let (status, _, text) = send(&|c| {
            c.post(url("/jobs"))
                .bearer_auth(&runner.token)
                .header("content-type", content_type)
                .body(body.clone())
        });
        assert_eq!(status, 415, "{content_type}: {text}");
        assert!(text.contains("application/json"), "{text}");
    }
    // Another origin, even with the token: 403, and no CORS headers, also on a preflight.
    let (status, cors, text) = send(&|c| {
        c.post(url("/jobs"))
            .bearer_auth(&runner.token)
            .header("origin", "http://evil.example")
            .json(&job)
    });
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("cross-origin") && !cors, "{text}");
    let (status, cors, _) = send(&|c| {
        c.request(reqwest::Method::OPTIONS, url("/jobs"))
            .header("origin", "http://evil.example")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
    });
    assert!(
        !(200..300).contains(&status) && !cors,
        "preflight: {status}"
    );
    // A Host that is not the runner's (DNS rebinding): refused before the token.
    let port = runner.url.rsplit(':').next().expect("port").to_string();
    let get = |host: &str| {
        raw_request(
            &runner.url,
            &format!(
                "GET /jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
                runner.token
            ),
        )
    };
    let (status, answer) = get(&format!("evil.example:{port}"));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not this server's address"), "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("access-control-"),
        "{answer}"
    );
    assert_eq!(get(&format!("localhost:{port}")).0, 200);
    assert_eq!(get(&format!("127.0.0.1:{port}")).0, 200);
    // Nothing of the above ran anything.
    assert!(rt()
        .block_on(runner.client().list())
        .expect("GET /jobs")
        .is_empty());
    // The token and a JSON body: created.
    let (status, _, text) = send(&|c| c.post(url("/jobs")).bearer_auth(&runner.token).json(&job));
    assert_eq!(status, 201, "{text}");
    // The CLI on the data directory reads the token file; for another URL it does not
    // send it.
    let out = run_brook_ok(&mut runner.cli(&["jobs", "--json"]));
    let jobs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(jobs.len(), 1);
    let err = run_brook_err(
        Command::new(BROOK)
            .arg("--data-dir")
            .arg(&data)
            .args(["jobs", "--runner", &format!("http://localhost:{port}")])
            .env_remove("BROOK_RUNNER_TOKEN"),
    );
    assert!(err.contains("token"));
    run_brook_ok(&mut runner.cli(&["cancel", "sleeper-1"]));
    // The runner logged each step with the job's id.
    let log = runner.log();
    for line in [
        "job submitted job=sleeper-1",
        "job process started job=sleeper-1 attempt=1",
        "cancel requested job=sleeper-1",
        "job canceled job=sleeper-1",
    ] {
        assert!(log.contains(line), "{line:?} in:\n{log}");
    }
    // The next start keeps the token.
    let token = runner.token.clone();
    runner.kill();
    let runner = Runner::start(&data, None);
    assert_eq!(runner.token, token);
}

#[test]
fn a_runner_on_a_non_loopback_address_needs_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_brook_err(
        Command::new(BROOK)
            .arg("--data-dir")
            .arg(dir.path())
            .args(["runner", "--listen", "0.0.0.0:0"])
            .env_remove("BROOK_RUNNER_TOKEN")
            .stdin(Stdio::null()),
    );
    assert!(err.contains("needs a token"), "{err}");
}

#[test]
fn ids_and_names_that_would_leave_the_data_directory_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = Runner::start(&dir.path().join("data"), None);
    let code = |method: &str, path: &str, body: Option<serde_json::Value>| {
        rt().block_on(async {
            let c = reqwest::Client::new();
            let url = format!("{}{path}", runner.url);
            let req = if method == "GET" {
                c.get(url)
            } else {
                c.post(url)
            };
            let req = match body {
                Some(b) => req.json(&b),
                None => req,
            };
            let r = req.bearer_auth(&runner.token).send().await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.text().await?))
        })
        .expect("request")
    };
    for id in ["..%2Fx", "a%2Fb", "A", "x%00", "a.b"] {
        let (status, body) = code("GET", &format!("/jobs/{id}"), None);
        assert_eq!(status, 400, "GET {id}");
        assert!(body.contains("job id"), "{body}");
        let (status, _) = code(
            "POST",
            &format!("/jobs/{id}/cancel"),
            Some(serde_json::json!({})),
        );
        assert_eq!(status, 400, "cancel {id}");
    }
    assert_eq!(code("GET", "/jobs/no-such-job", None).0, 404);
    let spec = "name: x\nsources: [{name: g, connector: generator, count: 10}]\nsinks: [{name: o, connector: file, path: o.jsonl}]\n";
    let spec_dir = dir.path().to_string_lossy().into_owned();
    for name in ["../x", "a/b", "..", ""] {
        let body = serde_json::json!({
            "name": name,
            "job": { "kind": "yaml", "spec": spec, "base_dir": spec_dir },
        });
        let (status, text) = code("POST", "/jobs", Some(body));
        assert_eq!(status, 400, "name {name:?}");
        assert!(text.contains("job"), "{text}");
    }
    // A spec whose own name would escape.
    let body = serde_json::json!({
        "job": { "kind": "yaml", "spec": spec.replace("name: x", "name: ../x"), "base_dir": spec_dir },
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("path separator"), "{text}");
    // A broken spec gets `brook run`'s message, not a complaint about its name.
    let body = serde_json::json!({
        "job": { "kind": "yaml", "spec": "name: x\nsources: [\n", "base_dir": spec_dir },
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("invalid job spec") && !text.contains("no name"),
        "{text}"
    );
    // A Kafka group-mode job (one process per machine, not under the runner yet).
    let group = "name: g\ncheckpoint_interval: 1s\nsources:\n  - {name: s, connector: kafka, bootstrap: '127.0.0.1:9', topic: t, group: g, assignment: group}\nsinks:\n  - {name: o, connector: kafka, bootstrap: '127.0.0.1:9', topic: o}\n";
    let body = serde_json::json!({
        "job": { "kind": "yaml", "spec": group, "base_dir": spec_dir },
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("assignment: group"), "{text}");
    // A binary that cannot be executed is refused at once.
    let not_exe = dir.path().join("job.yaml");
    std::fs::write(&not_exe, spec).expect("write a file");
    let body = serde_json::json!({
        "job": { "kind": "bin", "path": not_exe, "args": [] },
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not executable"), "{text}");
    // A savepoint outside the data directory.
    let body = serde_json::json!({
        "job": { "kind": "yaml", "spec": spec, "base_dir": spec_dir },
        "from_savepoint": "/etc",
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("inside the runner's data directory"),
        "{text}"
    );
    // The same spec is fine otherwise: the refusals above were about the names.
    let body = serde_json::json!({
        "job": { "kind": "yaml", "spec": spec, "base_dir": spec_dir },
    });
    let (status, text) = code("POST", "/jobs", Some(body));
    assert_eq!(status, 201, "{text}");
    assert!(
        !dir.path().join("x").exists() && !dir.path().join("data/runner/x").exists(),
        "nothing was written outside the jobs' directories"
    );
    let jobs = rt().block_on(runner.client().list()).expect("GET /jobs");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, "x-1");
}

/// A job following topic `events` into `sink` (YAML flow mapping), checkpointing every
/// 200 ms.
fn follow_spec(dir: &Path, name: &str, sink: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {name}\ncheckpoint_interval: 200ms\nsources:\n  - {{name: events, connector: log, topic: events, bounded: false}}\nsinks:\n  - {sink}\n"
        ),
    )
    .expect("write the spec");
    path
}

#[test]
fn jobs_sharing_the_data_directory_run_at_once_through_the_runners_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    produce(&data);
    let to_file = follow_spec(
        dir.path(),
        "copy",
        "{name: o, connector: file, path: copy/events.jsonl}",
    );
    let to_log = follow_spec(
        dir.path(),
        "relay",
        "{name: o, connector: log, topic: out, key_field: key}",
    );
    let runner = Runner::start(&data, None);
    // The runner serves the log (its broker's address is in the data directory).
    let bootstrap = wait_for("broker.addr", Duration::from_secs(20), || {
        brook_broker::read_address(&data)
    })
    .to_string();
    let first = runner.submit(&[&to_file.to_string_lossy(), "--restart", "none"]);
    // Another live job of the same name would share its log sink's transactional ids.
    let err = run_brook_err(&mut runner.cli(&["submit", &to_file.to_string_lossy()]));
    assert!(err.contains("same name"), "{err}");
    // Under another name it would still write the same file as the live copy job.
    let err =
        run_brook_err(&mut runner.cli(&["submit", &to_file.to_string_lossy(), "--name", "copy2"]));
    assert!(err.contains("copy/events.jsonl too"), "{err}");
    let second = runner.submit(&[&to_log.to_string_lossy(), "--restart", "none"]);
    // Both read `events` at the same time: neither waits for the other (before the
    // runner served the log, the second waited as long as the first held it).
    runner.wait_for_checkpoint(&first, 1);
    runner.wait_for_checkpoint(&second, 1);
    let copied = dir.path().join("copy/events.jsonl");
    wait_for(
        "the copy job's committed file",
        Duration::from_secs(60),
        || {
            let n = std::fs::read_to_string(&copied).ok()?.lines().count();
            (n == EVENTS as usize).then_some(())
        },
    );
    wait_for(
        "the relay job's committed topic",
        Duration::from_secs(60),
        || {
            let n = brook::kafka::admin::read_to_end(&bootstrap, "out", true)
                .ok()?
                .len();
            (n == EVENTS as usize).then_some(())
        },
    );
    // A brook command beside them goes through the runner's broker.
    let out =
        run_brook_ok(&mut runner.cli(&["consume", "events", "--from-beginning", "--max", "3"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    for id in [&first, &second] {
        let d = runner.job(id);
        assert_eq!(d.summary.state, JobState::Running, "{d:?}");
        assert_eq!(d.summary.attempts, 1, "{d:?}");
        assert!(
            d.attempt_history.iter().all(|a| a.outcome.is_none()),
            "no attempt ended (none waited): {d:?}"
        );
    }
    for id in [&first, &second] {
        run_brook_ok(&mut runner.cli(&["cancel", id]));
        runner.wait_for_state(id, JobState::Canceled);
    }
}

#[test]
fn a_failing_job_is_restarted_by_its_strategy_then_failed_with_its_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = Runner::start(&dir.path().join("data"), None);
    let id = runner.submit(&[
        "--bin",
        "/bin/sh",
        "--name",
        "boom",
        "--restart",
        "exponential:initial=50ms,max=200ms,multiplier=2,attempts=2",
        "--",
        "-c",
        "echo \"boom in $BROOK_JOB_ID\" >&2; exit 3",
    ]);
    let d = runner.wait_for_state(&id, JobState::Failed);
    assert_eq!(d.summary.attempts, 3, "the first run and 2 restarts: {d:?}");
    for a in &d.attempt_history {
        assert_eq!(a.outcome.as_deref(), Some("exit code 3"), "{a:?}");
        let tail = a.stderr_tail.as_deref().unwrap_or("");
        assert_eq!(tail, format!("boom in {id}"), "each attempt's own stderr");
    }
    // The delays grew: 50 ms, then 100 ms.
    let h = &d.attempt_history;
    let gap = |i: usize| h[i].started_ms - h[i - 1].ended_ms.expect("ended");
    assert!(gap(1) >= 50 && gap(2) >= 100, "{} {}", gap(1), gap(2));
    let out = run_brook(&mut runner.cli(&["jobs"]));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&id) && table.contains("FAILED") && table.contains("exit code 3"),
        "{table}"
    );
    let out = run_brook(&mut runner.cli(&["job", &id]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("boom in"), "{text}");
    // The runner's log tells the story, with the job's id.
    let log = runner.log();
    let count = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count(&format!("job submitted job={id}")), 1, "{log}");
    assert_eq!(count(&format!("job process started job={id}")), 3, "{log}");
    assert_eq!(count(&format!("restarting the job job={id}")), 2, "{log}");
    assert_eq!(
        count(&format!(
            "the job failed (its restart strategy gave up) job={id}"
        )),
        1,
        "{log}"
    );
    assert!(log.contains("cause=exit code 3"), "{log}");
}

/// A runner that serves the log (`--broker-listen`) puts the log's per-partition gauges
/// into its `/metrics` (brook::log_metrics): a segment kept past time retention by a
/// future timestamp shows as 1.
#[test]
fn metrics_of_a_runner_serving_the_log_count_segments_held_by_future_timestamps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    brook_testkit::future_segment::segment_held_by_a_future_timestamp(&data, "t");
    let runner = Runner::start(&data, None);
    let held = "brook_log_segments_held_by_future_timestamps{topic=\"t\",partition=\"0\"}";
    // The log's retention pass runs every second.
    let body = wait_for(
        "the held segment in /metrics",
        Duration::from_secs(20),
        || {
            let body = runner.metrics();
            (brook_testkit::metrics::metric(&body, held) == Some(1.0)).then_some(body)
        },
    );
    assert!(
        body.contains("brook_log_end_offset{topic=\"t\",partition=\"0\"} 2"),
        "{body}"
    );
}
