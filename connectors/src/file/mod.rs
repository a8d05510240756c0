//! Files: [`FileSource`] reads JSON lines or CSV, [`FileSink`] writes them.
//!
//! # Reading
//!
//! [`FileSource::jsonl`] reads one JSON value per line; [`FileSource::csv`] reads CSV
//! whose first row is a header (RFC 4180 quoting, so a quoted field may span lines).
//! The input is a file, a directory (all regular files directly in it, sorted by
//! name) or a list of those ([`FileInput`]); each file is one split, and split `i`
//! goes to subtask `i % parallelism`. A file whose name ends in `.gz` is
//! gzip-decompressed. Empty (or blank) lines are skipped. The records have no
//! timestamp.
//!
//! CSV rows are decoded with the csv crate's serde support (named by the header), so a
//! numeric-looking field can still go into a `String`; when that fails, and always
//! when the record type is [`serde_json::Value`], the row becomes a JSON object with
//! [`csv_row_to_json`]'s type inference and is decoded from that.
//!
//! With [`FileSource::follow`] the source is unbounded: at the end of a file it waits
//! for more complete lines to be appended (a last line without its newline is held
//! back until the newline arrives), polling every file of the subtask in turn. Files
//! added to a directory later are not picked up, and gzip files cannot be followed.
//!
//! A file's checkpointed position (split id: the path as displayed) is version byte 1,
//! then the byte offset (`u64` LE) after the last complete line (JSON) or row (CSV)
//! returned, in the decompressed stream for `.gz`; then the number of lines before it
//! (`u64` LE, for error positions); then flags: 1 = a bounded reader read the whole
//! file, 2 = the CSV header was read. A restored reader seeks to the offset (a gzip
//! file is decompressed again and skipped up to it); for CSV it first reads the
//! header again. Follow mode goes on after a restore. A file shorter than its
//! checkpointed offset fails the restore: it changed since the checkpoint.
//!
//! A line (or CSV row) that does not decode follows the [`BadRecords`] policy
//! ([`FileSource::on_bad_record`]); its position is `path:line` with 1-based line
//! numbers (the first line of a CSV row).
//!
//! # Writing
//!
//! [`FileSink::jsonl`] writes one JSON value per line; [`FileSink::csv`] writes CSV
//! with a header row (from the field names of a struct, or from the keys of the first
//! record when records serialise as maps, e.g. [`serde_json::Value`] objects). A path
//! ending in `.gz` is gzip-compressed. With parallelism 1 the sink writes `path`; with
//! parallelism `p > 1`, subtask `i` writes `{stem}-{i}{ext}` next to it, where `stem`
//! is the file name up to its first dot and `ext` the rest (`out.jsonl.gz` becomes
//! `out-0.jsonl.gz`, `out-1.jsonl.gz`, ...); [`FileSink::path_for`] tells which. The
//! files are created (or truncated) when the job starts, along with missing parent
//! directories. Output is buffered and written out by `flush` and `finish` (the
//! engine calls them when the input idles and at the end); it is not fsynced.
//!
//! ## Exactly once (jobs with checkpoints)
//!
//! In a job that checkpoints, each subtask writes what arrives between two barriers
//! to a hidden part file next to its output, `.{name}.{subtask}.part-{n}` (for gzip
//! output, one complete gzip member). At a barrier the part is closed and fsynced and
//! its committable goes into the checkpoint; when the checkpoint completes the part is
//! appended to the output file (fsynced) and deleted. Committing is idempotent: the
//! committable records the output's length before the part and the part's length, so
//! an output already that long is left alone, one cut off in the middle of an append
//! is truncated back and appended again. At the end of the input everything pending
//! is committed. The output only ever holds what a complete checkpoint (or the end of
//! the input) committed. A gzip output is then a multi-member gzip file (valid gzip;
//! `gzip -d`, `zcat` and [`MultiGzDecoder`] read all members); a CSV header is written
//! once, with the first committed part.
//!
//! On restore the writer commits the restored checkpoint's committables again, then
//! truncates each output file to the length they imply: anything beyond was
//! committed after the restored checkpoint (by a newer checkpoint that was skipped as
//! damaged, or by `finish` of a subtask whose job then failed elsewhere), and the
//! restored job writes it again. Part files those attempts left are deleted. Every
//! barrier produces a committable, also with nothing new, so the committed length of
//! every file is known.
//!
//! ## Rescaling
//!
//! The output files and their committed lengths are state that moves with the
//! subtasks, as Flink's `FileSink` hands its writers' files to the new subtasks. On a
//! restore at another parallelism each file's record (its committed length and pending
//! parts) goes to the subtask that writes that file at the new parallelism; the record
//! of a file whose writer no longer exists (`out-2.jsonl` restored at parallelism 2,
//! `out.jsonl` at parallelism 3) goes to subtask `j % p` of the `p` new ones, where
//! `j` held it before. That subtask commits the file's pending parts of the restored
//! checkpoint, cuts it back to its committed length as above, never writes to it, and
//! carries its record in each of its own checkpoints; so a later restore at a
//! parallelism where the file's writer exists again gives the file back to it with its
//! true committed length, and the output of all files together never loses a committed
//! row, whatever the sequence of parallelisms. A restored subtask whose own file no
//! restored state owns (one that did not exist at the restored checkpoint's
//! parallelism or any before it) keeps what the file holds and appends after it: a
//! restore never truncates a file it has no record of. (A fresh job, without a restore,
//! creates its files empty, and leaves files of other parallelisms alone.)
//!
//! Committable format (version 2): version byte 2, the number of entries (`u32` LE),
//! then each entry as a `u32` LE length and a version-1 committable: the writer's own
//! file first, then one entry of length 0 per carried file. Version 1 (one entry, what
//! earlier versions wrote, and still read): version byte 1, then part number, output
//! length before the part, part length (`u64` LE each), then the output path and the
//! part path (each a `u32` LE length and the path's bytes).
//!
//! # Example
//! ```
//! use brook_connectors::{FileSink, FileSource};
//! use brook_engine::{JobConfig, StreamEnvironment};
//! use brook_engine::testing::{CollectSink, VecSource};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("numbers.jsonl");
//! let env = StreamEnvironment::new(JobConfig::default());
//! env.source(VecSource::new(vec![1i64, 2, 3])).sink(FileSink::jsonl(&path));
//! env.execute("write").unwrap();
//!
//! let env = StreamEnvironment::new(JobConfig::default());
//! let out = CollectSink::new();
//! env.source(FileSource::jsonl::<i64>(&path)).sink(out.clone());
//! env.execute("read").unwrap();
//! assert_eq!(out.values(), vec![1, 2, 3]);
//! ```

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_core::checkpoint::CheckpointId;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError, Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use csv::{ByteRecord, StringRecord};
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use brook_core::bad_record::{BadRecordCounts, BadRecords};

