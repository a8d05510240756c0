//! `brook run` of a job whose Kafka source has `assignment: group`: this process joins
//! the source's consumer group and runs one job per partition the group gives it, as
//! Kafka Streams runs one task per partition. Each partition's job checkpoints into
//! `<checkpoint dir>/p<partition>` (a directory every process of the job shares) and is
//! stopped with a checkpoint when the group takes the partition away; whichever process
//! gets the partition next restores that checkpoint, so the partition's keyed state,
//! its offsets and its sinks' pending output move with it (the sinks' transactional
//! ids are per partition: the new owner fences the old). A process that dies is
//! noticed by the group after `session.timeout.ms`; its partitions resume from their
//! latest complete checkpoints.
//!
//! With `bounded: true` a partition's job ends at the partition's end and leaves
//! `p<partition>/_finished`; every process exits once all partitions have one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use anyhow::{Context, Result};
use brook::core::bad_record::BadRecordCounts;
use brook::core::time::Stopwatch;
use brook::engine::metrics::JobMetrics;
use brook::engine::{latest_complete, CheckpointConfig, JobConfig, JobHandle, StateBackendFactory};
use brook::kafka::{GroupListener, GroupMember, OffsetCommitter};
use brook::spec::{self, GroupSource, ValidSpec};
use brook::state::RocksDbOptions;

/// Marks a partition whose bounded job reached its end (all its output committed).
const FINISHED: &str = "_finished";

/// Names the job whose partitions a checkpoint root holds (job, topic, group), so
/// another job pointed at the same directory is refused rather than restoring
/// someone else's state.
const OWNER: &str = "_job.json";

/// What the group worker needs from `brook run`'s arguments.
pub(crate) struct GroupRun {
    pub(crate) valid: ValidSpec,
    pub(crate) source: GroupSource,
    /// Checkpoint interval (ms); group mode needs checkpoints.
    pub(crate) interval_ms: i64,
    /// Root of the partitions' checkpoint directories (shared by the processes).
    pub(crate) checkpoint_root: PathBuf,
    /// `None`: keyed state in memory; else RocksDB under this directory.
    pub(crate) rocksdb_dir: Option<PathBuf>,
    pub(crate) quiet: bool,
}

/// A partition's running job and what it reports.
struct Part {
    job: JobHandle,
    report: Report,
}

/// What a partition's job counts.
struct Report {
    metrics: JobMetrics,
    sources: Vec<String>,
    sinks: Vec<String>,
    bad: Arc<BadRecordCounts>,
}

impl Report {
    /// `read R, written W` (and bad records, if any).
    fn counts(&self) -> String {
        let read = super::totals::totals(&self.metrics, &self.sources, false);
        let written = super::totals::totals(&self.metrics, &self.sinks, true);
        let mut s = format!("read {read}, written {written}");
        let (skipped, dead) = (self.bad.skipped(), self.bad.dead_lettered());
        if skipped + dead > 0 {
            s.push_str(&format!(", skipped {skipped}, dead-lettered {dead}"));
        }
        s
    }
}

struct Worker {
    run: GroupRun,
    /// Weak: the member's context holds the worker (as its listener), and the member
    /// must be dropped at the end, which closes it properly (it leaves the group).
    member: OnceLock<Weak<GroupMember>>,
    jobs: Mutex<BTreeMap<i32, Part>>,
    failure: Mutex<Option<anyhow::Error>>,
    /// Since when the member waits for an assignment (joined, or partitions revoked).
    waiting: Mutex<Option<Stopwatch>>,
}

