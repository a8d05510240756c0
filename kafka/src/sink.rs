//! [`KafkaSink`]: JSON records to a topic, in transactions with checkpoints (see the
//! [crate docs](crate)).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brook_core::checkpoint::CheckpointId;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, OperatorError, SubtaskInfo};
use brook_core::sink::{JsonEncoder, Messages, Sink, SinkWriter, ValueEncoder};
use brook_core::txn_committable::{
    marker_group, CheckpointRecords, PendingRecord as Pending, PreparedTxn, TxnCommittable,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::Serialize;

use crate::{connect, resume};
use crate::{Conn, KafkaConnectorError, TIMEOUT};

/// Delivery errors of a producer, kept until the writer checks them (the sink's
/// writers, [`crate::admin::produce`]).
#[derive(Default)]
pub(crate) struct Deliveries {
    /// The first delivery error not yet taken.
    pub(crate) error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
            g.get_or_insert_with(|| e.to_string());
        }
    }
}

/// A producer that keeps its first delivery error.
type CheckedProducer = BaseProducer<Deliveries>;

/// Computes a record's key.
type KeyFn<T> = Arc<dyn Fn(&T) -> String + Send + Sync>;

/// Makes each writer's encoder.
type MakeValueEncoder<T> = dyn Fn() -> Box<dyn ValueEncoder<In = T>> + Send + Sync;

/// A sink writing JSON records to a Kafka topic (see the [crate docs](crate)).
pub struct KafkaSink<T> {
    conn: Conn,
    key: Option<KeyFn<T>>,
    encoder: Arc<MakeValueEncoder<T>>,
    txn_prefix: Option<String>,
}

impl<T> fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("bootstrap", &self.conn.bootstrap)
            .field("topic", &self.conn.topic)
            .field("keyed", &self.key.is_some())
            .field("transactional_id_prefix", &self.txn_prefix)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            conn: self.conn.clone(),
            key: self.key.clone(),
            encoder: Arc::clone(&self.encoder),
            txn_prefix: self.txn_prefix.clone(),
        }
    }
}

impl<T: Serialize + Send + 'static> KafkaSink<T> {
    /// Writes records as JSON to `topic` on the brokers `bootstrap`.
    pub fn json(bootstrap: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSink::with_encoder(bootstrap, topic, JsonEncoder::<T>::default)
    }
}

impl KafkaSink<()> {
    /// Writes the messages a [`ValueEncoder`] of each writer's own (made by `make`)
    /// makes of the records, keys included, to `topic` on the brokers `bootstrap`:
    /// for records that are not one JSON value each, such as Arrow batches of rows.
    /// Keys are written as UTF-8 text (a byte that is not becomes U+FFFD).
    pub fn with_encoder<E, F>(
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
        make: F,
    ) -> KafkaSink<E::In>
    where
        E: ValueEncoder + 'static,
        F: Fn() -> E + Send + Sync + 'static,
    {
        KafkaSink {
            conn: Conn::new(bootstrap.into(), topic.into()),
            key: None,
            encoder: Arc::new(move || -> Box<dyn ValueEncoder<In = E::In>> { Box::new(make()) }),
            txn_prefix: None,
        }
    }
}