use crate::bad_record;
use crate::error::ConnectorError;
use crate::BATCH;

/// Lines a reader looks at per poll at most (so that a run of bad lines does not
/// hold the task).
const LINES_PER_POLL: usize = 4 * BATCH;

/// The input of a [`FileSource`]: files and directories (no glob patterns).
///
/// Converts from one path (`&str`, `String`, `&Path`, `PathBuf`) or from a list of
/// them (`Vec`, array or slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInput(Vec<PathBuf>);

impl FileInput {
    /// The paths as given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.0
    }
}

macro_rules! file_input_from_one {
    ($($t:ty),*) => {$(
        impl From<$t> for FileInput {
            fn from(p: $t) -> Self {
                FileInput(vec![PathBuf::from(p)])
            }
        }
    )*};
}

file_input_from_one!(&str, String, &String, &Path, PathBuf, &PathBuf);

impl<P: AsRef<Path>> From<Vec<P>> for FileInput {
    fn from(ps: Vec<P>) -> Self {
        FileInput(ps.iter().map(|p| p.as_ref().to_path_buf()).collect())
    }
}

impl<P: AsRef<Path>> From<&[P]> for FileInput {
    fn from(ps: &[P]) -> Self {
        FileInput(ps.iter().map(|p| p.as_ref().to_path_buf()).collect())
    }
}

impl<P: AsRef<Path>, const N: usize> From<[P; N]> for FileInput {
    fn from(ps: [P; N]) -> Self {
        FileInput(ps.iter().map(|p| p.as_ref().to_path_buf()).collect())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    JsonLines,
    Csv,
}

fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// A source of JSON lines or CSV records read from files (see the
/// [module docs](self)).
pub struct FileSource<T> {
    input: FileInput,
    format: Format,
    follow: bool,
    bad: BadRecords,
    _out: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for FileSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSource")
            .field("input", &self.input)
            .field("format", &self.format)
            .field("follow", &self.follow)
            .field("bad_records", &self.bad)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        FileSource {
            input: self.input.clone(),
            format: self.format,
            follow: self.follow,
            bad: self.bad.clone(),
            _out: PhantomData,
        }
    }
}

/// The constructors name the record type: `FileSource::jsonl::<T>(path)` (the `()`
/// is only a place for them, as `HashMap::new` is found on `HashMap<K, V,
/// RandomState>`).
impl FileSource<()> {
    /// One JSON value per line, decoded into `T`.
    pub fn jsonl<T: DeserializeOwned + Send + 'static>(
        input: impl Into<FileInput>,
    ) -> FileSource<T> {
        FileSource::new(input.into(), Format::JsonLines)
    }

    /// CSV with a header row, each row decoded into `T`.
    pub fn csv<T: DeserializeOwned + Send + 'static>(input: impl Into<FileInput>) -> FileSource<T> {
        FileSource::new(input.into(), Format::Csv)
    }
}

impl<T: DeserializeOwned + Send + 'static> FileSource<T> {
    fn new(input: FileInput, format: Format) -> Self {
        FileSource {
            input,
            format,
            follow: false,
            bad: BadRecords::fail(),
            _out: PhantomData,
        }
    }

    /// Keeps reading the files as they grow (unbounded) instead of ending at their
    /// end. Default false.
    pub fn follow(mut self, follow: bool) -> Self {
        self.follow = follow;
        self
    }

    /// What to do with a line that does not decode (semantics.md §5). Default:
    /// fail, naming its position.
    pub fn on_bad_record(mut self, bad: BadRecords) -> Self {
        self.bad = bad;
        self
    }

    /// The counts of skipped and dead-lettered records of this source (all its
    /// subtasks and clones).
    pub fn bad_record_counter(&self) -> Arc<BadRecordCounts> {
        Arc::clone(self.bad.counts())
    }

    /// The files the source reads, in split order: each path given, with directories
    /// replaced by the regular files directly in them, sorted.
    ///
    /// # Errors
    /// [`ConnectorError::Io`] for a path that cannot be read (naming it),
    /// [`ConnectorError::Config`] for a path that is neither a file nor a directory, or
    /// a gzip file to follow.
    pub fn files(&self) -> Result<Vec<PathBuf>, ConnectorError> {
        let mut files = Vec::new();
        for path in self.input.paths() {
            let meta = fs::metadata(path).map_err(|e| ConnectorError::io("open", path, e))?;
            if meta.is_dir() {
                let mut in_dir = Vec::new();
                for entry in fs::read_dir(path).map_err(|e| ConnectorError::io("list", path, e))? {
                    let entry = entry.map_err(|e| ConnectorError::io("list", path, e))?;
                    let p = entry.path();
                    // Follows symbolic links, as opening the file will.
                    let meta = fs::metadata(&p).map_err(|e| ConnectorError::io("open", &p, e))?;
                    if meta.is_file() {
                        in_dir.push(p);
                    }
                }
                in_dir.sort();
                files.extend(in_dir);
            } else if meta.is_file() {
                files.push(path.clone());
            } else {
                return Err(ConnectorError::config(
                    "input",
                    format!(
                        "{} is neither a regular file nor a directory",
                        path.display()
                    ),
                ));
            }
        }
        if self.follow {
            if let Some(gz) = files.iter().find(|p| is_gzip(p)) {
                return Err(ConnectorError::config(
                    "follow",
                    format!("cannot follow the gzip file {}", gz.display()),
                ));
            }
        }
        Ok(files)
    }
}