impl Worker {
    fn set_waiting(&self, waiting: bool) {
        *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) = waiting.then(Stopwatch::start);
    }

    /// Seconds the member has waited for an assignment, if it waits.
    fn waited_s(&self) -> Option<u64> {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|w| w.elapsed_nanos() / 1_000_000_000)
    }

    fn say(&self, what: impl std::fmt::Display) {
        if !self.run.quiet {
            eprintln!("group {}: {what}", self.run.source.group);
        }
    }

    fn dir(&self, partition: i32) -> PathBuf {
        self.run.checkpoint_root.join(format!("p{partition}"))
    }

    fn finished(&self, partition: i32) -> bool {
        self.dir(partition).join(FINISHED).exists()
    }

    fn fail(&self, e: anyhow::Error) {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    }

    fn start(&self, partition: i32) -> Result<Part> {
        let committer: Arc<dyn OffsetCommitter> = match self.member.get().and_then(Weak::upgrade) {
            Some(m) => m,
            None => anyhow::bail!("no group membership"),
        };
        let dir = self.dir(partition);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let restore = latest_complete(&dir).ok().map(Arc::new);
        match &restore {
            Some(r) => self.say(format_args!(
                "partition {partition}: restoring checkpoint {}",
                r.id
            )),
            None => self.say(format_args!("partition {partition}: starting")),
        }
        let state_backend = match &self.run.rocksdb_dir {
            Some(d) => StateBackendFactory::rocksdb(d, RocksDbOptions::default()),
            None => StateBackendFactory::memory(),
        };
        let config = JobConfig {
            state_backend,
            checkpoint: Some(CheckpointConfig::new(&dir, self.run.interval_ms)),
            restore,
            ..JobConfig::with_parallelism(1)
        };
        let built = spec::build_partition(&self.run.valid, config, partition, committer)
            .with_context(|| format!("partition {partition}: cannot build the job"))?;
        let name = format!("{}.p{partition}", self.run.valid.spec.name);
        let metrics = JobMetrics::default();
        let job = built.env.start_with_metrics(&name, metrics.clone())?;
        Ok(Part {
            job,
            report: Report {
                metrics,
                sources: built.sources,
                sinks: built.sinks,
                bad: built.bad_records,
            },
        })
    }

    /// Stops a partition's job with a checkpoint (the hand-over point).
    fn stop(&self, partition: i32, part: Part) {
        let Part { job, report } = part;
        match job.stop_with_checkpoint() {
            Ok(Some(_)) => self.partition_ended(partition, &report),
            Ok(None) => self.say(format_args!(
                "partition {partition}: stopped with a checkpoint ({})",
                report.counts()
            )),
            Err(e) => {
                self.fail(anyhow::Error::new(e).context(format!("partition {partition}: stopping")))
            }
        }
    }

    /// A partition's job reached the end of its input: everything is committed.
    fn partition_ended(&self, partition: i32, report: &Report) {
        let marker = self.dir(partition).join(FINISHED);
        match std::fs::write(&marker, b"") {
            Ok(()) => self.say(format_args!(
                "partition {partition}: finished ({})",
                report.counts()
            )),
            Err(e) => self.fail(anyhow::anyhow!("writing {}: {e}", marker.display())),
        }
    }

    /// Joins the partitions' jobs that ended by themselves.
    fn reap(&self) {
        let ended: Vec<(i32, Part)> = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let done: Vec<i32> = jobs
                .iter()
                .filter(|(_, j)| j.job.is_finished())
                .map(|(p, _)| *p)
                .collect();
            done.into_iter()
                .filter_map(|p| jobs.remove(&p).map(|j| (p, j)))
                .collect()
        };
        for (p, Part { job, report }) in ended {
            match job.join() {
                Ok(_) => self.partition_ended(p, &report),
                Err(e) => self.fail(anyhow::Error::new(e).context(format!("partition {p}"))),
            }
        }
    }

    fn stop_all(&self) {
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for (p, job) in jobs {
            self.stop(p, job);
        }
    }
}

impl GroupListener for Worker {
    fn revoked(&self, partitions: &[i32]) {
        self.say(format_args!("revoked partitions {partitions:?}"));
        self.set_waiting(true);
        for p in partitions {
            let job = self
                .jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(p);
            if let Some(job) = job {
                self.stop(*p, job);
            }
        }
    }

    fn assigned(&self, partitions: &[i32]) {
        self.set_waiting(false);
        let member = self
            .member
            .get()
            .and_then(Weak::upgrade)
            .and_then(|m| m.member_id())
            .unwrap_or_else(|| "?".into());
        self.say(format_args!(
            "member {member}: assigned partitions {partitions:?}"
        ));
        for p in partitions {
            if self.finished(*p) {
                continue;
            }
            match self.start(*p) {
                Ok(job) => {
                    self.jobs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(*p, job);
                }
                Err(e) => self.fail(e.context(format!("partition {p}: cannot start"))),
            }
        }
    }
}

