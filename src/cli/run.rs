//! `brook run job.yaml`: runs a YAML job in the foreground.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use brook::engine::metrics::{JobMetrics, OperatorMetrics, VertexMetrics};
use brook::engine::JobResult;
use brook::engine::{
    latest_complete, CheckpointConfig, EngineError, JobConfig, RestoredCheckpoint,
    StateBackendFactory,
};
use brook::log::{Log, LogError};
use brook::runner::lock::{holder, LockError, ProcessLock};
use brook::runner::ChildContext;
use brook::spec::{self, JobLog, SinkSpec, SourceSpec};
use brook::state::RocksDbOptions;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::log_access::LogAccess;
use super::remote_log::RemoteLog;
use super::totals::totals;

/// Arguments of `brook run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The job spec (YAML).
    spec: PathBuf,
    /// Default parallelism of every source, step and sink (overrides the spec's).
    #[arg(long)]
    parallelism: Option<u32>,
    /// Changes the spec before it runs: a dotted path and a YAML value, such as
    /// `sources.sales.path=other.jsonl` or `steps.0.filter='price > 100'` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics while the job runs.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Serve the web dashboard of this job at http://ADDR/ (loopback only) while it
    /// runs; a one-time login link is printed on stderr at the start.
    #[arg(long, value_name = "ADDR")]
    ui: Option<SocketAddr>,
    /// No progress bar and no summary.
    #[arg(long, short)]
    quiet: bool,
    /// Take a checkpoint this often (`500ms`, `10s`, ...; overrides the spec's
    /// `checkpoint_interval`).
    #[arg(long, value_name = "DURATION")]
    checkpoint_interval: Option<String>,
    /// Where keyed state lives: `rocksdb` (the default; under
    /// `<data-dir>/state/<job name>`) or `memory`. Overrides the spec's `state_backend`.
    #[arg(long, value_enum, value_name = "rocksdb|memory")]
    state_backend: Option<spec::StateBackendKind>,
    /// Where checkpoints go (default: `<data-dir>/checkpoints/<job name>`).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Resume from a checkpoint: `latest` (the newest complete one in the checkpoint
    /// directory) or the path of a `chk-<id>` directory.
    #[arg(long, value_name = "latest|PATH")]
    restore: Option<String>,
    /// On Ctrl-C, take a savepoint into a new directory under DIR before stopping
    /// (Flink's stop-with-savepoint); resume later with `--restore DIR/savepoint-<id>`.
    #[arg(long, value_name = "DIR")]
    savepoint_dir: Option<PathBuf>,
    /// Relative paths in the spec are relative to DIR (default: the spec's directory).
    #[arg(long, value_name = "DIR")]
    base_dir: Option<PathBuf>,
}

/// Checkpointing and restore settings from the command line and the spec.
fn checkpoint_config(
    args: &RunArgs,
    spec: &spec::JobSpec,
    data_dir: &std::path::Path,
    runner: Option<&ChildContext>,
) -> Result<JobConfig> {
    let state_backend = match args.state_backend.or(spec.state_backend) {
        Some(spec::StateBackendKind::Memory) => StateBackendFactory::memory(),
        Some(spec::StateBackendKind::Rocksdb) | None => StateBackendFactory::rocksdb(
            // Under a runner each job has its own state directory, whatever its name.
            runner.map_or_else(
                || data_dir.join("state").join(&spec.name),
                |r| r.state_dir.clone(),
            ),
            RocksDbOptions::default(),
        ),
    };
    let mut config = JobConfig {
        state_backend,
        ..JobConfig::default()
    };
    let interval = checkpoint_interval(args, spec)?;
    let dir = args
        .checkpoint_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("checkpoints").join(&spec.name));
    if let Some(ms) = interval {
        if ms <= 0 {
            anyhow::bail!("the checkpoint interval must be positive");
        }
        config.checkpoint = Some(CheckpointConfig::new(&dir, ms));
    }
    if args.savepoint_dir.is_some() && config.checkpoint.is_none() {
        anyhow::bail!(
            "--savepoint-dir needs checkpoints: set --checkpoint-interval (or checkpoint_interval in the spec)"
        );
    }
    if let Some(r) = &args.restore {
        let cp = if r == "latest" {
            latest_complete(&dir)
        } else {
            RestoredCheckpoint::load(std::path::Path::new(r))
        }
        .with_context(|| format!("--restore {r}"))?;
        eprintln!("restoring checkpoint {} from {}", cp.id, cp.path.display());
        config.restore = Some(std::sync::Arc::new(cp));
    }
    if let Some(r) = runner {
        // The runner's checkpoint directory and restore point win over the flags'.
        r.configure(&mut config)?;
    }
    Ok(config)
}

