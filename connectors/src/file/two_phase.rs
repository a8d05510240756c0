//! The exactly-once writer of a [`FileSink`](super::FileSink) subtask: pending part
//! files between barriers, committed when the checkpoint completes; a restore
//! commits again, cuts back and carries the files of subtasks that no longer exist
//! (see the [module docs](super)).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use brook_core::checkpoint::CheckpointId;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError};
use brook_core::sink::SinkWriter;

use super::committable::{
    commit_part, decode_committables, encode_committables, fsync_parent, part_prefix, remove_parts,
    Committable,
};
use super::encode::{encode_batch, FileEncoder};
use super::format::Format;
use super::{is_gzip, open_input, Out};
use crate::error::ConnectorError;

/// The columns of the CSV file `path` (its first row), if it has one.
fn read_csv_columns(path: &Path) -> Option<Vec<String>> {
    let input = open_input(path).ok()?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(input);
    let h = r.headers().ok()?;
    (!h.is_empty()).then(|| h.iter().map(str::to_string).collect())
}

impl<T: Send + 'static> TwoPhaseWriter<T> {
    /// The exactly-once writer of subtask `index`, writing `target` in `format` with
    /// `encoder`: of a
    /// new job (`restored` is `None`), or of a restored one, first committing the
    /// committables it was handed (see the [module docs](super)).
    pub(super) fn open(
        target: PathBuf,
        format: Format,
        mut encoder: Box<dyn FileEncoder<In = T>>,
        index: u32,
        restored: Option<Vec<Vec<u8>>>,
    ) -> OpResult<Self> {
        if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| ConnectorError::io("create directory", dir, e))?;
        }
        let is_restore = restored.is_some();
        let restored = restored
            .unwrap_or_default()
            .iter()
            .map(|b| {
                decode_committables(b).ok_or_else(|| {
                    OperatorError::failed(format!(
                        "{}: a committable in the checkpoint is not one this sink wrote",
                        target.display()
                    ))
                })
            })
            .collect::<OpResult<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        // Commit again what the restored checkpoint pre-committed, in order.
        let mut lengths: Vec<(PathBuf, u64)> = Vec::new();
        for c in &restored {
            commit_part(c)?;
            match lengths.iter_mut().find(|(t, _)| *t == c.target) {
                Some(entry) => entry.1 = c.after(),
                None => lengths.push((c.target.clone(), c.after())),
            }
        }
        // Output beyond the restored checkpoint was committed by a later one that is
        // not restored (damaged or skipped) or by `finish` of a run that failed
        // elsewhere: the restored job writes it again, so cut it off.
        for (t, len) in &lengths {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(t)
                .map_err(|e| ConnectorError::io("open", t, e))?;
            let have = f
                .metadata()
                .map_err(|e| ConnectorError::io("open", t, e))?
                .len();
            if have > *len {
                f.set_len(*len)
                    .map_err(|e| ConnectorError::io("truncate", t, e))?;
                f.sync_all()
                    .map_err(|e| ConnectorError::io("fsync", t, e))?;
            }
            remove_parts(t)?;
        }
        // The other files this subtask was handed belong to subtasks that no longer
        // exist: they stay at their committed length, and their records go into every
        // checkpoint of this writer, so a later restore hands them on (back to their
        // writer when it exists again).
        let own = lengths
            .iter()
            .position(|(t, _)| *t == target)
            .map(|i| lengths.remove(i).1);
        let committed = match own {
            Some(len) => len,
            None if is_restore => keep_unowned(&target)?,
            None => {
                // A new job: start empty.
                File::create(&target).map_err(|e| ConnectorError::io("create", &target, e))?;
                fsync_parent(&target)?;
                0
            }
        };
        remove_parts(&target)?;
        let prefix = part_prefix(&target, index);
        if format == Format::Csv && committed > 0 {
            encoder.csv_header_written(read_csv_columns(&target));
        }
        Ok(TwoPhaseWriter {
            name: target.display().to_string(),
            gzip: is_gzip(&target),
            part_base: target.with_file_name(&prefix),
            target,
            format,
            encoder,
            part: None,
            seq: restored.iter().map(|c| c.seq + 1).max().unwrap_or(0),
            expected: committed,
            pending: Vec::new(),
            carried: lengths,
            buf: Vec::new(),
            written: 0,
            finished: false,
        })
    }
}

/// The committed length of a restored writer's own file that no restored state owns
/// (this parallelism never ran, or not since the restored checkpoint): whatever it
/// holds, which is never cut (it may be output of this job committed under a checkpoint
/// format that did not carry files across parallelisms). Created if missing.
fn keep_unowned(target: &Path) -> OpResult<u64> {
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
        .map_err(|e| ConnectorError::io("open", target, e))?;
    let have = f
        .metadata()
        .map_err(|e| ConnectorError::io("open", target, e))?
        .len();
    fsync_parent(target)?;
    if have > 0 {
        tracing::warn!(
            file = %target.display(),
            bytes = have,
            "the restored checkpoint has no record of this output file: its bytes are kept and new output is appended"
        );
    }
    Ok(have)
}

