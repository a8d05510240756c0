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
    /// The value.
    pub value: Bytes,
    /// Event time in ms since the Unix epoch; `None` means "now".
    pub timestamp: Option<i64>,
    /// Headers, in order.
    pub headers: Vec<Header>,
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
    /// Its value.
    pub value: Bytes,
    /// Its headers.
    pub headers: Vec<Header>,
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
