//! The builder API, in Flink's vocabulary: a [`StreamEnvironment`] creates
//! [`DataStream`]s from sources, transforms them and sends them to sinks; `execute`
//! runs the job.

use std::cell::RefCell;
use std::hash::Hash;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use brook_core::keys::hash_key;
use brook_core::operator::{Operator, SubtaskInfo};
use brook_core::partition::Partitioner;
use brook_core::sink::Sink;
use brook_core::source::Source;
use brook_core::watermark::WatermarkStrategy;
use brook_operators::basic::{Filter, FlatMap, Map};
use brook_operators::process::{KeyedProcessFunction, KeyedProcessOperator};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::build::{OperatorVertex, SinkVertex, TypedEdge, TypedSource};
use crate::channel::KeyHasher;
use crate::error::EngineError;
use crate::execute::{start, JobHandle, JobResult};
use crate::graph::{BuildEnv, JobEdge, JobGraph, JobVertex, VertexKind};
use crate::hot_keys::{key_text, KeyLabel};
use crate::ids::VertexId;

// Defined here before config.rs: `brook_engine::environment::JobConfig` stays a path.
pub use crate::config::JobConfig;

/// Where a job is defined; cheap to clone (clones share the job being built).
#[derive(Clone)]
pub struct StreamEnvironment {
    inner: Rc<RefCell<JobGraph>>,
}

impl std::fmt::Debug for StreamEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.borrow();
        f.debug_struct("StreamEnvironment")
            .field("config", &g.config)
            .field("vertices", &g.vertices.len())
            .finish()
    }
}

impl StreamEnvironment {
    /// A new job with these settings.
    pub fn new(config: JobConfig) -> Self {
        StreamEnvironment {
            inner: Rc::new(RefCell::new(JobGraph {
                config,
                vertices: Vec::new(),
                edges: Vec::new(),
            })),
        }
    }

    fn add_vertex(&self, base: &str, kind: VertexKind) -> VertexId {
        let mut g = self.inner.borrow_mut();
        let id = g.vertices.len();
        let taken = g.vertices.iter().any(|v| v.name == base);
        let name = if taken {
            format!("{base}#{id}")
        } else {
            base.to_string()
        };
        g.vertices.push(JobVertex {
            name,
            parallelism: None,
            kind,
        });
        id
    }

    /// Reads a source without event time (no watermarks until a bounded input ends);
    /// its parallelism is the job's unless set on the stream.
    pub fn source<S>(&self, source: S) -> DataStream<S::Out>
    where
        S: Source,
        S::Out: Clone,
    {
        self.from_source(source, WatermarkStrategy::no_watermarks())
    }

    /// Reads a source with event time, as Flink's `fromSource(source, strategy, name)`:
    /// each subtask assigns timestamps with the strategy and tracks a watermark per
    /// split (a log partition, a file), emitting the minimum over its active splits
    /// (semantics.md §2).
    pub fn from_source<S>(
        &self,
        source: S,
        strategy: WatermarkStrategy<S::Out>,
    ) -> DataStream<S::Out>
    where
        S: Source,
        S::Out: Clone,
    {
        let v = self.add_vertex(
            "source",
            VertexKind::Source(Arc::new(TypedSource {
                source,
                strategy,
                splits: Mutex::new(None),
            })),
        );
        DataStream {
            env: self.clone(),
            inputs: vec![StreamInput {
                vertex: v,
                partitioner: None,
                key_hash: None,
                key_label: None,
            }],
        }
    }

    /// Starts the job on threads and returns a handle to watch, cancel or join it.
    ///
    /// # Errors
    /// [`EngineError::InvalidGraph`], a source that cannot list its input, a task that
    /// cannot be created.
    pub fn start(&self, name: &str) -> Result<JobHandle, EngineError> {
        self.start_with_metrics(name, crate::metrics::JobMetrics::default())
    }

    /// As [`StreamEnvironment::start`], registering the job's metrics in `metrics`
    /// (for example one already served over HTTP).
    ///
    /// # Errors
    /// As [`StreamEnvironment::start`].
    pub fn start_with_metrics(
        &self,
        name: &str,
        metrics: crate::metrics::JobMetrics,
    ) -> Result<JobHandle, EngineError> {
        let g = self.inner.borrow();
        start(name, &g, metrics)
    }

    /// Runs the job to completion (a bounded job) and returns its metrics.
    ///
    /// # Errors
    /// As [`StreamEnvironment::start`], and the first task failure, naming the
    /// operator and subtask.
    pub fn execute(&self, name: &str) -> Result<JobResult, EngineError> {
        self.start(name)?.join()
    }

    fn config(&self) -> JobConfig {
        self.inner.borrow().config.clone()
    }

    /// The job graph built so far, for the planner's tests.
    #[cfg(test)]
    pub(crate) fn graph(&self) -> std::cell::Ref<'_, JobGraph> {
        self.inner.borrow()
    }

    /// The job graph built so far, to edit in the planner's tests.
    #[cfg(test)]
    pub(crate) fn graph_mut(&self) -> std::cell::RefMut<'_, JobGraph> {
        self.inner.borrow_mut()
    }
}

