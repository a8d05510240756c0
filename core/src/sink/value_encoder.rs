//! How a topic's sink (the log's, Kafka's) turns its input into messages: a
//! [`ValueEncoder`]. The sinks' own ([`JsonEncoder`]) writes each record's serde JSON
//! as one message; another may write many messages for one record (a YAML job's
//! writes a message per row of an Arrow batch, keyed by a column), the counterpart of
//! the sources' [`ValueDecoder`](crate::source::ValueDecoder).

use std::marker::PhantomData;
use std::ops::Range;

use serde::Serialize;

use crate::element::Batch;

/// A record the encoder could not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    /// Its index in the engine batch given to the encoder.
    pub record: usize,
    /// Why.
    pub reason: String,
}

/// Where one message's bytes are in a [`Messages`] buffer, and its timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpan {
    /// The key's bytes, if it has one.
    pub key: Option<Range<usize>>,
    /// The value's bytes.
    pub value: Range<usize>,
    /// Its timestamp (ms since the epoch), if any: the record's event time.
    pub timestamp: Option<i64>,
}

/// The messages of an engine batch: their keys and values in one buffer (no
/// allocation per message), and where each one is.
#[derive(Debug, Default, Clone)]
pub struct Messages {
    bytes: Vec<u8>,
    spans: Vec<MessageSpan>,
}

/// One message of [`Messages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value.
    pub value: &'a [u8],
    /// Its timestamp (ms).
    pub timestamp: Option<i64>,
}

impl Messages {
    /// The buffer to write keys and values into; [`Messages::push`] then says where
    /// they are.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Adds a message whose key and value are at these ranges of [`Messages::buf`].
    pub fn push(&mut self, key: Option<Range<usize>>, value: Range<usize>, timestamp: Option<i64>) {
        self.spans.push(MessageSpan {
            key,
            value,
            timestamp,
        });
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Forgets every message, keeping the memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = Message<'_>> + '_ {
        self.spans.iter().map(|s| Message {
            key: s.key.clone().map(|k| &self.bytes[k]),
            value: &self.bytes[s.value.clone()],
            timestamp: s.timestamp,
        })
    }

    /// The buffer and the spans, to hand the bytes on without copying them.
    pub fn into_parts(self) -> (Vec<u8>, Vec<MessageSpan>) {
        (self.bytes, self.spans)
    }
}

/// Turns a topic sink's records into messages (see the [module docs](self)). One per
/// writer (subtask); engine batches come in order.
pub trait ValueEncoder: Send {
    /// The records of the sink.
    type In;

    /// Appends the messages of `batch` to `out`.
    ///
    /// # Errors
    /// The first record that cannot be written.
    fn encode(&mut self, batch: &Batch<Self::In>, out: &mut Messages) -> Result<(), EncodeError>;
}

/// Each record's serde JSON as one message without a key, with the record's event
/// time as its timestamp (the sinks' `key_by` gives keys).
pub struct JsonEncoder<T>(PhantomData<fn(&T)>);

impl<T> Default for JsonEncoder<T> {
    fn default() -> Self {
        JsonEncoder(PhantomData)
    }
}

impl<T> std::fmt::Debug for JsonEncoder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonEncoder")
    }
}

impl<T: Serialize> ValueEncoder for JsonEncoder<T> {
    type In = T;

    fn encode(&mut self, batch: &Batch<T>, out: &mut Messages) -> Result<(), EncodeError> {
        for (record, r) in batch.iter().enumerate() {
            let start = out.bytes.len();
            serde_json::to_writer(&mut out.bytes, &r.value).map_err(|e| {
                out.bytes.truncate(start);
                EncodeError {
                    record,
                    reason: format!("cannot encode as JSON: {e}"),
                }
            })?;
            let end = out.bytes.len();
            out.push(None, start..end, r.timestamp);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::StreamRecord;

    #[test]
    fn json_messages_share_one_buffer() {
        let batch = vec![
            StreamRecord {
                value: serde_json::json!({"a": 1}),
                timestamp: Some(5),
            },
            StreamRecord {
                value: serde_json::json!("x"),
                timestamp: None,
            },
        ];
        let mut out = Messages::default();
        JsonEncoder::default().encode(&batch, &mut out).unwrap();
        let got: Vec<_> = out.iter().collect();
        assert_eq!(
            got,
            [
                Message {
                    key: None,
                    value: br#"{"a":1}"#,
                    timestamp: Some(5)
                },
                Message {
                    key: None,
                    value: br#""x""#,
                    timestamp: None
                },
            ]
        );
        out.clear();
        assert!(out.is_empty());
    }
}
