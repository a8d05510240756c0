//! Blocking helpers around a broker, for tools, tests and benchmarks: create and
//! delete topics, write records, read a topic to its end.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::sink::Deliveries;
use crate::KafkaConnectorError;

/// How long an admin call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

fn err(context: String) -> impl FnOnce(KafkaError) -> KafkaConnectorError {
    move |source| KafkaConnectorError::Kafka { context, source }
}

/// Creates `topic` with `partitions` partitions (replication 1); an existing topic
/// is an error.
///
/// # Errors
/// The broker cannot be reached or refuses.
pub fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<(), KafkaConnectorError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(err(format!("admin client for {bootstrap}")))?;
    let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = futures::executor::block_on(admin.create_topics([&t], &AdminOptions::new()))
        .map_err(err(format!("create topic {topic:?}")))?;
    for r in res {
        if let Err((_, code)) = r {
            return Err(KafkaConnectorError::Kafka {
                context: format!("create topic {topic:?}"),
                source: KafkaError::AdminOp(code),
            });
        }
    }
    // Wait until the metadata shows every partition.
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(err("metadata client".into()))?;
    // About TIMEOUT in 50 ms steps (a count, not a clock: time is read through
    // brook's Clock in library code).
    for _ in 0..TIMEOUT.as_millis() / 50 {
        if let Ok(md) = c.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            if md.topics().iter().any(|t| {
                t.name() == topic
                    && t.error().is_none()
                    && t.partitions().len() == partitions as usize
            }) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(KafkaConnectorError::Config {
        field: "topic".into(),
        message: format!("{topic:?} was created but its metadata did not show it"),
    })
}

/// Writes `(partition, key, value, timestamp ms)` records (not transactional) and
/// waits until all are acknowledged.
///
/// # Errors
/// The broker cannot be reached, a record was not delivered (the first delivery
/// error, such as the broker refusing a record over the topic's
/// `max.message.bytes`: the records after it may have been written).
pub fn produce(
    bootstrap: &str,
    topic: &str,
    records: impl IntoIterator<Item = (i32, Option<String>, String, Option<i64>)>,
) -> Result<(), KafkaConnectorError> {
    let p: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(Deliveries::default())
        .map_err(err(format!("producer for {topic:?}")))?;
    for (partition, key, value, ts) in records {
        let mut rec: BaseRecord<'_, String, String> =
            BaseRecord::to(topic).partition(partition).payload(&value);
        if let Some(k) = &key {
            rec = rec.key(k);
        }
        if let Some(ts) = ts {
            rec = rec.timestamp(ts);
        }
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(err(format!("send to {topic:?}"))(e)),
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(TIMEOUT)
        .map_err(err(format!("flush to {topic:?}")))?;
    // Every delivery report has been served by flush: a failed one is here now.
    let failed = p
        .context()
        .error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    match failed {
        Some(e) => Err(KafkaConnectorError::Config {
            field: "send".into(),
            message: format!("delivery to {topic:?} failed: {e}"),
        }),
        None => Ok(()),
    }
}

/// One record read by [`read_to_end`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The key, as UTF-8 (lossy).
    pub key: Option<String>,
    /// The value, as UTF-8 (lossy).
    pub value: String,
}

/// Reads every partition of `topic` from the start to its end now, as a reader with
/// `isolation.level=read_committed` (true) or `read_uncommitted`.
///
/// # Errors
/// The broker cannot be reached, the topic does not exist.
pub fn read_to_end(
    bootstrap: &str,
    topic: &str,
    read_committed: bool,
) -> Result<Vec<ReadRecord>, KafkaConnectorError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("brook-read-{topic}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set(
            "isolation.level",
            if read_committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create()
        .map_err(err(format!("consumer of {topic:?}")))?;
    let md = c
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(err(format!("metadata of {topic:?}")))?;
    let n = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len() as i32);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(err("assign".into()))?;
    }
    c.assign(&tpl).map_err(err(format!("assign {topic:?}")))?;
    let mut out = Vec::new();
    let mut eof = std::collections::HashSet::new();
    // Polls of 100 ms that found nothing, in a row.
    let mut idle = 0;
    while (eof.len() as i32) < n {
        if idle > TIMEOUT.as_millis() / 100 {
            return Err(KafkaConnectorError::Config {
                field: "topic".into(),
                message: format!("{topic:?}: nothing more to read for {TIMEOUT:?}, not at the end"),
            });
        }
        let polled = c.poll(Duration::from_millis(100));
        idle = if polled.is_none() { idle + 1 } else { 0 };
        match polled {
            None => {}
            Some(Ok(m)) => out.push(ReadRecord {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                value: String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            }),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => return Err(err(format!("read {topic:?}"))(e)),
        }
    }
    Ok(out)
}

/// The offsets `group` has committed for the partitions of `topic` (partitions without
/// a committed offset are left out).
///
/// # Errors
/// The broker cannot be reached, the topic does not exist.
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> Result<std::collections::BTreeMap<i32, i64>, KafkaConnectorError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(err(format!("consumer of group {group:?}")))?;
    let md = c
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(err(format!("metadata of {topic:?}")))?;
    let n = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len() as i32);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, TIMEOUT)
        .map_err(err(format!("committed offsets of group {group:?}")))?;
    Ok(got
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}
