//! YAML job specs: a declarative job of sources, steps and sinks over dynamic rows.
//!
//! ```yaml
//! name: chocolate-milk
//! parallelism: 2
//! sources:
//!   - name: sales
//!     connector: file
//!     path: examples/data/snack_sales.jsonl
//! steps:
//!   - filter: "item = 'chocolate milk'"
//!   - map: { dollars: "price_cents / 100.0" }
//!   - key_by: [student]
//! sinks:
//!   - name: out
//!     connector: stdout
//! ```
//!
//! A step's input is the previous step (or the only source) unless `input` names one
//! or more sources or steps (several = a union). Expressions are SQL
//! (DataFusion's dialect) over the row's fields, planned against the input's schema
//! (`schema.rs`: declared, inferred from a file's first records, or derived from the
//! steps before). Every spec is checked before anything runs: unknown fields,
//! missing inputs, bad expressions, missing files and invalid names are errors that
//! name the field, as `steps[1] (choc).filter: ...`.

mod batch_sink;
mod build;
mod columnar;
mod http;
mod lookup;
mod overrides;
mod schema;
mod served;
mod time;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use brook_core::bad_record::BadRecordPolicy;
use brook_core::names::validate_name;
use brook_operators::batch_enrich::EnrichPlan;
use brook_operators::batch_join::{join_schema, JoinPlan};
use brook_operators::row_sql::{PlannedSql, SqlStep};
use brook_operators::window::assigner::WindowAssigner;
use brook_sql::schema::field_names;
use indexmap::IndexMap;
use serde::Deserialize;

pub use build::{build, build_on, build_partition, BuiltJob};
pub use overrides::apply_set;
pub use served::JobLog;
pub use time::{
    DurationSpec, EventTimeFormatSpec, EventTimeSpec, TimeKind, TriggerSpec, WatermarkSpec,
    WindowSpec,
};
pub(crate) use time::{Watermarks, WindowStep};

/// A spec that cannot run; `field` says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Path of the offending field, e.g. `sources[0] (sales).path`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A job spec, as written in YAML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The job's name: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Default parallelism of every source, step and sink (default 1).
    #[serde(default)]
    pub parallelism: Option<u32>,
    /// Key groups (default 128); fixed for the life of the job's state.
    #[serde(default)]
    pub max_parallelism: Option<u32>,
    /// Policy for bad records where a source or step does not set one (default
    /// `dead-letter` when `dead_letter` is set, else `fail`).
    #[serde(default)]
    pub on_bad_record: Option<BadRecordPolicy>,
    /// File receiving dead letters as JSON lines `{raw, position, reason}`.
    #[serde(default)]
    pub dead_letter: Option<PathBuf>,
    /// Take a checkpoint this often (`10s`; default: no checkpoints).
    #[serde(default)]
    pub checkpoint_interval: Option<DurationSpec>,
    /// Where keyed state lives (default `rocksdb`, in the data directory).
    #[serde(default)]
    pub state_backend: Option<StateBackendKind>,
    /// Where rows come from.
    pub sources: Vec<SourceSpec>,
    /// What happens to them, in order.
    #[serde(default)]
    pub steps: Vec<StepSpec>,
    /// Where results go.
    pub sinks: Vec<SinkSpec>,
}

/// Where a job keeps its keyed state (Flink's `state.backend.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StateBackendKind {
    /// In memory, as Rust values: fastest, bounded by memory.
    Memory,
    /// In RocksDB under `<data-dir>/state/<job>`: state may outgrow memory.
    Rocksdb,
}

/// Row format of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// One JSON object per line.
    Jsonl,
    /// CSV with a header line.
    Csv,
}

/// Where a log source starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartPosition {
    /// The oldest stored record.
    Earliest,
    /// Only records appended after the job starts.
    Latest,
}

/// Where a Kafka source starts a partition it has no checkpointed position for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaStartSpec {
    /// The oldest stored record (the default).
    Earliest,
    /// Only records written after the job starts.
    Latest,
    /// The consumer group's committed offsets (needs `group`).
    Committed,
    /// The first record at or after `start_timestamp_ms`.
    Timestamp,
}

/// Who shares a Kafka source's partitions out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaAssignment {
    /// brook, among the source's readers in this process; offsets live in brook's
    /// checkpoints (the default; as Flink's Kafka source).
    Brook,
    /// The consumer group, among every `brook run` of the spec that joins it (the
    /// scale-out mode, as Kafka Streams): each partition runs as its own job with its
    /// own checkpoints under the (shared) checkpoint directory, and moves to another
    /// process with its state on a rebalance. Needs `group`, checkpoints, Kafka sinks
    /// only, and input keyed so that a key's records share a partition.
    Group,
}

/// Which records a log source reads (as Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Committed records only: up to the last stable offset, without records of
    /// aborted transactions (the default).
    ReadCommitted,
    /// Every record, also of open and aborted transactions.
    ReadUncommitted,
}

/// A source.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "connector", rename_all = "lowercase", deny_unknown_fields)]
pub enum SourceSpec {
    /// JSON lines or CSV files (plain or `.gz`): a file or a directory of files.
    File {
        /// Name, referenced by `input`.
        name: String,
        /// A file or a directory.
        path: PathBuf,
        /// `jsonl` or `csv`; by default from the extension.
        #[serde(default)]
        format: Option<FileFormat>,
        /// Keep reading as the file grows (the job never ends).
        #[serde(default)]
        follow: bool,
        /// Bad-record policy for lines that do not parse.
        #[serde(default)]
        on_bad_record: Option<BadRecordPolicy>,
        /// The rows' fields and types (`{item: string, price_cents: int64}`; types:
        /// string, int64, float64, bool, timestamp), fixed when the job is planned.
        /// Default: a file's is inferred from its first records; a log or Kafka topic's
        /// is found when the job runs.
        #[serde(default)]
        schema: Option<IndexMap<String, String>>,
        /// Parallel readers.
        #[serde(default)]
        parallelism: Option<u32>,
        /// The field holding each row's event time (default for log and generator
        /// sources: the record's own timestamp).
        #[serde(default)]
        event_time: Option<EventTimeSpec>,
        /// Watermarks from the event times (semantics.md §2).
        #[serde(default)]
        watermark: Option<WatermarkSpec>,
    },
    /// A topic of the embedded log (the `--data-dir`).
    Log {
        /// Name, referenced by `input`.
        name: String,
        /// The topic.
        topic: String,
        /// `earliest` (default) or `latest`.
        #[serde(default)]
        start: Option<StartPosition>,
        /// Stop at the end offsets seen at start (default true); false follows.
        #[serde(default)]
        bounded: Option<bool>,
        /// `read_committed` (default) or `read_uncommitted`.
        #[serde(default)]
        isolation: Option<Isolation>,
        /// Bad-record policy for values that are not JSON objects.
        #[serde(default)]
        on_bad_record: Option<BadRecordPolicy>,
        /// The rows' fields and types (`{item: string, price_cents: int64}`; types:
        /// string, int64, float64, bool, timestamp), fixed when the job is planned.
        /// Default: a file's is inferred from its first records; a log or Kafka topic's
        /// is found when the job runs.
        #[serde(default)]
        schema: Option<IndexMap<String, String>>,
        /// Parallel readers.
        #[serde(default)]
        parallelism: Option<u32>,
        /// The field holding each row's event time (default for log and generator
        /// sources: the record's own timestamp).
        #[serde(default)]
        event_time: Option<EventTimeSpec>,
        /// Watermarks from the event times (semantics.md §2).
        #[serde(default)]
        watermark: Option<WatermarkSpec>,
    },
    /// A topic of a Kafka-compatible broker (see the `brook-kafka` crate): brook assigns
    /// the partitions to its readers and keeps their offsets in its checkpoints.
    Kafka {
        /// Name, referenced by `input`.
        name: String,
        /// Brokers, `host:port[,host:port...]`.
        bootstrap: String,
        /// The topic.
        topic: String,
        /// Consumer group: offsets of completed checkpoints are committed to it (for
        /// monitoring and lag), and `start: committed` starts from its offsets.
        #[serde(default)]
        group: Option<String>,
        /// `brook` (default) or `group` (several processes share the partitions; see
        /// [`KafkaAssignment`]).
        #[serde(default)]
        assignment: Option<KafkaAssignment>,
        /// `earliest` (default), `latest`, `committed`, or `timestamp` (with
        /// `start_timestamp_ms`), for partitions without a checkpointed position.
        #[serde(default)]
        start: Option<KafkaStartSpec>,
        /// With `start: timestamp`: the first record at or after this time (ms).
        #[serde(default)]
        start_timestamp_ms: Option<i64>,
        /// End once the end of every partition is reached (default false: follow).
        #[serde(default)]
        bounded: Option<bool>,
        /// librdkafka properties passed as they are (security settings, tuning).
        #[serde(default)]
        properties: BTreeMap<String, String>,
        /// How long to wait for a broker at `bootstrap` when the job starts, saying so
        /// every 5 s, before failing (default 60s, as the Java clients'
        /// `default.api.timeout.ms`).
        #[serde(default)]
        connect_timeout: Option<DurationSpec>,
        /// Bad-record policy for values that are not JSON objects.
        #[serde(default)]
        on_bad_record: Option<BadRecordPolicy>,
        /// The rows' fields and types (`{item: string, price_cents: int64}`; types:
        /// string, int64, float64, bool, timestamp), fixed when the job is planned.
        /// Default: a file's is inferred from its first records; a log or Kafka topic's
        /// is found when the job runs.
        #[serde(default)]
        schema: Option<IndexMap<String, String>>,
        /// Parallel readers.
        #[serde(default)]
        parallelism: Option<u32>,
        /// The field holding each row's event time (default: the record's timestamp).
        #[serde(default)]
        event_time: Option<EventTimeSpec>,
        /// Watermarks from the event times (semantics.md §2).
        #[serde(default)]
        watermark: Option<WatermarkSpec>,
    },
    /// Synthetic events `{key, ts, value}`: for i in 0..count, key = (i * 2654435761)
    /// mod keys, ts = start_ms + i * step_ms, value = i mod 100.
    Generator {
        /// Name, referenced by `input`.
        name: String,
        /// Number of events.
        count: u64,
        /// Number of distinct keys (default 10000).
        #[serde(default)]
        keys: Option<u64>,
        /// First timestamp, ms (default 0).
        #[serde(default)]
        start_ms: Option<i64>,
        /// Milliseconds between events (default 1).
        #[serde(default)]
        step_ms: Option<i64>,
        /// Events per second over all readers; as fast as possible when absent.
        #[serde(default)]
        rate: Option<f64>,
        /// `spread` (default): key `(i * 2654435761) mod keys`, time `start_ms + i *
        /// step_ms`; `bursts`: key `i mod keys`, bursts of 100,000 events over 1000 steps
        /// then 200 steps of silence (the W1 and W3 workloads of the benchmarks).
        #[serde(default)]
        pattern: Option<GeneratorPattern>,
        /// Parallel generators.
        #[serde(default)]
        parallelism: Option<u32>,
        /// The field holding each row's event time (default for log and generator
        /// sources: the record's own timestamp).
        #[serde(default)]
        event_time: Option<EventTimeSpec>,
        /// Watermarks from the event times (semantics.md §2).
        #[serde(default)]
        watermark: Option<WatermarkSpec>,
    },
}

