//! `brook verify job.yaml`: checks that the job's committed output survives crashes
//! exactly once (docs/semantics.md §4a).
//!
//! It runs the job once without failures (the reference), then again with checkpoints
//! as a `brook run` child SIGKILLed at seeded random moments and restarted from its
//! latest checkpoint (at random parallelisms with `--rescale`) until it finishes, and
//! compares every sink's committed rows with the reference's as multisets. Both runs
//! happen in a scratch directory: the log topics the job reads or writes are copied
//! there from the data directory, and file sinks, stdout sinks (as file sinks) and the
//! dead-letter file are redirected there, so the user's data directory and outputs
//! are never written. The decisions (kill schedule, comparison, arrival-order rule)
//! are `brook::verify`'s pure functions; this module starts and kills processes and
//! reads files.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use brook::core::time::Stopwatch;
use brook::engine::RestoredCheckpoint;
use brook::log::{IsolationLevel, Log, LogOptions, ReadLimit};
use brook::spec::{self, JobSpec, SinkSpec, SourceSpec};
use brook::verify::compare::{compare, describe};
use brook::verify::order::order_dependence;
use brook::verify::schedule::{max_delay_ms, KillSchedule};
use clap::Args;

use super::run::read_spec;

/// The checkpoint interval of the killed run when neither `--checkpoint-interval` nor
/// the spec sets one (ms).
const DEFAULT_CHECKPOINT_INTERVAL_MS: i64 = 100;

/// How often the job starts over with shorter delays when it finished before all
/// kills were made.
const MAX_ROUNDS: u32 = 8;

/// Rows of each kind shown in a report.
const EXAMPLES: usize = 5;

/// How long an attempt that is to be killed after a checkpoint waits for one before it
/// is killed anyway (ms): a restore of a large state on a loaded machine is slow, but
/// a job that never checkpoints must not hang verify.
const CHECKPOINT_WAIT_MS: u64 = 30_000;

/// Arguments of `brook verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The job spec (YAML); it must end by itself (bounded sources).
    spec: PathBuf,
    /// SIGKILLs of the job before it may finish.
    #[arg(long, default_value_t = 50)]
    kills: u32,
    /// Restart each attempt at a random parallelism (1 to 4).
    #[arg(long)]
    rescale: bool,
    /// Seed of the kill moments and parallelisms (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Default parallelism of the runs (overrides the spec's).
    #[arg(long)]
    parallelism: Option<u32>,
    /// Changes the spec before both runs, as `brook run --set`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Checkpoint interval of the killed run (default: the spec's, else 100ms).
    #[arg(long, value_name = "DURATION")]
    checkpoint_interval: Option<String>,
    /// Keep the scratch directory (its path is printed) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Test-only: check stdout sinks as the job prints them, which is at-least-once
    /// (rows printed after the last checkpoint are printed again after a restore),
    /// instead of through a file sink in their place; shows verify reporting
    /// duplicates.
    #[arg(long, hide = true)]
    check_stdout_as_is: bool,
}

/// The job as both runs see it.
struct Job {
    spec_path: PathBuf,
    spec: JobSpec,
    /// The user's `--set` changes.
    set: Vec<String>,
    /// The log topics the job reads or writes (copied into each run's data directory).
    topics: Vec<String>,
    checkpoint_interval_ms: i64,
    stdout_as_is: bool,
}

/// Where one run (`reference` or `killed`) keeps its data directory, outputs,
/// checkpoints and the stderr of its attempts.
struct RunDir(PathBuf);

impl RunDir {
    fn data(&self) -> PathBuf {
        self.0.join("data")
    }
    fn checkpoints(&self) -> PathBuf {
        self.0.join("checkpoints")
    }
    fn sink(&self, i: usize) -> PathBuf {
        self.0.join("sinks").join(i.to_string())
    }
    fn stdout(&self) -> PathBuf {
        self.0.join("stdout.jsonl")
    }
    fn stderr(&self, attempt: u32) -> PathBuf {
        self.0.join(format!("attempt-{attempt}.stderr"))
    }
}

