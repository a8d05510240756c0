//! Which keyed state backend a harness gives its operator.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use brook_state::StateError;
use brook_state::{KeyedStateBackend, MemoryStateBackend, RocksDbOptions, RocksDbStateBackend};

/// A keyed state backend for a test, as the tests' `backends()` lists choose them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TestBackend {
    /// [`MemoryStateBackend::new`]: typed tables keep Rust values on the heap
    /// (`BackendKind::Heap`, Flink's heap state backend).
    Heap,
    /// [`MemoryStateBackend::serialized`]: entries kept as bytes in memory, as in
    /// RocksDB (`BackendKind::Serialized`), without RocksDB's cost.
    Serialized,
    /// [`RocksDbStateBackend`] in a fresh directory under the system's temporary
    /// directory; the backend removes the directory when dropped.
    RocksDb,
}

/// Numbers the RocksDB directories of this process.
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

impl TestBackend {
    /// Every backend, in memory first.
    pub const ALL: [TestBackend; 3] = [
        TestBackend::Heap,
        TestBackend::Serialized,
        TestBackend::RocksDb,
    ];

    /// A short name for assertion messages: `heap`, `bytes` or `rocksdb`.
    pub fn name(self) -> &'static str {
        match self {
            TestBackend::Heap => "heap",
            TestBackend::Serialized => "bytes",
            TestBackend::RocksDb => "rocksdb",
        }
    }

    /// A new, empty backend of this kind.
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when the RocksDB directory cannot be created or opened.
    pub fn create(self) -> Result<Box<dyn KeyedStateBackend>, StateError> {
        Ok(match self {
            TestBackend::Heap => Box::new(MemoryStateBackend::new()),
            TestBackend::Serialized => Box::new(MemoryStateBackend::serialized()),
            TestBackend::RocksDb => Box::new(rocksdb()?),
        })
    }
}

/// RocksDB in a directory no other backend of this process uses (the process id keeps
/// test binaries running at once apart).
fn rocksdb() -> Result<RocksDbStateBackend, StateError> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("brook-testkit-{}-{n}", std::process::id()));
    // A directory left by an earlier process with the same id would be opened with its
    // data: start empty.
    let _ = std::fs::remove_dir_all(&dir);
    RocksDbStateBackend::open(&dir, RocksDbOptions::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_starts_empty_and_keeps_entries() -> Result<(), StateError> {
        for b in TestBackend::ALL {
            let mut s = b.create()?;
            assert!(s.is_empty(), "{}", b.name());
            s.put("st", b"k", b"v".to_vec());
            assert_eq!(
                s.get("st", b"k").as_deref(),
                Some(&b"v"[..]),
                "{}",
                b.name()
            );
        }
        Ok(())
    }

    #[test]
    fn the_rocksdb_directory_goes_away_with_the_backend() -> Result<(), StateError> {
        let s = rocksdb()?;
        let dir = s.dir().to_path_buf();
        assert!(dir.exists());
        drop(s);
        assert!(!dir.exists(), "{} left behind", dir.display());
        Ok(())
    }
}