/// How a generator spreads its events (see `SourceSpec::Generator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeneratorPattern {
    /// Keys spread by a multiplicative hash, one event per step.
    Spread,
    /// Keys in turn, in bursts with silence between them.
    Bursts,
}

impl SourceSpec {
    /// The source's `event_time` and `watermark`.
    pub fn event_time(&self) -> (Option<&EventTimeSpec>, Option<&WatermarkSpec>) {
        match self {
            SourceSpec::File {
                event_time,
                watermark,
                ..
            }
            | SourceSpec::Log {
                event_time,
                watermark,
                ..
            }
            | SourceSpec::Kafka {
                event_time,
                watermark,
                ..
            }
            | SourceSpec::Generator {
                event_time,
                watermark,
                ..
            } => (event_time.as_ref(), watermark.as_ref()),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        match self {
            SourceSpec::File { name, .. }
            | SourceSpec::Log { name, .. }
            | SourceSpec::Kafka { name, .. }
            | SourceSpec::Generator { name, .. } => name,
        }
    }
}

/// One or several inputs.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Inputs {
    /// One input.
    One(String),
    /// Several inputs, merged (a union).
    Many(Vec<String>),
}

impl Inputs {
    fn names(&self) -> Vec<String> {
        match self {
            Inputs::One(s) => vec![s.clone()],
            Inputs::Many(v) => v.clone(),
        }
    }
}

/// A step: exactly one of `filter`, `map`, `select`, `key_by`, `union`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Name, referenced by `input` (default `step-<n>`, 1-based).
    #[serde(default)]
    pub name: Option<String>,
    /// Input(s); default the previous step, or the only source.
    #[serde(default)]
    pub input: Option<Inputs>,
    /// Parallel instances.
    #[serde(default)]
    pub parallelism: Option<u32>,
    /// Policy for rows the step cannot evaluate.
    #[serde(default)]
    pub on_bad_record: Option<BadRecordPolicy>,
    /// Keep rows for which this SQL condition is true (not false or null).
    #[serde(default)]
    pub filter: Option<String>,
    /// Add or replace fields: name -> SQL expression over the input row, computed
    /// fields in the order written (as a SQL `SELECT` list).
    #[serde(default, deserialize_with = "time::unique_keys")]
    pub map: Option<IndexMap<String, String>>,
    /// Keep only these fields: name -> SQL expression over the input row, in the order
    /// written.
    #[serde(default, deserialize_with = "time::unique_keys")]
    pub select: Option<IndexMap<String, String>>,
    /// Partition by these fields: each key's rows go to one subtask, in order.
    #[serde(default)]
    pub key_by: Option<Vec<String>>,
    /// Merge these inputs (same as `input` with a list).
    #[serde(default)]
    pub union: Option<Vec<String>>,
    /// Group rows into windows (per key after `key_by`) and aggregate them.
    #[serde(default)]
    pub window: Option<WindowSpec>,
    /// With `window`: fire on something else than the window's end.
    #[serde(default)]
    pub trigger: Option<TriggerSpec>,
    /// With `window`: how long after a window's end late rows still update it
    /// (default 0).
    #[serde(default)]
    pub allowed_lateness: Option<DurationSpec>,
    /// With `window`: output field -> `count()`, `sum(f)`, `min(f)`, `max(f)`,
    /// `avg(f)`, `first(f)`, `last(f)`, `count_distinct(f)`.
    #[serde(default, deserialize_with = "time::unique_keys")]
    pub aggregate: Option<IndexMap<String, String>>,
    /// With `window` or `join`: the sink receiving late rows, unchanged (otherwise
    /// they are dropped); counted either way. A join's late rows are those of both
    /// inputs (a temporal join's: of its left input only).
    #[serde(default)]
    pub late_output: Option<String>,
    /// Join two inputs by key in event time (interval, window or temporal).
    #[serde(default)]
    pub join: Option<JoinSpec>,
    /// Add the fields of a lookup table's row with the same key.
    #[serde(default)]
    pub enrich: Option<EnrichSpec>,
    /// Add the fields of an HTTP service's answer for each row (async I/O).
    #[serde(default)]
    pub async_enrich: Option<AsyncEnrichSpec>,
}

/// An `async_enrich` step: a GET per row (URL from the row's fields) whose JSON object
/// answer is merged into the row, with several requests in flight.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsyncEnrichSpec {
    /// `http://host:port/path/{field}...`: each `{field}` is the row's field,
    /// percent-encoded.
    pub url: String,
    /// Requests in flight at most (default 16).
    #[serde(default)]
    pub capacity: Option<usize>,
    /// Rows leave in input order (default true); false: as answers arrive (never
    /// across a watermark).
    #[serde(default)]
    pub ordered: Option<bool>,
    /// A request not answered within this fails (default 5s).
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// Reuse an answer for the same URL this long (default: no cache).
    #[serde(default)]
    pub cache_ttl: Option<DurationSpec>,
    /// A failed request: `fail` (default), `pass` (the row unchanged), `drop`, or
    /// `bad_record` (the step's `on_bad_record` policy).
    #[serde(default)]
    pub on_error: Option<LookupErrorSpec>,
    /// The answer's fields and types, `{field: type}` as a source's `schema:` (default:
    /// none, and the rows after the step are JSON rows whose schema is unknown at plan
    /// time). With it the step's output is batches of the input's fields and these
    /// (an answer field the input has replaces it in place), fields of the answer not
    /// named are left out, and steps after it are planned before the job runs.
    #[serde(default)]
    pub schema: Option<IndexMap<String, String>>,
}