/// Runs until interrupted (Ctrl-C, SIGTERM), a partition's job fails, or (bounded)
/// every partition has finished.
pub(crate) fn run(run: GroupRun) -> Result<()> {
    std::fs::create_dir_all(&run.checkpoint_root)
        .with_context(|| format!("creating {}", run.checkpoint_root.display()))?;
    claim_root(&run)?;
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop))?;
    let source = run.source.clone();
    let worker = Arc::new(Worker {
        run,
        member: OnceLock::new(),
        jobs: Mutex::new(BTreeMap::new()),
        failure: Mutex::new(None),
        waiting: Mutex::new(Some(Stopwatch::start())),
    });
    let member = Arc::new(
        GroupMember::join(
            &source.bootstrap,
            &source.topic,
            &source.group,
            &source.properties,
            Arc::clone(&worker) as Arc<dyn GroupListener>,
        )
        .with_context(|| format!("joining consumer group {:?}", source.group))?,
    );
    // The listener runs inside `poll`, which only starts below.
    let _ = worker.member.set(Arc::downgrade(&member));
    let partitions = member
        .partition_count(source.connect_timeout_ms)
        .with_context(|| format!("topic {:?}", source.topic))?;
    worker.say(format_args!(
        "joining for topic {:?} ({partitions} partitions)",
        source.topic
    ));
    if partitions == 1 {
        tracing::warn!(
            topic = %source.topic,
            "the topic has one partition: only one process of the group can work on it (create topics with as many partitions as processes you want to run)"
        );
    }
    let all_finished = |w: &Worker| (0..partitions).all(|p| w.finished(p));
    let mut told = 0;
    let result = loop {
        member.poll(Duration::from_millis(100));
        match worker.waited_s() {
            // A rebalance waits for every member to rejoin: say so while it lasts.
            Some(s) if s < told => told = 0,
            Some(s) if s >= told + 10 => {
                told = s;
                worker.say(format_args!(
                    "waiting {s} s for the group to assign partitions (a rebalance waits for every member to rejoin, up to max.poll.interval.ms)"
                ));
            }
            Some(_) => {}
            None => told = 0,
        }
        worker.reap();
        if let Some(e) = worker
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            break Err(e);
        }
        if source.bounded && all_finished(&worker) {
            worker.say(format_args!(
                "every partition finished (markers {}/p*/{FINISHED}; a new run needs a new --checkpoint-dir)",
                worker.run.checkpoint_root.display()
            ));
            break Ok(());
        }
        if stop.load(Ordering::SeqCst) {
            worker.say("stopping");
            break Ok(());
        }
    };
    worker.stop_all();
    member.leave();
    // The last reference (the partitions' jobs are over): closing the consumer
    // completes the leave.
    drop(member);
    let later = worker
        .failure
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    match (result, later) {
        (Err(e), _) | (Ok(()), Some(e)) => Err(e),
        (Ok(()), None) => Ok(()),
    }
}

/// Checks (or, for a new directory, records) that the checkpoint root belongs to this
/// job: its name, topic and group.
fn claim_root(run: &GroupRun) -> Result<()> {
    let owner = serde_json::json!({
        "job": run.valid.spec.name,
        "topic": run.source.topic,
        "group": run.source.group,
    });
    let path = run.checkpoint_root.join(OWNER);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let found: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a brook group-job record", path.display()))?;
            if found != owner {
                anyhow::bail!(
                    "--checkpoint-dir {} holds the checkpoints of {found}, not of this job ({owner}): give each job a directory of its own",
                    run.checkpoint_root.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Another process of the job may be writing the record right now.
            let taken = run
                .checkpoint_root
                .read_dir()
                .map(|d| {
                    d.flatten()
                        .any(|e| !e.file_name().to_string_lossy().starts_with(OWNER))
                })
                .unwrap_or(false);
            if taken {
                anyhow::bail!(
                    "--checkpoint-dir {} is not empty and was not made by a group job: give the job a directory of its own",
                    run.checkpoint_root.display()
                );
            }
            // Written whole, then renamed: two processes starting together agree.
            let tmp = run
                .checkpoint_root
                .join(format!("{OWNER}.{}", std::process::id()));
            std::fs::write(&tmp, owner.to_string())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .with_context(|| format!("writing {}", path.display()))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
}

/// Sets `stop` on Ctrl-C or SIGTERM.
fn watch_signals(stop: Arc<AtomicBool>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async {
                let Ok(mut term) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                else {
                    return;
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                stop.store(true, Ordering::SeqCst);
            });
        })
        .context("starting the signal thread")?;
    Ok(())
}
