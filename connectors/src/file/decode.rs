//! How a [`FileSource`](super::FileSource) turns the records it reads (JSON lines, CSV
//! rows) into its output: a [`FileDecoder`]. The source's own decoder ([`SerdeDecoder`])
//! decodes each record into a `T` with serde; another may hold records back and emit
//! them together (a YAML job's decoder builds one Arrow batch of its schema from many
//! lines), so the reader asks it to [`flush`](FileDecoder::flush) before it moves to
//! another file and at the end of every poll: a checkpoint never falls between a line
//! read and its record emitted.

use std::marker::PhantomData;

use brook_core::bad_record::BadRecords;
use brook_core::operator::{OpResult, Output};
use brook_core::source::emit_json;
use csv::{ByteRecord, StringRecord};
use serde::de::DeserializeOwned;

use super::format::decode_csv_row;
use crate::bad_record;

/// Where a record was read: its file (as displayed) and 1-based line (for a CSV row,
/// the line it starts on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt<'a> {
    /// The file.
    pub file: &'a str,
    /// The line, from 1.
    pub line: u64,
}

impl RecordAt<'_> {
    /// `path:line`, the position of a bad record.
    pub fn position(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// One CSV data row.
#[derive(Debug)]
pub struct CsvRow<'a> {
    /// The file's header.
    pub headers: &'a StringRecord,
    /// The row's fields, unquoted.
    pub fields: ByteRecord,
    /// The row as written, without its line terminator (for bad records).
    pub raw: &'a [u8],
}

/// Turns a file's records into a source's output (see the [module docs](self)). One per
/// reader (subtask); records come in file order, one file at a time between flushes.
pub trait FileDecoder: Send {
    /// The records of the source.
    type Out;

    /// One JSON line, without its terminator and never blank. Returns how many records
    /// it emitted or holds (the reader emits about a batch per poll).
    ///
    /// # Errors
    /// A bad record under the `fail` policy (`bad`), naming `at`.
    fn json(
        &mut self,
        line: &[u8],
        at: RecordAt<'_>,
        bad: &BadRecords,
        out: &mut Output<Self::Out>,
    ) -> OpResult<usize>;

    /// One CSV data row; returns as [`FileDecoder::json`] does.
    ///
    /// # Errors
    /// As [`FileDecoder::json`].
    fn csv(
        &mut self,
        row: CsvRow<'_>,
        at: RecordAt<'_>,
        bad: &BadRecords,
        out: &mut Output<Self::Out>,
    ) -> OpResult<usize>;

    /// Emits the records held back, if any.
    ///
    /// # Errors
    /// A held record that is bad, under the `fail` policy.
    fn flush(&mut self, _bad: &BadRecords, _out: &mut Output<Self::Out>) -> OpResult {
        Ok(())
    }
}

/// Each record decoded into a `T` with serde (the decoder of
/// [`FileSource::jsonl`](super::FileSource::jsonl) and
/// [`FileSource::csv`](super::FileSource::csv)).
#[derive(Debug)]
pub struct SerdeDecoder<T>(PhantomData<fn() -> T>);

impl<T> Default for SerdeDecoder<T> {
    fn default() -> Self {
        SerdeDecoder(PhantomData)
    }
}

impl<T: DeserializeOwned + 'static> FileDecoder for SerdeDecoder<T> {
    type Out = T;

    fn json(
        &mut self,
        line: &[u8],
        at: RecordAt<'_>,
        bad: &BadRecords,
        out: &mut Output<T>,
    ) -> OpResult<usize> {
        emit_json(line, None, || at.position(), bad, out)
    }

    fn csv(
        &mut self,
        row: CsvRow<'_>,
        at: RecordAt<'_>,
        bad: &BadRecords,
        out: &mut Output<T>,
    ) -> OpResult<usize> {
        match decode_csv_row::<T>(row.headers, row.fields) {
            Ok(v) => {
                out.collect(v, None);
                Ok(1)
            }
            Err(reason) => {
                bad_record::handle(bad, row.raw, at.position(), reason)?;
                Ok(0)
            }
        }
    }
}
