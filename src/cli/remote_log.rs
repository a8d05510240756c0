//! The log of a data directory that a running `brook broker` holds, reached over the
//! Kafka protocol with librdkafka: what `brook topic`, `produce`, `consume` and
//! `group` do when the directory's lock is taken by a broker (see
//! [`super::log_access`]). Each operation maps onto the Kafka API a Kafka tool would
//! use for it (kafka-topics, kafka-console-producer/consumer, kafka-consumer-groups).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use brook::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
    TopicResult,
};
use brook::kafka::rdkafka::client::DefaultClientContext;
use brook::kafka::rdkafka::config::ClientConfig;
use brook::kafka::rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance,
};
use brook::kafka::rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use brook::kafka::rdkafka::message::{DeliveryResult, Message};
use brook::kafka::rdkafka::producer::{BaseRecord, Producer, ProducerContext};
use brook::kafka::rdkafka::{ClientContext, Offset, TopicPartitionList};
use brook::log::{ConsumerRecord, IsolationLevel, LogError, PartitionLag, Record, TopicConfig};
use bytes::{Buf, Bytes};
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

use super::log_access::{MemberView, PartitionView, TopicView};

/// How long one request to the broker may take: it is on this machine.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The client id the broker shows for the CLI's connections (`brook group describe`).
const CLIENT_ID: &str = "brook-cli";

/// A running broker's log (see the module docs).
pub(crate) struct RemoteLog {
    addr: SocketAddr,
    /// Metadata and offsets as a `read_uncommitted` reader sees them (log end offsets).
    uncommitted: BaseConsumer,
    /// The same as a `read_committed` reader (last stable offsets).
    committed: BaseConsumer,
    admin: AdminClient<DefaultClientContext>,
}

fn config(addr: SocketAddr) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", addr.to_string())
        .set("client.id", CLIENT_ID)
        // librdkafka logs a broker it cannot reach on its own; the CLI says it once.
        .set("log_level", "3");
    c
}

fn kafka(context: impl Into<String>) -> impl FnOnce(KafkaError) -> anyhow::Error {
    let context = context.into();
    move |e| anyhow::Error::new(e).context(context)
}

/// Whether librdkafka refused because the broker does not serve the API (it is left
/// out of the broker's ApiVersions).
fn unsupported(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnsupportedFeature | RDKafkaErrorCode::UnsupportedVersion
    )
}

/// The error code of `e` (librdkafka's `rdkafka_error_code` leaves admin errors out).
fn error_code(e: &KafkaError) -> Option<RDKafkaErrorCode> {
    match e {
        KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    }
}

impl RemoteLog {
    /// Connects to the broker at `addr` and checks that it answers (librdkafka's
    /// ApiVersions and Metadata requests) within `timeout`.
    ///
    /// # Errors
    /// The clients cannot be created or the broker did not answer in time.
    pub(crate) fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self> {
        let what = format!("brook broker at {addr}");
        let uncommitted: BaseConsumer = config(addr)
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(kafka(format!("client of {what}")))?;
        uncommitted
            .fetch_metadata(None, timeout)
            .map_err(kafka(format!("{what} did not answer")))?;
        let committed: BaseConsumer = config(addr)
            .set("isolation.level", "read_committed")
            .create()
            .map_err(kafka(format!("client of {what}")))?;
        let admin = config(addr)
            .create()
            .map_err(kafka(format!("admin client of {what}")))?;
        Ok(RemoteLog {
            addr,
            uncommitted,
            committed,
            admin,
        })
    }

