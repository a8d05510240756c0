//! The log of a data directory that a running `brook broker` holds, reached over the
//! Kafka protocol with librdkafka: what `brook topic`, `produce`, `consume` and
//! `group` do when the directory's lock is taken by a broker (see
//! [`super::log_access`]). Each operation maps onto the Kafka API a Kafka tool would
//! use for it (kafka-topics, kafka-console-producer/consumer, kafka-consumer-groups).
//! Topics and groups are here; producing in `remote_writer.rs`, reading in
//! `remote_reader.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, Result};
use brook::kafka::alter_configs::{incremental_alter_topic_configs, AlterConfigsError, AlterOp};
use brook::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
    TopicResult,
};
use brook::kafka::rdkafka::client::DefaultClientContext;
use brook::kafka::rdkafka::config::ClientConfig;
use brook::kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use brook::kafka::rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use brook::kafka::rdkafka::{Offset, TopicPartitionList};
use brook::log::{LogError, PartitionLag, TopicConfig};

use super::log_access::{MemberView, PartitionView, TopicView};

/// How long one request to the broker may take: it is on this machine.
pub(super) const TIMEOUT: Duration = Duration::from_secs(10);

/// The client id the broker shows for the CLI's connections (`brook group describe`).
pub(super) const CLIENT_ID: &str = "brook-cli";

/// A running broker's log (see the module docs).
pub(crate) struct RemoteLog {
    pub(super) addr: SocketAddr,
    /// Metadata and offsets as a `read_uncommitted` reader sees them (log end offsets).
    uncommitted: BaseConsumer,
    /// The same as a `read_committed` reader (last stable offsets).
    committed: BaseConsumer,
    admin: AdminClient<DefaultClientContext>,
}

pub(super) fn config(addr: SocketAddr) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", addr.to_string())
        .set("client.id", CLIENT_ID)
        // librdkafka logs a broker it cannot reach on its own; the CLI says it once.
        .set("log_level", "3");
    c
}

pub(super) fn kafka(context: impl Into<String>) -> impl FnOnce(KafkaError) -> anyhow::Error {
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

    /// The admin client.
    pub(super) fn admin(&self) -> &AdminClient<DefaultClientContext> {
        &self.admin
    }

    pub(super) fn admin_options() -> AdminOptions {
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
        let delete_retention_ms = c.delete_retention_ms.to_string();
        let min_compaction_lag_ms = c.min_compaction_lag_ms.to_string();
        let dirty_ratio = c.min_cleanable_dirty_ratio.0.to_string();
        let topic = NewTopic::new(name, partitions as i32, TopicReplication::Fixed(1))
            .set("retention.ms", &retention_ms)
            .set("retention.bytes", &retention_bytes)
            .set("segment.bytes", &segment_bytes)
            .set("segment.ms", &segment_ms)
            .set("max.message.bytes", &max_bytes)
            .set("cleanup.policy", c.cleanup_policy.as_str())
            .set("delete.retention.ms", &delete_retention_ms)
            .set("min.compaction.lag.ms", &min_compaction_lag_ms)
            .set("min.cleanable.dirty.ratio", &dirty_ratio);
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

    /// IncrementalAlterConfigs: a SET of each `(name, value)` (Kafka's
    /// `kafka-configs --alter --add-config`); the broker checks them as in-process.
    pub(crate) fn alter_topic(&self, name: &str, changes: &[(&str, &str)]) -> Result<()> {
        let ops: Vec<(&str, AlterOp<'_>)> = changes
            .iter()
            .map(|(config, value)| (*config, AlterOp::Set(value)))
            .collect();
        let what = format!("altering topic {name:?}");
        incremental_alter_topic_configs(self.admin.inner(), name, &ops, false, TIMEOUT).map_err(
            |e| match e {
                AlterConfigsError::Refused { code, .. } if unsupported(code) => {
                    self.admin_error("IncrementalAlterConfigs", what, code)
                }
                e => anyhow::Error::new(e).context(what),
            },
        )
    }

    /// The topic's configs from DescribeConfigs, or `None` when the broker does not
    /// serve it (or a value is missing): `describe` then shows `-`.
    pub(super) fn topic_config(&self, name: &str) -> Option<TopicConfig> {
        let spec = ResourceSpecifier::Topic(name);
        let res = futures::executor::block_on(
            self.admin.describe_configs([&spec], &Self::admin_options()),
        )
        .ok()?;
        let resource = res.into_iter().next()?.ok()?;
        let int = |key: &str| -> Option<i64> { resource.get(key)?.value.as_deref()?.parse().ok() };
        let limit = |v: i64| (v >= 0).then_some(v);
        let mut config = TopicConfig {
            retention_ms: limit(int("retention.ms")?),
            retention_bytes: limit(int("retention.bytes")?).map(|b| b as u64),
            segment_bytes: int("segment.bytes")? as u64,
            segment_ms: Some(int("segment.ms")?).filter(|ms| *ms != i64::MAX),
            max_record_bytes: int("max.message.bytes")? as u64,
            ..TopicConfig::default()
        };
        // The compaction configs, where the broker reports them (a broker without
        // them leaves the defaults, as its topics have no other).
        for name in [
            "cleanup.policy",
            "delete.retention.ms",
            "min.compaction.lag.ms",
            "min.cleanable.dirty.ratio",
        ] {
            if let Some(value) = resource.get(name).and_then(|e| e.value.as_deref()) {
                config.set(name, value).ok()?;
            }
        }
        Some(config)
    }

    /// (log start, log end, last stable offset) of a partition: ListOffsets as a
    /// `read_uncommitted` and a `read_committed` reader.
    pub(super) fn offsets(&self, topic: &str, partition: u32) -> Result<(u64, u64, u64)> {
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
                future_held: None,
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
        brook::core::names::validate_group_id(group).map_err(LogError::from)?;
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
                    partitions: m
                        .assignment()
                        .map(brook_broker::group::assigned_partitions)
                        .unwrap_or_default(),
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
                let (start, end, stable) = self.offsets(t, p)?;
                let c = committed.get(&(t.to_string(), p)).copied();
                rows.push(PartitionLag {
                    topic: t.to_string(),
                    partition: p,
                    committed: c,
                    log_start_offset: start,
                    out_of_range: c.is_some_and(|c| !(start..=end).contains(&c)),
                    log_end_offset: end,
                    last_stable_offset: stable,
                    lag: c.map(|c| stable.saturating_sub(c)),
                    member: owners.get(&(t, p)).map(|m| m.to_string()),
                });
            }
        }
        Ok((rows, members))
    }
}
