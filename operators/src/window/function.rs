//! What a window keeps and emits: an incremental aggregate ([`Aggregating`]) or all
//! records for a [`ProcessWindowFunction`] ([`Processing`]).

use std::fmt;
use std::marker::PhantomData;

use brook_core::operator::Output;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{AggregateFunction, TimeWindow, WindowOutput, WindowResult};

/// A function over all records of a window, as Flink's `ProcessWindowFunction`: the
/// window keeps the records (in arrival order; for merged sessions, the sessions'
/// records one session after the other by start time) and hands them over when it fires.
pub trait ProcessWindowFunction<K, In>: Send + 'static {
    /// What it emits.
    type Out: Send + 'static;

    /// Called each time the window `[start, end)` (ms) of `key` fires, with all its
    /// records. Everything collected into `out` is emitted with the timestamp
    /// `window.max_timestamp()` (any timestamp given is replaced).
    fn process(
        &mut self,
        key: &K,
        window: &TimeWindow,
        elements: &[In],
        out: &mut Output<Self::Out>,
    );
}

/// What a [`super::WindowOperator`] keeps per key and window and how it emits it. Built
/// by [`super::WindowOperator::aggregate`] ([`Aggregating`]) and
/// [`super::WindowOperator::process`] ([`Processing`]).
pub trait WindowFunction<K, T>: Send + 'static {
    /// The state of one key and window.
    type State: Serialize + DeserializeOwned + Send + 'static;
    /// The results.
    type Out: Send + 'static;

    /// Empty state for a new window.
    fn create(&self) -> Self::State;
    /// Adds a record.
    fn add(&self, state: &mut Self::State, value: &T);
    /// Adds `other` (a window merged into this one, later in time) into `state`.
    fn merge(&self, state: &mut Self::State, other: Self::State);
    /// The window fired: emits its results with timestamp `window.max_timestamp()`.
    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &Self::State,
        out: &mut Output<WindowOutput<Self::Out, T>>,
    );
}

/// Keeps one accumulator of an [`AggregateFunction`] per key and window and emits a
/// [`WindowResult`].
#[derive(Debug, Clone)]
pub struct Aggregating<A>(pub A);

impl<K, T, A> WindowFunction<K, T> for Aggregating<A>
where
    K: Clone + Send + 'static,
    T: Send + 'static,
    A: AggregateFunction<T>,
{
    type State = A::Acc;
    type Out = WindowResult<K, A::Out>;

    fn create(&self) -> A::Acc {
        self.0.create_accumulator()
    }

    #[inline]
    fn add(&self, state: &mut A::Acc, value: &T) {
        self.0.add(state, value);
    }

    fn merge(&self, state: &mut A::Acc, other: A::Acc) {
        self.0.merge(state, other);
    }

    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &A::Acc,
        out: &mut Output<WindowOutput<Self::Out, T>>,
    ) {
        let r = WindowResult {
            key: key.clone(),
            window: *window,
            value: self.0.get_result(state),
        };
        out.collect(WindowOutput::Result(r), Some(window.max_timestamp()));
    }
}

/// Keeps all records of each key and window (`Vec<T>`) for a [`ProcessWindowFunction`].
pub struct Processing<P: ProcessWindowFunction<K, T>, K, T> {
    f: P,
    buf: Output<P::Out>,
    _types: PhantomData<fn(K, T)>,
}

impl<P: ProcessWindowFunction<K, T>, K, T> Processing<P, K, T> {
    /// Wraps `f`.
    pub fn new(f: P) -> Self {
        Processing {
            f,
            buf: Output::new(),
            _types: PhantomData,
        }
    }
}

impl<P: ProcessWindowFunction<K, T>, K, T> fmt::Debug for Processing<P, K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processing").finish_non_exhaustive()
    }
}

impl<P, K, T> WindowFunction<K, T> for Processing<P, K, T>
where
    P: ProcessWindowFunction<K, T>,
    K: 'static,
    T: Clone + Serialize + DeserializeOwned + Send + 'static,
{
    type State = Vec<T>;
    type Out = P::Out;

    fn create(&self) -> Vec<T> {
        Vec::new()
    }

    fn add(&self, state: &mut Vec<T>, value: &T) {
        state.push(value.clone());
    }

    fn merge(&self, state: &mut Vec<T>, other: Vec<T>) {
        state.extend(other);
    }

    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &Vec<T>,
        out: &mut Output<WindowOutput<P::Out, T>>,
    ) {
        self.f.process(key, window, state, &mut self.buf);
        for r in self.buf.take() {
            out.collect(WindowOutput::Result(r.value), Some(window.max_timestamp()));
        }
    }
}
