//! Metrics per operator subtask: records in and out, batches, busy time and time
//! blocked on backpressure. Updated once per batch with relaxed atomics, readable while
//! the job runs.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters of one operator subtask.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    /// Records received.
    pub records_in: AtomicU64,
    /// Records emitted.
    pub records_out: AtomicU64,
    /// Batches received.
    pub batches_in: AtomicU64,
    /// Nanoseconds spent in the operator's methods.
    pub busy_ns: AtomicU64,
    /// Nanoseconds spent blocked sending downstream (backpressure).
    pub backpressure_ns: AtomicU64,
    /// Most batches seen waiting in this subtask's input channels at once.
    pub max_queued_batches: AtomicU64,
    /// Current watermark (ms), `i64::MIN` before the first.
    pub watermark: std::sync::atomic::AtomicI64,
}

impl OperatorMetrics {
    pub(crate) fn new() -> Arc<Self> {
        let m = OperatorMetrics::default();
        m.watermark.store(i64::MIN, Ordering::Relaxed);
        Arc::new(m)
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The metrics of one vertex of the job graph, per subtask.
#[derive(Debug, Clone)]
pub struct VertexMetrics {
    /// The vertex's name.
    pub name: String,
    /// One entry per subtask.
    pub subtasks: Vec<Arc<OperatorMetrics>>,
}

/// Totals of one vertex.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VertexTotals {
    /// Records received over all subtasks.
    pub records_in: u64,
    /// Records emitted over all subtasks.
    pub records_out: u64,
    /// Batches received.
    pub batches_in: u64,
    /// Busy time, ms.
    pub busy_ms: u64,
    /// Time blocked on backpressure, ms.
    pub backpressure_ms: u64,
}

impl VertexMetrics {
    /// Sums over the subtasks.
    pub fn totals(&self) -> VertexTotals {
        let mut t = VertexTotals::default();
        for m in &self.subtasks {
            t.records_in += m.records_in.load(Ordering::Relaxed);
            t.records_out += m.records_out.load(Ordering::Relaxed);
            t.batches_in += m.batches_in.load(Ordering::Relaxed);
            t.busy_ms += m.busy_ns.load(Ordering::Relaxed) / 1_000_000;
            t.backpressure_ms += m.backpressure_ns.load(Ordering::Relaxed) / 1_000_000;
        }
        t
    }
}

/// All metrics of a job, shared with whoever watches it.
#[derive(Debug, Default, Clone)]
pub struct JobMetrics {
    vertices: Arc<Mutex<Vec<VertexMetrics>>>,
}

impl JobMetrics {
    pub(crate) fn register(&self, name: &str, parallelism: u32) -> Vec<Arc<OperatorMetrics>> {
        let subtasks: Vec<_> = (0..parallelism).map(|_| OperatorMetrics::new()).collect();
        let mut v = self.vertices.lock().unwrap_or_else(|e| e.into_inner());
        v.push(VertexMetrics {
            name: name.to_string(),
            subtasks: subtasks.clone(),
        });
        subtasks
    }

    /// A snapshot of the vertices' metrics (the counters stay live).
    pub fn vertices(&self) -> Vec<VertexMetrics> {
        self.vertices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn prometheus(&self) -> String {
        let mut s = String::new();
        let vertices = self.vertices();
        let series: [(&str, &str, fn(&OperatorMetrics) -> u64); 5] = [
            ("brook_records_in_total", "Records received", |m| {
                m.records_in.load(Ordering::Relaxed)
            }),
            ("brook_records_out_total", "Records emitted", |m| {
                m.records_out.load(Ordering::Relaxed)
            }),
            ("brook_batches_in_total", "Batches received", |m| {
                m.batches_in.load(Ordering::Relaxed)
            }),
            ("brook_busy_seconds_total", "", |m| {
                m.busy_ns.load(Ordering::Relaxed)
            }),
            ("brook_backpressure_seconds_total", "", |m| {
                m.backpressure_ns.load(Ordering::Relaxed)
            }),
        ];
        for (name, help, get) in series {
            let seconds = name.ends_with("_seconds_total");
            let help = if seconds && name.contains("busy") {
                "Time spent processing"
            } else if seconds {
                "Time blocked on backpressure"
            } else {
                help
            };
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for v in &vertices {
                for (i, m) in v.subtasks.iter().enumerate() {
                    let raw = get(m);
                    let _ = if seconds {
                        writeln!(
                            s,
                            "{name}{{operator=\"{}\",subtask=\"{i}\"}} {}",
                            escape(&v.name),
                            raw as f64 / 1e9
                        )
                    } else {
                        writeln!(
                            s,
                            "{name}{{operator=\"{}\",subtask=\"{i}\"}} {raw}",
                            escape(&v.name)
                        )
                    };
                }
            }
        }
        let _ = writeln!(s, "# HELP brook_watermark_ms Current event-time watermark\n# TYPE brook_watermark_ms gauge");
        for v in &vertices {
            for (i, m) in v.subtasks.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "brook_watermark_ms{{operator=\"{}\",subtask=\"{i}\"}} {}",
                    escape(&v.name),
                    m.watermark.load(Ordering::Relaxed)
                );
            }
        }
        s
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
