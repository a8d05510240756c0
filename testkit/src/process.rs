//! A `brook` child process while it runs: waiting for a condition, waiting a bounded
//! time for its end, and not leaving it behind when a test fails.

use std::process::{Child, Output};
use std::time::Duration;

use brook_core::time::Stopwatch;

/// Polls `f` every 20 ms until it returns a value; fails the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Stopwatch::start();
    loop {
        if let Some(v) = f() {
            return v;
        }
        let elapsed = Duration::from_nanos(start.elapsed_nanos());
        assert!(elapsed < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `limit` for `child` to exit (polling every 50 ms: a count, not a clock
/// read), then collects what it wrote to its piped outputs: `Ok` when it exited in
/// time, `Err` when it was still running and was killed (SIGKILL) at the limit.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Result<Output, Output> {
    for _ in 0..limit.as_millis().div_ceil(50) {
        if child.try_wait().expect("poll the child").is_some() {
            return Ok(child.wait_with_output().expect("collect the output"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    Err(child.wait_with_output().expect("collect the output"))
}

/// A child process killed (SIGKILL) and reaped when dropped, so a test that fails while
/// a `brook` that never ends on its own (a followed file, an unbounded topic) runs
/// does not leave it running for the rest of the suite.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Already ended (or never killable): nothing left to stop.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
