//! Produce: record batches (v2) appended to the log, one log batch per partition.
//!
//! acks 0, 1 and all (-1) are served; with one broker, `all` means the same as `1`:
//! the append is durable as the log's fsync policy makes it before the answer is
//! sent (`brook broker --fsync always` for every acknowledged record on disk).
//!
//! Batches of idempotent producers (a producer id >= 0) pass the sequence checks of
//! [`crate::idempotence`] first: a retry of one of the last five batches is answered
//! with its first offset and not appended again, a gap gets
//! OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH. Batches of a
//! transactional producer (a transactional id; the batches marked transactional) go
//! into the open transaction of its session ([`crate::transactions`]), to partitions
//! added with AddPartitionsToTxn only.

use brook_log::{FsyncPolicy, Header, Log, LogError, Partition, ProducerRecord};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use tracing::debug;

use crate::error_code;
use crate::idempotence::{self, BatchMeta, Decision};
use crate::producers::{self, Producers};
use crate::transactions::Transactions;

/// Whether serving `request` may fsync, so that it belongs on a thread that may block
/// (tokio's blocking pool): under the `always` policy every append fsyncs, and a
/// transactional batch may store the transaction coordinator's state (fsynced) and
/// waits for its lock, which EndTxn holds across fsyncs. Otherwise the append only
/// writes to the page cache, as Kafka's request handler threads do.
pub fn may_fsync(request: &ProduceRequest, policy: FsyncPolicy) -> bool {
    policy == FsyncPolicy::Always || request.transactional_id.is_some()
}

