//! `brook produce` through a running broker: a librdkafka producer (see
//! [`super::remote_log`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use brook::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use brook::kafka::rdkafka::message::DeliveryResult;
use brook::kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use brook::kafka::rdkafka::ClientContext;

use super::remote_log::{config, kafka, RemoteLog, TIMEOUT};

impl RemoteLog {
    /// A producer of `topic` (acks=all, Kafka's murmur2 partitioner for keys).
    pub(crate) fn writer(&self, topic: &str) -> Result<RemoteWriter> {
        self.partition_count(topic)?;
        let producer = config(self.addr)
            .set("acks", "all")
            // Keys land where brook's in-process producer (and the Java client) puts
            // them; librdkafka's default would hash with CRC32.
            .set("partitioner", "murmur2_random")
            // Idempotence needs InitProducerId; plain appends are what the in-process
            // `brook produce` does too.
            .set("enable.idempotence", "false")
            .set("linger.ms", "5")
            .create_with_context(Delivery::default())
            .map_err(kafka(format!("producer of {topic:?}")))?;
        Ok(RemoteWriter {
            producer,
            topic: topic.to_string(),
            max_record_bytes: self
                .topic_config(topic)
                .map(|c| c.max_record_bytes as usize),
        })
    }
}

/// Counts deliveries and keeps the first failure with its line number.
#[derive(Default)]
struct Delivery {
    delivered: AtomicU64,
    failed: Mutex<Option<(usize, KafkaError)>>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    /// The record's line number.
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, result: &DeliveryResult<'_>, line: Box<usize>) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert((*line, e.clone()));
            }
        }
    }
}

/// Records to a topic of a broker; [`RemoteWriter::finish`] waits for their acks.
pub(crate) struct RemoteWriter {
    producer: BaseProducer<Delivery>,
    topic: String,
    /// The topic's `max.message.bytes`, when the broker serves DescribeConfigs.
    max_record_bytes: Option<usize>,
}

impl RemoteWriter {
    pub(crate) fn max_record_bytes(&self) -> Option<usize> {
        self.max_record_bytes
    }

    /// Queues one record (line `line_no` of the input); a `None` value is sent as
    /// Kafka's null value (a tombstone).
    pub(crate) fn send(
        &self,
        line_no: usize,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
    ) -> Result<()> {
        let mut rec: BaseRecord<'_, [u8], [u8], Box<usize>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(line_no));
        if let Some(t) = timestamp_ms {
            rec = rec.timestamp(t);
        }
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        if let Some(k) = key {
            rec = rec.key(k);
        }
        loop {
            match self.producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("line {line_no}: producing to {}", self.topic)))
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Waits until every queued record is acknowledged by all replicas (acks=all);
    /// the count acknowledged, or the first failure naming its line.
    pub(crate) fn finish(self) -> Result<u64> {
        self.producer.flush(TIMEOUT).map_err(kafka(format!(
            "waiting for the broker's acks on {}",
            self.topic
        )))?;
        let ctx = self.producer.context();
        if let Some((line, e)) = ctx.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(
                anyhow::Error::new(e).context(format!("line {line}: producing to {}", self.topic))
            );
        }
        Ok(ctx.delivered.load(Ordering::Relaxed))
    }
}
