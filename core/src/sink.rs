//! Sinks: a [`Sink`] describes an output and creates a [`SinkWriter`] per subtask.
//!
//! Exactly-once output is a two-phase commit tied to checkpoints, as Flink's
//! `TwoPhaseCommittingSink`: on a barrier the writer *pre-commits* what it has written
//! since the last one and returns a committable (stored in the checkpoint); when the
//! checkpoint is complete the committables are *committed*. After a crash the job
//! restores the last complete checkpoint and commits its committables again, so
//! committing must be idempotent. A sink without this is at least once.

mod value_encoder;

pub use value_encoder::{EncodeError, JsonEncoder, Message, MessageSpan, Messages, ValueEncoder};

use crate::checkpoint::CheckpointId;
use crate::element::Batch;
use crate::operator::{OpResult, SubtaskInfo};

/// An output of a job.
pub trait Sink: Send + Sync + 'static {
    /// Type of the records written.
    type In: Send + 'static;

    /// A writer for one subtask.
    fn create_writer(&self, info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = Self::In>>>;

    /// A writer for one subtask of a job that takes checkpoints: a sink that can
    /// commit in two phases makes its output visible only when a checkpoint completes
    /// (and at the end of input). The default is [`Sink::create_writer`] (at least
    /// once).
    fn create_committing_writer(
        &self,
        info: &SubtaskInfo,
    ) -> OpResult<Box<dyn SinkWriter<In = Self::In>>> {
        self.create_writer(info)
    }

    /// A writer for one subtask of a job restoring from a checkpoint: first commit
    /// `committables` (pre-committed before the crash; committing twice must be
    /// harmless) and clean up what aborted attempts left. The default ignores them
    /// (at-least-once sinks have none).
    fn restore_writer(
        &self,
        info: &SubtaskInfo,
        _committables: Vec<Vec<u8>>,
    ) -> OpResult<Box<dyn SinkWriter<In = Self::In>>> {
        self.create_committing_writer(info)
    }

    /// Restoring at `parallelism`: the committables that new subtask `index` is given
    /// (then passed to [`Sink::restore_writer`]), out of the restored checkpoint's,
    /// listed as `(former subtask, its committables in order)`. A pure decision, made
    /// by every new subtask for itself; each committable must go to exactly one.
    ///
    /// The default hands former subtask `j`'s to `j % parallelism`, all together (what
    /// a transactional id per subtask needs). A sink whose committables name the output
    /// they belong to (the file sink) can hand each to the subtask that owns that
    /// output now, as Flink's `FileSink` redistributes its writers' bucket states.
    fn restored_committables(
        &self,
        restored: &[(u32, Vec<Vec<u8>>)],
        index: u32,
        parallelism: u32,
    ) -> Vec<Vec<u8>> {
        restored
            .iter()
            .filter(|(former, _)| former % parallelism.max(1) == index)
            .flat_map(|(_, c)| c.iter().cloned())
            .collect()
    }
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

    /// End of input: flush everything (and make it final: there is no later
    /// checkpoint to commit it).
    fn finish(&mut self) -> OpResult {
        self.flush()
    }

    /// A barrier of checkpoint `checkpoint` passed: make what was written since the
    /// last one durable but not yet visible, and return what commits it (`None`: the
    /// default, a flush; nothing to commit).
    fn prepare_commit(&mut self, _checkpoint: CheckpointId) -> OpResult<Option<Vec<u8>>> {
        self.flush()?;
        Ok(None)
    }

    /// Checkpoint `checkpoint` is complete: commit what [`SinkWriter::prepare_commit`]
    /// returned for it and for earlier checkpoints not yet committed.
    fn commit(&mut self, _checkpoint: CheckpointId, _committables: Vec<Vec<u8>>) -> OpResult {
        Ok(())
    }

    /// Always called last: release resources.
    fn close(&mut self) {}
}