impl<T: Send + 'static> KafkaSink<T> {
    /// Gives each record a key; Kafka's default partitioner (murmur2) routes it. Its
    /// key replaces the encoder's; it needs an encoder that writes one message per
    /// record, as [`KafkaSink::json`]'s (another fails the writer).
    pub fn key_by<F>(mut self, key: F) -> Self
    where
        F: Fn(&T) -> String + Send + Sync + 'static,
    {
        self.key = Some(Arc::new(key));
        self
    }

    /// The first part of the transactional ids (use the job's name). Default: the
    /// topic's name. Two jobs with the same prefix and sink name fence each other.
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.txn_prefix = Some(prefix.into());
        self
    }

    /// A librdkafka property (security settings, tuning), passed as it is.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conn.properties.insert(key.into(), value.into());
        self
    }

    /// How long each writer waits for a broker at `bootstrap` to answer when it
    /// starts, warning every few seconds, before it fails (ms; default
    /// [`DEFAULT_CONNECT_TIMEOUT_MS`](crate::DEFAULT_CONNECT_TIMEOUT_MS); see [`connect`]).
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        self.conn.connect_timeout_ms = ms;
        self
    }

    fn txn_id(&self, info: &SubtaskInfo, index: u32) -> String {
        let prefix = self.txn_prefix.as_deref().unwrap_or(&self.conn.topic);
        let sink: String = info
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{prefix}.{sink}.{index}")
    }

    fn producer(&self, txn_id: Option<&str>) -> OpResult<CheckedProducer> {
        let mut c = self.conn.client_config();
        c.set("enable.idempotence", "true");
        if !self.conn.properties.contains_key("partitioner") {
            // The Java client's default partitioner (librdkafka's is CRC32).
            c.set("partitioner", "murmur2_random");
        }
        if let Some(id) = txn_id {
            c.set("transactional.id", id);
        }
        let p: CheckedProducer = c.create_with_context(Deliveries::default()).map_err(|e| {
            KafkaConnectorError::kafka(format!("producer for topic {:?}", self.conn.topic), e)
        })?;
        // A producer queues records for an unreachable broker without a word until
        // `message.timeout.ms` (5 minutes): make sure a broker answers first. Cluster
        // metadata, not the topic's: asking for a topic can create it.
        connect::topic_metadata(
            p.client(),
            &self.conn.bootstrap,
            None,
            self.conn.connect_timeout_ms,
        )
        .map_err(OperatorError::other)?;
        Ok(p)
    }

    /// A writer's encoding.
    fn encoding(&self) -> Encoding<T> {
        Encoding {
            key: self.key.clone(),
            encoder: (self.encoder)(),
            messages: Messages::default(),
            topic: self.conn.topic.clone(),
        }
    }

    /// A transactional session of `id`: fences older producers of the id.
    fn session(&self, id: &str) -> OpResult<Session> {
        let producer = self.producer(Some(id))?;
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| KafkaConnectorError::kafka(format!("init transactions of {id:?}"), e))?;
        let mut c = self.conn.client_config();
        c.set("group.id", marker_group(id));
        c.set("enable.auto.commit", "false");
        let marker: BaseConsumer = c
            .create()
            .map_err(|e| KafkaConnectorError::kafka(format!("marker consumer of {id:?}"), e))?;
        Ok(Session {
            id: id.to_string(),
            topic: self.conn.topic.clone(),
            producer,
            marker,
        })
    }

    fn transactional_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<TxnWriter<T>> {
        let own = self.txn_id(info, info.index);
        let mut decoded: Vec<CheckpointRecords> = Vec::with_capacity(committables.len());
        let mut prepared: Vec<PreparedTxn> = Vec::new();
        for b in &committables {
            match TxnCommittable::decode(b) {
                Ok(TxnCommittable::Records(c)) => decoded.push(c),
                // A checkpoint taken with the log in-process (semantics §1a).
                Ok(TxnCommittable::Prepared(p)) => prepared.push(p),
                Err(e) => {
                    return Err(KafkaConnectorError::config(
                        "restore",
                        format!("topic {:?}: {e}", self.conn.topic),
                    ))
                }
            }
        }
        // Before any session of their ids starts: a new session (InitProducerId)
        // aborts the prepared transactions it finds.
        prepared.sort_by_key(|p| (p.producer_id, p.sequence));
        for p in &prepared {
            resume::commit_prepared(&self.conn.bootstrap, p, TIMEOUT).map_err(|e| {
                KafkaConnectorError::config("restore", format!("topic {:?}: {e}", self.conn.topic))
            })?;
        }
        decoded.sort_by_key(|c| c.checkpoint);
        let mut by_id: BTreeMap<String, Vec<CheckpointRecords>> = BTreeMap::new();
        for c in decoded {
            by_id.entry(c.id.clone()).or_default().push(c);
        }
        let mut session = self.session(&own)?;
        if !by_id.contains_key(&own) {
            // Nothing of this id to commit by the marker (a fresh start, or a restore
            // of a checkpoint taken in-process): reset it, so the checkpoint ids of an
            // earlier run of the job are not taken for this one's.
            session.commit(&[], Some(0))?;
        }
        for id in prepared.iter().map(|p| &p.transactional_id) {
            if *id != own && !by_id.contains_key(id) {
                // A former subtask's id (restored at another parallelism): a session
                // aborts what it left prepared after the checkpoint.
                self.session(id)?;
            }
        }
        for (id, list) in by_id {
            if id == own {
                session.commit_restored(&list)?;
            } else {
                // A former subtask's id (restored at another parallelism).
                let mut s = self.session(&id)?;
                s.commit_restored(&list)?;
            }
        }
        Ok(TxnWriter {
            enc: self.encoding(),
            session,
            pending: Vec::new(),
            prepared: Vec::new(),
        })
    }
}

