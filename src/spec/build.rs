//! Turns a validated spec into a job on a [`StreamEnvironment`].

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use brook_connectors::{
    FileSink, FileSource, GeneratorEvent, GeneratorSource, LogSink, LogSource, StartingOffsets,
    StdoutSink,
};
use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy, BadRecords, DeadLetterWriter};
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{JsonValues, ValueDecoder};
use brook_core::watermark::{BadTimestamp, WatermarkStrategy};
use brook_engine::{DataStream, JobConfig, KeyedStream, SinkHandle, StreamEnvironment};
use brook_engine::{OutputTag, WindowedStream};
use brook_kafka::{KafkaSink, KafkaSource, KafkaStart, OffsetCommitter};
use brook_log::{IsolationLevel, Log};
use brook_operators::async_enrich::{AsyncEnrich, AsyncEnrichConfig, AsyncLookup, OnLookupError};
use brook_operators::batch_enrich::BatchEnrich;
use brook_operators::batch_join::{
    EncodedRow, JoinedRows, LateEncodedRows, PairsToBatch, Side, ToEncodedRows,
};
use brook_operators::batch_rows::{ToBatches, ToRows};
use brook_operators::batch_sql::BatchSql;
use brook_operators::batch_window::WindowColumns;
use brook_operators::enrich::{LookupEnrich, MissingKey, TableSource};
use brook_operators::group_key::GroupKey;
use brook_operators::row::{join_rows, row_key, Row, StoredRow};
use brook_operators::row_aggregate::{window_row, RowAggregate};
use brook_operators::row_batch::RowBatch;
use brook_operators::row_sql::RowSql;
use brook_operators::row_time::EventTimeField;
use brook_operators::typed_aggregate::{KeyedRow, RowOrigin, SourceRow, WindowValues};
use brook_operators::window::{AggregateFunction, WindowResult};
use brook_sql::decode::Format as DecodeFormat;

use super::batch_sink::{BatchBlackhole, BatchLines, BatchMessages};
use super::columnar::{
    self, batch_strategy, message_batches, timed_decoder, FileBatches, GeneratorBatches,
};
use super::http::HttpLookup;
use super::lookup::{FileTable, LogTable, ServedTable};
use super::served::{self, JobLog};
use super::{
    connect_timeout_ms, file_format, late_input, log_transaction_timeout_ms, FileFormat,
    GeneratorPattern, Isolation, JoinStep, KafkaAssignment, KafkaStartSpec, LookupErrorSpec,
    MissingSpec, ResolvedJoin, SinkSpec, SourceSpec, SpecError, StartPosition, StepOp, TableSpec,
    ValidSpec, Watermarks, WindowStep,
};

/// A job ready to start, and what to report about it.
#[derive(Debug)]
pub struct BuiltJob {
    /// The job.
    pub env: StreamEnvironment,
    /// Bad records skipped or dead-lettered by any source or step.
    pub bad_records: Arc<BadRecordCounts>,
    /// Vertex names of the sources (records read) and sinks (records written).
    pub sources: Vec<String>,
    /// See `sources`.
    pub sinks: Vec<String>,
}

/// A step's output. A keyed stream is kept as its input and key fields until a
/// consumer partitions it, so a window can check rows before the exchange.
#[derive(Clone)]
enum Stream {
    Plain(DataStream<Row>),
    /// A `key_by` step's input (`Plain` or `Batches`) and its key fields.
    Keyed(Box<Stream>, Vec<String>),
    /// Batches of rows (the batch path, issue 18 step 3) of the named source or step:
    /// a `filter`/`map`/`select` takes them as they are, anything else gets rows.
    Batches(DataStream<RowBatch>, String),
}

fn key_by(s: DataStream<Row>, fields: Vec<String>) -> KeyedStream<String, Row> {
    s.key_by(move |r: &Row| row_key(r, &fields))
}

impl Stream {
    fn plain(self) -> DataStream<Row> {
        match self {
            Stream::Plain(s) => s,
            Stream::Keyed(s, fields) => key_by(s.plain(), fields).into_stream(),
            Stream::Batches(s, name) => to_rows(s, &name),
        }
    }
}

/// The boundary of the batch path: batches into rows, chained to their producer.
fn to_rows(s: DataStream<RowBatch>, producer: &str) -> DataStream<Row> {
    s.transform_chained(&format!("{producer}-rows"), |_| ToRows)
}

/// A window step planned on typed state (issue 18 step 4,
/// [`brook_operators::batch_window`]): its input as batches (rows of a file source
/// decoded into them first, misfits to the step's `on_bad_record`), keys and values
/// taken from them, the engine's window operator on those, and its results as batches.
/// With a `late_output`, each row also keeps its whole input row, and the late ones go
/// on (as batches of the input's schema) under the step's late input name in `streams`.
fn typed_window(
    input: Stream,
    key_fields: Vec<String>,
    w: &WindowStep,
    columns: &Arc<WindowColumns>,
    (name, parallelism): (&str, Option<u32>),
    bad: BadRecords,
    streams: &mut HashMap<String, Stream>,
) -> Result<Stream, SpecError> {
    let batches = match input {
        Stream::Batches(s, _) => s,
        other => {
            let schema = Arc::clone(columns.input_schema());
            other
                .plain()
                .transform_chained(&format!("{name}-batches"), move |_| {
                    ToBatches::new(Arc::clone(&schema), bad.clone())
                })
        }
    };
    let at = (name, parallelism, key_fields.is_empty());
    // Rows keep their input rows for a late output, and for aggregates that read
    // their values from them (`WindowColumns::reads_rows`).
    let batches = match (columns.reads_rows(), w.late_output.is_some()) {
        (true, late) => {
            let ws = windowed::<SourceRow>(batches, w, columns, at);
            aggregated(ws, columns.heap_aggregate(), late, columns, name, streams)?
        }
        (false, true) => {
            let ws = windowed::<SourceRow>(batches, w, columns, at);
            aggregated(ws, columns.aggregate(), true, columns, name, streams)?
        }
        (false, false) => {
            let results = windowed::<()>(batches, w, columns, at).aggregate(columns.aggregate());
            to_batches(results, columns, name)
        }
    };
    Ok(Stream::Batches(batches, name.to_string()))
}

