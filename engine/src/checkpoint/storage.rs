//! Checkpoints on disk: the `_metadata` file written last, finding the newest complete
//! checkpoint, reading one back for a restore, and deleting shared files no retained
//! checkpoint lists.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use brook_core::checkpoint::{CheckpointId, RestoredState};
use brook_core::keys::KeyGroupRange;
use brook_core::time::{Millis, Watermark};
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::snapshot::{
    read_task_file, FileEntry, TaskSnapshot, FORMAT_VERSION, OLDEST_FORMAT_VERSION,
};
use super::{io, CheckpointError, SHARED};
use crate::ids::VertexId;

const METADATA: &str = "_metadata";

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Metadata {
    pub(super) format_version: u32,
    pub(super) job: String,
    pub(super) checkpoint_id: CheckpointId,
    pub(super) timestamp_ms: Millis,
    pub(super) max_parallelism: u32,
    pub(super) vertices: Vec<String>,
    pub(super) files: Vec<FileEntry>,
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

    /// The watermark a restored input task of `vertex` resumes from: the smallest its
    /// former subtasks had at the barrier (their inputs' combined watermarks; equal
    /// behind an all-to-all exchange, and the smallest is the one no former subtask
    /// had passed after a rescale); `None` when the checkpoint has none.
    pub(crate) fn input_watermark(&self, vertex: VertexId) -> Option<Watermark> {
        self.tasks
            .iter()
            .flat_map(|t| t.inputs.iter())
            .filter(|(v, _)| *v == vertex)
            .map(|(_, w)| Watermark(*w))
            .min()
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

/// The directory of checkpoint `id` under the checkpoints directory `root`.
pub(super) fn checkpoint_path(root: &Path, id: CheckpointId) -> PathBuf {
    root.join(format!("chk-{id}"))
}

/// Complete checkpoints in `dir`, newest first, as `(id, path)`.
pub(super) fn checkpoint_dirs(dir: &Path) -> Vec<(CheckpointId, PathBuf)> {
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

/// A complete checkpoint as its `_metadata` tells: the history of a job's checkpoints
/// that outlives its processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Its id.
    pub id: CheckpointId,
    /// When it was triggered (ms since the epoch, by the job's clock).
    pub timestamp_ms: Millis,
    /// Bytes of its task files (state shared with earlier checkpoints not counted).
    pub size_bytes: u64,
    /// Bytes of everything it consists of: its directory and every shared file it
    /// refers to (what a restore reads; Flink's full checkpoint data size).
    pub full_size_bytes: u64,
    /// Its directory.
    pub path: PathBuf,
}

/// The checkpoints of `dir` with a readable `_metadata` (complete ones), newest
/// first; an incomplete or damaged one is left out. Reads the metadata only, not the
/// task files (and the sizes of the files it lists).
pub fn stored_checkpoints(dir: &Path) -> Vec<StoredCheckpoint> {
    checkpoint_dirs(dir)
        .into_iter()
        .filter_map(|(_, path)| {
            let text = fs::read_to_string(path.join(METADATA)).ok()?;
            let meta: Metadata = serde_json::from_str(&text).ok()?;
            let shared = shared_files(&meta.files);
            let (full_size_bytes, _) =
                checkpoint_sizes(dir, &path, &shared, &std::collections::HashSet::new());
            Some(StoredCheckpoint {
                id: meta.checkpoint_id,
                timestamp_ms: meta.timestamp_ms,
                size_bytes: meta.files.iter().map(|f| f.size).sum(),
                full_size_bytes,
                path,
            })
        })
        .collect()
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

pub(super) fn write_metadata(dir: &Path, meta: &Metadata) -> Result<(), CheckpointError> {
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

/// The shared files the task files of one checkpoint refer to.
pub(super) fn shared_files(files: &[FileEntry]) -> std::collections::HashSet<String> {
    files
        .iter()
        .flat_map(|f| f.shared.iter().cloned())
        .collect()
}

/// The shared files of the newest complete checkpoint in `root` older than `id`
/// (empty without one): what a new checkpoint's files are new against.
pub(super) fn shared_files_before(
    root: &Path,
    id: CheckpointId,
) -> std::collections::HashSet<String> {
    checkpoint_dirs(root)
        .into_iter()
        .filter(|(older, _)| *older < id)
        .find_map(|(_, path)| {
            let text = fs::read_to_string(path.join(METADATA)).ok()?;
            let meta: Metadata = serde_json::from_str(&text).ok()?;
            Some(shared_files(&meta.files))
        })
        .unwrap_or_default()
}

/// Bytes of every file under `path` (0 where unreadable).
fn tree_size(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| tree_size(&e.path()))
            .sum(),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// The sizes of a checkpoint written to `dir` (under `root`) whose shared files are
/// `shared`: `(full, incremental)` bytes, as Flink's "full checkpoint data size" and
/// "checkpointed data size". Full: its directory (task files, metadata, private
/// native files) and every shared file it refers to; incremental: its directory and
/// the shared files that `previous` (the checkpoint before it) did not refer to.
pub(super) fn checkpoint_sizes(
    root: &Path,
    dir: &Path,
    shared: &std::collections::HashSet<String>,
    previous: &std::collections::HashSet<String>,
) -> (u64, u64) {
    let own = tree_size(dir);
    let (mut all, mut new) = (0, 0);
    for name in shared {
        let size = fs::metadata(root.join(name)).map_or(0, |m| m.len());
        all += size;
        if !previous.contains(name) {
            new += size;
        }
    }
    (own + all, own + new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, shared: &[&str]) -> FileEntry {
        FileEntry {
            name: name.into(),
            size: 0,
            crc32c: 0,
            shared: shared.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_checkpoint_is_full_with_every_shared_file_and_incremental_with_the_new_ones() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        fs::create_dir_all(root.join(SHARED)).expect("shared");
        fs::write(root.join("shared/a.sst"), vec![0; 1000]).expect("a");
        fs::write(root.join("shared/b.sst"), vec![0; 300]).expect("b");
        let chk = |id: u64, files: Vec<FileEntry>| {
            let dir = checkpoint_path(root, id);
            fs::create_dir_all(dir.join("task-op1")).expect("dir");
            fs::write(dir.join("task.state"), vec![0; 40]).expect("task file");
            fs::write(dir.join("task-op1/MANIFEST"), vec![0; 10]).expect("private");
            let meta = Metadata {
                format_version: FORMAT_VERSION,
                job: "j".into(),
                checkpoint_id: id,
                timestamp_ms: 0,
                max_parallelism: 128,
                vertices: Vec::new(),
                files,
            };
            write_metadata(&dir, &meta).expect("metadata");
            let own = tree_size(&dir);
            (dir, own)
        };
        let (dir1, own1) = chk(1, vec![entry("task.state", &["shared/a.sst"])]);
        assert!(own1 > 50, "task file, private file and metadata: {own1}");
        let first = shared_files(&[entry("task.state", &["shared/a.sst"])]);
        // The first checkpoint: everything is new.
        let before = shared_files_before(root, 1);
        assert!(before.is_empty());
        assert_eq!(
            checkpoint_sizes(root, &dir1, &first, &before),
            (own1 + 1000, own1 + 1000)
        );
        // The second shares a.sst with the first and adds b.sst.
        let files2 = vec![entry("task.state", &["shared/a.sst", "shared/b.sst"])];
        let (dir2, own2) = chk(2, files2.clone());
        let before = shared_files_before(root, 2);
        assert_eq!(before, first);
        assert_eq!(
            checkpoint_sizes(root, &dir2, &shared_files(&files2), &before),
            (own2 + 1300, own2 + 300)
        );
    }
}
