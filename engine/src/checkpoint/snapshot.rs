//! What one task writes for a checkpoint ([`TaskSnapshot`]) and its task file: magic,
//! format version and bincode body, older versions migrated on read.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use brook_core::checkpoint::{SnapshotStorage, StateSnapshot};
use brook_core::time::Millis;
use serde::{Deserialize, Serialize};

use super::{io, CheckpointError, SHARED};
use crate::ids::VertexId;

/// Version of the task-file and metadata formats.
/// 2: operator state may hold native (RocksDB) state files.
/// 3: a source subtask's snapshot holds the watermark it had handed out, and an input
/// task's the watermark of its inputs (version 2 files are still read: see
/// `migrate_v2`).
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this brook reads.
pub(super) const OLDEST_FORMAT_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"BROOKCP1";

/// What one task wrote for a checkpoint: the state of every operator of its chain, its
/// source positions and watermarks, its sinks' committables.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct TaskSnapshot {
    pub(crate) operators: Vec<(VertexId, u32, StateSnapshot)>,
    pub(crate) sources: Vec<SourceSnapshot>,
    pub(crate) sinks: Vec<(VertexId, u32, Vec<Vec<u8>>)>,
    /// (head vertex, combined watermark of the task's inputs at the barrier, ms) of an
    /// input task: where a restored task of that vertex resumes (semantics.md §4).
    pub(crate) inputs: Vec<(VertexId, Millis)>,
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
    pub(super) root: PathBuf,
    /// `chk-<id>/<task>`, relative to `root`.
    pub(super) prefix: PathBuf,
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
        inputs: Vec::new(),
        storage: None,
        declined: None,
    }
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

fn file_name(task: &str) -> String {
    let mut s = file_stem(task);
    s.push_str(".state");
    s
}

/// `task` with every character but letters, digits, `-` and `_` replaced by `_`.
pub(super) fn file_stem(task: &str) -> String {
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

pub(super) fn write_task_file(
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

pub(super) fn read_task_file(
    path: &Path,
    entry: &FileEntry,
) -> Result<TaskSnapshot, CheckpointError> {
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
