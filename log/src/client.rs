//! The async (tokio) producer and consumer.
//!
//! The [`Consumer`] follows Kafka's consumer: it either subscribes to topics as a
//! member of a consumer group (partitions are assigned by the group and move on
//! rebalance) or is assigned partitions by hand. It keeps a position per partition,
//! starts from the group's committed offset or the reset policy, and commits on
//! request. [`Consumer::poll`] waits for new records without spinning.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{select, select_all, Either};
use tracing::{debug, info};

use crate::error::{LogError, Result};
use crate::group::{AssignmentStrategy, CommitIdentity, GroupError, Membership, TopicPartition};
use crate::log::Log;
use crate::partition::{AppendInfo, IsolationLevel, Partition, ReadLimit};
use crate::record::{ConsumerRecord, ProducerRecord};

/// Appends records to topics of a [`Log`] from async code.
#[derive(Debug, Clone)]
pub struct Producer {
    log: Log,
}

impl Producer {
    /// A producer for `log`.
    pub fn new(log: Log) -> Self {
        Producer { log }
    }

    /// Appends `records` to `topic` (each to the partition its key chooses) on a
    /// blocking thread, and returns when they are durable according to the log's fsync
    /// policy. See [`crate::Topic::append`].
    ///
    /// # Errors
    /// As [`crate::Topic::append`].
    pub async fn send(&self, topic: &str, records: Vec<ProducerRecord>) -> Result<Vec<AppendInfo>> {
        let topic = self.log.topic(topic)?;
        tokio::task::spawn_blocking(move || topic.append(records))
            .await
            .map_err(|e| LogError::Internal(format!("append task failed: {e}")))?
    }

    /// Appends to one partition, chosen by the caller.
    ///
    /// # Errors
    /// As [`Partition::append`].
    pub async fn send_to(
        &self,
        topic: &str,
        partition: u32,
        records: Vec<ProducerRecord>,
    ) -> Result<AppendInfo> {
        let p = self.log.topic(topic)?.partition(partition)?;
        tokio::task::spawn_blocking(move || p.append(&records))
            .await
            .map_err(|e| LogError::Internal(format!("append task failed: {e}")))?
    }
}

/// What a consumer does when it has no valid position (no committed offset, or the
/// position is outside [log start, log end]: retention deleted past it, or it was set
/// beyond the end), as Kafka's `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// Start at the log start offset.
    Earliest,
    /// Start at the log end offset (only new records).
    Latest,
    /// Fail with [`LogError::OffsetOutOfRange`] ([`LogError::GroupOffsetOutOfRange`]
    /// for a consumer of a group, naming it).
    None,
}

impl std::str::FromStr for OffsetReset {
    type Err = LogError;
    /// Parses `earliest`, `latest` or `none` (Kafka's values).
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            _ => Err(LogError::InvalidConfig {
                field: "auto-offset-reset",
                reason: format!("{s:?} is not one of earliest, latest, none"),
            }),
        }
    }
}

/// Consumer settings. Defaults follow Kafka's consumer where they exist.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// The consumer group; required to subscribe, optional for manual assignment
    /// (then it only names where commits go).
    pub group: Option<String>,
    /// Prefix of the member id the group assigns.
    pub client_id: String,
    /// A member not heard from for this long (ms) is evicted. Default 45 000.
    pub session_timeout_ms: i64,
    /// How often (ms) [`Consumer::poll`] heartbeats. Default 3 000.
    pub heartbeat_interval_ms: i64,
    /// Where to start without a committed offset, or when the position is outside
    /// [log start, log end]. Default [`OffsetReset::Latest`].
    pub auto_offset_reset: OffsetReset,
    /// How the group assigns partitions. Default range.
    pub strategy: AssignmentStrategy,
    /// Limits of one poll. Default 500 records, 1 MiB.
    pub read_limit: ReadLimit,
    /// Which records are read, as Kafka's `isolation.level`. Default
    /// [`IsolationLevel::ReadCommitted`]: up to the last stable offset, without
    /// records of aborted transactions (with [`OffsetReset::Latest`] a read-committed
    /// consumer starts at the last stable offset, as Kafka's).
    pub isolation: IsolationLevel,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group: None,
            client_id: "consumer".into(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            auto_offset_reset: OffsetReset::Latest,
            strategy: AssignmentStrategy::Range,
            read_limit: ReadLimit::default(),
            isolation: IsolationLevel::default(),
        }
    }
}

impl ConsumerConfig {
    /// Default settings for a member of `group`.
    pub fn for_group(group: impl Into<String>) -> Self {
        ConsumerConfig {
            group: Some(group.into()),
            ..Default::default()
        }
    }
}

