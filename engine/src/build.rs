//! The typed vertex and edge builders behind the job graph's object-safe traits: an
//! operator, a sink, a source and an edge of one record type, each assembling its
//! chain link, task or channels for one subtask.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use brook_core::cancel::CancelFlag;
use brook_core::operator::{Operator, OperatorContext, SubtaskInfo};
use brook_core::partition::Partitioner;
use brook_core::sink::Sink;
use brook_core::source::{Source, Split};
use brook_core::watermark::WatermarkStrategy;

use crate::chain::{combine_outputs, erase, unerase, ErasedLink, OperatorLink, SinkLink};
use crate::channel::{channels, ChannelWriter, EdgeChannels, InputGate, KeyHasher};
use crate::error::EngineError;
use crate::graph::{BuildEnv, EdgeBuilder, ErasedGate, LinkVertex, SourceVertex};
use crate::hot_keys::{HotKeyBoard, HotKeyTracker, KeyLabel};
use crate::ids::VertexId;
use crate::metrics::OperatorMetrics;
use crate::task::{InputTask, SourceTask, TaskRunner};

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
    /// The key's text, for hot keys (key-partitioned edges only).
    pub(crate) key_label: Option<KeyLabel<T>>,
}

impl<T: Clone + Send + 'static> EdgeBuilder for TypedEdge<T> {
    fn build(
        &self,
        partitioner: Partitioner,
        up: u32,
        down: u32,
        up_metrics: &[Arc<OperatorMetrics>],
        hot_keys: Option<&Arc<HotKeyBoard>>,
        env: &BuildEnv,
    ) -> (Vec<ErasedLink>, Vec<ErasedGate>) {
        let all_to_all = partitioner != Partitioner::Forward;
        let (senders, gates): EdgeChannels<T> =
            channels(up as usize, down as usize, env.channel_capacity, all_to_all);
        let writers = senders
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let tracker = match (hot_keys, &self.key_label) {
                    (Some(board), Some(label)) if partitioner == Partitioner::KeyGroups => {
                        Some(HotKeyTracker::new(
                            Arc::clone(label),
                            Arc::clone(board),
                            env.clock.clone(),
                            env.max_parallelism,
                            down,
                        ))
                    }
                    _ => None,
                };
                let w = ChannelWriter::new(
                    s,
                    partitioner,
                    self.key_hash.clone(),
                    env.max_parallelism,
                    env.batch_size,
                    i,
                    Arc::clone(&up_metrics[i]),
                    tracker,
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
        vertex: VertexId,
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
            vertex,
            restored_watermark: env.restore.as_ref().and_then(|r| r.input_watermark(vertex)),
            gate: merged,
            head,
            metrics,
            env: env.task.clone(),
        }))
    }
}
