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
//! [`FileSource::jsonl_with`] and [`FileSource::csv_with`] take a [`FileDecoder`] of each
//! reader's own instead of serde: one that may hold records and emit them together
//! (a YAML job's decodes the lines of a poll into one Arrow batch). The reader flushes
//! it before it turns to another file and at the end of every poll, so each record
//! comes from one split and a checkpoint never falls between a line read and its
//! record emitted.
//!
//! A line (or CSV row) that does not decode follows the [`BadRecords`] policy
//! ([`FileSource::on_bad_record`]); its position is `path:line` with 1-based line
//! numbers (the first line of a CSV row).
//!
//! [`BadRecords`]: brook_core::bad_record::BadRecords
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

mod committable;
mod decode;
mod encode;
mod format;
mod sink;
mod source;
mod two_phase;

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use brook_core::operator::OpResult;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::error::ConnectorError;

pub use decode::{CsvRow, FileDecoder, RecordAt, SerdeDecoder};
pub use encode::{EncodeError, FileEncoder, SerdeEncoder};
pub use format::csv_row_to_json;
pub use sink::FileSink;
pub use source::{FileInput, FileSource, FileSplit};

/// Whether `path` names a gzip file (its extension is `gz`, any case).
fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Opens `path` for reading as the source reads it: gzip-decompressed when its name
/// ends in `.gz` (every member of a multi-member file, as the sink writes them; an
/// empty file is empty).
///
/// # Errors
/// The file cannot be opened (the error names the path).
pub fn open_input(path: &Path) -> OpResult<Box<dyn BufRead + Send>> {
    let f = File::open(path).map_err(|e| ConnectorError::io("open", path, e))?;
    let empty = f
        .metadata()
        .map_err(|e| ConnectorError::io("open", path, e))?
        .len()
        == 0;
    // An empty file has no gzip member, which the decoder takes for a cut-off one: it
    // holds no records (an exactly-once sink's subtask that wrote nothing leaves one).
    Ok(if is_gzip(path) && !empty {
        Box::new(BufReader::with_capacity(
            1 << 16,
            MultiGzDecoder::new(BufReader::new(f)),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, f))
    })
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
