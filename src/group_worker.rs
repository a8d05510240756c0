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
use brook::engine::{latest_complete, CheckpointConfig, JobConfig, JobHandle, StateBackendFactory};
use brook::kafka::{GroupListener, GroupMember, OffsetCommitter};
use brook::spec::{self, GroupSource, ValidSpec};
use brook::state::RocksDbOptions;

/// Marks a partition whose bounded job reached its end (all its output committed).
const FINISHED: &str = "_finished";

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

struct Worker {
    run: GroupRun,
    /// Weak: the member's context holds the worker (as its listener), and the member
    /// must be dropped at the end, which closes it properly (it leaves the group).
    member: OnceLock<Weak<GroupMember>>,
    jobs: Mutex<BTreeMap<i32, JobHandle>>,
    failure: Mutex<Option<anyhow::Error>>,
}

impl Worker {
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

    fn start(&self, partition: i32) -> Result<JobHandle> {
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
        Ok(built.env.start(&name)?)
    }

    /// Stops a partition's job with a checkpoint (the hand-over point).
    fn stop(&self, partition: i32, job: JobHandle) {
        match job.stop_with_checkpoint() {
            Ok(Some(_)) => self.partition_ended(partition),
            Ok(None) => self.say(format_args!(
                "partition {partition}: stopped with a checkpoint"
            )),
            Err(e) => {
                self.fail(anyhow::Error::new(e).context(format!("partition {partition}: stopping")))
            }
        }
    }

    /// A partition's job reached the end of its input: everything is committed.
    fn partition_ended(&self, partition: i32) {
        let marker = self.dir(partition).join(FINISHED);
        match std::fs::write(&marker, b"") {
            Ok(()) => self.say(format_args!("partition {partition}: finished")),
            Err(e) => self.fail(anyhow::anyhow!("writing {}: {e}", marker.display())),
        }
    }

    /// Joins the partitions' jobs that ended by themselves.
    fn reap(&self) {
        let ended: Vec<(i32, JobHandle)> = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let done: Vec<i32> = jobs
                .iter()
                .filter(|(_, j)| j.is_finished())
                .map(|(p, _)| *p)
                .collect();
            done.into_iter()
                .filter_map(|p| jobs.remove(&p).map(|j| (p, j)))
                .collect()
        };
        for (p, job) in ended {
            match job.join() {
                Ok(_) => self.partition_ended(p),
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
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop))?;
    let source = run.source.clone();
    let worker = Arc::new(Worker {
        run,
        member: OnceLock::new(),
        jobs: Mutex::new(BTreeMap::new()),
        failure: Mutex::new(None),
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
        .partition_count()
        .with_context(|| format!("topic {:?}", source.topic))?;
    worker.say(format_args!(
        "joined for topic {:?} ({partitions} partitions)",
        source.topic
    ));
    let all_finished = |w: &Worker| (0..partitions).all(|p| w.finished(p));
    let result = loop {
        member.poll(Duration::from_millis(100));
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
            worker.say("every partition finished");
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