#[derive(Debug)]
struct Assigned {
    tp: TopicPartition,
    topic: Arc<str>,
    partition: Arc<Partition>,
}

/// Reads records from a [`Log`], alone or as a member of a consumer group.
#[derive(Debug)]
pub struct Consumer {
    log: Log,
    config: ConsumerConfig,
    topics: Vec<String>,
    membership: Option<Membership>,
    assigned: Vec<Assigned>,
    positions: BTreeMap<TopicPartition, u64>,
    next: usize,
    last_heartbeat_ms: i64,
    closed: bool,
}

impl Consumer {
    /// Joins `config.group` subscribed to `topics` and takes the assigned partitions.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] without a group; join errors (unknown topic, ...).
    pub fn subscribe(log: Log, topics: Vec<String>, config: ConsumerConfig) -> Result<Self> {
        let Some(group) = config.group.clone() else {
            return Err(LogError::InvalidConfig {
                field: "group",
                reason: "subscribing needs a consumer group".into(),
            });
        };
        let m = log.join_group(
            &group,
            &config.client_id,
            topics.clone(),
            config.session_timeout_ms,
            config.strategy,
        )?;
        info!(group = %group, member = %m.member_id, generation = m.generation, partitions = m.assignment.len(), "joined group");
        let now = log.options().clock.now_ms();
        let mut c = Consumer {
            log,
            config,
            topics,
            membership: None,
            assigned: Vec::new(),
            positions: BTreeMap::new(),
            next: 0,
            last_heartbeat_ms: now,
            closed: false,
        };
        c.apply(m)?;
        Ok(c)
    }

    /// Reads the given partitions without group membership. Positions start at the
    /// group's committed offset when `config.group` is set and has one, else by
    /// `config.auto_offset_reset`; use [`Consumer::seek`] to choose.
    ///
    /// # Errors
    /// Unknown topics or partitions.
    pub fn assign(
        log: Log,
        partitions: Vec<TopicPartition>,
        config: ConsumerConfig,
    ) -> Result<Self> {
        let now = log.options().clock.now_ms();
        let mut c = Consumer {
            log,
            config,
            topics: Vec::new(),
            membership: None,
            assigned: Vec::new(),
            positions: BTreeMap::new(),
            next: 0,
            last_heartbeat_ms: now,
            closed: false,
        };
        c.set_assignment(partitions)?;
        Ok(c)
    }

