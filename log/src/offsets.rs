//! Durable committed offsets of consumer groups.
//!
//! An [`OffsetStore`] keeps one JSON file per group in its directory (`<data-dir>/groups`),
//! named `<stem>.json`, where the stem is the group id with each byte outside
//! `[a-zA-Z0-9._-]` written as `%XX` (`brook_core::names::group_file_stem`: group ids
//! take any characters, as Kafka's; `orders:v2` is `orders%3Av2.json`):
//!
//! ```json
//! {"version":1,"offsets":{"orders":{"0":12,"1":7}}}
//! ```
//!
//! Every [`OffsetStore::commit`] rewrites the group's whole file atomically — write
//! `<stem>.json.tmp`, fsync it, rename it over `<stem>.json`, fsync the directory — before
//! returning, so an acknowledged commit survives a crash and a crash never leaves a half-written
//! file in place. Stray `.json.tmp` files from an interrupted commit are removed by
//! [`OffsetStore::open`]. A file that cannot be parsed is reported as an error naming it; it is
//! never skipped.
//!
//! Group ids must already be validated by the caller
//! (`brook_core::names::validate_group_id`); debug builds assert it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use brook_core::names::{group_file_stem, group_from_file_stem, validate_group_id};

use crate::group::TopicPartition;

/// The version written in, and accepted from, offsets files.
const FORMAT_VERSION: u64 = 1;
/// Suffix of a group's offsets file.
const FILE_SUFFIX: &str = ".json";
/// Suffix of the temporary file a commit writes before renaming it.
const TMP_SUFFIX: &str = ".json.tmp";

/// An error reading or writing committed offsets.
#[derive(Debug, Error)]
pub enum OffsetStoreError {
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `fsync`, `rename`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// An offsets file is not valid JSON of the expected shape.
    #[error("corrupt offsets file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An offsets file was written by a newer (or unknown) format version.
    #[error("offsets file {path} has format version {version}; this brook reads version 1 only")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found in it.
        version: u64,
    },
}

/// The on-disk shape of one group's file.
#[derive(Debug, Serialize, Deserialize)]
struct OffsetsFile {
    version: u64,
    /// topic → partition → committed offset. serde_json writes the partition keys as strings.
    offsets: BTreeMap<String, BTreeMap<u32, u64>>,
}

/// Reads only the version, so that a file of another version is reported as such rather
/// than as corrupt.
#[derive(Debug, Deserialize)]
struct VersionProbe {
    version: u64,
}

/// Committed offsets of every group, persisted under one directory.
#[derive(Debug)]
pub struct OffsetStore {
    dir: PathBuf,
    groups: BTreeMap<String, BTreeMap<TopicPartition, u64>>,
}

