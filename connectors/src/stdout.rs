//! [`StdoutSink`]: prints each record as one JSON line; [`stdout_closed`] tells a closed
//! standard output from other failures.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use serde::Serialize;

use crate::file::{FileEncoder, SerdeEncoder};

/// Set once a write to standard output failed because its reader went away.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a [`StdoutSink`] found standard output closed by its reader (`brook run ...
/// | head`): the job then fails, and a command line program ends quietly, as programs
/// whose output is cut short do. Standard output is the process's, so this is too.
pub fn stdout_closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Makes each writer's encoder.
type MakeEncoder<T> = dyn Fn() -> Box<dyn FileEncoder<In = T>> + Send + Sync;

/// A sink printing each record as one JSON line on standard output.
///
/// Each batch is encoded first, then written whole under the stdout lock and flushed,
/// so lines of parallel subtasks never mix (batches of different subtasks interleave).
pub struct StdoutSink<T> {
    encoder: Arc<MakeEncoder<T>>,
}

impl<T> fmt::Debug for StdoutSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StdoutSink")
    }
}

impl<T> Clone for StdoutSink<T> {
    fn clone(&self) -> Self {
        StdoutSink {
            encoder: Arc::clone(&self.encoder),
        }
    }
}

impl<T: Serialize + Send + 'static> Default for StdoutSink<T> {
    fn default() -> Self {
        StdoutSink::with_encoder(SerdeEncoder::<T>::default)
    }
}

impl<T: Serialize + Send + 'static> StdoutSink<T> {
    /// A sink printing to standard output.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StdoutSink<()> {
    /// Prints the JSON lines a [`FileEncoder`] of each writer's own (made by `make`)
    /// writes of the records (for records that are many rows, such as Arrow batches).
    pub fn with_encoder<E, F>(make: F) -> StdoutSink<E::In>
    where
        E: FileEncoder + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        StdoutSink {
            encoder: Arc::new(move || -> Box<dyn FileEncoder<In = E::In>> { Box::new(make()) }),
        }
    }
}

impl<T: Send + 'static> Sink for StdoutSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(StdoutWriter::<T> {
            encoder: (self.encoder)(),
            buf: Vec::new(),
            written: 0,
        }))
    }
}

struct StdoutWriter<T> {
    encoder: Box<dyn FileEncoder<In = T>>,
    buf: Vec<u8>,
    written: u64,
}

/// Appends one JSON line per record (or per row) of `batch` to `buf`; `written` counts
/// records for errors.
fn encode_batch<T>(
    encoder: &mut dyn FileEncoder<In = T>,
    batch: &Batch<T>,
    buf: &mut Vec<u8>,
    written: &mut u64,
) -> OpResult {
    let before = *written;
    *written += batch.len() as u64;
    encoder
        .json(batch, buf)
        .map_err(|e| OperatorError::BadRecord {
            position: Some(format!("stdout record {}", before + e.record as u64 + 1)),
            reason: format!("cannot encode as JSON: {}", e.reason),
        })
}

impl<T: Send + 'static> SinkWriter for StdoutWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        self.buf.clear();
        encode_batch(
            self.encoder.as_mut(),
            &batch,
            &mut self.buf,
            &mut self.written,
        )?;
        let mut out = std::io::stdout().lock();
        out.write_all(&self.buf)
            .and_then(|()| out.flush())
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    CLOSED.store(true, Ordering::Relaxed);
                }
                OperatorError::failed(format!("write to standard output: {e}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_core::element::StreamRecord;

    #[test]
    fn one_json_line_per_record() {
        let batch = vec![
            StreamRecord::new(serde_json::json!({"a": 1})),
            StreamRecord::with_timestamp(serde_json::json!("x\ny"), 5),
        ];
        let mut buf = Vec::new();
        let mut n = 0;
        let mut enc = SerdeEncoder::default();
        encode_batch(&mut enc, &batch, &mut buf, &mut n).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "{\"a\":1}\n\"x\\ny\"\n");
        assert_eq!(n, 2);
    }

    #[test]
    fn unencodable_records_name_their_number() {
        let mut bad = std::collections::HashMap::new();
        bad.insert((1, 2), 3);
        let batch = vec![StreamRecord::new(bad)];
        let mut n = 0;
        let mut enc = SerdeEncoder::default();
        let err = encode_batch(&mut enc, &batch, &mut Vec::new(), &mut n).unwrap_err();
        assert!(err.to_string().contains("stdout record 1"), "{err}");
    }
}
