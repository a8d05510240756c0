//! Records as producers hand them in and as readers get them back.

use std::sync::Arc;

use bytes::Bytes;

/// A record header: a string key and optional bytes, as Kafka's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's name.
    pub key: String,
    /// The header's value; `None` is distinct from empty.
    pub value: Option<Bytes>,
}

/// A record to append: optional key, value, optional timestamp and headers.
///
/// A record without a timestamp is stamped with the log's clock (ms since the epoch)
/// when it is appended, as Kafka's `CreateTime` default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerRecord {
    /// The key; decides the partition (murmur2, as Kafka) when one is not given.
    pub key: Option<Bytes>,
    /// The value (ignored for a tombstone).
    pub value: Bytes,
    /// Event time in ms since the Unix epoch; `None` means "now".
    pub timestamp: Option<i64>,
    /// Headers, in order.
    pub headers: Vec<Header>,
    /// The value is null: a tombstone, which in a compacted topic deletes the key
    /// (Kafka's null value; distinct from an empty value). See
    /// [`ProducerRecord::tombstone`].
    pub tombstone: bool,
}

impl ProducerRecord {
    /// A keyless record with this value.
    pub fn new(value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            value: value.into(),
            ..Default::default()
        }
    }

    /// A keyed record.
    pub fn keyed(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            key: Some(key.into()),
            value: value.into(),
            ..Default::default()
        }
    }

    /// A tombstone for `key`: a record with a null value, which in a compacted topic
    /// deletes the key once compaction has run (`docs/semantics.md` §1, after Kafka's
    /// log compaction).
    pub fn tombstone(key: impl Into<Bytes>) -> Self {
        ProducerRecord {
            key: Some(key.into()),
            tombstone: true,
            ..Default::default()
        }
    }

    /// Sets the timestamp (ms since the Unix epoch).
    pub fn with_timestamp(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push(Header {
            key: key.into(),
            value,
        });
        self
    }
}

/// A stored record of one partition, as read back.
///
/// Keys and values share the buffer they were read into, so reading does not allocate
/// per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its offset in the partition.
    pub offset: u64,
    /// Its timestamp (ms since the Unix epoch).
    pub timestamp: i64,
    /// Its key.
    pub key: Option<Bytes>,
    /// Its value (empty for a tombstone).
    pub value: Bytes,
    /// Whether the value is null (a tombstone), not just empty.
    pub tombstone: bool,
    /// Its headers.
    pub headers: Vec<Header>,
}

impl Record {
    /// Whether the value is null (Kafka's tombstone), not just empty.
    pub fn is_tombstone(&self) -> bool {
        self.tombstone
    }

    /// The value, `None` for a tombstone (as a Kafka client's null value).
    pub fn value_opt(&self) -> Option<&Bytes> {
        (!self.tombstone).then_some(&self.value)
    }
}

/// A record together with where it came from, as a consumer returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The record, with its offset.
    pub record: Record,
}
