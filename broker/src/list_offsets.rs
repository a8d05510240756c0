//! ListOffsets: a partition's earliest and latest offsets, and the first offset at
//! or after a timestamp (Kafka's `offsetsForTimes`).
//!
//! Timestamps as Kafka's: -2 is the log start offset, -1 the end (the last stable
//! offset for read_committed requests, v2+; the log end offset otherwise), a time in
//! ms the first record stamped at or after it; none such answers offset -1 and
//! timestamp -1.

use brook_log::{Log, Partition, ReadLimit};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::error_code;
use crate::fetch::isolation;

/// Kafka's "earliest" query timestamp.
pub const EARLIEST: i64 = -2;
/// Kafka's "latest" query timestamp.
pub const LATEST: i64 = -1;

/// The ListOffsets response for `request` (decoded at `version`).
pub fn handle(request: &ListOffsetsRequest, version: i16, log: &Log) -> ListOffsetsResponse {
    // The leader epoch is a field of v4 on; the codec refuses it set in older ones.
    let leader_epoch = if version >= 4 { 0 } else { -1 };
    let isolation = isolation(request.isolation_level);
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = log.topic(t.name.0.as_str());
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let answer = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let partition = topic.as_ref().map_err(error_code).and_then(|topic| {
                        u32::try_from(p.partition_index)
                            .ok()
                            .and_then(|i| topic.partition(i).ok())
                            .ok_or(ResponseError::UnknownTopicOrPartition.code())
                    });
                    match partition.and_then(|partition| lookup(&partition, p.timestamp, isolation))
                    {
                        Ok((timestamp, offset)) => answer
                            .with_timestamp(timestamp)
                            .with_offset(offset)
                            .with_leader_epoch(leader_epoch),
                        Err(code) => answer.with_error_code(code),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for one query timestamp.
fn lookup(
    partition: &Partition,
    timestamp: i64,
    isolation: brook_log::IsolationLevel,
) -> Result<(i64, i64), i16> {
    match timestamp {
        EARLIEST => Ok((-1, partition.log_start_offset() as i64)),
        LATEST => Ok((-1, partition.end_offset(isolation) as i64)),
        ts if ts >= 0 => {
            let offset = partition
                .offset_for_timestamp(ts)
                .map_err(|e| error_code(&e))?;
            let Some(offset) = offset else {
                return Ok((-1, -1));
            };
            // The found record's own timestamp, as Kafka answers.
            let found = partition
                .read(offset, ReadLimit::records(1))
                .map_err(|e| error_code(&e))?;
            let stamp = found.first().map_or(ts, |r| r.timestamp);
            Ok((stamp, offset as i64))
        }
        // -3 (max timestamp) and others need versions this broker does not serve.
        _ => Err(ResponseError::UnsupportedVersion.code()),
    }
}

#[cfg(test)]
mod tests {
    use brook_log::{LogOptions, ProducerRecord, TopicConfig};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn query(timestamp: i64, isolation: i8, log: &Log) -> (i16, i64, i64) {
        let request = ListOffsetsRequest::default()
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("snacks")))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let r = handle(&request, 6, log);
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.timestamp, p.offset)
    }

    #[test]
    fn earliest_latest_and_by_timestamp() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        let topic = log
            .create_topic("snacks", 1, TopicConfig::default())
            .expect("create");
        topic
            .append(
                [100, 200, 300]
                    .into_iter()
                    .map(|ts| ProducerRecord::new("x").with_timestamp(ts))
                    .collect(),
            )
            .expect("append");
        assert_eq!(query(EARLIEST, 0, &log), (0, -1, 0));
        assert_eq!(query(LATEST, 0, &log), (0, -1, 3));
        assert_eq!(query(150, 0, &log), (0, 200, 1));
        assert_eq!(query(200, 0, &log), (0, 200, 1));
        assert_eq!(query(301, 0, &log), (0, -1, -1));
        // An open transaction holds read_committed's latest at the LSO.
        let mut producer = log.init_transactions("t").expect("init");
        producer.begin().expect("begin");
        producer
            .send_to("snacks", 0, vec![ProducerRecord::new("open")])
            .expect("send");
        assert_eq!(query(LATEST, 1, &log), (0, -1, 3));
        assert_eq!(query(LATEST, 0, &log), (0, -1, 4));
    }
}
