//! What flows through a stream: batches of records and in-band control elements.

use crate::checkpoint::CheckpointBarrier;
use crate::time::{Millis, Watermark};

/// One record of a stream: a value and its event time, as Flink's `StreamRecord`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord<T> {
    /// The record's value.
    pub value: T,
    /// Event time in ms since the Unix epoch, when one has been assigned.
    pub timestamp: Option<Millis>,
}

impl<T> StreamRecord<T> {
    /// A record without a timestamp.
    pub fn new(value: T) -> Self {
        StreamRecord {
            value,
            timestamp: None,
        }
    }

    /// A record with an event time (ms).
    pub fn with_timestamp(value: T, timestamp: Millis) -> Self {
        StreamRecord {
            value,
            timestamp: Some(timestamp),
        }
    }

    /// The same timestamp on another value.
    pub fn replace<U>(&self, value: U) -> StreamRecord<U> {
        StreamRecord {
            value,
            timestamp: self.timestamp,
        }
    }
}

/// Records travel in batches: one channel message carries many records, never one.
pub type Batch<T> = Vec<StreamRecord<T>>;

/// An element on a channel between tasks: records and control messages in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamElement<T> {
    /// A batch of records.
    Records(Batch<T>),
    /// Event time has advanced to this watermark on this channel.
    Watermark(Watermark),
    /// The channel is idle (true) or active again (false); an idle channel is left out
    /// of the minimum watermark (semantics.md §2).
    Idle(bool),
    /// Everything before belongs to this checkpoint (semantics.md §4).
    Barrier(CheckpointBarrier),
    /// The channel's producer has finished; nothing follows.
    EndOfInput,
}
