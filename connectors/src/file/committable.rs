//! The committables of the exactly-once [`FileSink`](super::FileSink): their format
//! (versions 1 and 2, see the [module docs](super)) and committing one pending part to
//! its output file, idempotently.

use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use brook_core::operator::{OpResult, OperatorError};

use crate::error::ConnectorError;

/// Version of a [`FileSink`](super::FileSink) committable holding one [`Committable`].
const COMMITTABLE_V1: u8 = 1;
/// Version of a [`FileSink`](super::FileSink) committable holding a list of them: a
/// writer's own file first, then the files it carries.
const COMMITTABLES_V2: u8 = 2;

/// Version 2, the number of committables (`u32` LE), then each as a `u32` LE length
/// and its version-1 encoding.
pub(super) fn encode_committables(cs: &[Committable]) -> Vec<u8> {
    let mut b = vec![COMMITTABLES_V2];
    b.extend_from_slice(&(cs.len() as u32).to_le_bytes());
    for c in cs {
        let one = c.encode();
        b.extend_from_slice(&(one.len() as u32).to_le_bytes());
        b.extend_from_slice(&one);
    }
    b
}

/// The committables in `bytes`: one of version 1 (checkpoints of earlier versions,
/// and what a restore hands each subtask) or a list of version 2.
pub(super) fn decode_committables(bytes: &[u8]) -> Option<Vec<Committable>> {
    match bytes.first() {
        Some(&COMMITTABLE_V1) => Committable::decode(bytes).map(|c| vec![c]),
        Some(&COMMITTABLES_V2) => {
            let u32_at = |i: usize| -> Option<usize> {
                Some(u32::from_le_bytes(bytes.get(i..i + 4)?.try_into().ok()?) as usize)
            };
            let n = u32_at(1)?;
            let mut at = 5;
            let mut cs = Vec::new();
            for _ in 0..n {
                let len = u32_at(at)?;
                cs.push(Committable::decode(bytes.get(at + 4..at + 4 + len)?)?);
                at += 4 + len;
            }
            (at == bytes.len()).then_some(cs)
        }
        _ => None,
    }
}

/// What commits one pending part of an exactly-once [`FileSink`](super::FileSink)
/// writer: append `part` (`len` bytes) to `target`, which has `before` bytes until it
/// is appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Committable {
    /// The part's number (increasing per writer, over restores too).
    pub(super) seq: u64,
    pub(super) before: u64,
    pub(super) len: u64,
    pub(super) target: PathBuf,
    pub(super) part: PathBuf,
}

fn path_bytes(p: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        p.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        p.to_string_lossy().as_bytes().to_vec()
    }
}

fn path_from(bytes: &[u8]) -> Option<PathBuf> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).ok().map(PathBuf::from)
    }
}

impl Committable {
    /// Version 1, `seq`, `before`, `len` (`u64` little endian), then the target and
    /// part paths, each as a `u32` little-endian length and the bytes.
    pub(super) fn encode(&self) -> Vec<u8> {
        let (t, p) = (path_bytes(&self.target), path_bytes(&self.part));
        let mut b = Vec::with_capacity(33 + t.len() + p.len());
        b.push(COMMITTABLE_V1);
        for v in [self.seq, self.before, self.len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for bytes in [t, p] {
            b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            b.extend_from_slice(&bytes);
        }
        b
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let [COMMITTABLE_V1, rest @ ..] = bytes else {
            return None;
        };
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(rest.get(i..i + 8)?.try_into().ok()?))
        };
        let (seq, before, len) = (u64_at(0)?, u64_at(8)?, u64_at(16)?);
        let mut at = 24;
        let mut path = || -> Option<PathBuf> {
            let n = u32::from_le_bytes(rest.get(at..at + 4)?.try_into().ok()?) as usize;
            let p = path_from(rest.get(at + 4..at + 4 + n)?)?;
            at += 4 + n;
            Some(p)
        };
        let (target, part) = (path()?, path()?);
        Some(Committable {
            seq,
            before,
            len,
            target,
            part,
        })
    }

    /// The committable's checkpoint-independent meaning: the target's length once it
    /// is committed.
    pub(super) fn after(&self) -> u64 {
        self.before + self.len
    }
}

