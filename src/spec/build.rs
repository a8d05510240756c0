//! Turns a validated spec into a job on a [`StreamEnvironment`].

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::{Arc, Mutex};

use brook_connectors::{
    FileSink, FileSource, GeneratorSource, LogSink, LogSource, StartingOffsets, StdoutSink,
};
use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy, BadRecords, DeadLetterWriter};
use brook_engine::{DataStream, JobConfig, KeyedStream, StreamEnvironment};
use brook_log::Log;
use brook_operators::row::{row_key, Row, RowFilter, RowMap};
use serde_json::json;

use super::{
    file_format, FileFormat, SinkSpec, SourceSpec, SpecError, StartPosition, StepOp, ValidSpec,
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

#[derive(Clone)]
enum Stream {
    Plain(DataStream<Row>),
    Keyed(KeyedStream<String, Row>),
}

impl Stream {
    fn plain(self) -> DataStream<Row> {
        match self {
            Stream::Plain(s) => s,
            Stream::Keyed(k) => k.into_stream(),
        }
    }
}

/// Builds the job. `log` is needed when a source or sink uses the embedded log.
///
/// # Errors
/// [`SpecError`] for what can only be checked now: an unknown topic, a dead-letter
/// file that cannot be opened, the log missing.
pub fn build(
    v: &ValidSpec,
    mut config: JobConfig,
    log: Option<&Log>,
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
        let stream: DataStream<Row> = match s {
            SourceSpec::File {
                name,
                path,
                format,
                follow,
                on_bad_record,
                parallelism,
            } => {
                let fmt = format
                    .or_else(|| file_format(path))
                    .unwrap_or(FileFormat::Jsonl);
                let src = match fmt {
                    FileFormat::Jsonl => FileSource::jsonl::<Row>(path.clone()),
                    FileFormat::Csv => FileSource::csv::<Row>(path.clone()),
                };
                let src = src.follow(*follow).on_bad_record(bad(*on_bad_record));
                with_parallelism(env.source(src), *parallelism).name(name)
            }
            SourceSpec::Log {
                name,
                topic,
                start,
                bounded,
                on_bad_record,
                parallelism,
            } => {
                let log = need_log(field.clone())?;
                log.topic(topic)
                    .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                let start = match start.unwrap_or(StartPosition::Earliest) {
                    StartPosition::Earliest => StartingOffsets::Earliest,
                    StartPosition::Latest => StartingOffsets::Latest,
                };
                let src = LogSource::json::<Row>(log, topic.clone())
                    .starting_offsets(start)
                    .bounded(bounded.unwrap_or(true))
                    .on_bad_record(bad(*on_bad_record));
                with_parallelism(env.source(src), *parallelism).name(name)
            }
            SourceSpec::Generator {
                name,
                count,
                keys,
                start_ms,
                step_ms,
                rate,
                parallelism,
            } => {
                let mut b = GeneratorSource::builder()
                    .events(*count)
                    .keys(keys.unwrap_or(10_000))
                    .start_ms(start_ms.unwrap_or(0))
                    .step_ms(step_ms.unwrap_or(1));
                if let Some(r) = rate {
                    b = b.rate(*r);
                }
                let src = b
                    .build()
                    .map_err(|e| SpecError::new(field.clone(), e.to_string()))?;
                let events = with_parallelism(env.source(src), *parallelism).name(name);
                let rows = events.map(|e| json!({ "key": e.key, "ts": e.ts, "value": e.value }));
                with_parallelism(rows, *parallelism).name(&format!("{name}-rows"))
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
        let input = if step.inputs.len() == 1 {
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
            StepOp::Filter(e) => {
                let e = e.clone();
                Stream::Plain(transform(input, &step.name, move || {
                    RowFilter::new(e.clone(), handler.clone())
                }))
            }
            StepOp::Map(fields) => {
                let fields = fields.clone();
                Stream::Plain(transform(input, &step.name, move || {
                    RowMap::map(fields.clone(), handler.clone())
                }))
            }
            StepOp::Select(fields) => {
                let fields = fields.clone();
                Stream::Plain(transform(input, &step.name, move || {
                    RowMap::select(fields.clone(), handler.clone())
                }))
            }
            StepOp::KeyBy(fields) => {
                let fields = fields.clone();
                Stream::Keyed(input.plain().key_by(move |r: &Row| row_key(r, &fields)))
            }
            StepOp::Union => input,
        };
        let out = match (out, step.parallelism) {
            (Stream::Plain(s), Some(p)) => Stream::Plain(s.set_parallelism(p)),
            (s, _) => s,
        };
        streams.insert(step.name.clone(), out);
    }

    let mut sinks = Vec::new();
    for (i, (s, input)) in spec.sinks.iter().zip(&v.sink_inputs).enumerate() {
        let field = format!("sinks[{i}] ({})", s.name());
        let stream = streams
            .get(input)
            .cloned()
            .ok_or_else(|| {
                SpecError::new(format!("{field}.input"), format!("unknown input {input}"))
            })?
            .plain();
        let (handle, parallelism) = match s {
            SinkSpec::File {
                path,
                format,
                parallelism,
                ..
            } => {
                let sink = match format
                    .or_else(|| file_format(path))
                    .unwrap_or(FileFormat::Jsonl)
                {
                    FileFormat::Jsonl => FileSink::<Row>::jsonl(path.clone()),
                    FileFormat::Csv => FileSink::<Row>::csv(path.clone()),
                };
                (stream.sink(sink), *parallelism)
            }
            // One writer, so printed lines never interleave.
            SinkSpec::Stdout { .. } => (stream.sink(StdoutSink::<Row>::new()), Some(1)),
            SinkSpec::Log {
                topic,
                key_field,
                parallelism,
                ..
            } => {
                let log = need_log(field.clone())?;
                log.topic(topic)
                    .map_err(|e| SpecError::new(format!("{field}.topic"), e.to_string()))?;
                let mut sink = LogSink::<Row>::json(log, topic.clone());
                if let Some(k) = key_field.clone() {
                    sink = sink.key_by(move |r: &Row| match r.get(&k) {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => String::new(),
                    });
                }
                (stream.sink(sink), *parallelism)
            }
        };
        let handle = match parallelism {
            Some(p) => handle.set_parallelism(p),
            None => handle,
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
        Stream::Plain(s) => s.transform(name, move |_| make()),
        Stream::Keyed(k) => k.transform(name, move |_| make()),
    }
}
