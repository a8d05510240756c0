//! Aligned checkpoints (semantics.md §4), as Flink's: the [`CheckpointCoordinator`]
//! thread asks every source task to inject a barrier; each task snapshots its chain
//! when the barrier has arrived on all its inputs, writes one file and acknowledges;
//! when every task has, the coordinator writes the checkpoint's `_metadata` last and
//! atomically (write, fsync, rename, fsync the directory), and only then announces
//! completion (sinks commit).
//!
//! Layout: `<dir>/chk-<id>/<task file>` per task and `<dir>/chk-<id>/_metadata`
//! (JSON: format version, job, id, vertices, and size and CRC-32C of every file). A
//! directory without valid metadata, or whose files do not match it, is incomplete and
//! never used: [`latest_complete`] skips it with a warning.
//!
//! Bounded input ends with a final checkpoint, as Flink's (FLIP-147): a source subtask
//! at the end of its input fires its last windows and timers (watermark `MAX`), then
//! keeps answering checkpoints without sending end of input; once every source subtask
//! has, the coordinator triggers the final checkpoint at once, and the sources end when
//! it completed. So everything the job wrote is committed by a completed checkpoint
//! that records the sources at their end: a job killed after its sinks' last commit
//! but before it exited restores at the end and writes nothing twice. After
//! [`FINAL_ATTEMPTS`] aborted final checkpoints the sources end without one (warned).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::checkpoint::{CheckpointId, RestoredState, SnapshotStorage, StateSnapshot};
use brook_core::keys::KeyGroupRange;
use brook_core::time::{Millis, SharedClock};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::ids::VertexId;

/// Version of the task-file and metadata formats.
/// 2: operator state may hold native (RocksDB) state files.
/// 3: a source subtask's snapshot holds the watermark it had handed out (version 2
/// files are still read: see `migrate_v2`).
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this brook reads.
const OLDEST_FORMAT_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"BROOKCP1";
const METADATA: &str = "_metadata";

/// Final checkpoints tried before sources end without one.
pub(crate) const FINAL_ATTEMPTS: u32 = 3;
/// Files shared by successive checkpoints of a job (incremental native state).
const SHARED: &str = "shared";

/// Checkpointing settings of a job.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Where checkpoints are stored (`chk-<id>` directories).
    pub dir: PathBuf,
    /// Time between the end of one checkpoint and the start of the next (ms).
    pub interval_ms: Millis,
    /// Complete checkpoints kept (older ones are deleted). Default 3.
    pub retain: usize,
    /// A checkpoint not complete after this long is aborted (ms). Default 10 min.
    pub timeout_ms: Millis,
}

impl CheckpointConfig {
    /// Checkpoints into `dir` every `interval_ms`.
    pub fn new(dir: impl Into<PathBuf>, interval_ms: Millis) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            interval_ms,
            retain: 3,
            timeout_ms: 600_000,
        }
    }
}

/// Errors reading or writing checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// I/O on a checkpoint file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not a checkpoint of this format, or is damaged.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No complete checkpoint in the directory.
    #[error("no complete checkpoint in {0}")]
    NoneComplete(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What one task wrote for a checkpoint: the state of every operator of its chain, its
/// source positions and watermarks, its sinks' committables.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct TaskSnapshot {
    pub(crate) operators: Vec<(VertexId, u32, StateSnapshot)>,
    pub(crate) sources: Vec<SourceSnapshot>,
    pub(crate) sinks: Vec<(VertexId, u32, Vec<Vec<u8>>)>,
    /// Where the task's operators may write native state files (checkpoints, not
    /// savepoints); not stored.
    #[serde(skip)]
    pub(crate) storage: Option<TaskStorage>,
    /// Why an operator could not snapshot its state: the checkpoint fails.
    #[serde(skip)]
    pub(crate) declined: Option<String>,
}

/// The checkpoint storage of one task (see [`SnapshotStorage`]).
#[derive(Debug, Clone)]
pub(crate) struct TaskStorage {
    root: PathBuf,
    /// `chk-<id>/<task>`, relative to `root`.
    prefix: PathBuf,
}

impl TaskStorage {
    /// The storage of operator `vertex` of this task.
    pub(crate) fn for_operator(&self, vertex: VertexId) -> SnapshotStorage {
        let mut private = self.prefix.clone().into_os_string();
        private.push(format!("-op{vertex}"));
        SnapshotStorage {
            root: self.root.clone(),
            private_dir: PathBuf::from(private),
            shared_dir: PathBuf::from(SHARED),
        }
    }
}