/// One file of a [`FileSource`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSplit {
    /// The file.
    pub path: PathBuf,
}

impl Split for FileSplit {
    fn split_id(&self) -> String {
        self.path.display().to_string()
    }
}

impl<T: DeserializeOwned + Send + 'static> Source for FileSource<T> {
    type Out = T;
    type Split = FileSplit;

    fn enumerate_splits(&self, _parallelism: u32) -> OpResult<Vec<FileSplit>> {
        Ok(self
            .files()?
            .into_iter()
            .map(|path| FileSplit { path })
            .collect())
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<FileSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        self.restore_reader(info, splits, &HashMap::new())
    }

    fn restore_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<FileSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        let mut cursors = Vec::with_capacity(splits.len());
        let mut finished = Vec::new();
        for (i, s) in splits.into_iter().enumerate() {
            let id = s.split_id();
            let pos = match positions.get(&id) {
                None => FilePosition::default(),
                Some(b) => FilePosition::decode(b).ok_or_else(|| {
                    ConnectorError::config(
                        "restore",
                        format!("the checkpointed position of {id} is not one this source wrote"),
                    )
                })?,
            };
            if pos.finished && !self.follow {
                finished.push((i as u32, id, pos));
                continue;
            }
            let mut c = Cursor::new(s.path, self.format, i as u32);
            c.resume = (pos.offset > 0).then_some(pos);
            cursors.push(c);
        }
        Ok(Box::new(FileReader::<T> {
            format: self.format,
            follow: self.follow,
            cursors,
            report_finished: !finished.is_empty(),
            finished,
            current: 0,
            bad: self.bad.clone(),
            _out: PhantomData,
        }))
    }

    fn is_bounded(&self) -> bool {
        !self.follow
    }
}

/// What reading a line gave.
enum Line {
    /// A complete line is in `Cursor::line`.
    Complete,
    /// No complete line yet (follow mode).
    Wait,
    /// End of the file.
    End,
}

/// Reading position in one file.
struct Cursor {
    path: PathBuf,
    /// Index of the split among the reader's splits (for per-split watermarks).
    split: u32,
    name: String,
    input: Option<Box<dyn BufRead + Send>>,
    /// The line being read, with its terminator; partial while `complete` is false.
    line: Vec<u8>,
    complete: bool,
    /// 1-based number of the last complete line.
    line_no: u64,
    /// Bytes of the (decompressed) file up to the end of the last complete line.
    offset: u64,
    csv: Option<CsvState>,
    /// Where a restored cursor starts (applied when the file is opened).
    resume: Option<FilePosition>,
}

/// Version of a file's checkpointed position.
const POSITION_V1: u8 = 1;
/// Position flag: a bounded reader read the whole file.
const FLAG_FINISHED: u8 = 1;
/// Position flag: the CSV header was read (re-read it before seeking).
const FLAG_CSV_HEADER: u8 = 2;

/// A file's checkpointed position (see the [module docs](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FilePosition {
    /// Byte offset (of the decompressed stream) where reading resumes: after the last
    /// complete line (JSON) or row (CSV) returned.
    offset: u64,
    /// Lines before `offset` (for 1-based line numbers in error positions).
    line: u64,
    finished: bool,
    csv_header: bool,
}

impl FilePosition {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(18);
        b.push(POSITION_V1);
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.line.to_le_bytes());
        let mut flags = 0;
        if self.finished {
            flags |= FLAG_FINISHED;
        }
        if self.csv_header {
            flags |= FLAG_CSV_HEADER;
        }
        b.push(flags);
        b
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let [POSITION_V1, rest @ ..] = bytes else {
            return None;
        };
        if rest.len() != 17 {
            return None;
        }
        let offset = u64::from_le_bytes(rest[..8].try_into().ok()?);
        let line = u64::from_le_bytes(rest[8..16].try_into().ok()?);
        let flags = rest[16];
        Some(FilePosition {
            offset,
            line,
            finished: flags & FLAG_FINISHED != 0,
            csv_header: flags & FLAG_CSV_HEADER != 0,
        })
    }
}

fn open_input(path: &Path) -> OpResult<Box<dyn BufRead + Send>> {
    let f = File::open(path).map_err(|e| ConnectorError::io("open", path, e))?;
    Ok(if is_gzip(path) {
        Box::new(BufReader::with_capacity(
            1 << 16,
            MultiGzDecoder::new(BufReader::new(f)),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, f))
    })
}

/// Opens `path` at byte `offset` of its (decompressed) content: a seek, or for gzip
/// decompressing and skipping `offset` bytes.
fn open_at(path: &Path, offset: u64) -> OpResult<Box<dyn BufRead + Send>> {
    let short = |len: u64| {
        ConnectorError::config(
            "restore",
            format!(
                "{} has {len} bytes, fewer than the checkpointed position {offset}: the file \
                 changed since the checkpoint",
                path.display()
            ),
        )
    };
    if is_gzip(path) {
        let mut r = open_input(path)?;
        let skipped = io::copy(&mut (&mut r).take(offset), &mut io::sink())
            .map_err(|e| ConnectorError::io("read", path, e))?;
        if skipped < offset {
            return Err(short(skipped).into());
        }
        return Ok(r);
    }
    let mut f = File::open(path).map_err(|e| ConnectorError::io("open", path, e))?;
    let len = f
        .metadata()
        .map_err(|e| ConnectorError::io("open", path, e))?
        .len();
    if len < offset {
        return Err(short(len).into());
    }
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| ConnectorError::io("seek", path, e))?;
    Ok(Box::new(BufReader::with_capacity(1 << 16, f)))
}