/// The aggregate `f` of a typed window whose rows keep their input rows; with a
/// `late` output, its late rows go on (as batches of the input's schema) under the
/// step's late input name in `streams`.
fn aggregated<A>(
    ws: WindowedStream<GroupKey, KeyedRow<SourceRow>>,
    f: A,
    late: bool,
    columns: &Arc<WindowColumns>,
    name: &str,
    streams: &mut HashMap<String, Stream>,
) -> Result<DataStream<RowBatch>, SpecError>
where
    A: AggregateFunction<KeyedRow<SourceRow>>,
    A::Out: WindowValues,
{
    if !late {
        return Ok(to_batches(ws.aggregate(f), columns, name));
    }
    let tag = OutputTag::<KeyedRow<SourceRow>>::new(late_input(name));
    let results = ws.side_output_late_data(&tag).aggregate(f);
    let late = results
        .get_side_output(&tag)
        .map_err(|e| SpecError::new(name, e.to_string()))?;
    let c = Arc::clone(columns);
    let late = late.transform_chained(&format!("{name}-late-rows"), move |_| c.late_rows());
    streams.insert(
        late_input(name),
        Stream::Batches(late, format!("{name}-late")),
    );
    Ok(to_batches(results, columns, name))
}

/// A typed window's results as batches of its output schema (chained).
fn to_batches<O: WindowValues>(
    results: DataStream<WindowResult<GroupKey, O>>,
    columns: &Arc<WindowColumns>,
    name: &str,
) -> DataStream<RowBatch> {
    let c = Arc::clone(columns);
    results.transform_chained(&format!("{name}-batches-out"), move |_| {
        c.results_to_batch::<O>()
    })
}

/// The typed window of `batches` before its aggregate: keyed rows keeping `R` of their
/// input rows, the step's assigner, lateness, trigger and parallelism (`at`: its name,
/// parallelism, and whether it has no key fields).
fn windowed<R: RowOrigin>(
    batches: DataStream<RowBatch>,
    w: &WindowStep,
    columns: &Arc<WindowColumns>,
    (name, parallelism, keyless): (&str, Option<u32>, bool),
) -> WindowedStream<GroupKey, KeyedRow<R>> {
    let c = Arc::clone(columns);
    // Without key fields every row has the same key (Flink's windowAll).
    let keyed = batches
        .transform_chained(&format!("{name}-keys"), move |_| c.to_keyed_rows::<R>())
        .key_by(|r: &KeyedRow<R>| r.key.clone());
    let mut ws = keyed
        .window(w.assigner)
        .allowed_lateness(w.allowed_lateness_ms)
        .name(name);
    if let Some(t) = w.trigger {
        ws = ws.trigger(t);
    }
    match parallelism {
        Some(p) => ws.set_parallelism(p),
        // The one key's subtask does all the work: no others.
        None if keyless => ws.set_parallelism(1),
        None => ws,
    }
}

/// The watermark strategy of a source of rows.
/// Whether both inputs of a join come as batches.
fn both_batches(streams: &HashMap<String, Stream>, j: &JoinStep) -> bool {
    [&j.left, &j.right]
        .iter()
        .all(|n| matches!(streams.get(*n), Some(Stream::Batches(..))))
}

/// A join step on batches (`brook_operators::batch_join`): each input's rows encoded
/// with their keys, the engine's join keyed by [`GroupKey`], the results gathered back
/// into batches of the join's schema; late rows of both inputs, as JSON rows, to the
/// step's late output.
fn batch_join(
    name: &str,
    parallelism: Option<u32>,
    j: &JoinStep,
    streams: &mut HashMap<String, Stream>,
) -> Result<Stream, SpecError> {
    let Some(plan) = j.planned.clone() else {
        return Err(SpecError::new(name, "not planned on batches"));
    };
    let side = |input: &str, which: Side| -> Result<KeyedStream<GroupKey, EncodedRow>, SpecError> {
        let Some(Stream::Batches(s, _)) = streams.get(input) else {
            return Err(SpecError::new(
                name,
                format!("input {input} is not batches"),
            ));
        };
        let plan = Arc::clone(&plan);
        Ok(s.clone()
            .transform_chained(&format!("{name}-{input}"), move |_| {
                ToEncodedRows::new(Arc::clone(&plan), which)
            })
            .key_by(|r: &EncodedRow| r.key.clone()))
    };
    let (left, right) = (side(&j.left, Side::Left)?, side(&j.right, Side::Right)?);
    let joined = match j.kind {
        ResolvedJoin::Interval { lower, upper } => left
            .interval_join(right, lower, upper)
            .map_err(|e| SpecError::new(name, e.to_string()))?,
        ResolvedJoin::Window(w) => left
            .window_join(right, w)
            .map_err(|e| SpecError::new(name, e.to_string()))?,
        ResolvedJoin::Temporal => left.temporal_join(right),
    };
    let joined = if j.left_outer {
        joined.left_outer()
    } else {
        joined
    };
    let joined = match parallelism {
        Some(p) => joined.set_parallelism(p),
        None => joined,
    };
    let tags = (
        OutputTag::<EncodedRow>::new(format!("{name}-late-left")),
        OutputTag::<EncodedRow>::new(format!("{name}-late-right")),
    );
    let joined = match &j.late_output {
        Some(_) => joined
            .side_output_late_left(&tags.0)
            .side_output_late_right(&tags.1),
        None => joined,
    };
    let pairs = joined.name(name).apply(JoinedRows::of);
    if j.late_output.is_some() {
        let late = |tag: &OutputTag<EncodedRow>, which: Side| {
            let plan = Arc::clone(&plan);
            pairs
                .get_side_output(tag)
                .map(|s| {
                    s.transform_chained(&format!("{}-rows", tag.id()), move |_| {
                        LateEncodedRows::new(Arc::clone(&plan), which)
                    })
                })
                .map_err(|e| SpecError::new(name, e.to_string()))
        };
        let rows = late(&tags.0, Side::Left)?.union(late(&tags.1, Side::Right)?);
        streams.insert(late_input(name), Stream::Plain(rows));
    }
    let batches = pairs.transform_chained(&format!("{name}-batches"), move |_| {
        PairsToBatch::new(Arc::clone(&plan))
    });
    Ok(Stream::Batches(batches, name.to_string()))
}

