//! An exclusive lock of one process on a file, with the holder's pid written into it
//! so that a process refused the lock can say who holds it.
//!
//! The lock is the OS's advisory file lock (`flock`, through [`std::fs::File::lock`]):
//! it goes with the process, so a process that crashes or is SIGKILLed releases it.
//! Used for the runner's data directory (`<data-dir>/runner/lock`), each supervised job
//! process (`<job dir>/status.lock`) and each `brook run` (`<data-dir>/jobs/<name>.lock`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why a lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file cannot be created, opened or locked.
    #[error("{}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process holds the lock.
    #[error("{} is held by {}", path.display(), holder(*pid))]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as it wrote it (`None` while it is writing it, or for a
        /// holder that does not write it).
        pid: Option<u32>,
    },
}

/// `process 1234`, or `another process` without a pid.
pub fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(|| "another process".to_string(), |p| format!("process {p}"))
}

/// A held lock; released when dropped (or when the process ends, however it ends).
#[derive(Debug)]
pub struct ProcessLock {
    _file: File,
}

fn open(path: &Path) -> Result<File, LockError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// The pid the holder of `file` wrote.
fn read_pid(mut file: &File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

impl ProcessLock {
    /// Takes the lock on `path` (created if missing) without waiting.
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder's pid when another process holds it;
    /// [`LockError::Io`] when the file cannot be opened or locked.
    pub fn try_acquire(path: &Path) -> Result<Self, LockError> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Self::held(file, path),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Held {
                path: path.to_path_buf(),
                pid: read_pid(&file),
            }),
            Err(std::fs::TryLockError::Error(source)) => Err(LockError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Takes the lock on `path` (created if missing), waiting while another process
    /// holds it.
    ///
    /// # Errors
    /// [`LockError::Io`] when the file cannot be opened or locked.
    pub fn acquire(path: &Path) -> Result<Self, LockError> {
        let file = open(path)?;
        file.lock().map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::held(file, path)
    }

    /// Whether a process holds the lock on `path` now (a missing file is free).
    pub fn is_held(path: &Path) -> bool {
        match File::open(path) {
            // Taken and let go at once when free (the probe writes nothing).
            Ok(f) => matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// Writes this process's pid into the locked file.
    fn held(mut file: File, path: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(ProcessLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_free_once_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        assert!(!ProcessLock::is_held(&path));
        let lock = ProcessLock::try_acquire(&path).expect("free");
        assert!(ProcessLock::is_held(&path));
        // flock locks belong to open files: a second open in this process conflicts.
        match ProcessLock::try_acquire(&path) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(lock);
        assert!(!ProcessLock::is_held(&path));
        let _again = ProcessLock::acquire(&path).expect("free again");
    }
}