/// What a failed request of an `async_enrich` step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupErrorSpec {
    /// The job fails.
    Fail,
    /// The row passes unchanged.
    Pass,
    /// The row is dropped.
    Drop,
    /// The step's bad-record policy.
    BadRecord,
}

/// A validated `async_enrich` step.
#[derive(Debug, Clone)]
pub(crate) struct AsyncEnrichStep {
    pub(crate) url: String,
    pub(crate) capacity: usize,
    pub(crate) ordered: bool,
    pub(crate) timeout_ms: i64,
    pub(crate) cache_ttl_ms: i64,
    pub(crate) on_error: LookupErrorSpec,
    /// The declared answer fields.
    pub(crate) answer: Option<arrow_schema::SchemaRef>,
    /// The output's schema: the input's and the answer's fields (both known).
    pub(crate) output: Option<arrow_schema::SchemaRef>,
}

/// An `enrich` step: each row gets the fields of the table row with the same key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichSpec {
    /// The lookup table.
    pub table: TableSpec,
    /// Key fields of the rows.
    pub on: Vec<String>,
    /// Key fields of the table's rows, in the same order (default: `on`).
    #[serde(default)]
    pub table_key: Option<Vec<String>>,
    /// Table fields to add (default: all but the key).
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// A row whose key is not in the table: `nulls` (default: it passes with null
    /// table fields), `drop`, or `bad_record` (the step's `on_bad_record` policy, e.g.
    /// dead letter).
    #[serde(default)]
    pub missing: Option<MissingSpec>,
}

/// Where a lookup table comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "connector", rename_all = "lowercase", deny_unknown_fields)]
pub enum TableSpec {
    /// A JSON-lines or CSV file (optionally `.gz`), read when the step starts.
    File {
        /// The file.
        path: PathBuf,
        /// `jsonl` or `csv` (default: from the extension).
        #[serde(default)]
        format: Option<FileFormat>,
        /// The table's fields and types, `{field: type}` as a source's `schema:`
        /// (default: inferred from the file's first records).
        #[serde(default)]
        schema: Option<IndexMap<String, String>>,
    },
    /// A topic of the embedded log: its rows now, and those appended while the job
    /// runs (the latest row per key counts, as a compacted topic).
    Log {
        /// The topic.
        topic: String,
        /// The rows' fields and types, `{field: type}` (default: none, and the step
        /// runs on JSON rows: a topic is read only when the job runs).
        #[serde(default)]
        schema: Option<IndexMap<String, String>>,
    },
}

/// What an `enrich` step does with a row whose key is not in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingSpec {
    /// Pass the row with null table fields.
    Nulls,
    /// Drop the row.
    Drop,
    /// Apply the step's bad-record policy.
    BadRecord,
}

/// A validated enrich step.
#[derive(Debug, Clone)]
pub(crate) struct EnrichStep {
    pub(crate) table: TableSpec,
    pub(crate) format: FileFormat,
    pub(crate) on: Vec<String>,
    pub(crate) table_key: Vec<String>,
    pub(crate) fields: Option<Vec<String>>,
    pub(crate) missing: MissingSpec,
    /// Planned on batches (the input's and the table's schemas known at plan time).
    pub(crate) planned: Option<Arc<EnrichPlan>>,
}

/// A `join` step: rows of `left` and `right` with equal `on` fields.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinSpec {
    /// `interval` (needs `between`), `window` (needs `window`) or `temporal` (`right`
    /// holds versions of a table row, each valid from its event time).
    pub kind: JoinKind,
    /// The left input: a source or an earlier step.
    pub left: String,
    /// The right input.
    pub right: String,
    /// Key fields, present in both inputs.
    pub on: Vec<String>,
    /// `interval`: `[lower, upper]`: a right row joins a left row when its time minus
    /// the left row's is within them (signed durations, inclusive, e.g. `[0s, 15m]`).
    #[serde(default)]
    pub between: Option<Vec<DurationSpec>>,
    /// `window`: tumbling or hopping event-time windows.
    #[serde(default)]
    pub window: Option<WindowSpec>,
    /// `inner` (default: matched rows only) or `left_outer` (also each unmatched left
    /// row, once no match can come).
    #[serde(default, rename = "type")]
    pub join_type: Option<JoinTypeSpec>,
    /// Prefix for right fields whose name a left field has (default `<right>_`).
    #[serde(default)]
    pub right_prefix: Option<String>,
}

/// Which join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    /// Flink's interval join.
    Interval,
    /// Rows of the same window.
    Window,
    /// Each left row with the right version valid at its time.
    Temporal,
}

/// Which left rows a join emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinTypeSpec {
    /// Matched pairs only.
    Inner,
    /// Also unmatched left rows (without right fields).
    LeftOuter,
}

/// A validated join step.
#[derive(Debug, Clone)]
pub(crate) struct JoinStep {
    pub(crate) kind: ResolvedJoin,
    pub(crate) left: String,
    pub(crate) right: String,
    pub(crate) on: Vec<String>,
    pub(crate) left_outer: bool,
    pub(crate) right_prefix: String,
    /// The sink receiving the late rows of both inputs.
    pub(crate) late_output: Option<String>,
    /// Planned on batches (both inputs' schemas known at plan time, keys of one type).
    pub(crate) planned: Option<Arc<JoinPlan>>,
}

/// The join with its parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ResolvedJoin {
    Interval { lower: i64, upper: i64 },
    Window(WindowAssigner),
    Temporal,
}

/// A sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "connector", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkSpec {
    /// JSON lines or CSV (`.gz` compresses); with parallelism p > 1, subtask i writes
    /// `<stem>-<i>.<ext>`.
    File {
        /// Name.
        name: String,
        /// Input; default the last step (or the only source).
        #[serde(default)]
        input: Option<String>,
        /// The output file.
        path: PathBuf,
        /// `jsonl` or `csv`; by default from the extension.
        #[serde(default)]
        format: Option<FileFormat>,
        /// Parallel writers.
        #[serde(default)]
        parallelism: Option<u32>,
    },
    /// Print rows as JSON lines.
    Stdout {
        /// Name.
        name: String,
        /// Input; default the last step (or the only source).
        #[serde(default)]
        input: Option<String>,
    },
    /// Discard every row (Flink's `blackhole` connector): to measure a job without
    /// the cost of writing its output.
    Blackhole {
        /// Name.
        name: String,
        /// Input; default the last step (or the only source).
        #[serde(default)]
        input: Option<String>,
        /// Parallel instances.
        #[serde(default)]
        parallelism: Option<u32>,
    },
    /// Append rows as JSON to a topic of the embedded log.
    Log {
        /// Name.
        name: String,
        /// Input; default the last step (or the only source).
        #[serde(default)]
        input: Option<String>,
        /// The topic (must exist).
        topic: String,
        /// Field whose value is the record key (Kafka's partitioner picks the
        /// partition); keyless records are spread.
        #[serde(default)]
        key_field: Option<String>,
        /// With checkpoints: the writers' `transaction.timeout.ms` (Kafka's name, also
        /// accepted as the key): the log aborts a transaction still undecided this
        /// long after its first record (default 15m, the most the log allows; see
        /// `LogSink::transaction_timeout_ms`).
        #[serde(default, alias = "transaction.timeout.ms")]
        transaction_timeout: Option<DurationSpec>,
        /// Parallel writers.
        #[serde(default)]
        parallelism: Option<u32>,
    },
    /// Write rows as JSON to a Kafka topic: exactly once with Kafka transactions in a
    /// job that checkpoints, else an idempotent producer (at least once).
    Kafka {
        /// Name.
        name: String,
        /// Input; default the last step (or the only source).
        #[serde(default)]
        input: Option<String>,
        /// Brokers, `host:port[,host:port...]`.
        bootstrap: String,
        /// The topic (must exist).
        topic: String,
        /// Field whose value is the record key (Kafka's default partitioner, murmur2,
        /// picks the partition); keyless records are spread.
        #[serde(default)]
        key_field: Option<String>,
        /// librdkafka properties passed as they are (security settings, tuning).
        #[serde(default)]
        properties: BTreeMap<String, String>,
        /// How long each writer waits for a broker at `bootstrap` when the job starts,
        /// saying so every 5 s, before failing (default 60s, as the Java producer's
        /// `max.block.ms`).
        #[serde(default)]
        connect_timeout: Option<DurationSpec>,
        /// Parallel writers.
        #[serde(default)]
        parallelism: Option<u32>,
    },
}