fn row_strategy(
    ts: Option<EventTimeField>,
    wm: &Watermarks,
    bad: BadRecords,
) -> WatermarkStrategy<Row> {
    let mut s = WatermarkStrategy::<Row>::for_bounded_out_of_orderness(wm.out_of_orderness_ms)
        .with_emit_interval(wm.interval_ms)
        .on_bad_record(bad);
    if let Some(t) = wm.idle_timeout_ms {
        s = s.with_idleness(t);
    }
    if let Some(ts) = ts {
        s = s.with_fallible_timestamp_assigner(move |row: &Row, _| {
            ts.extract(row).map_err(|reason| BadTimestamp {
                raw: row.to_string(),
                reason,
            })
        });
    }
    s
}

/// Rows a window step cannot aggregate go to the step's bad-record policy before the
/// key exchange.
struct CheckRows {
    agg: RowAggregate,
    bad: BadRecords,
    step: String,
}

impl Operator for CheckRows {
    type In = Row;
    type Out = Row;

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        _ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        for r in batch {
            match self.agg.check(&r.value) {
                Ok(()) => out.push(r),
                Err(reason) => self.bad.handle(&r.value.to_string(), &self.step, &reason)?,
            }
        }
        Ok(())
    }
}

/// The `blackhole` sink: drops every row (the engine counts them as written).
#[derive(Debug, Clone, Copy)]
struct Blackhole;

impl Sink for Blackhole {
    type In = Row;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = Row>>> {
        Ok(Box::new(Blackhole))
    }
}

impl SinkWriter for Blackhole {
    type In = Row;

    fn write_batch(&mut self, batch: Batch<Row>) -> OpResult {
        drop(batch);
        Ok(())
    }
}

/// Builds the job. `log` is needed when a source or sink uses the embedded log.
///
/// # Errors
/// [`SpecError`] for what can only be checked now: an unknown topic, a dead-letter
/// file that cannot be opened, the log missing.
pub fn build(v: &ValidSpec, config: JobConfig, log: Option<&Log>) -> Result<BuiltJob, SpecError> {
    build_with(v, config, log.map(JobLog::Local), None)
}

/// Builds the job with its `log` sources and sinks on `log`: in this process, or
/// through the broker that serves the data directory ([`JobLog::Served`]; the
/// `brook-kafka` connectors over the Kafka protocol, with the same guarantees).
///
/// # Errors
/// As [`build`]. Through a broker an unknown topic fails when the job starts.
pub fn build_on(
    v: &ValidSpec,
    config: JobConfig,
    log: Option<JobLog<'_>>,
) -> Result<BuiltJob, SpecError> {
    build_with(v, config, log, None)
}

/// One partition of a job whose Kafka source has `assignment: group`: the job for
/// partition `partition` alone, committing the group's offsets through `committer`
/// (the process's group member). Its Kafka sinks' transactional ids are
/// `<job>.p<partition>.<sink>.<subtask>`, the same in whichever process runs the
/// partition, so a new owner fences the old one.
///
/// # Errors
/// As [`build`].
pub fn build_partition(
    v: &ValidSpec,
    config: JobConfig,
    partition: i32,
    committer: Arc<dyn OffsetCommitter>,
) -> Result<BuiltJob, SpecError> {
    build_with(v, config, None, Some((partition, committer)))
}

