//! brook-sql: the records of declarative (YAML, later SQL) jobs as Arrow
//! [`RecordBatch`](arrow_array::RecordBatch)es with a schema fixed when the job is
//! planned, and their expressions as SQL expressions (DataFusion's dialect) evaluated
//! over whole columns (issue 18). `brook run` plans YAML jobs' `filter`, `map` and
//! `select` with it and evaluates them over each batch of rows: on Arrow batches from
//! a source that yields them (`brook_operators::batch_sql`, issue 18 step 3), or over
//! JSON rows elsewhere (`brook_operators::row_sql`).
//!
//! - [`schema`]: a schema declared in a spec (`schema: {item: string, price_cents:
//!   int64}`); [`infer`]: one inferred from a sample of JSON or CSV records.
//! - [`decode`]: JSON / CSV records into batches of that schema; a record that does not
//!   fit is reported with its position and field (for `on_bad_record`).
//! - [`values`]: a computed cell back as a JSON value, for rows.
//! - [`Filter`] (`filter: "item = 'chocolate milk'"`) and [`Projection`] (`map:
//!   {dollars: "price_cents / 100.0"}`, `select`): planned against the input schema, with
//!   an unknown column or a type mismatch a [`PlanError`] naming the expression's place
//!   before anything runs; applied to batches with arrow's kernels.
//!
//! ```
//! use brook_sql::{decode::{Format, RecordDecoder}, schema, Filter, Projection};
//!
//! let sales = schema::declared([("item", "string"), ("price_cents", "int64")])?;
//! let milk = Filter::plan(&sales, "item = 'chocolate milk'")?;
//! let dollars = Projection::map(milk.schema(), &[("dollars", "price_cents / 100.0")])?;
//!
//! let records = [
//!     r#"{"item": "chocolate milk", "price_cents": 250}"#,
//!     r#"{"item": "tea", "price_cents": 120}"#,
//! ];
//! let decoded = RecordDecoder::new(sales.clone(), Format::Json).decode(&records);
//! let out = dollars.apply(&milk.apply(&decoded.batch)?)?;
//! assert_eq!(out.num_rows(), 1);
//! assert_eq!(dollars.schema().field(2).name(), "dollars");
//!
//! let err = Filter::plan(&sales, "prize > 100").unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "filter: unknown column `prize` in `prize > 100` (columns: item, price_cents)"
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Crates
//! arrow 58 (arrow-array, -schema, -json, -csv, -select) and DataFusion 54 (the newest
//! whose MSRV, 1.88, fits the workspace's 1.89): datafusion-sql (parsing and planning an
//! expression), datafusion-optimizer (only its type coercion rules), datafusion-expr,
//! datafusion-physical-expr (vectorized evaluation) and datafusion-functions (scalar
//! functions). Not the `datafusion` crate (query engine, Parquet, object stores).
//! The build cost is in `benches/README.md` (issue 18).
//!
//! # Design of the later steps
//! How batches replace `serde_json::Value` rows in `brook run` (`src/spec`,
//! `operators/src/row.rs`), step by step, each keeping `.ci/run` green:
//!
//! - **Plan**: the spec planner carries a `SchemaRef` along the step graph. A source's
//!   schema comes from its `schema:` or from a sample (the first records of a file, a
//!   log or Kafka topic read before the job starts); every step is planned against its
//!   input's schema and yields its output's, so each mistake is a plan-time error
//!   `steps[i] (name).<at>: ...` (the `at` of [`PlanError`]). Sources decode with
//!   [`decode::RecordDecoder`] into one batch per poll and route [`decode::BadRecord`]s
//!   to `on_bad_record` by position; sinks encode with arrow-json / arrow-csv writers.
//! - **Elements**: a YAML job's element type becomes `RecordBatch` (the engine is
//!   generic over records: `Batch<RecordBatch>` of one batch per poll); event time is a
//!   `timestamp` column named by `event_time`, and watermarks are computed per batch
//!   (max of the column) before the batch moves on.
//! - **Runtime errors**: a vectorized expression fails a whole batch (integer division
//!   by zero). The operator then evaluates that batch row by row (slices of one row) to
//!   route only the failing rows to `on_bad_record`, as the row path does today.
//! - **key_by / exchange**: key columns encoded with `arrow-row` (`RowConverter`), the
//!   key group `murmur(key bytes) % max_parallelism` as today (so a restore at another
//!   parallelism still works), rows routed to subtasks with `take` / `interleave` per
//!   target: one batch per target per input batch, no per-row channel message.
//! - **Windows**: window starts computed per column (`ts - (ts - offset) % size`, hopping:
//!   each of its `size / slide` windows), (key row, window) accumulators in a hash map of
//!   typed state (count/sum/min/max/avg/first/last/count_distinct as plain Rust structs
//!   over primitives, or DataFusion's `Accumulator`s where they fit), fired windows
//!   emitted as one batch per watermark. Session merging, allowed lateness, late side
//!   output and triggers keep the existing window model (only the accumulator and the
//!   emitted row change), so `tests/conformance/` still matches Flink.
//! - **Joins, enrich**: join buffers hold batches (or row-encoded keys + `arrow-row`
//!   rows); output batches are built with `take` from both sides; `enrich` looks a key
//!   column up in the table and appends columns.
//! - **State**: accumulators serialised per (key group, key, window) as today (bincode
//!   of the typed state); join buffers as Arrow IPC bytes per key. A checkpoint of the
//!   old row format need not restore.
//!
//! CEL (the old expression language) to SQL:
//!
//! | CEL                                   | SQL (DataFusion)                          |
//! |---------------------------------------|-------------------------------------------|
//! | `item == "milk"`, `!=`                | `item = 'milk'`, `<>` / `!=`              |
//! | `a && b`, `a \|\| b`, `!a`            | `a AND b`, `a OR b`, `NOT a`              |
//! | `double(price) / 100.0`               | `price / 100.0` (coerced), `CAST(price AS DOUBLE)` |
//! | `int(x)`, `string(x)`                 | `CAST(x AS BIGINT)`, `CAST(x AS VARCHAR)`  |
//! | `x % 8`                               | `x % 8`                                   |
//! | `c ? a : b`                           | `CASE WHEN c THEN a ELSE b END`           |
//! | `"a" + b` (strings)                   | `'a' \|\| b`, `concat('a', b)`            |
//! | `s.contains("x")`, `startsWith`, `endsWith` | `strpos(s, 'x') > 0`, `starts_with(s, 'x')`, `ends_with(s, 'x')` |
//! | `s.matches("re")`                     | `s ~ 're'`, `regexp_like(s, 're')`        |
//! | `size(s)`                             | `character_length(s)`                     |
//! | `x in [1, 2]`                         | `x IN (1, 2)`                             |
//! | `has(row.f)`                          | `f IS NOT NULL` (the schema is fixed)     |
//! | `row.f` (the whole row)               | `f`                                       |
//!
//! SQL's null rules replace CEL's errors: a missing field is null, `null = x` is null, a
//! filter drops a row whose condition is null.

pub mod decode;
pub mod encode;
pub mod error;
pub mod filter;
pub mod infer;
pub mod projection;
pub mod schema;
pub mod values;

mod compile;
mod functions;

pub use error::{EvalError, PlanError};
pub use filter::Filter;
pub use projection::Projection;
