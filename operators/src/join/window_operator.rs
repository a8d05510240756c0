//! [`WindowJoinOperator`]: the window join as an operator that picks its path from
//! the state backend, as the interval join does: typed windows on the heap
//! (`window_heap.rs`) for an in-memory backend, the keyed process function
//! [`WindowJoin`] over keyed state for any other (RocksDB).

use std::hash::Hash;

use brook_core::checkpoint::{CheckpointId, RestoredState, StateSnapshot};
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};
use brook_core::time::{Millis, Watermark};
use brook_state::{BackendKind, KeyedStateBackend};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::window_heap::HeapWindowJoin;
use super::{missing_timestamp, Either, JoinOutput, WindowJoin};
use crate::process::KeyedProcessOperator;

/// Which state the operator keeps.
enum Path<K, A, B, O, F, KS>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    /// [`WindowJoin`] over keyed state and timers (bincode in the backend).
    General(KeyedProcessOperator<WindowJoin<K, A, B, O, F>, KS>),
    /// Typed windows per key and one timer entry per key.
    Heap {
        join: WindowJoin<K, A, B, O, F>,
        key_selector: KS,
        state: HeapWindowJoin<K, A, B>,
    },
}

/// The window join ([`WindowJoin`], Flink's `join(..).window(..)`) on a keyed stream
/// of [`Either`] records, keyed by `KS`. With an in-memory backend
/// ([`BackendKind::Heap`]) each key's open windows hold their records as Rust values
/// and each key has one timer entry, at its earliest window's max timestamp; with any
/// other backend each window's records are kept encoded in keyed state and every
/// record registers its windows' timers. Both give the same
/// results (only results emitted together may come in another order) and write the
/// same checkpoints, so either restores the other's, also at another parallelism.
pub struct WindowJoinOperator<K, A, B, O, F, KS>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    path: Path<K, A, B, O, F, KS>,
}

impl<K, A, B, O, F, KS> std::fmt::Debug for WindowJoinOperator<K, A, B, O, F, KS>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Path::General(op) => f.debug_tuple("WindowJoinOperator").field(op).finish(),
            Path::Heap { join, state, .. } => f
                .debug_tuple("WindowJoinOperator")
                .field(join)
                .field(state)
                .finish(),
        }
    }
}

impl<K, A, B, O, F, KS> WindowJoinOperator<K, A, B, O, F, KS>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
    KS: Fn(&Either<A, B>) -> K + Send + 'static,
{
    /// The join `join`, keyed by `key_selector`, keeping state in `backend` (on the
    /// heap fast path when the backend is in memory).
    pub fn new(
        join: WindowJoin<K, A, B, O, F>,
        key_selector: KS,
        backend: Box<dyn KeyedStateBackend>,
    ) -> Self {
        let path = match backend.kind() {
            BackendKind::Heap => Path::Heap {
                join,
                key_selector,
                state: HeapWindowJoin::new(),
            },
            BackendKind::Serialized => {
                Path::General(KeyedProcessOperator::new(join, key_selector, backend))
            }
        };
        WindowJoinOperator { path }
    }

    /// Whether the operator runs on the heap fast path.
    pub fn is_heap(&self) -> bool {
        matches!(self.path, Path::Heap { .. })
    }

    /// What the state holds now, for tests: on the general path the keyed state
    /// entries and timers ([`KeyedProcessOperator::state_size`]), on the heap path the
    /// keys with open windows and the records buffered (once per window).
    pub fn state_size(&self) -> (usize, usize) {
        match &self.path {
            Path::General(op) => op.state_size(),
            Path::Heap { state, .. } => state.size(),
        }
    }
}

impl<K, A, B, O, F, KS> Operator for WindowJoinOperator<K, A, B, O, F, KS>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
    F: FnMut(&A, Option<&B>) -> O + Send + 'static,
    KS: Fn(&Either<A, B>) -> K + Send + 'static,
{
    type In = Either<A, B>;
    type Out = JoinOutput<O, A, B>;

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        ctx: &mut OperatorContext,
        snapshot: &mut StateSnapshot,
    ) -> OpResult {
        match &mut self.path {
            Path::General(op) => op.snapshot_state(checkpoint, ctx, snapshot),
            Path::Heap { state, .. } => {
                let info = ctx.info();
                state.snapshot(info.max_parallelism, info.key_groups(), snapshot)
            }
        }
    }

    fn restore_state(&mut self, ctx: &mut OperatorContext, restored: &RestoredState) -> OpResult {
        match &mut self.path {
            Path::General(op) => op.restore_state(ctx, restored),
            Path::Heap { state, .. } => state.restore(restored),
        }
    }

    fn process_batch(
        &mut self,
        batch: Batch<Self::In>,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        match &mut self.path {
            Path::General(op) => op.process_batch(batch, ctx, out),
            Path::Heap {
                join,
                key_selector,
                state,
            } => {
                let wm = ctx.current_watermark().millis();
                let now = ctx.processing_time();
                let mut late = 0;
                let mut result = Ok(());
                // The scratch vector of windows, reused for every record.
                let mut windows = std::mem::take(&mut join.windows);
                for r in batch {
                    let Some(ts) = r.timestamp else {
                        result = Err(missing_timestamp("a window join"));
                        break;
                    };
                    windows.clear();
                    join.assigner.assign_windows(ts, now, &mut windows);
                    // Late: every window it belongs to has fired (semantics.md §3,
                    // lateness 0); never joined.
                    windows.retain(|w| w.max_timestamp() > wm);
                    if windows.is_empty() {
                        late += 1;
                        match r.value {
                            Either::Left(a) => out.collect(JoinOutput::LateLeft(a), Some(ts)),
                            Either::Right(b) => out.collect(JoinOutput::LateRight(b), Some(ts)),
                        }
                        continue;
                    }
                    let key = key_selector(&r.value);
                    state.add(key, &windows, r.value);
                }
                join.windows = windows;
                if late > 0 {
                    ctx.count_late_records(late);
                }
                result
            }
        }
    }

    fn on_watermark(
        &mut self,
        wm: Watermark,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult<Option<Watermark>> {
        match &mut self.path {
            Path::General(op) => op.on_watermark(wm, ctx, out),
            Path::Heap { join, state, .. } => {
                state.on_watermark(wm.millis(), join.join_type, &mut join.f, out);
                Ok(Some(wm))
            }
        }
    }

    fn on_processing_time(
        &mut self,
        now_ms: Millis,
        ctx: &mut OperatorContext,
        out: &mut Output<Self::Out>,
    ) -> OpResult {
        match &mut self.path {
            Path::General(op) => op.on_processing_time(now_ms, ctx, out),
            // No processing-time timers.
            Path::Heap { .. } => Ok(()),
        }
    }
}