/// The checkpoint interval (ms) from `--checkpoint-interval` or the spec.
fn checkpoint_interval(args: &RunArgs, spec: &spec::JobSpec) -> Result<Option<i64>> {
    Ok(match &args.checkpoint_interval {
        Some(t) => Some(
            brook::core::config::parse_duration_ms(t)
                .map_err(|e| anyhow::anyhow!("--checkpoint-interval {t:?}: {e}"))?,
        ),
        None => spec.checkpoint_interval_ms()?,
    })
}

/// One `brook run` per job name and data directory at a time (`<data-dir>/jobs/<name>.lock`,
/// held until the process ends): two would share the job's default state and checkpoint
/// directories and its log sinks' transactional ids (`<name>.<sink>.<subtask>`), and one
/// would fail mid-run when the other commits ("the pending part ... is gone").
fn hold_job_lock(data_dir: &std::path::Path, name: &str) -> Result<ProcessLock> {
    let dir = data_dir.join("jobs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The name is checked (no path separators) by spec::validate.
    let path = dir.join(format!("{name}.lock"));
    ProcessLock::try_acquire(&path).map_err(|e| match e {
        LockError::Held { pid, .. } => anyhow::anyhow!(
            "job {name} is already running on data directory {} ({} holds {}): wait for it to end or stop it, or run this one under another name with its own outputs (--set name=... --set sinks.NAME.path=...)",
            data_dir.display(),
            holder(pid),
            path.display()
        ),
        other => anyhow::Error::new(other),
    })
}

/// The files a job writes (its file sinks' paths and its dead-letter file), each with
/// the spec field that names it and the `--set` key that moves it.
fn output_files(spec: &spec::JobSpec) -> Vec<(String, String, PathBuf)> {
    let mut files: Vec<(String, String, PathBuf)> = spec
        .sinks
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            SinkSpec::File { path, .. } => Some((
                format!("sinks[{i}] ({}).path", s.name()),
                format!("sinks.{}.path", s.name()),
                path.clone(),
            )),
            _ => None,
        })
        .collect();
    if let Some(d) = &spec.dead_letter {
        files.push(("dead_letter".into(), "dead_letter".into(), d.clone()));
    }
    files
}

/// The lock of an output file: `.{name}.lock` next to it (where its writers' pending
/// parts `.{name}.{subtask}.part-{n}` are), so it also keeps apart runs on other data
/// directories and under other job names.
fn output_lock_path(path: &std::path::Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.lock"))
}

/// One `brook run` writes an output file at a time (each file sink's `path` and the
/// dead-letter file, held until the process ends): two runs under different names
/// writing one file cut each other's output back to their own committed lengths on
/// commit and restore, and one fails mid-run ("the file has N bytes, fewer than the M
/// committed before it"). The runner refuses such a job at submit (409) instead.
fn hold_output_locks(spec: &spec::JobSpec) -> Result<Vec<ProcessLock>> {
    let mut locks = Vec::new();
    for (field, key, path) in output_files(spec) {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The sink would create it anyway.
            std::fs::create_dir_all(dir)
                .with_context(|| format!("{field}: creating {}", dir.display()))?;
        }
        let lock = output_lock_path(&path);
        locks.push(ProcessLock::try_acquire(&lock).map_err(|e| match e {
            LockError::Held { pid, .. } => anyhow::anyhow!(
                "{field}: {} is being written by another run ({} holds {}): wait for it to end, or write elsewhere (--set {key}=...)",
                path.display(),
                holder(pid),
                lock.display()
            ),
            other => anyhow::Error::new(other).context(field),
        })?);
    }
    Ok(locks)
}