impl OffsetStore {
    /// Opens the store in `dir`, creating the directory if needed, removing stray
    /// `<group>.json.tmp` files and loading every `<group>.json` file. Other files are left
    /// alone. A file that cannot be parsed fails the open with
    /// [`OffsetStoreError::Corrupt`] or [`OffsetStoreError::UnsupportedVersion`].
    pub fn open(dir: &Path) -> Result<Self, OffsetStoreError> {
        fs::create_dir_all(dir).map_err(io_error("create directory", dir))?;
        let mut groups = BTreeMap::new();
        let mut removed_tmp = false;
        for entry in fs::read_dir(dir).map_err(io_error("read directory", dir))? {
            let entry = entry.map_err(io_error("read directory", dir))?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(io_error("stat", &path))?;
            if file_type.is_dir() {
                continue;
            }
            // Names that are not UTF-8 were not written by this store.
            let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            if name.ends_with(TMP_SUFFIX) {
                fs::remove_file(&path).map_err(io_error("remove", &path))?;
                removed_tmp = true;
                continue;
            }
            // Names that are not group files were not written by this store either.
            let Some(group) = name
                .strip_suffix(FILE_SUFFIX)
                .and_then(group_from_file_stem)
            else {
                continue;
            };
            let offsets = read_group_file(&path)?;
            groups.insert(group.to_owned(), offsets);
        }
        if removed_tmp {
            sync_dir(dir)?;
        }
        Ok(OffsetStore {
            dir: dir.to_path_buf(),
            groups,
        })
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Merges `offsets` into `group`'s committed offsets (a later entry for the same
    /// partition wins) and durably writes the group's file before returning.
    ///
    /// A commit that changes nothing (no offsets, or the same values again) writes nothing.
    /// On error the in-memory offsets are unchanged; the commit may or may not have reached
    /// the disk.
    pub fn commit(
        &mut self,
        group: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<(), OffsetStoreError> {
        debug_assert_group_name(group);
        let current = self.groups.get(group);
        let unchanged = offsets
            .iter()
            .all(|(tp, offset)| current.and_then(|committed| committed.get(tp)) == Some(offset));
        if unchanged {
            return Ok(());
        }
        let mut merged = current.cloned().unwrap_or_default();
        for (tp, offset) in offsets {
            merged.insert(tp.clone(), *offset);
        }
        self.write_group(group, &merged)?;
        self.groups.insert(group.to_owned(), merged);
        Ok(())
    }

    /// The offset `group` committed for `tp`, if any.
    pub fn committed(&self, group: &str, tp: &TopicPartition) -> Option<u64> {
        self.groups.get(group)?.get(tp).copied()
    }

    /// Every offset `group` committed, sorted by topic and partition (empty for an unknown
    /// group).
    pub fn group_offsets(&self, group: &str) -> BTreeMap<TopicPartition, u64> {
        self.groups.get(group).cloned().unwrap_or_default()
    }

    /// The groups that have a file in the store, sorted.
    pub fn groups(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// Removes `topic`'s offsets from every group, durably. A group left without offsets
    /// has its file removed and is no longer listed by [`groups`](Self::groups).
    pub fn delete_topic(&mut self, topic: &str) -> Result<(), OffsetStoreError> {
        let affected: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, offsets)| offsets.keys().any(|tp| tp.topic == topic))
            .map(|(group, _)| group.clone())
            .collect();
        for group in affected {
            let mut remaining = self.group_offsets(&group);
            remaining.retain(|tp, _| tp.topic != topic);
            if remaining.is_empty() {
                self.delete_group(&group)?;
            } else {
                self.write_group(&group, &remaining)?;
                self.groups.insert(group, remaining);
            }
        }
        Ok(())
    }

    /// Removes `group`'s offsets of `partitions`, durably (Kafka's OffsetDelete); a group
    /// left without offsets has its file removed. Partitions without an offset are
    /// skipped; nothing to remove writes nothing.
    pub fn delete_offsets(
        &mut self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<(), OffsetStoreError> {
        debug_assert_group_name(group);
        let mut remaining = self.group_offsets(group);
        let before = remaining.len();
        for tp in partitions {
            remaining.remove(tp);
        }
        if remaining.len() == before {
            return Ok(());
        }
        if remaining.is_empty() {
            self.delete_group(group)?;
        } else {
            self.write_group(group, &remaining)?;
            self.groups.insert(group.to_owned(), remaining);
        }
        Ok(())
    }

    /// Removes all of `group`'s offsets and its file, durably; returns whether the group had
    /// any state.
    pub fn delete_group(&mut self, group: &str) -> Result<bool, OffsetStoreError> {
        debug_assert_group_name(group);
        let path = self.group_path(group);
        let existed = match fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(OffsetStoreError::Io {
                    op: "remove",
                    path,
                    source: e,
                })
            }
        };
        if existed {
            sync_dir(&self.dir)?;
        }
        Ok(self.groups.remove(group).is_some() || existed)
    }

    fn group_path(&self, group: &str) -> PathBuf {
        self.dir
            .join(format!("{}{FILE_SUFFIX}", group_file_stem(group)))
    }