pub(super) fn fsync_parent(path: &Path) -> OpResult {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d,
        None => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ConnectorError::io("fsync directory", dir, e).into())
}

/// Commits one part (idempotently): appends it to the target unless the target's
/// length shows it is appended already.
pub(super) fn commit_part(c: &Committable) -> OpResult {
    if c.len == 0 {
        return Ok(());
    }
    let mut target = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&c.target)
        .map_err(|e| ConnectorError::io("open", &c.target, e))?;
    let have = target
        .metadata()
        .map_err(|e| ConnectorError::io("open", &c.target, e))?
        .len();
    if have >= c.after() {
        // Appended before (a commit repeated after a restore).
        return remove_part(&c.part);
    }
    if have < c.before {
        return Err(OperatorError::failed(format!(
            "cannot commit {} to {}: the file has {have} bytes, fewer than the {} committed \
             before it (was it changed outside the job?)",
            c.part.display(),
            c.target.display(),
            c.before
        )));
    }
    let mut part = File::open(&c.part).map_err(|e| {
        OperatorError::failed(format!(
            "cannot commit {} bytes to {}: the pending part {} is gone ({e})",
            c.len,
            c.target.display(),
            c.part.display()
        ))
    })?;
    let part_len = part
        .metadata()
        .map_err(|e| ConnectorError::io("open", &c.part, e))?
        .len();
    if part_len != c.len {
        return Err(OperatorError::failed(format!(
            "cannot commit {} to {}: it has {part_len} bytes, the checkpoint says {}",
            c.part.display(),
            c.target.display(),
            c.len
        )));
    }
    if have > c.before {
        // A commit that crashed half-way: append again from the start.
        target
            .set_len(c.before)
            .map_err(|e| ConnectorError::io("truncate", &c.target, e))?;
    }
    target
        .seek(SeekFrom::Start(c.before))
        .map_err(|e| ConnectorError::io("seek", &c.target, e))?;
    let copied =
        io::copy(&mut part, &mut target).map_err(|e| ConnectorError::io("append", &c.target, e))?;
    if copied != c.len {
        return Err(OperatorError::failed(format!(
            "cannot commit {} to {}: read {copied} of its {} bytes",
            c.part.display(),
            c.target.display(),
            c.len
        )));
    }
    target
        .sync_all()
        .map_err(|e| ConnectorError::io("fsync", &c.target, e))?;
    remove_part(&c.part)
}

fn remove_part(part: &Path) -> OpResult {
    match fs::remove_file(part) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ConnectorError::io("remove", part, e).into()),
    }
}

/// The prefix of the pending part files of the writer of `target` (subtask `index`):
/// `.{name}.{index}.part-`.
pub(super) fn part_prefix(target: &Path, index: u32) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.{index}.part-")
}

/// Removes the part files of `target` (`.{name}.{subtask}.part-{n}` next to it) that
/// attempts left without committing them.
pub(super) fn remove_parts(target: &Path) -> OpResult {
    let dir = match target.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let prefix = format!(".{name}.");
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ConnectorError::io("list", dir, e).into()),
    };
    for entry in entries {
        let entry = entry.map_err(|e| ConnectorError::io("list", &dir, e))?;
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let is_part = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once(".part-"))
            .is_some_and(|(subtask, n)| digits(subtask) && digits(n));
        if is_part {
            remove_part(&entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committables_of_both_versions_decode() {
        let c = |seq, target: &str| Committable {
            seq,
            before: 10,
            len: 3,
            target: PathBuf::from(target),
            part: PathBuf::from(format!(".{target}.0.part-{seq}")),
        };
        let (a, b) = (c(4, "out-0.jsonl"), c(4, "out.jsonl"));
        // Version 1: what earlier versions wrote.
        assert_eq!(decode_committables(&a.encode()), Some(vec![a.clone()]));
        let both = encode_committables(&[a.clone(), b.clone()]);
        assert_eq!(both[0], COMMITTABLES_V2);
        assert_eq!(decode_committables(&both), Some(vec![a, b]));
        for cut in 1..both.len() {
            assert_eq!(decode_committables(&both[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode_committables(&[9, 0]), None);
        assert_eq!(decode_committables(&[]), None);
    }
}
