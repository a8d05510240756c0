//! Running the `brook` binary (or any command) to its end and checking how it ended.
//!
//! One place decides what a test prints when a command ends unexpectedly: the command
//! line, the exit status, stdout and stderr, so a failure is diagnosable from the test
//! log alone. The binary's path is the caller's: `env!("CARGO_BIN_EXE_brook")` exists
//! only in the root package's tests, so they build the [`Command`] and pass it in.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `brook --data-dir DATA ARGS...` of the binary at `bin`, without the caller's
/// `BROOK_LOG` and `BROOK_DATA_DIR` (so a developer's environment cannot change what a
/// test runs against).
pub fn brook_command(bin: &Path, data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("BROOK_LOG")
        .env_remove("BROOK_DATA_DIR");
    c
}

/// Runs `cmd` to its end and collects its output: stdin is empty (`/dev/null`) and
/// stdout and stderr are captured, unless `cmd` set them otherwise. Panics only when
/// the command cannot be started.
pub fn run_brook(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", command_line(cmd)))
}

/// Runs `cmd` to its end with `input` on its stdin, collecting stdout and stderr.
/// The input is written before the output is read: for inputs of a few KiB, below
/// a pipe's buffer.
pub fn run_brook_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", command_line(cmd)));
    if let Some(mut stdin) = child.stdin.take() {
        // A command that fails early may close stdin before reading it all: its exit
        // status and stderr say why, not this write's broken pipe.
        let _ = stdin.write_all(input);
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot collect the output of {}: {e}", command_line(cmd)))
}

/// Runs `cmd` (as [`run_brook`]) and returns its output; panics with the command line,
/// exit status, stdout and stderr unless it exited with status 0.
pub fn run_brook_ok(cmd: &mut Command) -> Output {
    let out = run_brook(cmd);
    expect_success(&command_line(cmd), &out);
    out
}

/// Runs `cmd` (as [`run_brook`]), which must fail, and returns its stderr (lossy UTF-8);
/// panics with the command line, exit status, stdout and stderr if it succeeded.
pub fn run_brook_err(cmd: &mut Command) -> String {
    let out = run_brook(cmd);
    expect_failure(&command_line(cmd), &out)
}

/// Panics with [`report`] unless `out` (of the command `what`) is a successful exit.
/// For outputs collected otherwise (a spawned child's `wait_with_output`).
pub fn expect_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        report(what, "expected success", out)
    );
}

/// Panics with [`report`] if `out` (of the command `what`) is a successful exit;
/// returns its stderr (lossy UTF-8) otherwise.
pub fn expect_failure(what: &str, out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        report(what, "expected a failure", out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command line of `cmd` as its `Debug` form shows it (the program, its arguments,
/// and a changed directory or environment).
pub fn command_line(cmd: &Command) -> String {
    format!("{cmd:?}")
}

/// What a test prints about a command that ended unexpectedly: `what` (its command
/// line), `expected`, its exit status (or the signal that ended it), stdout and stderr.
pub fn report(what: &str, expected: &str, out: &Output) -> String {
    format!(
        "{what}\n{expected}, got {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The path of the example binary `name` of the package whose test is running
/// (`target/<profile>/examples/<name>`, next to the test's `deps` folder). Examples
/// are built by `cargo test --all-targets` or `cargo build --examples`.
///
/// # Panics
/// If it has not been built (the message says how to build it).
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps");
    let bin = profile.join("examples").join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p brook --example {name}` (cargo test --all-targets does)",
        bin.display()
    );
    bin
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panic message of `f`, which must panic.
    fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let err = std::panic::catch_unwind(f).expect_err("it panics");
        err.downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn an_unexpected_failure_shows_the_command_line_status_stdout_and_stderr() {
        let msg = panic_message(|| {
            run_brook_ok(Command::new("sh").args(["-c", "echo to-out; echo to-err >&2; exit 3"]));
        });
        for part in ["\"sh\" \"-c\"", "exit status: 3", "to-out", "to-err"] {
            assert!(msg.contains(part), "{part:?} in:\n{msg}");
        }
    }

    #[test]
    fn an_unexpected_success_shows_the_command_line_and_stdout() {
        let msg = panic_message(|| {
            run_brook_err(Command::new("sh").args(["-c", "echo fine"]));
        });
        assert!(msg.contains("expected a failure"), "{msg}");
        assert!(msg.contains("\"sh\"") && msg.contains("fine"), "{msg}");
    }

    #[test]
    fn input_reaches_stdin_and_a_failure_returns_stderr() {
        let out = run_brook_with_input(&mut Command::new("cat"), b"hello");
        assert_eq!(out.stdout, b"hello");
        let err = run_brook_err(Command::new("sh").args(["-c", "echo nope >&2; exit 1"]));
        assert_eq!(err, "nope\n");
    }
}
