//! The users file on disk: `<data-dir>/users.scram` by default, readable by its owner
//! only (mode 0600, as ssh keeps a private key: the stored and server keys let anyone
//! who reads them pose as the broker to its users).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::rngs::OsRng;
use rand::RngCore;
use thiserror::Error;

use crate::sasl::credentials::{Mechanism, ScramCredential, MIN_ITERATIONS};
use crate::sasl::users::{NameError, ParseError, Users};

/// The users file's name inside a data directory.
pub const USERS_FILE: &str = "users.scram";

/// Salt length (bytes) of new credentials.
const SALT_LEN: usize = 32;

/// `<data_dir>/users.scram`.
pub fn users_file(data_dir: &Path) -> PathBuf {
    data_dir.join(USERS_FILE)
}

/// Why the users file cannot be read or written.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Group or others may read or write it.
    #[error("{path} has mode {mode:o}: users files must be readable by their owner only (chmod 600 {path})")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A line does not parse.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line and reason.
        #[source]
        source: ParseError,
    },
    /// The file has no user.
    #[error("{0}: no users (brook broker user add NAME adds one)")]
    Empty(PathBuf),
    /// A user name is refused.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The password is empty.
    #[error("the password is empty")]
    EmptyPassword,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads a users file: owner-only permissions, at least one user.
///
/// # Errors
/// [`StoreError`]: I/O, permissions, parse, empty.
pub fn load(path: &Path) -> Result<Users, StoreError> {
    let mode = fs::metadata(path).map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(StoreError::Permissions {
            path: path.to_owned(),
            mode: mode & 0o777,
        });
    }
    let text = fs::read_to_string(path).map_err(io(path))?;
    let users = Users::parse(&text).map_err(|source| StoreError::Parse {
        path: path.to_owned(),
        source,
    })?;
    if users.is_empty() {
        return Err(StoreError::Empty(path.to_owned()));
    }
    Ok(users)
}

/// Adds `name` (or replaces its password) with SCRAM-SHA-256 and SCRAM-SHA-512
/// credentials of `password`, each with its own random salt and Kafka's default 4096
/// iterations, creating the file (mode 0600) if needed. Returns whether the user
/// existed before.
///
/// # Errors
/// [`StoreError`]: a bad name, an empty password, I/O, or the existing file's errors.
pub fn add_user(path: &Path, name: &str, password: &[u8]) -> Result<bool, StoreError> {
    crate::sasl::users::check_name(name)?;
    if password.is_empty() {
        return Err(StoreError::EmptyPassword);
    }
    let mut users = existing(path)?;
    let existed = users.remove(name);
    for mechanism in Mechanism::ALL {
        let mut salt = vec![0u8; SALT_LEN];
        OsRng.fill_bytes(&mut salt);
        let credential = ScramCredential::derive(mechanism, password, salt, MIN_ITERATIONS);
        users.set(name, mechanism, credential)?;
    }
    write(path, &users)?;
    Ok(existed)
}

/// Removes `name`; whether it was there.
///
/// # Errors
/// [`StoreError`]: I/O, or the existing file's errors.
pub fn remove_user(path: &Path, name: &str) -> Result<bool, StoreError> {
    let mut users = existing(path)?;
    let removed = users.remove(name);
    if removed {
        write(path, &users)?;
    }
    Ok(removed)
}

/// The users of the file at `path`, none if there is no file yet.
fn existing(path: &Path) -> Result<Users, StoreError> {
    match load(path) {
        Ok(users) => Ok(users),
        Err(StoreError::Empty(_)) => Ok(Users::default()),
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(Users::default())
        }
        Err(e) => Err(e),
    }
}

/// Writes the whole file through a temporary file created 0600 and renamed over it,
/// so a crash leaves the old or the new file, never half of one or a readable copy.
fn write(path: &Path, users: &Users) -> Result<(), StoreError> {
    let tmp = path.with_extension("scram.tmp");
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(users.format().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_creates_an_owner_only_file_that_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = users_file(dir.path());
        // Passwords with `!`, which base64 (the salts and keys in the file) never has,
        // so finding them in the file can only mean they were stored.
        assert!(!add_user(&path, "alice", b"pw!1").expect("add"));
        assert!(add_user(&path, "alice", b"pw!2").expect("replace"));
        assert!(!add_user(&path, "bob", b"pw!1").expect("add"));
        let mode = fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let users = load(&path).expect("load");
        assert_eq!(users.names(), vec!["alice", "bob"]);
        let text = fs::read_to_string(&path).expect("read");
        assert!(!text.contains("pw!"), "a password is in the file: {text}");
        assert!(remove_user(&path, "bob").expect("remove"));
        assert!(!remove_user(&path, "bob").expect("remove"));
        assert_eq!(load(&path).expect("load").names(), vec!["alice"]);
    }

    #[test]
    fn refuses_bad_names_empty_passwords_open_permissions_and_empty_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = users_file(dir.path());
        assert!(matches!(
            add_user(&path, "a b", b"pw"),
            Err(StoreError::Name(_))
        ));
        assert!(matches!(
            add_user(&path, "alice", b""),
            Err(StoreError::EmptyPassword)
        ));
        assert!(!path.exists());
        add_user(&path, "alice", b"pw").expect("add");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = load(&path).expect_err("0644");
        assert!(e.to_string().contains("has mode 644"), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        fs::write(&path, "# nobody\n").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(matches!(load(&path), Err(StoreError::Empty(_))));
    }
}
