//! Running a query on the generator's events into a sink that only counts, timed: what
//! `brook nexmark` prints (events/s, events per CPU-second, rows out, and at a rate
//! the end-to-end latency percentiles of [`crate::latency`]).

use brook_core::time::process_cpu_secs;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use hdrhistogram::Histogram;

use brook_core::element::Batch;
use brook_core::operator::{OpResult, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::time::{Clock, Millis, Stopwatch, SystemClock};
use brook_engine::{DataStream, EngineError, JobConfig, StreamEnvironment};

use crate::config::NexmarkConfig;
use crate::generator::max_auction_length_ms;
use crate::latency::{self, IntervalLog, Latencies, LatencyClock, LatencyReport, INTERVAL_MS};
use crate::model::Event;
use crate::queries;
use crate::source::NexmarkSource;

/// The queries brook runs, by their reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// Pass-through.
    Q0,
    /// Currency conversion.
    Q1,
    /// Selection.
    Q2,
    /// Local item suggestion.
    Q3,
    /// Average price for a category.
    Q4,
    /// Hot items.
    Q5,
    /// Highest bid.
    Q7,
    /// New users.
    Q8,
    /// User sessions.
    Q11,
    /// Processing-time windows.
    Q12,
}

impl Query {
    /// Every query, in order.
    pub const ALL: [Query; 10] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q7,
        Query::Q8,
        Query::Q11,
        Query::Q12,
    ];

    /// The reference's name, `q0` to `q12`.
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q11 => "q11",
            Query::Q12 => "q12",
        }
    }

    /// Adds the query over `events` and a counting sink to the job.
    fn add(self, events: DataStream<Event>, config: &NexmarkConfig, sink: &Counted) {
        match self {
            Query::Q0 => sink.add(queries::q0(events)),
            Query::Q1 => sink.add(queries::q1(events)),
            Query::Q2 => sink.add(queries::q2(events)),
            Query::Q3 => sink.add(queries::q3(events)),
            Query::Q4 => sink.add(queries::q4(events, max_auction_length_ms(config))),
            Query::Q5 => sink.add(queries::q5(events)),
            Query::Q7 => sink.add(queries::q7(events)),
            Query::Q8 => sink.add(queries::q8(events)),
            Query::Q11 => sink.add(queries::q11(events)),
            Query::Q12 => sink.add(queries::q12(events)),
        }
    }
}

/// A query name that is not one of [`Query::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown query {0:?}: expected one of q0, q1, q2, q3, q4, q5, q7, q8, q11, q12")]
pub struct UnknownQuery(pub String);

impl FromStr for Query {
    type Err = UnknownQuery;

    fn from_str(s: &str) -> Result<Self, UnknownQuery> {
        Query::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownQuery(s.to_string()))
    }
}

/// Where a run's results go: their count, and their latencies at a rate.
struct Counted {
    rows: Arc<AtomicU64>,
    latencies: Option<Arc<Latencies>>,
    intervals: Option<Arc<IntervalLog>>,
}

impl Counted {
    fn add<T: Clone + Send + 'static>(&self, stream: DataStream<T>) {
        stream.sink(CountSink {
            rows: Arc::clone(&self.rows),
            latencies: self.latencies.clone(),
            intervals: self.intervals.clone(),
            _t: std::marker::PhantomData,
        });
    }
}

/// Counts the records each subtask writes, adding them to a shared total at the end
/// (no shared write per record or batch), and with a rate times each against the
/// schedule (one clock read per batch).
struct CountSink<T> {
    rows: Arc<AtomicU64>,
    latencies: Option<Arc<Latencies>>,
    intervals: Option<Arc<IntervalLog>>,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Send + 'static> Sink for CountSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(CountWriter {
            rows: Arc::clone(&self.rows),
            count: 0,
            latencies: self
                .latencies
                .as_ref()
                .map(|l| (Arc::clone(l), latency::histogram())),
            intervals: self.intervals.as_ref().map(|log| Intervals {
                log: Arc::clone(log),
                current: latency::histogram(),
                ends_ms: None,
            }),
            _t: std::marker::PhantomData,
        }))
    }
}

struct CountWriter<T> {
    rows: Arc<AtomicU64>,
    count: u64,
    latencies: Option<(Arc<Latencies>, Histogram<u64>)>,
    intervals: Option<Intervals>,
    _t: std::marker::PhantomData<fn(T)>,
}

/// A writer's latencies of the current interval, for an [`IntervalLog`].
struct Intervals {
    log: Arc<IntervalLog>,
    current: Histogram<u64>,
    /// When the current interval ends (ms since the epoch).
    ends_ms: Option<Millis>,
}

