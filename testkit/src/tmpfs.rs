//! A small tmpfs mounted for a test: a disk that fills up, grows back, or turns
//! read-only (`mount -o remount,...`), unmounted when dropped. Mounting needs root
//! (CAP_SYS_ADMIN), so the tests that use it are `#[ignore]`d with a message saying so,
//! and `scripts/test.sh` runs them with `--ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a directory.
#[derive(Debug)]
pub struct Tmpfs {
    dir: PathBuf,
}

fn mount(args: &[&str], dir: &Path) -> Result<(), String> {
    let out = Command::new("mount")
        .args(args)
        .arg(dir)
        .output()
        .map_err(|e| format!("running mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount {} {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_kib` KiB on `dir` (created if missing).
    ///
    /// # Panics
    /// When it cannot be mounted (not root): the message says how to run the test.
    pub fn mount(dir: &Path, size_kib: u64) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("creating the mount point");
        let size = format!("size={size_kib}k");
        if let Err(e) = mount(&["-t", "tmpfs", "-o", &size, "tmpfs"], dir) {
            panic!("{e}: this test needs root to mount a small tmpfs (scripts/test.sh runs it with --ignored)");
        }
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Changes the size to `size_kib` KiB, keeping the files (space returns).
    ///
    /// # Panics
    /// When the remount fails.
    pub fn resize(&self, size_kib: u64) {
        let opts = format!("remount,size={size_kib}k");
        mount(&["-o", &opts], &self.dir).expect("resizing the tmpfs");
    }

    /// Makes the file system read-only (`true`) or writable again.
    ///
    /// # Panics
    /// When the remount fails.
    pub fn set_read_only(&self, read_only: bool) {
        let opts = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        mount(&["-o", opts], &self.dir).expect("remounting the tmpfs");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a file a failed test left open must not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