/// The Produce response for `request`, after appending what it carries. With acks 0
/// the caller sends nothing back (Kafka's rule); the records are appended all the same.
pub fn handle(
    request: &ProduceRequest,
    log: &Log,
    producers: &Producers,
    txns: &Transactions,
) -> ProduceResponse {
    let acks_ok = matches!(request.acks, -1..=1);
    let txn_id = request.transactional_id.as_ref().map(|t| t.0.as_str());
    let responses = request
        .topic_data
        .iter()
        .map(|t| {
            let partition_responses = t
                .partition_data
                .iter()
                .map(|p| {
                    let answer = PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1);
                    let result = if acks_ok {
                        let target = Target {
                            log,
                            producers,
                            txns,
                            txn_id,
                        };
                        target.append(t.name.0.as_str(), p.index, p.records.as_ref())
                    } else {
                        Err((
                            ResponseError::InvalidRequiredAcks.code(),
                            format!("acks {}: must be 0, 1 or -1 (all)", request.acks),
                        ))
                    };
                    match result {
                        Ok((base_offset, log_start)) => answer
                            .with_base_offset(base_offset)
                            .with_log_start_offset(log_start),
                        Err((code, message)) => {
                            debug!(topic = %t.name.0.as_str(), partition = p.index, code, %message, "produce refused");
                            answer
                                .with_error_code(code)
                                .with_error_message(Some(StrBytes::from_string(message)))
                        }
                    }
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(partition_responses)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

/// Where a request's batches go.
struct Target<'a> {
    log: &'a Log,
    producers: &'a Producers,
    txns: &'a Transactions,
    txn_id: Option<&'a str>,
}

fn invalid(message: &str) -> (i16, String) {
    (ResponseError::InvalidRecord.code(), message.to_string())
}

impl Target<'_> {
    /// Appends the batches in `records` to one partition as one log batch; returns
    /// the first offset and the log start offset.
    fn append(
        &self,
        topic: &str,
        partition: i32,
        records: Option<&Bytes>,
    ) -> Result<(i64, i64), (i16, String)> {
        let fail = |e: LogError| (error_code(&e), e.to_string());
        let topic = self.log.topic(topic).map_err(fail)?;
        let partition = u32::try_from(partition)
            .map_err(|_| {
                fail(LogError::UnknownPartition {
                    topic: topic.name().to_string(),
                    partition: u32::MAX,
                    partitions: topic.partition_count(),
                })
            })
            .and_then(|p| topic.partition(p).map_err(fail))?;
        let batch = decode(records)?;
        let base = match (self.txn_id, batch.transactional, batch.producer) {
            (None, false, None) => partition.append(&batch.records).map_err(fail)?.base_offset,
            (None, false, Some(meta)) => self.idempotent(&partition, &meta, batch.records)?,
            (Some(id), true, Some(meta)) => {
                self.transactional(id, &partition, &meta, batch.records)?
            }
            (None, true, _) => {
                return Err(invalid(
                    "records: transactional batches need the producer's transactional id",
                ))
            }
            (Some(_), false, _) => {
                return Err(invalid(
                    "records: a producer with a transactional id writes transactional batches",
                ))
            }
            (Some(_), true, None) => {
                return Err(invalid(
                    "records: a transactional batch without a producer id",
                ))
            }
        };
        Ok((base as i64, partition.log_start_offset() as i64))
    }

    /// An idempotent producer's batch: appended once whatever the retries.
    fn idempotent(
        &self,
        partition: &Partition,
        meta: &BatchMeta,
        records: Vec<ProducerRecord>,
    ) -> Result<u64, (i16, String)> {
        let fail = |e: LogError| (error_code(&e), e.to_string());
        let lock = self.producers.partition(partition.topic(), partition.id());
        let _held = producers::lock(&lock);
        let decision = partition
            .with_producer_state(meta.log_producer_id(), |e| idempotence::check(e, meta))
            .map_err(fail)?;
        if let Some(base) = decided(decision, meta)? {
            return Ok(base);
        }
        // Stored with the batch: the log's producer state follows it, now and when
        // the partition is opened again after a restart.
        let info = partition
            .append_with_producer(&records, meta.mark())
            .map_err(fail)?;
        Ok(info.base_offset)
    }

    /// A transactional producer's batch: into its open transaction, after the
    /// session's and the sequence checks.
    fn transactional(
        &self,
        id: &str,
        partition: &Partition,
        meta: &BatchMeta,
        records: Vec<ProducerRecord>,
    ) -> Result<u64, (i16, String)> {
        let (topic, index) = (partition.topic(), partition.id());
        self.txns
            .produce(id, meta.producer_id, meta.epoch, topic, index, |producer| {
                let fail = |e: LogError| (error_code(&e), e.to_string());
                let lock = self.producers.partition(topic, index);
                let _held = producers::lock(&lock);
                let decision = partition
                    .with_producer_state(meta.log_producer_id(), |e| idempotence::check(e, meta))
                    .map_err(fail)?;
                if let Some(base) = decided(decision, meta)? {
                    return Ok(base);
                }
                let info = producer
                    .send_sequenced(topic, index, records, Some(meta.first_sequence))
                    .map_err(fail)?;
                Ok(info.base_offset)
            })
    }
}

/// `None` to append, the original first offset of a duplicate, or the error.
fn decided(decision: Decision, meta: &BatchMeta) -> Result<Option<u64>, (i16, String)> {
    match decision {
        Decision::Append => Ok(None),
        Decision::Duplicate { base_offset } => {
            debug!(
                producer_id = meta.producer_id,
                sequence = meta.first_sequence,
                base_offset,
                "duplicate batch answered with its offset"
            );
            Ok(Some(base_offset))
        }
        Decision::OutOfOrder { expected } => Err((
            ResponseError::OutOfOrderSequenceNumber.code(),
            format!(
                "producer {} epoch {}: batch sequence {} where {expected} was expected",
                meta.producer_id, meta.epoch, meta.first_sequence
            ),
        )),
        Decision::StaleEpoch { current } => Err((
            ResponseError::InvalidProducerEpoch.code(),
            format!(
                "producer {}: epoch {} is older than its current epoch {current}",
                meta.producer_id, meta.epoch
            ),
        )),
    }
}

/// The records of one partition's batches, and the producer fields they carry.
#[derive(Debug)]
pub struct Batch {
    /// The records as the log takes them.
    pub records: Vec<ProducerRecord>,
    /// The producer id, epoch and sequences of an idempotent or transactional producer.
    pub producer: Option<BatchMeta>,
    /// Whether the batches are marked transactional.
    pub transactional: bool,
}

/// The records of the batches in `bytes` as the log takes them.
///
/// # Errors
/// CORRUPT_MESSAGE for bytes that are not record batches v2,
/// UNSUPPORTED_COMPRESSION_TYPE for zstd (not built in), INVALID_RECORD for a control
/// batch from a producer or batches of different producers.
pub fn decode(bytes: Option<&Bytes>) -> Result<Batch, (i16, String)> {
    let mut batch = Batch {
        records: Vec::new(),
        producer: None,
        transactional: false,
    };
    let Some(bytes) = bytes else {
        return Ok(batch);
    };
    let mut buf = bytes.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).map_err(|e| refused(bytes, &e))?;
    batch.records = Vec::with_capacity(sets.iter().map(|s| s.records.len()).sum());
    let mut first = true;
    for set in sets {
        for r in set.records {
            if r.control {
                return Err(invalid("records: producers may not write control batches"));
            }
            let meta = (r.producer_id >= 0).then_some(BatchMeta {
                producer_id: r.producer_id,
                epoch: r.producer_epoch,
                first_sequence: r.sequence,
                last_sequence: r.sequence,
            });
            if first {
                batch.producer = meta;
                batch.transactional = r.transactional;
                first = false;
            } else {
                let same = match (&mut batch.producer, meta) {
                    (None, None) => true,
                    (Some(b), Some(m)) if (b.producer_id, b.epoch) == (m.producer_id, m.epoch) => {
                        b.last_sequence = m.last_sequence;
                        true
                    }
                    _ => false,
                };
                if !same || batch.transactional != r.transactional {
                    return Err(invalid(
                        "records: the batches of one partition come from different producers",
                    ));
                }
            }
            batch.records.push(ProducerRecord {
                key: r.key,
                // A null value is a tombstone, kept distinct from an empty value.
                tombstone: r.value.is_none(),
                value: r.value.unwrap_or_default(),
                timestamp: Some(r.timestamp),
                headers: r
                    .headers
                    .into_iter()
                    .map(|(key, value)| Header {
                        key: key.to_string(),
                        value,
                    })
                    .collect(),
            });
        }
    }
    Ok(batch)
}

/// The error for batches that do not decode: UNSUPPORTED_COMPRESSION_TYPE naming the
/// codec when they use one this build cannot read, CORRUPT_MESSAGE otherwise.
fn refused(bytes: &Bytes, e: &anyhow::Error) -> (i16, String) {
    match unserved_compression(bytes) {
        Some(codec) => (
            ResponseError::UnsupportedCompressionType.code(),
            format!(
                "records: {codec:?} compression is not supported by brook broker \
                 (served: none, gzip, snappy, lz4); set the producer's compression.type to \
                 one of those"
            ),
        ),
        None => (
            ResponseError::CorruptMessage.code(),
            format!("records: not a valid record batch v2: {e}"),
        ),
    }
}

/// The compressions this build decodes (the `kafka-protocol` features in the
/// workspace's Cargo.toml: lz4 uses the lz4 C library RocksDB links already; zstd
/// would compile another one).
const SERVED_COMPRESSION: [Compression; 4] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
];

