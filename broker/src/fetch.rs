//! Fetch: records of the requested partitions as record batches v2.
//!
//! The log stores its own batch format, so each fetch re-encodes what it reads
//! (uncompressed). Isolation as Kafka's: a read_uncommitted fetch gets every data
//! record up to the log end offset; a read_committed fetch gets the batches up to the
//! last stable offset as they are stored — transactional data batches with their
//! producer id and epoch and the transactional attribute, records of aborted
//! transactions included, and the real COMMIT/ABORT control batches (a control record
//! with Kafka's key: version 0, type 0 = ABORT / 1 = COMMIT; value: version 0,
//! coordinator epoch 0) — plus the list of aborted transactions (producer id, first
//! offset) whose ranges meet the offsets sent, from the partition's
//! aborted-transaction index ([`brook_log::Partition::read_stored`]). The client
//! drops an aborted producer's records from that first offset until the producer's
//! ABORT marker, as it does against Kafka (a read where the producer id alone cannot
//! tell which records to drop shows each transaction under an id of its own: see
//! [`crate::txn_ids`]). Offsets that no batch covers at the end of
//! a read (records compaction removed) are covered by a commit control batch of no
//! producer, which every client skips while moving its position past it.
//!
//! Long polling (`max_wait_ms`, `min_bytes`) is the server's part: [`handle`] reads
//! once and says how many bytes it found; [`watch`] gives the signals to wait on.

use std::collections::HashMap;

use brook_log::format::BatchHeader;
use brook_log::{
    AbortedTransaction, ControlType, IsolationLevel, Log, LogError, Partition, ReadLimit,
    ReadSummary, RecordRef, StoredRead,
};
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction as KafkaAbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::watch;

