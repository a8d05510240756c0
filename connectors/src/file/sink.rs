//! [`FileSink`]: the file each subtask writes, its plain writer, and which subtask
//! owns which file on a restore (see the [module docs](super)); the exactly-once
//! writer is in `two_phase`.

use std::fmt;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::Serialize;

use super::committable::{decode_committables, Committable};
use super::encode::{encode_batch, FileEncoder, SerdeEncoder};
use super::format::Format;
use super::two_phase::TwoPhaseWriter;
use super::{is_gzip, Out};
use crate::error::ConnectorError;

/// Makes each writer's encoder.
type MakeEncoder<T> = dyn Fn() -> Box<dyn FileEncoder<In = T>> + Send + Sync;

/// A sink writing JSON lines or CSV files (see the [module docs](super)).
pub struct FileSink<T> {
    path: PathBuf,
    format: Format,
    encoder: Arc<MakeEncoder<T>>,
}

impl<T> fmt::Debug for FileSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSink")
            .field("path", &self.path)
            .field("format", &self.format)
            .finish()
    }
}

impl<T> Clone for FileSink<T> {
    fn clone(&self) -> Self {
        FileSink {
            path: self.path.clone(),
            format: self.format,
            encoder: Arc::clone(&self.encoder),
        }
    }
}

impl<T: Serialize + Send + 'static> FileSink<T> {
    /// One JSON value per line.
    pub fn jsonl(path: impl Into<PathBuf>) -> Self {
        FileSink::jsonl_with(path, SerdeEncoder::<T>::default)
    }

    /// CSV with a header row.
    pub fn csv(path: impl Into<PathBuf>) -> Self {
        FileSink::csv_with(path, SerdeEncoder::<T>::default)
    }
}

impl FileSink<()> {
    /// JSON lines written by a [`FileEncoder`] of each writer's own, made by `make`
    /// (for records serde does not write one by one, such as Arrow batches).
    pub fn jsonl_with<E, F>(path: impl Into<PathBuf>, make: F) -> FileSink<E::In>
    where
        E: FileEncoder + 'static,
        E::In: Send + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        FileSink::new(path.into(), Format::JsonLines, make)
    }

    /// CSV with a header row, written as [`FileSink::jsonl_with`]'s lines are.
    pub fn csv_with<E, F>(path: impl Into<PathBuf>, make: F) -> FileSink<E::In>
    where
        E: FileEncoder + 'static,
        E::In: Send + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        FileSink::new(path.into(), Format::Csv, make)
    }
}

impl<T: Send + 'static> FileSink<T> {
    fn new<E, F>(path: PathBuf, format: Format, make: F) -> Self
    where
        E: FileEncoder<In = T> + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        FileSink {
            path,
            format,
            encoder: Arc::new(move || -> Box<dyn FileEncoder<In = T>> { Box::new(make()) }),
        }
    }

    /// The file subtask `index` of `parallelism` writes: the path itself when
    /// `parallelism` is 1, else `{stem}-{index}{ext}` in the same directory.
    pub fn path_for(&self, index: u32, parallelism: u32) -> PathBuf {
        if parallelism <= 1 {
            return self.path.clone();
        }
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The first dot after the first character: `.hidden.jsonl` keeps `.hidden`.
        let (stem, ext) = match name.char_indices().skip(1).find(|(_, c)| *c == '.') {
            Some((i, _)) => name.split_at(i),
            None => (name.as_str(), ""),
        };
        self.path.with_file_name(format!("{stem}-{index}{ext}"))
    }

    /// The subtask of `parallelism` that owns output file `target` on a restore, when
    /// former subtask `former` held its record: the subtask that writes `target` at
    /// this parallelism, else (a file of a subtask that no longer exists) `former %
    /// parallelism`, which keeps it at its committed length and carries its record on.
    fn owner(&self, target: &Path, former: u32, parallelism: u32) -> u32 {
        (0..parallelism)
            .find(|&i| self.path_for(i, parallelism) == target)
            .unwrap_or(former % parallelism)
    }

    /// The exactly-once writer of subtask `info`: of a new job (`restored` is `None`),
    /// or of a restored one.
    fn committing_writer(
        &self,
        info: &SubtaskInfo,
        restored: Option<Vec<Vec<u8>>>,
    ) -> OpResult<TwoPhaseWriter<T>> {
        let target = self.path_for(info.index, info.parallelism);
        TwoPhaseWriter::open(target, self.format, (self.encoder)(), info.index, restored)
    }
}

