//! The job graph: vertices (sources, operators, sinks) with their parallelism and
//! edges with their partitioner. Typed builders live behind small object-safe traits,
//! so the planner handles vertices of any record type; types meet again only where a
//! task is assembled.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use brook_core::cancel::CancelFlag;
use brook_core::operator::{Operator, OperatorContext, SubtaskInfo};
use brook_core::partition::Partitioner;
use brook_core::sink::Sink;
use brook_core::source::{Source, Split};
use brook_core::time::SharedClock;
use brook_core::watermark::WatermarkStrategy;
use brook_state::KeyedStateBackend;

use crate::chain::{combine_outputs, erase, unerase, ErasedLink, OperatorLink, SinkLink};
use crate::channel::{channels, ChannelWriter, EdgeChannels, InputGate, KeyHasher};
use crate::checkpoint::RestoredCheckpoint;
use crate::error::EngineError;
use crate::ids::VertexId;
use crate::metrics::OperatorMetrics;
use crate::task::{InputTask, SourceTask, TaskEnv, TaskRunner};

pub(crate) use crate::state_backend::StateBackendFactory;

/// What builders need while assembling tasks.
#[derive(Clone)]
pub(crate) struct BuildEnv {
    pub(crate) max_parallelism: u32,
    pub(crate) batch_size: usize,
    pub(crate) channel_capacity: usize,
    pub(crate) clock: SharedClock,
    pub(crate) state_backend: StateBackendFactory,
    pub(crate) task: TaskEnv,
    /// The checkpoint the job restores from.
    pub(crate) restore: Option<Arc<RestoredCheckpoint>>,
}

impl BuildEnv {
    /// A fresh keyed state backend for subtask `info` of operator vertex `vertex`.
    pub(crate) fn keyed_backend(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
    ) -> Result<Box<dyn KeyedStateBackend>, EngineError> {
        self.state_backend
            .create(&crate::state_backend::StateBackendContext { vertex, info })
    }
}

