//! The runner's token when none is given: made at the runner's first start and kept in
//! `<data-dir>/runner/token`, readable by its owner only (as Jupyter keeps its token in
//! its runtime directory), where clients on the same data directory read it.
//!
//! A browser page can send requests to 127.0.0.1 (and a DNS-rebinding page can even
//! read the answers), so loopback is no boundary: every request on every address
//! carries a token.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::RngCore;

use super::RunnerError;

/// The environment variable holding the runner's token (for the service and its
/// clients).
pub const ENV_TOKEN: &str = "BROOK_RUNNER_TOKEN";

/// Random bytes of a token (256 bits, written as 64 hex digits).
const TOKEN_BYTES: usize = 32;

/// `<data_dir>/runner/token`.
pub fn token_file(data_dir: &Path) -> PathBuf {
    data_dir.join("runner").join("token")
}

/// The token a runner on `data_dir` made (`None` when there is none or it cannot be
/// read, for example by another user).
pub fn read_token(data_dir: &Path) -> Option<String> {
    std::fs::read_to_string(token_file(data_dir))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunnerError + '_ {
    move |source| RunnerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A new random token from the operating system's generator.
pub(crate) fn generate() -> Result<String, RunnerError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| RunnerError::Invalid(format!("no random token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `bytes` to `path` readable and writable by its owner only, from the
/// start: created with mode 0600 under another name, synced, then renamed, so no one
/// reads half of it and no one else reads it at all, not even for a moment.
///
/// # Errors
/// [`RunnerError::Io`] naming the file that could not be written.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), RunnerError> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// The token in `path`, made there first if there is none. Called by the runner
/// holding the data directory's lock, so no other runner writes it meanwhile.
///
/// # Errors
/// [`RunnerError::Invalid`] when the file is readable or writable by others than its
/// owner (someone may have read it: remove it and a new one is made) or empty;
/// [`RunnerError::Io`] when it cannot be read or written.
pub(crate) fn load_or_create(path: &Path) -> Result<String, RunnerError> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(RunnerError::Invalid(format!(
                    "{}: other users may read the runner's token (mode {mode:o}): remove the file (a new token is made) or chmod 600 it",
                    path.display()
                )));
            }
            let token = std::fs::read_to_string(path).map_err(io(path))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(RunnerError::Invalid(format!(
                    "{}: empty token file: remove it (a new token is made)",
                    path.display()
                )));
            }
            Ok(token.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = generate()?;
            write_private(path, format!("{token}\n").as_bytes())?;
            Ok(token)
        }
        Err(e) => Err(io(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_made_once_readable_by_its_owner_only_and_then_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        let first = load_or_create(&path).expect("made");
        assert_eq!(first.len(), 2 * TOKEN_BYTES);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&path).expect("reused"), first);
        assert_ne!(generate().expect("random"), first);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = load_or_create(&path).expect_err("readable by others");
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }
}