/// A source subtask's position and watermark progress per split.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct SourceSnapshot {
    pub(crate) vertex: VertexId,
    /// (split id, position)
    pub(crate) positions: Vec<(String, Vec<u8>)>,
    /// (split id, largest event time seen, idle)
    pub(crate) watermarks: Vec<(String, Option<Millis>, bool)>,
    /// The combined watermark the subtask had handed out at the barrier (ms): where
    /// its splits resume, also when they were all idle (semantics.md §4).
    pub(crate) watermark: Millis,
}

/// Format version 2 of [`TaskSnapshot`]: sources without their watermark.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct TaskSnapshotV2 {
    operators: Vec<(VertexId, u32, StateSnapshot)>,
    sources: Vec<SourceSnapshotV2>,
    sinks: Vec<(VertexId, u32, Vec<Vec<u8>>)>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct SourceSnapshotV2 {
    vertex: VertexId,
    positions: Vec<(String, Vec<u8>)>,
    watermarks: Vec<(String, Option<Millis>, bool)>,
}

/// A version 2 task file as the current format: its sources resume from
/// [`Millis::MIN`] plus their splits' progress, as version 2 restored them.
fn migrate_v2(v2: TaskSnapshotV2) -> TaskSnapshot {
    TaskSnapshot {
        operators: v2.operators,
        sources: v2
            .sources
            .into_iter()
            .map(|s| SourceSnapshot {
                vertex: s.vertex,
                positions: s.positions,
                watermarks: s.watermarks,
                watermark: Millis::MIN,
            })
            .collect(),
        sinks: v2.sinks,
        storage: None,
        declined: None,
    }
}

/// A task's answer to a barrier.
#[derive(Debug)]
pub(crate) struct Ack {
    pub(crate) id: CheckpointId,
    pub(crate) result: Result<FileEntry, String>,
}

/// A file of a checkpoint, as listed in its metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct FileEntry {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) crc32c: u32,
    /// Files of the shared directory the task's state refers to (relative to the
    /// checkpoints directory); a shared file no retained checkpoint lists is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shared: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Metadata {
    format_version: u32,
    job: String,
    checkpoint_id: CheckpointId,
    timestamp_ms: Millis,
    max_parallelism: u32,
    vertices: Vec<String>,
    files: Vec<FileEntry>,
}

/// Shared between the coordinator and the tasks of a job.
#[derive(Debug)]
pub(crate) struct CheckpointControl {
    /// The newest checkpoint sources are asked to inject.
    pub(crate) requested: AtomicU64,
    /// The newest complete checkpoint.
    pub(crate) completed: AtomicU64,
    /// Set when a task ended: no further checkpoints can complete.
    pub(crate) task_ended: AtomicBool,
    /// Source subtasks of the job, and how many have reached the end of their input
    /// and wait for the final checkpoint.
    pub(crate) sources_total: usize,
    pub(crate) sources_ended: AtomicUsize,
    /// The final checkpoint: the first triggered after every source subtask ended
    /// (0: none yet). Sources send end of input once it completed.
    pub(crate) final_id: AtomicU64,
    /// Set when final checkpoints failed too often: sources end without one.
    pub(crate) final_abandoned: AtomicBool,
    pub(crate) acks: Sender<Ack>,
    pub(crate) dir: PathBuf,
    /// A savepoint asked for: its parent directory and who waits for its path.
    pub(crate) savepoint: std::sync::Mutex<Option<SavepointRequest>>,
    /// Savepoints in progress: checkpoint id -> directory.
    pub(crate) savepoint_dirs: std::sync::Mutex<HashMap<CheckpointId, PathBuf>>,
}

/// A savepoint asked for with [`crate::JobHandle::savepoint`].
#[derive(Debug)]
pub(crate) struct SavepointRequest {
    /// `None`: an ordinary checkpoint, taken now (stop with checkpoint).
    pub(crate) parent: Option<PathBuf>,
    pub(crate) done: Sender<Result<PathBuf, String>>,
}