impl SinkSpec {
    /// The sink's name.
    pub fn name(&self) -> &str {
        match self {
            SinkSpec::File { name, .. }
            | SinkSpec::Stdout { name, .. }
            | SinkSpec::Blackhole { name, .. }
            | SinkSpec::Log { name, .. }
            | SinkSpec::Kafka { name, .. } => name,
        }
    }

    fn input(&self) -> Option<&String> {
        match self {
            SinkSpec::File { input, .. }
            | SinkSpec::Stdout { input, .. }
            | SinkSpec::Blackhole { input, .. }
            | SinkSpec::Log { input, .. }
            | SinkSpec::Kafka { input, .. } => input.as_ref(),
        }
    }
}

/// What a validated step does.
#[derive(Debug, Clone)]
pub(crate) enum StepOp {
    /// `filter`, `map` or `select`, planned against its input schema when that is known
    /// at plan time (else on its first batch).
    Sql(SqlStep, Option<Arc<PlannedSql>>),
    KeyBy(Vec<String>),
    Union,
    Window(Box<WindowStep>),
    Join(Box<JoinStep>),
    Enrich(Box<EnrichStep>),
    AsyncEnrich(Box<AsyncEnrichStep>),
}

/// A step after validation: its name, resolved inputs and operation.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedStep {
    pub(crate) name: String,
    pub(crate) inputs: Vec<String>,
    pub(crate) op: StepOp,
    pub(crate) parallelism: Option<u32>,
    pub(crate) policy: BadRecordPolicy,
}

/// The Kafka source of a job with `assignment: group` (see [`KafkaAssignment`]).
#[derive(Debug, Clone)]
pub struct GroupSource {
    /// Brokers.
    pub bootstrap: String,
    /// The topic whose partitions the group shares.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// librdkafka properties of the source (security, session timeout, ...).
    pub properties: BTreeMap<String, String>,
    /// Whether each partition's job ends at the partition's end.
    pub bounded: bool,
    /// How long to wait for a broker when joining (ms).
    pub connect_timeout_ms: u64,
}

impl ValidSpec {
    /// Plans every window step on JSON rows, as before issue 18 step 4 (the row path):
    /// for benchmarks and tests that compare the two paths. The rows are the same.
    pub fn windows_on_rows(&mut self) {
        for s in &mut self.steps {
            if let StepOp::Window(w) = &mut s.op {
                w.columns = None;
            }
        }
    }

    /// Runs every enrich and join step on JSON rows (`LookupEnrich`, joins of
    /// `StoredRow`s), as before their batch paths: for benchmarks and tests that
    /// compare the two paths. The rows are the same.
    pub fn enrich_and_joins_on_rows(&mut self) {
        for s in &mut self.steps {
            match &mut s.op {
                StepOp::Enrich(e) => e.planned = None,
                StepOp::Join(j) => j.planned = None,
                _ => {}
            }
        }
    }

    /// The source whose partitions a consumer group shares, if the job has one.
    pub fn group_source(&self) -> Option<GroupSource> {
        self.spec.sources.iter().find_map(|s| match s {
            SourceSpec::Kafka {
                bootstrap,
                topic,
                group: Some(group),
                assignment: Some(KafkaAssignment::Group),
                properties,
                bounded,
                connect_timeout,
                ..
            } => Some(GroupSource {
                bootstrap: bootstrap.clone(),
                topic: topic.clone(),
                group: group.clone(),
                properties: properties.clone(),
                bounded: bounded.unwrap_or(false),
                // Validated: a duration in ms, positive.
                connect_timeout_ms: connect_timeout_ms(connect_timeout, "connect_timeout")
                    .unwrap_or(brook_kafka::DEFAULT_CONNECT_TIMEOUT_MS),
            }),
            _ => None,
        })
    }
}

/// A spec checked and resolved, ready to build.
#[derive(Debug, Clone)]
pub struct ValidSpec {
    /// The spec as written.
    pub spec: JobSpec,
    pub(crate) steps: Vec<ResolvedStep>,
    /// Resolved input of each sink.
    pub(crate) sink_inputs: Vec<String>,
    pub(crate) default_policy: BadRecordPolicy,
    /// Per source (in order): its event time.
    pub(crate) source_time: Vec<SourceTime>,
    /// Per source (in order): the schema it reads straight into batches of, if it does
    /// (a file, log or Kafka source with a declared schema, `columnar::reads_batches`).
    pub(crate) source_batches: Vec<Option<arrow_schema::SchemaRef>>,
}

fn resolve_async_enrich(field: &str, a: &AsyncEnrichSpec) -> Result<AsyncEnrichStep, SpecError> {
    if a.url.starts_with("https://") {
        return Err(SpecError::new(
            format!("{field}.url"),
            "https is not supported yet (this build has no TLS); use http://",
        ));
    }
    if !a.url.starts_with("http://") {
        return Err(SpecError::new(
            format!("{field}.url"),
            "must start with http://",
        ));
    }
    http::template_fields(&a.url).map_err(|e| SpecError::new(format!("{field}.url"), e))?;
    if a.capacity == Some(0) {
        return Err(SpecError::new(
            format!("{field}.capacity"),
            "must be at least 1",
        ));
    }
    let ms = |d: &Option<DurationSpec>, name: &str, default: i64| {
        d.as_ref()
            .map(|d| d.ms(&format!("{field}.{name}")))
            .transpose()
            .map(|v| v.unwrap_or(default))
    };
    Ok(AsyncEnrichStep {
        url: a.url.clone(),
        capacity: a.capacity.unwrap_or(16),
        ordered: a.ordered.unwrap_or(true),
        timeout_ms: ms(&a.timeout, "timeout", 5_000)?,
        cache_ttl_ms: ms(&a.cache_ttl, "cache_ttl", 0)?,
        on_error: a.on_error.unwrap_or(LookupErrorSpec::Fail),
        answer: match &a.schema {
            Some(fields) => Some(schema::declared_schema(field, fields)?),
            None => None,
        },
        output: None,
    })
}

fn resolve_enrich(field: &str, e: &EnrichSpec) -> Result<EnrichStep, SpecError> {
    if e.on.is_empty() {
        return Err(SpecError::new(
            format!("{field}.on"),
            "needs at least one key field",
        ));
    }
    let table_key = e.table_key.clone().unwrap_or_else(|| e.on.clone());
    if table_key.len() != e.on.len() {
        return Err(SpecError::new(
            format!("{field}.table_key"),
            format!("needs as many fields as `on` ({})", e.on.len()),
        ));
    }
    let format = match &e.table {
        TableSpec::File { path, format, .. } => {
            if !path.is_file() {
                return Err(SpecError::new(
                    format!("{field}.table.path"),
                    format!("{} is not a file", path.display()),
                ));
            }
            match format.or_else(|| file_format(path)) {
                Some(f) => f,
                None => {
                    return Err(SpecError::new(
                        format!("{field}.table.format"),
                        "is needed: the extension is not .jsonl, .json, .ndjson or .csv",
                    ))
                }
            }
        }
        TableSpec::Log { topic, .. } => {
            validate_name("topic", topic)
                .map_err(|err| SpecError::new(format!("{field}.table.topic"), err.to_string()))?;
            FileFormat::Jsonl
        }
    };
    Ok(EnrichStep {
        table: e.table.clone(),
        format,
        on: e.on.clone(),
        table_key,
        fields: e.fields.clone(),
        missing: e.missing.unwrap_or(MissingSpec::Nulls),
        planned: None,
    })
}