/// Reads the CSV header of `path` (which may span lines) into `csv`.
fn read_csv_header(path: &Path, csv: &mut CsvState) -> OpResult {
    let mut r = open_input(path)?;
    let mut line = Vec::new();
    let mut line_no = 0;
    while csv.headers.is_none() {
        line.clear();
        let n = r
            .read_until(b'\n', &mut line)
            .map_err(|e| ConnectorError::io("read", path, e))?;
        if n == 0 {
            csv.next_row(true)
                .map_err(|reason| OperatorError::BadRecord {
                    position: Some(format!("{}:1", path.display())),
                    reason,
                })?;
            break;
        }
        line_no += 1;
        if line_no == 1 && line.starts_with(UTF8_BOM) {
            line.drain(..UTF8_BOM.len());
        }
        if !csv.in_row() && line.trim_ascii().is_empty() {
            continue;
        }
        csv.push_line(&line, line_no);
        csv.next_row(false)
            .map_err(|reason| OperatorError::BadRecord {
                position: Some(format!("{}:1", path.display())),
                reason,
            })?;
    }
    if csv.headers.is_none() {
        return Err(ConnectorError::config(
            "restore",
            format!(
                "{} has no CSV header any more: the file changed since the checkpoint",
                path.display()
            ),
        )
        .into());
    }
    Ok(())
}

impl Cursor {
    fn new(path: PathBuf, format: Format, split: u32) -> Self {
        Cursor {
            name: path.display().to_string(),
            path,
            split,
            input: None,
            line: Vec::new(),
            complete: false,
            line_no: 0,
            offset: 0,
            csv: (format == Format::Csv).then(CsvState::new),
            resume: None,
        }
    }

    /// The position after what was returned so far.
    fn snapshot(&self) -> FilePosition {
        if let Some(p) = self.resume.filter(|_| self.input.is_none()) {
            // Not opened since the restore.
            return p;
        }
        let (mut offset, mut line) = (self.offset, self.line_no);
        let mut csv_header = false;
        if let Some(csv) = &self.csv {
            // Bytes of a row not yet complete are read again after a restore.
            let pending = &csv.buf[csv.done.min(csv.buf.len())..];
            offset -= pending.len() as u64;
            line -= pending.iter().filter(|b| **b == b'\n').count() as u64;
            csv_header = csv.headers.is_some();
        }
        FilePosition {
            offset,
            line,
            finished: false,
            csv_header,
        }
    }

    fn position(&self, line: u64) -> String {
        format!("{}:{line}", self.name)
    }

    fn next_line(&mut self, follow: bool) -> OpResult<Line> {
        if self.complete {
            self.line.clear();
            self.complete = false;
        }
        let input = match &mut self.input {
            Some(i) => i,
            None => match self.resume.take() {
                None => self.input.insert(open_input(&self.path)?),
                Some(p) => {
                    if p.csv_header {
                        if let Some(csv) = &mut self.csv {
                            read_csv_header(&self.path, csv)?;
                            let headers = csv.headers.take();
                            *csv = CsvState::new();
                            csv.headers = headers;
                        }
                    }
                    self.offset = p.offset;
                    self.line_no = p.line;
                    self.input.insert(open_at(&self.path, p.offset)?)
                }
            },
        };
        input
            .read_until(b'\n', &mut self.line)
            .map_err(|e| ConnectorError::io("read", &self.path, e))?;
        if self.line.last() == Some(&b'\n') || (!follow && !self.line.is_empty()) {
            self.complete = true;
            self.line_no += 1;
            self.offset += self.line.len() as u64;
            if self.line_no == 1 && self.line.starts_with(UTF8_BOM) {
                self.line.drain(..UTF8_BOM.len());
            }
            Ok(Line::Complete)
        } else if follow {
            // Keep a partial line: the rest is appended on the next read.
            Ok(Line::Wait)
        } else {
            Ok(Line::End)
        }
    }
}

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The line without its terminator.
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

struct FileReader<T> {
    format: Format,
    follow: bool,
    /// Files not yet finished.
    cursors: Vec<Cursor>,
    /// Files read completely: (split index, split id, final position).
    finished: Vec<(u32, String, FilePosition)>,
    /// Restored: report the finished splits on the first poll.
    report_finished: bool,
    /// The cursor being read.
    current: usize,
    bad: BadRecords,
    _out: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned + 'static> FileReader<T> {
    /// Decodes the current line of cursor `c`; returns whether a record was emitted.
    fn decode_line(&mut self, c: usize, out: &mut Output<T>) -> OpResult<usize> {
        let cur = &mut self.cursors[c];
        match self.format {
            Format::JsonLines => {
                let line = content(&cur.line);
                if line.trim_ascii().is_empty() {
                    return Ok(0);
                }
                match serde_json::from_slice::<T>(line) {
                    Ok(v) => {
                        out.collect(v, None);
                        Ok(1)
                    }
                    Err(e) => {
                        let pos = cur.position(cur.line_no);
                        bad_record::handle(&self.bad, line, pos, format!("invalid JSON: {e}"))?;
                        Ok(0)
                    }
                }
            }
            Format::Csv => {
                let Some(csv) = cur.csv.as_mut() else {
                    return Ok(0);
                };
                if !csv.in_row() && cur.line.trim_ascii().is_empty() {
                    return Ok(0);
                }
                csv.push_line(&cur.line, cur.line_no);
                csv_rows(cur, &self.bad, out, false)
            }
        }
    }
}