impl CheckpointControl {
    pub(crate) fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        let savepoints = self
            .savepoint_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match savepoints.get(&id) {
            Some(d) => d.clone(),
            None => self.dir.join(format!("chk-{id}")),
        }
    }

    fn all_sources_ended(&self) -> bool {
        self.sources_ended.load(Ordering::SeqCst) >= self.sources_total
    }

    /// A source subtask that reached the end of its input may end now: the final
    /// checkpoint (taken after every source ended) completed, or was given up.
    pub(crate) fn final_done(&self, completed: CheckpointId) -> bool {
        let f = self.final_id.load(Ordering::SeqCst);
        (f != 0 && completed >= f) || self.final_abandoned.load(Ordering::SeqCst)
    }

    fn take_savepoint_request(&self) -> Option<SavepointRequest> {
        self.savepoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn savepoint_requested(&self) -> bool {
        self.savepoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// An empty snapshot of `task` for checkpoint `id`, offering native state storage
    /// unless `id` is a savepoint (savepoints are self-contained).
    pub(crate) fn new_snapshot(&self, id: CheckpointId, task: &str) -> TaskSnapshot {
        let savepoint = self
            .savepoint_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&id);
        TaskSnapshot {
            storage: (!savepoint).then(|| TaskStorage {
                root: self.dir.clone(),
                prefix: PathBuf::from(format!("chk-{id}")).join(file_stem(task)),
            }),
            ..TaskSnapshot::default()
        }
    }

    /// Writes a task's snapshot into checkpoint `id` and acknowledges it.
    pub(crate) fn write_and_ack(&self, id: CheckpointId, task: &str, snap: &TaskSnapshot) {
        let result = match &snap.declined {
            Some(reason) => Err(reason.clone()),
            None => {
                write_task_file(&self.checkpoint_dir(id), task, snap).map_err(|e| e.to_string())
            }
        };
        // The coordinator may be gone (the job is ending); nothing to do then.
        let _ = self.acks.send(Ack { id, result });
    }
}

fn file_name(task: &str) -> String {
    let mut s = file_stem(task);
    s.push_str(".state");
    s
}

/// `task` with every character but letters, digits, `-` and `_` replaced by `_`.
fn file_stem(task: &str) -> String {
    task.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_task_file(
    dir: &Path,
    task: &str,
    snap: &TaskSnapshot,
) -> Result<FileEntry, CheckpointError> {
    let name = file_name(task);
    let path = dir.join(&name);
    let body = bincode::serialize(snap).map_err(|e| CheckpointError::Corrupt {
        path: path.clone(),
        reason: format!("cannot encode: {e}"),
    })?;
    let mut bytes = Vec::with_capacity(body.len() + 12);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&body);
    let mut f = File::create(&path).map_err(io(&path))?;
    f.write_all(&bytes).map_err(io(&path))?;
    f.sync_all().map_err(io(&path))?;
    let mut shared: Vec<String> = snap
        .operators
        .iter()
        .flat_map(|(_, _, s)| s.native())
        .flat_map(|n| n.shared_files().map(str::to_string))
        .collect();
    shared.sort_unstable();
    shared.dedup();
    Ok(FileEntry {
        name,
        size: bytes.len() as u64,
        crc32c: crc32c::crc32c(&bytes),
        shared,
    })
}

fn read_task_file(path: &Path, entry: &FileEntry) -> Result<TaskSnapshot, CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io(path))?;
    if bytes.len() as u64 != entry.size || crc32c::crc32c(&bytes) != entry.crc32c {
        return Err(corrupt("size or checksum differs from the metadata".into()));
    }
    decode_task_file(&bytes).map_err(corrupt)
}

/// A task file's snapshot from its bytes (magic, format version, bincode body); an
/// older version is migrated. The error says what is wrong.
fn decode_task_file(bytes: &[u8]) -> Result<TaskSnapshot, String> {
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err("not a brook checkpoint file".into());
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let body = &bytes[12..];
    let cannot = |e: bincode::Error| format!("cannot decode: {e}");
    match version {
        FORMAT_VERSION => bincode::deserialize(body).map_err(cannot),
        2 => bincode::deserialize(body).map(migrate_v2).map_err(cannot),
        _ => Err(format!(
            "format version {version}, this brook reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
        )),
    }
}

fn fsync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Split positions by split id.
pub(crate) type SplitPositions = HashMap<String, Vec<u8>>;
/// Watermark progress by split id.
pub(crate) type SplitWatermarks = HashMap<String, SplitProgress>;

/// A split's watermark progress in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitProgress {
    /// The largest event time seen (ms), if any.
    pub(crate) max_timestamp: Option<Millis>,
    /// Whether the split was idle.
    pub(crate) idle: bool,
    /// The watermark its subtask had handed out (ms).
    pub(crate) subtask_watermark: Millis,
}

