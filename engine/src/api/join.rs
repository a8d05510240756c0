//! Joins of two keyed streams in the builder API, as Flink's `intervalJoin`,
//! `join(..).window(..)` and event-time temporal joins: the two inputs travel as one
//! stream of [`Either`] records keyed by their common key into a keyed process
//! function of `brook_operators::join`.

use std::hash::Hash;
use std::sync::Arc;

use brook_core::time::Millis;
use brook_operators::join::{
    check_interval, check_join_windows, Either, IntervalJoin, IntervalJoinOperator,
    JoinConfigError, JoinOutput, JoinType, TemporalJoin, TemporalJoinOperator, WindowJoin,
    WindowJoinOperator,
};
use brook_operators::window::assigner::WindowAssigner;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::environment::{DataStream, KeyedStream};
use super::output_tag::OutputTag;

/// Which join.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Interval { lower: Millis, upper: Millis },
    Window(WindowAssigner),
    Temporal,
}

/// Two keyed streams being joined; finish with [`JoinedStreams::apply`]. Made by
/// [`KeyedStream::interval_join`], [`KeyedStream::window_join`] and
/// [`KeyedStream::temporal_join`].
///
/// Both sides wait in keyed state, which encodes values with bincode (in RocksDB on
/// every access, in memory at checkpoints): a type that needs a self-describing format (`serde_json::Value`, `#[serde(untagged)]` or
/// `deserialize_any`-based fields) fails when read back ("Bincode does not support
/// ... deserialize_any"). Join typed records, or wrap JSON rows in
/// `brook_operators::row::StoredRow`.
pub struct JoinedStreams<K, A, B> {
    left: KeyedStream<K, A>,
    right: KeyedStream<K, B>,
    kind: Kind,
    join_type: JoinType,
    late_left: Option<OutputTag<A>>,
    late_right: Option<OutputTag<B>>,
    name: String,
    parallelism: Option<u32>,
}

impl<K, A, B> std::fmt::Debug for JoinedStreams<K, A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinedStreams")
            .field("kind", &self.kind)
            .field("join_type", &self.join_type)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<K, A> KeyedStream<K, A>
where
    K: Hash + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
{
    /// Joins a record `b` of `other` to a record `a` of this stream with the same key
    /// when `a.ts + lower <= b.ts <= a.ts + upper` (ms, inclusive; Flink's
    /// `intervalJoin(..).between(lower, upper)`). A result carries the later of the
    /// two timestamps.
    ///
    /// # Errors
    /// [`JoinConfigError::EmptyInterval`] when `lower > upper`.
    pub fn interval_join<B>(
        self,
        other: KeyedStream<K, B>,
        lower: Millis,
        upper: Millis,
    ) -> Result<JoinedStreams<K, A, B>, JoinConfigError>
    where
        B: Clone + Serialize + DeserializeOwned + Send + 'static,
    {
        check_interval(lower, upper)?;
        Ok(JoinedStreams::new(
            self,
            other,
            Kind::Interval { lower, upper },
            "interval-join",
        ))
    }

    /// Joins records of this stream and `other` with the same key in the same window
    /// of `windows` (tumbling or sliding, event time; Flink's
    /// `join(other).where(..).equalTo(..).window(..)`), emitted when the window fires,
    /// at its max timestamp.
    ///
    /// # Errors
    /// [`JoinConfigError::Windows`] for session or processing-time windows.
    pub fn window_join<B>(
        self,
        other: KeyedStream<K, B>,
        windows: WindowAssigner,
    ) -> Result<JoinedStreams<K, A, B>, JoinConfigError>
    where
        B: Clone + Serialize + DeserializeOwned + Send + 'static,
    {
        check_join_windows(&windows)?;
        Ok(JoinedStreams::new(
            self,
            other,
            Kind::Window(windows),
            "window-join",
        ))
    }

    /// Joins each record of this stream with the version of `versions` (records of a
    /// changing table, keyed by the row's key, stamped with the time they became
    /// valid) valid at the record's timestamp: the one with the greatest timestamp
    /// `<=` it (an event-time temporal join, as Flink SQL's `FOR SYSTEM_TIME AS OF`).
    /// Records wait until the watermark reaches their timestamp.
    pub fn temporal_join<B>(self, versions: KeyedStream<K, B>) -> JoinedStreams<K, A, B>
    where
        B: Clone + Serialize + DeserializeOwned + Send + 'static,
    {
        JoinedStreams::new(self, versions, Kind::Temporal, "temporal-join")
    }
}