struct Session {
    id: String,
    topic: String,
    producer: CheckedProducer,
    marker: BaseConsumer,
}

impl Session {
    fn err(&self, what: &str, e: KafkaError) -> OperatorError {
        KafkaConnectorError::kafka(format!("{what} (transactional id {:?})", self.id), e)
    }

    /// The last checkpoint whose transaction this id committed (0: none).
    fn committed_checkpoint(&self) -> OpResult<u64> {
        let mut t = TopicPartitionList::new();
        t.add_partition(&self.topic, 0);
        let got = self
            .marker
            .committed_offsets(t, TIMEOUT)
            .map_err(|e| self.err("read the commit marker", e))?;
        Ok(got
            .find_partition(&self.topic, 0)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o as u64),
                _ => None,
            })
            .unwrap_or(0))
    }

    /// Commits restored committables not committed yet (by the marker).
    fn commit_restored(&mut self, list: &[CheckpointRecords]) -> OpResult {
        let done = self.committed_checkpoint()?;
        for c in list.iter().filter(|c| c.checkpoint > done) {
            self.commit(&c.records, Some(c.checkpoint))?;
        }
        Ok(())
    }

    /// Writes `records` in one transaction, with the marker set to `checkpoint`.
    fn commit(&mut self, records: &[Pending], checkpoint: Option<CheckpointId>) -> OpResult {
        self.producer
            .begin_transaction()
            .map_err(|e| self.err("begin transaction", e))?;
        for r in records {
            let mut rec: BaseRecord<'_, String, String> = BaseRecord::to(&self.topic).payload(&r.1);
            if let Some(k) = &r.0 {
                rec = rec.key(k);
            }
            if let Some(ts) = r.2 {
                rec = rec.timestamp(ts);
            }
            send(&self.producer, rec).map_err(|e| self.err("send", e))?;
        }
        if let Some(cp) = checkpoint {
            let mut t = TopicPartitionList::new();
            t.add_partition_offset(&self.topic, 0, Offset::Offset(cp as i64))
                .map_err(|e| self.err("marker", e))?;
            let meta = self
                .marker
                .group_metadata()
                .ok_or_else(|| OperatorError::failed("kafka: no consumer group metadata"))?;
            self.producer
                .send_offsets_to_transaction(&t, &meta, TIMEOUT)
                .map_err(|e| self.err("commit marker", e))?;
        }
        self.producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| self.err("commit transaction", e))?;
        let failed = self
            .producer
            .context()
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(e) = failed {
            return Err(KafkaConnectorError::config(
                "send",
                format!("delivery failed: {e}"),
            ));
        }
        Ok(())
    }
}

/// Sends one record, waiting while the producer's queue is full.
fn send<K, P>(producer: &CheckedProducer, mut rec: BaseRecord<'_, K, P>) -> Result<(), KafkaError>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(rec) {
            Ok(()) => {
                producer.poll(Duration::ZERO);
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

impl<T: Send + 'static> Sink for KafkaSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(PlainWriter {
            sink: self.clone(),
            enc: self.encoding(),
            producer: self.producer(None)?,
        }))
    }

    fn create_committing_writer(
        &self,
        info: &SubtaskInfo,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.transactional_writer(info, Vec::new())?))
    }

    fn restore_writer(
        &self,
        info: &SubtaskInfo,
        committables: Vec<Vec<u8>>,
    ) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.transactional_writer(info, committables)?))
    }
}

/// A writer's encoder, with the sink's key function and a reused buffer.
struct Encoding<T> {
    key: Option<KeyFn<T>>,
    encoder: Box<dyn ValueEncoder<In = T>>,
    messages: Messages,
    topic: String,
}