/// A complete checkpoint read back for a restore.
#[derive(Debug)]
pub struct RestoredCheckpoint {
    /// Its id; the restored job continues with `id + 1`.
    pub id: CheckpointId,
    /// Its directory.
    pub path: PathBuf,
    vertices: Vec<String>,
    max_parallelism: u32,
    tasks: Vec<TaskSnapshot>,
}

impl RestoredCheckpoint {
    /// Reads and checks the checkpoint in `path` (a `chk-<id>` directory).
    ///
    /// # Errors
    /// [`CheckpointError`] when the metadata or a file is missing, damaged, or of
    /// another format version.
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        let meta_path = path.join(METADATA);
        let text = fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
        let meta: Metadata = serde_json::from_str(&text).map_err(|e| CheckpointError::Corrupt {
            path: meta_path.clone(),
            reason: e.to_string(),
        })?;
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&meta.format_version) {
            return Err(CheckpointError::Corrupt {
                path: meta_path,
                reason: format!(
                    "format version {}, this brook reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}",
                    meta.format_version
                ),
            });
        }
        let tasks = meta
            .files
            .iter()
            .map(|f| read_task_file(&path.join(&f.name), f))
            .collect::<Result<_, _>>()?;
        Ok(RestoredCheckpoint {
            id: meta.checkpoint_id,
            path: path.to_path_buf(),
            vertices: meta.vertices,
            max_parallelism: meta.max_parallelism,
            tasks,
        })
    }

    /// Checks that the checkpoint was taken by a job of the same shape.
    pub(crate) fn check_graph(
        &self,
        vertices: &[String],
        max_parallelism: u32,
    ) -> Result<(), String> {
        if self.max_parallelism != max_parallelism {
            return Err(format!(
                "the checkpoint has {} key groups, the job {max_parallelism}: max_parallelism cannot change",
                self.max_parallelism
            ));
        }
        if self.vertices != vertices {
            return Err(format!(
                "the checkpoint was taken by a job with operators {:?}, this job has {:?}",
                self.vertices, vertices
            ));
        }
        Ok(())
    }

    /// The state of operator `vertex` for a subtask owning `range`.
    pub(crate) fn operator_state(&self, vertex: VertexId, range: KeyGroupRange) -> RestoredState {
        let state = RestoredState::collect(
            self.tasks
                .iter()
                .flat_map(|t| t.operators.iter())
                .filter(|(v, _, _)| *v == vertex)
                .map(|(_, _, s)| s),
            range,
        );
        // Native state files are named relative to the directory of `chk-<id>`.
        match self.path.parent() {
            Some(root) => state.with_root(root),
            None => state,
        }
    }

    /// Split positions and watermark progress of source `vertex`, by split id.
    pub(crate) fn source_state(&self, vertex: VertexId) -> (SplitPositions, SplitWatermarks) {
        let mut positions = HashMap::new();
        let mut watermarks = HashMap::new();
        for s in self
            .tasks
            .iter()
            .flat_map(|t| t.sources.iter())
            .filter(|s| s.vertex == vertex)
        {
            positions.extend(s.positions.iter().cloned());
            watermarks.extend(s.watermarks.iter().map(|(id, t, idle)| {
                let p = SplitProgress {
                    max_timestamp: *t,
                    idle: *idle,
                    subtask_watermark: s.watermark,
                };
                (id.clone(), p)
            }));
        }
        (positions, watermarks)
    }

    /// Committables of sink `vertex` by former subtask, `(subtask, committables in
    /// order)`; the sink decides which new subtask commits which
    /// ([`brook_core::sink::Sink::restored_committables`]).
    pub(crate) fn sink_committables(&self, vertex: VertexId) -> Vec<(u32, Vec<Vec<u8>>)> {
        self.tasks
            .iter()
            .flat_map(|t| t.sinks.iter())
            .filter(|(v, _, _)| *v == vertex)
            .map(|(_, j, c)| (*j, c.clone()))
            .collect()
    }
}

/// Complete checkpoints in `dir`, newest first, as `(id, path)`.
fn checkpoint_dirs(dir: &Path) -> Vec<(CheckpointId, PathBuf)> {
    let mut v: Vec<(CheckpointId, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix("chk-")?.parse().ok()?;
            Some((id, e.path()))
        })
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v
}

/// The largest checkpoint id used in `dir` (complete or not), 0 for none: a new run
/// continues after it and never overwrites a checkpoint.
pub(crate) fn newest_id(dir: &Path) -> CheckpointId {
    checkpoint_dirs(dir).first().map_or(0, |(id, _)| *id)
}