fn build_with(
    v: &ValidSpec,
    mut config: JobConfig,
    log: Option<JobLog<'_>>,
    group_part: Option<(i32, Arc<dyn OffsetCommitter>)>,
) -> Result<BuiltJob, SpecError> {
    let spec = &v.spec;
    if let Some(p) = spec.parallelism {
        config.parallelism = p;
    }
    if let Some(m) = spec.max_parallelism {
        config.max_parallelism = m;
    }
    let env = StreamEnvironment::new(config);
    let counts = Arc::new(BadRecordCounts::default());
    let dead_letter: Option<DeadLetterWriter> = match &spec.dead_letter {
        Some(path) => {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    SpecError::new(
                        "dead_letter",
                        format!("cannot open {}: {e}", path.display()),
                    )
                })?;
            let w: Box<dyn Write + Send> = Box::new(f);
            Some(Arc::new(Mutex::new(w)))
        }
        None => None,
    };
    let bad = |p: Option<BadRecordPolicy>| {
        BadRecords::new(
            p.unwrap_or(v.default_policy),
            Arc::clone(&counts),
            dead_letter.clone(),
        )
    };
    let need_log =
        |field: String| log.ok_or_else(|| SpecError::new(field, "the embedded log is not open"));
    let mut streams: HashMap<String, Stream> = HashMap::new();

    for (i, s) in spec.sources.iter().enumerate() {
        let field = format!("sources[{i}] ({})", s.name());
        let time = v.source_time.get(i).cloned().flatten();
        let stream: DataStream<Row> = match s {
            SourceSpec::File {
                name,
                path,
                format,
                follow,
                on_bad_record,
                parallelism,
                ..
            } => {
                let fmt = format
                    .or_else(|| file_format(path))
                    .unwrap_or(FileFormat::Jsonl);
                if let Some(schema) = v.source_batches.get(i).cloned().flatten() {
                    let format = match fmt {
                        FileFormat::Jsonl => DecodeFormat::Json,
                        FileFormat::Csv => DecodeFormat::Csv,
                    };
                    let decoder = timed_decoder(schema, format, &time, &field)?;
                    let make = move || FileBatches::new(decoder.clone());
                    let src = match fmt {
                        FileFormat::Jsonl => FileSource::jsonl_with(path.clone(), make),
                        FileFormat::Csv => FileSource::csv_with(path.clone(), make),
                    };
                    let src = src.follow(*follow).on_bad_record(bad(*on_bad_record));
                    let strategy = batch_strategy(&time);
                    let batches =
                        with_parallelism(env.from_source(src, strategy), *parallelism).name(name);
                    streams.insert(name.clone(), Stream::Batches(batches, name.clone()));
                    continue;
                }
                let src = match fmt {
                    FileFormat::Jsonl => FileSource::jsonl::<Row>(path.clone()),
                    FileFormat::Csv => FileSource::csv::<Row>(path.clone()),
                };
                let src = src.follow(*follow).on_bad_record(bad(*on_bad_record));
                let strategy = match time {
                    Some((ts, wm)) => row_strategy(ts, &wm, bad(*on_bad_record)),
                    None => WatermarkStrategy::no_watermarks(),
                };
                with_parallelism(env.from_source(src, strategy), *parallelism).name(name)
            }
            SourceSpec::Log {
                name,
                topic,
                start,
                bounded,
                isolation,
                on_bad_record,
                parallelism,
                ..
            } => {
                let read = LogRead {
                    topic,
                    start: start.unwrap_or(StartPosition::Earliest),
                    isolation: isolation.unwrap_or(Isolation::ReadCommitted),
                    bounded: bounded.unwrap_or(true),
                    bad: bad(*on_bad_record),
                };
                let log = need_log(field.clone())?;
                if let JobLog::Local(log) = log {
                    log.topic(topic)
                        .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                }
                if let Some(schema) = v.source_batches.get(i).cloned().flatten() {
                    let make = message_batches(schema, &time, &field)?;
                    let batches = read.stream(&env, log, make, batch_strategy(&time));
                    let batches = with_parallelism(batches, *parallelism).name(name);
                    streams.insert(name.clone(), Stream::Batches(batches, name.clone()));
                    continue;
                }
                let strategy = match time {
                    Some((ts, wm)) => row_strategy(ts, &wm, bad(*on_bad_record)),
                    None => WatermarkStrategy::no_watermarks(),
                };
                let stream = read.stream(&env, log, JsonValues::<Row>::default, strategy);
                with_parallelism(stream, *parallelism).name(name)
            }
            SourceSpec::Kafka {
                name,
                bootstrap,
                topic,
                on_bad_record,
                parallelism,
                ..
            } => {
                let settings = KafkaSettings::of(s, &field, group_part.as_ref())?;
                if let Some(schema) = v.source_batches.get(i).cloned().flatten() {
                    let make = message_batches(schema, &time, &field)?;
                    let src = KafkaSource::with_decoder(bootstrap.clone(), topic.clone(), make);
                    let (src, parallelism) = settings.apply(src, *parallelism);
                    let src = src.on_bad_record(bad(*on_bad_record));
                    let batches = env.from_source(src, batch_strategy(&time));
                    let batches = with_parallelism(batches, parallelism).name(name);
                    streams.insert(name.clone(), Stream::Batches(batches, name.clone()));
                    continue;
                }
                let src = KafkaSource::json::<Row>(bootstrap.clone(), topic.clone());
                let (src, parallelism) = settings.apply(src, *parallelism);
                let src = src.on_bad_record(bad(*on_bad_record));
                let strategy = match time {
                    Some((ts, wm)) => row_strategy(ts, &wm, bad(*on_bad_record)),
                    None => WatermarkStrategy::no_watermarks(),
                };
                with_parallelism(env.from_source(src, strategy), parallelism).name(name)
            }
            SourceSpec::Generator {
                name,
                count,
                keys,
                start_ms,
                step_ms,
                rate,
                pattern,
                parallelism,
                ..
            } => {
                let mut b = GeneratorSource::builder()
                    .events(*count)
                    .keys(keys.unwrap_or(10_000))
                    .start_ms(start_ms.unwrap_or(0))
                    .step_ms(step_ms.unwrap_or(1))
                    .bursts(*pattern == Some(GeneratorPattern::Bursts));
                if let Some(r) = rate {
                    b = b.rate(*r);
                }
                let src = b
                    .build()
                    .map_err(|e| SpecError::new(field.clone(), e.to_string()))?;
                // Generated events carry their `ts` as event time.
                let strategy = match time {
                    Some((ts, wm)) => {
                        if let Some(ts) = ts.filter(|t| t.field != "ts") {
                            return Err(SpecError::new(
                                format!("{field}.event_time"),
                                format!(
                                    "generated events have their time in \"ts\", not {:?}",
                                    ts.field
                                ),
                            ));
                        }
                        let mut st =
                            WatermarkStrategy::<GeneratorEvent>::for_bounded_out_of_orderness(
                                wm.out_of_orderness_ms,
                            )
                            .with_emit_interval(wm.interval_ms)
                            .with_timestamp_assigner(|e: &GeneratorEvent, _| e.ts);
                        if let Some(t) = wm.idle_timeout_ms {
                            st = st.with_idleness(t);
                        }
                        st
                    }
                    None => WatermarkStrategy::no_watermarks(),
                };
                let events =
                    with_parallelism(env.from_source(src, strategy), *parallelism).name(name);
                let schema = columnar::generator_schema()
                    .map_err(|e| SpecError::new(field.clone(), e.to_string()))?;
                let batches = events.transform_chained(&format!("{name}-batches"), move |_| {
                    GeneratorBatches {
                        schema: Arc::clone(&schema),
                    }
                });
                streams.insert(name.clone(), Stream::Batches(batches, name.clone()));
                continue;
            }
        };
        streams.insert(s.name().to_string(), Stream::Plain(stream));
    }

    for step in &v.steps {
        let mut inputs = step.inputs.iter().map(|n| {
            streams
                .get(n)
                .cloned()
                .ok_or_else(|| SpecError::new(&step.name, format!("unknown input {n}")))
        });
        let first = inputs
            .next()
            .ok_or_else(|| SpecError::new(&step.name, "no input"))??;
        // A join reads its two inputs itself: merging them here would add a union of
        // both as rows that nothing reads but that still runs (each row of both inputs
        // turned into JSON for nothing: 5-10 % of a join job's time on batches).
        let input = if step.inputs.len() == 1 || matches!(step.op, StepOp::Join(_)) {
            first
        } else {
            let mut merged = first.plain();
            for s in inputs {
                merged = merged.union(s?.plain());
            }
            Stream::Plain(merged)
        };
        let handler = bad(Some(step.policy));
        let out = match &step.op {
            // On batches where they come as batches and the step was planned (their
            // schema is known at plan time); on rows otherwise.
            StepOp::Sql(sql, planned) => match (input, planned) {
                (Stream::Batches(s, _), Some(planned)) => {
                    let planned = Arc::clone(planned);
                    let batches = s.transform(&step.name, move |_| {
                        BatchSql::new(Arc::clone(&planned), handler.clone())
                    });
                    Stream::Batches(batches, step.name.clone())
                }
                (input, planned) => {
                    let (sql, planned) = (sql.clone(), planned.clone());
                    Stream::Plain(transform(input, &step.name, move || {
                        RowSql::new(sql.clone(), planned.clone(), handler.clone())
                    }))
                }
            },
            StepOp::Join(j) if j.planned.is_some() && both_batches(&streams, j) => {
                batch_join(&step.name, step.parallelism, j, &mut streams)?
            }
            StepOp::Join(j) => {
                let side = |name: &str| -> Result<KeyedStream<String, StoredRow>, SpecError> {
                    let s = streams
                        .get(name)
                        .cloned()
                        .ok_or_else(|| SpecError::new(&step.name, format!("unknown input {name}")))?
                        .plain();
                    let on = j.on.clone();
                    Ok(s.map(StoredRow)
                        .name(&format!("{}-{name}", step.name))
                        .key_by(move |r: &StoredRow| row_key(&r.0, &on)))
                };
                let (left, right) = (side(&j.left)?, side(&j.right)?);
                let joined = match j.kind {
                    ResolvedJoin::Interval { lower, upper } => left
                        .interval_join(right, lower, upper)
                        .map_err(|e| SpecError::new(&step.name, e.to_string()))?,
                    ResolvedJoin::Window(w) => left
                        .window_join(right, w)
                        .map_err(|e| SpecError::new(&step.name, e.to_string()))?,
                    ResolvedJoin::Temporal => left.temporal_join(right),
                };
                let joined = if j.left_outer {
                    joined.left_outer()
                } else {
                    joined
                };
                let joined = match step.parallelism {
                    Some(p) => joined.set_parallelism(p),
                    None => joined,
                };
                // Late rows of both inputs, unchanged, to the step's late output.
                let tags = (
                    OutputTag::<StoredRow>::new(format!("{}-late-left", step.name)),
                    OutputTag::<StoredRow>::new(format!("{}-late-right", step.name)),
                );
                let joined = match &j.late_output {
                    Some(_) => joined
                        .side_output_late_left(&tags.0)
                        .side_output_late_right(&tags.1),
                    None => joined,
                };
                let (on, prefix) = (j.on.clone(), j.right_prefix.clone());
                let joined = joined.name(&step.name);
                let rows = joined.apply(move |l: &StoredRow, r: Option<&StoredRow>| {
                    join_rows(&l.0, r.map(|r| &r.0), &on, &prefix)
                });
                if j.late_output.is_some() {
                    let side = |tag| {
                        rows.get_side_output(tag)
                            .map_err(|e| SpecError::new(&step.name, e.to_string()))
                    };
                    let late = side(&tags.0)?
                        .union(side(&tags.1)?)
                        .map(|r: StoredRow| r.0)
                        .name(&format!("{}-late-rows", step.name));
                    streams.insert(late_input(&step.name), Stream::Plain(late));
                }
                Stream::Plain(rows)
            }
            StepOp::Enrich(e) => {
                let table: Box<dyn Fn() -> Box<dyn TableSource> + Send + Sync> = match &e.table {
                    TableSpec::File { path, .. } => {
                        let t = FileTable {
                            path: path.clone(),
                            format: e.format,
                        };
                        Box::new(move || Box::new(t.clone()))
                    }
                    TableSpec::Log { topic, .. } => {
                        let field = format!("{}.enrich.table", step.name);
                        match need_log(field.clone())? {
                            JobLog::Local(log) => {
                                let t = log.topic(topic).map_err(|err| {
                                    SpecError::new(format!("{field}.topic"), err.to_string())
                                })?;
                                let t = LogTable {
                                    topic: topic.clone(),
                                    partitions: t.partitions(),
                                    next: Vec::new(),
                                };
                                Box::new(move || Box::new(t.clone()))
                            }
                            // Each subtask reads the whole topic with a reader of its own,
                            // as each reads the whole log in this process.
                            JobLog::Served(addr) => {
                                let t = served::log_table(addr, topic);
                                let topic = topic.clone();
                                Box::new(move || Box::new(ServedTable::new(t.clone(), &topic)))
                            }
                        }
                    }
                };
                let e = e.clone();
                let name = step.name.clone();
                let missing_spec = e.missing;
                let missing = move |handler: &BadRecords| match missing_spec {
                    MissingSpec::Nulls => MissingKey::Nulls,
                    MissingSpec::Drop => MissingKey::Drop,
                    MissingSpec::BadRecord => MissingKey::Reject(handler.clone()),
                };
                if let (Stream::Batches(s, _), Some(plan)) = (&input, &e.planned) {
                    let (plan, s) = (Arc::clone(plan), s.clone());
                    let batches = s.transform(&step.name, move |_| {
                        BatchEnrich::new(
                            &name,
                            Arc::clone(&plan),
                            table(),
                            missing(&handler),
                            handler.clone(),
                        )
                    });
                    Stream::Batches(batches, step.name.clone())
                } else {
                    Stream::Plain(transform(input, &step.name, move || {
                        let missing = match e.missing {
                            MissingSpec::Nulls => MissingKey::Nulls,
                            MissingSpec::Drop => MissingKey::Drop,
                            MissingSpec::BadRecord => MissingKey::Reject(handler.clone()),
                        };
                        LookupEnrich::new(
                            &name,
                            table(),
                            e.on.clone(),
                            e.table_key.clone(),
                            e.fields.clone(),
                            missing,
                        )
                    }))
                }
            }
            StepOp::AsyncEnrich(a) => {
                let lookup: Arc<dyn AsyncLookup> = Arc::new(HttpLookup {
                    url: a.url.clone(),
                    client: reqwest::Client::new(),
                });
                let a = a.clone();
                let name = step.name.clone();
                let output = a.output.clone();
                let bad = handler.clone();
                let rows = transform(input, &step.name, move || {
                    let on_error = match a.on_error {
                        LookupErrorSpec::Fail => OnLookupError::Fail,
                        LookupErrorSpec::Pass => OnLookupError::Pass,
                        LookupErrorSpec::Drop => OnLookupError::Drop,
                        LookupErrorSpec::BadRecord => OnLookupError::Reject(handler.clone()),
                    };
                    AsyncEnrich::new(
                        &name,
                        Arc::clone(&lookup),
                        AsyncEnrichConfig {
                            capacity: a.capacity,
                            ordered: a.ordered,
                            timeout_ms: a.timeout_ms,
                            cache_ttl_ms: a.cache_ttl_ms,
                            on_error,
                        },
                    )
                });
                // With the answer's schema declared, the rows leave as batches of the
                // step's output schema (an answer that does not fit it goes to the
                // step's `on_bad_record`, naming the field).
                match output {
                    Some(schema) => {
                        let batches = rows
                            .transform_chained(&format!("{}-batches", step.name), move |_| {
                                ToBatches::new(Arc::clone(&schema), bad.clone())
                            });
                        Stream::Batches(batches, step.name.clone())
                    }
                    None => Stream::Plain(rows),
                }
            }
            StepOp::KeyBy(fields) => {
                // Batches stay batches until a consumer partitions them.
                let inner = match input {
                    b @ Stream::Batches(..) => b,
                    other => Stream::Plain(other.plain()),
                };
                Stream::Keyed(Box::new(inner), fields.clone())
            }
            StepOp::Union => input,
            StepOp::Window(w) => {
                // Without key_by: one window for all rows (Flink's windowAll).
                let (input, key_fields) = match input {
                    Stream::Keyed(s, f) => (*s, f),
                    other => (other, Vec::new()),
                };
                if let Some(columns) = &w.columns {
                    typed_window(
                        input,
                        key_fields,
                        w,
                        columns,
                        (&step.name, step.parallelism),
                        handler,
                        &mut streams,
                    )?
                } else {
                    let rows = input.plain();
                    let agg = RowAggregate::new(key_fields.clone(), w.aggregates.clone())
                        .map_err(|e| SpecError::new(format!("{}.aggregate", step.name), e))?;
                    let check = {
                        let (agg, step_name) = (agg.clone(), step.name.clone());
                        rows.transform_chained(&format!("{}-check", step.name), move |_| {
                            CheckRows {
                                agg: agg.clone(),
                                bad: handler.clone(),
                                step: step_name.clone(),
                            }
                        })
                    };
                    let mut ws = key_by(check, key_fields.clone())
                        .window(w.assigner)
                        .allowed_lateness(w.allowed_lateness_ms)
                        .name(&step.name);
                    if let Some(t) = w.trigger {
                        ws = ws.trigger(t);
                    }
                    if let Some(p) = step.parallelism {
                        ws = ws.set_parallelism(p);
                    }
                    let tag = OutputTag::<Row>::new(late_input(&step.name));
                    if w.late_output.is_some() {
                        ws = ws.side_output_late_data(&tag);
                    }
                    let results = ws.aggregate(agg);
                    if w.late_output.is_some() {
                        let late = results
                            .get_side_output(&tag)
                            .map_err(|e| SpecError::new(&step.name, e.to_string()))?;
                        streams.insert(late_input(&step.name), Stream::Plain(late));
                    }
                    let rows = results.map(move |r: WindowResult<String, Row>| {
                        window_row(r.value, &key_fields, r.window.start, r.window.end)
                    });
                    Stream::Plain(match step.parallelism {
                        Some(p) => rows.set_parallelism(p),
                        None => rows,
                    })
                }
            }
        };
        let out = match (out, step.parallelism) {
            (Stream::Plain(s), Some(p)) => Stream::Plain(s.set_parallelism(p)),
            (Stream::Batches(s, name), Some(p)) => Stream::Batches(s.set_parallelism(p), name),
            (s, _) => s,
        };
        streams.insert(step.name.clone(), out);
    }

    let mut sinks = Vec::new();
    for (i, (s, input)) in spec.sinks.iter().zip(&v.sink_inputs).enumerate() {
        let field = format!("sinks[{i}] ({})", s.name());
        let input = streams.get(input).cloned().ok_or_else(|| {
            SpecError::new(format!("{field}.input"), format!("unknown input {input}"))
        })?;
        let job = SinkJob {
            field: &field,
            name: &spec.name,
            group_part: group_part.as_ref(),
            log: &need_log,
        };
        let handle = match (s, input) {
            // Batches as they are, encoded by brook-sql where they are written.
            (
                SinkSpec::File { .. } | SinkSpec::Log { .. } | SinkSpec::Kafka { .. },
                Stream::Batches(b, _),
            ) => topic_or_file_sink::<RowBatch>(s, b, &job)?,
            (SinkSpec::Blackhole { parallelism, .. }, Stream::Batches(b, _)) => {
                sink_parallelism(b.sink(BatchBlackhole), *parallelism)
            }
            // One writer, so printed lines never interleave.
            (SinkSpec::Stdout { .. }, Stream::Batches(b, _)) => sink_parallelism(
                b.sink(StdoutSink::with_encoder(BatchLines::default)),
                Some(1),
            ),
            (SinkSpec::Stdout { .. }, input) => {
                sink_parallelism(input.plain().sink(StdoutSink::<Row>::new()), Some(1))
            }
            (SinkSpec::Blackhole { parallelism, .. }, input) => {
                sink_parallelism(input.plain().sink(Blackhole), *parallelism)
            }
            (_, input) => topic_or_file_sink::<Row>(s, input.plain(), &job)?,
        };
        handle.name(s.name());
        sinks.push(s.name().to_string());
    }
    let sources = spec.sources.iter().map(|s| s.name().to_string()).collect();
    Ok(BuiltJob {
        env,
        bad_records: counts,
        sources,
        sinks,
    })
}