fn resolve_join(field: &str, j: &JoinSpec) -> Result<JoinStep, SpecError> {
    if j.on.is_empty() {
        return Err(SpecError::new(
            format!("{field}.on"),
            "needs at least one key field",
        ));
    }
    let only = |set: bool, name: &str, kind: &str| {
        if set {
            Err(SpecError::new(
                format!("{field}.{name}"),
                format!("is only allowed with kind: {kind}"),
            ))
        } else {
            Ok(())
        }
    };
    let kind = match j.kind {
        JoinKind::Interval => {
            only(j.window.is_some(), "window", "window")?;
            let b = j.between.as_ref().ok_or_else(|| {
                SpecError::new(
                    format!("{field}.between"),
                    "is required for an interval join (e.g. [0s, 15m])",
                )
            })?;
            let [lower, upper] = b.as_slice() else {
                return Err(SpecError::new(
                    format!("{field}.between"),
                    "needs two durations: [lower, upper]",
                ));
            };
            let lower = lower.signed_ms(&format!("{field}.between[0]"))?;
            let upper = upper.signed_ms(&format!("{field}.between[1]"))?;
            brook_operators::join::check_interval(lower, upper)
                .map_err(|e| SpecError::new(format!("{field}.between"), e.to_string()))?;
            ResolvedJoin::Interval { lower, upper }
        }
        JoinKind::Window => {
            only(j.between.is_some(), "between", "interval")?;
            let w = j.window.as_ref().ok_or_else(|| {
                SpecError::new(
                    format!("{field}.window"),
                    "is required for a window join (e.g. {kind: tumbling, size: 1m})",
                )
            })?;
            let assigner = w.resolve(&format!("{field}.window"))?;
            brook_operators::join::check_join_windows(&assigner)
                .map_err(|e| SpecError::new(format!("{field}.window"), e.to_string()))?;
            ResolvedJoin::Window(assigner)
        }
        JoinKind::Temporal => {
            only(j.between.is_some(), "between", "interval")?;
            only(j.window.is_some(), "window", "window")?;
            ResolvedJoin::Temporal
        }
    };
    if j.left == j.right {
        return Err(SpecError::new(
            format!("{field}.right"),
            "must differ from left (join two different inputs)",
        ));
    }
    Ok(JoinStep {
        kind,
        late_output: None,
        left: j.left.clone(),
        right: j.right.clone(),
        on: j.on.clone(),
        left_outer: j.join_type == Some(JoinTypeSpec::LeftOuter),
        right_prefix: j
            .right_prefix
            .clone()
            .unwrap_or_else(|| format!("{}_", j.right)),
        planned: None,
    })
}

impl JobSpec {
    /// `checkpoint_interval` in ms.
    ///
    /// # Errors
    /// A bad duration, naming the field.
    pub fn checkpoint_interval_ms(&self) -> Result<Option<i64>, SpecError> {
        self.checkpoint_interval
            .as_ref()
            .map(|d| d.ms("checkpoint_interval"))
            .transpose()
    }
}

impl fmt::Display for JobSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {} ({} sources, {} steps, {} sinks)",
            self.name,
            self.sources.len(),
            self.steps.len(),
            self.sinks.len()
        )
    }
}

/// Parses YAML text into a spec (no semantic checks yet).
///
/// # Errors
/// [`SpecError`] naming the position or field serde reports (unknown fields,
/// missing fields, wrong types).
pub fn parse(yaml: &str) -> Result<JobSpec, SpecError> {
    serde_norway::from_str(yaml).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("line {} column {}", l.line(), l.column()))
            .unwrap_or_else(|| "spec".into());
        SpecError::new(at, e.to_string())
    })
}

fn check_parallelism(field: &str, p: Option<u32>) -> Result<(), SpecError> {
    match p {
        Some(0) => Err(SpecError::new(
            format!("{field}.parallelism"),
            "must be at least 1",
        )),
        _ => Ok(()),
    }
}

