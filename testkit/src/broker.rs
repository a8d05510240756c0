//! A real `brook broker` child process for tests with Kafka clients, and
//! kafka-python installed for them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use brook_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use brook_kafka::rdkafka::client::DefaultClientContext;
use brook_kafka::rdkafka::ClientConfig;

use crate::process::{wait_bounded, KillOnDrop};

/// A `brook broker --listen 127.0.0.1:0` child on a data directory, killed (SIGKILL)
/// and reaped when dropped.
#[derive(Debug)]
pub struct BrokerProcess {
    /// The child.
    pub child: KillOnDrop,
    /// Where clients connect.
    pub addr: SocketAddr,
}

impl BrokerProcess {
    /// Starts `binary` (the `brook` executable) as a broker on `data_dir` with
    /// `--fsync always` and `extra` broker arguments, and waits (at most 30 s) for the
    /// address it writes into the data directory.
    ///
    /// # Panics
    /// If the broker exits or writes no address in time (a test failure).
    pub fn start(binary: &Path, data_dir: &Path, extra: &[&str]) -> BrokerProcess {
        Self::start_on(binary, data_dir, "127.0.0.1:0", extra, None)
    }

    /// As [`BrokerProcess::start`], listening on `listen`, with the broker's stderr
    /// (its log) written to `log` when given (else inherited).
    ///
    /// # Panics
    /// As [`BrokerProcess::start`], or if `log` cannot be created.
    pub fn start_on(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        extra: &[&str],
        log: Option<&Path>,
    ) -> BrokerProcess {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("create the broker log")),
            None => Stdio::inherit(),
        };
        // A broker SIGKILLed before leaves its address behind: waiting for the file
        // would find the dead broker's address, not this one's.
        let _ = std::fs::remove_file(brook_broker::address_file(data_dir));
        let child = Command::new(binary)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--fsync", "always", "broker", "--listen", listen])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start brook broker");
        let mut child = KillOnDrop(child);
        for _ in 0..600 {
            if let Some(addr) = brook_broker::read_address(data_dir) {
                return BrokerProcess { child, addr };
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("brook broker exited before serving: {status}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("brook broker wrote no broker.addr within 30 s");
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }
}

/// kafka-python installed (once per `target_tmpdir`) by `scripts/kafka-python.sh`
/// of the workspace at `manifest_dir`; the folder to put on `PYTHONPATH`.
///
/// # Panics
/// If the install fails.
pub fn kafka_python(target_tmpdir: &Path, manifest_dir: &Path) -> PathBuf {
    let dir = target_tmpdir.join("kafka-python");
    let status = Command::new("bash")
        .arg(manifest_dir.join("scripts/kafka-python.sh"))
        .arg(&dir)
        .status()
        .expect("run scripts/kafka-python.sh");
    assert!(
        status.success(),
        "installing kafka-python from PyPI failed: {status}"
    );
    dir
}

/// kcat's path, installed from Debian's packages by `scripts/kcat.sh` of the
/// workspace at `manifest_dir` if it is missing.
///
/// # Panics
/// If the install fails.
pub fn kcat(manifest_dir: &Path) -> PathBuf {
    let output = Command::new("bash")
        .arg(manifest_dir.join("scripts/kcat.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/kcat.sh");
    assert!(
        output.status.success(),
        "installing kcat failed: {}",
        output.status
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// `python3 <script>` with kafka-python on its `PYTHONPATH` (installed by
/// [`kafka_python`] into `target_tmpdir`); `script` is relative to `manifest_dir`.
pub fn kafka_python_command(target_tmpdir: &Path, manifest_dir: &Path, script: &str) -> Command {
    let python_path = kafka_python(target_tmpdir, manifest_dir);
    let mut cmd = Command::new("python3");
    cmd.arg(manifest_dir.join(script))
        .env("PYTHONPATH", python_path);
    cmd
}

/// Runs `cmd` (a client program, such as a [`kafka_python_command`]) to its end, at
/// most 60 s, its output captured.
///
/// # Panics
/// If it cannot start, fails or runs longer (a test failure), with its stdout and
/// stderr; `what` names it.
pub fn run_client_ok(mut cmd: Command, what: &str) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let (ok, output) = match wait_bounded(child, Duration::from_secs(60)) {
        Ok(o) => (o.status.success(), o),
        Err(o) => (false, o),
    };
    assert!(
        ok,
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// librdkafka's AdminClient for a test broker at `bootstrap`, and options for its
/// requests: each fails after 10 s rather than being retried.
///
/// # Panics
/// If the client cannot be created (a test failure).
pub fn admin_client(bootstrap: &str) -> (AdminClient<DefaultClientContext>, AdminOptions) {
    let admin = client_config(bootstrap).create().expect("admin client");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    (admin, options)
}

/// librdkafka settings for a client of a test broker at `bootstrap` (`host:port`): it
/// fails within 10 s instead of retrying for minutes when something is wrong.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .set("message.timeout.ms", "10000");
    c
}

/// Creates `name` with `partitions` partitions with librdkafka's AdminClient.
///
/// # Panics
/// If the request fails or the topic is not created within 10 s (a test failure).
pub fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        client_config(bootstrap).create().expect("admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let results = futures::executor::block_on(admin.create_topics(
        [&topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("CreateTopics");
    for r in results {
        r.expect("topic created");
    }
}