/// What a sink needs of the job around it.
struct SinkJob<'a, 'l> {
    /// `sinks[i] (name)`, for errors.
    field: &'a str,
    /// The job's name (transactional ids start with it).
    name: &'a str,
    group_part: Option<&'a (i32, Arc<dyn OffsetCommitter>)>,
    log: &'a dyn Fn(String) -> Result<JobLog<'l>, SpecError>,
}

fn sink_parallelism(handle: SinkHandle, parallelism: Option<u32>) -> SinkHandle {
    match parallelism {
        Some(p) => handle.set_parallelism(p),
        None => handle,
    }
}

/// How a sink's records of type `Self` are written: JSON rows with serde ([`Row`]),
/// or batches with brook-sql's encoders ([`RowBatch`], `batch_sink`), the same text.
trait SinkRecords: Sized + Clone + Send + 'static {
    fn file(path: &Path, format: FileFormat) -> FileSink<Self>;
    fn log(log: &Log, topic: &str, key_field: Option<&str>) -> LogSink<Self>;
    fn kafka(bootstrap: &str, topic: &str, key_field: Option<&str>) -> KafkaSink<Self>;
}

/// A row's `key_field` as a message key: a string as it is, another value its JSON
/// text, no such field the empty key.
fn row_key_text(r: &Row, k: &str) -> String {
    match r.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

impl SinkRecords for Row {
    fn file(path: &Path, format: FileFormat) -> FileSink<Row> {
        match format {
            FileFormat::Jsonl => FileSink::<Row>::jsonl(path),
            FileFormat::Csv => FileSink::<Row>::csv(path),
        }
    }

    fn log(log: &Log, topic: &str, key_field: Option<&str>) -> LogSink<Row> {
        let sink = LogSink::<Row>::json(log, topic);
        match key_field.map(str::to_string) {
            Some(k) => sink.key_by(move |r: &Row| row_key_text(r, &k)),
            None => sink,
        }
    }

    fn kafka(bootstrap: &str, topic: &str, key_field: Option<&str>) -> KafkaSink<Row> {
        let sink = KafkaSink::<Row>::json(bootstrap, topic);
        match key_field.map(str::to_string) {
            Some(k) => sink.key_by(move |r: &Row| row_key_text(r, &k)),
            None => sink,
        }
    }
}

impl SinkRecords for RowBatch {
    fn file(path: &Path, format: FileFormat) -> FileSink<RowBatch> {
        match format {
            FileFormat::Jsonl => FileSink::jsonl_with(path, BatchLines::default),
            FileFormat::Csv => FileSink::csv_with(path, BatchLines::default),
        }
    }

    fn log(log: &Log, topic: &str, key_field: Option<&str>) -> LogSink<RowBatch> {
        let encoder = BatchMessages::new(key_field);
        LogSink::with_encoder(log, topic, move || encoder.clone())
    }

    fn kafka(bootstrap: &str, topic: &str, key_field: Option<&str>) -> KafkaSink<RowBatch> {
        let encoder = BatchMessages::new(key_field);
        KafkaSink::with_encoder(bootstrap, topic, move || encoder.clone())
    }
}

/// A `file`, `log` or `kafka` sink of `stream`.
fn topic_or_file_sink<T: SinkRecords>(
    s: &SinkSpec,
    stream: DataStream<T>,
    job: &SinkJob<'_, '_>,
) -> Result<SinkHandle, SpecError> {
    let field = job.field;
    let (handle, parallelism) = match s {
        SinkSpec::File {
            path,
            format,
            parallelism,
            ..
        } => {
            let format = format
                .or_else(|| file_format(path))
                .unwrap_or(FileFormat::Jsonl);
            (stream.sink(T::file(path, format)), *parallelism)
        }
        SinkSpec::Log {
            topic,
            key_field,
            transaction_timeout,
            parallelism,
            ..
        } => {
            let timeout_ms = log_transaction_timeout_ms(
                transaction_timeout,
                &format!("{field}.transaction_timeout"),
            )?;
            let handle = match (job.log)(field.to_string())? {
                JobLog::Served(addr) => {
                    let sink = T::kafka(&addr.to_string(), topic, key_field.as_deref());
                    stream.sink(served::log_sink(sink, job.name))
                }
                JobLog::Local(log) => {
                    log.topic(topic)
                        .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                    // Transactional ids (with checkpoints): `<job>.<sink>.<subtask>`.
                    let sink = T::log(log, topic, key_field.as_deref())
                        .transactional_id_prefix(job.name)
                        .transaction_timeout_ms(timeout_ms);
                    stream.sink(sink)
                }
            };
            (handle, *parallelism)
        }
        SinkSpec::Kafka {
            bootstrap,
            topic,
            key_field,
            properties,
            parallelism,
            connect_timeout,
            ..
        } => {
            // Transactional ids (with checkpoints): `<job>.<sink>.<subtask>`.
            // In group mode: `<job>.p<partition>.<sink>.<subtask>`.
            let prefix = match job.group_part {
                Some((p, _)) => format!("{}.p{p}", job.name),
                None => job.name.to_string(),
            };
            let mut sink = T::kafka(bootstrap, topic, key_field.as_deref())
                .transactional_id_prefix(prefix)
                .connect_timeout(connect_timeout_ms(
                    connect_timeout,
                    &format!("{}.connect_timeout", s.name()),
                )?);
            for (k, v) in properties {
                sink = sink.property(k.clone(), v.clone());
            }
            (stream.sink(sink), *parallelism)
        }
        SinkSpec::Stdout { .. } | SinkSpec::Blackhole { .. } => {
            return Err(SpecError::new(field, "not a file, log or kafka sink"))
        }
    };
    Ok(sink_parallelism(handle, parallelism))
}

/// What a `log` source reads, for a source of any record type.
struct LogRead<'a> {
    topic: &'a str,
    start: StartPosition,
    isolation: Isolation,
    bounded: bool,
    bad: BadRecords,
}

