//! The [`Log`]: a data directory of topics and consumer groups.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use brook_core::names::{validate_group_id, validate_name};
use tracing::{info, warn};

use crate::error::{IoContext, LogError, Result};
use crate::group::{
    AssignmentStrategy, CommitIdentity, GroupCoordinator, GroupDescription, GroupError, Membership,
    TopicPartition,
};
use crate::offsets::OffsetStore;
use crate::options::{LogOptions, TopicConfig};
use crate::partition::sync_dir;
use crate::reset::{target, OffsetResetRow, ResetTo};
use crate::topic::{new_meta, Topic, TopicInfo, TopicMeta};
use crate::txn::{decide, TxnCoordinator};

const LOCK_FILE: &str = ".lock";
const CLEAN_SHUTDOWN: &str = ".clean-shutdown";

/// One row of a group's lag report: where the group stands on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The group's committed offset (the next offset it will read), if any.
    pub committed: Option<u64>,
    /// The partition's log start offset.
    pub log_start_offset: u64,
    /// The partition's log end offset.
    pub log_end_offset: u64,
    /// Whether the committed offset lies outside [log start, log end] (retention
    /// deleted past it, or it was set beyond the end): a consumer of the group resets
    /// it by its `auto.offset.reset`, or fails with `none`.
    pub out_of_range: bool,
    /// The partition's last stable offset: where read-committed consumers stop.
    pub last_stable_offset: u64,
    /// `last_stable_offset - committed` (semantics.md §1): how far the group is from
    /// what a read-committed consumer (the default) can read, as Kafka measures the
    /// lag of `read_committed` consumers; `None` without a commit. On a topic without
    /// transactions the last stable offset is the log end offset.
    pub lag: Option<u64>,
    /// The member currently assigned the partition, if any (in this process).
    pub member: Option<String>,
}

/// An embedded, Kafka-like partitioned log kept in a data directory.
///
/// Cheap to clone (clones share the same log). The directory is locked while any
/// clone is alive; dropping the last clone (or [`Log::close`]) flushes, writes the
/// active segments' indexes and marks the shutdown clean, so the next open does not
/// need to scan. Layout:
///
/// ```text
/// <dir>/.lock                       lock file (held with flock)
/// <dir>/.clean-shutdown             present only after a clean close
/// <dir>/topics/<topic>/topic.json   partition count and configuration
/// <dir>/topics/<topic>/<p>/<base>.{log,index,timeindex}
/// <dir>/groups/<group>.json         committed offsets
/// <dir>/transactions/<id>.json      transaction state per transactional id
/// <dir>/topics/<topic>/<p>/aborted.txnindex   aborted transactions of a partition
/// <dir>/topics/<topic>/<p>/<offset>.snapshot  producer state (crate::producer_state)
/// ```
#[derive(Debug, Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    options: LogOptions,
    _lock: File,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    groups: Mutex<GroupCoordinator>,
    offsets: Mutex<OffsetStore>,
    txns: Mutex<TxnCoordinator>,
    closed: AtomicBool,
    stop: Arc<(Mutex<bool>, Condvar)>,
    maintenance: Mutex<Option<JoinHandle<()>>>,
}

