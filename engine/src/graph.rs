//! The job graph: vertices (sources, operators, sinks) with their parallelism and
//! edges with their partitioner. Typed builders (in `build`) live behind small
//! object-safe traits, so the planner handles vertices of any record type; types meet
//! again only where a task is assembled.

use std::any::Any;
use std::sync::Arc;

use brook_core::operator::SubtaskInfo;
use brook_core::partition::Partitioner;
use brook_core::time::SharedClock;
use brook_state::KeyedStateBackend;

use crate::chain::ErasedLink;
use crate::checkpoint::RestoredCheckpoint;
use crate::error::EngineError;
use crate::ids::VertexId;
use crate::metrics::OperatorMetrics;
use crate::task::{TaskEnv, TaskRunner};

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
        // The downstream vertex's hot-key board, when hot keys are on.
        hot_keys: Option<&Arc<crate::hot_keys::HotKeyBoard>>,
        env: &BuildEnv,
    ) -> (Vec<ErasedLink>, Vec<ErasedGate>);
    /// The task reading `gates` (of edges of this record type) into `head`, the chain
    /// of vertex `vertex` (its restored input watermark, if any, from `env.restore`).
    fn runner(
        &self,
        name: String,
        vertex: VertexId,
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