impl LogRead<'_> {
    /// The source's stream: through the broker that serves the log or in this process,
    /// each value decoded by a decoder `make` makes.
    fn stream<D, F>(
        &self,
        env: &StreamEnvironment,
        log: JobLog<'_>,
        make: F,
        strategy: WatermarkStrategy<D::Out>,
    ) -> DataStream<D::Out>
    where
        D: ValueDecoder + 'static,
        D::Out: Clone + Send + 'static,
        F: Fn() -> D + Send + Sync + 'static,
    {
        match log {
            JobLog::Served(addr) => {
                let src = served::log_source(
                    addr,
                    self.topic,
                    self.start,
                    self.bounded,
                    self.isolation,
                    make,
                );
                env.from_source(src.on_bad_record(self.bad.clone()), strategy)
            }
            JobLog::Local(log) => {
                let src = LogSource::with_decoder(log, self.topic, make)
                    .starting_offsets(match self.start {
                        StartPosition::Earliest => StartingOffsets::Earliest,
                        StartPosition::Latest => StartingOffsets::Latest,
                    })
                    .isolation(match self.isolation {
                        Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
                        Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
                    })
                    .bounded(self.bounded)
                    .on_bad_record(self.bad.clone());
                env.from_source(src, strategy)
            }
        }
    }
}