/// A job whose Kafka source has `assignment: group`: this process becomes one of the
/// group's workers (see `group_worker`).
fn run_group(
    args: &RunArgs,
    valid: spec::ValidSpec,
    source: spec::GroupSource,
    data_dir: &std::path::Path,
) -> Result<()> {
    let name = valid.spec.name.clone();
    if args.restore.is_some() {
        anyhow::bail!(
            "--restore: with assignment: group each partition resumes from its latest checkpoint by itself"
        );
    }
    if args.savepoint_dir.is_some() {
        anyhow::bail!("--savepoint-dir: not available with assignment: group (each partition stops with a checkpoint)");
    }
    if args.metrics_addr.is_some() {
        anyhow::bail!("--metrics-addr: not available with assignment: group yet");
    }
    if args.ui.is_some() {
        anyhow::bail!("--ui: not available with assignment: group yet");
    }
    let interval_ms = match checkpoint_interval(args, &valid.spec)? {
        Some(ms) if ms > 0 => ms,
        _ => anyhow::bail!(
            "assignment: group needs checkpoints (partitions move between processes with them): set checkpoint_interval or --checkpoint-interval"
        ),
    };
    // Every process of the job must see every partition's checkpoints: a default
    // under each process's own data directory would silently restart moved
    // partitions from their start.
    let Some(checkpoint_root) = args.checkpoint_dir.clone() else {
        anyhow::bail!(
            "assignment: group needs --checkpoint-dir: a directory every process of the job shares (partitions move between processes with their checkpoints)"
        );
    };
    let rocksdb_dir = match args.state_backend.or(valid.spec.state_backend) {
        Some(spec::StateBackendKind::Memory) => None,
        Some(spec::StateBackendKind::Rocksdb) | None => Some(data_dir.join("state").join(&name)),
    };
    super::group_worker::run(super::group_worker::GroupRun {
        checkpoint_root,
        valid,
        source,
        interval_ms,
        rocksdb_dir,
        quiet: args.quiet,
    })
    .with_context(|| format!("job {name} (consumer group worker)"))
}

fn uses_log(spec: &spec::JobSpec) -> bool {
    spec.sources
        .iter()
        .any(|s| matches!(s, SourceSpec::Log { .. }))
        || spec.sinks.iter().any(|s| matches!(s, SinkSpec::Log { .. }))
        || spec.steps.iter().any(|s| {
            matches!(
                s.enrich,
                Some(spec::EnrichSpec {
                    table: spec::TableSpec::Log { .. },
                    ..
                })
            )
        })
}

/// The topics of the job's `log` sources, sinks and lookup tables exist on the broker
/// (in-process the build checks them, with the same messages; the Kafka connectors
/// would only fail once the job runs).
fn check_served_topics(spec: &spec::JobSpec, remote: &RemoteLog) -> Result<()> {
    let topics = remote.topics()?;
    let known = |t: &String| topics.contains(t);
    let sources = spec
        .sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            SourceSpec::Log { topic, .. } => Some((format!("sources[{i}] ({})", s.name()), topic)),
            _ => None,
        });
    let sinks = spec.sinks.iter().enumerate().filter_map(|(i, s)| match s {
        SinkSpec::Log { topic, .. } => Some((format!("sinks[{i}] ({})", s.name()), topic)),
        _ => None,
    });
    // Named as the build names steps (`step-<n>` by default).
    let tables = spec
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match &s.enrich {
            Some(spec::EnrichSpec {
                table: spec::TableSpec::Log { topic, .. },
                ..
            }) => {
                let name = s.name.clone().unwrap_or_else(|| format!("step-{}", i + 1));
                Some((format!("{name}.enrich.table"), topic))
            }
            _ => None,
        });
    for (field, topic) in sources.chain(sinks).chain(tables) {
        if !known(topic) {
            anyhow::bail!("{field}.topic: {}", LogError::UnknownTopic(topic.clone()));
        }
    }
    Ok(())
}

/// The job spec at `path` with the `--set` changes applied (not yet validated).
pub(crate) fn read_spec(path: &std::path::Path, set: &[String]) -> Result<spec::JobSpec> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(if set.is_empty() {
        // Straight from the text, so errors carry line and column.
        spec::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    } else {
        let mut doc: serde_norway::Value = serde_norway::from_str(&text)
            .with_context(|| format!("{}: not valid YAML", path.display()))?;
        for s in set {
            spec::apply_set(&mut doc, s)?;
        }
        serde_norway::from_value(doc)
            .map_err(|e| anyhow::anyhow!("{} (after --set): {e}", path.display()))?
    })
}

