//! `brook nexmark --query qN|--all --events N [--parallelism P] [--rate R]`: runs a
//! Nexmark query, or each in turn (brook-nexmark), on the generator's events into a
//! counting sink and prints events/s, events per CPU-second and rows out, at a rate
//! the end-to-end latency percentiles, and for `--all` a table beside Flink's
//! published figures (issue 22).

use std::path::PathBuf;

use anyhow::{Context, Result};
use brook::core::config::parse_duration_ms;
use brook::core::time::{Clock, SystemClock};
use brook::engine::{latest_complete, CheckpointConfig, JobConfig, StateBackendFactory};
use brook::log::{ProducerRecord, TopicConfig};
use brook::nexmark::latency::IntervalLog;
use brook::nexmark::published::{flink_events_per_core_sec, FLINK_SOURCE};
use brook::nexmark::run::{run_with, Query, RunOptions, RunReport};
use brook::nexmark::Event;
use brook::nexmark::{NexmarkConfig, NexmarkSource};
use brook::spec::StateBackendKind;
use brook::state::RocksDbOptions;
use clap::{Args, Subcommand};

use super::log_access::LogAccess;

/// Arguments of `brook nexmark`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct NexmarkArgs {
    #[command(subcommand)]
    command: Option<NexmarkCommand>,
    /// The query: q0, q1, q2, q3, q4, q5, q7, q8, q11 or q12.
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    query: Option<Query>,
    /// Every query in turn, with the same settings, printed as one table beside
    /// Flink's published events per second per core (its source is printed too).
    #[arg(long)]
    all: bool,
    /// How many events to generate (for each query).
    #[arg(long, default_value_t = 10_000_000)]
    pub(crate) events: u64,
    /// The job's parallelism.
    #[arg(long, default_value_t = 1)]
    pub(crate) parallelism: u32,
    /// Events per second (all subtasks together) instead of as fast as possible; the
    /// run then prints end-to-end latency percentiles (ms): from when the source's
    /// schedule made a result's time due (a bid's own time, a window's end) to when
    /// the sink got it.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Where keyed state lives: `memory` (the default) or `rocksdb` (in a temporary
    /// directory, removed at the end).
    #[arg(
        long,
        value_enum,
        value_name = "memory|rocksdb",
        default_value = "memory"
    )]
    pub(crate) state: StateBackendKind,
    /// Take an aligned checkpoint this often (`1s`, `500ms`; into a temporary
    /// directory, removed at the end). Default: none.
    #[arg(long, value_name = "DURATION")]
    pub(crate) checkpoint_interval: Option<String>,
    /// SIGKILL the run after this long (`10s`), restore it from its latest checkpoint
    /// in a new process, and print how long until its output was current again: the
    /// 99th percentile latency of 100 ms of results back at most the worst one of the
    /// steady state before the kill (needs --rate and --checkpoint-interval).
    #[arg(long, value_name = "DURATION", requires_all = ["rate", "checkpoint_interval"], conflicts_with = "all")]
    pub(crate) kill_after: Option<String>,
    /// (For --kill-after's processes.) State and checkpoints in this directory
    /// instead of a temporary one.
    #[arg(long, hide = true)]
    scratch_dir: Option<PathBuf>,
    /// (For --kill-after's processes.) Restore from the latest checkpoint in the
    /// scratch directory.
    #[arg(long, hide = true, requires = "scratch_dir")]
    restore_latest: bool,
    /// (For --kill-after's processes.) The rate's schedule began at this time (ms since
    /// the epoch), in the first process.
    #[arg(long, hide = true)]
    schedule_origin_ms: Option<i64>,
    /// (For --kill-after's processes.) Append latencies per 100 ms to this file.
    #[arg(long, hide = true)]
    interval_log: Option<PathBuf>,
}

/// What `brook nexmark` does besides running queries.
#[derive(Debug, Subcommand)]
pub(crate) enum NexmarkCommand {
    /// Append generated events to log topics `PREFIX.persons`, `PREFIX.auctions` and
    /// `PREFIX.bids` (created with --partitions where missing): one JSON object per
    /// record (the fields of brook-nexmark's Person, Auction, Bid; `date_time` in ms),
    /// keyed by the person's, the auction's and the bid's auction id, with the event's
    /// time as the record's timestamp.
    Load(LoadArgs),
}