/// The first compression in `bytes`' batch headers that this build cannot read, if any.
/// Looked at only after a batch failed to decode, so a producer using zstd gets
/// Kafka's UNSUPPORTED_COMPRESSION_TYPE, which clients report at once and do not retry,
/// instead of CORRUPT_MESSAGE ("Invalid message"), which says nothing of the cause.
fn unserved_compression(bytes: &Bytes) -> Option<Compression> {
    RecordBatchDecoder::decode_batch_info(&mut bytes.clone())
        .ok()?
        .into_iter()
        .map(|b| b.compression)
        .find(|c| !SERVED_COMPRESSION.contains(c))
}

#[cfg(test)]
mod tests {
    use brook_log::{LogOptions, ReadLimit, TopicConfig};
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{TopicName, TransactionalId};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    use super::*;

    #[test]
    fn only_the_always_policy_or_a_transaction_may_fsync() {
        let plain = ProduceRequest::default().with_acks(1);
        assert!(!may_fsync(&plain, FsyncPolicy::Interval(1_000)));
        assert!(!may_fsync(&plain, FsyncPolicy::Never));
        assert!(may_fsync(&plain, FsyncPolicy::Always));
        let txn =
            plain.with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("t"))));
        assert!(may_fsync(&txn, FsyncPolicy::Never));
    }

    pub(crate) fn batch(values: &[&str], producer_id: i64, compression: Compression) -> Bytes {
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id,
                producer_epoch: if producer_id >= 0 { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: if producer_id >= 0 { i as i32 } else { -1 },
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: IndexMap::from([(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"x")),
                )]),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode");
        buf.freeze()
    }

    fn request(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
        ProduceRequest::default()
            .with_acks(-1)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])])
    }

    fn producers() -> Producers {
        Producers::new(brook_core::time::ManualClock::new(1_000).shared())
    }

    /// A produce without producer state (plain batches).
    fn handle_plain(request: &ProduceRequest, log: &Log) -> ProduceResponse {
        handle(request, log, &producers(), &Transactions::default())
    }

    fn open() -> (tempfile::TempDir, Log) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("snacks", 2, TopicConfig::default())
            .expect("create");
        (dir, log)
    }

    #[test]
    fn appends_batches_and_answers_the_base_offset() {
        let (_dir, log) = open();
        for (compression, base) in [
            (Compression::None, 0),
            (Compression::Gzip, 2),
            (Compression::Snappy, 4),
            (Compression::Lz4, 6),
        ] {
            let r = handle_plain(
                &request("snacks", 1, batch(&["apple", "pear"], -1, compression)),
                &log,
            );
            let p = &r.responses[0].partition_responses[0];
            assert_eq!((p.error_code, p.base_offset), (0, base), "{compression:?}");
        }
        let stored = log
            .topic("snacks")
            .and_then(|t| t.partition(1))
            .and_then(|p| p.read(0, ReadLimit::default()))
            .expect("read");
        let values: Vec<&[u8]> = stored.iter().map(|r| &r.value[..]).collect();
        assert_eq!(
            values,
            vec![
                &b"apple"[..],
                b"pear",
                b"apple",
                b"pear",
                b"apple",
                b"pear",
                b"apple",
                b"pear"
            ]
        );
        assert_eq!(stored[1].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(stored[1].timestamp, 1_700_000_000_001);
        assert_eq!(stored[1].headers[0].key, "h");
    }

    #[test]
    fn unknown_topics_partitions_and_garbage_get_their_errors() {
        let (_dir, log) = open();
        let good = batch(&["a"], -1, Compression::None);
        let code = |r: ProduceResponse| r.responses[0].partition_responses[0].error_code;
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(
            code(handle_plain(&request("nope", 0, good.clone()), &log)),
            unknown
        );
        assert_eq!(
            code(handle_plain(&request("snacks", 7, good.clone()), &log)),
            unknown
        );
        assert_eq!(
            code(handle_plain(&request("snacks", -1, good), &log)),
            unknown
        );
        let garbage = Bytes::from_static(b"not a record batch at all, really not");
        assert_eq!(
            code(handle_plain(&request("snacks", 0, garbage), &log)),
            ResponseError::CorruptMessage.code()
        );
    }

    #[test]
    fn zstd_batches_get_unsupported_compression_type_and_nothing_is_appended() {
        let (_dir, log) = open();
        let plain = batch(&["a", "b"], -1, Compression::None);
        let records = RecordBatchDecoder::decode_all(&mut plain.clone())
            .expect("decode")
            .remove(0)
            .records;
        // A well-formed batch (valid CRC) whose header says zstd, as librdkafka sends
        // with compression.codec=zstd; the body is stored as is, since this build has
        // no zstd compressor (which is the point).
        let mut zstd = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        };
        RecordBatchEncoder::encode_with_custom_compression(
            &mut zstd,
            &records,
            &options,
            Some(|src: &mut BytesMut, dst: &mut BytesMut, _| {
                dst.extend_from_slice(src);
                Ok(())
            }),
        )
        .expect("encode");
        let r = handle_plain(&request("snacks", 0, zstd.freeze()), &log);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(
            p.error_code,
            ResponseError::UnsupportedCompressionType.code(),
            "{:?}",
            p.error_message
        );
        let message = p.error_message.as_ref().map(|m| m.to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("Zstd") && m.contains("gzip")),
            "{message:?}"
        );
        let end = log
            .topic("snacks")
            .and_then(|t| t.partition(0))
            .expect("p0")
            .log_end_offset();
        assert_eq!(end, 0);
    }

    fn idempotent(values: &[&str], producer_id: i64, epoch: i16, first_sequence: i32) -> Bytes {
        let plain = batch(values, producer_id, Compression::None);
        let mut records = RecordBatchDecoder::decode_all(&mut plain.clone())
            .expect("decode")
            .remove(0)
            .records;
        for (i, r) in records.iter_mut().enumerate() {
            r.producer_epoch = epoch;
            r.sequence = first_sequence + i as i32;
        }
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode");
        buf.freeze()
    }

    fn end(log: &Log) -> u64 {
        log.topic("snacks")
            .and_then(|t| t.partition(0))
            .expect("p0")
            .log_end_offset()
    }

    #[test]
    fn a_retried_idempotent_batch_is_answered_with_its_offset_and_not_appended_again() {
        let (_dir, log) = open();
        let producers = producers();
        let txns = Transactions::default();
        let send = |b: Bytes| {
            let r = handle(&request("snacks", 0, b), &log, &producers, &txns);
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        };
        assert_eq!(send(idempotent(&["a", "b"], 7, 0, 0)), (0, 0));
        assert_eq!(send(idempotent(&["c"], 7, 0, 2)), (0, 2));
        // The retry of the first batch: its offset, nothing appended.
        assert_eq!(send(idempotent(&["a", "b"], 7, 0, 0)), (0, 0));
        assert_eq!(end(&log), 3);
        // A gap.
        assert_eq!(
            send(idempotent(&["e"], 7, 0, 5)),
            (ResponseError::OutOfOrderSequenceNumber.code(), -1)
        );
        // A newer epoch starts at 0; the older one is refused from then on.
        assert_eq!(send(idempotent(&["f"], 7, 1, 0)), (0, 3));
        assert_eq!(
            send(idempotent(&["g"], 7, 0, 3)),
            (ResponseError::InvalidProducerEpoch.code(), -1)
        );
        assert_eq!(end(&log), 4);
    }

    #[test]
    fn a_retry_to_a_new_broker_on_the_reopened_log_is_answered_with_its_offset() {
        let (dir, log) = open();
        let send = |log: &Log, producers: &Producers, b: Bytes| {
            let r = handle(
                &request("snacks", 0, b),
                log,
                producers,
                &Transactions::default(),
            );
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        };
        assert_eq!(
            send(&log, &producers(), idempotent(&["a", "b"], 7, 0, 0)),
            (0, 0)
        );
        log.close().expect("close");
        drop(log);
        // A new broker process: fresh producers, the state from the log alone.
        let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
        let producers = producers();
        assert_eq!(
            send(&log, &producers, idempotent(&["a", "b"], 7, 0, 0)),
            (0, 0)
        );
        assert_eq!(end(&log), 2);
        assert_eq!(
            send(&log, &producers, idempotent(&["c"], 7, 0, 5)),
            (ResponseError::OutOfOrderSequenceNumber.code(), -1)
        );
        assert_eq!(send(&log, &producers, idempotent(&["c"], 7, 0, 2)), (0, 2));
    }

    #[test]
    fn transactional_batches_need_a_session_and_an_added_partition() {
        use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
        use kafka_protocol::messages::{
            AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, ProducerId,
        };
        let (_dir, log) = open();
        let producers = producers();
        let txns = Transactions::default();
        let id = || TransactionalId(StrBytes::from_static_str("t"));
        let txn_request = |b: Bytes| {
            let mut r = request("snacks", 0, b);
            r.transactional_id = Some(id());
            r
        };
        let code = |r: ProduceResponse| r.responses[0].partition_responses[0].error_code;
        // Plain batches from a transactional producer.
        assert_eq!(
            code(handle(
                &txn_request(batch(&["a"], -1, Compression::None)),
                &log,
                &producers,
                &txns
            )),
            ResponseError::InvalidRecord.code()
        );
        let init = txns.init_producer_id(
            &InitProducerIdRequest::default()
                .with_transaction_timeout_ms(60_000)
                .with_transactional_id(Some(id()))
                .with_producer_id(ProducerId(-1)),
            &log,
            &producers,
        );
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        let records = transactional(&["a", "b"], pid, epoch);
        // Not added to the transaction yet.
        assert_eq!(
            code(handle(
                &txn_request(records.clone()),
                &log,
                &producers,
                &txns
            )),
            ResponseError::InvalidTxnState.code()
        );
        let added = txns.add_partitions(
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(id())
                .with_v3_and_below_producer_id(ProducerId(pid))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("snacks")))
                    .with_partitions(vec![0])]),
            3,
            &log,
        );
        assert_eq!(
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            0
        );
        assert_eq!(
            code(handle(
                &txn_request(records.clone()),
                &log,
                &producers,
                &txns
            )),
            0
        );
        // A retry: not appended again.
        assert_eq!(
            code(handle(&txn_request(records), &log, &producers, &txns)),
            0
        );
        let p0 = log
            .topic("snacks")
            .and_then(|t| t.partition(0))
            .expect("p0");
        assert_eq!((p0.log_end_offset(), p0.last_stable_offset()), (2, 0));
        let ended = txns.end_txn(
            &EndTxnRequest::default()
                .with_transactional_id(id())
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true),
            3,
        );
        assert_eq!(ended.error_code, 0);
        // The records and the commit marker, all stable.
        assert_eq!((p0.log_end_offset(), p0.last_stable_offset()), (3, 3));
    }

    /// A transactional batch of `producer_id` at `epoch`, sequences from 0.
    fn transactional(values: &[&str], producer_id: i64, epoch: i16) -> Bytes {
        let plain = idempotent(values, producer_id, epoch, 0);
        let mut records = RecordBatchDecoder::decode_all(&mut plain.clone())
            .expect("decode")
            .remove(0)
            .records;
        for r in &mut records {
            r.transactional = true;
        }
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode");
        buf.freeze()
    }
}
