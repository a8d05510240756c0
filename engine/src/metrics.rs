//! Metrics per operator subtask: records in and out, batches, busy time and time
//! blocked on backpressure. Updated once per batch with relaxed atomics, readable while
//! the job runs.

use std::collections::VecDeque;
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
    /// Records that arrived too late for their windows (dropped or sent to a late-data
    /// side output).
    pub late_records: AtomicU64,
    /// Sources only: the watermark and idleness of each split (refreshed every
    /// 200 ms while the job runs).
    pub splits: Mutex<Vec<SplitMetrics>>,
}

/// The event-time state of one source split (a log partition, a file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMetrics {
    /// The split's id.
    pub split: String,
    /// Its watermark (ms), `i64::MIN` before its first record.
    pub watermark: i64,
    /// Whether it is idle (no records for the idle timeout).
    pub idle: bool,
    /// The next offset the reader reads, when the source tells
    /// ([`SourceReader::split_progress`](brook_core::source::SourceReader::split_progress)).
    pub offset: Option<u64>,
    /// Records left up to the split's current end, when the source tells.
    pub lag: Option<u64>,
    /// Records read at or behind their watermark
    /// ([`SplitWatermarks::split_late`](brook_core::watermark::SplitWatermarks::split_late)).
    pub late_records: u64,
}

/// Checkpoint statistics of a job, recorded by the checkpoint coordinator.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    /// Checkpoints completed (savepoints included).
    pub completed: AtomicU64,
    /// Checkpoints aborted (timed out, declined, failed to write).
    pub failed: AtomicU64,
    /// Id of the last completed checkpoint, 0 before the first.
    pub last_id: AtomicU64,
    /// How long the last completed checkpoint took, from its start to its metadata
    /// (ms).
    pub last_duration_ms: AtomicU64,
    /// Bytes of the last completed checkpoint's task files (state shared with earlier
    /// checkpoints not counted).
    pub last_size_bytes: AtomicU64,
    /// When the last checkpoint completed (ms since the epoch, by the job's clock).
    pub last_completed_ms: std::sync::atomic::AtomicI64,
    /// The last [`CHECKPOINT_HISTORY`] checkpoints, completed or aborted, oldest
    /// first (written once per checkpoint by the coordinator, never by a task).
    history: Mutex<VecDeque<CheckpointRecord>>,
}

/// Checkpoints kept in [`CheckpointStats::history`] (Flink's web UI keeps 10 by
/// default, `web.checkpoints.history`; a few more cost nothing here).
pub const CHECKPOINT_HISTORY: usize = 50;

/// One checkpoint in the history: completed, or aborted with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    /// The checkpoint's id.
    pub id: u64,
    /// When it was triggered (ms since the epoch, by the job's clock); for an aborted
    /// checkpoint, when it was aborted.
    pub trigger_ms: i64,
    /// From trigger to metadata written (ms); `None` when aborted.
    pub duration_ms: Option<u64>,
    /// Bytes of its task files (state shared with earlier checkpoints not counted);
    /// `None` when aborted.
    pub size_bytes: Option<u64>,
    /// Bytes of everything it consists of: its directory and every shared file it
    /// refers to (as Flink's "full checkpoint data size"); `None` when aborted.
    pub full_size_bytes: Option<u64>,
    /// Bytes it added: its directory and the shared files the checkpoint before it
    /// did not refer to (Flink's "checkpointed data size"; the full size for
    /// in-memory state); `None` when aborted.
    pub incremental_bytes: Option<u64>,
    /// Why it was aborted; `None` when it completed.
    pub error: Option<String>,
    /// Per task, how long its barrier alignment took (empty when aborted).
    pub alignment: Vec<TaskAlignment>,
}

/// One task's barrier alignment in a checkpoint: from the first barrier on one of its
/// input channels to the last (Flink's "alignment duration"); 0 for sources and tasks
/// with one input channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskAlignment {
    /// The task (its chain's name and subtask).
    pub task: String,
    /// Microseconds.
    pub alignment_us: u64,
}

impl CheckpointStats {
    /// Adds a checkpoint to the history, dropping the oldest beyond
    /// [`CHECKPOINT_HISTORY`].
    pub fn record(&self, r: CheckpointRecord) {
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == CHECKPOINT_HISTORY {
            h.pop_front();
        }
        h.push_back(r);
    }

