//! `brook nexmark --query qN --events N [--parallelism P]`: runs a Nexmark query
//! (brook-nexmark) on the generator's events into a counting sink and prints events/s,
//! events per CPU-second and rows out (issue 22).

use anyhow::{Context, Result};
use brook::engine::JobConfig;
use brook::nexmark::run::{run, Query};
use brook::nexmark::{NexmarkConfig, NexmarkSource};
use clap::Args;

/// Arguments of `brook nexmark`.
#[derive(Debug, Args)]
pub(crate) struct NexmarkArgs {
    /// The query: q0, q1, q2, q3, q5, q7, q8, q11 or q12.
    #[arg(long)]
    query: Query,
    /// How many events to generate.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// The job's parallelism.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
}

/// Runs the query and prints what it measured.
pub(crate) fn nexmark(args: NexmarkArgs) -> Result<()> {
    let config = NexmarkConfig {
        events: args.events,
        ..NexmarkConfig::default()
    };
    let source = NexmarkSource::new(config).context("--events")?;
    let name = args.query.name();
    let report = run(
        args.query,
        source,
        JobConfig::with_parallelism(args.parallelism),
    )
    .with_context(|| format!("running {name}"))?;
    let per_cpu = report
        .events_per_cpu_sec()
        .map_or_else(|| "n/a".to_string(), |r| format!("{r:.0}"));
    println!("query            {name}");
    println!("parallelism      {}", args.parallelism);
    println!("events           {}", report.events);
    println!("rows out         {}", report.rows);
    println!("seconds          {:.3}", report.secs);
    println!("events/s         {:.0}", report.events_per_sec());
    println!("events/cpu-s     {per_cpu}");
    Ok(())
}