/// Decodes the complete rows buffered in the cursor's CSV state (all of them at the
/// end of the file); returns how many records were emitted.
fn csv_rows<T: DeserializeOwned + 'static>(
    cur: &mut Cursor,
    bad: &BadRecords,
    out: &mut Output<T>,
    eof: bool,
) -> OpResult<usize> {
    let Some(csv) = cur.csv.as_mut() else {
        return Ok(0);
    };
    let mut n = 0;
    loop {
        let row = match csv.next_row(eof) {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(n),
            Err(reason) => {
                return Err(OperatorError::BadRecord {
                    position: Some(format!("{}:{}", cur.name, csv.row_line)),
                    reason,
                })
            }
        };
        let Some(headers) = &csv.headers else {
            continue;
        };
        match decode_csv_row::<T>(headers, row) {
            Ok(v) => {
                out.collect(v, None);
                n += 1;
            }
            Err(reason) => {
                let pos = format!("{}:{}", cur.name, csv.row_line);
                bad_record::handle(bad, csv.row_raw(), pos, reason)?;
            }
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> SourceReader for FileReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        if std::mem::take(&mut self.report_finished) {
            for (split, _, _) in &self.finished {
                out.finish_split(*split);
            }
        }
        let mut emitted = 0;
        let mut lines = 0;
        // Cursors in a row that had nothing (follow mode).
        let mut idle = 0;
        while !self.cursors.is_empty() && idle < self.cursors.len() {
            if emitted >= BATCH || lines >= LINES_PER_POLL {
                return Ok(InputStatus::MoreAvailable);
            }
            self.current %= self.cursors.len();
            let c = self.current;
            out.set_split(self.cursors[c].split);
            match self.cursors[c].next_line(self.follow)? {
                Line::Complete => {
                    idle = 0;
                    lines += 1;
                    emitted += self.decode_line(c, out)?;
                }
                Line::Wait => {
                    idle += 1;
                    self.current += 1;
                }
                Line::End => {
                    let mut cur = self.cursors.remove(c);
                    if cur.csv.is_some() {
                        emitted += csv_rows(&mut cur, &self.bad, out, true)?;
                    }
                    out.finish_split(cur.split);
                    let mut pos = cur.snapshot();
                    pos.finished = true;
                    self.finished.push((cur.split, cur.name, pos));
                }
            }
        }
        Ok(if self.cursors.is_empty() {
            InputStatus::End
        } else if emitted > 0 || lines > 0 {
            InputStatus::MoreAvailable
        } else {
            InputStatus::NothingAvailable
        })
    }

    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        let done = self
            .finished
            .iter()
            .map(|(_, id, p)| (id.clone(), p.encode()));
        let open = self
            .cursors
            .iter()
            .map(|c| (c.name.clone(), c.snapshot().encode()));
        Some(done.chain(open).collect())
    }

    fn close(&mut self) {
        self.cursors.clear();
    }
}

/// Incremental CSV parsing of whole lines (csv-core), so that a followed file can be
/// read as it grows and a quoted field may span lines.
struct CsvState {
    core: csv_core::Reader,
    headers: Option<StringRecord>,
    fields: Vec<u8>,
    ends: Vec<usize>,
    outlen: usize,
    endlen: usize,
    /// Bytes of the current row (and maybe rows after it on the same line).
    buf: Vec<u8>,
    /// Bytes of `buf` the parser has consumed.
    fed: usize,
    /// Bytes of `buf` that belong to the row last returned.
    done: usize,
    /// First line of the current row.
    row_line: u64,
}

impl CsvState {
    fn new() -> Self {
        CsvState {
            core: csv_core::Reader::new(),
            headers: None,
            fields: vec![0; 1024],
            ends: vec![0; 64],
            outlen: 0,
            endlen: 0,
            buf: Vec::new(),
            fed: 0,
            done: 0,
            row_line: 0,
        }
    }

    /// Forgets the row last returned.
    fn drop_done(&mut self) {
        if self.done > 0 {
            self.buf.drain(..self.done);
            self.fed -= self.done;
            self.done = 0;
        }
        if self.outlen == 0
            && self.endlen == 0
            && self.buf.iter().all(|b| *b == b'\r' || *b == b'\n')
        {
            // Only line terminators left (after a row ended by `\r`): the parser would
            // skip them as an empty line.
            self.buf.clear();
            self.fed = 0;
        }
    }

    /// Whether a row has started and not ended.
    fn in_row(&self) -> bool {
        self.buf.len() > self.done
    }

    fn push_line(&mut self, line: &[u8], line_no: u64) {
        self.drop_done();
        if self.buf.is_empty() {
            self.row_line = line_no;
        }
        self.buf.extend_from_slice(line);
    }

    /// The raw bytes of the row last returned, without its line terminator.
    fn row_raw(&self) -> &[u8] {
        let mut raw = &self.buf[..self.done];
        while let [rest @ .., b'\r' | b'\n'] = raw {
            raw = rest;
        }
        raw
    }

    /// The next complete data row; `eof` when no more input will come (completes a
    /// row without a line terminator). The header row is kept, not returned.
    /// Errors (a reason) only for a header that is not UTF-8.
    fn next_row(&mut self, eof: bool) -> Result<Option<ByteRecord>, String> {
        loop {
            self.drop_done();
            let input = &self.buf[self.fed..];
            if input.is_empty() && !eof {
                // An empty input means the end of the data to csv-core.
                return Ok(None);
            }
            let was_empty = input.is_empty();
            let (res, nin, nout, nend) = self.core.read_record(
                input,
                &mut self.fields[self.outlen..],
                &mut self.ends[self.endlen..],
            );
            self.fed += nin;
            self.outlen += nout;
            self.endlen += nend;
            match res {
                csv_core::ReadRecordResult::InputEmpty => {
                    if was_empty {
                        return Ok(None);
                    }
                }
                csv_core::ReadRecordResult::OutputFull => {
                    let n = self.fields.len() * 2;
                    self.fields.resize(n, 0);
                }
                csv_core::ReadRecordResult::OutputEndsFull => {
                    let n = self.ends.len() * 2;
                    self.ends.resize(n, 0);
                }
                csv_core::ReadRecordResult::Record => {
                    let mut record = ByteRecord::with_capacity(self.outlen, self.endlen);
                    let mut start = 0;
                    for &end in &self.ends[..self.endlen] {
                        record.push_field(&self.fields[start..end]);
                        start = end;
                    }
                    self.outlen = 0;
                    self.endlen = 0;
                    self.done = self.fed;
                    if self.headers.is_none() {
                        let headers = StringRecord::from_byte_record(record)
                            .map_err(|e| format!("the CSV header is not UTF-8: {e}"))?;
                        self.headers = Some(headers);
                        continue;
                    }
                    return Ok(Some(record));
                }
                csv_core::ReadRecordResult::End => return Ok(None),
            }
        }
    }
}

