//! [`FileSource`]: files as splits, the reader with its checkpointed positions,
//! follow mode and bad records (see the [module docs](super)).

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_core::bad_record::BadRecords;
use brook_core::operator::{OpResult, OperatorError, Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source, SourceOptions, SourceReader, Split};
use serde::de::DeserializeOwned;

use super::decode::{CsvRow, FileDecoder, RecordAt, SerdeDecoder};
use super::format::{CsvState, Format};
use super::{is_gzip, open_input};
use crate::error::ConnectorError;
use crate::split::restored_position;
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

/// Makes a reader's [`FileDecoder`].
type MakeDecoder<T> = dyn Fn() -> Box<dyn FileDecoder<Out = T>> + Send + Sync;

/// A source of JSON lines or CSV records read from files (see the
/// [module docs](super)).
pub struct FileSource<T> {
    input: FileInput,
    format: Format,
    options: SourceOptions,
    decoder: Arc<MakeDecoder<T>>,
}

impl<T> fmt::Debug for FileSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSource")
            .field("input", &self.input)
            .field("format", &self.format)
            .field("follow", &!self.options.bounded)
            .field("bad_records", &self.options.bad_records)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        FileSource {
            input: self.input.clone(),
            format: self.format,
            options: self.options.clone(),
            decoder: Arc::clone(&self.decoder),
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
        FileSource::jsonl_with(input, SerdeDecoder::<T>::default)
    }

    /// CSV with a header row, each row decoded into `T`.
    pub fn csv<T: DeserializeOwned + Send + 'static>(input: impl Into<FileInput>) -> FileSource<T> {
        FileSource::csv_with(input, SerdeDecoder::<T>::default)
    }

    /// JSON lines decoded by a [`FileDecoder`] of each reader's own, made by `make`
    /// (for records serde does not make one by one, such as Arrow batches).
    pub fn jsonl_with<D, F>(input: impl Into<FileInput>, make: F) -> FileSource<D::Out>
    where
        D: FileDecoder + 'static,
        D::Out: Send + 'static,
        F: Fn() -> D + Send + Sync + 'static,
    {
        FileSource::new(input.into(), Format::JsonLines, boxed(make))
    }

    /// CSV with a header row, decoded as [`FileSource::jsonl_with`]'s lines are.
    pub fn csv_with<D, F>(input: impl Into<FileInput>, make: F) -> FileSource<D::Out>
    where
        D: FileDecoder + 'static,
        D::Out: Send + 'static,
        F: Fn() -> D + Send + Sync + 'static,
    {
        FileSource::new(input.into(), Format::Csv, boxed(make))
    }
}

fn boxed<D, F>(make: F) -> Arc<MakeDecoder<D::Out>>
where
    D: FileDecoder + 'static,
    F: Fn() -> D + Send + Sync + 'static,
{
    Arc::new(move || -> Box<dyn FileDecoder<Out = D::Out>> { Box::new(make()) })
}

