//! `brook nexmark --query Q --kill-after D --rate R --checkpoint-interval C`: runs the
//! query in a child process, SIGKILLs it after `D`, restores it from its latest
//! checkpoint in a second child that keeps the first one's rate schedule (so it has to
//! catch up with the events that fell due meanwhile), and prints how long until the
//! output was current again (brook_nexmark::recovery has the rule).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use brook::core::config::parse_duration_ms;
use brook::core::time::{Clock, Millis, SystemClock};
use brook::engine::latest_complete;
use brook::nexmark::latency::parse_intervals;
use brook::nexmark::recovery::recovery;
use brook::nexmark::run::Query;

use super::nexmark::{state_name, NexmarkArgs};

/// How much of the time before the kill is warm-up, left out of the bar: the first
/// half (the source's start, the first checkpoints).
const WARM_UP_SHARE: f64 = 0.5;

/// Runs, kills, restores and prints the recovery.
pub(crate) fn kill_and_recover(args: &NexmarkArgs, query: Query) -> Result<()> {
    let kill_text = args.kill_after.as_deref().unwrap_or_default();
    let kill_after = parse_duration_ms(kill_text)
        .map_err(|e| anyhow::anyhow!("--kill-after {kill_text:?}: {e}"))?;
    if kill_after <= 0 {
        bail!("--kill-after {kill_text:?}: must be positive");
    }
    let (Some(rate), Some(interval)) = (args.rate, args.checkpoint_interval.as_deref()) else {
        bail!("--kill-after needs --rate and --checkpoint-interval");
    };
    let scratch = tempfile::Builder::new()
        .prefix("brook-nexmark-recovery-")
        .tempdir()
        .context("creating a temporary directory for state and checkpoints")?;
    let dir = scratch.path();
    let log = dir.join("intervals.txt");
    let origin = SystemClock.now_ms();
    let exe = std::env::current_exe().context("finding the brook binary")?;
    let child = |restore: bool, out: &str| -> Result<Command> {
        let mut c = Command::new(&exe);
        c.arg("nexmark")
            .args(["--query", query.name()])
            .args(["--events", &args.events.to_string()])
            .args(["--parallelism", &args.parallelism.to_string()])
            .args(["--rate", &rate.to_string()])
            .args(["--state", state_name(args.state)])
            .args(["--checkpoint-interval", interval])
            .arg("--scratch-dir")
            .arg(dir)
            .arg("--interval-log")
            .arg(&log)
            .args(["--schedule-origin-ms", &origin.to_string()]);
        if restore {
            c.arg("--restore-latest");
        }
        c.stdin(Stdio::null())
            .stdout(file(&dir.join(format!("{out}.out")))?)
            .stderr(file(&dir.join(format!("{out}.err")))?);
        Ok(c)
    };

    let mut first = child(false, "first")?
        .spawn()
        .context("starting the first run")?;
    std::thread::sleep(Duration::from_millis(kill_after as u64));
    if let Some(status) = first.try_wait().context("waiting for the first run")? {
        bail!(
            "the run ended ({status}) before --kill-after {kill_text}: raise --events{}",
            tail(&dir.join("first.err"))
        );
    }
    // Child::kill is SIGKILL on Unix: no shutdown, no last checkpoint.
    first.kill().context("killing the first run")?;
    let kill_ms = SystemClock.now_ms();
    let _ = first.wait();
    let checkpoints = dir.join("checkpoints");
    let restored = latest_complete(&checkpoints).context(
        "no checkpoint completed before the kill: raise --kill-after or lower --checkpoint-interval",
    )?;
    let checkpoint_bytes = dir_size(&checkpoints);

    let status = child(true, "second")?
        .status()
        .context("starting the restored run")?;
    if !status.success() {
        bail!(
            "the restored run failed ({status}){}",
            tail(&dir.join("second.err"))
        );
    }
    let text =
        std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    let lines = parse_intervals(&text);
    let steady_ms = origin + (kill_after as f64 * WARM_UP_SHARE) as Millis;
    let r = recovery(&lines, steady_ms, kill_ms)?;
    let second = std::fs::read_to_string(dir.join("second.out")).unwrap_or_default();
    let rows = second
        .lines()
        .find_map(|l| l.strip_prefix("rows out"))
        .map_or("?", str::trim);

    let ms = |v: Option<Millis>| v.map_or_else(|| "never".to_string(), |v| format!("+{v} ms"));
    println!("query            {}", query.name());
    println!("parallelism      {}", args.parallelism);
    println!("rate             {rate:.0} events/s");
    println!("state            {}", state_name(args.state));
    println!("checkpoints      every {interval}");
    println!("killed after     {kill_after} ms (SIGKILL)");
    println!(
        "restored         checkpoint {} ({checkpoint_bytes} bytes in the checkpoint directory)",
        restored.id
    );
    println!(
        "p99 before       {:.3} ms (the worst of {} intervals of 100 ms after the warm-up)",
        r.bar_us as f64 / 1000.0,
        r.steady_intervals
    );
    println!("first result     {} after the kill", ms(r.first_result_ms));
    println!(
        "current again    {} after the kill (the first 100 ms with p99 <= before)",
        ms(r.current_ms)
    );
    println!("rows after       {rows} (the restored run)");
    Ok(())
}

fn file(path: &Path) -> Result<std::fs::File> {
    std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))
}

/// The last lines of a child's stderr, for an error.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(5);
    if lines.is_empty() {
        String::new()
    } else {
        format!(":\n{}", lines[start..].join("\n"))
    }
}

/// Bytes of the files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}