/// Arguments of `brook nexmark load`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// How many events to generate (persons, auctions and bids 1 : 3 : 46).
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// The topics' names start with this.
    #[arg(long, default_value = "nexmark")]
    topic_prefix: String,
    /// Partitions of the topics this creates.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
}

impl NexmarkArgs {
    /// The `load` command, which needs the log.
    pub(crate) fn load(&self) -> Option<&LoadArgs> {
        match &self.command {
            Some(NexmarkCommand::Load(l)) => Some(l),
            None => None,
        }
    }
}

/// Appends the events to the three topics.
pub(crate) fn load(log: &LogAccess, args: &LoadArgs) -> Result<()> {
    let source = NexmarkSource::new(NexmarkConfig {
        events: args.events,
        ..NexmarkConfig::default()
    })
    .context("--events")?;
    let names = ["persons", "auctions", "bids"].map(|t| format!("{}.{t}", args.topic_prefix));
    let existing = log.topics()?;
    let mut writers = Vec::with_capacity(3);
    for name in &names {
        if !existing.contains(name) {
            log.create_topic(name, args.partitions, TopicConfig::default())
                .with_context(|| format!("creating topic {name}"))?;
        }
        writers.push(log.writer(name, 4096)?);
    }
    for (position, event) in source.events().enumerate() {
        let (w, key, time, value) = match &event {
            Event::Person(p) => (0, p.id, p.date_time, serde_json::to_vec(p)),
            Event::Auction(a) => (1, a.id, a.date_time, serde_json::to_vec(a)),
            Event::Bid(b) => (2, b.auction, b.date_time, serde_json::to_vec(b)),
        };
        let value = value.with_context(|| format!("encoding event {position}"))?;
        let record = ProducerRecord {
            key: Some(key.to_string().into_bytes().into()),
            value: value.into(),
            timestamp: Some(time),
            ..Default::default()
        };
        writers[w].send(position + 1, record)?;
    }
    for (name, w) in names.iter().zip(writers) {
        let n = w.finish()?;
        println!("{name:<24} {n} records");
    }
    Ok(())
}

/// Runs the query (or all) and prints what it measured.
pub(crate) fn nexmark(args: NexmarkArgs) -> Result<()> {
    match args.query {
        Some(query) if args.kill_after.is_some() => {
            super::nexmark_recovery::kill_and_recover(&args, query)?;
        }
        Some(query) => {
            let report = run_one(&args, query)?;
            print_one(&args, query, &report);
        }
        None => {
            let mut rows = Vec::new();
            for query in Query::ALL {
                eprintln!("running {}", query.name());
                rows.push((query, run_one(&args, query)?));
            }
            print_table(&args, &rows);
        }
    }
    Ok(())
}

fn run_one(args: &NexmarkArgs, query: Query) -> Result<RunReport> {
    let config = NexmarkConfig {
        events: args.events,
        rate: args.rate,
        ..NexmarkConfig::default()
    };
    let source = NexmarkSource::new(config).context("--events or --rate")?;
    // State and checkpoints of the run, removed when it ends (the figures are the
    // point, not the files), unless --kill-after's parent keeps them across processes.
    let temp;
    let scratch = match &args.scratch_dir {
        Some(dir) => dir.as_path(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("brook-nexmark-")
                .tempdir()
                .context("creating a temporary directory for state and checkpoints")?;
            temp.path()
        }
    };
    let mut job = JobConfig::with_parallelism(args.parallelism);
    if args.state == StateBackendKind::Rocksdb {
        job.state_backend =
            StateBackendFactory::rocksdb(scratch.join("state"), RocksDbOptions::default());
    }
    if args.restore_latest {
        let dir = scratch.join("checkpoints");
        let cp = latest_complete(&dir)
            .with_context(|| format!("restoring the latest checkpoint of {}", dir.display()))?;
        job.restore = Some(std::sync::Arc::new(cp));
    }
    let mut options = RunOptions::default();
    if let Some(origin) = args.schedule_origin_ms {
        options.schedule_began_ms_ago =
            Some(u64::try_from(SystemClock.now_ms() - origin).unwrap_or(0));
    }
    if let Some(path) = &args.interval_log {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        options.intervals = Some(std::sync::Arc::new(IntervalLog::new(Box::new(file))));
    }
    if let Some(t) = &args.checkpoint_interval {
        let ms = parse_duration_ms(t)
            .map_err(|e| anyhow::anyhow!("--checkpoint-interval {t:?}: {e}"))?;
        if ms <= 0 {
            anyhow::bail!("--checkpoint-interval {t:?}: must be positive");
        }
        job.checkpoint = Some(CheckpointConfig::new(scratch.join("checkpoints"), ms));
    }
    let mut report = run_with(query, source, job, options)
        .with_context(|| format!("running {}", query.name()))?;
    if args.checkpoint_interval.is_some() {
        report.checkpoints = latest_complete(&scratch.join("checkpoints"))
            .map(|c| c.id)
            .ok();
    }
    Ok(report)
}