/// Builds the chain link of an operator or sink vertex for one subtask.
pub(crate) trait LinkVertex: Send + Sync {
    fn build(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
        outputs: Vec<ErasedLink>,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<ErasedLink, EngineError>;
}

/// Builds the task of a source vertex for one subtask.
pub(crate) trait SourceVertex: Send + Sync {
    /// Enumerates the splits (once per run) for `parallelism` readers.
    fn enumerate(&self, parallelism: u32) -> Result<(), EngineError>;
    fn build(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
        outputs: Vec<ErasedLink>,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<Box<dyn TaskRunner>, EngineError>;
}

/// A type-erased `InputGate<T>`.
pub(crate) type ErasedGate = Box<dyn Any + Send>;

/// Builds the channels of an edge and the tasks that read them.
pub(crate) trait EdgeBuilder: Send + Sync {
    /// Writers (one per upstream subtask) and gates (one per downstream subtask).
    fn build(
        &self,
        partitioner: Partitioner,
        up: u32,
        down: u32,
        up_metrics: &[Arc<OperatorMetrics>],
        env: &BuildEnv,
    ) -> (Vec<ErasedLink>, Vec<ErasedGate>);
    /// The task reading `gates` (of edges of this record type) into `head`.
    fn runner(
        &self,
        name: String,
        gates: Vec<ErasedGate>,
        head: ErasedLink,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<Box<dyn TaskRunner>, EngineError>;
}

/// What a vertex is.
#[derive(Clone)]
pub(crate) enum VertexKind {
    Source(Arc<dyn SourceVertex>),
    Operator(Arc<dyn LinkVertex>),
    Sink(Arc<dyn LinkVertex>),
}

/// The job graph: vertices (sources, operators, sinks) with their parallelism, edges
/// with their partitioner, and the job's configuration, including `max_parallelism`
/// (the key-group count), which is stored here and never re-derived.
pub(crate) struct JobGraph {
    pub(crate) config: crate::config::JobConfig,
    pub(crate) vertices: Vec<JobVertex>,
    pub(crate) edges: Vec<JobEdge>,
}

/// A vertex of the job graph.
#[derive(Clone)]
pub(crate) struct JobVertex {
    pub(crate) name: String,
    pub(crate) parallelism: Option<u32>,
    pub(crate) kind: VertexKind,
}

/// An edge of the job graph; `partitioner` `None` means forward when the parallelism
/// matches, rebalance otherwise (as Flink's default).
#[derive(Clone)]
pub(crate) struct JobEdge {
    pub(crate) from: VertexId,
    pub(crate) to: VertexId,
    pub(crate) partitioner: Option<Partitioner>,
    pub(crate) builder: Arc<dyn EdgeBuilder>,
}

// ---- typed implementations ------------------------------------------------------

pub(crate) struct OperatorVertex<O, F> {
    pub(crate) factory: F,
    pub(crate) _op: PhantomData<fn() -> O>,
}

impl<O, F> LinkVertex for OperatorVertex<O, F>
where
    O: Operator,
    O::Out: Clone,
    F: Fn(&SubtaskInfo, &BuildEnv, VertexId) -> Result<O, EngineError> + Send + Sync,
{
    fn build(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
        outputs: Vec<ErasedLink>,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<ErasedLink, EngineError> {
        let next = combine_outputs::<O::Out>(outputs, &info.name)?;
        let op = (self.factory)(info, env, vertex)?;
        // Long calls (a record in many windows) stop early when the job is cancelled.
        let ctx = OperatorContext::new(info.clone(), env.clock.clone())
            .with_cancel_flag(CancelFlag::new(Arc::clone(&env.task.cancelled)));
        let restore = env
            .restore
            .as_ref()
            .map(|r| r.operator_state(vertex, info.key_groups()));
        Ok(erase::<O::In>(Box::new(OperatorLink::new(
            op, vertex, restore, ctx, next, metrics,
        ))))
    }
}

pub(crate) struct SinkVertex<S> {
    pub(crate) sink: S,
}

impl<S: Sink> LinkVertex for SinkVertex<S> {
    fn build(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
        _outputs: Vec<ErasedLink>,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<ErasedLink, EngineError> {
        let writer = match &env.restore {
            Some(r) => self.sink.restore_writer(
                info,
                self.sink.restored_committables(
                    &r.sink_committables(vertex),
                    info.index,
                    info.parallelism,
                ),
            ),
            None if env.task.checkpoints.is_some() => self.sink.create_committing_writer(info),
            None => self.sink.create_writer(info),
        }
        .map_err(|e| EngineError::Task {
            task: info.to_string(),
            message: e.to_string(),
        })?;
        Ok(erase::<S::In>(Box::new(SinkLink::new(
            writer,
            vertex,
            info.clone(),
            metrics,
        ))))
    }
}

pub(crate) struct TypedSource<S: Source> {
    pub(crate) source: S,
    pub(crate) strategy: WatermarkStrategy<S::Out>,
    pub(crate) splits: Mutex<Option<Vec<S::Split>>>,
}

impl<S: Source> SourceVertex for TypedSource<S>
where
    S::Out: Clone,
{
    fn enumerate(&self, parallelism: u32) -> Result<(), EngineError> {
        let splits = self
            .source
            .enumerate_splits(parallelism)
            .map_err(|e| EngineError::Task {
                task: "source".into(),
                message: format!("cannot list its input: {e}"),
            })?;
        *self.splits.lock().unwrap_or_else(|e| e.into_inner()) = Some(splits);
        Ok(())
    }

    fn build(
        &self,
        vertex: VertexId,
        info: &SubtaskInfo,
        outputs: Vec<ErasedLink>,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<Box<dyn TaskRunner>, EngineError> {
        let mine: Vec<S::Split> = {
            let guard = self.splits.lock().unwrap_or_else(|e| e.into_inner());
            let all = guard
                .as_ref()
                .ok_or_else(|| EngineError::InvalidGraph("source splits not enumerated".into()))?;
            if let Some(r) = &env.restore {
                let (positions, _) = r.source_state(vertex);
                let ids: std::collections::HashSet<String> =
                    all.iter().map(|s| s.split_id()).collect();
                let mut unknown: Vec<&String> =
                    positions.keys().filter(|k| !ids.contains(*k)).collect();
                if !unknown.is_empty() {
                    unknown.sort();
                    return Err(EngineError::InvalidGraph(format!(
                        "{}: the checkpoint has positions of splits {unknown:?} this run does not \
                         have: the source's splits changed since the checkpoint (other files, \
                         another split count, or splits that depend on the parallelism)",
                        info.name
                    )));
                }
            }
            all.iter()
                .enumerate()
                .filter(|(i, _)| (*i as u32) % info.parallelism == info.index)
                .map(|(_, s)| s.clone())
                .collect()
        };
        let split_ids = mine.iter().map(|s| s.split_id()).collect();
        let (reader, restored_watermarks) = match &env.restore {
            Some(r) => {
                let (positions, watermarks) = r.source_state(vertex);
                (
                    self.source.restore_reader(info, mine, &positions),
                    watermarks,
                )
            }
            None => (self.source.create_reader(info, mine), Default::default()),
        };
        let reader = reader.map_err(|e| EngineError::Task {
            task: info.to_string(),
            message: e.to_string(),
        })?;
        let head = combine_outputs::<S::Out>(outputs, &info.name)?;
        Ok(Box::new(SourceTask {
            info: info.clone(),
            reader,
            head,
            metrics,
            env: env.task.clone(),
            strategy: self.strategy.clone(),
            split_ids,
            vertex,
            restored_watermarks,
        }))
    }
}

pub(crate) struct TypedEdge<T> {
    pub(crate) key_hash: Option<KeyHasher<T>>,
}

impl<T: Clone + Send + 'static> EdgeBuilder for TypedEdge<T> {
    fn build(
        &self,
        partitioner: Partitioner,
        up: u32,
        down: u32,
        up_metrics: &[Arc<OperatorMetrics>],
        env: &BuildEnv,
    ) -> (Vec<ErasedLink>, Vec<ErasedGate>) {
        let all_to_all = partitioner != Partitioner::Forward;
        let (senders, gates): EdgeChannels<T> =
            channels(up as usize, down as usize, env.channel_capacity, all_to_all);
        let writers = senders
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let w = ChannelWriter::new(
                    s,
                    partitioner,
                    self.key_hash.clone(),
                    env.max_parallelism,
                    env.batch_size,
                    i,
                    Arc::clone(&up_metrics[i]),
                );
                erase::<T>(Box::new(w))
            })
            .collect();
        let gates = gates
            .into_iter()
            .map(|g| Box::new(g) as ErasedGate)
            .collect();
        (writers, gates)
    }

    fn runner(
        &self,
        name: String,
        gates: Vec<ErasedGate>,
        head: ErasedLink,
        metrics: Arc<OperatorMetrics>,
        env: &BuildEnv,
    ) -> Result<Box<dyn TaskRunner>, EngineError> {
        let mut merged = InputGate::<T> {
            receivers: Vec::new(),
        };
        for g in gates {
            let g = g.downcast::<InputGate<T>>().map_err(|_| {
                EngineError::InvalidGraph(format!("record type mismatch at the inputs of {name}"))
            })?;
            merged.receivers.extend(g.receivers);
        }
        let head = unerase::<T>(head, &name)?;
        Ok(Box::new(InputTask {
            name,
            gate: merged,
            head,
            metrics,
            env: env.task.clone(),
        }))
    }
}