fn sql_fields(
    field: &str,
    m: &IndexMap<String, String>,
) -> Result<Vec<(String, String)>, SpecError> {
    if m.is_empty() {
        return Err(SpecError::new(field, "needs at least one field"));
    }
    Ok(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Plans a `filter`/`map`/`select` against its input schema, if known; an error names
/// the step and the expression's place (`steps[0] (milk).filter: unknown column ...`).
fn plan_sql(
    field: &str,
    step: &SqlStep,
    input: Option<&arrow_schema::SchemaRef>,
) -> Result<Option<Arc<PlannedSql>>, SpecError> {
    let Some(schema) = input else {
        return Ok(None);
    };
    step.plan(schema)
        .map(|p| Some(Arc::new(p)))
        .map_err(|e| SpecError::new(format!("{field}.{}", e.at()), e.reason()))
}

/// A key field the input does not have is a plan-time error.
fn check_fields(
    field: &str,
    names: &[String],
    schema: &arrow_schema::SchemaRef,
) -> Result<(), SpecError> {
    for n in names {
        if schema.index_of(n).is_err() {
            return Err(SpecError::new(
                field,
                format!("unknown field `{n}` (fields: {})", field_names(schema)),
            ));
        }
    }
    Ok(())
}

/// The schema of several inputs merged by a union: theirs when all are known and the
/// same, else unknown at plan time.
fn union_schema(inputs: &[Option<arrow_schema::SchemaRef>]) -> Option<arrow_schema::SchemaRef> {
    let first = inputs.first()?.as_ref()?;
    inputs
        .iter()
        .all(|s| s.as_ref().is_some_and(|s| s.fields() == first.fields()))
        .then(|| first.clone())
}

/// Checks a spec completely, before anything runs.
///
/// # Errors
/// The first problem found, naming its field.
pub fn validate(spec: JobSpec) -> Result<ValidSpec, SpecError> {
    validate_name("job", &spec.name).map_err(|e| SpecError::new("name", e.to_string()))?;
    check_parallelism("job", spec.parallelism)?;
    if let Some(m) = spec.max_parallelism {
        if m == 0 || m > brook_core::keys::MAX_MAX_PARALLELISM {
            return Err(SpecError::new(
                "max_parallelism",
                format!(
                    "must be between 1 and {}",
                    brook_core::keys::MAX_MAX_PARALLELISM
                ),
            ));
        }
    }
    if spec.checkpoint_interval_ms()? == Some(0) {
        return Err(SpecError::new("checkpoint_interval", "must be positive"));
    }
    if spec.sources.is_empty() {
        return Err(SpecError::new("sources", "a job needs at least one source"));
    }
    if spec.sinks.is_empty() {
        return Err(SpecError::new("sinks", "a job needs at least one sink"));
    }
    let default_policy = spec.on_bad_record.unwrap_or(if spec.dead_letter.is_some() {
        BadRecordPolicy::DeadLetter
    } else {
        BadRecordPolicy::Fail
    });
    let mut names: HashSet<String> = HashSet::new();
    let mut source_time = Vec::with_capacity(spec.sources.len());
    let mut source_batches = Vec::with_capacity(spec.sources.len());
    // The schema of each source's and step's rows, where known at plan time.
    let mut schemas: HashMap<String, Option<arrow_schema::SchemaRef>> = HashMap::new();
    let mut uses_dead_letter = default_policy == BadRecordPolicy::DeadLetter;
    for (i, s) in spec.sources.iter().enumerate() {
        let field = format!("sources[{i}] ({})", s.name());
        validate_name("source", s.name())
            .map_err(|e| SpecError::new(format!("sources[{i}].name"), e.to_string()))?;
        if !names.insert(s.name().to_string()) {
            return Err(SpecError::new(format!("{field}.name"), "is used twice"));
        }
        let time = source_event_time(&field, s)?;
        let schema = schema::source_schema(&field, s)?;
        source_batches.push(match s {
            SourceSpec::File {
                schema: Some(_), ..
            }
            | SourceSpec::Log {
                schema: Some(_), ..
            }
            | SourceSpec::Kafka {
                schema: Some(_), ..
            } => schema
                .clone()
                .filter(|schema| columnar::reads_batches(schema, &time)),
            _ => None,
        });
        source_time.push(time);
        schemas.insert(s.name().to_string(), schema);
        match s {
            SourceSpec::File {
                path,
                format,
                on_bad_record,
                parallelism,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                if !path.exists() {
                    return Err(SpecError::new(
                        format!("{field}.path"),
                        format!("{} does not exist", path.display()),
                    ));
                }
                if format.is_none() && (path.is_dir() || file_format(path).is_none()) {
                    let why = if path.is_dir() {
                        "cannot tell for a directory"
                    } else {
                        "cannot tell from the extension"
                    };
                    return Err(SpecError::new(
                        format!("{field}.format"),
                        format!("{why}: set jsonl or csv"),
                    ));
                }
                uses_dead_letter |= *on_bad_record == Some(BadRecordPolicy::DeadLetter);
            }
            SourceSpec::Log {
                topic,
                on_bad_record,
                parallelism,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                validate_name("topic", topic)
                    .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                uses_dead_letter |= *on_bad_record == Some(BadRecordPolicy::DeadLetter);
            }
            SourceSpec::Kafka {
                bootstrap,
                topic,
                group,
                assignment,
                start,
                start_timestamp_ms,
                on_bad_record,
                parallelism,
                connect_timeout,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                check_kafka(&field, bootstrap, topic)?;
                connect_timeout_ms(connect_timeout, &format!("{field}.connect_timeout"))?;
                if *assignment == Some(KafkaAssignment::Group) {
                    check_group_mode(&field, &spec, group.as_deref())?;
                }
                uses_dead_letter |= *on_bad_record == Some(BadRecordPolicy::DeadLetter);
                match (start, start_timestamp_ms) {
                    (Some(KafkaStartSpec::Timestamp), None) => {
                        return Err(SpecError::new(
                            format!("{field}.start_timestamp_ms"),
                            "is needed with start: timestamp",
                        ))
                    }
                    (Some(KafkaStartSpec::Timestamp), Some(_)) | (_, None) => {}
                    (_, Some(_)) => {
                        return Err(SpecError::new(
                            format!("{field}.start_timestamp_ms"),
                            "is only read with start: timestamp",
                        ))
                    }
                }
                if *start == Some(KafkaStartSpec::Committed) && group.is_none() {
                    return Err(SpecError::new(
                        format!("{field}.group"),
                        "is needed with start: committed",
                    ));
                }
            }
            SourceSpec::Generator {
                keys,
                step_ms,
                rate,
                parallelism,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                if *keys == Some(0) {
                    return Err(SpecError::new(
                        format!("{field}.keys"),
                        "must be at least 1",
                    ));
                }
                if step_ms.is_some_and(|s| s < 0) {
                    return Err(SpecError::new(
                        format!("{field}.step_ms"),
                        "must not be negative",
                    ));
                }
                if rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
                    return Err(SpecError::new(
                        format!("{field}.rate"),
                        "must be a positive number of events per second",
                    ));
                }
            }
        }
    }
    let mut late_outputs: std::collections::HashMap<String, String> = Default::default();
    let mut steps = Vec::with_capacity(spec.steps.len());
    let mut previous: Option<String> =
        (spec.sources.len() == 1).then(|| spec.sources[0].name().to_string());
    for (i, s) in spec.steps.iter().enumerate() {
        let name = s.name.clone().unwrap_or_else(|| format!("step-{}", i + 1));
        let field = format!("steps[{i}] ({name})");
        validate_name("step", &name)
            .map_err(|e| SpecError::new(format!("steps[{i}].name"), e.to_string()))?;
        if !names.insert(name.clone()) {
            return Err(SpecError::new(format!("{field}.name"), "is used twice"));
        }
        check_parallelism(&field, s.parallelism)?;
        let set = [
            s.filter.is_some(),
            s.map.is_some(),
            s.select.is_some(),
            s.key_by.is_some(),
            s.union.is_some(),
            s.window.is_some(),
            s.join.is_some(),
            s.enrich.is_some(),
            s.async_enrich.is_some(),
        ];
        if set.iter().filter(|b| **b).count() != 1 {
            return Err(SpecError::new(
                field,
                "needs exactly one of filter, map, select, key_by, union, window, join, enrich, async_enrich",
            ));
        }
        if s.window.is_none() {
            for (set, name) in [
                (s.trigger.is_some(), "trigger"),
                (s.allowed_lateness.is_some(), "allowed_lateness"),
                (s.aggregate.is_some(), "aggregate"),
                (s.late_output.is_some() && s.join.is_none(), "late_output"),
            ] {
                if set {
                    return Err(SpecError::new(
                        format!("{field}.{name}"),
                        if name == "late_output" {
                            "is only allowed with window or join"
                        } else {
                            "is only allowed with window"
                        },
                    ));
                }
            }
        }
        if let Some(late) = &s.late_output {
            check_late_output(&spec, &field, late)?;
            if late_outputs.insert(late.clone(), name.clone()).is_some() {
                return Err(SpecError::new(
                    format!("{field}.late_output"),
                    format!("sink {late:?} is already the late output of another step"),
                ));
            }
        }
        let op = if let Some(a) = &s.async_enrich {
            StepOp::AsyncEnrich(Box::new(resolve_async_enrich(
                &format!("{field}.async_enrich"),
                a,
            )?))
        } else if let Some(e) = &s.enrich {
            StepOp::Enrich(Box::new(resolve_enrich(&format!("{field}.enrich"), e)?))
        } else if let Some(j) = &s.join {
            if s.input.is_some() {
                return Err(SpecError::new(
                    format!("{field}.input"),
                    "a join names its inputs in `join.left` and `join.right`",
                ));
            }
            let mut join = resolve_join(&format!("{field}.join"), j)?;
            join.late_output = s.late_output.clone();
            StepOp::Join(Box::new(join))
        } else if let Some(w) = &s.window {
            let assigner = w.resolve(&format!("{field}.window"))?;
            let aggregate = s.aggregate.as_ref().ok_or_else(|| {
                SpecError::new(
                    format!("{field}.aggregate"),
                    "is required with window (e.g. { count: count() })",
                )
            })?;
            let trigger = s
                .trigger
                .as_ref()
                .map(|t| t.resolve(&format!("{field}.trigger")))
                .transpose()?;
            let allowed_lateness_ms = s
                .allowed_lateness
                .as_ref()
                .map(|d| d.ms(&format!("{field}.allowed_lateness")))
                .transpose()?
                .unwrap_or(0);
            StepOp::Window(Box::new(WindowStep {
                assigner,
                trigger,
                allowed_lateness_ms,
                aggregates: time::aggregates(&format!("{field}.aggregate"), aggregate)?,
                late_output: s.late_output.clone(),
                columns: None,
            }))
        } else if let Some(f) = &s.filter {
            StepOp::Sql(SqlStep::Filter(f.clone()), None)
        } else if let Some(m) = &s.map {
            StepOp::Sql(SqlStep::Map(sql_fields(&format!("{field}.map"), m)?), None)
        } else if let Some(m) = &s.select {
            StepOp::Sql(
                SqlStep::Select(sql_fields(&format!("{field}.select"), m)?),
                None,
            )
        } else if let Some(k) = &s.key_by {
            if k.is_empty() {
                return Err(SpecError::new(
                    format!("{field}.key_by"),
                    "needs at least one field",
                ));
            }
            StepOp::KeyBy(k.clone())
        } else {
            StepOp::Union
        };
        let inputs = match (&s.union, &s.input) {
            _ if s.join.is_some() => s
                .join
                .iter()
                .flat_map(|j| [j.left.clone(), j.right.clone()])
                .collect(),
            (Some(_), Some(_)) => {
                return Err(SpecError::new(
                    field,
                    "give the inputs of a union in `union`, not also in `input`",
                ))
            }
            (Some(u), None) => {
                if u.len() < 2 {
                    return Err(SpecError::new(
                        format!("{field}.union"),
                        "needs at least two inputs",
                    ));
                }
                u.clone()
            }
            (None, Some(i)) => i.names(),
            (None, None) => match &previous {
                Some(p) => vec![p.clone()],
                None => {
                    return Err(SpecError::new(
                        format!("{field}.input"),
                        "is required: there are several sources",
                    ))
                }
            },
        };
        for inp in &inputs {
            if !names.contains(inp) || *inp == name {
                return Err(SpecError::new(
                    format!("{field}.input"),
                    format!("{inp:?} is not a source or an earlier step"),
                ));
            }
        }
        let input_schemas: Vec<Option<arrow_schema::SchemaRef>> = inputs
            .iter()
            .map(|i| schemas.get(i).cloned().flatten())
            .collect();
        let input_schema = union_schema(&input_schemas);
        let (op, output_schema) = match op {
            StepOp::Sql(step, _) => {
                let planned = plan_sql(&field, &step, input_schema.as_ref())?;
                let out = planned.as_ref().map(|p| p.output_schema().clone());
                (StepOp::Sql(step, planned), out)
            }
            StepOp::KeyBy(keys) => {
                if let Some(schema) = &input_schema {
                    check_fields(&format!("{field}.key_by"), &keys, schema)?;
                }
                (StepOp::KeyBy(keys), input_schema)
            }
            StepOp::Window(mut w) => {
                // Keyed by the fields of the `key_by` step it reads, if it reads one.
                let keys = match inputs.as_slice() {
                    [one] => steps
                        .iter()
                        .find_map(|st: &ResolvedStep| match &st.op {
                            StepOp::KeyBy(k) if st.name == *one => Some(k.clone()),
                            _ => None,
                        })
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                let out = match &input_schema {
                    Some(schema) => {
                        plan_window(&field, &mut w, schema, &keys)?;
                        w.columns.as_ref().map(|c| Arc::clone(c.output_schema()))
                    }
                    None => None,
                };
                (StepOp::Window(w), out)
            }
            StepOp::Union => (StepOp::Union, input_schema),
            StepOp::AsyncEnrich(mut a) => {
                let out = match &input_schema {
                    Some(input) => {
                        // Every `{field}` of the URL is a field of the input.
                        for f in http::template_fields(&a.url)
                            .map_err(|e| SpecError::new(format!("{field}.async_enrich.url"), e))?
                        {
                            if input.index_of(&f).is_err() {
                                return Err(SpecError::new(
                                    format!("{field}.async_enrich.url"),
                                    format!(
                                        "{{{f}}}: field {f:?} is not in the input (its fields: {})",
                                        field_names(input)
                                    ),
                                ));
                            }
                        }
                        if let Some(answer) = &a.answer {
                            // A row whose answer lacks a field keeps the input's value,
                            // which must fit the field's declared type.
                            for f in answer.fields() {
                                if let Ok(i) = input.index_of(f.name()) {
                                    let have = input.field(i).data_type();
                                    if have != f.data_type() {
                                        return Err(SpecError::new(
                                            format!("{field}.async_enrich.schema.{}", f.name()),
                                            format!(
                                                "the input's field {:?} is {have}: an answer replaces it, so declare it with that type (or let the service answer another name)",
                                                f.name()
                                            ),
                                        ));
                                    }
                                }
                            }
                        }
                        a.answer
                            .as_ref()
                            .map(|answer| schema::merged(input, answer))
                    }
                    None => None,
                };
                a.output = out.clone();
                (StepOp::AsyncEnrich(a), out)
            }
            StepOp::Enrich(mut e) => {
                let at = format!("{field}.enrich");
                let table = schema::table_schema(&format!("{at}.table"), &e.table)?;
                let out = match (&input_schema, table) {
                    (Some(input), Some(table)) => {
                        let plan = EnrichPlan::new(
                            input,
                            &table,
                            &e.on,
                            &e.table_key,
                            e.fields.as_deref(),
                        )
                        .map_err(|err| {
                            SpecError::new(format!("{at}.{}", err.setting), err.reason)
                        })?;
                        let out = Arc::clone(plan.output_schema());
                        e.planned = Some(Arc::new(plan));
                        Some(out)
                    }
                    _ => None,
                };
                (StepOp::Enrich(e), out)
            }
            StepOp::Join(mut j) => {
                // Every kind of join makes its rows with join_rows, or on batches with
                // the same fields (JoinPlan).
                let out = match &input_schemas[..] {
                    [Some(left), Some(right)] => {
                        check_fields(&format!("{field}.join.on"), &j.on, left)?;
                        check_fields(&format!("{field}.join.on"), &j.on, right)?;
                        match JoinPlan::new(left, right, &j.on, &j.right_prefix)
                            .map_err(|e| SpecError::new(format!("{field}.join.on"), e))?
                        {
                            Some(plan) => {
                                let out = Arc::clone(plan.output_schema());
                                j.planned = Some(Arc::new(plan));
                                Some(out)
                            }
                            None => Some(join_schema(left, right, &j.on, &j.right_prefix)),
                        }
                    }
                    _ => None,
                };
                (StepOp::Join(j), out)
            }
        };
        schemas.insert(name.clone(), output_schema);
        let policy = s.on_bad_record.unwrap_or(default_policy);
        uses_dead_letter |= policy == BadRecordPolicy::DeadLetter;
        previous = Some(name.clone());
        steps.push(ResolvedStep {
            name,
            inputs,
            op,
            parallelism: s.parallelism,
            policy,
        });
    }
    let mut sink_inputs = Vec::with_capacity(spec.sinks.len());
    for (i, s) in spec.sinks.iter().enumerate() {
        let field = format!("sinks[{i}] ({})", s.name());
        validate_name("sink", s.name())
            .map_err(|e| SpecError::new(format!("sinks[{i}].name"), e.to_string()))?;
        if !names.insert(s.name().to_string()) {
            return Err(SpecError::new(format!("{field}.name"), "is used twice"));
        }
        let input = match (s.input(), late_outputs.get(s.name())) {
            (_, Some(step)) => late_input(step),
            (Some(i), None) => i.clone(),
            (None, None) => previous.clone().ok_or_else(|| {
                SpecError::new(
                    format!("{field}.input"),
                    "is required: there are several sources and no steps",
                )
            })?,
        };
        let is_late = late_outputs.contains_key(s.name());
        if !is_late && (!names.contains(&input) || spec.sinks.iter().any(|o| o.name() == input)) {
            return Err(SpecError::new(
                format!("{field}.input"),
                format!("{input:?} is not a source or a step"),
            ));
        }
        match s {
            SinkSpec::File {
                path,
                format,
                parallelism,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                if format.is_none() && file_format(path).is_none() {
                    return Err(SpecError::new(
                        format!("{field}.format"),
                        "cannot tell from the extension: set jsonl or csv",
                    ));
                }
            }
            SinkSpec::Log {
                topic,
                parallelism,
                transaction_timeout,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                validate_name("topic", topic)
                    .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                log_transaction_timeout_ms(
                    transaction_timeout,
                    &format!("{field}.transaction_timeout"),
                )?;
            }
            SinkSpec::Kafka {
                bootstrap,
                topic,
                parallelism,
                connect_timeout,
                ..
            } => {
                check_parallelism(&field, *parallelism)?;
                check_kafka(&field, bootstrap, topic)?;
                connect_timeout_ms(connect_timeout, &format!("{field}.connect_timeout"))?;
            }
            SinkSpec::Stdout { .. } => {}
            SinkSpec::Blackhole { parallelism, .. } => check_parallelism(&field, *parallelism)?,
        }
        sink_inputs.push(input);
    }
    // An event-time window needs event time on every source it reads from.
    for (i, st) in steps.iter().enumerate() {
        let StepOp::Window(w) = &st.op else { continue };
        if !w.assigner.is_event_time() {
            continue;
        }
        let mut todo: Vec<&String> = st.inputs.iter().collect();
        let mut seen = HashSet::new();
        while let Some(n) = todo.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            if let Some(k) = spec.sources.iter().position(|x| x.name() == n) {
                if source_time[k].is_none() {
                    return Err(SpecError::new(
                        format!("steps[{i}] ({}).window", st.name),
                        format!(
                            "is an event-time window but source {n:?} has no event_time or watermark"
                        ),
                    ));
                }
            } else if let Some(up) = steps.iter().find(|x| x.name == *n) {
                todo.extend(up.inputs.iter());
            }
        }
    }
    // Every source and step must lead somewhere: a dangling one would run for nothing.
    let used: HashSet<&String> = steps
        .iter()
        .flat_map(|s| s.inputs.iter())
        .chain(sink_inputs.iter())
        .collect();
    for (i, s) in spec.sources.iter().enumerate() {
        if !used.contains(&s.name().to_string()) {
            return Err(SpecError::new(
                format!("sources[{i}] ({})", s.name()),
                "is not read by any step or sink",
            ));
        }
    }
    for (i, s) in steps.iter().enumerate() {
        if !used.contains(&s.name) {
            return Err(SpecError::new(
                format!("steps[{i}] ({})", s.name),
                "is not read by any step or sink",
            ));
        }
    }
    // No output may overwrite an input or another output.
    let mut files: Vec<(String, PathBuf, bool)> = Vec::new();
    for (i, s) in spec.sources.iter().enumerate() {
        if let SourceSpec::File { path, .. } = s {
            files.push((
                format!("sources[{i}] ({}).path", s.name()),
                path.clone(),
                false,
            ));
        }
    }
    for (i, s) in spec.sinks.iter().enumerate() {
        if let SinkSpec::File { path, .. } = s {
            files.push((
                format!("sinks[{i}] ({}).path", s.name()),
                path.clone(),
                true,
            ));
        }
    }
    if let Some(d) = &spec.dead_letter {
        files.push(("dead_letter".into(), d.clone(), true));
    }
    let norm = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
    for (i, (field, path, written)) in files.iter().enumerate() {
        for (other, other_path, other_written) in &files[..i] {
            let inside =
                |dir: &PathBuf, f: &PathBuf| dir.is_dir() && norm(f).starts_with(norm(dir));
            let clash = norm(path) == norm(other_path)
                || (*written && inside(other_path, path))
                || (*other_written && inside(path, other_path));
            if (*written || *other_written) && clash {
                return Err(SpecError::new(field.clone(), format!("{} is also {other}: an output must not overwrite an input or another output", path.display())));
            }
        }
    }
    if uses_dead_letter && spec.dead_letter.is_none() {
        return Err(SpecError::new(
            "dead_letter",
            "a source or step uses on_bad_record: dead-letter, so a dead_letter file is required",
        ));
    }
    Ok(ValidSpec {
        spec,
        steps,
        sink_inputs,
        default_policy,
        source_time,
        source_batches,
    })
}

/// Checks a window step's aggregates against its input `schema` (a field the input
/// lacks, `sum`/`avg` of a field that is not a number: plan-time errors) and plans it on
/// typed state (issue 18 step 4) when it can be: every aggregate typed (a `late_output`
/// too: its rows then keep their whole input rows, `batch_window::LateRows`).
fn plan_window(
    field: &str,
    w: &mut WindowStep,
    schema: &arrow_schema::SchemaRef,
    keys: &[String],
) -> Result<(), SpecError> {
    use brook_operators::batch_window::{WindowColumns, WindowPlanError};
    match WindowColumns::plan(schema, keys, &w.aggregates) {
        Ok(planned) => {
            w.columns = planned.map(Arc::new);
            Ok(())
        }
        Err(WindowPlanError::Key(reason)) => Err(SpecError::new(format!("{field}.key_by"), reason)),
        Err(WindowPlanError::Aggregate(name, reason)) => {
            Err(SpecError::new(format!("{field}.aggregate.{name}"), reason))
        }
    }
}

/// Checks that a step's `late_output` names a sink without an `input` of its own.
fn check_late_output(spec: &JobSpec, field: &str, late: &str) -> Result<(), SpecError> {
    match spec.sinks.iter().find(|k| k.name() == late) {
        None => Err(SpecError::new(
            format!("{field}.late_output"),
            format!("{late:?} is not a sink"),
        )),
        Some(k) if k.input().is_some() => Err(SpecError::new(
            format!("{field}.late_output"),
            format!("sink {late:?} receives this step's late rows: leave its `input` out"),
        )),
        Some(_) => Ok(()),
    }
}

/// The input name under which a window or join step's late rows are found.
pub(crate) fn late_input(step: &str) -> String {
    format!("{step}#late")
}

/// Event time of a source: its timestamp field (none: the record's own timestamp) and
/// watermarks, or `None` without event time.
pub(crate) type SourceTime = Option<(
    Option<brook_operators::row_time::EventTimeField>,
    Watermarks,
)>;

fn source_event_time(field: &str, s: &SourceSpec) -> Result<SourceTime, SpecError> {
    let (event_time, watermark) = s.event_time();
    if event_time.is_none() && watermark.is_none() {
        return Ok(None);
    }
    let ts = event_time
        .map(|e| e.resolve(&format!("{field}.event_time")))
        .transpose()?;
    if ts.is_none() && matches!(s, SourceSpec::File { .. }) {
        return Err(SpecError::new(
            format!("{field}.event_time"),
            "is required with watermark: rows of a file have no timestamp of their own",
        ));
    }
    let wm = watermark
        .cloned()
        .unwrap_or_default()
        .resolve(&format!("{field}.watermark"))?;
    Ok(Some((ts, wm)))
}

/// Makes the relative file paths of a spec (sources, sinks, `dead_letter`) relative to
/// `base`, the directory of the spec file, so a spec runs the same from anywhere.
pub fn resolve_paths(mut spec: JobSpec, base: &std::path::Path) -> JobSpec {
    let fix = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    };
    for s in &mut spec.sources {
        if let SourceSpec::File { path, .. } = s {
            fix(path);
        }
    }
    for s in &mut spec.sinks {
        if let SinkSpec::File { path, .. } = s {
            fix(path);
        }
    }
    if let Some(p) = &mut spec.dead_letter {
        fix(p);
    }
    for s in &mut spec.steps {
        if let Some(EnrichSpec {
            table: TableSpec::File { path, .. },
            ..
        }) = &mut s.enrich
        {
            fix(path);
        }
    }
    spec
}

