//! How a [`FileSink`](super::FileSink) turns its input into the bytes of a file (JSON
//! lines, CSV rows): a [`FileEncoder`]. The sink's own encoder ([`SerdeEncoder`])
//! writes each record with serde; another may write many rows for one record (a YAML
//! job's encoder writes every row of an Arrow batch).

use std::marker::PhantomData;

use brook_core::element::Batch;
use serde::Serialize;

use brook_core::operator::{OpResult, OperatorError};

use super::format::{CsvEncoder, Format};

/// A record the encoder could not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    /// Its index in the engine batch given to the encoder.
    pub record: usize,
    /// Why.
    pub reason: String,
}

/// Turns a sink's records into bytes (see the [module docs](self)). One per writer
/// (subtask), which calls either [`json`](FileEncoder::json) or
/// [`csv`](FileEncoder::csv), by the sink's format, for every engine batch in order.
pub trait FileEncoder: Send {
    /// The records of the sink.
    type In;

    /// Appends `batch` to `out`, each line of JSON ended by `\n`.
    ///
    /// # Errors
    /// The first record that cannot be written; `out` then holds the ones before it.
    fn json(&mut self, batch: &Batch<Self::In>, out: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// Appends `batch` to `out` as CSV rows, after a header row first unless
    /// [`csv_header_written`](FileEncoder::csv_header_written) said there is one.
    ///
    /// # Errors
    /// As [`json`](FileEncoder::json).
    fn csv(&mut self, batch: &Batch<Self::In>, out: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// The file already starts with a CSV header (a restored exactly-once writer's),
    /// whose columns are `columns` as read back (`None` when they could not be):
    /// write rows only.
    fn csv_header_written(&mut self, columns: Option<Vec<String>>);
}

/// Each record as its serde form: a JSON value per line, or a CSV row (the header
/// from a struct's field names, or from the first record's keys when records are
/// maps; see the [module docs](super)).
pub struct SerdeEncoder<T> {
    /// Made with the first CSV record (its mode depends on the record).
    csv: Option<CsvEncoder>,
    _in: PhantomData<fn(&T)>,
}

impl<T> Default for SerdeEncoder<T> {
    fn default() -> Self {
        SerdeEncoder {
            csv: None,
            _in: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for SerdeEncoder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerdeEncoder").finish_non_exhaustive()
    }
}

impl<T: Serialize> FileEncoder for SerdeEncoder<T> {
    type In = T;

    fn json(&mut self, batch: &Batch<T>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for (record, r) in batch.iter().enumerate() {
            serde_json::to_writer(&mut *out, &r.value).map_err(|e| EncodeError {
                record,
                reason: e.to_string(),
            })?;
            out.push(b'\n');
        }
        Ok(())
    }

    fn csv(&mut self, batch: &Batch<T>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let csv = self.csv.get_or_insert_with(CsvEncoder::new);
        let res = batch.iter().enumerate().try_for_each(|(record, r)| {
            csv.encode(&r.value)
                .map_err(|reason| EncodeError { record, reason })
        });
        // The rows before a bad one are kept, as JSON's are.
        csv.drain_into(out).map_err(|e| EncodeError {
            record: batch.len().saturating_sub(1),
            reason: e.to_string(),
        })?;
        res
    }

    fn csv_header_written(&mut self, columns: Option<Vec<String>>) {
        self.csv = Some(CsvEncoder::after_header(columns));
    }
}

/// Encodes `batch` into `buf` (cleared first) in `format`; `written` counts records
/// for error positions (`{name} record N`, from 1).
pub(super) fn encode_batch<T>(
    encoder: &mut dyn FileEncoder<In = T>,
    format: Format,
    batch: &Batch<T>,
    buf: &mut Vec<u8>,
    written: &mut u64,
    name: &str,
) -> OpResult {
    buf.clear();
    let res = match format {
        Format::JsonLines => encoder.json(batch, buf),
        Format::Csv => encoder.csv(batch, buf),
    };
    let before = *written;
    *written += batch.len() as u64;
    res.map_err(|e| OperatorError::BadRecord {
        position: Some(format!("{name} record {}", before + e.record as u64 + 1)),
        reason: format!("cannot encode: {}", e.reason),
    })
}