/// A `kafka` source's settings, for a [`KafkaSource`] of any record type.
struct KafkaSettings {
    start: KafkaStart,
    connect_timeout_ms: u64,
    bounded: bool,
    group: Option<String>,
    properties: Vec<(String, String)>,
    /// Group assignment (`brook run`, one job per partition): the partition and the
    /// group member that commits its offsets.
    partition: Option<(i32, Arc<dyn OffsetCommitter>)>,
}

impl KafkaSettings {
    /// The settings of `s`, a `kafka` source at `field`.
    fn of(
        s: &SourceSpec,
        field: &str,
        group_part: Option<&(i32, Arc<dyn OffsetCommitter>)>,
    ) -> Result<Self, SpecError> {
        let SourceSpec::Kafka {
            group,
            assignment,
            start,
            start_timestamp_ms,
            bounded,
            properties,
            connect_timeout,
            ..
        } = s
        else {
            return Err(SpecError::new(field, "not a kafka source"));
        };
        let start = match start.unwrap_or(KafkaStartSpec::Earliest) {
            KafkaStartSpec::Earliest => KafkaStart::Earliest,
            KafkaStartSpec::Latest => KafkaStart::Latest,
            KafkaStartSpec::Committed => KafkaStart::Committed,
            KafkaStartSpec::Timestamp => KafkaStart::Timestamp(start_timestamp_ms.unwrap_or(0)),
        };
        let partition = if *assignment == Some(KafkaAssignment::Group) {
            let Some((p, committer)) = group_part else {
                return Err(SpecError::new(
                    format!("{field}.assignment"),
                    "a group-assigned source runs with `brook run`, one job per partition",
                ));
            };
            Some((*p, Arc::clone(committer)))
        } else {
            None
        };
        Ok(KafkaSettings {
            start,
            connect_timeout_ms: connect_timeout_ms(
                connect_timeout,
                &format!("{field}.connect_timeout"),
            )?,
            bounded: bounded.unwrap_or(false),
            group: group.clone(),
            properties: properties
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            partition,
        })
    }