/// The newest complete checkpoint in `dir`; incomplete or damaged ones are skipped
/// with a warning.
///
/// # Errors
/// [`CheckpointError::NoneComplete`] when there is none.
pub fn latest_complete(dir: &Path) -> Result<RestoredCheckpoint, CheckpointError> {
    for (_, path) in checkpoint_dirs(dir) {
        match RestoredCheckpoint::load(&path) {
            Ok(c) => return Ok(c),
            Err(e) => {
                warn!(checkpoint = %path.display(), error = %e, "skipping an incomplete or damaged checkpoint")
            }
        }
    }
    Err(CheckpointError::NoneComplete(dir.to_path_buf()))
}

/// Runs checkpoints for a job until `stop` is set or a task ends.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_coordinator(
    control: Arc<CheckpointControl>,
    acks: Receiver<Ack>,
    config: CheckpointConfig,
    first_id: CheckpointId,
    tasks: usize,
    job: String,
    vertices: Vec<String>,
    max_parallelism: u32,
    clock: SharedClock,
    stop: Arc<AtomicBool>,
    stats: Arc<crate::metrics::CheckpointStats>,
) {
    let mut id = first_id;
    let mut final_attempts = 0;
    let stopped = || stop.load(Ordering::SeqCst) || control.task_ended.load(Ordering::SeqCst);
    loop {
        // Sleep in steps so a finished job is not kept waiting and a savepoint or the
        // final checkpoint starts at once.
        let mut slept = 0;
        while slept < config.interval_ms
            && !stopped()
            && !control.savepoint_requested()
            && !control.all_sources_ended()
        {
            let step = (config.interval_ms - slept).min(20);
            std::thread::sleep(Duration::from_millis(step as u64));
            slept += step;
        }
        let savepoint = control.take_savepoint_request();
        if stopped() {
            if let Some(s) = savepoint {
                let _ = s.done.send(Err("the job is ending".into()));
            }
            return;
        }
        if let Some(parent) = savepoint.as_ref().and_then(|s| s.parent.as_ref()) {
            // A savepoint is a checkpoint in a directory of the user's, never deleted
            // by retention.
            control
                .savepoint_dirs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, parent.join(format!("savepoint-{id}")));
        }
        let dir = control.checkpoint_dir(id);
        if let Err(e) = fs::create_dir_all(&dir) {
            warn!(checkpoint = id, error = %e, "cannot create the checkpoint directory");
            return;
        }
        let is_final = control.all_sources_ended();
        if is_final {
            final_attempts += 1;
            control.final_id.store(id, Ordering::SeqCst);
        }
        let started = clock.now_ms();
        control.requested.store(id, Ordering::SeqCst);
        let mut files = Vec::with_capacity(tasks);
        let mut failure = None;
        while files.len() < tasks && failure.is_none() {
            if stopped() {
                failure = Some("the job is ending".to_string());
                break;
            }
            if clock.now_ms() - started > config.timeout_ms {
                failure = Some(format!("not complete after {} ms", config.timeout_ms));
                break;
            }
            match acks.recv_timeout(Duration::from_millis(20)) {
                Ok(a) if a.id == id => match a.result {
                    Ok(f) => files.push(f),
                    Err(e) => failure = Some(e),
                },
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let size: u64 = files.iter().map(|f| f.size).sum();
        let done = failure.is_none() && {
            let meta = Metadata {
                format_version: FORMAT_VERSION,
                job: job.clone(),
                checkpoint_id: id,
                timestamp_ms: started,
                max_parallelism,
                vertices: vertices.clone(),
                files,
            };
            match write_metadata(&dir, &meta) {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e.to_string());
                    false
                }
            }
        };
        if done {
            // Before the savepoint's waiter hears of it: a stop-with-savepoint cancels
            // the job right after, and the tasks commit what they see completed.
            control.completed.store(id, Ordering::SeqCst);
        }
        if let Some(s) = savepoint {
            let _ = s.done.send(match &failure {
                None => Ok(dir.clone()),
                Some(f) => Err(f.clone()),
            });
        }
        if done {
            let now = clock.now_ms();
            let ms = now - started;
            stats.completed.fetch_add(1, Ordering::Relaxed);
            stats.last_id.store(id, Ordering::Relaxed);
            stats
                .last_duration_ms
                .store(u64::try_from(ms).unwrap_or(0), Ordering::Relaxed);
            stats.last_size_bytes.store(size, Ordering::Relaxed);
            stats.last_completed_ms.store(now, Ordering::Relaxed);
            info!(checkpoint = id, ms, "checkpoint complete");
            for (old, path) in checkpoint_dirs(&control.dir)
                .into_iter()
                .skip(config.retain)
            {
                if old < id {
                    let _ = fs::remove_dir_all(path);
                }
            }
            remove_unreferenced_shared_files(&control.dir);
            if is_final {
                // The sources end now; no later checkpoint could complete.
                while !stopped() {
                    if let Some(s) = control.take_savepoint_request() {
                        let _ = s
                            .done
                            .send(Err("the job has reached the end of its input".into()));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            warn!(
                checkpoint = id,
                reason = failure.as_deref().unwrap_or("?"),
                "checkpoint aborted"
            );
            let _ = fs::remove_dir_all(&dir);
            if is_final && final_attempts >= FINAL_ATTEMPTS {
                warn!(
                    attempts = final_attempts,
                    "the final checkpoint failed: the job ends without one (its last output is committed, but a restore of an earlier checkpoint would write it again)"
                );
                control.final_abandoned.store(true, Ordering::SeqCst);
                return;
            }
            if stopped() {
                return;
            }
        }
        id += 1;
    }
}

/// Deletes the files of the shared directory that no complete checkpoint in `root`
/// lists (their checkpoints were dropped by retention, or were never complete). Runs
/// between checkpoints and after the job's tasks ended, so no checkpoint in progress
/// is writing there.
pub(crate) fn remove_unreferenced_shared_files(root: &Path) {
    let shared = root.join(SHARED);
    let Ok(entries) = fs::read_dir(&shared) else {
        return;
    };
    let mut live = std::collections::HashSet::new();
    for (_, path) in checkpoint_dirs(root) {
        let Ok(text) = fs::read_to_string(path.join(METADATA)) else {
            continue;
        };
        match serde_json::from_str::<Metadata>(&text) {
            Ok(meta) => live.extend(meta.files.into_iter().flat_map(|f| f.shared)),
            // A damaged metadata file: keep everything rather than guess.
            Err(_) => return,
        }
    }
    for entry in entries.flatten() {
        let name = format!("{SHARED}/{}", entry.file_name().to_string_lossy());
        if !live.contains(&name) {
            // Best effort: a file that stays is tried again after the next checkpoint.
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn write_metadata(dir: &Path, meta: &Metadata) -> Result<(), CheckpointError> {
    let tmp = dir.join("_metadata.tmp");
    let text = serde_json::to_vec_pretty(meta).map_err(|e| CheckpointError::Corrupt {
        path: tmp.clone(),
        reason: e.to_string(),
    })?;
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(&text).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fsync_dir(dir)?;
    let path = dir.join(METADATA);
    fs::rename(&tmp, &path).map_err(io(&path))?;
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(version: u32, body: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn a_version_2_task_file_restores_its_sources_from_the_minimum() {
        let v2 = TaskSnapshotV2 {
            operators: Vec::new(),
            sources: vec![SourceSnapshotV2 {
                vertex: 0,
                positions: vec![("f".into(), vec![1, 2])],
                watermarks: vec![("f".into(), Some(12), true)],
            }],
            sinks: vec![(3, 0, vec![vec![9]])],
        };
        let snap = decode_task_file(&file(2, &bincode::serialize(&v2).unwrap())).unwrap();
        assert_eq!(snap.sources.len(), 1);
        let s = &snap.sources[0];
        assert_eq!(s.positions, vec![("f".to_string(), vec![1, 2])]);
        assert_eq!(s.watermarks, vec![("f".to_string(), Some(12), true)]);
        assert_eq!(s.watermark, Millis::MIN);
        assert_eq!(snap.sinks, vec![(3, 0, vec![vec![9]])]);
    }

    #[test]
    fn the_current_format_round_trips_and_unknown_versions_are_refused() {
        let snap = TaskSnapshot {
            sources: vec![SourceSnapshot {
                vertex: 1,
                positions: Vec::new(),
                watermarks: vec![("f".into(), Some(12), true)],
                watermark: 11,
            }],
            ..TaskSnapshot::default()
        };
        let body = bincode::serialize(&snap).unwrap();
        let back = decode_task_file(&file(FORMAT_VERSION, &body)).unwrap();
        assert_eq!(back.sources[0].watermark, 11);
        let e = decode_task_file(&file(1, &body)).unwrap_err();
        assert!(
            e.contains("format version 1, this brook reads 2 to 3"),
            "{e}"
        );
    }
}