impl<T: Send + 'static> FileSource<T> {
    fn new(input: FileInput, format: Format, decoder: Arc<MakeDecoder<T>>) -> Self {
        FileSource {
            input,
            format,
            // Files end (the default) unless followed.
            options: SourceOptions {
                bounded: true,
                ..SourceOptions::default()
            },
            decoder,
        }
    }

    /// Keeps reading the files as they grow (unbounded) instead of ending at their
    /// end. Default false.
    pub fn follow(mut self, follow: bool) -> Self {
        self.options.bounded = !follow;
        self
    }

    brook_core::source_option_methods!();

    fn follows(&self) -> bool {
        !self.options.bounded
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
        if self.follows() {
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

impl<T: Send + 'static> Source for FileSource<T> {
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
            let pos = restored_position(positions, &id, FilePosition::decode)?.unwrap_or_default();
            if pos.finished && !self.follows() {
                finished.push((i as u32, id, pos));
                continue;
            }
            let mut c = Cursor::new(s.path, self.format, i as u32);
            c.resume = (pos.offset > 0).then_some(pos);
            cursors.push(c);
        }
        Ok(Box::new(FileReader::<T> {
            format: self.format,
            follow: self.follows(),
            cursors,
            report_finished: !finished.is_empty(),
            finished,
            current: 0,
            bad: self.options.bad_records.clone(),
            decoder: (self.decoder)(),
        }))
    }

    fn is_bounded(&self) -> bool {
        self.options.bounded
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

/// A file's checkpointed position (see the [module docs](super)).
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

    fn next_line(&mut self, follow: bool) -> OpResult<Line> {
        if self.complete {
            self.line.clear();
            self.complete = false;
        }
        let input = match &mut self.input {
            Some(i) => i,
            None => match self.resume {
                None => self.input.insert(open_input(&self.path)?),
                Some(p) => {
                    // Nothing of the cursor changes until the restore has succeeded: a
                    // failed one (a header that no longer parses, a file now shorter)
                    // leaves the checkpointed position as this reader's position, so a
                    // snapshot after the error is still that position (the fuzzer found
                    // a half-read header making the snapshot subtract past zero).
                    let mut headers = None;
                    if p.csv_header && self.csv.is_some() {
                        let mut csv = CsvState::new();
                        read_csv_header(&self.path, &mut csv)?;
                        headers = csv.headers;
                    }
                    let input = open_at(&self.path, p.offset)?;
                    if let Some(csv) = &mut self.csv {
                        *csv = CsvState::new();
                        csv.headers = headers;
                    }
                    self.resume = None;
                    self.offset = p.offset;
                    self.line_no = p.line;
                    self.input.insert(input)
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
    decoder: Box<dyn FileDecoder<Out = T>>,
}

impl<T> FileReader<T> {
    /// Decodes the current line of cursor `c`; returns how many records it gave.
    fn decode_line(&mut self, c: usize, out: &mut Output<T>) -> OpResult<usize> {
        let cur = &mut self.cursors[c];
        match self.format {
            Format::JsonLines => {
                let line = content(&cur.line);
                if line.trim_ascii().is_empty() {
                    return Ok(0);
                }
                let at = RecordAt {
                    file: &cur.name,
                    line: cur.line_no,
                };
                self.decoder.json(line, at, &self.bad, out)
            }
            Format::Csv => {
                let Some(csv) = cur.csv.as_mut() else {
                    return Ok(0);
                };
                if !csv.in_row() && cur.line.trim_ascii().is_empty() {
                    return Ok(0);
                }
                csv.push_line(&cur.line, cur.line_no);
                csv_rows(cur, self.decoder.as_mut(), &self.bad, out, false)
            }
        }
    }

    /// Reads about a batch of records (see [`SourceReader::poll_next`]); the decoder
    /// may still hold some.
    fn read(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
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
            let split = self.cursors[c].split;
            if split != out.split() {
                // What the decoder holds came from the other file.
                self.decoder.flush(&self.bad, out)?;
            }
            out.set_split(split);
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
                        emitted += csv_rows(&mut cur, self.decoder.as_mut(), &self.bad, out, true)?;
                    }
                    self.decoder.flush(&self.bad, out)?;
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
}

/// Decodes the complete rows buffered in the cursor's CSV state (all of them at the
/// end of the file); returns how many records they gave.
fn csv_rows<T>(
    cur: &mut Cursor,
    decoder: &mut dyn FileDecoder<Out = T>,
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
        let at = RecordAt {
            file: &cur.name,
            line: csv.row_line,
        };
        let row = CsvRow {
            headers,
            fields: row,
            raw: csv.row_raw(),
        };
        n += decoder.csv(row, at, bad, out)?;
    }
}

impl<T: Send + 'static> SourceReader for FileReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        if std::mem::take(&mut self.report_finished) {
            for (split, _, _) in &self.finished {
                out.finish_split(*split);
            }
        }
        let status = self.read(out)?;
        // Everything read is emitted before a checkpoint can snapshot the positions.
        self.decoder.flush(&self.bad, out)?;
        Ok(status)
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
