//! brook's main job on real data: the flights that left New York in 2013
//! (nycflights13, CC0). See `job.rs` for what it computes.
//!
//! ```sh
//! cargo run --release --example nycflights13 -- [--input DIR] [--data-dir DIR] [--results DIR]
//! ```

mod job;

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;

/// Hourly delay statistics, weather and duty periods of every NYC departure of 2013.
#[derive(Debug, Parser)]
struct Args {
    /// Folder with flights.csv.gz, weather.csv.gz and airlines.csv.
    #[arg(long, default_value = "examples/data/nycflights13")]
    input: PathBuf,
    /// brook data directory (the log topics `flights` and `weather`).
    #[arg(long, default_value = "brook-data/nycflights13")]
    data_dir: PathBuf,
    /// Results folder (replaced on each run).
    #[arg(long, default_value = "results/nycflights13")]
    results: PathBuf,
    /// Parallelism of the job's operators.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Watermark bound on out-of-orderness (1d, 2h, 30m). Flights delayed more than
    /// this behind the latest departure seen go to late.jsonl.
    #[arg(long, default_value = "1d", value_parser = humantime::parse_duration)]
    out_of_orderness: std::time::Duration,
    /// Gap that ends an aircraft's duty period.
    #[arg(long, default_value = "6h", value_parser = humantime::parse_duration)]
    session_gap: std::time::Duration,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut cfg = job::Config::new(&args.input, &args.data_dir, &args.results);
    cfg.parallelism = args.parallelism;
    cfg.out_of_orderness_ms = i64::try_from(args.out_of_orderness.as_millis())?;
    cfg.session_gap_ms = i64::try_from(args.session_gap.as_millis())?;
    let s = job::run(&cfg)?;

    let r = |name: &str| cfg.results.join(name).display().to_string();
    println!(
        "nycflights13: {} flights, {} weather reports",
        s.flights, s.weather_reports
    );
    println!(
        "  loaded into topics `{}` and `{}` (keyed by airport) in {} ms; job ran in {} ms ({:.0} flights/s)",
        job::FLIGHTS_TOPIC,
        job::WEATHER_TOPIC,
        s.ingest_ms,
        s.job_ms,
        s.flights as f64 * 1000.0 / s.job_ms.max(1) as f64
    );
    println!(
        "  {:>7} hourly rows (airport, carrier, hour) over {} departed flights -> {}",
        s.hourly_rows,
        s.windowed_flights,
        r(job::files::HOURLY)
    );
    println!(
        "  {:>7} duty periods (aircraft sessions)           -> {}",
        s.duty_periods,
        r(job::files::DUTY)
    );
    println!(
        "  {:>7} cancelled flights (dead letters)           -> {}",
        s.cancelled,
        r(job::files::CANCELLED)
    );
    println!(
        "  {:>7} late flights (side output)                 -> {}",
        s.late,
        r(job::files::LATE)
    );

    let rows = job::read_rows(&cfg.results.join(job::files::HOURLY))?;
    println!("\nMean departure delay by airline (minutes):");
    for (carrier, name, n, mean) in job::per_carrier(&rows) {
        println!("  {carrier:>2}  {name:<28} {n:>6} flights  {mean:>6.1}");
    }
    println!("\nWorst hours (at least 5 flights of one carrier at one airport):");
    for row in job::worst_hours(&rows, 5, 5) {
        println!(
            "  {} {} {:<2} {:>2} flights, mean {:>5.1} min, max {:>4} min; {}°F, wind {} mph, visibility {} mi",
            row["hour"].as_str().unwrap_or("?"),
            row["origin"].as_str().unwrap_or("?"),
            row["carrier"].as_str().unwrap_or("?"),
            row["flights"],
            row["avg_dep_delay_min"].as_f64().unwrap_or(0.0),
            row["max_dep_delay_min"],
            row["temp_f"],
            row["wind_speed_mph"],
            row["visib_mi"],
        );
    }
    Ok(())
}