    /// The partitions currently assigned, sorted.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assigned.iter().map(|a| a.tp.clone()).collect()
    }

    /// The group membership (member id, generation), when subscribed.
    pub fn membership(&self) -> Option<&Membership> {
        self.membership.as_ref()
    }

    /// The next offset this consumer will read from `tp`, resolving it (from the
    /// committed offset or the reset policy) if it has not been yet.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] if `tp` is not assigned; with reset policy `None`
    /// and no committed offset, [`LogError::OffsetOutOfRange`].
    pub fn position(&mut self, tp: &TopicPartition) -> Result<u64> {
        let Some(a) = self.assigned.iter().find(|a| &a.tp == tp) else {
            return Err(not_assigned(tp));
        };
        if let Some(&p) = self.positions.get(tp) {
            return Ok(p);
        }
        let partition = Arc::clone(&a.partition);
        let p = self.initial_position(tp, &partition)?;
        self.positions.insert(tp.clone(), p);
        Ok(p)
    }

    /// Moves the position of an assigned partition.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] if `tp` is not assigned.
    pub fn seek(&mut self, tp: &TopicPartition, offset: u64) -> Result<()> {
        if !self.assigned.iter().any(|a| &a.tp == tp) {
            return Err(not_assigned(tp));
        }
        self.positions.insert(tp.clone(), offset);
        Ok(())
    }

    fn apply(&mut self, m: Membership) -> Result<()> {
        let changed = self
            .membership
            .as_ref()
            .is_none_or(|old| old.generation != m.generation);
        let assignment = m.assignment.clone();
        self.membership = Some(m);
        if changed {
            self.set_assignment(assignment)?;
        }
        Ok(())
    }

    fn set_assignment(&mut self, mut tps: Vec<TopicPartition>) -> Result<()> {
        tps.sort();
        tps.dedup();
        let mut assigned = Vec::with_capacity(tps.len());
        let mut positions = BTreeMap::new();
        for tp in tps {
            let topic = self.log.topic(&tp.topic)?;
            let partition = topic.partition(tp.partition)?;
            // Kept across a rebalance: go on from where this consumer was. New
            // partitions get their position on first use (after any `seek`).
            if let Some(&pos) = self.positions.get(&tp) {
                positions.insert(tp.clone(), pos);
            }
            assigned.push(Assigned {
                topic: Arc::from(tp.topic.as_str()),
                tp,
                partition,
            });
        }
        debug!(partitions = assigned.len(), "assignment changed");
        self.assigned = assigned;
        self.positions = positions;
        self.next = 0;
        Ok(())
    }

    /// The committed offset when the group has one within [log start, log end], else
    /// by the reset policy (as a Kafka consumer, whose fetch at a committed offset out
    /// of range gets `OFFSET_OUT_OF_RANGE` and resets).
    fn initial_position(&self, tp: &TopicPartition, p: &Partition) -> Result<u64> {
        if let Some(group) = &self.config.group {
            if let Some(c) = self.log.committed_offset(group, tp) {
                if in_range(c, p) {
                    return Ok(c);
                }
                let new = self.reset_position(tp, p, Some(c))?;
                info!(group = %group, topic = %tp.topic, partition = tp.partition, committed = c, to = new, "committed offset out of range; reset");
                return Ok(new);
            }
        }
        self.reset_position(tp, p, None)
    }

    fn reset_position(
        &self,
        tp: &TopicPartition,
        p: &Partition,
        requested: Option<u64>,
    ) -> Result<u64> {
        match self.config.auto_offset_reset {
            OffsetReset::Earliest => Ok(p.log_start_offset()),
            OffsetReset::Latest => Ok(p.end_offset(self.config.isolation)),
            OffsetReset::None => Err(match (&self.config.group, requested) {
                (Some(group), Some(offset)) => LogError::GroupOffsetOutOfRange {
                    group: group.clone(),
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset,
                    log_start: p.log_start_offset(),
                    log_end: p.log_end_offset(),
                },
                _ => LogError::OffsetOutOfRange {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    requested: requested.unwrap_or(0),
                    log_start: p.log_start_offset(),
                    log_end: p.log_end_offset(),
                },
            }),
        }
    }

    /// Heartbeats if due (or `force`), rejoining after an eviction, and takes on a
    /// new assignment after a rebalance.
    fn heartbeat_if_due(&mut self, force: bool) -> Result<()> {
        let (Some(group), Some(m)) = (self.config.group.clone(), self.membership.as_ref()) else {
            return Ok(());
        };
        let now = self.log.options().clock.now_ms();
        if !force && now - self.last_heartbeat_ms < self.config.heartbeat_interval_ms {
            return Ok(());
        }
        self.last_heartbeat_ms = now;
        match self.log.heartbeat(&group, &m.member_id) {
            Ok(m) => self.apply(m),
            Err(LogError::Group(GroupError::UnknownMember { .. })) => {
                info!(group = %group, member = %m.member_id, "evicted from the group; rejoining");
                let m = self.log.join_group(
                    &group,
                    &self.config.client_id,
                    self.topics.clone(),
                    self.config.session_timeout_ms,
                    self.config.strategy,
                )?;
                // Positions of an evicted member may be stale: restart from commits.
                self.positions.clear();
                self.membership = None;
                self.apply(m)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads what is available now, without waiting (heartbeating if due).
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] with reset policy `None`, [`LogError::Corrupt`],
    /// group errors.
    pub fn try_poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        self.heartbeat_if_due(false)?;
        let mut out = Vec::new();
        let n = self.assigned.len();
        let limit = self.config.read_limit;
        let isolation = self.config.isolation;
        let mut records = Vec::new();
        for i in 0..n {
            if out.len() >= limit.max_records {
                break;
            }
            let idx = (self.next + i) % n;
            let tp = self.assigned[idx].tp.clone();
            let mut pos = self.position(&tp)?;
            let a = &self.assigned[idx];
            if pos > a.partition.log_end_offset() {
                // Past the end (a seek or commit beyond it, or the end moved back):
                // nothing would ever come, so reset as a Kafka consumer does on
                // OFFSET_OUT_OF_RANGE.
                let part = Arc::clone(&a.partition);
                pos = self.reset_position(&tp, &part, Some(pos))?;
                info!(topic = %tp.topic, partition = tp.partition, to = pos, "position past the log end; reset");
                self.positions.insert(tp.clone(), pos);
            }
            let a = &self.assigned[idx];
            if pos >= a.partition.end_offset(isolation) {
                continue;
            }
            records.clear();
            let lim = ReadLimit {
                max_records: limit.max_records - out.len(),
                max_bytes: limit.max_bytes,
            };
            let next = match a
                .partition
                .read_into_isolated(pos, lim, isolation, &mut records)
            {
                Ok(summary) => summary.next_offset,
                Err(LogError::OffsetOutOfRange { requested, .. }) => {
                    let (tp, part) = (a.tp.clone(), Arc::clone(&a.partition));
                    let new = self.reset_position(&tp, &part, Some(requested))?;
                    info!(topic = %tp.topic, partition = tp.partition, from = pos, to = new, "position out of range; reset");
                    self.positions.insert(tp, new);
                    // Read from the new position now: what is available is returned by
                    // this call, not only by the next one. Retention may have moved the
                    // start again meanwhile; the next poll resets once more then.
                    match part.read_into_isolated(new, lim, isolation, &mut records) {
                        Ok(summary) => summary.next_offset,
                        Err(LogError::OffsetOutOfRange { .. }) => new,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            };
            // Past the records read and any markers or aborted records passed over.
            if next > pos || !records.is_empty() {
                self.positions.insert(a.tp.clone(), next);
            }
            let topic = &a.topic;
            out.extend(records.drain(..).map(|record| ConsumerRecord {
                topic: Arc::clone(topic),
                partition: a.tp.partition,
                record,
            }));
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        Ok(out)
    }

    /// Waits up to `timeout` for records and returns them (empty on timeout). Waiting
    /// sleeps until an assigned partition gets new records, heartbeating meanwhile.
    ///
    /// # Errors
    /// As [`Consumer::try_poll`].
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let recs = self.try_poll()?;
            if !recs.is_empty() {
                return Ok(recs);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(recs);
            }
            let mut wait = deadline - now;
            if self.membership.is_some() {
                wait = wait.min(Duration::from_millis(
                    self.config.heartbeat_interval_ms.max(1) as u64,
                ));
            }
            let isolation = self.config.isolation;
            let mut rxs: Vec<_> = self
                .assigned
                .iter()
                .map(|a| a.partition.subscribe_end(isolation))
                .collect();
            // Records appended between the read above and subscribing: go again.
            let behind = self
                .assigned
                .iter()
                .zip(&rxs)
                .any(|(a, rx)| *rx.borrow() > self.positions.get(&a.tp).copied().unwrap_or(0));
            if behind {
                continue;
            }
            let sleep = Box::pin(tokio::time::sleep(wait));
            if rxs.is_empty() {
                sleep.await;
            } else {
                let changed = select_all(rxs.iter_mut().map(|rx| Box::pin(rx.changed())));
                match select(changed, sleep).await {
                    Either::Left(_) | Either::Right(_) => {}
                }
            }
        }
    }

    /// Commits the positions of all assigned partitions for the group.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] without a group; `IllegalGeneration` after a
    /// rebalance this consumer has not seen yet (poll, then commit again).
    pub fn commit(&mut self) -> Result<()> {
        let mut offsets = Vec::with_capacity(self.assigned.len());
        for tp in self.assignment() {
            let o = self.position(&tp)?;
            offsets.push((tp, o));
        }
        self.commit_offsets(&offsets)
    }

    /// Commits explicit offsets (each the next offset to read).
    ///
    /// # Errors
    /// As [`Consumer::commit`].
    pub fn commit_offsets(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        let Some(group) = &self.config.group else {
            return Err(LogError::InvalidConfig {
                field: "group",
                reason: "committing needs a consumer group".into(),
            });
        };
        if offsets.is_empty() {
            return Ok(());
        }
        let identity = match &self.membership {
            Some(m) => CommitIdentity::Member {
                member_id: m.member_id.clone(),
                generation: m.generation,
            },
            None => CommitIdentity::Standalone,
        };
        self.log.commit_offsets(group, &identity, offsets)
    }

    /// Leaves the group (if a member). Dropping the consumer does the same.
    ///
    /// # Errors
    /// `UnknownMember` if already evicted.
    pub fn close(mut self) -> Result<()> {
        self.leave()
    }

    fn leave(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if let (Some(group), Some(m)) = (&self.config.group, &self.membership) {
            self.log.leave_group(group, &m.member_id)?;
        }
        Ok(())
    }
}

/// Whether `offset` is a valid position in `p`: within [log start, log end].
fn in_range(offset: u64, p: &Partition) -> bool {
    (p.log_start_offset()..=p.log_end_offset()).contains(&offset)
}

fn not_assigned(tp: &TopicPartition) -> LogError {
    LogError::InvalidConfig {
        field: "partition",
        reason: format!(
            "{}-{} is not assigned to this consumer",
            tp.topic, tp.partition
        ),
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.leave();
    }
}
