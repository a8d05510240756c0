//! `brook nexmark --query qN --events N [--parallelism P] [--rate R]`: runs a Nexmark
//! query (brook-nexmark) on the generator's events into a counting sink and prints
//! events/s, events per CPU-second and rows out, and at a rate the end-to-end latency
//! percentiles (issue 22).

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
    /// Events per second (all subtasks together) instead of as fast as possible; the
    /// run then prints end-to-end latency percentiles (ms): from when the source's
    /// schedule made a result's time due (a bid's own time, a window's end) to when
    /// the sink got it.
    #[arg(long)]
    rate: Option<f64>,
}

/// Runs the query and prints what it measured.
pub(crate) fn nexmark(args: NexmarkArgs) -> Result<()> {
    let config = NexmarkConfig {
        events: args.events,
        rate: args.rate,
        ..NexmarkConfig::default()
    };
    let source = NexmarkSource::new(config).context("--events or --rate")?;
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
    Ok(())
}
