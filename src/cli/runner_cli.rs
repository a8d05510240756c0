//! `brook runner` and its clients: `brook submit`, `jobs`, `job`, `cancel`, `resume`,
//! `ui`.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use brook::log::LogOptions;
use brook::runner::api::{
    JobDetail, JobKind, JobSummary, RestartStrategy, ResumeRequest, SubmitRequest,
};
use brook::runner::client::Client;
use brook::runner::{RunnerConfig, ENV_TOKEN};
use brook::ui::local::LocalDashboard;
use brook_broker::BrokerConfig;
use clap::Args;

/// Arguments of `brook runner`.
#[derive(Debug, Args)]
pub(crate) struct RunnerArgs {
    /// Where to listen (port 0: any free port, written to
    /// `<data-dir>/runner/address`). An address other than loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Token every request must carry (`Authorization: Bearer <token>`). Default: the
    /// one in `<data-dir>/runner/token`, made at the first start (mode 0600), which
    /// `brook submit`, `jobs`, ... on the same data directory read.
    #[arg(long, env = ENV_TOKEN, hide_env_values = true)]
    token: Option<String>,
    /// Where the runner serves the data directory's log over the Kafka protocol, as
    /// `brook broker --listen` (port 0: any free port). The address goes to
    /// `<data-dir>/broker.addr`: the runner's jobs, `brook topic/produce/consume/group`
    /// and any Kafka client reach the log there while the runner holds it.
    #[arg(long, default_value = "127.0.0.1:9092")]
    broker_listen: SocketAddr,
    /// Do not open or serve the log: each job process opens it itself, so jobs that
    /// use the log take turns with it (one waits while another holds it), as before
    /// the runner served it.
    #[arg(long, conflicts_with = "broker_listen")]
    no_broker: bool,
}

/// How a client reaches the runner.
#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    /// The runner's URL (`http://host:port` or `host:port`). Default: the address a
    /// runner on `--data-dir` wrote to `<data-dir>/runner/address`, else
    /// http://127.0.0.1:7070. The token is `$BROOK_RUNNER_TOKEN`, else (for the runner
    /// at that address only) `<data-dir>/runner/token`.
    #[arg(long, env = "BROOK_RUNNER")]
    runner: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Arguments of `brook submit`.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The job spec (YAML); or use --bin.
    #[arg(required_unless_present = "bin", conflicts_with = "bin")]
    spec: Option<PathBuf>,
    /// A job binary written with the builder API (see `brook::runner::execute`).
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// Arguments of the binary (after `--`).
    #[arg(last = true, requires = "bin")]
    args: Vec<String>,
    /// The job's name (default: the spec's name or the binary's file name).
    #[arg(long)]
    name: Option<String>,
    /// Default parallelism.
    #[arg(long)]
    parallelism: Option<u32>,
    /// `fixed:attempts=3,delay=1s` (the default), `exponential:initial=1s,max=5m,multiplier=2`
    /// (also `reset=1h`, `attempts=N`) or `none`.
    #[arg(long, value_name = "STRATEGY")]
    restart: Option<String>,
    /// Checkpoint interval when the job sets none (default 10s).
    #[arg(long, value_name = "DURATION")]
    checkpoint_interval: Option<String>,
    /// Start from this savepoint (a directory inside the runner's data directory).
    #[arg(long, value_name = "PATH")]
    from_savepoint: Option<PathBuf>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `brook jobs`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `brook job`.
#[derive(Debug, Args)]
pub(crate) struct JobArgs {
    /// The job's id.
    id: String,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `brook cancel`.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// The job's id.
    id: String,
    /// Take a savepoint first (stop with savepoint); resume later with `brook resume`.
    #[arg(long)]
    savepoint: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `brook resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The job's id (default: the job the savepoint belongs to).
    #[arg(required_unless_present = "from_savepoint")]
    id: Option<String>,
    /// Resume from this savepoint (default: the job's newest savepoint or checkpoint).
    #[arg(long, value_name = "PATH")]
    from_savepoint: Option<PathBuf>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Arguments of `brook ui`.
#[derive(Debug, Args)]
pub(crate) struct UiArgs {
    /// Open this job's page after the login (default: the Jobs page).
    job: Option<String>,
    /// Open the Topics and groups page after the login.
    #[arg(long, conflicts_with = "job")]
    topics: bool,
    #[command(flatten)]
    client: ClientArgs,
}

macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(io::stdout(), $($arg)*).context("writing to stdout")?
    };
}

/// `host:port` of a runner URL (`http://host:port/` or `host:port`).
fn authority(url: &str) -> &str {
    let url = url.split_once("://").map_or(url, |(_, rest)| rest);
    url.trim_end_matches('/')
}

fn client(args: &ClientArgs, data_dir: &Path) -> Client {
    let written = std::fs::read_to_string(data_dir.join("runner").join("address"))
        .ok()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty());
    let base = args
        .runner
        .clone()
        .or_else(|| written.clone())
        .unwrap_or_else(|| "http://127.0.0.1:7070".into());
    // The token file of the data directory belongs to the runner that wrote its address
    // there: sent to that runner only, never to another URL.
    let ours = written.is_some_and(|w| w == authority(&base));
    let token = std::env::var(ENV_TOKEN)
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| ours.then(|| brook::runner::read_token(data_dir)).flatten());
    Client::new(&base, token)
}

