//! A `brook runner` child process on a free port, for tests of its HTTP service.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{wait_for, KillOnDrop};

/// A running `brook runner` (SIGKILLed when dropped).
#[derive(Debug)]
pub struct RunnerProcess {
    /// The process.
    pub child: KillOnDrop,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The token it made in its data directory.
    pub token: String,
}

impl RunnerProcess {
    /// Starts `brook --data-dir DATA runner --listen 127.0.0.1:0 EXTRA...` (the
    /// `brook` command `cmd` with the data directory set, as from
    /// [`crate::binary::brook_command`]), its stderr appended to `log`; waits for its
    /// address and reads its token from the data directory.
    pub fn start(mut cmd: Command, data: &Path, extra: &[&str], log: &Path) -> RunnerProcess {
        std::fs::create_dir_all(data).expect("data dir");
        let address = data.join("runner").join("address");
        let _ = std::fs::remove_file(&address);
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("the runner's log file");
        cmd.args(["runner", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("BROOK_RUNNER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = KillOnDrop(cmd.spawn().expect("start the runner"));
        let addr = wait_for("the runner's address", Duration::from_secs(20), || {
            std::fs::read_to_string(&address)
                .ok()
                .filter(|a| !a.is_empty())
        });
        // The runner writes its token before its address.
        let token = std::fs::read_to_string(data.join("runner").join("token"))
            .expect("the runner's token file")
            .trim()
            .to_string();
        RunnerProcess {
            child,
            url: format!("http://{addr}"),
            token,
        }
    }
}