use crate::txn_ids::{distinct_id, needs_distinct_ids, TxnBatch};
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
                        .with_log_start_offset(partition.log_start_offset() as i64);
                    // The first data always gets through (Kafka's rule), later
                    // partitions only within what is left of max_bytes.
                    let limit = usize::try_from(p.partition_max_bytes).unwrap_or(0);
                    if total > 0 && remaining == 0 {
                        return answer
                            .with_records(Some(Bytes::new()))
                            .with_aborted_transactions(
                                (isolation == IsolationLevel::ReadCommitted).then(Vec::new),
                            );
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
                        Ok((batches, aborted)) => {
                            let answer = answer.with_aborted_transactions(
                                (isolation == IsolationLevel::ReadCommitted).then_some(aborted),
                            );
                            let Some(batches) = batches else {
                                return answer.with_records(Some(Bytes::new()));
                            };
                            total += batches.len();
                            remaining = remaining.saturating_sub(batches.len());
                            answer.with_records(Some(batches))
                        }
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

/// Record batches from `offset` on, or `None` when there is nothing to read, and (read
/// committed) the aborted transactions they meet, as Kafka's list: the records the log hands out, as
/// Kafka records sharing the log's read buffers (no copy, no allocation per record),
/// encoded once by the codec into `out`, in batches of [`BATCH_RECORDS`]: a list of
/// Kafka records for a whole 10 MB fetch took 170 bytes per record more, fresh memory
/// (page faults) and copies as it grew.
fn read(
    partition: &Partition,
    offset: i64,
    max_bytes: usize,
    isolation: IsolationLevel,
    records: &mut Vec<KafkaRecord>,
    out: &mut BytesMut,
) -> Result<(Option<Bytes>, Vec<KafkaAbortedTransaction>), i16> {
    let offset = u64::try_from(offset).map_err(|_| ResponseError::OffsetOutOfRange.code())?;
    records.clear();
    let limit = ReadLimit {
        max_records: usize::MAX,
        max_bytes: max_bytes.max(1),
    };
    // Room for what the limit lets through, once (pages are only touched when
    // written); each batch then reserves what it may need beyond that.
    out.reserve(limit.max_bytes.min(buffers::MAX_KEPT));
    let mut batch = Batcher {
        records,
        out,
        size: BATCH_OVERHEAD,
        last: None,
        failed: false,
    };
    let read = match isolation {
        IsolationLevel::ReadUncommitted => partition
            .read_shared_isolated(offset, limit, isolation, |buf, r| {
                let base = batch
                    .records
                    .first()
                    .map_or(r.offset as i64, |first| first.offset);
                batch.push(to_kafka(buf, &r, base), &r);
            })
            .map(|summary| (summary, Vec::new())),
        // Kafka's read_committed: the batches as stored, markers and aborted records
        // included, and the list the client filters by.
        IsolationLevel::ReadCommitted => {
            let mut txns = Vec::new();
            let (read, distinct) =
                match read_stored(partition, offset, limit, &mut batch, &mut txns, false) {
                    // Rare (see `txn_ids`): read again showing each transaction apart.
                    Ok(read) if needs_distinct_ids(&txns, &read.aborted) => {
                        batch.reset();
                        let again =
                            read_stored(partition, offset, limit, &mut batch, &mut txns, true);
                        (again, true)
                    }
                    read => (read, false),
                };
            read.map(|read| {
                let aborted = read
                    .aborted
                    .iter()
                    .map(|a| to_kafka_aborted(a, distinct))
                    .collect();
                (read.summary, aborted)
            })
        }
    };
    let (summary, aborted) = read.map_err(|e| match e {
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
        e => error_code(&e),
    })?;
    let batches = batch.finish(offset, summary)?;
    Ok((batches, aborted))
}

/// A read_committed read into `batch` (see [`Partition::read_stored`]), noting each
/// transactional batch in `txns`; with `distinct`, transactional batches show
/// [`distinct_id`]s.
fn read_stored(
    partition: &Partition,
    offset: u64,
    limit: ReadLimit,
    batch: &mut Batcher<'_>,
    txns: &mut Vec<TxnBatch>,
    distinct: bool,
) -> Result<StoredRead, LogError> {
    txns.clear();
    partition.read_stored(offset, limit, |buf, h, r| {
        if let Some(t) = &h.txn {
            // One entry per stored batch (not per record): the check runs on these.
            match txns.last_mut() {
                Some(last) if last.first_offset >= h.base_offset => last.last_offset = r.offset,
                _ => txns.push(TxnBatch {
                    first_offset: r.offset,
                    last_offset: r.offset,
                    producer_id: t.producer_id,
                    sequence: t.sequence,
                }),
            }
        }
        batch.push(to_kafka_stored(buf, h, &r, distinct), &r);
    })
}

/// An aborted transaction as Kafka's list has it; with `distinct`, under its
/// [`distinct_id`].
fn to_kafka_aborted(a: &AbortedTransaction, distinct: bool) -> KafkaAbortedTransaction {
    let id = if distinct {
        distinct_id(a.producer_id, a.sequence)
    } else {
        a.producer_id as i64
    };
    KafkaAbortedTransaction::default()
        .with_producer_id(ProducerId(id))
        .with_first_offset(a.first_offset as i64)
}

/// Collects the Kafka records of one read and encodes them in batches of
/// [`BATCH_RECORDS`].
struct Batcher<'a> {
    records: &'a mut Vec<KafkaRecord>,
    out: &'a mut BytesMut,
    /// The encoded size of the batch being collected is at most this (every length
    /// and delta at its longest varint).
    size: usize,
    /// The offset of the last record collected.
    last: Option<u64>,
    failed: bool,
}