pub(crate) fn run(
    args: RunArgs,
    data_dir: &std::path::Path,
    open_log: impl FnOnce() -> Result<Log>,
) -> Result<()> {
    let runner = ChildContext::from_env()?;
    if let Some(r) = &runner {
        // Before the log is opened: an earlier process of the job may still hold it.
        r.hold_lock()?;
    }
    let mut parsed = read_spec(&args.spec, &args.set)?;
    if let Some(p) = args.parallelism {
        parsed.parallelism = Some(p);
    }
    // Relative paths in the spec are relative to the spec's directory.
    let base = match &args.base_dir {
        Some(d) => d.clone(),
        None => args
            .spec
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default(),
    };
    let valid = spec::validate(spec::resolve_paths(parsed, &base))
        .with_context(|| format!("{}: invalid job spec", args.spec.display()))?;
    if let Some(source) = valid.group_source() {
        if runner.is_some() {
            anyhow::bail!(
                "a job with assignment: group does not run under the runner yet: start `brook run` on each machine"
            );
        }
        return run_group(&args, valid, source, data_dir);
    }
    // Under a runner the job's own lock (taken above) keeps its processes apart.
    let _lock = match &runner {
        Some(_) => None,
        None => Some(hold_job_lock(data_dir, &valid.spec.name)?),
    };
    let _outputs = match &runner {
        Some(_) => Vec::new(),
        None => hold_output_locks(&valid.spec)?,
    };
    // In-process, or through the broker that holds the data directory (`brook broker`,
    // `brook runner`): the job's log sources and sinks then speak the Kafka protocol.
    let log = if uses_log(&valid.spec) {
        Some(LogAccess::open(data_dir, open_log)?)
    } else {
        None
    };
    let job_log = match &log {
        None => None,
        Some(LogAccess::Local(log)) => Some(JobLog::Local(log)),
        Some(LogAccess::Remote(remote)) => {
            check_served_topics(&valid.spec, remote)
                .with_context(|| format!("{}: cannot build the job", args.spec.display()))?;
            if !args.quiet {
                eprintln!(
                    "job {}: the log of {} is served by a broker at {}: reading and writing through it",
                    valid.spec.name,
                    data_dir.display(),
                    remote.addr
                );
            }
            Some(JobLog::Served(remote.addr))
        }
    };
    let name = valid.spec.name.clone();
    let config = checkpoint_config(&args, &valid.spec, data_dir, runner.as_ref())?;
    let checkpoint_dir = config.checkpoint.as_ref().map(|c| c.dir.clone());
    let restored_from = config.restore.as_ref().map(|r| r.path.clone());
    let built = spec::build_on(&valid, config, job_log)
        .with_context(|| format!("{}: cannot build the job", args.spec.display()))?;
    // Everything that can fail is done before the job starts writing anywhere.
    let metrics = brook::engine::metrics::JobMetrics::default();
    // With the log in this process, its partitions' gauges too (through a broker, the
    // broker's endpoint has them).
    let held_log = match &log {
        Some(LogAccess::Local(log)) => Some(log.clone()),
        _ => None,
    };
    let _server = match args.metrics_addr {
        Some(addr) => {
            let m = metrics.clone();
            Some(super::metrics_http::serve(addr, move || {
                let mut text = m.prometheus();
                if let Some(log) = &held_log {
                    text.push_str(&brook::log_metrics::log_prometheus(log));
                }
                text
            })?)
        }
        None => None,
    };
    let _ui = match args.ui {
        Some(addr) => {
            let mut job = brook::ui::local::LocalJob::new(&name, metrics.clone());
            job.parallelism = valid.spec.parallelism;
            job.checkpoint_dir = checkpoint_dir.unwrap_or_default();
            job.restored_from = restored_from;
            let id = job.id.clone();
            let server = brook::ui::local::serve_local(addr, job, data_dir).context("--ui")?;
            // The way in: a link that works once; `brook ui` makes more.
            eprintln!(
                "dashboard of job {name}: open {} (the link works once; `brook ui {}` prints another)",
                server.link,
                id
            );
            Some(server)
        }
        None => None,
    };
    let job = built.env.start_with_metrics(&name, metrics.clone())?;
    if let Some(r) = &runner {
        // Supervised: status reports and the runner's commands instead of a terminal.
        let result = match r.supervise(job, &metrics) {
            Ok(Some(result)) => result,
            Ok(None) => {
                eprintln!("job {name} canceled");
                return Ok(());
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("job {name} failed"))),
        };
        if !args.quiet {
            summary(&name, &built, &metrics, &result);
        }
        return Ok(());
    }
    let bar = (!args.quiet && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut interrupted = false;
    let mut savepoint_failed = None;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        // Streams, not `tokio::signal::ctrl_c()`: a second signal must be seen too.
        let mut ctrl_c = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
        // SIGTERM (a service manager, `kill`) stops the job as Ctrl-C does: cleanly,
        // with a savepoint if asked, and the run's scratch state removed.
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        loop {
            if job.is_finished() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = async { tokio::select! { _ = ctrl_c.recv() => {}, _ = term.recv() => {} } } => {
                    if interrupted {
                        // A second Ctrl-C or SIGTERM: the user will not wait for a clean
                        // stop (as most CLIs do). 130 = 128 + SIGINT, the shell's code.
                        eprintln!("job {name}: stopping at once (second interrupt)");
                        std::process::exit(130);
                    }
                    interrupted = true;
                    eprintln!("stopping job {name} (Ctrl-C again to stop at once)");
                    if let Some(dir) = &args.savepoint_dir {
                        eprintln!("taking a savepoint before stopping");
                        // Blocking is fine: nothing else runs on this runtime.
                        let sp = job.savepoint(dir);
                        match sp {
                            Ok(p) => eprintln!("savepoint written to {}", p.display()),
                            Err(e) => savepoint_failed = Some(e),
                        }
                    }
                    job.cancel();
                }
            }
            if let Some(b) = &bar {
                let read = totals(&metrics, &built.sources, false);
                let written = totals(&metrics, &built.sinks, true);
                b.set_message(format!("read {read}  written {written}"));
                b.tick();
            }
        }
        Ok::<(), anyhow::Error>(())
    })?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let result = match job.join() {
        Ok(r) => r,
        Err(EngineError::Cancelled) if interrupted => {
            eprintln!("job {name} canceled");
            if let Some(e) = savepoint_failed {
                return Err(anyhow::Error::new(e).context(format!("job {name}: no savepoint")));
            }
            return Ok(());
        }
        // Its reader went away (`brook run job.yaml | head`): a normal end for a command
        // line program, said by no message (as `yes | head`).
        Err(_) if brook::connectors::stdout::stdout_closed() => return Ok(()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("job {name} failed"))),
    };
    if !args.quiet {
        summary(&name, &built, &metrics, &result);
    }
    Ok(())
}