/// The format a path's extension implies (`.jsonl`, `.json`, `.ndjson`, `.csv`, each
/// optionally followed by `.gz`).
pub fn file_format(path: &std::path::Path) -> Option<FileFormat> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    if name.ends_with(".jsonl") || name.ends_with(".json") || name.ends_with(".ndjson") {
        Some(FileFormat::Jsonl)
    } else if name.ends_with(".csv") {
        Some(FileFormat::Csv)
    } else {
        None
    }
}

#[cfg(test)]
mod batch_enrich_tests;
#[cfg(test)]
mod batch_join_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod typed_window_tests;

/// Builds `yaml`, whose first source reads into batches, at parallelism 1 on `log` open
/// in this process, after `change` (the tests that compare the batch path with the row
/// path force the latter there).
#[cfg(test)]
pub(crate) fn build_local(
    yaml: &str,
    log: &brook_log::Log,
    change: impl FnOnce(&mut ValidSpec),
) -> BuiltJob {
    let mut valid = validate(parse(yaml).expect("parses")).expect("valid");
    assert!(valid.source_batches[0].is_some(), "read into batches");
    change(&mut valid);
    build_on(
        &valid,
        brook_engine::JobConfig::with_parallelism(1),
        Some(JobLog::Local(log)),
    )
    .expect("builds")
}