impl Batcher<'_> {
    /// Drops what was collected and encoded, to read again.
    fn reset(&mut self) {
        self.records.clear();
        self.out.clear();
        self.size = BATCH_OVERHEAD;
        self.last = None;
        self.failed = false;
    }

    #[inline]
    fn push(&mut self, record: KafkaRecord, r: &RecordRef<'_>) {
        self.size += RECORD_OVERHEAD
            + r.key.map_or(0, <[u8]>::len)
            + r.value.len()
            + r.headers
                .iter()
                .map(|h| 10 + h.key.len() + h.value.map_or(0, <[u8]>::len))
                .sum::<usize>();
        self.records.push(record);
        self.last = Some(r.offset);
        if self.records.len() == BATCH_RECORDS {
            self.failed |= encode(self.records, self.size, self.out).is_err();
            self.size = BATCH_OVERHEAD;
        }
    }

    /// Encodes what is left, with a commit marker over offsets the read passed over
    /// at its end; `None` when the read found nothing.
    fn finish(self, offset: u64, summary: ReadSummary) -> Result<Option<Bytes>, i16> {
        let Batcher {
            records,
            out,
            mut size,
            last,
            mut failed,
        } = self;
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

/// A record of a stored batch as a read_committed fetch sends it: with the batch's
/// producer id and epoch, its transactional and control attributes, and a control
/// record's key and value in Kafka's encoding (the log stores its own).
/// With `distinct`, a transaction's batches show its [`distinct_id`].
#[inline]
fn to_kafka_stored(buf: &Bytes, h: &BatchHeader, r: &RecordRef<'_>, distinct: bool) -> KafkaRecord {
    let delta = r.offset - h.base_offset;
    let (producer_id, producer_epoch, sequence) = match (&h.producer, &h.txn) {
        // A Kafka producer's batch: its own fields and record sequences.
        (Some(p), _) => (
            p.producer_id as i64,
            p.epoch as i16,
            brook_log::format::increment_sequence(p.base_sequence, delta as u32),
        ),
        // A transaction written in-process: its producer id and epoch, no sequence.
        // The sequence still goes from -1 at the stored batch's first record, so the
        // encoder starts a new Kafka batch where a stored one starts.
        (None, Some(t)) => (t.producer_id as i64, t.epoch as i16, delta as i32 - 1),
        (None, None) => (-1, -1, delta as i32 - 1),
    };
    let mut record = to_kafka(buf, r, r.offset as i64);
    record.producer_id = match &h.txn {
        Some(t) if distinct => distinct_id(t.producer_id, t.sequence),
        _ => producer_id,
    };
    record.producer_epoch = producer_epoch;
    record.sequence = sequence;
    record.transactional = h.txn.is_some();
    if h.is_control() {
        record.control = true;
        let kind = r.key.and_then(ControlType::from_record_key);
        record.key = Some(Bytes::from_static(match kind {
            Some(ControlType::Abort) => &ABORT_KEY,
            _ => &COMMIT_KEY,
        }));
        record.value = Some(Bytes::from_static(&MARKER_VALUE));
    }
    record
}

/// Kafka's control record keys (`ControlRecordType`: version 0, then the type as
/// int16 big-endian: 0 ABORT, 1 COMMIT).
const ABORT_KEY: [u8; 4] = [0, 0, 0, 0];
const COMMIT_KEY: [u8; 4] = [0, 0, 0, 1];
/// Kafka's end-transaction marker value (`EndTransactionMarker`): version 0 (int16),
/// coordinator epoch (int32; brook has one coordinator that never moves: 0).
const MARKER_VALUE: [u8; 6] = [0; 6];

/// A control batch (a commit marker, as Kafka's: key version 0, type 1) at `offset`,
/// of no producer, so a client's position moves past offsets the read passed over.
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
        key: Some(Bytes::from_static(&COMMIT_KEY)),
        value: Some(Bytes::from_static(&MARKER_VALUE)),
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
        // After the abort the reader gets the aborted record and the abort marker as
        // stored, and the transaction in the list to drop the record by.
        let after = handle(&request("snacks", 0, 1, 1), &log);
        let got = decoded(&after);
        assert_eq!(
            got.iter()
                .map(|r| (r.offset, r.control))
                .collect::<Vec<_>>(),
            vec![(1, false), (2, true)]
        );
        let listed = after.response.responses[0].partitions[0]
            .aborted_transactions
            .clone()
            .expect("a list at read_committed");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].first_offset, 1);
        assert_eq!(listed[0].producer_id.0, got[0].producer_id);
    }

    #[test]
    fn read_committed_sends_the_stored_batches_with_the_markers_and_the_aborted_list() {
        let (_dir, log) = open();
        let mut producer = log.init_transactions("t1").expect("init");
        // c 0, commit 1, a0 a1 2-3, abort 4, plain 5, d 6, commit 7.
        for (value, commit) in [("c", true), ("a", false), ("d", true)] {
            producer.begin().expect("begin");
            let records = if value == "a" {
                vec![ProducerRecord::new("a0"), ProducerRecord::new("a1")]
            } else {
                vec![ProducerRecord::new(value)]
            };
            producer.send_to("snacks", 0, records).expect("send");
            if commit {
                producer.commit_transaction().expect("commit");
            } else {
                producer.abort_transaction().expect("abort");
                log.topic("snacks")
                    .and_then(|t| t.append(vec![ProducerRecord::new("plain")]))
                    .expect("append");
            }
        }
        let f = handle(&request("snacks", 0, 0, 1), &log);
        let p = &f.response.responses[0].partitions[0];
        assert_eq!((p.high_watermark, p.last_stable_offset), (8, 8));
        let mut bytes = p.records.clone().unwrap_or_default();
        let sets = RecordBatchDecoder::decode_all(&mut bytes).expect("decode");
        let got: Vec<KafkaRecord> = sets.into_iter().flat_map(|s| s.records).collect();
        assert_eq!(
            got.iter().map(|r| r.offset).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        let pid = got[0].producer_id;
        assert!(pid >= 0);
        for r in &got {
            let plain = r.offset == 5;
            assert_eq!(r.transactional, !plain, "{r:?}");
            assert_eq!(r.producer_id, if plain { -1 } else { pid }, "{r:?}");
        }
        // The markers as Kafka's control records: key version 0 and type (0 abort,
        // 1 commit), value version 0 and coordinator epoch.
        let markers: Vec<(i64, Vec<u8>, Vec<u8>)> = got
            .iter()
            .filter(|r| r.control)
            .map(|r| {
                let bytes = |b: &Option<Bytes>| b.as_deref().unwrap_or_default().to_vec();
                (r.offset, bytes(&r.key), bytes(&r.value))
            })
            .collect();
        let (commit, abort, value) = (vec![0, 0, 0, 1], vec![0, 0, 0, 0], vec![0; 6]);
        assert_eq!(
            markers,
            vec![
                (1, commit.clone(), value.clone()),
                (4, abort, value.clone()),
                (7, commit, value),
            ]
        );
        let listed: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        assert_eq!(listed, vec![(pid, 2)]);
        let kept: Vec<i64> = kafka_filter(p).iter().map(|r| r.0).collect();
        assert_eq!(kept, vec![0, 5, 6]);
        // After the abort marker nothing is listed; read_uncommitted never lists.
        let later = handle(&request("snacks", 0, 5, 1), &log);
        let later = &later.response.responses[0].partitions[0];
        assert_eq!(later.aborted_transactions.as_ref().map(Vec::len), Some(0));
        let uncommitted = handle(&request("snacks", 0, 0, 0), &log);
        let uncommitted = &uncommitted.response.responses[0].partitions[0];
        assert_eq!(uncommitted.aborted_transactions, None);
    }

    /// The data records a read_committed Kafka client keeps from one partition's
    /// answer (Java's `CompletedFetch`, kafka-python's): a transactional batch of
    /// producer P is dropped while P is aborted, which it becomes when a batch reaches
    /// the first offset of one of P's listed transactions, until P's ABORT marker.
    fn kafka_filter(p: &PartitionData) -> Vec<(i64, String)> {
        let mut bytes = p.records.clone().unwrap_or_default();
        let sets = RecordBatchDecoder::decode_all(&mut bytes).expect("decode");
        let mut queue: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        queue.sort_unstable();
        let mut queue = queue.into_iter().peekable();
        let mut aborted = std::collections::BTreeSet::new();
        let mut kept = Vec::new();
        for set in sets {
            let Some(first) = set.records.first() else {
                continue;
            };
            let last = set.records.last().map_or(first.offset, |r| r.offset);
            if first.transactional {
                while let Some((_, pid)) = queue.next_if(|(f, _)| *f <= last) {
                    aborted.insert(pid);
                }
                if first.control {
                    if first.key.as_deref() == Some(&[0, 0, 0, 0][..]) {
                        aborted.remove(&first.producer_id);
                    }
                    continue;
                }
                if aborted.contains(&first.producer_id) {
                    continue;
                }
            } else if first.control {
                continue;
            }
            kept.extend(set.records.iter().map(|r| {
                let value = r.value.clone().unwrap_or_default();
                (r.offset, String::from_utf8_lossy(&value).into_owned())
            }));
        }
        kept
    }

    #[test]
    fn a_transaction_aborted_after_the_next_one_wrote_shows_each_under_its_own_id() {
        let (_dir, log) = open();
        let mut producer = log.init_transactions("sink").expect("init");
        // As the log sink: one transaction prepared, the next one begun and written,
        // then the prepared one aborted and the next one committed. Offsets: a0 a1
        // 0-1, c0 2, abort marker 3, commit marker 4.
        producer.begin().expect("begin");
        producer
            .send_to(
                "snacks",
                0,
                vec![ProducerRecord::new("a0"), ProducerRecord::new("a1")],
            )
            .expect("send");
        let prepared = producer.prepare().expect("prepare");
        producer.begin().expect("begin");
        producer
            .send_to("snacks", 0, vec![ProducerRecord::new("c0")])
            .expect("send");
        producer.abort(&prepared).expect("abort");
        producer.commit_transaction().expect("commit");
        for from in 0..5 {
            let f = handle(&request("snacks", 0, from, 1), &log);
            let p = &f.response.responses[0].partitions[0];
            let want = if from <= 2 {
                vec![(2, "c0".to_string())]
            } else {
                vec![]
            };
            assert_eq!(kafka_filter(p), want, "from {from}");
        }
        let got = decoded(&handle(&request("snacks", 0, 0, 1), &log));
        assert_ne!(got[0].producer_id, got[2].producer_id);
        assert_eq!(got[0].producer_id, got[3].producer_id, "the abort marker");
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