    /// Topic names with their partition counts, sorted.
    fn topic_partitions(&self, topic: Option<&str>) -> Result<BTreeMap<String, u32>> {
        let md = self
            .uncommitted
            .fetch_metadata(topic, TIMEOUT)
            .map_err(kafka(format!(
                "metadata from brook broker at {}",
                self.addr
            )))?;
        Ok(md
            .topics()
            .iter()
            // An unknown topic comes back with an error and no partitions.
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len() as u32))
            .collect())
    }

    pub(crate) fn topics(&self) -> Result<Vec<String>> {
        Ok(self.topic_partitions(None)?.into_keys().collect())
    }

    /// The topic's partition count; [`LogError::UnknownTopic`] (the in-process message)
    /// when the broker does not have it.
    pub(crate) fn partition_count(&self, topic: &str) -> Result<u32> {
        self.topic_partitions(Some(topic))?
            .get(topic)
            .copied()
            .ok_or_else(|| LogError::UnknownTopic(topic.to_string()).into())
    }

    fn admin_options() -> AdminOptions {
        AdminOptions::new().request_timeout(Some(TIMEOUT))
    }

    /// An admin call's error, saying so when the broker does not serve `api` yet.
    fn admin_error(&self, api: &str, what: String, code: RDKafkaErrorCode) -> anyhow::Error {
        if unsupported(code) {
            anyhow!(
                "{what}: the brook broker at {} does not serve {api} (stop the broker to do this in-process)",
                self.addr
            )
        } else {
            anyhow::Error::new(KafkaError::AdminOp(code)).context(what)
        }
    }

    fn admin_call(
        &self,
        api: &str,
        what: String,
        results: KafkaResult<Vec<TopicResult>>,
    ) -> Result<()> {
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                return Err(match error_code(&e) {
                    Some(code) => self.admin_error(api, what, code),
                    None => anyhow::Error::new(e).context(what),
                })
            }
        };
        for r in results {
            if let Err((_, code)) = r {
                return Err(self.admin_error(api, what, code));
            }
        }
        Ok(())
    }

    /// CreateTopics with the topic's configs as Kafka names them.
    pub(crate) fn create_topic(&self, name: &str, partitions: u32, c: &TopicConfig) -> Result<()> {
        // The same checks and messages as in-process before anything is sent.
        brook::core::names::validate_name("topic", name).map_err(LogError::from)?;
        if partitions == 0 {
            return Err(LogError::InvalidConfig {
                field: "partitions",
                reason: "must be at least 1".into(),
            }
            .into());
        }
        c.validate()?;
        let ms = |v: Option<i64>| v.unwrap_or(-1).to_string();
        let retention_ms = ms(c.retention_ms);
        let retention_bytes = c.retention_bytes.map_or(-1, |b| b as i64).to_string();
        let segment_bytes = c.segment_bytes.to_string();
        // No `segment.ms` limit is Kafka's largest value.
        let segment_ms = c.segment_ms.unwrap_or(i64::MAX).to_string();
        let max_bytes = c.max_record_bytes.to_string();
        let topic = NewTopic::new(name, partitions as i32, TopicReplication::Fixed(1))
            .set("retention.ms", &retention_ms)
            .set("retention.bytes", &retention_bytes)
            .set("segment.bytes", &segment_bytes)
            .set("segment.ms", &segment_ms)
            .set("max.message.bytes", &max_bytes);
        let res =
            futures::executor::block_on(self.admin.create_topics([&topic], &Self::admin_options()));
        match res {
            Ok(r) => match r.into_iter().next() {
                Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {
                    Err(LogError::TopicExists(name.to_string()).into())
                }
                Some(Err((_, code))) => {
                    Err(self.admin_error("CreateTopics", format!("creating topic {name:?}"), code))
                }
                _ => Ok(()),
            },
            Err(e) => self.admin_call("CreateTopics", format!("creating topic {name:?}"), Err(e)),
        }
    }

    pub(crate) fn delete_topic(&self, name: &str) -> Result<()> {
        self.partition_count(name)?;
        let res =
            futures::executor::block_on(self.admin.delete_topics(&[name], &Self::admin_options()));
        self.admin_call("DeleteTopics", format!("deleting topic {name:?}"), res)
    }

    /// CreatePartitions up to `total`; the count before.
    pub(crate) fn add_partitions(&self, name: &str, total: u32) -> Result<u32> {
        let before = self.partition_count(name)?;
        let np = NewPartitions::new(name, total as usize);
        let res = futures::executor::block_on(
            self.admin.create_partitions([&np], &Self::admin_options()),
        );
        self.admin_call(
            "CreatePartitions",
            format!("adding partitions to topic {name:?}"),
            res,
        )?;
        Ok(before)
    }

    /// The topic's configs from DescribeConfigs, or `None` when the broker does not
    /// serve it (or a value is missing): `describe` then shows `-`.
    fn topic_config(&self, name: &str) -> Option<TopicConfig> {
        let spec = ResourceSpecifier::Topic(name);
        let res = futures::executor::block_on(
            self.admin.describe_configs([&spec], &Self::admin_options()),
        )
        .ok()?;
        let resource = res.into_iter().next()?.ok()?;
        let int = |key: &str| -> Option<i64> { resource.get(key)?.value.as_deref()?.parse().ok() };
        let limit = |v: i64| (v >= 0).then_some(v);
        Some(TopicConfig {
            retention_ms: limit(int("retention.ms")?),
            retention_bytes: limit(int("retention.bytes")?).map(|b| b as u64),
            segment_bytes: int("segment.bytes")? as u64,
            segment_ms: Some(int("segment.ms")?).filter(|ms| *ms != i64::MAX),
            max_record_bytes: int("max.message.bytes")? as u64,
            ..TopicConfig::default()
        })
    }

    /// (log start, log end, last stable offset) of a partition: ListOffsets as a
    /// `read_uncommitted` and a `read_committed` reader.
    fn offsets(&self, topic: &str, partition: u32) -> Result<(u64, u64, u64)> {
        let what = || format!("offsets of {topic}/{partition}");
        let (start, end) = self
            .uncommitted
            .fetch_watermarks(topic, partition as i32, TIMEOUT)
            .map_err(kafka(what()))?;
        let (_, stable) = self
            .committed
            .fetch_watermarks(topic, partition as i32, TIMEOUT)
            .map_err(kafka(what()))?;
        Ok((start.max(0) as u64, end.max(0) as u64, stable.max(0) as u64))
    }

    /// What Metadata, ListOffsets and (when served) DescribeConfigs tell of a topic;
    /// sizes and segments are the broker's own business (`-`).
    pub(crate) fn describe_topic(&self, name: &str) -> Result<TopicView> {
        let n = self.partition_count(name)?;
        let mut partitions = Vec::with_capacity(n as usize);
        for p in 0..n {
            let (start, end, stable) = self.offsets(name, p)?;
            partitions.push(PartitionView {
                partition: p,
                start,
                end,
                stable,
                size_bytes: None,
                segments: None,
            });
        }
        Ok(TopicView {
            name: name.to_string(),
            config: self.topic_config(name),
            partitions,
        })
    }

    /// Groups with members or committed offsets (ListGroups), sorted.
    pub(crate) fn groups(&self) -> Result<Vec<String>> {
        let list = self
            .uncommitted
            .fetch_group_list(None, TIMEOUT)
            .map_err(kafka("listing groups"))?;
        let mut names: Vec<String> = list.groups().iter().map(|g| g.name().to_string()).collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Per partition of every topic the group has committed offsets for or is assigned:
    /// as [`brook::log::Log::group_lag`], from OffsetFetch, ListOffsets and
    /// DescribeGroups; and the live members.
    pub(crate) fn group_lag(&self, group: &str) -> Result<(Vec<PartitionLag>, Vec<MemberView>)> {
        brook::core::names::validate_name("group", group).map_err(LogError::from)?;
        let list = self
            .uncommitted
            .fetch_group_list(Some(group), TIMEOUT)
            .map_err(kafka(format!("describing group {group:?}")))?;
        let mut members = Vec::new();
        for g in list.groups().iter().filter(|g| g.name() == group) {
            for m in g.members() {
                members.push(MemberView {
                    member_id: m.id().to_string(),
                    client_id: m.client_id().to_string(),
                    host: m.client_host().to_string(),
                    partitions: m.assignment().map(assigned_partitions).unwrap_or_default(),
                });
            }
        }
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        let owners: BTreeMap<(&str, u32), &str> = members
            .iter()
            .flat_map(|m| {
                m.partitions
                    .iter()
                    .map(|(t, p)| ((t.as_str(), *p), m.member_id.as_str()))
            })
            .collect();

        let topics = self.topic_partitions(None)?;
        let mut all = TopicPartitionList::new();
        for (t, n) in &topics {
            for p in 0..*n {
                all.add_partition(t, p as i32);
            }
        }
        let reader: BaseConsumer = config(self.addr)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(kafka(format!("client of group {group:?}")))?;
        let committed: BTreeMap<(String, u32), u64> = if all.count() == 0 {
            BTreeMap::new()
        } else {
            reader
                .committed_offsets(all, TIMEOUT)
                .map_err(kafka(format!("committed offsets of group {group:?}")))?
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) if o >= 0 => {
                        Some(((e.topic().to_string(), e.partition() as u32), o as u64))
                    }
                    _ => None,
                })
                .collect()
        };
        // Every partition of every topic the group reads, as in-process.
        let read: BTreeSet<&str> = committed
            .keys()
            .map(|(t, _)| t.as_str())
            .chain(owners.keys().map(|(t, _)| *t))
            .collect();
        let mut rows = Vec::new();
        for t in read {
            let Some(n) = topics.get(t) else { continue };
            for p in 0..*n {
                let (_, end, stable) = self.offsets(t, p)?;
                let c = committed.get(&(t.to_string(), p)).copied();
                rows.push(PartitionLag {
                    topic: t.to_string(),
                    partition: p,
                    committed: c,
                    log_end_offset: end,
                    last_stable_offset: stable,
                    lag: c.map(|c| stable.saturating_sub(c)),
                    member: owners.get(&(t, p)).map(|m| m.to_string()),
                });
            }
        }
        Ok((rows, members))
    }

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

    /// A reader of `topic` (see [`RemoteReader`]).
    pub(crate) fn reader(&self, topic: &str, spec: &ReadSpec) -> Result<RemoteReader> {
        if let Some(g) = &spec.group {
            brook::core::names::validate_name("group", g).map_err(LogError::from)?;
        }
        let n = self.partition_count(topic)?;
        let mut c = config(self.addr);
        c.set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            // The broker holds an empty fetch this long: how soon a reader that caught
            // up notices it (librdkafka's default is 500 ms).
            .set("fetch.wait.max.ms", "100")
            .set(
                "isolation.level",
                match spec.isolation {
                    IsolationLevel::ReadCommitted => "read_committed",
                    IsolationLevel::ReadUncommitted => "read_uncommitted",
                },
            )
            .set(
                "auto.offset.reset",
                if spec.from_beginning {
                    "earliest"
                } else {
                    "latest"
                },
            );
        // librdkafka's consumer needs a group id even to read assigned partitions; a
        // reader without `--group` never joins or commits under it.
        c.set("group.id", spec.group.as_deref().unwrap_or(CLIENT_ID));
        if let Some(g) = &spec.group {
            c.set("group.id", g)
                // Eager: every partition is revoked (and its position committed) before
                // any is assigned anew.
                .set("partition.assignment.strategy", "range");
        }
        let consumer: BaseConsumer<ReaderContext> = c
            .create_with_context(ReaderContext {
                commit: spec.group.is_some(),
                assignments: AtomicU64::new(0),
                positions: (0..n).map(|_| AtomicI64::new(-1)).collect(),
            })
            .map_err(kafka(format!("consumer of {topic:?}")))?;
        let assign = |tpl: &TopicPartitionList| {
            consumer
                .assign(tpl)
                .map_err(kafka(format!("assigning partitions of {topic:?}")))
        };
        let mut tpl = TopicPartitionList::new();
        let manual = if !spec.offsets.is_empty() {
            for &(p, o) in &spec.offsets {
                if p >= n {
                    return Err(LogError::UnknownPartition {
                        topic: topic.to_string(),
                        partition: p,
                        partitions: n,
                    }
                    .into());
                }
                let (_, end, _) = self.offsets(topic, p)?;
                if o > end {
                    bail!(
                        "--offset {p}:{o}: past the end of partition {p} of {topic}, which ends at offset {end} (the next record's)"
                    );
                }
                tpl.add_partition_offset(topic, p as i32, Offset::Offset(o as i64))
                    .map_err(kafka("--offset"))?;
            }
            assign(&tpl)?;
            true
        } else if spec.group.is_some() {
            consumer
                .subscribe(&[topic])
                .map_err(kafka(format!("subscribing to {topic:?}")))?;
            false
        } else {
            let start = if spec.from_beginning {
                Offset::Beginning
            } else {
                Offset::End
            };
            for p in 0..n {
                tpl.add_partition_offset(topic, p as i32, start)
                    .map_err(kafka("assign"))?;
            }
            assign(&tpl)?;
            true
        };
        Ok(RemoteReader {
            consumer,
            topic: topic.into(),
            manual,
            eof: BTreeSet::new(),
            from_beginning: spec.from_beginning,
            seen_assignments: 0,
        })
    }
}