struct StreamInput<T> {
    vertex: VertexId,
    partitioner: Option<Partitioner>,
    key_hash: Option<KeyHasher<T>>,
    key_label: Option<KeyLabel<T>>,
}

impl<T> Clone for StreamInput<T> {
    fn clone(&self) -> Self {
        StreamInput {
            vertex: self.vertex,
            partitioner: self.partitioner,
            key_hash: self.key_hash.clone(),
            key_label: self.key_label.clone(),
        }
    }
}

/// A stream of records of type `T`.
pub struct DataStream<T> {
    env: StreamEnvironment,
    inputs: Vec<StreamInput<T>>,
}

impl<T> std::fmt::Debug for DataStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataStream")
            .field(
                "vertices",
                &self.inputs.iter().map(|i| i.vertex).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            env: self.env.clone(),
            inputs: self.inputs.clone(),
        }
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    fn connect(&self, to: VertexId) {
        let mut g = self.env.inner.borrow_mut();
        for i in &self.inputs {
            g.edges.push(JobEdge {
                from: i.vertex,
                to,
                partitioner: i.partitioner,
                builder: Arc::new(TypedEdge::<T> {
                    key_hash: i.key_hash.clone(),
                    key_label: i.key_label.clone(),
                }),
            });
        }
    }

    pub(crate) fn add_operator<O, F>(&self, name: &str, factory: F) -> DataStream<O::Out>
    where
        O: Operator<In = T>,
        O::Out: Clone,
        F: Fn(&SubtaskInfo, &BuildEnv, VertexId) -> Result<O, EngineError> + Send + Sync + 'static,
    {
        let v = self.env.add_vertex(
            name,
            VertexKind::Operator(Arc::new(OperatorVertex {
                factory,
                _op: PhantomData,
            })),
        );
        self.connect(v);
        DataStream {
            env: self.env.clone(),
            inputs: vec![StreamInput {
                vertex: v,
                partitioner: None,
                key_hash: None,
                key_label: None,
            }],
        }
    }

    /// Applies a custom [`Operator`], created once per subtask.
    pub fn transform<O, F>(self, name: &str, factory: F) -> DataStream<O::Out>
    where
        O: Operator<In = T>,
        O::Out: Clone,
        F: Fn(&SubtaskInfo) -> O + Send + Sync + 'static,
    {
        self.add_operator(name, move |info, _env, _| Ok(factory(info)))
    }

    /// Applies a custom [`Operator`] with the parallelism of this stream's producer, so
    /// it chains to it (no exchange, records in their order): for steps that belong to
    /// their input, such as a check before a key exchange.
    pub fn transform_chained<O, F>(self, name: &str, factory: F) -> DataStream<O::Out>
    where
        O: Operator<In = T>,
        O::Out: Clone,
        F: Fn(&SubtaskInfo) -> O + Send + Sync + 'static,
    {
        let p = self
            .producing_vertex()
            .and_then(|v| self.env.inner.borrow().vertices[v].parallelism);
        let out = self.transform(name, factory);
        match p {
            Some(p) => out.set_parallelism(p),
            None => out,
        }
    }

    /// Transforms every record (Flink's `map`). Each subtask gets a clone of `f`.
    pub fn map<U, F>(self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: FnMut(T) -> U + Clone + Send + Sync + 'static,
    {
        self.add_operator("map", move |_, _, _| Ok(Map::new(f.clone())))
    }

    /// Keeps the records for which `f` is true (Flink's `filter`).
    pub fn filter<F>(self, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + Sync + 'static,
    {
        self.add_operator("filter", move |_, _, _| Ok(Filter::new(f.clone())))
    }

    /// Turns every record into zero or more (Flink's `flatMap`).
    pub fn flat_map<U, It, F>(self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        It: IntoIterator<Item = U> + 'static,
        F: FnMut(T) -> It + Clone + Send + Sync + 'static,
    {
        self.add_operator("flat_map", move |_, _, _| Ok(FlatMap::new(f.clone())))
    }

    /// Partitions the stream by key: records with equal keys go to the same subtask
    /// (by key group, as Flink's `keyBy`), in order per upstream subtask.
    pub fn key_by<K, F>(self, key: F) -> KeyedStream<K, T>
    where
        K: Hash + Serialize + DeserializeOwned + Send + 'static,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        // The hasher calls the concrete key function (inlined), not through `dyn`.
        let key = Arc::new(key);
        let k2 = Arc::clone(&key);
        let hasher: KeyHasher<T> = Arc::new(move |t: &T| hash_key(&k2(t)));
        let k3 = Arc::clone(&key);
        let label: KeyLabel<T> = Arc::new(move |t: &T| key_text(&k3(t)));
        let key: Arc<dyn Fn(&T) -> K + Send + Sync> = key;
        let inputs = self
            .inputs
            .into_iter()
            .map(|i| StreamInput {
                vertex: i.vertex,
                partitioner: Some(Partitioner::KeyGroups),
                key_hash: Some(Arc::clone(&hasher)),
                key_label: Some(Arc::clone(&label)),
            })
            .collect();
        KeyedStream {
            stream: DataStream {
                env: self.env,
                inputs,
            },
            key,
        }
    }

    fn with_partitioner(self, p: Partitioner) -> Self {
        let inputs = self
            .inputs
            .into_iter()
            .map(|i| StreamInput {
                partitioner: Some(p),
                key_hash: None,
                key_label: None,
                ..i
            })
            .collect();
        DataStream {
            env: self.env,
            inputs,
        }
    }

    /// Deals batches round-robin to the next operator's subtasks.
    pub fn rebalance(self) -> Self {
        self.with_partitioner(Partitioner::Rebalance)
    }

    /// Sends every record to every subtask of the next operator.
    pub fn broadcast(self) -> Self {
        self.with_partitioner(Partitioner::Broadcast)
    }

    /// Merges with another stream of the same type (Flink's `union`).
    pub fn union(mut self, other: DataStream<T>) -> Self {
        self.inputs.extend(other.inputs);
        self
    }

    fn producing_vertex(&self) -> Option<VertexId> {
        match self.inputs.as_slice() {
            [one] => Some(one.vertex),
            _ => None,
        }
    }

    /// Sets the parallelism of the operator (or source) that produces this stream.
    pub fn set_parallelism(self, parallelism: u32) -> Self {
        if let Some(v) = self.producing_vertex() {
            self.env.inner.borrow_mut().vertices[v].parallelism = Some(parallelism);
        }
        self
    }

    /// Names the operator (or source) that produces this stream, for errors and
    /// metrics.
    pub fn name(self, name: &str) -> Self {
        if let Some(v) = self.producing_vertex() {
            self.env.inner.borrow_mut().vertices[v].name = name.to_string();
        }
        self
    }

    /// Sends the stream to a sink.
    pub fn sink<S: Sink<In = T>>(self, sink: S) -> SinkHandle {
        let v = self
            .env
            .add_vertex("sink", VertexKind::Sink(Arc::new(SinkVertex { sink })));
        self.connect(v);
        SinkHandle {
            env: self.env,
            vertex: v,
        }
    }
}

/// A sink added to the job; set its name or parallelism.
#[derive(Debug)]
pub struct SinkHandle {
    env: StreamEnvironment,
    vertex: VertexId,
}

impl SinkHandle {
    /// Sets the sink's parallelism.
    pub fn set_parallelism(self, parallelism: u32) -> Self {
        self.env.inner.borrow_mut().vertices[self.vertex].parallelism = Some(parallelism);
        self
    }

    /// Names the sink.
    pub fn name(self, name: &str) -> Self {
        self.env.inner.borrow_mut().vertices[self.vertex].name = name.to_string();
        self
    }
}

/// A stream partitioned by key (`key_by`), for keyed operators.
pub struct KeyedStream<K, T> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key: Arc<dyn Fn(&T) -> K + Send + Sync>,
}