    /// `src` with these settings, and the source's parallelism (1 for a group-assigned
    /// partition, else `parallelism`).
    fn apply<T: Send + 'static>(
        &self,
        src: KafkaSource<T>,
        parallelism: Option<u32>,
    ) -> (KafkaSource<T>, Option<u32>) {
        let mut src = src
            .connect_timeout(self.connect_timeout_ms)
            .start(self.start)
            .bounded(self.bounded);
        if let Some(g) = &self.group {
            src = src.group(g.clone());
        }
        for (k, v) in &self.properties {
            src = src.property(k.clone(), v.clone());
        }
        match &self.partition {
            Some((p, committer)) => (
                src.partitions(vec![*p])
                    .commit_offsets_through(Arc::clone(committer)),
                Some(1),
            ),
            None => (src, parallelism),
        }
    }
}

fn with_parallelism<T: Clone + Send + 'static>(s: DataStream<T>, p: Option<u32>) -> DataStream<T> {
    match p {
        Some(p) => s.set_parallelism(p),
        None => s,
    }
}

fn transform<O, F>(input: Stream, name: &str, make: F) -> DataStream<Row>
where
    O: brook_core::operator::Operator<In = Row, Out = Row>,
    F: Fn() -> O + Send + Sync + 'static,
{
    match input {
        Stream::Keyed(s, fields) => key_by(s.plain(), fields).transform(name, move |_| make()),
        other => other.plain().transform(name, move |_| make()),
    }
}