impl<T: Send + 'static> Sink for FileSink<T> {
    type In = T;

    fn create_committing_writer(
        &self,
        info: &SubtaskInfo,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.committing_writer(info, None)?))
    }

    fn restore_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.committing_writer(info, Some(committables))?))
    }

    /// Each file's record goes to the subtask that owns the file now: its writer at
    /// this parallelism, else the successor of the subtask that held it.
    fn restored_committables(
        &self,
        restored: &[(u32, Vec<Vec<u8>>)],
        index: u32,
        parallelism: u32,
    ) -> Vec<Vec<u8>> {
        let parallelism = parallelism.max(1);
        let mut mine = Vec::new();
        for (former, blobs) in restored {
            for blob in blobs {
                match decode_committables(blob) {
                    Some(cs) => mine.extend(
                        cs.iter()
                            .filter(|c| self.owner(&c.target, *former, parallelism) == index)
                            .map(Committable::encode),
                    ),
                    // Not one this sink wrote: the former subtask's successor reports it.
                    None if former % parallelism == index => mine.push(blob.clone()),
                    None => {}
                }
            }
        }
        mine
    }

    fn create_writer(&self, info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        let path = self.path_for(info.index, info.parallelism);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| ConnectorError::io("create directory", dir, e))?;
        }
        let file = File::create(&path).map_err(|e| ConnectorError::io("create", &path, e))?;
        let buffered = BufWriter::with_capacity(1 << 16, file);
        let out = if is_gzip(&path) {
            Out::Gzip(GzEncoder::new(buffered, Compression::default()))
        } else {
            Out::Plain(buffered)
        };
        Ok(Box::new(FileWriter {
            name: path.display().to_string(),
            path,
            out: Some(out),
            format: self.format,
            encoder: (self.encoder)(),
            buf: Vec::new(),
            written: 0,
            dirty: false,
        }))
    }
}

struct FileWriter<T> {
    path: PathBuf,
    name: String,
    /// `None` once finished.
    out: Option<Out>,
    format: Format,
    encoder: Box<dyn FileEncoder<In = T>>,
    buf: Vec<u8>,
    written: u64,
    /// Whether bytes were written since the last flush.
    dirty: bool,
}

impl<T> FileWriter<T> {
    fn out(&mut self) -> OpResult<&mut Out> {
        self.out.as_mut().ok_or_else(|| {
            OperatorError::failed(format!("{}: written to after it was finished", self.name))
        })
    }
}

impl<T: Send + 'static> SinkWriter for FileWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        encode_batch(
            self.encoder.as_mut(),
            self.format,
            &batch,
            &mut self.buf,
            &mut self.written,
            &self.name,
        )?;
        if self.buf.is_empty() {
            return Ok(());
        }
        self.dirty = true;
        let buf = std::mem::take(&mut self.buf);
        let res = self.out()?.write_all(&buf);
        self.buf = buf;
        res.map_err(|e| ConnectorError::io("write", &self.path, e).into())
    }

    fn flush(&mut self) -> OpResult {
        if !self.dirty {
            // Nothing new: spare gzip an empty sync block.
            return Ok(());
        }
        self.dirty = false;
        let path = self.path.clone();
        match &mut self.out {
            Some(out) => out
                .flush()
                .map_err(|e| ConnectorError::io("flush", path, e).into()),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> OpResult {
        match self.out.take() {
            Some(out) => out
                .finish()
                .map_err(|e| ConnectorError::io("finish", &self.path, e).into()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtask_paths() {
        let s = FileSink::<i64>::jsonl("/tmp/out/data.jsonl.gz");
        assert_eq!(s.path_for(0, 1), PathBuf::from("/tmp/out/data.jsonl.gz"));
        assert_eq!(s.path_for(2, 3), PathBuf::from("/tmp/out/data-2.jsonl.gz"));
        let s = FileSink::<i64>::csv("plain");
        assert_eq!(s.path_for(1, 2), PathBuf::from("plain-1"));
        let s = FileSink::<i64>::csv(".hidden.csv");
        assert_eq!(s.path_for(1, 2), PathBuf::from(".hidden-1.csv"));
    }

    #[test]
    fn a_file_is_owned_by_its_writer_else_by_the_successor_of_its_holder() {
        let s = FileSink::<i64>::jsonl("/o/out.jsonl");
        let owner = |name: &str, former, p| s.owner(Path::new(name), former, p);
        assert_eq!(owner("/o/out-2.jsonl", 0, 3), 2);
        assert_eq!(owner("/o/out.jsonl", 2, 1), 0);
        // No writer at this parallelism: the holder's successor.
        assert_eq!(owner("/o/out-2.jsonl", 1, 2), 1);
        assert_eq!(owner("/o/out-2.jsonl", 2, 2), 0);
        assert_eq!(owner("/o/out.jsonl", 3, 2), 1);
    }
}