impl<K, T> Clone for KeyedStream<K, T> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key: Arc::clone(&self.key),
        }
    }
}

impl<K, T> std::fmt::Debug for KeyedStream<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Serialize + DeserializeOwned + Send + 'static,
    T: Clone + Send + 'static,
{
    /// Runs a keyed process function with keyed state and timers; `factory` creates
    /// one function per subtask.
    pub fn process<F, FF>(self, factory: FF) -> DataStream<F::Out>
    where
        F: KeyedProcessFunction<Key = K, In = T>,
        F::Out: Clone + Send + 'static,
        FF: Fn() -> F + Send + Sync + 'static,
    {
        let key = Arc::clone(&self.key);
        self.stream
            .add_operator("process", move |info, env, vertex| {
                let key = Arc::clone(&key);
                let backend = env.keyed_backend(vertex, info)?;
                Ok(KeyedProcessOperator::new(
                    factory(),
                    move |t: &T| key(t),
                    backend,
                ))
            })
    }

    /// Applies a custom [`Operator`] on the subtask that owns each record's key.
    pub fn transform<O, F>(self, name: &str, factory: F) -> DataStream<O::Out>
    where
        O: Operator<In = T>,
        O::Out: Clone,
        F: Fn(&SubtaskInfo) -> O + Send + Sync + 'static,
    {
        self.stream.transform(name, factory)
    }

    /// The stream itself: the next operator still receives it partitioned by key.
    pub fn into_stream(self) -> DataStream<T> {
        self.stream
    }

    /// A keyed `map`: runs on the subtask that owns each record's key.
    pub fn map<U, F>(self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: FnMut(T) -> U + Clone + Send + Sync + 'static,
    {
        self.stream.map(f)
    }

    /// A keyed `filter`.
    pub fn filter<F>(self, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + Sync + 'static,
    {
        self.stream.filter(f)
    }

    /// Sends the keyed stream to a sink: each sink subtask gets whole keys.
    pub fn sink<S: Sink<In = T>>(self, sink: S) -> SinkHandle {
        self.stream.sink(sink)
    }

    /// The job's configuration (for connectors that need it).
    pub fn config(&self) -> JobConfig {
        self.stream.env.config()
    }
}