fn rt() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `brook runner`: opens the log with `log_options` and serves it (see
/// [`RunnerArgs::broker_listen`]) beside the HTTP API.
pub(crate) fn runner(args: RunnerArgs, data_dir: &Path, log_options: LogOptions) -> Result<()> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    // Job processes run in their own directories: they get absolute paths.
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("{}", data_dir.display()))?;
    let exe = std::env::current_exe().context("finding the brook executable")?;
    let config = RunnerConfig {
        listen: args.listen,
        data_dir,
        token: args.token,
        exe,
        broker: (!args.no_broker).then(|| BrokerConfig {
            listen: args.broker_listen,
            ..BrokerConfig::default()
        }),
        log_options,
    };
    let broker_addr = brook_broker::address_file(&config.data_dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        tokio::select! {
            r = brook::runner::serve(config) => r.context("runner"),
            // Jobs notice the runner is gone (their stdin closes) and stop; the next
            // runner on this data directory restarts them from their checkpoints.
            _ = tokio::signal::ctrl_c() => {
                // The broker stops with the runner: its address is stale.
                let _ = std::fs::remove_file(&broker_addr);
                Ok(())
            }
        }
    })
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(v).context("JSON")?);
    Ok(())
}

/// `brook submit`.
pub(crate) fn submit(args: SubmitArgs, data_dir: &Path) -> Result<()> {
    let job = match (&args.spec, &args.bin) {
        (Some(spec), None) => {
            let text = std::fs::read_to_string(spec)
                .with_context(|| format!("reading {}", spec.display()))?;
            let abs = std::path::absolute(spec).with_context(|| format!("{}", spec.display()))?;
            JobKind::Yaml {
                spec: text,
                base_dir: abs.parent().map(Path::to_path_buf).unwrap_or_default(),
            }
        }
        (None, Some(bin)) => JobKind::Bin {
            path: bin
                .canonicalize()
                .with_context(|| format!("--bin {}", bin.display()))?,
            args: args.args.clone(),
        },
        _ => bail!("give a spec or --bin PATH"),
    };
    let restart = args
        .restart
        .as_deref()
        .map(RestartStrategy::parse)
        .transpose()
        .context("--restart")?;
    let from_savepoint = args
        .from_savepoint
        .as_ref()
        .map(|p| std::path::absolute(p).with_context(|| format!("{}", p.display())))
        .transpose()?;
    let req = SubmitRequest {
        name: args.name.clone(),
        job,
        parallelism: args.parallelism,
        restart,
        checkpoint_interval: args.checkpoint_interval.clone(),
        from_savepoint,
    };
    let c = client(&args.client, data_dir);
    let detail = rt()?.block_on(c.submit(&req))?;
    if args.client.json {
        return print_json(&detail);
    }
    outln!(
        "submitted job {} ({}) as {}",
        detail.summary.name,
        detail.summary.kind,
        detail.summary.id
    );
    Ok(())
}

fn when(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    format!("{h:02}:{m:02}:{s:02}Z")
}

fn table_of_jobs(jobs: &[JobSummary]) -> Result<()> {
    outln!(
        "{:<28} {:<20} {:<5} {:<10} {:>8} {:>9}  LAST FAILURE",
        "ID",
        "NAME",
        "KIND",
        "STATE",
        "ATTEMPTS",
        "SUBMITTED"
    );
    for j in jobs {
        outln!(
            "{:<28} {:<20} {:<5} {:<10} {:>8} {:>9}  {}",
            j.id,
            j.name,
            j.kind,
            j.state.to_string(),
            j.attempts,
            when(j.submitted_ms),
            j.last_failure.as_deref().map_or("-".to_string(), |f| f
                .lines()
                .next()
                .unwrap_or("")
                .to_string())
        );
    }
    Ok(())
}

