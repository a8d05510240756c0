//! `brook consume` through a running broker: a librdkafka consumer, assigned or a
//! member of a group (see [`super::remote_log`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Result};
use brook::kafka::rdkafka::config::ClientConfig;
use brook::kafka::rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance,
};
use brook::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use brook::kafka::rdkafka::message::Message;
use brook::kafka::rdkafka::{ClientContext, Offset, TopicPartitionList};
use brook::log::{ConsumerRecord, IsolationLevel, LogError, OffsetReset, Record};
use bytes::Bytes;

use super::remote_log::{config, kafka, RemoteLog, CLIENT_ID, TIMEOUT};

/// What to read (from `brook consume`'s arguments).
#[derive(Debug, Clone)]
pub(crate) struct ReadSpec {
    pub(crate) group: Option<String>,
    pub(crate) from_beginning: bool,
    /// Explicit starts: (partition, offset); only these partitions are read.
    pub(crate) offsets: Vec<(u32, u64)>,
    pub(crate) isolation: IsolationLevel,
    /// Where a group member starts on a partition without a committed offset (or with
    /// one outside the log): Kafka's `auto.offset.reset`.
    pub(crate) auto_offset_reset: OffsetReset,
}

impl RemoteLog {
    /// A reader of `topic` (see [`RemoteReader`]).
    pub(crate) fn reader(&self, topic: &str, spec: &ReadSpec) -> Result<RemoteReader> {
        if let Some(g) = &spec.group {
            brook::core::names::validate_group_id(g).map_err(LogError::from)?;
        }
        let n = self.partition_count(topic)?;
        let mut c: ClientConfig = config(self.addr);
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
                match spec.auto_offset_reset {
                    OffsetReset::Earliest => "earliest",
                    OffsetReset::Latest => "latest",
                    // librdkafka's name for `none`: the consumer gets an error.
                    OffsetReset::None => "error",
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
            from_beginning: matches!(spec.auto_offset_reset, OffsetReset::Earliest),
            seen_assignments: 0,
        })
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
                                // Kafka's null value, as the broker serves a tombstone.
                                tombstone: m.payload().is_none(),
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