/// The partitions of a member's assignment (Kafka's consumer protocol: a version,
/// then the ConsumerProtocolAssignment of that version); empty if it is not one.
fn assigned_partitions(bytes: &[u8]) -> Vec<(String, u32)> {
    let mut buf = Bytes::copy_from_slice(bytes);
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16();
    let Ok(a) = ConsumerProtocolAssignment::decode(&mut buf, version) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = a
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic.to_string(), *p as u32))
        })
        .collect();
    out.sort();
    out
}

/// What to read (from `brook consume`'s arguments).
#[derive(Debug, Clone)]
pub(crate) struct ReadSpec {
    pub(crate) group: Option<String>,
    pub(crate) from_beginning: bool,
    /// Explicit starts: (partition, offset); only these partitions are read.
    pub(crate) offsets: Vec<(u32, u64)>,
    pub(crate) isolation: IsolationLevel,
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
    producer: brook::kafka::rdkafka::producer::BaseProducer<Delivery>,
    topic: String,
    /// The topic's `max.message.bytes`, when the broker serves DescribeConfigs.
    max_record_bytes: Option<usize>,
}

impl RemoteWriter {
    pub(crate) fn max_record_bytes(&self) -> Option<usize> {
        self.max_record_bytes
    }

    /// Queues one record (line `line_no` of the input).
    pub(crate) fn send(&self, line_no: usize, key: Option<&[u8]>, value: &[u8]) -> Result<()> {
        let mut rec: BaseRecord<'_, [u8], [u8], Box<usize>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(line_no)).payload(value);
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

/// Commits a group's positions when partitions are revoked (a rebalance, or closing),
/// so the member that gets them next goes on from there; counts assignments.
pub(crate) struct ReaderContext {
    commit: bool,
    assignments: AtomicU64,
    /// Per partition (by number; -1: not known): the offset after the last record
    /// returned, or, before any, where the partition started in this assignment (its
    /// committed offset or the reset position). What is committed, as a Java consumer
    /// commits its positions. librdkafka's own position may run ahead of what the
    /// reader returned, so it is not used. Partitions added after the reader started
    /// are not committed.
    positions: Vec<AtomicI64>,
}

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // The end of a partition is how the reader knows it caught up (it also comes
        // back from poll), not an error worth a line.
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for ReaderContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            if self.commit {
                if let Err(e) = commit_positions(consumer, &self.positions) {
                    tracing::warn!("committing offsets before a rebalance: {e:#}");
                }
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(_) = rebalance {
            self.assignments.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Commits `positions` of the consumer's assigned partitions that have one.
fn commit_positions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    positions: &[AtomicI64],
) -> Result<()> {
    let assigned = consumer
        .assignment()
        .map_err(kafka("reading the assignment"))?;
    let mut tpl = TopicPartitionList::new();
    for e in assigned.elements() {
        let at = usize::try_from(e.partition())
            .ok()
            .and_then(|p| positions.get(p))
            .map_or(-1, |a| a.load(Ordering::SeqCst));
        if at >= 0 {
            tpl.add_partition_offset(e.topic(), e.partition(), Offset::Offset(at))
                .map_err(kafka("committing offsets"))?;
        }
    }
    if tpl.count() == 0 {
        return Ok(());
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .map_err(kafka("committing offsets"))
}

fn set_position(positions: &[AtomicI64], partition: i32, offset: i64) {
    if let Some(a) = usize::try_from(partition)
        .ok()
        .and_then(|p| positions.get(p))
    {
        a.store(offset, Ordering::SeqCst);
    }
}

/// Reads a topic of a broker: assigned partitions, or as a member of a group (the
/// broker splits the partitions among the group's members). Only records that will be
/// printed are taken from librdkafka, and the reader notes each one's position
/// ([`ReaderContext`]), so a commit covers exactly what was printed.
pub(crate) struct RemoteReader {
    consumer: BaseConsumer<ReaderContext>,
    topic: std::sync::Arc<str>,
    /// Partitions assigned by the reader itself (no group membership).
    manual: bool,
    /// Partitions read to their end since the last assignment.
    eof: BTreeSet<i32>,
    /// `auto.offset.reset=earliest` (else latest).
    from_beginning: bool,
    seen_assignments: u64,
}

impl RemoteReader {
    /// Whether every assigned partition was read to its end (for a group member: after
    /// it got its assignment, which may be none).
    fn caught_up(&self) -> Result<bool> {
        if !self.manual && self.consumer.context().assignments.load(Ordering::SeqCst) == 0 {
            return Ok(false);
        }
        let assigned = self
            .consumer
            .assignment()
            .map_err(kafka("reading the assignment"))?;
        Ok(assigned
            .elements()
            .iter()
            .all(|e| self.eof.contains(&e.partition())))
    }

    /// Notes where each newly assigned partition of a group starts: its committed
    /// offset, else where `auto.offset.reset` puts it (the log start, or the end a
    /// reader of this isolation level sees).
    fn resolve_starts(&self) -> Result<()> {
        let ctx = self.consumer.context();
        if !ctx.commit {
            return Ok(());
        }
        let assigned = self
            .consumer
            .assignment()
            .map_err(kafka("reading the assignment"))?;
        if assigned.count() > 0 {
            let committed = self
                .consumer
                .committed_offsets(assigned, TIMEOUT)
                .map_err(kafka(format!("committed offsets of {}", self.topic)))?;
            for e in committed.elements() {
                let start = match e.offset() {
                    Offset::Offset(o) if o >= 0 => o,
                    _ => {
                        let (low, high) = self
                            .consumer
                            .fetch_watermarks(&self.topic, e.partition(), TIMEOUT)
                            .map_err(kafka(format!(
                                "offsets of {}/{}",
                                self.topic,
                                e.partition()
                            )))?;
                        if self.from_beginning {
                            low
                        } else {
                            high
                        }
                    }
                };
                set_position(&ctx.positions, e.partition(), start);
            }
        }
        Ok(())
    }

    /// Up to `limit` records; with `follow` it waits for at least one, else it
    /// returns none once caught up.
    pub(crate) async fn poll(&mut self, limit: usize, follow: bool) -> Result<Vec<ConsumerRecord>> {
        loop {
            let mut out = Vec::new();
            while out.len() < limit {
                let polled = self.consumer.poll(Duration::ZERO);
                // A rebalance (run inside poll) restarts every partition's fetch.
                let n = self.consumer.context().assignments.load(Ordering::SeqCst);
                if n != self.seen_assignments {
                    self.seen_assignments = n;
                    self.eof.clear();
                    self.resolve_starts()?;
                }
                match polled {
                    None => break,
                    Some(Ok(m)) => {
                        self.eof.remove(&m.partition());
                        // Before the next poll, whose rebalance may commit it.
                        set_position(
                            &self.consumer.context().positions,
                            m.partition(),
                            m.offset() + 1,
                        );
                        out.push(ConsumerRecord {
                            topic: self.topic.clone(),
                            partition: m.partition() as u32,
                            record: Record {
                                offset: m.offset() as u64,
                                timestamp: m.timestamp().to_millis().unwrap_or(-1),
                                key: m.key().map(Bytes::copy_from_slice),
                                value: Bytes::copy_from_slice(m.payload().unwrap_or_default()),
                                headers: Vec::new(),
                            },
                        });
                    }
                    Some(Err(KafkaError::PartitionEOF(p))) => {
                        self.eof.insert(p);
                    }
                    Some(Err(e)) => {
                        return Err(anyhow::Error::new(e).context(format!("reading {}", self.topic)))
                    }
                }
            }
            if !out.is_empty() || (!follow && self.caught_up()?) {
                return Ok(out);
            }
            // Nothing buffered: librdkafka fetches in its own threads meanwhile.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Commits the positions of the assigned partitions to the group.
    pub(crate) fn commit(&self) -> Result<()> {
        let ctx = self.consumer.context();
        if !ctx.commit {
            return Ok(());
        }
        commit_positions(&self.consumer, &ctx.positions)
    }

    /// Leaves the group (librdkafka's close revokes the partitions, which commits).
    pub(crate) fn close(self) {
        drop(self.consumer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_members_assignment_decodes_to_its_partitions() {
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(StrBytes::from_static_str("sales").into())
                .with_partitions(vec![3, 1]),
        ]);
        let mut buf = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut buf, 1);
        a.encode(&mut buf, 1).expect("encode");
        assert_eq!(
            assigned_partitions(&buf),
            vec![("sales".to_string(), 1), ("sales".to_string(), 3)]
        );
        assert_eq!(assigned_partitions(&[0]), Vec::<(String, u32)>::new());
    }
}