fn lock_or_recover<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The group and offset state is updated in single assignments after validation,
    // so a panic elsewhere cannot leave it half-written; use it even if poisoned.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Log {
    /// Opens (creating if needed) the log in `dir`.
    ///
    /// If the last shutdown was not clean, the active segment of every partition is
    /// scanned: a torn or corrupt tail is truncated, corruption anywhere else is an
    /// error. Each partition's undecided transactions (and so its last stable offset)
    /// are rebuilt from the transaction coordinator's state, and commits or aborts a
    /// crash interrupted are finished ([`crate::txn`]).
    ///
    /// # Errors
    /// [`LogError::Locked`] if another process holds the directory, [`LogError::Corrupt`],
    /// I/O errors.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(dir.join("topics")).ctx("create directory", &dir)?;
        fs::create_dir_all(dir.join("groups")).ctx("create directory", &dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .ctx("open", &lock_path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(LogError::Locked {
                    path: dir,
                    lock: lock_path,
                })
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(LogError::Io {
                    op: "lock",
                    path: lock_path,
                    source: e,
                })
            }
        }
        let marker = dir.join(CLEAN_SHUTDOWN);
        let recover = !marker.exists();
        if !recover {
            fs::remove_file(&marker).ctx("remove", &marker)?;
            sync_dir(&dir)?;
        }
        let topics_dir = dir.join("topics");
        let mut topics = BTreeMap::new();
        for entry in fs::read_dir(&topics_dir).ctx("list", &topics_dir)? {
            let entry = entry.ctx("list", &topics_dir)?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if !path.is_dir() || validate_name("topic", &name).is_err() {
                continue;
            }
            if !path.join("topic.json").exists() {
                // A create that never finished (and so was never acknowledged).
                warn!(topic = %name, "removing incompletely created topic");
                fs::remove_dir_all(&path).ctx("remove", &path)?;
                continue;
            }
            let meta = TopicMeta::load(&path)?;
            let topic = Topic::open(
                &name,
                path,
                &meta,
                options.fsync,
                options.clock.clone(),
                recover,
            )?;
            topics.insert(name, Arc::new(topic));
        }
        let offsets = OffsetStore::open(&dir.join("groups"))?;
        let txns = TxnCoordinator::open(&dir.join("transactions"), options.clock.now_ms())?;
        // Each partition's undecided transactions (and so its last stable offset) come
        // from the coordinator's durable state.
        for (topic, partition, key, first_offset) in txns.undecided() {
            if let Some(p) = topics
                .get(&topic)
                .and_then(|t: &Arc<Topic>| t.partition(partition).ok())
            {
                p.restore_txn(key, first_offset)?;
            }
        }
        let interrupted = txns.interrupted();
        let inner = Arc::new(Inner {
            dir,
            options,
            _lock: lock,
            topics: RwLock::new(topics),
            groups: Mutex::new(GroupCoordinator::new()),
            offsets: Mutex::new(offsets),
            txns: Mutex::new(txns),
            closed: AtomicBool::new(false),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            maintenance: Mutex::new(None),
        });
        if let Some(every) = inner.options.maintenance_interval_ms {
            let weak = Arc::downgrade(&inner);
            let stop = Arc::clone(&inner.stop);
            let handle = std::thread::Builder::new()
                .name("brook-log-maintenance".into())
                .spawn(move || maintenance_loop(weak, &stop, Duration::from_millis(every.max(1))))
                .ctx("spawn maintenance thread", &inner.dir)?;
            *lock_or_recover(&inner.maintenance) = Some(handle);
        }
        let log = Log { inner };
        // Finish the decisions a crash interrupted (markers not yet all written).
        if !interrupted.is_empty() {
            let mut coord = log.txn_coordinator()?;
            for (id, producer_id, sequence) in interrupted {
                let commit = coord.is_committing(&id, producer_id, sequence);
                info!(transactional_id = %id, producer_id, sequence, commit, "finishing an interrupted transaction decision");
                decide(&log, &mut coord, &id, producer_id, sequence, commit)?;
            }
        }
        Ok(log)
    }

    /// The transaction coordinator (its lock).
    pub(crate) fn txn_coordinator(&self) -> Result<MutexGuard<'_, TxnCoordinator>> {
        self.check_open()?;
        // A panic while deciding a transaction can leave the in-memory state behind
        // the stored one; refuse rather than guess (reopening the log recovers).
        self.inner.txns.lock().map_err(|_| LogError::Closed)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(LogError::Closed);
        }
        Ok(())
    }

    fn topics_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Topic>>> {
        // Only inserts and removes happen under the write lock; nothing can panic there.
        self.inner.topics.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a topic with `partitions` partitions.
    ///
    /// # Errors
    /// [`LogError::InvalidName`], [`LogError::TopicExists`], [`LogError::InvalidConfig`]
    /// (naming the field) for 0 partitions or bad configuration, I/O errors.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<Arc<Topic>> {
        self.check_open()?;
        validate_name("topic", name)?;
        if partitions == 0 {
            return Err(LogError::InvalidConfig {
                field: "partitions",
                reason: "must be at least 1".into(),
            });
        }
        config.validate()?;
        let mut topics = self.inner.topics.write().unwrap_or_else(|e| e.into_inner());
        if topics.contains_key(name) {
            return Err(LogError::TopicExists(name.to_string()));
        }
        let dir = self.inner.dir.join("topics").join(name);
        if dir.exists() {
            // Left over from a delete that did not finish.
            fs::remove_dir_all(&dir).ctx("remove", &dir)?;
        }
        fs::create_dir_all(&dir).ctx("create directory", &dir)?;
        let meta = new_meta(partitions, config);
        meta.store(&dir)?;
        sync_dir(&self.inner.dir.join("topics"))?;
        let opened = Topic::open(
            name,
            dir.clone(),
            &meta,
            self.inner.options.fsync,
            self.inner.options.clock.clone(),
            false,
        );
        let topic = match opened {
            Ok(t) => Arc::new(t),
            Err(e) => {
                // Roll back, so a half-created topic (for example one that ran out of
                // file descriptors) cannot keep the data directory from opening.
                let _ = fs::remove_dir_all(&dir);
                let _ = sync_dir(&self.inner.dir.join("topics"));
                return Err(e);
            }
        };
        topics.insert(name.to_string(), Arc::clone(&topic));
        info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// A topic by name.
    ///
    /// # Errors
    /// [`LogError::UnknownTopic`].
    pub fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.check_open()?;
        self.topics_read()
            .get(name)
            .cloned()
            .ok_or_else(|| LogError::UnknownTopic(name.to_string()))
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.topics_read().keys().cloned().collect()
    }

    /// Partition and segment facts of a topic.
    ///
    /// # Errors
    /// [`LogError::UnknownTopic`].
    pub fn describe_topic(&self, name: &str) -> Result<TopicInfo> {
        Ok(self.topic(name)?.info())
    }

    /// Deletes a topic, its data and every group's committed offsets for it.
    ///
    /// # Errors
    /// [`LogError::UnknownTopic`], I/O errors.
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        self.check_open()?;
        let topic = {
            let mut topics = self.inner.topics.write().unwrap_or_else(|e| e.into_inner());
            topics
                .remove(name)
                .ok_or_else(|| LogError::UnknownTopic(name.to_string()))?
        };
        topic.close()?;
        fs::remove_dir_all(topic.dir()).ctx("remove", topic.dir())?;
        sync_dir(&self.inner.dir.join("topics"))?;
        lock_or_recover(&self.inner.offsets).delete_topic(name)?;
        let counts = self.partition_counts();
        let now = self.inner.options.clock.now_ms();
        lock_or_recover(&self.inner.groups)
            .partitions_changed(name, now, &|t| counts.get(t).copied());
        info!(topic = name, "deleted topic");
        Ok(())
    }

    /// Grows a topic to `total` partitions. Keys map to partitions by
    /// `murmur2(key) % count`, so from now on some keys land on other partitions than
    /// before and their order across the change is not kept; groups reading the topic
    /// rebalance.
    ///
    /// # Errors
    /// [`LogError::UnknownTopic`], [`LogError::InvalidConfig`] if `total` is not larger.
    pub fn add_partitions(&self, name: &str, total: u32) -> Result<()> {
        let topic = self.topic(name)?;
        topic.add_partitions(total, false)?;
        warn!(
            topic = name,
            partitions = total,
            "partitions added: keys now map to different partitions"
        );
        let counts = self.partition_counts();
        let now = self.inner.options.clock.now_ms();
        lock_or_recover(&self.inner.groups)
            .partitions_changed(name, now, &|t| counts.get(t).copied());
        Ok(())
    }

    /// Replaces a topic's configuration (Kafka's `kafka-configs --alter` on a topic):
    /// stored durably, used by its partitions from their next append and retention
    /// pass on (a smaller `segment.bytes` or `segment.ms` rolls the active segment at
    /// the next append, a shorter retention deletes at the next pass).
    ///
    /// # Errors
    /// [`LogError::UnknownTopic`], [`LogError::InvalidConfig`] naming the field, I/O
    /// errors.
    pub fn alter_topic(&self, name: &str, config: TopicConfig) -> Result<()> {
        let topic = self.topic(name)?;
        topic.set_config(config)?;
        info!(topic = name, config = ?topic.config(), "altered topic configuration");
        Ok(())
    }

    fn partition_counts(&self) -> HashMap<String, u32> {
        self.topics_read()
            .iter()
            .map(|(n, t)| (n.clone(), t.partition_count()))
            .collect()
    }

    /// Applies retention to every partition, flushes partitions whose `interval` fsync
    /// is due, compacts partitions of compacted topics when a pass is due
    /// ([`crate::Partition::compact`]), evicts group members past their session
    /// timeout and aborts transactions past their `transaction.timeout.ms`
    /// ([`Log::expire_transactions`]), all at the clock's current time. The
    /// background thread calls this periodically.
    ///
    /// Returns the number of segments deleted.
    ///
    /// # Errors
    /// The first error met (the other partitions are still processed).
    pub fn run_maintenance(&self) -> Result<usize> {
        self.check_open()?;
        let now = self.inner.options.clock.now_ms();
        let topics: Vec<Arc<Topic>> = self.topics_read().values().cloned().collect();
        let mut deleted = 0;
        let mut first_err = None;
        for t in topics {
            for p in t.partitions() {
                match p
                    .apply_retention(now)
                    .and_then(|n| p.flush_if_due(now).map(|()| n))
                    .and_then(|n| p.compact().map(|_| n))
                {
                    Ok(n) => deleted += n,
                    Err(LogError::Closed) => {}
                    Err(e) => {
                        warn!(topic = t.name(), partition = p.id(), error = %e, "maintenance failed");
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        for (group, member) in lock_or_recover(&self.inner.groups).expire(now) {
            info!(group = %group, member = %member, "evicted group member after its session timeout");
        }
        match self.expire_transactions(now) {
            Ok(_) | Err(LogError::Closed) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }

    // ---- consumer groups -------------------------------------------------------

    /// Joins `group` as a new member subscribed to `topics`; triggers a rebalance.
    ///
    /// # Errors
    /// [`LogError::InvalidName`] for a bad group name, group errors (unknown topic,
    /// inconsistent strategy).
    pub fn join_group(
        &self,
        group: &str,
        client_id: &str,
        topics: Vec<String>,
        session_timeout_ms: i64,
        strategy: AssignmentStrategy,
    ) -> Result<Membership> {
        self.check_open()?;
        validate_group_id(group)?;
        let counts = self.partition_counts();
        let now = self.inner.options.clock.now_ms();
        let m = lock_or_recover(&self.inner.groups).join(
            group,
            client_id,
            topics,
            session_timeout_ms,
            strategy,
            now,
            &|t| counts.get(t).copied(),
        )?;
        Ok(m)
    }

    /// Records a heartbeat and returns the member's current generation and assignment.
    ///
    /// # Errors
    /// `UnknownMember` if the member was evicted or left.
    pub fn heartbeat(&self, group: &str, member_id: &str) -> Result<Membership> {
        self.check_open()?;
        let now = self.inner.options.clock.now_ms();
        Ok(lock_or_recover(&self.inner.groups).heartbeat(group, member_id, now)?)
    }

    /// Leaves the group; its partitions go to the other members.
    ///
    /// # Errors
    /// `UnknownMember`.
    pub fn leave_group(&self, group: &str, member_id: &str) -> Result<()> {
        self.check_open()?;
        let now = self.inner.options.clock.now_ms();
        Ok(lock_or_recover(&self.inner.groups).leave(group, member_id, now)?)
    }

    /// Durably commits offsets (the next offset to read, as Kafka) for a group.
    ///
    /// # Errors
    /// `IllegalGeneration` for a member of an older generation, `UnknownMember`,
    /// `NotAssigned`; I/O errors.
    pub fn commit_offsets(
        &self,
        group: &str,
        identity: &CommitIdentity,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        self.check_open()?;
        validate_group_id(group)?;
        let now = self.inner.options.clock.now_ms();
        // Hold the group lock across validation and the write, so a rebalance cannot
        // slip in between.
        let mut groups = lock_or_recover(&self.inner.groups);
        let tps: Vec<TopicPartition> = offsets.iter().map(|(tp, _)| tp.clone()).collect();
        groups.validate_commit(group, identity, &tps, now)?;
        lock_or_recover(&self.inner.offsets).commit(group, offsets)?;
        Ok(())
    }

    /// Durably removes a group's committed offsets of `partitions` (Kafka's
    /// OffsetDelete; whether the group may lose them is the caller's rule).
    ///
    /// # Errors
    /// [`LogError::InvalidName`], I/O errors.
    pub fn delete_committed_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<()> {
        self.check_open()?;
        validate_group_id(group)?;
        lock_or_recover(&self.inner.offsets).delete_offsets(group, partitions)?;
        Ok(())
    }

    /// Writes a group's committed offsets without a membership check: the offsets of
    /// a transaction as it commits ([`crate::txn`]).
    pub(crate) fn write_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        lock_or_recover(&self.inner.offsets).commit(group, offsets)?;
        Ok(())
    }

    /// Deletes a group (Kafka's DeleteGroups): its committed offsets, durably, and its
    /// state in this process's coordinator; returns whether it had any. Refused while
    /// it has live members in this process ([`GroupError::NonEmptyGroup`]); whether a
    /// broker's groups have members is the broker's rule.
    ///
    /// # Errors
    /// [`LogError::InvalidName`], `GroupError::NonEmptyGroup`, I/O errors.
    pub fn delete_group(&self, group: &str) -> Result<bool> {
        self.check_open()?;
        validate_group_id(group)?;
        // Under the group lock, so no member joins between the check and the delete.
        let mut groups = lock_or_recover(&self.inner.groups);
        let had_state = groups.delete_group(group)?;
        let had_offsets = lock_or_recover(&self.inner.offsets).delete_group(group)?;
        if had_offsets {
            info!(group, "deleted group");
        }
        Ok(had_state || had_offsets)
    }

    /// A group's committed offset for one partition.
    pub fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Option<u64> {
        lock_or_recover(&self.inner.offsets).committed(group, tp)
    }

    /// Groups that have committed offsets or live members, sorted.
    pub fn groups(&self) -> Vec<String> {
        let mut all = lock_or_recover(&self.inner.offsets).groups();
        all.extend(lock_or_recover(&self.inner.groups).groups());
        all.sort();
        all.dedup();
        all
    }

    /// Moves `group`'s committed offsets on every partition of `topic` as `to` says
    /// (Kafka's `kafka-consumer-groups --reset-offsets`) and returns the plan, one row
    /// per partition; with `dry_run` nothing is committed. Refused while the group has
    /// live members, as Kafka's tool refuses a group that is not inactive.
    ///
    /// # Errors
    /// [`LogError::InvalidName`], [`LogError::UnknownTopic`],
    /// `GroupError::GroupHasMembers`, I/O errors.
    pub fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
        dry_run: bool,
    ) -> Result<Vec<OffsetResetRow>> {
        self.check_open()?;
        validate_group_id(group)?;
        let t = self.topic(topic)?;
        if let Some(d) = self.describe_group(group).filter(|d| !d.members.is_empty()) {
            return Err(GroupError::GroupHasMembers {
                group: group.to_owned(),
                members: d.members.len(),
            }
            .into());
        }
        let mut rows = Vec::new();
        for p in t.partitions() {
            let tp = TopicPartition::new(topic, p.id());
            let at_time = match to {
                ResetTo::Timestamp(ts) => p.offset_for_timestamp(ts)?,
                _ => None,
            };
            let (new_offset, clamped_from) =
                target(to, p.log_start_offset(), p.log_end_offset(), at_time);
            rows.push(OffsetResetRow {
                current: self.committed_offset(group, &tp),
                topic: topic.to_owned(),
                partition: p.id(),
                new_offset,
                clamped_from,
            });
        }
        if !dry_run {
            let offsets: Vec<(TopicPartition, u64)> = rows
                .iter()
                .map(|r| (TopicPartition::new(topic, r.partition), r.new_offset))
                .collect();
            // A standalone commit: refused if a member joined meanwhile.
            self.commit_offsets(group, &CommitIdentity::Standalone, &offsets)?;
            info!(
                group,
                topic,
                partitions = rows.len(),
                "reset committed offsets"
            );
        }
        Ok(rows)
    }

    /// Live membership of a group in this process, if it has members.
    pub fn describe_group(&self, group: &str) -> Option<GroupDescription> {
        lock_or_recover(&self.inner.groups).describe(group)
    }

    /// Per partition the group has committed or is assigned: committed offset, log end
    /// and last stable offsets, lag (measured against the last stable offset, see
    /// [`PartitionLag::lag`]) and member, sorted by topic and partition.
    ///
    /// # Errors
    /// [`LogError::InvalidName`].
    pub fn group_lag(&self, group: &str) -> Result<Vec<PartitionLag>> {
        validate_group_id(group)?;
        let committed = lock_or_recover(&self.inner.offsets).group_offsets(group);
        let owners: BTreeMap<TopicPartition, String> = match self.describe_group(group) {
            Some(d) => d
                .members
                .iter()
                .flat_map(|m| {
                    m.assignment
                        .iter()
                        .map(|tp| (tp.clone(), m.member_id.clone()))
                })
                .collect(),
            None => BTreeMap::new(),
        };
        // Every partition of every topic the group reads, so partitions it has not
        // committed for yet (or that were added since) show up too.
        let mut tps: Vec<TopicPartition> = owners.keys().cloned().collect();
        let mut topics: Vec<&str> = committed.keys().map(|tp| tp.topic.as_str()).collect();
        topics.extend(owners.keys().map(|tp| tp.topic.as_str()));
        topics.dedup();
        for t in topics {
            if let Ok(topic) = self.topic(t) {
                tps.extend((0..topic.partition_count()).map(|p| TopicPartition::new(t, p)));
            }
        }
        tps.extend(committed.keys().cloned());
        tps.sort();
        tps.dedup();
        let mut rows = Vec::with_capacity(tps.len());
        for tp in tps {
            let Ok(topic) = self.topic(&tp.topic) else {
                continue;
            };
            let Ok(p) = topic.partition(tp.partition) else {
                continue;
            };
            let start = p.log_start_offset();
            let end = p.log_end_offset();
            let stable = p.last_stable_offset();
            let c = committed.get(&tp).copied();
            rows.push(PartitionLag {
                member: owners.get(&tp).cloned(),
                lag: c.map(|c| stable.saturating_sub(c)),
                committed: c,
                out_of_range: c.is_some_and(|c| !(start..=end).contains(&c)),
                log_start_offset: start,
                log_end_offset: end,
                last_stable_offset: stable,
                topic: tp.topic,
                partition: tp.partition,
            });
        }
        Ok(rows)
    }

    /// Stops background maintenance, flushes every partition, writes the active
    /// segments' indexes and marks the shutdown clean. Further calls fail with
    /// [`LogError::Closed`]. Dropping the last clone does the same, logging errors.
    ///
    /// # Errors
    /// I/O errors while flushing.
    pub fn close(&self) -> Result<()> {
        self.inner.close()
    }
}

impl Inner {
    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        {
            let (stop, cv) = &*self.stop;
            *lock_or_recover(stop) = true;
            cv.notify_all();
        }
        if let Some(h) = lock_or_recover(&self.maintenance).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        let topics: Vec<Arc<Topic>> = self
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for t in topics {
            t.close()?;
        }
        let marker = self.dir.join(CLEAN_SHUTDOWN);
        File::create(&marker)
            .and_then(|f| f.sync_all())
            .ctx("create", &marker)?;
        sync_dir(&self.dir)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            warn!(dir = %self.dir.display(), error = %e, "closing the log failed; the next open will recover");
        }
    }
}

/// Runs maintenance every `every` until stopped. Holds the log only while working, so
/// dropping the last [`Log`] clone still closes it.
fn maintenance_loop(weak: Weak<Inner>, stop: &(Mutex<bool>, Condvar), every: Duration) {
    let (flag, cv) = stop;
    loop {
        {
            let guard = lock_or_recover(flag);
            if *guard {
                return;
            }
            let (guard, _) = cv
                .wait_timeout(guard, every)
                .unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        let log = Log { inner };
        if let Err(e) = log.run_maintenance() {
            if !matches!(e, LogError::Closed) {
                warn!(error = %e, "log maintenance failed");
            }
        }
    }
}