/// Decodes a CSV row named by `headers` into `T` (see the [module docs](self)).
fn decode_csv_row<T: DeserializeOwned + 'static>(
    headers: &StringRecord,
    row: ByteRecord,
) -> Result<T, String> {
    if row.len() != headers.len() {
        return Err(format!(
            "the row has {} fields, the header has {}",
            row.len(),
            headers.len()
        ));
    }
    let row = StringRecord::from_byte_record(row).map_err(|e| e.to_string())?;
    let as_json = || serde_json::from_value::<T>(csv_row_to_json(headers, &row));
    if TypeId::of::<T>() == TypeId::of::<Value>() {
        return as_json().map_err(|e| e.to_string());
    }
    match row.deserialize::<T>(Some(headers)) {
        Ok(v) => Ok(v),
        Err(e) => as_json().map_err(|_| csv_error_reason(&e, headers)),
    }
}

/// A csv deserialisation error, naming the column.
fn csv_error_reason(e: &csv::Error, headers: &StringRecord) -> String {
    if let csv::ErrorKind::Deserialize { err, .. } = e.kind() {
        if let Some(i) = err.field() {
            let name = usize::try_from(i).ok().and_then(|i| headers.get(i));
            let kind = err.kind();
            return match name {
                Some(name) => format!("column {name:?}: {kind}"),
                None => format!("field {}: {kind}", i + 1),
            };
        }
        return err.kind().to_string();
    }
    e.to_string()
}

/// A CSV row as a JSON object keyed by the header: a field that parses as an integer
/// or a finite float becomes a number, `true` and `false` booleans, an empty field
/// `null`, anything else a string. Fields beyond the header are left out; missing
/// ones are `null`.
///
/// ```
/// use brook_connectors::csv_row_to_json;
/// let headers = csv::StringRecord::from(vec!["id", "name", "score", "ok", "note"]);
/// let row = csv::StringRecord::from(vec!["7", "mia", "2.5", "true", ""]);
/// assert_eq!(
///     csv_row_to_json(&headers, &row),
///     serde_json::json!({"id": 7, "name": "mia", "score": 2.5, "ok": true, "note": null})
/// );
/// ```
pub fn csv_row_to_json(headers: &StringRecord, record: &StringRecord) -> Value {
    let map = headers
        .iter()
        .enumerate()
        .map(|(i, name)| (name.to_string(), record.get(i).map_or(Value::Null, infer)))
        .collect();
    Value::Object(map)
}

/// The JSON value of a CSV field: numbers and booleans where that loses nothing.
/// Fields that only look numeric stay strings: leading zeros (`02134`), a leading `+`,
/// integers too big for 64 bits (which a float would round) and `NaN`/`inf`, so zip
/// codes, phone numbers and long ids keep their text.
fn infer(field: &str) -> Value {
    match field {
        "" => Value::Null,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => {
            let digits = field.strip_prefix('-').unwrap_or(field);
            let leading_zero =
                digits.len() > 1 && digits.starts_with('0') && !digits.starts_with("0.");
            let plain = !field.starts_with('+') && !leading_zero;
            if !plain {
                return Value::String(field.to_string());
            }
            if let Ok(i) = field.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = field.parse::<u64>() {
                Value::from(u)
            } else if let Some(n) = field
                .parse::<f64>()
                .ok()
                .filter(|f| {
                    f.is_finite()
                        && digits.contains(['.', 'e', 'E'])
                        && digits
                            .bytes()
                            .all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
                })
                .and_then(serde_json::Number::from_f64)
            {
                Value::Number(n)
            } else {
                Value::String(field.to_string())
            }
        }
    }
}

/// A sink writing JSON lines or CSV files (see the [module docs](self)).
pub struct FileSink<T> {
    path: PathBuf,
    format: Format,
    _in: PhantomData<fn(T)>,
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
            _in: PhantomData,
        }
    }
}

impl<T: Serialize + Send + 'static> FileSink<T> {
    /// One JSON value per line.
    pub fn jsonl(path: impl Into<PathBuf>) -> Self {
        FileSink {
            path: path.into(),
            format: Format::JsonLines,
            _in: PhantomData,
        }
    }

    /// CSV with a header row.
    pub fn csv(path: impl Into<PathBuf>) -> Self {
        FileSink {
            path: path.into(),
            format: Format::Csv,
            _in: PhantomData,
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
}

impl<T: Serialize + Send + 'static> Sink for FileSink<T> {
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
            encoder: match self.format {
                Format::JsonLines => Encoder::Json,
                Format::Csv => Encoder::Csv(Box::new(CsvEncoder::new())),
            },
            buf: Vec::new(),
            written: 0,
            dirty: false,
            _in: PhantomData,
        }))
    }
}

/// Where a writer's bytes go.
enum Out {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
}

impl Out {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.write_all(bytes),
            Out::Gzip(w) => w.write_all(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            // A sync flush: everything so far can be decompressed.
            Out::Gzip(w) => w.flush(),
        }
    }

    fn finish(self) -> io::Result<()> {
        match self {
            Out::Plain(mut w) => w.flush(),
            Out::Gzip(w) => w.finish()?.flush(),
        }
    }

    /// Finishes (a complete gzip member) and gives the file back.
    fn into_file(self) -> io::Result<File> {
        let w = match self {
            Out::Plain(w) => w,
            Out::Gzip(w) => w.finish()?,
        };
        w.into_inner().map_err(|e| e.into_error())
    }

    fn new(file: File, gzip: bool) -> Self {
        let buffered = BufWriter::with_capacity(1 << 16, file);
        if gzip {
            Out::Gzip(GzEncoder::new(buffered, Compression::default()))
        } else {
            Out::Plain(buffered)
        }
    }
}