/// `brook jobs`.
pub(crate) fn jobs(args: JobsArgs, data_dir: &Path) -> Result<()> {
    let jobs = rt()?.block_on(client(&args.client, data_dir).list())?;
    if args.client.json {
        return print_json(&jobs);
    }
    table_of_jobs(&jobs)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// A watermark for people: `none` before the first, `end` once the input ended
/// (`i64::MAX`), else the UTC time (ms precision; the JSON output keeps ms).
fn watermark(ms: Option<i64>) -> String {
    match ms {
        None => "none".into(),
        Some(i64::MAX) => "end".into(),
        Some(ms) => chrono::DateTime::from_timestamp_millis(ms).map_or_else(
            || ms.to_string(),
            |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        ),
    }
}

/// Hot keys `brook job` lists per keyed operator (the status has up to ten).
const HOT_KEYS_SHOWN: usize = 5;

fn show_job(d: &JobDetail) -> Result<()> {
    let s = &d.summary;
    outln!(
        "job {}  name {}  kind {}  state {}",
        s.id,
        s.name,
        s.kind,
        s.state
    );
    outln!(
        "parallelism {}  restart {}  attempts {}",
        d.parallelism
            .map_or_else(|| "from the job".to_string(), |p| p.to_string()),
        d.restart.describe(),
        s.attempts
    );
    if let Some(st) = &d.status {
        outln!("\nprocess {} ({:?})", st.pid, st.state);
        outln!(
            "{:<24} {:>12} {:>12} {:>24} {:>15}",
            "OPERATOR",
            "RECORDS IN",
            "RECORDS OUT",
            "WATERMARK",
            "BACKPRESSURE MS"
        );
        for o in &st.operators {
            outln!(
                "{:<24} {:>12} {:>12} {:>24} {:>15}",
                o.name,
                o.records_in,
                o.records_out,
                watermark(o.watermark_ms),
                o.backpressure_ms
            );
        }
        // The hottest keys of each keyed operator (the dashboard's table, shortened).
        for o in st.operators.iter().filter(|o| !o.hot_keys.is_empty()) {
            let keys: Vec<String> = o
                .hot_keys
                .iter()
                .take(HOT_KEYS_SHOWN)
                .map(|k| format!("{} {:.1}% (subtask {})", k.key, k.share * 100.0, k.subtask))
                .collect();
            outln!("hot keys of {}: {}", o.name, keys.join(", "));
        }
        if !st.splits.is_empty() {
            outln!(
                "\n{:<24} {:<20} {:>12} {:>10} {:>24} {:>5} {:>10}",
                "SOURCE",
                "SPLIT",
                "OFFSET",
                "LAG",
                "WATERMARK",
                "IDLE",
                "LATE"
            );
            for sp in &st.splits {
                outln!(
                    "{:<24} {:<20} {:>12} {:>10} {:>24} {:>5} {:>10}",
                    sp.operator,
                    sp.split,
                    opt(sp.offset),
                    opt(sp.lag),
                    watermark(sp.watermark_ms),
                    if sp.idle { "yes" } else { "no" },
                    sp.late_records
                );
            }
            // Who holds the watermark back (brook::ui::holdback), as the dashboard.
            for g in brook::ui::gates(st) {
                for h in &g.held_by {
                    outln!(
                        "watermark of {} held back by {} {} ({})",
                        g.operator,
                        h.source,
                        h.split,
                        h.reason
                    );
                }
            }
        }
        let c = &st.checkpoints;
        // The sizes the dashboard shows: all it holds, and what it added.
        let last = c
            .history
            .iter()
            .rev()
            .find(|h| h.error.is_none() && Some(h.id) == c.last_id);
        outln!(
            "\ncheckpoints: {} completed, {} failed; last {} ({} ms, {} bytes full, {} incremental)",
            c.completed,
            c.failed,
            opt(c.last_id),
            opt(c.last_duration_ms),
            opt(last.and_then(|h| h.full_size_bytes).or(c.last_size_bytes)),
            opt(last.and_then(|h| h.incremental_bytes).or(c.last_size_bytes))
        );
    }
    for sp in &d.savepoints {
        outln!("savepoint {}", sp.display());
    }
    outln!(
        "\n{:>7} {:>9} {:>9} {:>8}  {:<30} RESTORED FROM",
        "ATTEMPT",
        "STARTED",
        "ENDED",
        "PID",
        "OUTCOME"
    );
    for a in &d.attempt_history {
        outln!(
            "{:>7} {:>9} {:>9} {:>8}  {:<30} {}",
            a.number,
            when(a.started_ms),
            a.ended_ms.map_or("-".to_string(), when),
            opt(a.pid),
            a.outcome.as_deref().unwrap_or("running"),
            a.restored_from
                .as_ref()
                .map_or("-".to_string(), |p| p.display().to_string())
        );
    }
    if let Some(tail) = d
        .attempt_history
        .iter()
        .rev()
        .find_map(|a| a.stderr_tail.as_ref())
    {
        outln!("\nlast failure's stderr:\n{tail}");
    }
    Ok(())
}

/// `brook job`.
pub(crate) fn job(args: JobArgs, data_dir: &Path) -> Result<()> {
    let d = rt()?.block_on(client(&args.client, data_dir).job(&args.id))?;
    if args.client.json {
        return print_json(&d);
    }
    show_job(&d)
}

/// `brook ui`: prints a one-time link into the runner's dashboard (it works once,
/// within 5 minutes; the browser then holds a session cookie).
pub(crate) fn ui(args: UiArgs, data_dir: &Path) -> Result<()> {
    let req = brook::ui::LinkRequest {
        job: args.job.clone(),
        topics: args.topics,
    };
    let link = match local_dashboard(&args, data_dir)? {
        // A `brook run --ui` on this data directory (and no runner here).
        Some(dashboard) => {
            let client = Client::new(&dashboard.url, Some(dashboard.token));
            rt()?.block_on(client.ui_link(&req))?
        }
        None => rt()?.block_on(client(&args.client, data_dir).ui_link(&req))?,
    };
    if args.client.json {
        return print_json(&serde_json::json!({ "url": link }));
    }
    outln!("{link}");
    Ok(())
}

/// The `brook run --ui` dashboard `brook ui` asks for a link when no runner is named
/// and none wrote its address in `data_dir`: the one of job `args.job`, or the only
/// one there; `None` when there is none (the runner's default address is tried).
fn local_dashboard(args: &UiArgs, data_dir: &Path) -> Result<Option<LocalDashboard>> {
    if args.client.runner.is_some() || data_dir.join("runner").join("address").exists() {
        return Ok(None);
    }
    let mut found = brook::ui::local::local_dashboards(data_dir);
    Ok(match &args.job {
        Some(id) => found.into_iter().find(|(job, _)| job == id).map(|(_, d)| d),
        None if found.len() > 1 => anyhow::bail!(
            "several `brook run --ui` dashboards in {}: name the job (one of {})",
            data_dir.display(),
            found
                .iter()
                .map(|(job, _)| job.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => found.pop().map(|(_, d)| d),
    })
}

/// `brook cancel`.
pub(crate) fn cancel(args: CancelArgs, data_dir: &Path) -> Result<()> {
    let d = rt()?.block_on(client(&args.client, data_dir).cancel(&args.id, args.savepoint))?;
    if args.client.json {
        return print_json(&d);
    }
    outln!("job {} {}", d.summary.id, d.summary.state);
    if args.savepoint {
        if let Some(p) = d.savepoints.last() {
            outln!("savepoint {}", p.display());
        }
    }
    Ok(())
}

/// `brook resume`.
pub(crate) fn resume(args: ResumeArgs, data_dir: &Path) -> Result<()> {
    let c = client(&args.client, data_dir);
    let rt = rt()?;
    let from_savepoint = args
        .from_savepoint
        .as_ref()
        .map(|p| std::path::absolute(p).with_context(|| format!("{}", p.display())))
        .transpose()?;
    let id = match (&args.id, &from_savepoint) {
        (Some(id), _) => id.clone(),
        (None, Some(sp)) => {
            // The job whose savepoint it is.
            let canon = sp.canonicalize().unwrap_or_else(|_| sp.clone());
            let mut owner = None;
            for j in rt.block_on(c.list())? {
                let d = rt.block_on(c.job(&j.id))?;
                if d.savepoints.iter().any(|p| *p == canon || p == sp) {
                    owner = Some(j.id);
                    break;
                }
            }
            owner.with_context(|| {
                format!("no job of the runner took the savepoint {}", sp.display())
            })?
        }
        (None, None) => bail!("give a job id or --from-savepoint PATH"),
    };
    let d = rt.block_on(c.resume(&id, &ResumeRequest { from_savepoint }))?;
    if args.client.json {
        return print_json(&d);
    }
    outln!("job {} {}", d.summary.id, d.summary.state);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::watermark;

    #[test]
    fn watermarks_read_as_none_end_or_a_time() {
        assert_eq!(watermark(None), "none");
        assert_eq!(watermark(Some(i64::MAX)), "end");
        assert_eq!(watermark(Some(1_500)), "1970-01-01T00:00:01.500Z");
    }
}
