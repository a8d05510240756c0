//! Windows in the builder API, as Flink's `WindowedStream`:
//! `keyed.window(assigner).allowed_lateness(ms).side_output_late_data(&tag).aggregate(f)`.

use std::hash::Hash;
use std::sync::Arc;

use brook_core::time::Millis;
use brook_operators::window::assigner::WindowAssigner;
use brook_operators::window::trigger::Trigger;
use brook_operators::window::{
    AggregateFunction, ProcessWindowFunction, WindowFunction, WindowOperator, WindowOutput,
    WindowResult, WARN_WINDOWS_PER_RECORD,
};
use brook_state::KeyedStateBackend;
use tracing::warn;

/// The key selector a window operator is built with.
type KeySelector<K, T> = Box<dyn Fn(&T) -> K + Send + Sync>;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::environment::{DataStream, KeyedStream};
// Defined here before output_tag.rs: `brook_engine::window::OutputTag` stays a path.
pub use super::output_tag::OutputTag;

/// A keyed stream cut into windows; finish it with [`WindowedStream::aggregate`] or
/// [`WindowedStream::process`].
pub struct WindowedStream<K, T> {
    keyed: KeyedStream<K, T>,
    assigner: WindowAssigner,
    trigger: Option<Trigger>,
    allowed_lateness_ms: Millis,
    late: Option<OutputTag<T>>,
    parallelism: Option<u32>,
    name: String,
}

impl<K, T> std::fmt::Debug for WindowedStream<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowedStream")
            .field("assigner", &self.assigner)
            .field("trigger", &self.trigger)
            .field("allowed_lateness_ms", &self.allowed_lateness_ms)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    /// Windows over the whole stream, not per key, as Flink's `windowAll`: one subtask
    /// sees every record.
    pub fn window_all(self, assigner: WindowAssigner) -> WindowedStream<(), T> {
        self.key_by(|_: &T| ())
            .window(assigner)
            .set_parallelism(1)
            .name("window_all")
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    T: Clone + Send + 'static,
{
    /// Groups each key's records into the windows of `assigner` (semantics.md §3).
    pub fn window(self, assigner: WindowAssigner) -> WindowedStream<K, T> {
        WindowedStream {
            keyed: self,
            assigner,
            trigger: None,
            allowed_lateness_ms: 0,
            late: None,
            parallelism: None,
            name: "window".into(),
        }
    }
}

impl<K, T> WindowedStream<K, T>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    T: Clone + Send + 'static,
{
    /// Fires on `trigger` instead of the assigner's default.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = Some(trigger);
        self
    }

    /// Keeps each window's state until the watermark passes its end by `ms`; records
    /// arriving meanwhile update it and fire it again (default 0).
    pub fn allowed_lateness(mut self, ms: Millis) -> Self {
        self.allowed_lateness_ms = ms.max(0);
        self
    }

    /// Sends late records (too late for every window they belong to) to `tag` instead
    /// of dropping them; either way they are counted in the `late_records` metric.
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.late = Some(tag.clone());
        self
    }

    /// The window operator's parallelism (default: the job's).
    pub fn set_parallelism(mut self, parallelism: u32) -> Self {
        self.parallelism = Some(parallelism);
        self
    }

    /// The window operator's name (default `window`), for metrics and errors.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Splits the operator's output into results and, if asked for, late records.
    fn finish<R: Clone + Send + 'static>(
        &self,
        both: DataStream<WindowOutput<R, T>>,
    ) -> DataStream<R> {
        let p = self.parallelism;
        let with_p = |s: DataStream<R>| match p {
            Some(p) => s.set_parallelism(p),
            None => s,
        };
        if let Some(tag) = &self.late {
            let late = both
                .clone()
                .flat_map(|o: WindowOutput<R, T>| match o {
                    WindowOutput::Late(t) => Some(t),
                    WindowOutput::Result(_) => None,
                })
                .name(&format!("{}-late", self.name));
            let late = match p {
                Some(p) => late.set_parallelism(p),
                None => late,
            };
            *tag.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(late);
        }
        with_p(
            both.flat_map(|o: WindowOutput<R, T>| match o {
                WindowOutput::Result(r) => Some(r),
                WindowOutput::Late(_) => None,
            })
            .name(&format!("{}-results", self.name)),
        )
    }

    /// Adds the window operator built by `make(key selector, state backend)` for each
    /// subtask, configured with this stream's trigger, lateness and late output.
    fn build<R, W, M>(self, make: M) -> DataStream<R>
    where
        R: Clone + Send + 'static,
        W: WindowFunction<K, T, Out = R>,
        M: Fn(
                KeySelector<K, T>,
                Box<dyn KeyedStateBackend>,
            ) -> WindowOperator<T, K, KeySelector<K, T>, W>
            + Send
            + Sync
            + 'static,
    {
        let windows = self.assigner.windows_per_record();
        if windows > WARN_WINDOWS_PER_RECORD {
            // Allowed (up to the assigner's limit), but most likely a typo in the slide.
            warn!(
                operator = %self.name,
                windows,
                "window {:?}: each record falls into up to {windows} windows (more than \
                 {WARN_WINDOWS_PER_RECORD}); every record updates all of them",
                self.name
            );
        }
        let key = Arc::clone(&self.keyed.key);
        let (trigger, lateness) = (self.trigger, self.allowed_lateness_ms);
        let emit_late = self.late.is_some();
        let both = self
            .keyed
            .stream
            .clone()
            .add_operator(&self.name, move |info, env, vertex| {
                let key = Arc::clone(&key);
                let backend = env.keyed_backend(vertex, info)?;
                let mut op = make(Box::new(move |t: &T| key(t)), backend)
                    .allowed_lateness(lateness)
                    .emit_late_records(emit_late);
                if let Some(t) = trigger {
                    op = op.trigger(t);
                }
                Ok(op)
            });
        let both = match self.parallelism {
            Some(p) => both.set_parallelism(p),
            None => both,
        };
        self.finish(both)
    }

    /// Aggregates each key's windows incrementally with `f` (one accumulator per key and
    /// window), emitting a [`WindowResult`] each time a window fires; its timestamp is
    /// the window's end − 1.
    pub fn aggregate<F>(self, f: F) -> DataStream<WindowResult<K, F::Out>>
    where
        F: AggregateFunction<T>,
        WindowResult<K, F::Out>: Clone,
    {
        let assigner = self.assigner;
        self.build(move |key, backend| WindowOperator::aggregate(assigner, key, f.clone(), backend))
    }

    /// Runs `factory()`'s [`ProcessWindowFunction`] on all records of each window when
    /// it fires (the records are kept in state until then).
    pub fn process<P, FF>(self, factory: FF) -> DataStream<P::Out>
    where
        P: ProcessWindowFunction<K, T>,
        P::Out: Clone + Send + 'static,
        T: Serialize + DeserializeOwned,
        FF: Fn() -> P + Send + Sync + 'static,
    {
        let assigner = self.assigner;
        self.build(move |key, backend| WindowOperator::process(assigner, key, factory(), backend))
    }
}