/// A child killed (SIGKILL) and reaped when dropped, so an error of verify itself
/// never leaves a job process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // Already ended: nothing left to stop.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the killed run went through.
struct Killed {
    kills: u32,
    /// Kills that came after the attempt had completed a checkpoint.
    after_checkpoint: u32,
    /// Attempts that restored a checkpoint (after the first kill).
    restores: u32,
    /// Times the job finished before all kills were made and started over.
    restarts: u32,
}

pub(crate) fn verify(args: VerifyArgs, data_dir: &Path) -> Result<()> {
    let job = job(&args)?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let scratch = tempfile::Builder::new()
        .prefix("brook-verify-")
        .tempdir()
        .context("creating a scratch directory")?;
    let root = if args.keep {
        let path = scratch.keep();
        println!("scratch directory: {}", path.display());
        path
    } else {
        scratch.path().to_path_buf()
    };
    println!(
        "verifying job {} over {} kills (seed {seed}{})",
        job.spec.name,
        args.kills,
        if args.rescale { ", rescaling" } else { "" }
    );
    let reference = RunDir(root.join("reference"));
    prepare(&job, &reference, data_dir)?;
    let watch = Stopwatch::start();
    run_to_end(
        &job,
        &reference,
        0,
        &Options {
            parallelism: args.parallelism,
            checkpoints: false,
        },
    )
    .context("the reference run (without failures) failed")?;
    let reference_ms = watch.elapsed_nanos() / 1_000_000;
    println!("reference run: {reference_ms} ms");

    let killed = RunDir(root.join("killed"));
    let max_delay = max_delay_ms(
        reference_ms,
        args.kills,
        u64::try_from(job.checkpoint_interval_ms).unwrap_or(0),
    );
    let mut schedule = KillSchedule::new(
        seed,
        max_delay,
        reference_ms,
        args.rescale,
        u64::try_from(job.checkpoint_interval_ms).unwrap_or(0),
    );
    let stats = killed_run(
        &job,
        &killed,
        data_dir,
        &mut schedule,
        args.kills,
        args.parallelism,
    )?;
    println!(
        "killed run: {} kills ({} after a completed checkpoint), {} restores from a checkpoint{}",
        stats.kills,
        stats.after_checkpoint,
        stats.restores,
        if stats.restarts > 0 {
            format!(
                " ({} restarts from the beginning: the job finished before the kills were made)",
                stats.restarts
            )
        } else {
            String::new()
        }
    );

    let order = order_dependence(&job.spec, args.parallelism, args.rescale);
    let mut differ = 0;
    for (label, i) in checked_sinks(&job) {
        let want = sink_rows(&job, &reference, i)?;
        let got = sink_rows(&job, &killed, i)?;
        let diff = compare(&want, &got);
        if diff.is_empty() {
            println!("sink {label}: {} rows, as in the reference run", got.len());
        } else {
            differ += 1;
            print!("{}", describe(&label, &diff, EXAMPLES));
        }
    }
    if !order.is_empty() {
        println!(
            "the output may depend on the order in which rows arrive (docs/semantics.md §4a):"
        );
        for r in &order {
            println!("  {r}");
        }
    }
    if differ == 0 {
        println!("exactly-once held over {} kills (seed {seed})", stats.kills);
        return Ok(());
    }
    if !order.is_empty() {
        println!(
            "{differ} sinks differ from the reference run, which their dependence on arrival order (above) can explain: not reported as a violation (seed {seed})"
        );
        return Ok(());
    }
    anyhow::bail!(
        "exactly-once violated: {differ} sinks differ from the reference run after {} kills (repeat with --seed {seed})",
        stats.kills
    )
}