impl Intervals {
    /// Called at each batch: writes the interval that ended before `now_ms`.
    fn roll(&mut self, now_ms: Millis) {
        let ends = *self.ends_ms.get_or_insert(now_ms + INTERVAL_MS);
        if now_ms >= ends {
            self.log.line(ends, &self.current);
            self.current.reset();
            self.ends_ms = Some(now_ms + INTERVAL_MS);
        }
    }
}

impl<T: Send + 'static> SinkWriter for CountWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        self.count += batch.len() as u64;
        if let Some((shared, hist)) = &mut self.latencies {
            let clock = shared.clock();
            if let Some(now) = clock.now_nanos() {
                if let Some(iv) = &mut self.intervals {
                    iv.roll(SystemClock.now_ms());
                }
                for r in &batch {
                    if let Some(t) = r.timestamp {
                        let us = clock.latency_us(t, now);
                        hist.saturating_record(us);
                        if let Some(iv) = &mut self.intervals {
                            iv.current.saturating_record(us);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn close(&mut self) {
        self.rows
            .fetch_add(std::mem::take(&mut self.count), Ordering::Relaxed);
        if let Some((shared, hist)) = &mut self.latencies {
            shared.merge(hist);
            hist.reset();
        }
        if let Some(iv) = &mut self.intervals {
            iv.log.line(SystemClock.now_ms(), &iv.current);
            iv.current.reset();
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunReport {
    /// Events generated.
    pub events: u64,
    /// Rows the query wrote.
    pub rows: u64,
    /// Wall-clock time from start to end (s).
    pub secs: f64,
    /// CPU time of the process meanwhile, every thread (s); `None` where the system
    /// does not tell.
    pub cpu_secs: Option<f64>,
    /// End-to-end latencies, for a run at a rate that wrote results.
    pub latency: Option<LatencyReport>,
    /// The id of the last completed checkpoint, for a run with checkpoints that
    /// completed one (filled in by the caller, who knows the directory).
    pub checkpoints: Option<u64>,
}

impl RunReport {
    /// Events per second of wall-clock time.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.secs.max(f64::MIN_POSITIVE)
    }

    /// Events per CPU-second.
    pub fn events_per_cpu_sec(&self) -> Option<f64> {
        self.cpu_secs
            .map(|c| self.events as f64 / c.max(f64::MIN_POSITIVE))
    }
}

/// Runs `query` over the events of `source` with `config` (parallelism, state backend,
/// checkpoints), timed from start to end.
///
/// # Errors
/// The job's [`EngineError`].
pub fn run(
    query: Query,
    source: NexmarkSource,
    config: JobConfig,
) -> Result<RunReport, EngineError> {
    run_with(query, source, config, RunOptions::default())
}

/// How [`run_with`] times results, beyond [`run`].
#[derive(Debug, Default)]
pub struct RunOptions {
    /// The rate's schedule began this many ms before the run (in an earlier process
    /// that was killed; the restored source catches up with it). Default: it begins
    /// at the first poll.
    pub schedule_began_ms_ago: Option<u64>,
    /// Latencies per interval go here too (at a rate).
    pub intervals: Option<Arc<IntervalLog>>,
}

/// [`run`] with [`RunOptions`].
///
/// # Errors
/// The job's [`EngineError`].
pub fn run_with(
    query: Query,
    source: NexmarkSource,
    config: JobConfig,
    options: RunOptions,
) -> Result<RunReport, EngineError> {
    let events = source.generator().config().events;
    let env = StreamEnvironment::new(config);
    let start = Arc::new(OnceLock::new());
    if let Some(ago) = options.schedule_began_ms_ago {
        let _ = start.set(Stopwatch::started_ago(ago.saturating_mul(1_000_000)));
    }
    let latencies = LatencyClock::new(source.generator().config(), Arc::clone(&start))
        .map(|clock| Arc::new(Latencies::new(clock)));
    let source = source.with_shared_schedule(start);
    let sink = Counted {
        rows: Arc::new(AtomicU64::new(0)),
        latencies: latencies.clone(),
        intervals: options.intervals,
    };
    let strategy = source.watermark_strategy();
    let config = source.generator().config().clone();
    query.add(env.from_source(source, strategy), &config, &sink);
    let cpu0 = process_cpu_secs();
    let watch = Stopwatch::start();
    env.execute(query.name())?;
    let secs = watch.elapsed_nanos() as f64 / 1e9;
    let cpu_secs = cpu0.zip(process_cpu_secs()).map(|(a, b)| b - a);
    Ok(RunReport {
        events,
        rows: sink.rows.load(Ordering::Relaxed),
        secs,
        cpu_secs,
        latency: latencies.and_then(|l| l.report()),
        checkpoints: None,
    })
}