    /// The history, oldest first.
    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// An edge of the running job's graph, as planned: which vertices it links (indexes
/// into [`JobMetrics::vertices`]), how records cross it, and whether its two vertices
/// run chained in one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeMetrics {
    /// The upstream vertex.
    pub from: usize,
    /// The downstream vertex.
    pub to: usize,
    /// `forward`, `rebalance`, `hash` or `broadcast`.
    pub partitioner: String,
    /// The two vertices run in one task (records handed over by a call).
    pub chained: bool,
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
    /// Keyed vertices: the hottest keys of its input (crate::hot_keys); no writer
    /// otherwise.
    pub hot_keys: Arc<crate::hot_keys::HotKeyBoard>,
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
    /// Late records over all subtasks.
    pub late_records: u64,
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
            t.late_records += m.late_records.load(Ordering::Relaxed);
        }
        t
    }
}

/// All metrics of a job, shared with whoever watches it.
#[derive(Debug, Default, Clone)]
pub struct JobMetrics {
    vertices: Arc<Mutex<Vec<VertexMetrics>>>,
    edges: Arc<Mutex<Vec<EdgeMetrics>>>,
    checkpoints: Arc<CheckpointStats>,
}

impl JobMetrics {
    pub(crate) fn register(&self, name: &str, parallelism: u32) -> Vec<Arc<OperatorMetrics>> {
        let subtasks: Vec<_> = (0..parallelism).map(|_| OperatorMetrics::new()).collect();
        let mut v = self.vertices.lock().unwrap_or_else(|e| e.into_inner());
        v.push(VertexMetrics {
            name: name.to_string(),
            subtasks: subtasks.clone(),
            hot_keys: Arc::default(),
        });
        subtasks
    }

    /// The hot-key board of vertex `vertex` (by registration order).
    pub(crate) fn hot_keys_of(&self, vertex: usize) -> Arc<crate::hot_keys::HotKeyBoard> {
        let v = self.vertices.lock().unwrap_or_else(|e| e.into_inner());
        v.get(vertex)
            .map(|v| Arc::clone(&v.hot_keys))
            .unwrap_or_default()
    }

    pub(crate) fn set_edges(&self, edges: Vec<EdgeMetrics>) {
        *self.edges.lock().unwrap_or_else(|e| e.into_inner()) = edges;
    }