/// Reads and checks the spec, and what both runs need from it.
fn job(args: &VerifyArgs) -> Result<Job> {
    let spec = read_spec(&args.spec, &args.set)?;
    // The job's own checks first, with `brook run`'s messages.
    let base = args
        .spec
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let valid = spec::validate(spec::resolve_paths(spec.clone(), &base))
        .with_context(|| format!("{}: invalid job spec", args.spec.display()))?;
    if valid.group_source().is_some() {
        anyhow::bail!("{}: a job with assignment: group cannot be verified (its partitions move between processes)", args.spec.display());
    }
    let mut topics = Vec::new();
    for (i, s) in spec.sources.iter().enumerate() {
        let field = format!("sources[{i}] ({})", s.name());
        match s {
            SourceSpec::File { follow: true, .. } => {
                anyhow::bail!("{field}.follow: verify needs a job that ends (follow: false)")
            }
            SourceSpec::Log { bounded: Some(false), .. } => {
                anyhow::bail!("{field}.bounded: verify needs a job that ends (bounded: true)")
            }
            SourceSpec::Log { topic, .. } => topics.push(topic.clone()),
            SourceSpec::Kafka { .. } => anyhow::bail!(
                "{field}: Kafka sources cannot be verified yet (verify copies the input into a scratch directory; a Kafka topic it cannot)"
            ),
            SourceSpec::File { .. } | SourceSpec::Generator { .. } => {}
        }
    }
    for (i, s) in spec.sinks.iter().enumerate() {
        match s {
            SinkSpec::Log { topic, .. } => topics.push(topic.clone()),
            SinkSpec::Kafka { .. } => anyhow::bail!(
                "sinks[{i}] ({}): Kafka sinks cannot be verified yet (the runs would write to the Kafka topic)",
                s.name()
            ),
            SinkSpec::File { .. } | SinkSpec::Stdout { .. } | SinkSpec::Blackhole { .. } => {}
        }
    }
    for step in &spec.steps {
        if let Some(spec::EnrichSpec {
            table: spec::TableSpec::Log { topic, .. },
            ..
        }) = &step.enrich
        {
            topics.push(topic.clone());
        }
    }
    topics.sort();
    topics.dedup();
    let checkpoint_interval_ms = match &args.checkpoint_interval {
        Some(t) => brook::core::config::parse_duration_ms(t)
            .map_err(|e| anyhow::anyhow!("--checkpoint-interval {t:?}: {e}"))?,
        None => spec
            .checkpoint_interval_ms()?
            .unwrap_or(DEFAULT_CHECKPOINT_INTERVAL_MS),
    };
    if checkpoint_interval_ms <= 0 {
        anyhow::bail!("--checkpoint-interval: must be positive");
    }
    Ok(Job {
        spec_path: args.spec.clone(),
        spec,
        set: args.set.clone(),
        topics,
        checkpoint_interval_ms,
        stdout_as_is: args.check_stdout_as_is,
    })
}

/// The sinks compared: (label, index in `sinks`). A blackhole sink keeps nothing to
/// compare.
fn checked_sinks(job: &Job) -> Vec<(String, usize)> {
    job.spec
        .sinks
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let what = match s {
                SinkSpec::Blackhole { .. } => return None,
                SinkSpec::File { path, .. } => format!("file {}", path.display()),
                SinkSpec::Log { topic, .. } => format!("log topic {topic}, read committed"),
                SinkSpec::Stdout { .. } if job.stdout_as_is => "stdout, as printed".to_string(),
                SinkSpec::Stdout { .. } => "stdout, through a file sink".to_string(),
                SinkSpec::Kafka { topic, .. } => format!("Kafka topic {topic}"),
            };
            Some((format!("{} ({what})", s.name()), i))
        })
        .collect()
}

