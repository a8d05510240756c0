//! Running a job: from its execution plan (`plan`), create channels, assemble one task
//! per subtask of each chain, run each on its own thread, and report the first failure.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use brook_core::time::Stopwatch;
use tracing::{error, info};

use crate::chain::{panic_message, ErasedLink};
use crate::checkpoint::{CheckpointControl, CoordinatorConfig, CoordinatorThread};
use crate::error::{EngineError, TaskFailure};
use crate::graph::JobGraph;
use crate::graph::{BuildEnv, ErasedGate, VertexKind};
use crate::metrics::{JobMetrics, VertexTotals};
use crate::plan::plan;
use crate::task::{TaskEnv, TaskRunner};

/// A running job.
#[derive(Debug)]
pub struct JobHandle {
    name: String,
    threads: Vec<(String, JoinHandle<()>)>,
    /// The checkpoint coordinator and its stop flag.
    coordinator: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    checkpoints: Option<Arc<CheckpointControl>>,
    cancelled: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<EngineError>>>,
    metrics: JobMetrics,
    started: Stopwatch,
}

/// What a finished job did.
#[derive(Debug, Clone)]
pub struct JobResult {
    /// The job's name.
    pub name: String,
    /// Wall-clock duration in ms.
    pub elapsed_ms: u64,
    /// Per vertex (in graph order): name and totals.
    pub vertices: Vec<(String, VertexTotals)>,
}

impl JobHandle {
    /// Live metrics of the job.
    pub fn metrics(&self) -> &JobMetrics {
        &self.metrics
    }

    /// Asks every task to stop; [`JobHandle::join`] then returns
    /// [`EngineError::Cancelled`] (unless a task had failed first).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// Takes a savepoint into a new directory `savepoint-<id>` under `parent` and
    /// waits for it: a checkpoint of the user's, kept until deleted by hand, from which
    /// `restore` works at any parallelism. The job goes on.
    ///
    /// # Errors
    /// [`EngineError::Savepoint`] when the job does not take checkpoints, has ended,
    /// or the savepoint failed.
    pub fn savepoint(&self, parent: &std::path::Path) -> Result<std::path::PathBuf, EngineError> {
        let control = self.checkpoints.as_ref().ok_or_else(|| {
            EngineError::Savepoint("the job takes no checkpoints: set a checkpoint interval".into())
        })?;
        std::fs::create_dir_all(parent)
            .map_err(|e| EngineError::Savepoint(format!("{}: {e}", parent.display())))?;
        Self::request_checkpoint(control, Some(parent.to_path_buf()))
    }

    fn request_checkpoint(
        control: &CheckpointControl,
        parent: Option<std::path::PathBuf>,
    ) -> Result<std::path::PathBuf, EngineError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        *control.savepoint.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(crate::checkpoint::SavepointRequest { parent, done: tx });
        rx.recv()
            .map_err(|_| EngineError::Savepoint("the job ended before the checkpoint".into()))?
            .map_err(EngineError::Savepoint)
    }

    /// Stops the job with a checkpoint: takes one now (in the checkpoint directory,
    /// like the periodic ones), lets the sinks commit it, then cancels and waits; a
    /// restore of the latest checkpoint resumes exactly there (used to hand a job's
    /// input to another process: the Kafka group mode). A job at the end of its input
    /// finishes instead (its final checkpoint stands for the stop). `Ok(None)`: stopped.
    ///
    /// # Errors
    /// [`EngineError::Savepoint`] when the job takes no checkpoints or the checkpoint
    /// failed (the job is canceled all the same), or a task's failure.
    pub fn stop_with_checkpoint(self) -> Result<Option<JobResult>, EngineError> {
        let Some(control) = self.checkpoints.clone() else {
            self.cancel();
            let _ = self.join();
            return Err(EngineError::Savepoint(
                "the job takes no checkpoints: set a checkpoint interval".into(),
            ));
        };
        let at_end = || {
            control.final_id.load(Ordering::SeqCst) != 0
                || control.task_ended.load(Ordering::SeqCst)
        };
        if !at_end() {
            match Self::request_checkpoint(&control, None) {
                Ok(_) => self.cancel(),
                Err(_) if at_end() || self.is_finished() => {}
                Err(e) => {
                    self.cancel();
                    let _ = self.join();
                    return Err(e);
                }
            }
        }
        match self.join() {
            Ok(r) => Ok(Some(r)),
            Err(EngineError::Cancelled) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether every task has ended.
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|(_, h)| h.is_finished())
    }

    /// Waits for the job to end.
    ///
    /// # Errors
    /// The first task failure (naming operator and subtask), or
    /// [`EngineError::Cancelled`].
    pub fn join(mut self) -> Result<JobResult, EngineError> {
        let threads = std::mem::take(&mut self.threads);
        for (name, h) in threads {
            if let Err(p) = h.join() {
                // A panic outside operator code: a bug in the engine.
                let e = EngineError::Task {
                    task: name,
                    message: format!("panicked in the runtime: {}", panic_message(p)),
                };
                self.failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
            }
        }
        if let Some((h, stop)) = self.coordinator.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = h.join();
        }
        if let Some(c) = &self.checkpoints {
            // Every task has ended: files a checkpoint aborted at the end of the job
            // moved to the shared directory are referenced by none and can go.
            crate::checkpoint::remove_unreferenced_shared_files(&c.dir);
        }
        if let Some(e) = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(e);
        }
        if self.cancelled.load(Ordering::SeqCst) {
            return Err(EngineError::Cancelled);
        }
        let elapsed_ms = self.started.elapsed_nanos() / 1_000_000;
        let vertices = self
            .metrics
            .vertices()
            .into_iter()
            .map(|v| (v.name.clone(), v.totals()))
            .collect();
        info!(job = %self.name, elapsed_ms, "job finished");
        Ok(JobResult {
            name: self.name.clone(),
            elapsed_ms,
            vertices,
        })
    }
}

