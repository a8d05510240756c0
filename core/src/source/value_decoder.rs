//! How a source of messages (the log's, Kafka's) turns each record's value into its
//! output: a [`ValueDecoder`]. The sources' own is [`JsonValues`] (each value decoded
//! from JSON into a `T` with serde); another may hold values back and emit them
//! together (a YAML job's decodes many values into one Arrow batch of its schema), so a
//! reader asks it to [`flush`](ValueDecoder::flush) before it moves to another
//! partition (each record it emits comes from one split) and at the end of every poll
//! (a checkpoint never falls between a value read and its record emitted).

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::bad_record::BadRecords;
use crate::operator::{OpResult, Output};
use crate::time::Millis;

/// Where a message was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageAt<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: u64,
}

impl fmt::Display for MessageAt<'_> {
    /// `topic/partition@offset`, the position of a bad record.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

/// Turns messages' values into a source's records (see the [module docs](self)). One
/// per reader (subtask).
pub trait ValueDecoder: Send {
    /// The records of the source.
    type Out;

    /// One message's value and its timestamp (ms, the log's or the producer's). Returns
    /// how many records it emitted or holds (a reader emits about a batch per poll).
    ///
    /// # Errors
    /// A bad record under the `fail` policy (`bad`), naming `at`.
    fn value(
        &mut self,
        value: &[u8],
        timestamp: Option<Millis>,
        at: MessageAt<'_>,
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

/// Each value decoded from JSON into a `T` with serde, with the message's timestamp.
#[derive(Debug)]
pub struct JsonValues<T>(PhantomData<fn() -> T>);

impl<T> Default for JsonValues<T> {
    fn default() -> Self {
        JsonValues(PhantomData)
    }
}

impl<T: DeserializeOwned + 'static> ValueDecoder for JsonValues<T> {
    type Out = T;

    fn value(
        &mut self,
        value: &[u8],
        timestamp: Option<Millis>,
        at: MessageAt<'_>,
        bad: &BadRecords,
        out: &mut Output<T>,
    ) -> OpResult<usize> {
        emit_json(value, timestamp, || at.to_string(), bad, out)
    }
}

/// Decodes `bytes` from JSON into a `T` and emits it with `timestamp`: 1 record; or, if
/// they are not a `T`, hands them to `bad` at `position()` ("invalid JSON: ..."): 0.
/// What every source decoding records one by one with serde does.
///
/// # Errors
/// The bad record under the `fail` policy.
pub fn emit_json<T: DeserializeOwned>(
    bytes: &[u8],
    timestamp: Option<Millis>,
    position: impl FnOnce() -> String,
    bad: &BadRecords,
    out: &mut Output<T>,
) -> OpResult<usize> {
    match serde_json::from_slice::<T>(bytes) {
        Ok(v) => {
            out.collect(v, timestamp);
            Ok(1)
        }
        Err(e) => {
            bad.handle(
                &String::from_utf8_lossy(bytes),
                &position(),
                &format!("invalid JSON: {e}"),
            )?;
            Ok(0)
        }
    }
}

/// Makes each reader's [`ValueDecoder`] (a source holds one and clones it freely).
pub type MakeValueDecoder<T> = dyn Fn() -> Box<dyn ValueDecoder<Out = T>> + Send + Sync;

/// `make` as a [`MakeValueDecoder`].
pub fn value_decoders<D, F>(make: F) -> std::sync::Arc<MakeValueDecoder<D::Out>>
where
    D: ValueDecoder + 'static,
    F: Fn() -> D + Send + Sync + 'static,
{
    std::sync::Arc::new(move || -> Box<dyn ValueDecoder<Out = D::Out>> { Box::new(make()) })
}