/// A fresh run directory: the job's log topics copied from the user's data directory.
fn prepare(job: &Job, run: &RunDir, user_data: &Path) -> Result<()> {
    if run.0.exists() {
        fs::remove_dir_all(&run.0).with_context(|| format!("removing {}", run.0.display()))?;
    }
    let topics = run.data().join("topics");
    fs::create_dir_all(&topics).with_context(|| format!("creating {}", topics.display()))?;
    for t in &job.topics {
        let from = user_data.join("topics").join(t);
        // A missing topic is reported by the job itself, as `brook run` would.
        if from.is_dir() {
            copy_dir(&from, &topics.join(t))
                .with_context(|| format!("copying topic {t} from {}", from.display()))?;
        }
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The `--set` changes that send the job's outputs into `run`: each file sink into
/// its own directory (keeping its file name, whose extension picks the format), each
/// stdout sink into a file sink there, the dead letters beside them.
fn redirects(job: &Job, run: &RunDir) -> Vec<String> {
    // A JSON string is a YAML string, whatever the path holds.
    let quoted = |p: &Path| serde_json::Value::String(p.display().to_string()).to_string();
    let mut set = Vec::new();
    for (i, s) in job.spec.sinks.iter().enumerate() {
        match s {
            SinkSpec::File { path, .. } => {
                let name = path.file_name().map_or_else(
                    || std::ffi::OsString::from("rows.jsonl"),
                    std::ffi::OsStr::to_os_string,
                );
                set.push(format!(
                    "sinks.{i}.path={}",
                    quoted(&run.sink(i).join(name))
                ));
            }
            SinkSpec::Stdout { .. } if !job.stdout_as_is => {
                set.push(format!("sinks.{i}.connector=file"));
                set.push(format!(
                    "sinks.{i}.path={}",
                    quoted(&run.sink(i).join("rows.jsonl"))
                ));
            }
            SinkSpec::Stdout { .. }
            | SinkSpec::Log { .. }
            | SinkSpec::Kafka { .. }
            | SinkSpec::Blackhole { .. } => {}
        }
    }
    if job.spec.dead_letter.is_some() {
        // Dead letters are appended as they come (at-least-once): not compared.
        set.push(format!(
            "dead_letter={}",
            quoted(&run.0.join("dead_letter.jsonl"))
        ));
    }
    set
}

/// How an attempt runs.
struct Options {
    parallelism: Option<u32>,
    checkpoints: bool,
}

/// Starts attempt `attempt` of the job in `run`: `brook run` on the run's data
/// directory with its outputs redirected; with checkpoints, restoring the latest
/// complete one if there is one.
fn start(job: &Job, run: &RunDir, attempt: u32, options: &Options) -> Result<(Running, bool)> {
    let exe = std::env::current_exe().context("finding the brook binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--data-dir")
        .arg(run.data())
        .args(["run", "--quiet"])
        .arg(&job.spec_path);
    if let Some(p) = options.parallelism {
        cmd.args(["--parallelism", &p.to_string()]);
    }
    for s in job.set.iter().cloned().chain(redirects(job, run)) {
        cmd.arg("--set").arg(s);
    }
    let mut restore = false;
    if options.checkpoints {
        cmd.args([
            "--checkpoint-interval",
            &format!("{}ms", job.checkpoint_interval_ms),
        ])
        .arg("--checkpoint-dir")
        .arg(run.checkpoints());
        restore = has_complete_checkpoint(&run.checkpoints());
        if restore {
            cmd.args(["--restore", "latest"]);
        }
    }
    let stdout = if job.stdout_as_is {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(run.stdout())
            .with_context(|| format!("opening {}", run.stdout().display()))?;
        Stdio::from(f)
    } else {
        Stdio::null()
    };
    let stderr_path = run.stderr(attempt);
    let stderr = File::create(&stderr_path)
        .with_context(|| format!("creating {}", stderr_path.display()))?;
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    Ok((Running(child), restore))
}

/// Whether `dir` holds a complete checkpoint.
fn has_complete_checkpoint(dir: &Path) -> bool {
    latest_checkpoint_id(dir).is_some()
}

/// The id of the newest complete checkpoint in `dir` (without `latest_complete`'s
/// warnings about the incomplete ones kills leave).
fn latest_checkpoint_id(dir: &Path) -> Option<u64> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let id = e
                .file_name()
                .to_string_lossy()
                .strip_prefix("chk-")?
                .parse::<u64>()
                .ok()?;
            RestoredCheckpoint::load(&e.path()).is_ok().then_some(id)
        })
        .max()
}

/// The id of the newest checkpoint in `dir` whose `_metadata` is written (what makes
/// it complete: it is written last, by a rename); cheap enough to poll, unlike
/// [`latest_checkpoint_id`], which loads each one.
fn newest_metadata_id(dir: &Path) -> Option<u64> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let id = e
                .file_name()
                .to_string_lossy()
                .strip_prefix("chk-")?
                .parse::<u64>()
                .ok()?;
            e.path().join("_metadata").is_file().then_some(id)
        })
        .max()
}

