//! Sinks: a [`Sink`] describes an output and creates a [`SinkWriter`] per subtask.
//! (Two-phase commit for exactly-once output arrives with checkpoints.)

use crate::element::Batch;
use crate::operator::{OpResult, SubtaskInfo};

/// An output of a job.
pub trait Sink: Send + Sync + 'static {
    /// Type of the records written.
    type In: Send + 'static;

    /// A writer for one subtask.
    fn create_writer(&self, info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = Self::In>>>;
}

/// Writes the records of one subtask.
pub trait SinkWriter: Send {
    /// Type of the records written.
    type In: Send + 'static;

    /// Writes a batch (it may buffer).
    fn write_batch(&mut self, batch: Batch<Self::In>) -> OpResult;

    /// Makes buffered records visible to readers of the output.
    fn flush(&mut self) -> OpResult {
        Ok(())
    }

    /// End of input: flush everything.
    fn finish(&mut self) -> OpResult {
        self.flush()
    }

    /// Always called last: release resources.
    fn close(&mut self) {}
}
