//! Which keyed state backend a job's stateful operators use (Flink's
//! `state.backend.type`): in memory, or RocksDB in a working directory.
//!
//! A RocksDB working directory is scratch space, as Flink's local RocksDB directory:
//! durability comes from checkpoints, so every run starts from empty instances (and a
//! restore fills them from the checkpoint). Each run of a job gets its own directory
//! `<dir>/run-<pid>-<random>`, removed when the job ends; directories of runs whose
//! process is gone (killed) are removed by the next run that uses `<dir>`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use brook_core::operator::SubtaskInfo;
use brook_state::{KeyedStateBackend, MemoryStateBackend, RocksDbOptions, RocksDbStateBackend};

use crate::error::EngineError;

/// What a [`StateBackendFactory`] learns about the operator subtask it creates a
/// backend for.
#[derive(Debug, Clone, Copy)]
pub struct StateBackendContext<'a> {
    /// The job-graph vertex (unique within the job, unlike names).
    pub vertex: usize,
    /// The operator subtask.
    pub info: &'a SubtaskInfo,
}

type CreateFn = dyn Fn(&StateBackendContext<'_>) -> Result<Box<dyn KeyedStateBackend>, EngineError>
    + Send
    + Sync;

/// Creates the keyed state backend of each stateful operator subtask; cheap to clone.
///
/// [`StateBackendFactory::memory`] (the default of [`crate::JobConfig`]) keeps state
/// as Rust values on the heap; [`StateBackendFactory::rocksdb`] keeps it in one
/// RocksDB instance per subtask, so state can outgrow memory.
#[derive(Clone)]
pub struct StateBackendFactory {
    name: &'static str,
    create: Arc<CreateFn>,
}

impl fmt::Debug for StateBackendFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateBackendFactory")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Default for StateBackendFactory {
    fn default() -> Self {
        Self::memory()
    }
}

impl StateBackendFactory {
    /// State in memory ([`MemoryStateBackend`]), as Flink's `HashMapStateBackend`.
    pub fn memory() -> Self {
        StateBackendFactory {
            name: "memory",
            create: Arc::new(|_| Ok(Box::new(MemoryStateBackend::new()))),
        }
    }

    /// State in RocksDB ([`RocksDbStateBackend`]), as Flink's
    /// `EmbeddedRocksDBStateBackend`: one instance per operator subtask in
    /// `dir/run-<pid>-<random>/op<vertex>-<name>-<subtask>`. The run directory is made
    /// at the first stateful subtask and removed when the last backend and clone of
    /// this factory are dropped (after the job ends). All instances share the memory
    /// budget of `options`.
    pub fn rocksdb(dir: impl Into<PathBuf>, options: RocksDbOptions) -> Self {
        let run = Arc::new(RunDir {
            parent: dir.into(),
            dir: Mutex::new(None),
        });
        StateBackendFactory {
            name: "rocksdb",
            create: Arc::new(move |ctx| {
                let base = run.get()?;
                let run = Arc::clone(&run);
                let dir = base.join(format!(
                    "op{}-{}-{}",
                    ctx.vertex,
                    dir_safe(&ctx.info.name),
                    ctx.info.index
                ));
                let backend = RocksDbStateBackend::open(&dir, options.clone()).map_err(|e| {
                    EngineError::StateBackend {
                        operator: ctx.info.to_string(),
                        message: e.to_string(),
                    }
                })?;
                Ok(Box::new(InRun { backend, _run: run }))
            }),
        }
    }