enum Encoder {
    Json,
    Csv(Box<CsvEncoder>),
}

/// How CSV rows are produced, decided by the first record.
enum CsvMode {
    /// The csv crate's serde support (structs, tuples): header from field names.
    Serde,
    /// Records that serialise as maps: header from the first record's keys.
    Object(Vec<String>),
}

struct CsvEncoder {
    writer: csv::Writer<Vec<u8>>,
    mode: Option<CsvMode>,
    /// The header is already in the output (a restored exactly-once writer): write
    /// rows only; for records that serialise as maps, these are its columns.
    existing_header: Option<Option<Vec<String>>>,
}

impl CsvEncoder {
    fn new() -> Self {
        CsvEncoder {
            writer: csv::Writer::from_writer(Vec::new()),
            mode: None,
            existing_header: None,
        }
    }

    /// An encoder for output that already has the header `header` (as read back).
    fn after_header(header: Option<Vec<String>>) -> Self {
        CsvEncoder {
            writer: csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Vec::new()),
            mode: None,
            existing_header: Some(header),
        }
    }

    fn encode<T: Serialize>(&mut self, value: &T) -> Result<(), String> {
        if self.mode.is_none() {
            let mut probe = csv::Writer::from_writer(Vec::new());
            let mode = match probe.serialize(value) {
                Ok(()) => CsvMode::Serde,
                Err(probe_err) => match serde_json::to_value(value) {
                    Ok(Value::Object(map)) => match &self.existing_header {
                        Some(existing) => CsvMode::Object(
                            existing
                                .clone()
                                .unwrap_or_else(|| map.keys().cloned().collect()),
                        ),
                        None => {
                            let headers: Vec<String> = map.keys().cloned().collect();
                            self.writer
                                .write_record(&headers)
                                .map_err(|e| e.to_string())?;
                            CsvMode::Object(headers)
                        }
                    },
                    Ok(_) => return Err(probe_err.to_string()),
                    Err(e) => return Err(e.to_string()),
                },
            };
            self.mode = Some(mode);
        }
        match &self.mode {
            Some(CsvMode::Object(headers)) => {
                let map = match serde_json::to_value(value).map_err(|e| e.to_string())? {
                    Value::Object(map) => map,
                    other => {
                        return Err(format!(
                            "expected an object like the first record, got {other}"
                        ))
                    }
                };
                if let Some(extra) = map.keys().find(|k| !headers.contains(k)) {
                    return Err(format!(
                        "field {extra:?} is not in the CSV header (taken from the first record: {})",
                        headers.join(",")
                    ));
                }
                let row = headers.iter().map(|h| match map.get(h) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                });
                self.writer.write_record(row).map_err(|e| e.to_string())
            }
            _ => self.writer.serialize(value).map_err(|e| e.to_string()),
        }
    }

    /// Moves the encoded bytes to `out`.
    fn drain_into(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if self.mode.is_none() {
            return Ok(());
        }
        // The header, if any, is written: the next writer only writes rows.
        let next = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        let done = std::mem::replace(&mut self.writer, next);
        let mut bytes = done.into_inner().map_err(|e| e.into_error())?;
        out.append(&mut bytes);
        Ok(())
    }
}

/// Encodes `batch` into `buf` (cleared first); `written` counts records for error
/// positions.
fn encode_batch<T: Serialize>(
    encoder: &mut Encoder,
    batch: &Batch<T>,
    buf: &mut Vec<u8>,
    written: &mut u64,
    name: &str,
    path: &Path,
) -> OpResult {
    buf.clear();
    for r in batch {
        *written += 1;
        let res = match encoder {
            Encoder::Json => serde_json::to_writer(&mut *buf, &r.value)
                .map(|()| buf.push(b'\n'))
                .map_err(|e| e.to_string()),
            Encoder::Csv(csv) => csv.encode(&r.value),
        };
        if let Err(reason) = res {
            return Err(OperatorError::BadRecord {
                position: Some(format!("{name} record {written}")),
                reason: format!("cannot encode: {reason}"),
            });
        }
    }
    if let Encoder::Csv(csv) = encoder {
        csv.drain_into(buf)
            .map_err(|e| ConnectorError::io("write", path, e))?;
    }
    Ok(())
}

struct FileWriter<T> {
    path: PathBuf,
    name: String,
    /// `None` once finished.
    out: Option<Out>,
    encoder: Encoder,
    buf: Vec<u8>,
    written: u64,
    /// Whether bytes were written since the last flush.
    dirty: bool,
    _in: PhantomData<fn(T)>,
}

impl<T> FileWriter<T> {
    fn out(&mut self) -> OpResult<&mut Out> {
        self.out.as_mut().ok_or_else(|| {
            OperatorError::failed(format!("{}: written to after it was finished", self.name))
        })
    }
}

impl<T: Serialize + Send + 'static> SinkWriter for FileWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        encode_batch(
            &mut self.encoder,
            &batch,
            &mut self.buf,
            &mut self.written,
            &self.name,
            &self.path,
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

/// Version of a [`FileSink`] committable holding one [`Committable`].
const COMMITTABLE_V1: u8 = 1;
/// Version of a [`FileSink`] committable holding a list of them: a writer's own file
/// first, then the files it carries.
const COMMITTABLES_V2: u8 = 2;