/// The exactly-once writer of a [`FileSink`](super::FileSink) subtask (see the
/// [module docs](super)).
pub(super) struct TwoPhaseWriter<T> {
    target: PathBuf,
    name: String,
    gzip: bool,
    /// `dir/.{name}.{subtask}.part-`: a part's path is this and its number.
    part_base: PathBuf,
    format: Format,
    encoder: Box<dyn FileEncoder<In = T>>,
    /// The part being written (since the last barrier) and its path.
    part: Option<(PathBuf, Out)>,
    /// The next part's number.
    seq: u64,
    /// The target's length once every pre-committed part is committed.
    expected: u64,
    /// Pre-committed, not yet committed.
    pending: Vec<Committable>,
    /// Files of subtasks that no longer exist, handed to this one on restore, with
    /// their committed lengths: recorded in every checkpoint, never written.
    carried: Vec<(PathBuf, u64)>,
    buf: Vec<u8>,
    written: u64,
    finished: bool,
}

impl<T> TwoPhaseWriter<T> {
    /// Closes the current part (fsynced) and returns its committable (one of length 0
    /// when nothing was written since the last barrier: it still records the target's
    /// length, which a restore cuts the target back to).
    fn pre_commit(&mut self) -> OpResult<Committable> {
        let seq = self.seq;
        self.seq += 1;
        let (part, len) = match self.part.take() {
            None => (PathBuf::new(), 0),
            Some((path, out)) => {
                let file = out
                    .into_file()
                    .map_err(|e| ConnectorError::io("write", &path, e))?;
                file.sync_all()
                    .map_err(|e| ConnectorError::io("fsync", &path, e))?;
                let len = file
                    .metadata()
                    .map_err(|e| ConnectorError::io("write", &path, e))?
                    .len();
                fsync_parent(&path)?;
                (path, len)
            }
        };
        let c = Committable {
            seq,
            before: self.expected,
            len,
            target: self.target.clone(),
            part,
        };
        self.expected += len;
        Ok(c)
    }
}

impl<T: Send + 'static> SinkWriter for TwoPhaseWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        if self.finished {
            return Err(OperatorError::failed(format!(
                "{}: written to after it was finished",
                self.name
            )));
        }
        let mut buf = std::mem::take(&mut self.buf);
        let res = encode_batch(
            self.encoder.as_mut(),
            self.format,
            &batch,
            &mut buf,
            &mut self.written,
            &self.name,
        )
        .and_then(|()| {
            if buf.is_empty() {
                return Ok(());
            }
            if self.part.is_none() {
                let mut path = self.part_base.clone().into_os_string();
                path.push(self.seq.to_string());
                let path = PathBuf::from(path);
                let f = File::create(&path).map_err(|e| ConnectorError::io("create", &path, e))?;
                self.part = Some((path, Out::new(f, self.gzip)));
            }
            let Some((path, out)) = &mut self.part else {
                return Ok(());
            };
            out.write_all(&buf)
                .map_err(|e| ConnectorError::io("write", &*path, e).into())
        });
        self.buf = buf;
        res
    }

    /// Pending output is not visible before it is committed: nothing to do.
    fn flush(&mut self) -> OpResult {
        Ok(())
    }

    /// The own file's committable, then a record of each carried file (nothing to
    /// append: its committed length).
    fn prepare_commit(&mut self, _checkpoint: CheckpointId) -> OpResult<Option<Vec<u8>>> {
        let c = self.pre_commit()?;
        let mut all = Vec::with_capacity(1 + self.carried.len());
        all.push(c.clone());
        all.extend(self.carried.iter().map(|(t, len)| Committable {
            seq: c.seq,
            before: *len,
            len: 0,
            target: t.clone(),
            part: PathBuf::new(),
        }));
        self.pending.push(c);
        Ok(Some(encode_committables(&all)))
    }

    fn commit(&mut self, _checkpoint: CheckpointId, committables: Vec<Vec<u8>>) -> OpResult {
        let mut last = None;
        for bytes in committables {
            let cs = decode_committables(&bytes).ok_or_else(|| {
                OperatorError::failed(format!("{}: a committable it did not write", self.name))
            })?;
            for c in cs {
                commit_part(&c)?;
                last = Some(last.map_or(c.seq, |l: u64| l.max(c.seq)));
            }
        }
        if let Some(last) = last {
            self.pending.retain(|c| c.seq > last);
        }
        Ok(())
    }

    /// End of input: commits everything, including what came after the last barrier.
    fn finish(&mut self) -> OpResult {
        if self.finished {
            return Ok(());
        }
        let c = self.pre_commit()?;
        self.pending.push(c);
        for c in std::mem::take(&mut self.pending) {
            commit_part(&c)?;
        }
        self.finished = true;
        Ok(())
    }
}