impl<K, A, B> JoinedStreams<K, A, B>
where
    K: Hash + Serialize + DeserializeOwned + Send + 'static,
    A: Clone + Serialize + DeserializeOwned + Send + 'static,
    B: Clone + Serialize + DeserializeOwned + Send + 'static,
{
    fn new(left: KeyedStream<K, A>, right: KeyedStream<K, B>, kind: Kind, name: &str) -> Self {
        JoinedStreams {
            left,
            right,
            kind,
            join_type: JoinType::Inner,
            late_left: None,
            late_right: None,
            name: name.to_string(),
            parallelism: None,
        }
    }

    /// Also emits every left record that found no match, once, with `None`, when the
    /// watermark shows no match can come any more.
    pub fn left_outer(mut self) -> Self {
        self.join_type = JoinType::LeftOuter;
        self
    }

    /// Late left records (timestamp `<=` the watermark on arrival) go to `tag`
    /// ([`DataStream::get_side_output`] on the result); by default they are dropped.
    /// Either way they are counted in the join's `late_records` metric.
    pub fn side_output_late_left(mut self, tag: &OutputTag<A>) -> Self {
        self.late_left = Some(tag.clone());
        self
    }

    /// Late right records go to `tag`; by default they are dropped (counted either
    /// way). A temporal join has none: it keeps every version (semantics.md §3a).
    pub fn side_output_late_right(mut self, tag: &OutputTag<B>) -> Self {
        self.late_right = Some(tag.clone());
        self
    }

    /// Names the join operator.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// The join operator's parallelism.
    pub fn set_parallelism(mut self, parallelism: u32) -> Self {
        self.parallelism = Some(parallelism);
        self
    }

    /// Makes each result with `f(left, right)` (`right` is `None` for an unmatched
    /// left record of a left outer join).
    pub fn apply<O, F>(self, f: F) -> DataStream<O>
    where
        K: Eq + Clone,
        O: Clone + Send + 'static,
        F: Fn(&A, Option<&B>) -> O + Clone + Send + Sync + 'static,
    {
        let JoinedStreams {
            left,
            right,
            kind,
            join_type,
            late_left,
            late_right,
            name,
            parallelism,
        } = self;
        let (ka, kb) = (Arc::clone(&left.key), Arc::clone(&right.key));
        let l = left
            .stream
            .map(Either::<A, B>::Left)
            .name(&format!("{name}-left"));
        let r = right
            .stream
            .map(Either::<A, B>::Right)
            .name(&format!("{name}-right"));
        let keyed = l.union(r).key_by(move |e: &Either<A, B>| match e {
            Either::Left(a) => ka(a),
            Either::Right(b) => kb(b),
        });
        let joined: DataStream<JoinOutput<O, A, B>> = match kind {
            // Its own operator: typed buffers on the heap with an in-memory backend.
            Kind::Interval { lower, upper } => {
                let key = Arc::clone(&keyed.key);
                keyed
                    .stream
                    .add_operator("process", move |info, env, vertex| {
                        let (f, key) = (f.clone(), Arc::clone(&key));
                        // `interval_join` checked lower <= upper.
                        let g = move |a: &A, b: Option<&B>| f(a, b);
                        let join = IntervalJoin::new(lower, upper, join_type, g)
                            .unwrap_or_else(|e| unreachable!("{e}"));
                        let backend = env.keyed_backend(vertex, info)?;
                        Ok(IntervalJoinOperator::new(
                            join,
                            move |e: &Either<A, B>| key(e),
                            backend,
                        ))
                    })
            }
            // Its own operator: typed windows on the heap with an in-memory backend.
            Kind::Window(windows) => {
                let key = Arc::clone(&keyed.key);
                keyed
                    .stream
                    .add_operator("process", move |info, env, vertex| {
                        let (f, key) = (f.clone(), Arc::clone(&key));
                        // `window_join` checked the windows.
                        let g = move |a: &A, b: Option<&B>| f(a, b);
                        let join = WindowJoin::new(windows, join_type, g)
                            .unwrap_or_else(|e| unreachable!("{e}"));
                        let backend = env.keyed_backend(vertex, info)?;
                        Ok(WindowJoinOperator::new(
                            join,
                            move |e: &Either<A, B>| key(e),
                            backend,
                        ))
                    })
            }
            // Its own operator: typed versions on the heap with an in-memory backend.
            Kind::Temporal => {
                let key = Arc::clone(&keyed.key);
                keyed
                    .stream
                    .add_operator("process", move |info, env, vertex| {
                        let (f, key) = (f.clone(), Arc::clone(&key));
                        let join =
                            TemporalJoin::new(join_type, move |a: &A, b: Option<&B>| f(a, b));
                        let backend = env.keyed_backend(vertex, info)?;
                        Ok(TemporalJoinOperator::new(
                            join,
                            move |e: &Either<A, B>| key(e),
                            backend,
                        ))
                    })
            }
        };
        let joined = with_parallelism(joined.name(&name), parallelism);
        if let Some(tag) = late_left {
            let late = split(
                &joined,
                &format!("{name}-late-left"),
                parallelism,
                |o| match o {
                    JoinOutput::LateLeft(a) => Some(a),
                    _ => None,
                },
            );
            *tag.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(late);
        }
        if let Some(tag) = late_right {
            let late = split(
                &joined,
                &format!("{name}-late-right"),
                parallelism,
                |o| match o {
                    JoinOutput::LateRight(b) => Some(b),
                    _ => None,
                },
            );
            *tag.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(late);
        }
        split(
            &joined,
            &format!("{name}-results"),
            parallelism,
            |o| match o {
                JoinOutput::Joined(r) => Some(r),
                _ => None,
            },
        )
    }
}