/// `assignment: group`: a group, the only source, and Kafka sinks only (each
/// partition's job runs in whichever process holds the partition).
fn check_group_mode(field: &str, spec: &JobSpec, group: Option<&str>) -> Result<(), SpecError> {
    if group.is_none() {
        return Err(SpecError::new(
            format!("{field}.group"),
            "is needed with assignment: group",
        ));
    }
    if spec.sources.len() != 1 {
        return Err(SpecError::new(
            format!("{field}.assignment"),
            "group assignment needs the Kafka source to be the job's only source",
        ));
    }
    if let Some(s) = spec
        .sinks
        .iter()
        .find(|s| !matches!(s, SinkSpec::Kafka { .. }))
    {
        return Err(SpecError::new(
            format!("{field}.assignment"),
            format!(
                "group assignment writes to Kafka sinks only (processes on other machines \
                 share the job); sink {:?} is not one",
                s.name()
            ),
        ));
    }
    Ok(())
}

/// A log sink's `transaction_timeout` in ms (default
/// [`brook_connectors::LOG_SINK_TRANSACTION_TIMEOUT_MS`]); between 1 ms and the log's
/// maximum ([`brook_log::MAX_TRANSACTION_TIMEOUT_MS`], Kafka's
/// `transaction.max.timeout.ms`).
pub(crate) fn log_transaction_timeout_ms(
    d: &Option<DurationSpec>,
    field: &str,
) -> Result<u64, SpecError> {
    let Some(d) = d else {
        return Ok(brook_connectors::LOG_SINK_TRANSACTION_TIMEOUT_MS);
    };
    let max = brook_log::MAX_TRANSACTION_TIMEOUT_MS;
    match d.ms(field)?.unsigned_abs() {
        ms if ms == 0 || ms > max => Err(SpecError::new(
            field,
            format!("{ms} ms must be between 1 ms and {max} ms (the log's transaction.max.timeout.ms, as Kafka's)"),
        )),
        ms => Ok(ms),
    }
}

/// A Kafka source's or sink's `connect_timeout` in ms (default
/// [`brook_kafka::DEFAULT_CONNECT_TIMEOUT_MS`]); must be positive.
pub(crate) fn connect_timeout_ms(d: &Option<DurationSpec>, field: &str) -> Result<u64, SpecError> {
    let Some(d) = d else {
        return Ok(brook_kafka::DEFAULT_CONNECT_TIMEOUT_MS);
    };
    match d.ms(field)? {
        0 => Err(SpecError::new(field, "must be positive")),
        ms => Ok(ms.unsigned_abs()),
    }
}

/// A Kafka source's or sink's `bootstrap` and `topic` (Kafka's topic name rules:
/// 1 to 249 characters of `[A-Za-z0-9._-]`, not `.` or `..`).
fn check_kafka(field: &str, bootstrap: &str, topic: &str) -> Result<(), SpecError> {
    if bootstrap.trim().is_empty() {
        return Err(SpecError::new(
            format!("{field}.bootstrap"),
            "must name at least one broker (host:port)",
        ));
    }
    let ok = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        return Err(SpecError::new(
            format!("{field}.topic"),
            format!("{topic:?} is not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)"),
        ));
    }
    Ok(())
}
