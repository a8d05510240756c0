//! A job written with the builder API and ready for the runner: per key and second of
//! event time, the count and sum of generated events, written exactly once to a JSON
//! lines file.
//!
//! ```sh
//! cargo build --release --example runner_job
//! brook runner &                                   # in another terminal
//! brook submit --bin target/release/examples/runner_job --checkpoint-interval 1s \
//!     -- "$PWD/results/runner_job.jsonl" 20000
//! ```
//!
//! Run on its own (`runner_job OUT [EVENTS]`) it is an ordinary job; under a runner it
//! takes its checkpoint directory, restore point and parallelism from the runner,
//! reports its status, and obeys cancel and savepoint requests: the two
//! `brook::runner` calls below are all it takes.

use brook::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .unwrap_or_else(|| "results/runner_job.jsonl".to_string());
    let events: u64 = match args.next() {
        Some(n) => n
            .parse()
            .map_err(|_| format!("EVENTS {n:?}: not a number"))?,
        None => 20_000,
    };
    let env = StreamEnvironment::new(brook::runner::job_config(JobConfig::default())?);
    // 4000 events a second: a job that runs for a few seconds, long enough to watch.
    let source = GeneratorSource::builder()
        .events(events)
        .keys(20)
        .start_ms(1_700_000_000_000)
        .rate(4_000.0)
        .build()?;
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness(0)
            .with_timestamp_assigner(|e: &GeneratorEvent, _| e.ts),
    )
    .key_by(|e| e.key)
    .window(TumblingEventTimeWindows::of(1_000)?)
    .aggregate((Count, Sum::of(|e: &GeneratorEvent| e.value)))
    .map(|r| (r.key, r.window.start, r.value))
    .sink(FileSink::jsonl(out));
    brook::runner::execute(&env, "runner-job")?;
    Ok(())
}
