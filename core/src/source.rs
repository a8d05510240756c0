//! Sources, split as Flink's FLIP-27: the [`Source`] enumerates splits once per job
//! (the split enumerator), and each parallel subtask reads its splits with a
//! [`SourceReader`]. What the connectors' sources share: their settings
//! ([`SourceOptions`]: bounded or not, bad records), the split of a topic's
//! partition ([`TopicPartitionSplit`]) and how messages' values become records
//! ([`ValueDecoder`]).

use std::fmt::Debug;

use crate::operator::{OpResult, Output, SubtaskInfo};

mod options;
mod topic_partition;
mod value_decoder;

pub use options::SourceOptions;
pub use topic_partition::TopicPartitionSplit;
pub use value_decoder::{
    emit_json, value_decoders, JsonValues, MakeValueDecoder, MessageAt, ValueDecoder,
};

/// What a reader had to offer on a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStatus {
    /// More records are available right away: poll again.
    MoreAvailable,
    /// Nothing now; more may come (an unbounded source). The runtime calls
    /// [`SourceReader::wait_for_data`] before polling again.
    NothingAvailable,
    /// The reader has read all its splits (a bounded source).
    End,
}

/// A unit of work of a source: a file, a log partition, a range of generated events.
///
/// Checkpoints store positions by split id, so for a job to restore at another
/// parallelism the splits (and their ids) must not depend on the parallelism.
pub trait Split: Clone + Send + Debug + 'static {
    /// A stable id, for logs, metrics and checkpoints.
    fn split_id(&self) -> String;
}

/// A source of records: describes the input and creates a reader per subtask.
pub trait Source: Send + Sync + 'static {
    /// Type of the records read.
    type Out: Send + 'static;
    /// The source's unit of work.
    type Split: Split;

    /// All splits of the input, computed once per job (the split enumerator), knowing
    /// how many subtasks will read them. Split `i` goes to subtask `i % parallelism`.
    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<Self::Split>>;

    /// A reader for one subtask and its splits.
    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<Self::Split>,
    ) -> OpResult<Box<dyn SourceReader<Out = Self::Out>>>;

    /// Whether the input ends (files, generators) or not (a followed log).
    fn is_bounded(&self) -> bool;

    /// A reader that resumes from a checkpoint: `positions` holds, per split id, what
    /// [`SourceReader::snapshot_positions`] returned (splits missing from it start from
    /// the beginning, as new splits do). The default supports no restore.
    ///
    /// # Errors
    /// [`OperatorError`](crate::operator::OperatorError) when the source cannot resume
    /// (the default, when there is a position to resume from).
    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<Self::Split>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = Self::Out>>> {
        if splits.iter().any(|s| positions.contains_key(&s.split_id())) {
            return Err(crate::operator::OperatorError::failed(
                "this source cannot resume from a checkpoint",
            ));
        }
        self.create_reader(info, splits)
    }
}

/// Reads the records of some splits, for one subtask.
pub trait SourceReader: Send {
    /// Type of the records read.
    type Out: Send + 'static;

    /// Reads some records (a batch's worth) into `out`.
    fn poll_next(&mut self, out: &mut Output<Self::Out>) -> OpResult<InputStatus>;

    /// Blocks for up to `timeout_ms` until data may be available (after
    /// [`InputStatus::NothingAvailable`]). The default sleeps for at most 10 ms.
    fn wait_for_data(&mut self, timeout_ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(timeout_ms.min(10)));
    }

    /// The position of each split in the input after the records read so far, as
    /// `(split id, position)`, for a checkpoint; given back to
    /// [`Source::restore_reader`]. `None` when the reader cannot tell (the job then
    /// cannot be checkpointed).
    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        None
    }

    /// How far the reader is in each of its splits, as `(split id, progress)`, for
    /// metrics (called every 200 ms or so while the job runs; keep it cheap). The
    /// default reports nothing.
    fn split_progress(&self) -> Vec<(String, SplitProgress)> {
        Vec::new()
    }

    /// Checkpoint `checkpoint` starts: called right before
    /// [`SourceReader::snapshot_positions`] for it. The default does nothing.
    fn checkpoint_started(&mut self, _checkpoint: crate::checkpoint::CheckpointId) {}

    /// Checkpoint `checkpoint` is complete (every task stored its part): a reader may
    /// now tell an external system the positions it snapshotted for it (a Kafka
    /// source commits them to its consumer group, for monitoring). Checkpoints
    /// complete in order; one that completes may stand for earlier ones. The default
    /// does nothing.
    ///
    /// # Errors
    /// Only for failures that must fail the job; monitoring-only work should log.
    fn checkpoint_complete(&mut self, _checkpoint: crate::checkpoint::CheckpointId) -> OpResult {
        Ok(())
    }

    /// Always called last: release resources.
    fn close(&mut self) {}
}

/// A reader's position in one split, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitProgress {
    /// The next offset (or record number) to read.
    pub offset: u64,
    /// Records left to read up to the split's current end, when the reader knows it
    /// (a log partition: its end offset, or last stable offset read committed, minus
    /// `offset`).
    pub lag: Option<u64>,
}

/// Version byte of an offset position ([`encode_offset_position`]).
const OFFSET_POSITION_V1: u8 = 1;

/// A split's checkpointed position when it is one offset: a version byte 1, then the
/// next offset to read as a `u64`, little endian (9 bytes). The log, Kafka and
/// generator readers share this format.
pub fn encode_offset_position(offset: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(9);
    b.push(OFFSET_POSITION_V1);
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

/// The offset in a position written by [`encode_offset_position`]; `None` for bytes
/// of another format or version.
pub fn decode_offset_position(bytes: &[u8]) -> Option<u64> {
    match bytes {
        [OFFSET_POSITION_V1, rest @ ..] => Some(u64::from_le_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}