pub(crate) fn start(
    name: &str,
    g: &JobGraph,
    metrics: JobMetrics,
) -> Result<JobHandle, EngineError> {
    g.config.validate()?;
    let plan = plan(g)?;
    let n = g.vertices.len();
    let par: Vec<u32> = plan.vertices.iter().map(|v| v.parallelism).collect();
    let max = g.config.max_parallelism;

    let first_vertex = metrics.vertices().len();
    let vmetrics: Vec<_> = g
        .vertices
        .iter()
        .zip(&par)
        .map(|(v, p)| metrics.register(&v.name, *p))
        .collect();
    metrics.set_edges(
        g.edges
            .iter()
            .zip(&plan.edges)
            .map(|(e, ep)| crate::metrics::EdgeMetrics {
                from: e.from,
                to: e.to,
                partitioner: ep.partitioner.to_string(),
                chained: ep.chained,
            })
            .collect(),
    );
    let cancelled = Arc::new(AtomicBool::new(false));
    let vertex_names: Vec<String> = g.vertices.iter().map(|v| v.name.clone()).collect();
    if let Some(r) = &g.config.restore {
        r.check_graph(&vertex_names, max).map_err(|m| {
            EngineError::InvalidGraph(format!("cannot restore {}: {m}", r.path.display()))
        })?;
    }
    let mut coordinator_setup = None;
    let checkpoints = match &g.config.checkpoint {
        Some(c) => {
            std::fs::create_dir_all(&c.dir).map_err(|e| {
                EngineError::InvalidGraph(format!("checkpoint directory {}: {e}", c.dir.display()))
            })?;
            let (tx, rx) = crossbeam_channel::unbounded();
            let control = Arc::new(CheckpointControl {
                requested: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                task_ended: AtomicBool::new(false),
                sources_total: plan.source_subtasks(),
                sources_ended: Default::default(),
                final_id: AtomicU64::new(0),
                final_abandoned: AtomicBool::new(false),
                acks: tx,
                dir: c.dir.clone(),
                savepoint: Default::default(),
                savepoint_dirs: Default::default(),
            });
            coordinator_setup = Some((Arc::clone(&control), rx, c.clone()));
            Some(control)
        }
        None => None,
    };
    let env = BuildEnv {
        max_parallelism: g.config.max_parallelism,
        batch_size: g.config.batch_size,
        channel_capacity: g.config.channel_capacity,
        clock: g.config.clock.clone(),
        state_backend: g.config.state_backend.clone(),
        task: TaskEnv {
            clock: g.config.clock.clone(),
            cancelled: Arc::clone(&cancelled),
            batch_size: g.config.batch_size,
            checkpoints,
        },
        restore: g.config.restore.clone(),
    };
    // Channels of the edges that are not chained.
    let mut writers: Vec<Vec<Option<ErasedLink>>> = Vec::with_capacity(g.edges.len());
    let mut gates: Vec<Vec<Option<ErasedGate>>> = Vec::with_capacity(g.edges.len());
    for (e, ep) in g.edges.iter().zip(&plan.edges) {
        if ep.chained {
            writers.push(Vec::new());
            gates.push(Vec::new());
            continue;
        }
        let board = g
            .config
            .hot_keys
            .then(|| metrics.hot_keys_of(first_vertex + e.to));
        let (w, gs) = e.builder.build(
            ep.partitioner,
            par[e.from],
            par[e.to],
            &vmetrics[e.from],
            board.as_ref(),
            &env,
        );
        writers.push(w.into_iter().map(Some).collect());
        gates.push(gs.into_iter().map(Some).collect());
    }

    // Links, from the sinks back to the sources (edges only go forward in id order).
    for (v, p) in g.vertices.iter().zip(&par) {
        if let VertexKind::Source(src) = &v.kind {
            src.enumerate(*p)?;
        }
    }
    let mut links: Vec<Vec<Option<ErasedLink>>> = (0..n).map(|_| Vec::new()).collect();
    let mut runners: Vec<Box<dyn TaskRunner>> = Vec::new();
    for v in (0..n).rev() {
        let mut built = Vec::with_capacity(par[v] as usize);
        for i in 0..par[v] {
            let outputs_of = &plan.vertices[v].outputs;
            let mut outputs = Vec::with_capacity(outputs_of.len());
            for &e in outputs_of {
                let slot = if plan.edges[e].chained {
                    links[g.edges[e].to]
                        .get_mut(i as usize)
                        .and_then(Option::take)
                } else {
                    writers[e].get_mut(i as usize).and_then(Option::take)
                };
                outputs.push(slot.ok_or_else(|| {
                    EngineError::InvalidGraph(format!("missing output of {}", g.vertices[v].name))
                })?);
            }
            let m = Arc::clone(&vmetrics[v][i as usize]);
            let info = &plan.vertices[v].subtasks[i as usize];
            match &g.vertices[v].kind {
                VertexKind::Source(s) => runners.push(s.build(v, info, outputs, m, &env)?),
                VertexKind::Operator(f) | VertexKind::Sink(f) => {
                    built.push(Some(f.build(v, info, outputs, m, &env)?))
                }
            }
        }
        links[v] = built;
    }
    // Tasks of chain heads fed by channels.
    for chain in plan
        .chains
        .iter()
        .filter(|c| !plan.vertices[c.head()].is_source)
    {
        let v = chain.head();
        let inputs = &plan.vertices[v].inputs;
        for (i, task) in chain.tasks.iter().enumerate() {
            let mut gs = Vec::with_capacity(inputs.len());
            for &e in inputs {
                gs.push(
                    gates[e][i]
                        .take()
                        .ok_or_else(|| EngineError::InvalidGraph("missing input gate".into()))?,
                );
            }
            let head = links[v][i]
                .take()
                .ok_or_else(|| EngineError::InvalidGraph("missing chain head".into()))?;
            let first = inputs.first().ok_or_else(|| {
                EngineError::InvalidGraph(format!("{} has no input", g.vertices[v].name))
            })?;
            let builder = &g.edges[*first].builder;
            runners.push(builder.runner(
                task.clone(),
                v,
                gs,
                head,
                Arc::clone(&vmetrics[v][i]),
                &env,
            )?);
        }
    }

    let failure: Arc<Mutex<Option<EngineError>>> = Arc::new(Mutex::new(None));
    let task_count = plan.task_count();
    debug_assert_eq!(
        task_count,
        runners.len(),
        "one task per subtask of each chain"
    );
    let mut threads = Vec::with_capacity(runners.len());
    info!(job = name, tasks = runners.len(), "starting job");
    for r in runners {
        let task = r.name();
        let (cancel, fail) = (Arc::clone(&cancelled), Arc::clone(&failure));
        let t = task.clone();
        let h = std::thread::Builder::new()
            .name(thread_name(&task))
            .spawn(move || {
                if let Err(TaskFailure::Failed(e)) = r.run() {
                    error!(task = %t, error = %e, "task failed");
                    fail.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                    cancel.store(true, Ordering::SeqCst);
                }
            })
            .map_err(|source| EngineError::Spawn {
                task: task.clone(),
                source,
            });
        match h {
            Ok(h) => threads.push((task, h)),
            Err(e) => {
                cancelled.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
    }
    let control_for_handle = coordinator_setup.as_ref().map(|(c, _, _)| Arc::clone(c));
    let coordinator = match coordinator_setup {
        Some((control, acks, config)) => {
            let restored = g.config.restore.as_ref().map_or(0, |r| r.id);
            let first_id = crate::checkpoint::newest_id(&config.dir).max(restored) + 1;
            let stop = Arc::new(AtomicBool::new(false));
            let thread = CoordinatorThread {
                config: CoordinatorConfig {
                    dir: config.dir.clone(),
                    interval_ms: config.interval_ms,
                    timeout_ms: config.timeout_ms,
                    tasks: task_count,
                    first_id,
                },
                retain: config.retain,
                job: name.to_string(),
                vertices: vertex_names,
                max_parallelism: max,
                control,
                acks,
                clock: g.config.clock.clone(),
                stop: Arc::clone(&stop),
                stats: Arc::clone(metrics.checkpoints()),
                sizes: Default::default(),
            };
            let h = std::thread::Builder::new()
                .name("checkpoints".into())
                .spawn(move || thread.run())
                .map_err(|source| EngineError::Spawn {
                    task: "checkpoint coordinator".into(),
                    source,
                })?;
            Some((h, stop))
        }
        None => None,
    };
    Ok(JobHandle {
        name: name.to_string(),
        threads,
        coordinator,
        checkpoints: control_for_handle,
        cancelled,
        failure,
        metrics,
        started: Stopwatch::start(),
    })
}

fn thread_name(task: &str) -> String {
    // Linux shows 15 bytes of a thread name.
    task.chars().take(15).collect()
}
