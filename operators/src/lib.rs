//! brook's operators.
//!
//! - [`basic`]: [`basic::Map`], [`basic::Filter`], [`basic::FlatMap`] over closures.
//! - [`process`]: keyed process functions with keyed state and event- and
//!   processing-time timers ([`process::KeyedProcessFunction`],
//!   [`process::KeyedProcessOperator`]).
//! - [`window`]: windows as Flink's `WindowOperator`: assigners (tumbling, sliding,
//!   session; event or processing time), triggers, incremental aggregates and process
//!   window functions, allowed lateness and late records for a side output.
//! - [`row`]: dynamic JSON rows, the records of YAML job specs (keys, joined rows).
//! - [`row_sql`]: their `filter`, `map` and `select` steps: SQL expressions (brook-sql,
//!   DataFusion's dialect) evaluated over each batch of rows as Arrow columns.
//! - [`row_time`]: event time read from a row field (epoch ms or s, RFC 3339, or a
//!   strftime pattern in an IANA time zone).
//! - [`row_aggregate`]: named aggregates over row fields (`count()`, `sum(price)`, ...)
//!   as a window [`window::AggregateFunction`], for YAML window steps.
//!
//! - [`async_enrich`]: enrichment by lookups in an external service (Flink's async
//!   I/O): bounded requests in flight, ordered or not, a cache with TTL, timeouts.
//! - [`enrich`]: lookup enrichment from a table (file, log topic) held by every
//!   subtask and kept up to date while the job runs.
//! - [`join`]: event-time interval, window and temporal joins of two keyed streams
//!   (inner and left outer), as keyed process functions.
//!
//! All are written against `brook-core`'s [`brook_core::operator::Operator`] trait and
//! `brook-state`'s keyed state.
//!
//! Must not know about: tasks, channels, checkpoint coordination (the engine), or where
//! records come from (connectors).

pub mod async_enrich;
pub mod basic;
pub mod batch_decode;
pub mod batch_enrich;
pub mod batch_join;
pub mod batch_rows;
pub mod batch_sql;
pub mod batch_window;
pub mod enrich;
pub mod group_key;
pub mod heap_aggregate;
pub mod join;
pub mod process;
pub mod row;
pub mod row_aggregate;
pub mod row_batch;
pub mod row_sql;
pub mod row_time;
pub mod typed_aggregate;
pub mod window;