    /// The job graph's edges (empty before the job starts).
    pub fn edges(&self) -> Vec<EdgeMetrics> {
        self.edges.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The job's checkpoint statistics (live).
    pub fn checkpoints(&self) -> &Arc<CheckpointStats> {
        &self.checkpoints
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
        let vertices = self.vertices();
        let mut s = String::new();
        for series in SERIES {
            let _ = writeln!(
                s,
                "# HELP {} {}\n# TYPE {} {}",
                series.name, series.help, series.name, series.kind
            );
            for v in &vertices {
                for (i, m) in v.subtasks.iter().enumerate() {
                    let raw = (series.get)(m);
                    if series.none == Some(raw) {
                        continue;
                    }
                    let value = if series.nanos {
                        raw as f64 / 1e9
                    } else {
                        raw as f64
                    };
                    let _ = writeln!(
                        s,
                        "{}{{operator=\"{}\",subtask=\"{i}\"}} {value}",
                        series.name,
                        escape(&v.name)
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "# HELP brook_split_watermark_ms Watermark of a source split (ms)\n# TYPE brook_split_watermark_ms gauge"
        );
        for v in &vertices {
            for (i, m) in v.subtasks.iter().enumerate() {
                let splits = m.splits.lock().unwrap_or_else(|e| e.into_inner());
                // No sample before the split's first watermark (as for operators).
                for sp in splits.iter().filter(|sp| sp.watermark != i64::MIN) {
                    let _ = writeln!(
                        s,
                        "brook_split_watermark_ms{{operator=\"{}\",subtask=\"{i}\",split=\"{}\",idle=\"{}\"}} {}",
                        escape(&v.name),
                        escape(&sp.split),
                        sp.idle,
                        sp.watermark
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "# HELP brook_split_late_records_total Records a source read at or behind their split's watermark\n# TYPE brook_split_late_records_total counter"
        );
        for v in &vertices {
            for (i, m) in v.subtasks.iter().enumerate() {
                let splits = m.splits.lock().unwrap_or_else(|e| e.into_inner());
                for sp in splits.iter() {
                    let _ = writeln!(
                        s,
                        "brook_split_late_records_total{{operator=\"{}\",subtask=\"{i}\",split=\"{}\"}} {}",
                        escape(&v.name),
                        escape(&sp.split),
                        sp.late_records
                    );
                }
            }
        }
        for (name, help, get) in [
            (
                "brook_split_offset",
                "Next offset a source reads in a split",
                (|sp: &SplitMetrics| sp.offset) as fn(&SplitMetrics) -> Option<u64>,
            ),
            (
                "brook_split_lag",
                "Records left to read in a split",
                |sp: &SplitMetrics| sp.lag,
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
            for v in &vertices {
                for (i, m) in v.subtasks.iter().enumerate() {
                    let splits = m.splits.lock().unwrap_or_else(|e| e.into_inner());
                    for sp in splits.iter() {
                        if let Some(x) = get(sp) {
                            let _ = writeln!(
                                s,
                                "{name}{{operator=\"{}\",subtask=\"{i}\",split=\"{}\"}} {x}",
                                escape(&v.name),
                                escape(&sp.split),
                            );
                        }
                    }
                }
            }
        }
        let c = &self.checkpoints;
        for (name, help, kind, value) in [
            (
                "brook_checkpoints_completed_total",
                "Checkpoints completed",
                "counter",
                c.completed.load(Ordering::Relaxed) as f64,
            ),
            (
                "brook_checkpoints_failed_total",
                "Checkpoints aborted",
                "counter",
                c.failed.load(Ordering::Relaxed) as f64,
            ),
            (
                "brook_last_checkpoint_id",
                "Id of the last completed checkpoint",
                "gauge",
                c.last_id.load(Ordering::Relaxed) as f64,
            ),
            (
                "brook_last_checkpoint_duration_seconds",
                "Duration of the last completed checkpoint",
                "gauge",
                c.last_duration_ms.load(Ordering::Relaxed) as f64 / 1e3,
            ),
            (
                "brook_last_checkpoint_size_bytes",
                "Size of the last completed checkpoint's task files",
                "gauge",
                c.last_size_bytes.load(Ordering::Relaxed) as f64,
            ),
        ] {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        s
    }
}

/// One exported metric.
struct Series {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    /// The counter is in nanoseconds and is exported in seconds.
    nanos: bool,
    /// The value that means "none yet" (the watermark before the first, `i64::MIN`):
    /// no sample then, as Prometheus has no "none" and the number would read as a
    /// date 292 million years BC.
    none: Option<i64>,
    get: fn(&OperatorMetrics) -> i64,
}

fn load(c: &AtomicU64) -> i64 {
    c.load(Ordering::Relaxed) as i64
}

const SERIES: [Series; 7] = [
    Series {
        name: "brook_records_in_total",
        help: "Records received",
        kind: "counter",
        nanos: false,
        none: None,
        get: |m| load(&m.records_in),
    },
    Series {
        name: "brook_records_out_total",
        help: "Records emitted",
        kind: "counter",
        nanos: false,
        none: None,
        get: |m| load(&m.records_out),
    },
    Series {
        name: "brook_batches_in_total",
        help: "Batches received",
        kind: "counter",
        nanos: false,
        none: None,
        get: |m| load(&m.batches_in),
    },
    Series {
        name: "brook_busy_seconds_total",
        help: "Time spent processing",
        kind: "counter",
        nanos: true,
        none: None,
        get: |m| load(&m.busy_ns),
    },
    Series {
        name: "brook_backpressure_seconds_total",
        help: "Time blocked sending downstream",
        kind: "counter",
        nanos: true,
        none: None,
        get: |m| load(&m.backpressure_ns),
    },
    Series {
        name: "brook_late_records_total",
        help: "Records too late for their windows (dropped or sent to the late output)",
        kind: "counter",
        nanos: false,
        none: None,
        get: |m| load(&m.late_records),
    },
    Series {
        name: "brook_watermark_ms",
        help: "Current event-time watermark (ms)",
        kind: "gauge",
        nanos: false,
        none: Some(i64::MIN),
        get: |m| m.watermark.load(Ordering::Relaxed),
    },
];

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
