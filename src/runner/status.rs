//! The status a supervised job writes for the runner (`BROOK_STATUS_FILE`): JSON,
//! replaced atomically (write, then rename) about every 500 ms and once more when the
//! job ends.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use brook_engine::hot_keys::{HotKey, TOP};
use brook_engine::metrics::JobMetrics;
use serde::{Deserialize, Serialize};

use super::RunnerError;

/// What a job process is doing, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProcessState {
    /// The job runs.
    Running,
    /// The job ended: its input is read and its output committed.
    Finished,
    /// The job stopped on the runner's request (or because the runner went away).
    Canceled,
    /// The job failed; see [`JobStatus::error`].
    Failed,
}

/// A job process's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The runner's job id.
    pub job_id: String,
    /// The process id of the job process.
    pub pid: u32,
    /// When this report was written (ms since the epoch).
    pub updated_ms: i64,
    /// What the job is doing.
    pub state: ProcessState,
    /// Per operator (vertex), in graph order.
    pub operators: Vec<OperatorStatus>,
    /// Per source split (log partition, file).
    pub splits: Vec<SplitStatus>,
    /// The job graph's edges between [`JobStatus::operators`] (by index), as planned;
    /// empty in reports of older versions.
    #[serde(default)]
    pub edges: Vec<EdgeStatus>,
    /// Checkpoint statistics of this process (not of earlier attempts).
    pub checkpoints: CheckpointStatus,
    /// The outcome of a savepoint the runner asked for, if any.
    #[serde(default)]
    pub savepoint: Option<SavepointOutcome>,
    /// Why the job failed (state `FAILED`).
    #[serde(default)]
    pub error: Option<String>,
}

/// Totals of one operator over its subtasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorStatus {
    /// The operator's name.
    pub name: String,
    /// Its number of subtasks.
    pub parallelism: u32,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// The smallest watermark of its subtasks (ms), absent before the first.
    pub watermark_ms: Option<i64>,
    /// Time blocked sending downstream (ms).
    pub backpressure_ms: u64,
    /// Time spent processing (ms).
    pub busy_ms: u64,
    /// Records too late for their windows.
    pub late_records: u64,
    /// The same figures per subtask, in subtask order (empty in reports of older
    /// versions).
    #[serde(default)]
    pub subtasks: Vec<SubtaskStatus>,
    /// Keyed operators: the hottest keys of the last minute (30 to 60 s), hottest
    /// first, at most [`brook_engine::hot_keys::TOP`]; estimated from a sample
    /// (brook_engine::hot_keys). Empty for other operators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot_keys: Vec<HotKey>,
}

/// One subtask of an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskStatus {
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Its watermark (ms), absent before the first.
    pub watermark_ms: Option<i64>,
    /// Time blocked sending downstream (ms).
    pub backpressure_ms: u64,
    /// Time spent processing (ms).
    pub busy_ms: u64,
}

/// An edge of the job graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeStatus {
    /// Index of the upstream operator in [`JobStatus::operators`].
    pub from: usize,
    /// Index of the downstream operator.
    pub to: usize,
    /// `forward`, `rebalance`, `hash` or `broadcast`.
    pub partitioner: String,
    /// Both operators run in one task (chained: no channel between them).
    pub chained: bool,
}

/// Where a source subtask is in one split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitStatus {
    /// The source operator.
    pub operator: String,
    /// The subtask reading the split.
    pub subtask: u32,
    /// The split's id (`topic/partition` for a log source).
    pub split: String,
    /// The next offset to read, when the source tells.
    pub offset: Option<u64>,
    /// Records left to read, when the source tells.
    pub lag: Option<u64>,
    /// The split's watermark (ms), absent before its first record.
    pub watermark_ms: Option<i64>,
    /// Whether the split is idle.
    pub idle: bool,
    /// Records read at or behind their split's watermark (late for the windows the
    /// split gates; `SplitWatermarks::split_late`).
    #[serde(default)]
    pub late_records: u64,
}

/// Checkpoint statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStatus {
    /// Checkpoints completed.
    pub completed: u64,
    /// Checkpoints aborted.
    pub failed: u64,
    /// Id of the last completed checkpoint.
    pub last_id: Option<u64>,
    /// Its duration (ms).
    pub last_duration_ms: Option<u64>,
    /// The size of its task files (bytes).
    pub last_size_bytes: Option<u64>,
    /// When it completed (ms since the epoch).
    pub last_completed_ms: Option<i64>,
    /// The last checkpoints, completed or aborted, oldest first (at most
    /// [`brook_engine::metrics::CHECKPOINT_HISTORY`]).
    #[serde(default)]
    pub history: Vec<CheckpointEntry>,
}

/// One checkpoint of [`CheckpointStatus::history`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    /// Its id.
    pub id: u64,
    /// When it was triggered (ms since the epoch); for an aborted one, when it was
    /// aborted.
    pub trigger_ms: i64,
    /// How long it took (ms); absent when aborted.
    pub duration_ms: Option<u64>,
    /// Bytes of its task files; absent when aborted.
    pub size_bytes: Option<u64>,
    /// Bytes of everything it consists of, shared files with earlier checkpoints
    /// included (Flink's full checkpoint data size); absent when aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_size_bytes: Option<u64>,
    /// Bytes it added to what the checkpoint before it had (Flink's checkpointed data
    /// size); absent when aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_bytes: Option<u64>,
    /// Why it was aborted; absent when it completed.
    pub error: Option<String>,
    /// Per task, its barrier alignment time (µs): from the first barrier on one of its
    /// input channels to the last; 0 for sources and single-input tasks. Empty when
    /// aborted, and in reports of older versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alignment: Vec<AlignmentEntry>,
}