/// Version 2, the number of committables (`u32` LE), then each as a `u32` LE length
/// and its version-1 encoding.
fn encode_committables(cs: &[Committable]) -> Vec<u8> {
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
fn decode_committables(bytes: &[u8]) -> Option<Vec<Committable>> {
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

/// What commits one pending part of an exactly-once [`FileSink`] writer: append `part`
/// (`len` bytes) to `target`, which has `before` bytes until it is appended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Committable {
    /// The part's number (increasing per writer, over restores too).
    seq: u64,
    before: u64,
    len: u64,
    target: PathBuf,
    part: PathBuf,
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
    fn encode(&self) -> Vec<u8> {
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
    fn after(&self) -> u64 {
        self.before + self.len
    }
}

fn fsync_parent(path: &Path) -> OpResult {
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
fn commit_part(c: &Committable) -> OpResult {
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
fn part_prefix(target: &Path, index: u32) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.{index}.part-")
}

/// Removes the part files of `target` (`.{name}.{subtask}.part-{n}` next to it) that
/// attempts left without committing them.
fn remove_parts(target: &Path) -> OpResult {
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

/// The columns of the CSV file `path` (its first row), if it has one.
fn read_csv_columns(path: &Path) -> Option<Vec<String>> {
    let input = open_input(path).ok()?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(input);
    let h = r.headers().ok()?;
    (!h.is_empty()).then(|| h.iter().map(str::to_string).collect())
}

impl<T: Serialize + Send + 'static> FileSink<T> {
    /// The exactly-once writer of subtask `info`: of a new job (`restored` is `None`),
    /// or of a restored one, first committing the committables it was handed (see the
    /// [module docs](self)).
    fn committing_writer(
        &self,
        info: &SubtaskInfo,
        restored: Option<Vec<Vec<u8>>>,
    ) -> OpResult<TwoPhaseWriter<T>> {
        let target = self.path_for(info.index, info.parallelism);
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
        let prefix = part_prefix(&target, info.index);
        let encoder = match self.format {
            Format::JsonLines => Encoder::Json,
            Format::Csv if committed > 0 => Encoder::Csv(Box::new(CsvEncoder::after_header(
                read_csv_columns(&target),
            ))),
            Format::Csv => Encoder::Csv(Box::new(CsvEncoder::new())),
        };
        Ok(TwoPhaseWriter {
            name: target.display().to_string(),
            gzip: is_gzip(&target),
            part_base: target.with_file_name(&prefix),
            target,
            encoder,
            part: None,
            seq: restored.iter().map(|c| c.seq + 1).max().unwrap_or(0),
            expected: committed,
            pending: Vec::new(),
            carried: lengths,
            buf: Vec::new(),
            written: 0,
            finished: false,
            _in: PhantomData,
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

/// The exactly-once writer of a [`FileSink`] subtask (see the [module docs](self)).
struct TwoPhaseWriter<T> {
    target: PathBuf,
    name: String,
    gzip: bool,
    /// `dir/.{name}.{subtask}.part-`: a part's path is this and its number.
    part_base: PathBuf,
    encoder: Encoder,
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
    _in: PhantomData<fn(T)>,
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

impl<T: Serialize + Send + 'static> SinkWriter for TwoPhaseWriter<T> {
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
            &mut self.encoder,
            &batch,
            &mut buf,
            &mut self.written,
            &self.name,
            &self.target,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &[u8], eof: bool) -> (Vec<(u64, Vec<String>)>, CsvState) {
        let mut csv = CsvState::new();
        let mut got = Vec::new();
        for (i, line) in text.split_inclusive(|b| *b == b'\n').enumerate() {
            csv.push_line(line, i as u64 + 1);
            while let Some(r) = csv.next_row(false).unwrap() {
                got.push((
                    csv.row_line,
                    r.iter()
                        .map(|f| String::from_utf8_lossy(f).into())
                        .collect(),
                ));
            }
        }
        if eof {
            while let Some(r) = csv.next_row(true).unwrap() {
                got.push((
                    csv.row_line,
                    r.iter()
                        .map(|f| String::from_utf8_lossy(f).into())
                        .collect(),
                ));
            }
        }
        (got, csv)
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn csv_rows_across_lines_and_terminators() {
        let (got, csv) = rows(b"a,b\r\n1,\"x\ny\"\r\n2,z\n3,w", true);
        assert_eq!(csv.headers.unwrap(), StringRecord::from(vec!["a", "b"]));
        assert_eq!(
            got,
            vec![
                (2, strs(&["1", "x\ny"])),
                (4, strs(&["2", "z"])),
                (5, strs(&["3", "w"])),
            ]
        );
    }

    #[test]
    fn csv_row_without_terminator_waits_for_eof() {
        let (got, _) = rows(b"a\n1\n2", false);
        assert_eq!(got, vec![(2, strs(&["1"]))]);
    }

    #[test]
    fn csv_raw_is_the_row() {
        let mut csv = CsvState::new();
        csv.push_line(b"h1,h2\n", 1);
        assert!(csv.next_row(false).unwrap().is_none());
        csv.push_line(b"\"a\n", 2);
        assert!(csv.next_row(false).unwrap().is_none());
        assert!(csv.in_row());
        csv.push_line(b"b\",c\r\n", 3);
        let r = csv.next_row(false).unwrap().unwrap();
        assert_eq!(&r[0], b"a\nb");
        assert_eq!(csv.row_raw(), b"\"a\nb\",c");
        assert_eq!(csv.row_line, 2);
        assert!(csv.next_row(false).unwrap().is_none());
        assert!(!csv.in_row());
    }

    #[test]
    fn inference() {
        assert_eq!(infer(""), Value::Null);
        assert_eq!(infer("true"), Value::Bool(true));
        assert_eq!(infer("False"), Value::String("False".into()));
        assert_eq!(infer("-12"), Value::from(-12));
        assert_eq!(infer("18446744073709551615"), Value::from(u64::MAX));
        assert_eq!(infer("2.5"), Value::from(2.5));
        assert_eq!(infer("1e3"), Value::from(1000.0));
        assert_eq!(infer("NaN"), Value::String("NaN".into()));
        assert_eq!(infer("mia"), Value::String("mia".into()));
        for text in [
            "02134",
            "+15551234",
            "-007",
            "9999999999999999999999",
            "inf",
            "1.2.3",
        ] {
            assert_eq!(infer(text), Value::String(text.into()), "{text}");
        }
        assert_eq!(infer("0"), Value::from(0));
        assert_eq!(infer("0.5"), Value::from(0.5));
        assert_eq!(infer("-1.5e-3"), Value::from(-0.0015));
    }

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
