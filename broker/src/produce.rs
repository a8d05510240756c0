//! Produce: record batches (v2) appended to the log, one log batch per partition.
//!
//! acks 0, 1 and all (-1) are served; with one broker, `all` means the same as `1`:
//! the append is durable as the log's fsync policy makes it before the answer is
//! sent (`brook broker --fsync always` for every acknowledged record on disk).
//! Idempotent and transactional producers are not served in this step: their batches
//! (a producer id >= 0) or a transactional id get UNSUPPORTED_FOR_MESSAGE_FORMAT,
//! the error Kafka returns to them where it cannot keep producer state, and the
//! records are not appended. (Their clients usually stop earlier: InitProducerId is not
//! in ApiVersions.)

use brook_log::{Header, Log, LogError, ProducerRecord};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use tracing::debug;

use crate::error_code;

/// The Produce response for `request`, after appending what it carries. With acks 0
/// the caller sends nothing back (Kafka's rule); the records are appended all the same.
pub fn handle(request: &ProduceRequest, log: &Log) -> ProduceResponse {
    let acks_ok = matches!(request.acks, -1..=1);
    let transactional = request.transactional_id.is_some();
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
                    let result = if !acks_ok {
                        Err((
                            ResponseError::InvalidRequiredAcks.code(),
                            format!("acks {}: must be 0, 1 or -1 (all)", request.acks),
                        ))
                    } else if transactional {
                        Err(unsupported_producer())
                    } else {
                        append(log, t.name.0.as_str(), p.index, p.records.as_ref())
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

fn unsupported_producer() -> (i16, String) {
    (
        ResponseError::UnsupportedForMessageFormat.code(),
        "idempotent and transactional producers are not served by brook broker yet \
         (set enable.idempotence=false, no transactional.id)"
            .to_string(),
    )
}

/// Appends the batches in `records` to one partition as one log batch; returns the
/// first offset and the log start offset.
fn append(
    log: &Log,
    topic: &str,
    partition: i32,
    records: Option<&Bytes>,
) -> Result<(i64, i64), (i16, String)> {
    let fail = |e: LogError| (error_code(&e), e.to_string());
    let topic = log.topic(topic).map_err(fail)?;
    let partition = u32::try_from(partition)
        .map_err(|_| {
            fail(LogError::UnknownPartition {
                topic: topic.name().to_string(),
                partition: u32::MAX,
                partitions: topic.partition_count(),
            })
        })
        .and_then(|p| topic.partition(p).map_err(fail))?;
    let records = decode(records)?;
    let info = partition.append(&records).map_err(fail)?;
    Ok((info.base_offset as i64, partition.log_start_offset() as i64))
}

/// The records of the batches in `bytes` as the log takes them.
///
/// # Errors
/// CORRUPT_MESSAGE for bytes that are not record batches v2,
/// UNSUPPORTED_COMPRESSION_TYPE for zstd (not built in), UNSUPPORTED_FOR_MESSAGE_FORMAT for idempotent or transactional
/// batches, INVALID_RECORD for a control batch from a producer.
pub fn decode(bytes: Option<&Bytes>) -> Result<Vec<ProducerRecord>, (i16, String)> {
    let Some(bytes) = bytes else {
        return Ok(Vec::new());
    };
    let mut buf = bytes.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).map_err(|e| refused(bytes, &e))?;
    let mut out = Vec::with_capacity(sets.iter().map(|s| s.records.len()).sum());
    for set in sets {
        for r in set.records {
            if r.producer_id >= 0 || r.transactional {
                return Err(unsupported_producer());
            }
            if r.control {
                return Err((
                    ResponseError::InvalidRecord.code(),
                    "records: producers may not write control batches".to_string(),
                ));
            }
            out.push(ProducerRecord {
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
    Ok(out)
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
            let r = handle(
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
            code(handle(&request("nope", 0, good.clone()), &log)),
            unknown
        );
        assert_eq!(
            code(handle(&request("snacks", 7, good.clone()), &log)),
            unknown
        );
        assert_eq!(code(handle(&request("snacks", -1, good), &log)), unknown);
        let garbage = Bytes::from_static(b"not a record batch at all, really not");
        assert_eq!(
            code(handle(&request("snacks", 0, garbage), &log)),
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
        let r = handle(&request("snacks", 0, zstd.freeze()), &log);
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

    #[test]
    fn idempotent_and_transactional_producers_are_refused_without_appending() {
        let (_dir, log) = open();
        let refused = ResponseError::UnsupportedForMessageFormat.code();
        let idempotent = handle(
            &request("snacks", 0, batch(&["a"], 7, Compression::None)),
            &log,
        );
        assert_eq!(
            idempotent.responses[0].partition_responses[0].error_code,
            refused
        );
        let mut txn = request("snacks", 0, batch(&["a"], -1, Compression::None));
        txn.transactional_id = Some(TransactionalId(StrBytes::from_static_str("t")));
        assert_eq!(
            handle(&txn, &log).responses[0].partition_responses[0].error_code,
            refused
        );
        let end = log
            .topic("snacks")
            .and_then(|t| t.partition(0))
            .expect("p0")
            .log_end_offset();
        assert_eq!(end, 0);
    }
}