/// One task's alignment in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlignmentEntry {
    /// The task (its chain's name and subtask).
    pub task: String,
    /// Microseconds.
    pub alignment_us: u64,
}

/// The result of a savepoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SavepointOutcome {
    /// Written to this directory.
    Written(PathBuf),
    /// Not written, and why.
    Failed(String),
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    use brook_core::time::Clock;
    brook_core::time::SystemClock.now_ms()
}

impl JobStatus {
    /// A report from the live metrics of a job.
    pub fn from_metrics(job_id: &str, state: ProcessState, metrics: &JobMetrics) -> Self {
        let mut operators = Vec::new();
        let mut splits = Vec::new();
        for v in metrics.vertices() {
            let t = v.totals();
            let wm = v
                .subtasks
                .iter()
                .map(|m| m.watermark.load(Ordering::Relaxed))
                .min()
                .filter(|w| *w != i64::MIN);
            operators.push(OperatorStatus {
                name: v.name.clone(),
                parallelism: u32::try_from(v.subtasks.len()).unwrap_or(u32::MAX),
                records_in: t.records_in,
                records_out: t.records_out,
                watermark_ms: wm,
                backpressure_ms: t.backpressure_ms,
                busy_ms: t.busy_ms,
                late_records: t.late_records,
                subtasks: v
                    .subtasks
                    .iter()
                    .map(|m| SubtaskStatus {
                        records_in: m.records_in.load(Ordering::Relaxed),
                        records_out: m.records_out.load(Ordering::Relaxed),
                        watermark_ms: Some(m.watermark.load(Ordering::Relaxed))
                            .filter(|w| *w != i64::MIN),
                        backpressure_ms: m.backpressure_ns.load(Ordering::Relaxed) / 1_000_000,
                        busy_ms: m.busy_ns.load(Ordering::Relaxed) / 1_000_000,
                    })
                    .collect(),
                hot_keys: v.hot_keys.top(TOP),
            });
            for (i, m) in v.subtasks.iter().enumerate() {
                let sp = m.splits.lock().unwrap_or_else(|e| e.into_inner());
                for s in sp.iter() {
                    splits.push(SplitStatus {
                        operator: v.name.clone(),
                        subtask: u32::try_from(i).unwrap_or(u32::MAX),
                        split: s.split.clone(),
                        offset: s.offset,
                        lag: s.lag,
                        watermark_ms: (s.watermark != i64::MIN).then_some(s.watermark),
                        idle: s.idle,
                        late_records: s.late_records,
                    });
                }
            }
        }
        let c = metrics.checkpoints();
        let last_id = c.last_id.load(Ordering::Relaxed);
        let checkpoints = CheckpointStatus {
            completed: c.completed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            last_id: (last_id > 0).then_some(last_id),
            last_duration_ms: (last_id > 0).then(|| c.last_duration_ms.load(Ordering::Relaxed)),
            last_size_bytes: (last_id > 0).then(|| c.last_size_bytes.load(Ordering::Relaxed)),
            last_completed_ms: (last_id > 0).then(|| c.last_completed_ms.load(Ordering::Relaxed)),
            history: c
                .history()
                .into_iter()
                .map(|r| CheckpointEntry {
                    id: r.id,
                    trigger_ms: r.trigger_ms,
                    duration_ms: r.duration_ms,
                    size_bytes: r.size_bytes,
                    full_size_bytes: r.full_size_bytes,
                    incremental_bytes: r.incremental_bytes,
                    error: r.error,
                    alignment: r
                        .alignment
                        .into_iter()
                        .map(|a| AlignmentEntry {
                            task: a.task,
                            alignment_us: a.alignment_us,
                        })
                        .collect(),
                })
                .collect(),
        };
        let edges = metrics
            .edges()
            .into_iter()
            .map(|e| EdgeStatus {
                from: e.from,
                to: e.to,
                partitioner: e.partitioner,
                chained: e.chained,
            })
            .collect();
        JobStatus {
            job_id: job_id.to_string(),
            pid: std::process::id(),
            updated_ms: now_ms(),
            state,
            operators,
            splits,
            edges,
            checkpoints,
            savepoint: None,
            error: None,
        }
    }

    /// Writes the report to `path` atomically (a temporary file, then a rename).
    ///
    /// # Errors
    /// [`RunnerError::Io`] when the file cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), RunnerError> {
        let json = serde_json::to_vec_pretty(self).map_err(RunnerError::Json)?;
        write_atomic(path, &json)
    }

    /// Reads a report; `None` when there is none (yet) or it cannot be read.
    pub fn read(path: &Path) -> Option<Self> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a
/// rename, so that a reader sees the old or the new content, never a part.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunnerError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| RunnerError::Io { path: p, source }
    };
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))
}
