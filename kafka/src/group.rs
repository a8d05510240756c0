//! Consumer-group membership for brook's scale-out mode (a Kafka source with
//! `assignment: group`): several brook processes join one consumer group, and the
//! group's assignor (eager, `range` unless `partition.assignment.strategy` says
//! otherwise) shares the topic's partitions among them, as Kafka Streams shares its
//! tasks.
//!
//! A [`GroupMember`] only holds the membership: it subscribes, keeps its assigned
//! partitions paused (the records are read by each partition's own job, which starts
//! at its checkpointed offset) and reports revocations and assignments to a
//! [`GroupListener`] from inside [`GroupMember::poll`]. Revocation is reported before
//! the partitions go to another member, so a listener that stops a partition's job
//! with a final checkpoint hands over exactly that state. The member also commits the
//! group's offsets ([`OffsetCommitter`]): brook's source readers report a completed
//! checkpoint's positions through it, because a broker refuses commits to an active
//! group from clients that are not its members.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::KafkaConnectorError;
use brook_core::operator::OpResult;

/// Receives a group member's partition changes (called from [`GroupMember::poll`]).
pub trait GroupListener: Send + Sync {
    /// These partitions are taken away: stop reading them before returning (another
    /// member may start on them as soon as this returns).
    fn revoked(&self, partitions: &[i32]);
    /// These partitions are now this member's.
    fn assigned(&self, partitions: &[i32]);
}

/// Commits a consumer group's offsets: the next offset to read per partition.
pub trait OffsetCommitter: Send + Sync {
    /// Commits `offsets` (partition, next offset) of `topic`; asynchronous, failures
    /// are logged (the offsets are for monitoring and `start: committed`).
    fn commit(&self, topic: &str, offsets: &[(i32, u64)]);
}

struct MemberContext {
    topic: String,
    listener: Arc<dyn GroupListener>,
}

impl ClientContext for MemberContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            // Commits of positions sent while the group rebalances fail with an old
            // generation; the next checkpoint commits again: not worth a warning.
            _ if fac == "COMMITFAIL" => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka group member");
    }
}

fn partitions(topic: &str, tpl: &TopicPartitionList) -> Vec<i32> {
    let mut v: Vec<i32> = tpl
        .elements()
        .iter()
        .filter(|e| e.topic() == topic)
        .map(|e| e.partition())
        .collect();
    v.sort_unstable();
    v
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts = partitions(&self.topic, tpl);
            if !parts.is_empty() {
                self.listener.revoked(&parts);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                // The member fetches nothing itself: each partition's job reads it.
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!(topic = %self.topic, error = %e, "kafka group: pause");
                }
                let parts = partitions(&self.topic, tpl);
                self.listener.assigned(&parts);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => {
                tracing::warn!(topic = %self.topic, error = %e, "kafka group: rebalance")
            }
        }
    }
}

/// A member of a consumer group on one topic (see the module docs).
pub struct GroupMember {
    topic: String,
    bootstrap: String,
    consumer: BaseConsumer<MemberContext>,
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl GroupMember {
    /// Joins `group` on `topic` (the join completes during later [`poll`]s).
    /// `properties` go to librdkafka as they are (security, `session.timeout.ms`, ...).
    ///
    /// # Errors
    /// The client cannot be created, or the subscription is refused.
    ///
    /// [`poll`]: GroupMember::poll
    pub fn join(
        bootstrap: &str,
        topic: &str,
        group: &str,
        properties: &std::collections::BTreeMap<String, String>,
        listener: Arc<dyn GroupListener>,
    ) -> OpResult<GroupMember> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap);
        for (k, v) in properties {
            c.set(k, v);
        }
        c.set("group.id", group);
        c.set("enable.auto.commit", "false");
        c.set("enable.auto.offset.store", "false");
        if !properties.contains_key("partition.assignment.strategy") {
            // Eager: every rebalance revokes before it assigns (a simple hand-over).
            c.set("partition.assignment.strategy", "range");
        }
        let consumer: BaseConsumer<MemberContext> = c
            .create_with_context(MemberContext {
                topic: topic.to_string(),
                listener,
            })
            .map_err(|e| KafkaConnectorError::kafka(format!("group {group:?} member"), e))?;
        consumer
            .subscribe(&[topic])
            .map_err(|e| KafkaConnectorError::kafka(format!("subscribe to {topic:?}"), e))?;
        Ok(GroupMember {
            topic: topic.to_string(),
            bootstrap: bootstrap.to_string(),
            consumer,
        })
    }

    /// Keeps the membership alive and runs the listener's callbacks; call it at least
    /// every `max.poll.interval.ms` (default 300 000 ms).
    pub fn poll(&self, timeout: Duration) {
        // Assigned partitions are paused: nothing but events comes back.
        if let Some(Err(e)) = self.consumer.poll(timeout) {
            tracing::warn!(topic = %self.topic, error = %e, "kafka group: poll");
        }
    }

    /// The member id the group coordinator gave this member (`None` before it joined),
    /// as `kafka-consumer-groups --describe` shows it.
    #[allow(unsafe_code)]
    pub fn member_id(&self) -> Option<String> {
        let rk = self.consumer.client().native_ptr();
        // SAFETY: `rk` is the live handle of `self.consumer` (borrowed for this call);
        // rd_kafka_memberid returns NULL or a NUL-terminated string allocated by
        // librdkafka, copied here and then released with rd_kafka_mem_free, as its
        // documentation requires.
        unsafe {
            let p = rdkafka::bindings::rd_kafka_memberid(rk);
            if p.is_null() {
                return None;
            }
            let id = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
            rdkafka::bindings::rd_kafka_mem_free(rk, p.cast());
            (!id.is_empty()).then_some(id)
        }
    }

    /// The topic's partition count, waiting up to `connect_timeout_ms` for a broker to
    /// answer (warning every few seconds; see [`crate::connect`]).
    ///
    /// # Errors
    /// [`KafkaConnectorError::Unreachable`] when no broker answered in time, or the
    /// topic does not exist.
    pub fn partition_count(&self, connect_timeout_ms: u64) -> OpResult<i32> {
        let md = crate::connect::topic_metadata(
            self.consumer.client(),
            &self.bootstrap,
            Some(&self.topic),
            connect_timeout_ms,
        )
        .map_err(brook_core::operator::OperatorError::other)?;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .map_or(0, |t| t.partitions().len());
        if n == 0 {
            return Err(KafkaConnectorError::config(
                "topic",
                format!("{:?} does not exist", self.topic),
            ));
        }
        Ok(n as i32)
    }

    /// Leaves the group (its partitions are revoked first, through the listener).
    pub fn leave(&self) {
        self.consumer.unsubscribe();
        // Run the revocation and send the leave request.
        self.consumer.poll(Duration::from_millis(100));
    }
}

impl OffsetCommitter for GroupMember {
    fn commit(&self, topic: &str, offsets: &[(i32, u64)]) {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets {
            if tpl
                .add_partition_offset(topic, *p, Offset::Offset(*o as i64))
                .is_err()
            {
                continue;
            }
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(topic, error = %e, "kafka group: offset commit");
        }
    }
}