/// How waiting for an attempt's first checkpoint ended.
enum CheckpointWait {
    /// A checkpoint newer than the one it started from completed.
    Completed,
    /// The job ended by itself first.
    Ended,
    /// None within [`CHECKPOINT_WAIT_MS`].
    TimedOut,
}

/// Polls every 5 ms until a checkpoint newer than `before` completes in `dir`, the job
/// ends, or [`CHECKPOINT_WAIT_MS`] pass.
fn wait_for_checkpoint(
    child: &mut Running,
    dir: &Path,
    before: Option<u64>,
) -> Result<CheckpointWait> {
    for _ in 0..CHECKPOINT_WAIT_MS / 5 {
        if newest_metadata_id(dir) > before {
            return Ok(CheckpointWait::Completed);
        }
        if child.0.try_wait().context("polling the job")?.is_some() {
            return Ok(CheckpointWait::Ended);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(CheckpointWait::TimedOut)
}

/// An attempt that ended by itself: an error with its stderr unless it succeeded.
fn check_exit(run: &RunDir, attempt: u32, child: &mut Running) -> Result<()> {
    let status = child.0.wait().context("waiting for the job")?;
    if status.success() {
        return Ok(());
    }
    let stderr = fs::read_to_string(run.stderr(attempt)).unwrap_or_default();
    anyhow::bail!(
        "attempt {attempt} of the job ended with {status}: {}",
        stderr.trim()
    )
}

/// Runs one attempt to its end.
fn run_to_end(job: &Job, run: &RunDir, attempt: u32, options: &Options) -> Result<()> {
    let (mut child, _) = start(job, run, attempt, options)?;
    check_exit(run, attempt, &mut child)
}

/// Polls `child` every 5 ms for up to `ms`: whether it ended by itself.
fn ended_within(child: &mut Running, ms: u64) -> Result<bool> {
    for _ in 0..ms.div_ceil(5).max(1) {
        if child.0.try_wait().context("polling the job")?.is_some() {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(child.0.try_wait().context("polling the job")?.is_some())
}

/// The run with kills: attempts killed after the schedule's delays, each restoring the
/// latest checkpoint, then one to the end. A job that ends before all kills are made
/// starts over from nothing with shorter delays (up to [`MAX_ROUNDS`] times).
fn killed_run(
    job: &Job,
    run: &RunDir,
    user_data: &Path,
    schedule: &mut KillSchedule,
    kills: u32,
    parallelism: Option<u32>,
) -> Result<Killed> {
    let mut restarts = 0;
    let mut shortened = 0;
    let mut attempt = 0;
    'round: loop {
        prepare(job, run, user_data)?;
        let mut stats = Killed {
            kills: 0,
            after_checkpoint: 0,
            restores: 0,
            restarts,
        };
        while stats.kills < kills {
            let next = schedule.next_attempt();
            let options = Options {
                parallelism: next.parallelism.or(parallelism),
                checkpoints: true,
            };
            attempt += 1;
            let before = latest_checkpoint_id(&run.checkpoints());
            let started = Stopwatch::start();
            let (mut child, restored) = start(job, run, attempt, &options)?;
            if next.after_checkpoint {
                match wait_for_checkpoint(&mut child, &run.checkpoints(), before)? {
                    CheckpointWait::Completed | CheckpointWait::TimedOut => {}
                    CheckpointWait::Ended => {
                        // Too short to be killed after a checkpoint: start over with
                        // kills at random moments only. Once only (no attempt waits
                        // after it), so not one of the MAX_ROUNDS.
                        check_exit(run, attempt, &mut child)?;
                        schedule.ended_before_checkpoint();
                        restarts += 1;
                        continue 'round;
                    }
                }
            }
            if ended_within(&mut child, next.delay_ms)? {
                check_exit(run, attempt, &mut child)?;
                if next.after_checkpoint {
                    // The checkpoint it waited for was the job's last: as above.
                    schedule.ended_before_checkpoint();
                    restarts += 1;
                    continue 'round;
                }
                let ended_after_ms = started.elapsed_nanos() / 1_000_000;
                if shortened < MAX_ROUNDS && schedule.shorten(ended_after_ms) {
                    shortened += 1;
                    restarts += 1;
                    continue 'round;
                }
                // The kills cannot come sooner: verify what was made.
                return Ok(stats);
            }
            // SIGKILL: no chance to clean up, as a crash.
            child.0.kill().context("killing the job")?;
            child.0.wait().context("waiting for the killed job")?;
            stats.kills += 1;
            stats.restores += u32::from(restored);
            let progressed = latest_checkpoint_id(&run.checkpoints()) > before;
            stats.after_checkpoint += u32::from(progressed);
            schedule.killed(progressed);
        }
        let last = Options {
            parallelism: schedule.next_attempt().parallelism.or(parallelism),
            checkpoints: true,
        };
        attempt += 1;
        run_to_end(job, run, attempt, &last)
            .context("the last attempt (after the kills) failed")?;
        return Ok(stats);
    }
}

/// The committed rows of sink `i` in `run`.
fn sink_rows(job: &Job, run: &RunDir, i: usize) -> Result<Vec<String>> {
    match &job.spec.sinks[i] {
        SinkSpec::Log { topic, .. } => topic_rows(&run.data(), topic),
        SinkSpec::Stdout { .. } if job.stdout_as_is => lines(&run.stdout()),
        SinkSpec::File { path, format, .. } => {
            let format = format
                .or_else(|| spec::file_format(path))
                .unwrap_or(spec::FileFormat::Jsonl);
            file_rows(&run.sink(i), format)
        }
        SinkSpec::Stdout { .. } => file_rows(&run.sink(i), spec::FileFormat::Jsonl),
        SinkSpec::Kafka { .. } | SinkSpec::Blackhole { .. } => Ok(Vec::new()),
    }
}

/// The rows of the committed files in `dir` (every subtask's; a writer's pending
/// parts are hidden files, `.{name}.{subtask}.part-{n}`), in `format`.
fn file_rows(dir: &Path, format: spec::FileFormat) -> Result<Vec<String>> {
    let mut rows = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        // Nothing was committed.
        return Ok(rows);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        rows.extend(output_rows(&f, format)?);
    }
    Ok(rows)
}

/// The rows of one output file, gzip-decompressed when its name ends in `.gz`: its
/// lines (JSON lines), or each CSV record after the header as a JSON object keyed by
/// the header (a quoted field may span lines; the header is not a row).
fn output_rows(path: &Path, format: spec::FileFormat) -> Result<Vec<String>> {
    use std::io::BufRead;
    let input = brook::connectors::file::open_input(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let context = || format!("reading {}", path.display());
    match format {
        spec::FileFormat::Jsonl => input
            .lines()
            .collect::<std::io::Result<Vec<String>>>()
            .with_context(context),
        spec::FileFormat::Csv => {
            let mut r = csv::Reader::from_reader(input);
            let headers = r.headers().with_context(context)?.clone();
            r.records()
                .map(|rec| {
                    rec.map(|rec| brook::connectors::csv_row_to_json(&headers, &rec).to_string())
                })
                .collect::<csv::Result<Vec<String>>>()
                .with_context(context)
        }
    }
}

fn lines(path: &Path) -> Result<Vec<String>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text.lines().map(str::to_string).collect())
}

/// The values of the records of `topic` in the log at `data`, read committed.
fn topic_rows(data: &Path, topic: &str) -> Result<Vec<String>> {
    let options = LogOptions {
        maintenance_interval_ms: None,
        ..LogOptions::default()
    };
    let log = Log::open(data, options).with_context(|| format!("opening {}", data.display()))?;
    let t = log.topic(topic).with_context(|| format!("topic {topic}"))?;
    let mut records = Vec::new();
    for p in t.partitions() {
        let end = p.end_offset(IsolationLevel::ReadCommitted);
        let mut at = p.log_start_offset();
        while at < end {
            at = p
                .read_into_isolated(
                    at,
                    ReadLimit::default(),
                    IsolationLevel::ReadCommitted,
                    &mut records,
                )
                .with_context(|| format!("reading topic {topic}"))?
                .next_offset;
        }
    }
    log.close()?;
    Ok(records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect())
}