fn print_one(args: &NexmarkArgs, query: Query, report: &RunReport) {
    let per_cpu = report
        .events_per_cpu_sec()
        .map_or_else(|| "n/a".to_string(), |r| format!("{r:.0}"));
    println!("query            {}", query.name());
    println!("parallelism      {}", args.parallelism);
    println!("events           {}", report.events);
    println!("rows out         {}", report.rows);
    println!("seconds          {:.3}", report.secs);
    println!("events/s         {:.0}", report.events_per_sec());
    println!("events/cpu-s     {per_cpu}");
    println!("state            {}", state_name(args.state));
    if let Some(t) = &args.checkpoint_interval {
        println!(
            "checkpoints      every {t}, last completed id {}",
            report
                .checkpoints
                .map_or_else(|| "none".to_string(), |id| id.to_string())
        );
    }
    if let Some(rate) = args.rate {
        println!("rate             {rate:.0}");
        match report.latency {
            Some(l) => {
                println!("latency results  {}", l.results);
                println!("latency p50 ms   {:.3}", l.p50_ms);
                println!("latency p99 ms   {:.3}", l.p99_ms);
                println!("latency p99.9 ms {:.3}", l.p999_ms);
                println!("latency max ms   {:.3}", l.max_ms);
            }
            None => println!("latency          no results to time"),
        }
    }
}

/// One line per query: brook's figures, Flink's per core and the ratio of brook's
/// events per CPU-second to it.
fn print_table(args: &NexmarkArgs, rows: &[(Query, RunReport)]) {
    println!(
        "{} events per query, parallelism {}, {} state{}{}",
        args.events,
        args.parallelism,
        state_name(args.state),
        args.checkpoint_interval
            .as_ref()
            .map_or_else(String::new, |t| format!(", checkpoints every {t}")),
        args.rate
            .map_or_else(String::new, |r| format!(", {r:.0} events/s"))
    );
    let latency = args.rate.is_some();
    print!(
        "{:<6} {:>12} {:>9} {:>14} {:>14} {:>14} {:>9}",
        "query", "rows out", "seconds", "events/s", "events/cpu-s", "flink/core", "x flink"
    );
    if latency {
        print!(" {:>9} {:>9} {:>9}", "p50 ms", "p99 ms", "p99.9 ms");
    }
    println!();
    for (query, r) in rows {
        let per_cpu = r.events_per_cpu_sec();
        let flink = flink_events_per_core_sec(*query);
        let ratio = per_cpu
            .zip(flink)
            .map_or_else(|| "-".to_string(), |(b, f)| format!("{:.0}x", b / f));
        print!(
            "{:<6} {:>12} {:>9.3} {:>14.0} {:>14} {:>14} {:>9}",
            query.name(),
            r.rows,
            r.secs,
            r.events_per_sec(),
            per_cpu.map_or_else(|| "n/a".to_string(), |c| format!("{c:.0}")),
            flink.map_or_else(|| "-".to_string(), |f| format!("{f:.0}")),
            ratio
        );
        if latency {
            match r.latency {
                Some(l) => print!(" {:>9.3} {:>9.3} {:>9.3}", l.p50_ms, l.p99_ms, l.p999_ms),
                None => print!(" {:>9} {:>9} {:>9}", "-", "-", "-"),
            }
        }
        println!();
    }
    println!("flink/core: {FLINK_SOURCE}");
}

pub(crate) fn state_name(kind: StateBackendKind) -> &'static str {
    match kind {
        StateBackendKind::Memory => "memory",
        StateBackendKind::Rocksdb => "rocksdb",
    }
}