    /// A factory of any backend.
    pub fn new<F>(name: &'static str, create: F) -> Self
    where
        F: Fn(&StateBackendContext<'_>) -> Result<Box<dyn KeyedStateBackend>, EngineError>
            + Send
            + Sync
            + 'static,
    {
        StateBackendFactory {
            name,
            create: Arc::new(create),
        }
    }

    /// `memory`, `rocksdb`, or the name given to [`StateBackendFactory::new`].
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Creates the backend of one operator subtask.
    ///
    /// # Errors
    /// [`EngineError::StateBackend`] when the backend cannot be opened (for RocksDB: the
    /// directory cannot be made, or RocksDB fails to open).
    pub fn create(
        &self,
        ctx: &StateBackendContext<'_>,
    ) -> Result<Box<dyn KeyedStateBackend>, EngineError> {
        (self.create)(ctx)
    }
}

/// Keeps operator names usable as a path component: letters, digits, `-` and `_`,
/// at most 48 characters.
fn dir_safe(name: &str) -> String {
    name.chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A backend that keeps its run directory alive (the directory goes when the factory
/// and every backend made by it are dropped).
#[derive(Debug)]
struct InRun<B> {
    backend: B,
    _run: Arc<RunDir>,
}

impl<B: KeyedStateBackend> KeyedStateBackend for InRun<B> {
    fn get(&self, state: &str, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        self.backend.get(state, key)
    }
    fn put(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        self.backend.put(state, key, value)
    }
    fn insert_new(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        self.backend.insert_new(state, key, value)
    }
    fn delete(&mut self, state: &str, key: &[u8]) {
        self.backend.delete(state, key)
    }
    fn delete_existing(&mut self, state: &str, key: &[u8]) {
        self.backend.delete_existing(state, key)
    }
    fn scan_prefix(&self, state: &str, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.backend.scan_prefix(state, prefix)
    }
    fn len(&self) -> usize {
        self.backend.len()
    }
    fn state_len(&self, state: &str) -> usize {
        self.backend.state_len(state)
    }
    fn for_each_entry(&self, f: &mut brook_state::backend::EntryVisitor<'_>) {
        self.backend.for_each_entry(f)
    }
    fn is_empty(&self) -> bool {
        self.backend.is_empty()
    }
    fn kind(&self) -> brook_state::BackendKind {
        self.backend.kind()
    }
    fn snapshot_native(
        &mut self,
        storage: &brook_core::checkpoint::SnapshotStorage,
        key_groups: brook_core::keys::KeyGroupRange,
    ) -> brook_state::Result<Option<brook_core::checkpoint::NativeKeyedState>> {
        self.backend.snapshot_native(storage, key_groups)
    }
    fn restore_native(
        &mut self,
        states: &[brook_core::checkpoint::NativeKeyedState],
        root: &Path,
        key_groups: brook_core::keys::KeyGroupRange,
    ) -> brook_state::Result<bool> {
        self.backend.restore_native(states, root, key_groups)
    }
}

/// The working directory of one run, made on first use.
#[derive(Debug)]
struct RunDir {
    parent: PathBuf,
    dir: Mutex<Option<tempfile::TempDir>>,
}

impl RunDir {
    fn get(&self) -> Result<PathBuf, EngineError> {
        let err = |e: std::io::Error| EngineError::StateBackend {
            operator: "state backend".into(),
            message: format!("working directory {}: {e}", self.parent.display()),
        };
        // A poisoned lock only means another subtask panicked while making the
        // directory; the Option inside is still consistent.
        let mut guard = self
            .dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(d) = guard.as_ref() {
            return Ok(d.path().to_path_buf());
        }
        std::fs::create_dir_all(&self.parent).map_err(err)?;
        remove_abandoned_runs(&self.parent);
        let d = tempfile::Builder::new()
            .prefix(&format!("run-{}-", std::process::id()))
            .tempdir_in(&self.parent)
            .map_err(err)?;
        let path = d.path().to_path_buf();
        *guard = Some(d);
        Ok(path)
    }
}

/// Removes `run-<pid>-*` directories of processes that no longer run (a killed run
/// cannot clean up after itself). Only where `/proc` tells which processes run.
fn remove_abandoned_runs(parent: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            // Best effort: what cannot be removed now is tried again by the next run.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, index: u32) -> SubtaskInfo {
        SubtaskInfo {
            name: name.into(),
            index,
            parallelism: 2,
            max_parallelism: 128,
        }
    }

    #[test]
    fn rocksdb_instances_live_in_one_run_directory_that_goes_with_the_factory() {
        let parent = tempfile::tempdir().unwrap();
        // A run of a process that is gone (pid 0 is never a user process's).
        let abandoned = parent.path().join("run-4294967295-x");
        std::fs::create_dir_all(abandoned.join("op1-w-0")).unwrap();
        let f = StateBackendFactory::rocksdb(parent.path(), RocksDbOptions::default());
        let (i0, i1) = (info("window / sum", 0), info("window / sum", 1));
        let mut a = f
            .create(&StateBackendContext {
                vertex: 3,
                info: &i0,
            })
            .unwrap();
        let b = f
            .create(&StateBackendContext {
                vertex: 3,
                info: &i1,
            })
            .unwrap();
        a.put("s", b"k", b"v".to_vec());
        assert_eq!(a.get("s", b"k").as_deref(), Some(&b"v"[..]));
        assert!(b.is_empty());
        assert!(!abandoned.exists(), "the abandoned run is removed");
        let runs: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(runs.len(), 1);
        let run = runs[0].path();
        assert!(run.join("op3-window___sum-0").is_dir());
        assert!(run.join("op3-window___sum-1").is_dir());
        drop(f);
        assert!(
            run.join("op3-window___sum-0").is_dir(),
            "live backends keep it"
        );
        drop((a, b));
        assert!(!run.exists(), "the run directory goes when the job is done");
    }
}
