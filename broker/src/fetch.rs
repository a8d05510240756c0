//! Fetch: records of the requested partitions as record batches v2.
//!
//! The log stores its own batch format, so each fetch re-encodes what it reads
//! (uncompressed). Isolation is applied by the broker: a read_committed fetch reads up
//! to the last stable offset and leaves out records of aborted transactions, so its
//! `aborted_transactions` list is always empty; offsets that a reader passes over
//! (control records, aborted records) are covered by a commit control batch at the end
//! of the response, which every client skips while moving its position past it, as it
//! does with Kafka's own markers.
//!
//! Long polling (`max_wait_ms`, `min_bytes`) is the server's part: [`handle`] reads
//! once and says how many bytes it found; [`watch`] gives the signals to wait on.

use std::collections::HashMap;

use brook_log::{IsolationLevel, Log, LogError, Partition, ReadLimit, RecordRef};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::watch;

use crate::{buffers, error_code};

/// What one read of a fetch found.
#[derive(Debug)]
pub struct Fetched {
    /// The response as it stands.
    pub response: FetchResponse,
    /// Bytes of record batches in it.
    pub bytes: usize,
    /// Whether a partition answered with an error (answered at once, as Kafka).
    pub has_error: bool,
}

/// Kafka's isolation level byte: 1 is read_committed, 0 read_uncommitted.
pub fn isolation(level: i8) -> IsolationLevel {
    if level == 1 {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    }
}