fn summary(name: &str, built: &spec::BuiltJob, metrics: &JobMetrics, result: &JobResult) {
    {
        let read = totals(metrics, &built.sources, false);
        let written = totals(metrics, &built.sinks, true);
        let secs = (result.elapsed_ms as f64 / 1000.0).max(0.001);
        let skipped = built.bad_records.skipped();
        let dead = built.bad_records.dead_lettered();
        eprintln!("job {name} finished in {secs:.2} s");
        eprintln!(
            "  read            {read:>12} records ({:.0} records/s)",
            read as f64 / secs
        );
        eprintln!("  written         {written:>12} records");
        eprintln!("  skipped         {skipped:>12}");
        eprintln!("  dead-lettered   {dead:>12}");
        let late: u64 = result.vertices.iter().map(|(_, t)| t.late_records).sum();
        if late > 0 {
            eprintln!("  late            {late:>12} (too late for their windows)");
        }
        eprintln!(
            "  {:<24} {:>12} {:>12} {:>10} {:>14}",
            "operator", "records in", "records out", "busy ms", "backpressure ms"
        );
        for (n, t) in &result.vertices {
            eprintln!(
                "  {:<24} {:>12} {:>12} {:>10} {:>14}",
                n, t.records_in, t.records_out, t.busy_ms, t.backpressure_ms
            );
        }
        let parallel: Vec<_> = metrics
            .vertices()
            .into_iter()
            .filter(|v| v.subtasks.len() > 1)
            .collect();
        if !parallel.is_empty() {
            eprintln!(
                "  records in per subtask, out for sources (skew = max / mean; 1.00 is even)"
            );
            let load = |counter: fn(&OperatorMetrics) -> &AtomicU64, v: &VertexMetrics| {
                v.subtasks
                    .iter()
                    .map(|m| counter(m).load(Ordering::Relaxed))
                    .collect::<Vec<u64>>()
            };
            for v in parallel {
                let mut counts = load(|m| &m.records_in, &v);
                if counts.iter().all(|&n| n == 0) {
                    // A source: what each subtask read (its splits' records).
                    counts = load(|m| &m.records_out, &v);
                }
                let shown: Vec<String> = counts.iter().map(u64::to_string).collect();
                eprintln!(
                    "  {:<24} {:<40} skew {}",
                    v.name,
                    shown.join(" / "),
                    skew(&counts).map_or_else(|| "-".to_string(), |s| format!("{s:.2}"))
                );
            }
        }
    }
}

/// The largest count over the mean count (1.0 when the load is even, `n` when one of
/// `n` subtasks gets everything); `None` when there is nothing to compare.
fn skew(counts: &[u64]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    let max = counts.iter().copied().max()?;
    if total == 0 {
        return None;
    }
    Some(max as f64 * counts.len() as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::skew;

    #[test]
    fn skew_is_max_over_mean() {
        assert_eq!(skew(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(skew(&[8, 0, 0, 0]), Some(4.0));
        assert_eq!(skew(&[3, 1]), Some(1.5));
        assert_eq!(skew(&[0, 0]), None);
        assert_eq!(skew(&[]), None);
    }
}