/// `s` with `parallelism`, if set.
fn with_parallelism<T: Clone + Send + 'static>(s: DataStream<T>, p: Option<u32>) -> DataStream<T> {
    match p {
        Some(p) => s.set_parallelism(p),
        None => s,
    }
}

/// One part of a join's output (results, or one side's late records), at the join's
/// parallelism so it chains to it.
fn split<O, A, B, T>(
    joined: &DataStream<JoinOutput<O, A, B>>,
    name: &str,
    parallelism: Option<u32>,
    pick: fn(JoinOutput<O, A, B>) -> Option<T>,
) -> DataStream<T>
where
    O: Clone + Send + 'static,
    A: Clone + Send + 'static,
    B: Clone + Send + 'static,
    T: Clone + Send + 'static,
{
    with_parallelism(joined.clone().flat_map(pick).name(name), parallelism)
}

/// Lookup and async enrichment of rows (JSON objects) in the builder API; see
/// `brook_operators::enrich` and `brook_operators::async_enrich`.
impl DataStream<brook_operators::row::Row> {
    /// Adds to each row the fields of the row with the same key in a lookup table
    /// (`on`: the row's key fields; `table_key`: the table's, in the same order;
    /// `fields`: which table fields, default all but the key). Every subtask holds the
    /// whole table; `table` makes each subtask's source of it (a file, a log topic).
    pub fn enrich<S, F>(
        self,
        name: &str,
        table: F,
        on: Vec<String>,
        table_key: Vec<String>,
        fields: Option<Vec<String>>,
        missing: brook_operators::enrich::MissingKey,
    ) -> DataStream<brook_operators::row::Row>
    where
        S: brook_operators::enrich::TableSource + 'static,
        F: Fn() -> S + Send + Sync + 'static,
    {
        let step = name.to_string();
        self.transform(name, move |_| {
            brook_operators::enrich::LookupEnrich::new(
                &step,
                Box::new(table()),
                on.clone(),
                table_key.clone(),
                fields.clone(),
                missing.clone(),
            )
        })
    }

    /// Adds to each row the fields of `lookup`'s answer for it, with up to
    /// `config.capacity` lookups in flight (Flink's async I/O).
    pub fn async_enrich(
        self,
        name: &str,
        lookup: Arc<dyn brook_operators::async_enrich::AsyncLookup>,
        config: brook_operators::async_enrich::AsyncEnrichConfig,
    ) -> DataStream<brook_operators::row::Row> {
        let step = name.to_string();
        self.transform(name, move |_| {
            brook_operators::async_enrich::AsyncEnrich::new(
                &step,
                Arc::clone(&lookup),
                config.clone(),
            )
        })
    }
}