/// Reads what `request` asks for, within its `max_bytes` and each partition's
/// `partition_max_bytes` (at least one batch of the first partition with data, as
/// Kafka, so a record bigger than the limits is still delivered).
pub fn handle(request: &FetchRequest, log: &Log) -> Fetched {
    let isolation = isolation(request.isolation_level);
    let mut remaining = usize::try_from(request.max_bytes).unwrap_or(0);
    let mut total = 0usize;
    let mut has_error = false;
    // One list of records and one output buffer (this thread's, see `buffers`),
    // reused across partitions: each partition's batch is split off the buffer,
    // which keeps its spare capacity.
    let mut records: Vec<KafkaRecord> = Vec::new();
    let mut out = buffers::take(0);
    let responses = request
        .topics
        .iter()
        .map(|t| {
            let topic = log.topic(t.topic.0.as_str());
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let answer = PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1);
                    let partition = topic.as_ref().map_err(error_code).and_then(|topic| {
                        u32::try_from(p.partition)
                            .ok()
                            .and_then(|i| topic.partition(i).ok())
                            .ok_or(ResponseError::UnknownTopicOrPartition.code())
                    });
                    let partition = match partition {
                        Ok(partition) => partition,
                        Err(code) => {
                            has_error = true;
                            return answer.with_error_code(code);
                        }
                    };
                    let answer = answer
                        .with_high_watermark(partition.log_end_offset() as i64)
                        .with_last_stable_offset(partition.last_stable_offset() as i64)
                        .with_log_start_offset(partition.log_start_offset() as i64)
                        .with_aborted_transactions(
                            (isolation == IsolationLevel::ReadCommitted).then(Vec::new),
                        );
                    // The first data always gets through (Kafka's rule), later
                    // partitions only within what is left of max_bytes.
                    let limit = usize::try_from(p.partition_max_bytes).unwrap_or(0);
                    if total > 0 && remaining == 0 {
                        return answer.with_records(Some(Bytes::new()));
                    }
                    // Past the first data the log's "at least one batch" may overshoot
                    // max_bytes by at most one batch.
                    let limit = if total == 0 {
                        limit
                    } else {
                        limit.min(remaining)
                    };
                    match read(
                        &partition,
                        p.fetch_offset,
                        limit,
                        isolation,
                        &mut records,
                        &mut out,
                    ) {
                        Ok(Some(batches)) => {
                            total += batches.len();
                            remaining = remaining.saturating_sub(batches.len());
                            answer.with_records(Some(batches))
                        }
                        Ok(None) => answer.with_records(Some(Bytes::new())),
                        Err(code) => {
                            has_error = true;
                            answer.with_error_code(code)
                        }
                    }
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    buffers::give_back(out);
    Fetched {
        response: FetchResponse::default().with_responses(responses),
        bytes: total,
        has_error,
    }
}

/// Record batches from `offset` on, or `None` when there is nothing to read: the
/// records the log hands out, as Kafka records sharing the log's read buffers (no
/// copy, no allocation per record), encoded once by the codec into `out`, in batches
/// of [`BATCH_RECORDS`]: a list of Kafka records for a whole 10 MB fetch took 170
/// bytes per record more, fresh memory (page faults) and copies as it grew.
fn read(
    partition: &Partition,
    offset: i64,
    max_bytes: usize,
    isolation: IsolationLevel,
    records: &mut Vec<KafkaRecord>,
    out: &mut BytesMut,
) -> Result<Option<Bytes>, i16> {
    let offset = u64::try_from(offset).map_err(|_| ResponseError::OffsetOutOfRange.code())?;
    records.clear();
    let limit = ReadLimit {
        max_records: usize::MAX,
        max_bytes: max_bytes.max(1),
    };
    // Room for what the limit lets through, once (pages are only touched when
    // written); each batch then reserves what it may need beyond that.
    out.reserve(limit.max_bytes.min(buffers::MAX_KEPT));
    // The encoded size of the batch being collected is at most this (every length
    // and delta at its longest varint).
    let mut size = BATCH_OVERHEAD;
    let mut last = None;
    let mut failed = false;
    let summary = partition
        .read_shared_isolated(offset, limit, isolation, |buf, r| {
            let base = records
                .first()
                .map_or(r.offset as i64, |first| first.offset);
            size += RECORD_OVERHEAD
                + r.key.map_or(0, <[u8]>::len)
                + r.value.len()
                + r.headers
                    .iter()
                    .map(|h| 10 + h.key.len() + h.value.map_or(0, <[u8]>::len))
                    .sum::<usize>();
            records.push(to_kafka(buf, &r, base));
            last = Some(r.offset);
            if records.len() == BATCH_RECORDS {
                failed |= encode(records, size, out).is_err();
                size = BATCH_OVERHEAD;
            }
        })
        .map_err(|e| match e {
            LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
            e => error_code(&e),
        })?;
    let passed_over_tail = match last {
        Some(last) => summary.next_offset > last + 1,
        None => summary.next_offset > offset,
    };
    if last.is_none() && !passed_over_tail {
        return Ok(None);
    }
    if passed_over_tail {
        records.push(commit_marker(summary.next_offset - 1));
        size += BATCH_OVERHEAD + RECORD_OVERHEAD + 4;
    }
    if !records.is_empty() {
        failed |= encode(records, size, out).is_err();
    }
    if failed {
        out.clear();
        return Err(ResponseError::UnknownServerError.code());
    }
    Ok(Some(out.split().freeze()))
}

/// Records per encoded batch: the list of Kafka records for one stays in the CPU's
/// cache (about 170 bytes each).
const BATCH_RECORDS: usize = 1024;

/// Encodes `records` (at most `size` bytes) into `out` with the codec, as record
/// batches v2, and clears them: they hold slices of the log's read buffers, which
/// the next read can reuse once they are gone.
fn encode(records: &mut Vec<KafkaRecord>, size: usize, out: &mut BytesMut) -> anyhow::Result<()> {
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    out.reserve(size);
    let encoded = RecordBatchEncoder::encode(out, records.iter(), &options);
    records.clear();
    encoded
}

/// Bytes of a v2 batch's header (Kafka's `RECORD_BATCH_OVERHEAD`).
const BATCH_OVERHEAD: usize = 61;
/// The most bytes a v2 record takes besides its key, value and headers: the length,
/// timestamp and offset deltas, key and value lengths and header count as varints
/// at their longest, and the attributes byte.
const RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;

fn to_kafka(buf: &Bytes, r: &RecordRef<'_>, base: i64) -> KafkaRecord {
    KafkaRecord {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: r.offset as i64,
        // The encoder puts records in one batch while offset - sequence stays the same;
        // this keeps a read's records (gaps included) in one batch whose base sequence
        // is -1, "no sequence", as for any non-idempotent batch.
        sequence: (r.offset as i64 - base) as i32 - 1,
        timestamp: r.timestamp,
        key: r.key.map(|k| buf.slice_ref(k)),
        // A tombstone goes back to the client as the null value it was produced as.
        value: (!r.tombstone).then(|| buf.slice_ref(r.value)),
        headers: if r.headers.is_empty() {
            IndexMap::new()
        } else {
            r.headers
                .iter()
                .map(|h| {
                    // The log checked header keys are UTF-8 when it decoded them, so
                    // the conversion cannot fail; it only shares the bytes.
                    let key =
                        StrBytes::from_utf8(buf.slice_ref(h.key.as_bytes())).unwrap_or_default();
                    (key, h.value.map(|v| buf.slice_ref(v)))
                })
                .collect()
        },
        delete_horizon: false,
    }
}

/// A control batch (a commit marker, as Kafka's: key version 0, type 1) at `offset`,
/// so a client's position moves past records the read passed over.
fn commit_marker(offset: u64) -> KafkaRecord {
    KafkaRecord {
        transactional: true,
        control: true,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: offset as i64,
        sequence: -1,
        timestamp: -1,
        key: Some(Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(Bytes::new()),
        headers: IndexMap::new(),
        delete_horizon: false,
    }
}

/// Signals that change when a partition of `request` gets records its reader can read
/// (the log end offset, or the last stable offset for read_committed). Taken before
/// [`handle`] so nothing appended in between is missed.
pub fn watch(request: &FetchRequest, log: &Log) -> Vec<watch::Receiver<u64>> {
    let isolation = isolation(request.isolation_level);
    let mut seen = HashMap::new();
    for t in &request.topics {
        let Ok(topic) = log.topic(t.topic.0.as_str()) else {
            continue;
        };
        for p in &t.partitions {
            if let Some(partition) = u32::try_from(p.partition)
                .ok()
                .and_then(|i| topic.partition(i).ok())
            {
                seen.entry((t.topic.0.to_string(), p.partition))
                    .or_insert_with(|| partition.subscribe_end(isolation));
            }
        }
    }
    seen.into_values().collect()
}

#[cfg(test)]
mod tests {
    use brook_log::{LogOptions, ProducerRecord, TopicConfig};
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::records::RecordBatchDecoder;

    use super::*;

    fn request(topic: &str, partition: i32, offset: i64, isolation: i8) -> FetchRequest {
        FetchRequest::default()
            .with_max_bytes(1 << 20)
            .with_isolation_level(isolation)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])])
    }

    fn decoded(f: &Fetched) -> Vec<KafkaRecord> {
        let mut bytes = f.response.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        RecordBatchDecoder::decode_all(&mut bytes)
            .expect("decode")
            .into_iter()
            .flat_map(|s| s.records)
            .collect()
    }

    fn open() -> (tempfile::TempDir, Log) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 1, TopicConfig::default())
            .expect("create");
        (dir, log)
    }

    #[test]
    fn returns_records_from_the_offset_with_the_watermarks() {
        let (_dir, log) = open();
        let topic = log.topic("snacks").expect("topic");
        topic
            .append(vec![
                ProducerRecord::keyed("mia", "apple").with_timestamp(5),
                ProducerRecord::keyed("leo", "pear").with_timestamp(6),
                ProducerRecord::new("plum").with_timestamp(7),
            ])
            .expect("append");
        let f = handle(&request("snacks", 0, 1, 0), &log);
        let p = &f.response.responses[0].partitions[0];
        assert_eq!(
            (p.error_code, p.high_watermark, p.last_stable_offset),
            (0, 3, 3)
        );
        let got = decoded(&f);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].offset, got[1].offset), (1, 2));
        assert_eq!(got[0].key.as_deref(), Some(&b"leo"[..]));
        assert_eq!(got[1].value.as_deref(), Some(&b"plum"[..]));
        assert_eq!(got[1].timestamp, 7);
        assert!(f.bytes > 0);
        // At the end: no records, no error, 0 bytes (the server then waits).
        let at_end = handle(&request("snacks", 0, 3, 0), &log);
        assert_eq!(at_end.bytes, 0);
        assert!(!at_end.has_error);
    }

    #[test]
    fn read_committed_stops_at_the_last_stable_offset() {
        let (_dir, log) = open();
        log.topic("snacks")
            .and_then(|t| t.append(vec![ProducerRecord::new("before")]))
            .expect("append");
        let mut producer = log.init_transactions("t1").expect("init");
        producer.begin().expect("begin");
        producer
            .send_to("snacks", 0, vec![ProducerRecord::new("open")])
            .expect("send");
        let committed = handle(&request("snacks", 0, 0, 1), &log);
        let values: Vec<_> = decoded(&committed)
            .into_iter()
            .filter(|r| !r.control)
            .collect();
        assert_eq!(
            values.len(),
            1,
            "only the record before the open transaction"
        );
        assert_eq!(
            committed.response.responses[0].partitions[0].last_stable_offset,
            1
        );
        let uncommitted = handle(&request("snacks", 0, 0, 0), &log);
        assert_eq!(decoded(&uncommitted).len(), 2);
        producer.abort_transaction().expect("abort");
        // After the abort the reader passes over the aborted record and the marker;
        // the commit control batch at the end moves its position to the end (3).
        let after = handle(&request("snacks", 0, 1, 1), &log);
        let got = decoded(&after);
        assert!(got.iter().all(|r| r.control), "{got:?}");
        assert_eq!(got.last().map(|r| r.offset), Some(2));
    }

    #[test]
    fn a_big_read_goes_out_as_several_batches_of_every_record() {
        let (_dir, log) = open();
        let records: Vec<ProducerRecord> = (0..2_500)
            .map(|i| ProducerRecord::keyed(format!("k{i}"), format!("v{i}")).with_timestamp(i))
            .collect();
        log.topic("snacks")
            .and_then(|t| t.append(records))
            .expect("append");
        let f = handle(&request("snacks", 0, 1, 0), &log);
        let mut bytes = f.response.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        let sets = RecordBatchDecoder::decode_all(&mut bytes).expect("decode");
        assert_eq!(sets.len(), 3, "batches of {BATCH_RECORDS} records");
        let got: Vec<KafkaRecord> = sets.into_iter().flat_map(|s| s.records).collect();
        assert_eq!(got.len(), 2_499);
        for (r, i) in got.iter().zip(1i64..) {
            assert_eq!(r.offset, i);
            assert_eq!(r.timestamp, i);
            assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
            assert_eq!(r.value.as_deref(), Some(format!("v{i}").as_bytes()));
        }
    }

    #[test]
    fn out_of_range_and_unknown_partitions_are_errors() {
        let (_dir, log) = open();
        let f = handle(&request("snacks", 0, 5, 0), &log);
        assert!(f.has_error);
        assert_eq!(
            f.response.responses[0].partitions[0].error_code,
            ResponseError::OffsetOutOfRange.code()
        );
        let f = handle(&request("nope", 0, 0, 0), &log);
        assert_eq!(
            f.response.responses[0].partitions[0].error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
    }
}
