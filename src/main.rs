//! The `brook` command-line tool.

mod cli;

use std::io;
use std::path::PathBuf;

use anyhow::{Context, Result};
use brook::log::{FsyncPolicy, Log, LogOptions};
use clap::{Parser, Subcommand};

use cli::log_access::LogAccess;
use cli::log_cli::{
    consume, group_command, produce, topic_command, ConsumeArgs, GroupCommand, ProduceArgs,
    TopicCommand,
};
use cli::{broker_cli, nexmark, run, runner_cli, verify};

/// brook: a stream-processing engine with an embedded partitioned log.
#[derive(Debug, Parser)]
#[command(name = "brook", version, about)]
struct Cli {
    /// Data directory of the embedded log.
    #[arg(
        long,
        global = true,
        env = "BROOK_DATA_DIR",
        default_value = "./brook-data"
    )]
    data_dir: PathBuf,
    /// When appends are forced to disk: always, never or interval=<duration>.
    #[arg(long, global = true, default_value = "interval=1s")]
    fsync: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, list, describe, delete and grow topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Append lines from stdin to a topic, one record per line.
    Produce(ProduceArgs),
    /// Print records of a topic as JSON lines, optionally as a consumer group.
    Consume(ConsumeArgs),
    /// List consumer groups and show their offsets and lag.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Run a YAML job spec in the foreground.
    Run(run::RunArgs),
    /// Check a YAML job's exactly-once output: a run killed at random moments against
    /// one without failures.
    Verify(verify::VerifyArgs),
    /// Run the runner service: jobs submitted to it run supervised and restart from
    /// their checkpoints.
    Runner(runner_cli::RunnerArgs),
    /// Serve the data directory's log to Kafka clients (the Kafka wire protocol).
    Broker(broker_cli::BrokerArgs),
    /// Submit a YAML job spec or a job binary (--bin) to the runner.
    Submit(runner_cli::SubmitArgs),
    /// List the runner's jobs.
    Jobs(runner_cli::JobsArgs),
    /// Show a job of the runner: operators, source splits, checkpoints, attempts.
    Job(runner_cli::JobArgs),
    /// Cancel a job of the runner, optionally with a savepoint.
    Cancel(runner_cli::CancelArgs),
    /// Resume a canceled or failed job of the runner.
    Resume(runner_cli::ResumeArgs),
    /// Print a one-time link that logs a browser into the runner's dashboard.
    Ui(runner_cli::UiArgs),
    /// Run a Nexmark query on generated events and print its throughput.
    Nexmark(nexmark::NexmarkArgs),
}

/// Whether the error is a closed stdout, which ends the command quietly.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes on one line, skipping a cause whose text the line already
/// ends with (library errors often show their source in their own message too).
fn render(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BROOK_LOG")
        // The CLI prints its own warning when partitions are added.
        .unwrap_or_else(|_| {
            // The runner says what happens to its jobs (submits, starts, restarts,
            // failures, cancels), each with the job's id.
            tracing_subscriber::EnvFilter::new(
                "warn,brook_log::log=error,brook_engine::execute=off,brook::runner::supervisor=info",
            )
        });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        // Colours only for a person at a terminal, not in log files.
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        if is_broken_pipe(&e) {
            return;
        }
        eprintln!("error: {}", render(&e));
        // Under a runner, a log held by another process is worth waiting for.
        let busy = e.chain().any(|c| {
            matches!(
                c.downcast_ref::<brook::log::LogError>(),
                Some(brook::log::LogError::Locked { .. })
            )
        });
        if busy && std::env::var_os(brook::runner::child::ENV_JOB_ID).is_some() {
            std::process::exit(brook::runner::child::EXIT_DATA_DIR_BUSY);
        }
        std::process::exit(1);
    }
}

fn open_log(data_dir: &std::path::Path, fsync: &str) -> Result<Log> {
    let fsync: FsyncPolicy = fsync.parse().context("--fsync")?;
    let options = LogOptions {
        fsync,
        ..LogOptions::default()
    };
    Log::open(data_dir, options)
        .map_err(|e| broker_cli::name_the_broker(e, data_dir))
        .with_context(|| format!("opening data directory {}", data_dir.display()))
}

fn run(cli: Cli) -> Result<()> {
    let Cli {
        data_dir,
        fsync,
        command,
    } = cli;
    let command = match command {
        // The log is opened only if the job reads or writes it.
        Command::Run(args) => return run::run(args, &data_dir, || open_log(&data_dir, &fsync)),
        // Copies the topics it needs out of the data directory; never opens its log.
        Command::Verify(args) => return verify::verify(args, &data_dir),
        // The runner holds the log and serves it to its job processes (Kafka protocol);
        // its clients never open it.
        Command::Runner(args) => {
            let options = LogOptions {
                fsync: fsync.parse().context("--fsync")?,
                ..LogOptions::default()
            };
            return runner_cli::runner(args, &data_dir, options);
        }
        // Holds the log (its lock) while it serves.
        Command::Broker(args) => {
            return broker_cli::broker(args, &data_dir, || open_log(&data_dir, &fsync))
        }
        Command::Submit(args) => return runner_cli::submit(args, &data_dir),
        Command::Jobs(args) => return runner_cli::jobs(args, &data_dir),
        Command::Job(args) => return runner_cli::job(args, &data_dir),
        Command::Cancel(args) => return runner_cli::cancel(args, &data_dir),
        Command::Resume(args) => return runner_cli::resume(args, &data_dir),
        Command::Ui(args) => return runner_cli::ui(args, &data_dir),
        // Generated events into a counting sink: no log (`load` writes to it).
        Command::Nexmark(args) if args.load().is_none() => return nexmark::nexmark(args),
        other => other,
    };
    // Only creating a topic makes a data directory: a command on a mistyped one fails
    // instead of leaving an empty log behind.
    let creates_topics = match &command {
        Command::Topic(TopicCommand::Create { .. }) => true,
        Command::Nexmark(args) => args.load().is_some(),
        _ => false,
    };
    if !data_dir.exists() && !creates_topics {
        anyhow::bail!(
            "no data directory at {} (brook topic create makes one; --data-dir or BROOK_DATA_DIR picks another)",
            data_dir.display()
        );
    }
    // In-process, or through the broker that holds the directory (cli::log_access).
    let log = LogAccess::open(&data_dir, || open_log(&data_dir, &fsync))?;
    // Apply retention now too: a short command would otherwise end before the
    // background maintenance first runs.
    log.run_maintenance()?;
    match command {
        Command::Run(_)
        | Command::Verify(_)
        | Command::Runner(_)
        | Command::Broker(_)
        | Command::Submit(_)
        | Command::Jobs(_)
        | Command::Job(_)
        | Command::Cancel(_)
        | Command::Resume(_)
        | Command::Ui(_) => Ok(()),
        Command::Nexmark(args) => match args.load() {
            Some(load) => nexmark::load(&log, load),
            None => Ok(()),
        },
        Command::Topic(cmd) => topic_command(&log, cmd),
        Command::Produce(args) => produce(&log, args),
        Command::Consume(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(consume(&log, args))
        }
        Command::Group(cmd) => group_command(&log, cmd),
    }?;
    log.close()?;
    Ok(())
}