impl<T> Encoding<T> {
    /// Encodes `batch` into `self.messages`; with a key function, also the records'
    /// keys (one message per record).
    fn encode(&mut self, batch: &Batch<T>) -> OpResult<Option<Vec<String>>> {
        self.messages.clear();
        self.encoder
            .encode(batch, &mut self.messages)
            .map_err(|e| OperatorError::BadRecord {
                position: Some(format!("topic {:?}", self.topic)),
                reason: format!("record {} of an engine batch: {}", e.record + 1, e.reason),
            })?;
        let Some(key) = &self.key else {
            return Ok(None);
        };
        if self.messages.len() != batch.len() {
            return Err(OperatorError::failed(format!(
                "topic {:?}: the sink's key function needs one message per record, \
                 its encoder wrote {} for {}",
                self.topic,
                self.messages.len(),
                batch.len()
            )));
        }
        Ok(Some(batch.iter().map(|r| key(&r.value)).collect()))
    }

    /// `batch` as records to keep until their transaction.
    fn pending(&mut self, batch: &Batch<T>) -> OpResult<Vec<Pending>> {
        let keys = self.encode(batch)?;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Ok(self
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let key = match &keys {
                    Some(keys) => Some(keys[i].clone()),
                    None => m.key.map(text),
                };
                Pending(key, text(m.value), m.timestamp)
            })
            .collect())
    }
}

/// The at-least-once writer (idempotent producer) of jobs without checkpoints.
struct PlainWriter<T> {
    sink: KafkaSink<T>,
    enc: Encoding<T>,
    producer: CheckedProducer,
}

impl<T: Send + 'static> SinkWriter for PlainWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        let keys = self.enc.encode(&batch)?;
        for (i, m) in self.enc.messages.iter().enumerate() {
            let mut rec: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(&self.sink.conn.topic).payload(m.value);
            if let Some(k) = keys.as_ref().map(|k| k[i].as_bytes()).or(m.key) {
                rec = rec.key(k);
            }
            if let Some(ts) = m.timestamp {
                rec = rec.timestamp(ts);
            }
            send(&self.producer, rec).map_err(|e| {
                KafkaConnectorError::kafka(format!("send to {:?}", self.sink.conn.topic), e)
            })?;
        }
        Ok(())
    }

    fn flush(&mut self) -> OpResult {
        self.producer.flush(TIMEOUT).map_err(|e| {
            KafkaConnectorError::kafka(format!("flush to {:?}", self.sink.conn.topic), e)
        })?;
        let failed = self
            .producer
            .context()
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match failed {
            Some(e) => Err(KafkaConnectorError::config(
                "send",
                format!("delivery to {:?} failed: {e}", self.sink.conn.topic),
            )),
            None => Ok(()),
        }
    }
}

/// The exactly-once writer (see the crate docs).
struct TxnWriter<T> {
    enc: Encoding<T>,
    session: Session,
    /// Records since the last barrier.
    pending: Vec<Pending>,
    /// Committables handed to checkpoints not yet complete.
    prepared: Vec<(CheckpointId, Vec<Pending>)>,
}

impl<T: Send + 'static> SinkWriter for TxnWriter<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        let records = self.enc.pending(&batch)?;
        self.pending.extend(records);
        Ok(())
    }

    fn flush(&mut self) -> OpResult {
        Ok(())
    }

    fn prepare_commit(&mut self, checkpoint: CheckpointId) -> OpResult<Option<Vec<u8>>> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let records = std::mem::take(&mut self.pending);
        let c = CheckpointRecords::new(self.session.id.clone(), checkpoint, records);
        let bytes = c.encode();
        self.prepared.push((checkpoint, c.records));
        Ok(Some(bytes))
    }

    fn commit(&mut self, checkpoint: CheckpointId, _committables: Vec<Vec<u8>>) -> OpResult {
        // The records are kept here too: no need to decode the committables.
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.prepared)
            .into_iter()
            .partition(|(id, _)| *id <= checkpoint);
        self.prepared = later;
        for (id, records) in ready {
            self.session.commit(&records, Some(id))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> OpResult {
        let mut all: Vec<Pending> = Vec::new();
        for (_, r) in std::mem::take(&mut self.prepared) {
            all.extend(r);
        }
        all.append(&mut self.pending);
        if !all.is_empty() {
            self.session.commit(&all, None)?;
        }
        Ok(())
    }
}