    /// Atomically replaces `group`'s file with `offsets`.
    fn write_group(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, u64>,
    ) -> Result<(), OffsetStoreError> {
        let mut file = OffsetsFile {
            version: FORMAT_VERSION,
            offsets: BTreeMap::new(),
        };
        for (tp, offset) in offsets {
            file.offsets
                .entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition, *offset);
        }
        let path = self.group_path(group);
        let tmp = self
            .dir
            .join(format!("{}{TMP_SUFFIX}", group_file_stem(group)));
        let mut bytes = serde_json::to_vec(&file).map_err(|e| OffsetStoreError::Io {
            op: "encode",
            path: path.clone(),
            source: e.into(),
        })?;
        bytes.push(b'\n');
        let result = write_atomically(&self.dir, &tmp, &path, &bytes);
        if result.is_err() {
            // Best effort: a leftover is removed by the next open anyway.
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// Writes `bytes` to `tmp`, fsyncs it, renames it to `path` and fsyncs `dir`.
fn write_atomically(
    dir: &Path,
    tmp: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<(), OffsetStoreError> {
    let mut file = File::create(tmp).map_err(io_error("create", tmp))?;
    file.write_all(bytes).map_err(io_error("write", tmp))?;
    file.sync_all().map_err(io_error("fsync", tmp))?;
    drop(file);
    fs::rename(tmp, path).map_err(io_error("rename", tmp))?;
    sync_dir(dir)
}

/// Loads one group's file.
fn read_group_file(path: &Path) -> Result<BTreeMap<TopicPartition, u64>, OffsetStoreError> {
    let bytes = fs::read(path).map_err(io_error("read", path))?;
    let corrupt = |e: serde_json::Error| OffsetStoreError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let probe: VersionProbe = serde_json::from_slice(&bytes).map_err(corrupt)?;
    if probe.version != FORMAT_VERSION {
        return Err(OffsetStoreError::UnsupportedVersion {
            path: path.to_path_buf(),
            version: probe.version,
        });
    }
    let file: OffsetsFile = serde_json::from_slice(&bytes).map_err(corrupt)?;
    let mut offsets = BTreeMap::new();
    for (topic, partitions) in file.offsets {
        for (partition, offset) in partitions {
            offsets.insert(TopicPartition::new(topic.clone(), partition), offset);
        }
    }
    Ok(offsets)
}

/// Makes renames and removals in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), OffsetStoreError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("fsync directory", dir))?;
    }
    #[cfg(not(unix))]
    {
        // Directories cannot be opened for fsync on this platform; renames are durable
        // through the file system's own journal.
        let _ = dir;
    }
    Ok(())
}

fn io_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> OffsetStoreError + 'a {
    move |source| OffsetStoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn debug_assert_group_name(group: &str) {
    debug_assert!(
        validate_group_id(group).is_ok(),
        "group id {group:?} is not valid; callers must validate it"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tp(topic: &str, partition: u32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn file_json(dir: &Path, group: &str) -> serde_json::Value {
        let text = fs::read_to_string(dir.join(format!("{group}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn commit_and_reopen_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("groups");
        let mut store = OffsetStore::open(&dir).unwrap();
        assert!(dir.is_dir(), "open creates the directory");
        assert!(store.groups().is_empty());
        store
            .commit("billing", &[(tp("orders", 0), 12), (tp("orders", 1), 7)])
            .unwrap();
        store
            .commit("billing", &[(tp("orders", 1), 9), (tp("payments", 10), 3)])
            .unwrap();
        assert_eq!(store.committed("billing", &tp("orders", 0)), Some(12));
        assert_eq!(store.committed("billing", &tp("orders", 1)), Some(9));
        assert_eq!(store.committed("billing", &tp("orders", 2)), None);
        assert_eq!(store.committed("nobody", &tp("orders", 0)), None);
        drop(store);

        let store = OffsetStore::open(&dir).unwrap();
        assert_eq!(store.dir(), dir.as_path());
        assert_eq!(store.groups(), vec!["billing".to_owned()]);
        assert_eq!(
            store.group_offsets("billing"),
            BTreeMap::from([
                (tp("orders", 0), 12),
                (tp("orders", 1), 9),
                (tp("payments", 10), 3)
            ])
        );
        assert!(store.group_offsets("nobody").is_empty());
    }

    /// Group ids take any characters, as Kafka's: the file name escapes the bytes a
    /// file name or a path could not hold, and reopening gives the id back.
    #[test]
    fn group_ids_with_any_characters_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("groups");
        let mut store = OffsetStore::open(&dir).unwrap();
        let ids = ["orders:v2", "team a/../..", "ä%41", "plain"];
        for (n, id) in ids.iter().enumerate() {
            store.commit(id, &[(tp("orders", 0), n as u64)]).unwrap();
        }
        assert!(dir.join("orders%3Av2.json").is_file());
        assert!(dir.join("team%20a%2F..%2F...json").is_file());
        assert!(dir.join("%C3%A4%2541.json").is_file());
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            ids.len(),
            "nothing outside the directory"
        );
        // Not written by the store (a plain byte escaped): left alone, not a group.
        fs::write(dir.join("%70lain.json"), "{}").unwrap();
        drop(store);

        let store = OffsetStore::open(&dir).unwrap();
        let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(store.groups(), want);
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(
                store.committed(id, &tp("orders", 0)),
                Some(n as u64),
                "{id}"
            );
        }
    }

    #[test]
    fn file_format_is_documented_json() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store
            .commit("g", &[(tp("topic", 1), 7), (tp("topic", 0), 12)])
            .unwrap();
        assert_eq!(
            file_json(tmp.path(), "g"),
            json!({"version": 1, "offsets": {"topic": {"0": 12, "1": 7}}})
        );
        // A hand-written file in the documented format loads.
        fs::write(
            tmp.path().join("h.json"),
            r#"{"version":1,"offsets":{"topic":{"0":12,"1":7}}}"#,
        )
        .unwrap();
        let store = OffsetStore::open(tmp.path()).unwrap();
        assert_eq!(store.group_offsets("h"), store.group_offsets("g"));
    }

    #[test]
    fn groups_keep_separate_offsets_for_one_topic() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store.commit("a", &[(tp("t", 0), 5)]).unwrap();
        store.commit("b", &[(tp("t", 0), 100)]).unwrap();
        store.commit("a", &[(tp("t", 0), 6)]).unwrap();
        let store = OffsetStore::open(tmp.path()).unwrap();
        assert_eq!(store.groups(), vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(store.committed("a", &tp("t", 0)), Some(6));
        assert_eq!(store.committed("b", &tp("t", 0)), Some(100));
    }

    #[test]
    fn empty_or_repeated_commit_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store.commit("g", &[]).unwrap();
        assert!(store.groups().is_empty());
        assert!(!tmp.path().join("g.json").exists());
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        // Remove the file behind the store's back: an unchanged commit does not rewrite it.
        fs::remove_file(tmp.path().join("g.json")).unwrap();
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        assert!(!tmp.path().join("g.json").exists());
        store.commit("g", &[(tp("t", 0), 2)]).unwrap();
        assert_eq!(
            file_json(tmp.path(), "g"),
            json!({"version": 1, "offsets": {"t": {"0": 2}}})
        );
    }

    #[test]
    fn corrupt_file_is_reported_with_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("good.json"),
            r#"{"version":1,"offsets":{}}"#,
        )
        .unwrap();
        let bad = tmp.path().join("bad.json");
        for contents in [
            "{\"version\":1,\"offsets\":{\"t\":{\"0\":",
            "",
            "[]",
            r#"{"offsets":{}}"#,
            r#"{"version":1,"offsets":{"t":{"zero":1}}}"#,
            r#"{"version":1,"offsets":{"t":{"0":-1}}}"#,
        ] {
            fs::write(&bad, contents).unwrap();
            let err = OffsetStore::open(tmp.path()).unwrap_err();
            assert!(
                matches!(&err, OffsetStoreError::Corrupt { path, .. } if path == &bad),
                "{err}"
            );
            assert!(err.to_string().contains("bad.json"), "{err}");
        }
        fs::write(&bad, r#"{"version":2,"offsets":{}}"#).unwrap();
        let err = OffsetStore::open(tmp.path()).unwrap_err();
        assert!(
            matches!(err, OffsetStoreError::UnsupportedVersion { version: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("bad.json"), "{err}");
    }

    #[test]
    fn stray_tmp_files_are_removed_on_open() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        drop(store);
        // A crash mid-commit leaves a half-written tmp file next to the old file.
        fs::write(tmp.path().join("g.json.tmp"), "{\"version\":1,\"off").unwrap();
        fs::write(tmp.path().join("h.json.tmp"), "").unwrap();
        fs::write(tmp.path().join("README"), "not ours").unwrap();
        fs::create_dir(tmp.path().join("sub.json")).unwrap();
        fs::write(tmp.path().join("..json"), "not a group").unwrap();
        let store = OffsetStore::open(tmp.path()).unwrap();
        assert!(!tmp.path().join("g.json.tmp").exists());
        assert!(!tmp.path().join("h.json.tmp").exists());
        assert!(
            tmp.path().join("README").exists(),
            "unrelated files are left alone"
        );
        assert_eq!(store.groups(), vec!["g".to_owned()]);
        assert_eq!(store.committed("g", &tp("t", 0)), Some(1));
    }

    #[test]
    fn commit_leaves_no_tmp_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        let names: Vec<String> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["g.json".to_owned()]);
    }

    #[test]
    fn delete_topic_is_persisted() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store
            .commit("a", &[(tp("old", 0), 1), (tp("keep", 0), 2)])
            .unwrap();
        store
            .commit("b", &[(tp("old", 0), 3), (tp("old", 1), 4)])
            .unwrap();
        store.commit("c", &[(tp("keep", 0), 5)]).unwrap();
        store.delete_topic("old").unwrap();
        store.delete_topic("never-existed").unwrap();
        for store in [&store, &OffsetStore::open(tmp.path()).unwrap()] {
            assert_eq!(
                store.group_offsets("a"),
                BTreeMap::from([(tp("keep", 0), 2)])
            );
            assert!(store.group_offsets("b").is_empty());
            assert_eq!(
                store.group_offsets("c"),
                BTreeMap::from([(tp("keep", 0), 5)])
            );
            assert_eq!(store.groups(), vec!["a".to_owned(), "c".to_owned()]);
        }
        assert!(!tmp.path().join("b.json").exists());
    }

    #[test]
    fn delete_offsets_is_persisted_and_the_last_one_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(dir.path()).unwrap();
        store
            .commit("billing", &[(tp("orders", 0), 5), (tp("orders", 1), 7)])
            .unwrap();
        store
            .delete_offsets("billing", &[tp("orders", 0), tp("other", 3)])
            .unwrap();
        let reopened = OffsetStore::open(dir.path()).unwrap();
        assert_eq!(reopened.committed("billing", &tp("orders", 0)), None);
        assert_eq!(reopened.committed("billing", &tp("orders", 1)), Some(7));
        store.delete_offsets("billing", &[tp("orders", 1)]).unwrap();
        assert!(store.groups().is_empty());
        assert!(OffsetStore::open(dir.path()).unwrap().groups().is_empty());
    }

    #[test]
    fn delete_group_removes_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(tmp.path()).unwrap();
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        assert!(store.delete_group("g").unwrap());
        assert!(!store.delete_group("g").unwrap());
        assert!(store.groups().is_empty());
        assert!(OffsetStore::open(tmp.path()).unwrap().groups().is_empty());
    }

    #[test]
    fn failed_commit_changes_nothing_in_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("groups");
        let mut store = OffsetStore::open(&dir).unwrap();
        store.commit("g", &[(tp("t", 0), 1)]).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let err = store.commit("g", &[(tp("t", 0), 2)]).unwrap_err();
        assert!(
            matches!(err, OffsetStoreError::Io { op: "create", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("g.json.tmp"), "{err}");
        assert_eq!(store.committed("g", &tp("t", 0)), Some(1));
    }
}
