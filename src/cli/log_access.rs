//! How `brook topic`, `produce`, `consume` and `group` reach a data directory's log:
//! in this process ([`LogAccess::Local`], as before), or, while a running `brook
//! broker` holds the directory, through that broker over the Kafka protocol
//! ([`LogAccess::Remote`]). The commands are written once against this type; their
//! output is the same either way, except what only the owner of the files knows
//! (a partition's bytes and segments, `-` through a broker).
//!
//! The rule (docs/semantics.md §1a): the log is opened in-process when its lock is
//! free. Only when the lock is held and `<data-dir>/broker.addr` names a broker that
//! answers (ApiVersions and Metadata, within [`PROBE_TIMEOUT`]) are the commands
//! sent there; a file left behind by a broker killed with SIGKILL is not trusted
//! (the lock died with the broker, so the directory opens in-process), and a held
//! lock without an answering broker is the "in use" error of before.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use brook::log::{
    format::record_len, AssignmentStrategy, Consumer, ConsumerConfig, ConsumerRecord, Log,
    LogError, OffsetReset, OffsetResetRow, PartitionLag, ProducerRecord, ResetTo, Topic,
    TopicConfig, TopicPartition,
};
use std::sync::Arc;

use super::remote_log::RemoteLog;
use super::remote_reader::{ReadSpec, RemoteReader};
use super::remote_writer::RemoteWriter;

/// How long a broker named in `broker.addr` has to answer before the lock error of
/// an unreachable one is reported instead.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The log of a data directory, in-process or through its broker.
pub(crate) enum LogAccess {
    /// This process holds the log (its lock).
    Local(Log),
    /// A `brook broker` holds it; the commands are Kafka requests to it.
    Remote(RemoteLog),
}

/// A topic as `brook topic describe` shows it.
#[derive(Debug, Clone)]
pub(crate) struct TopicView {
    pub(crate) name: String,
    /// `None` when the broker does not say (DescribeConfigs not served).
    pub(crate) config: Option<TopicConfig>,
    pub(crate) partitions: Vec<PartitionView>,
}

/// A partition as `brook topic describe` shows it.
#[derive(Debug, Clone)]
pub(crate) struct PartitionView {
    pub(crate) partition: u32,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) stable: u64,
    /// Known in-process only.
    pub(crate) size_bytes: Option<u64>,
    /// Known in-process only.
    pub(crate) segments: Option<usize>,
    /// Closed segments time retention keeps only because they hold a record stamped
    /// in the future; known in-process only.
    pub(crate) future_held: Option<usize>,
}

/// A live member of a group, as `brook group describe` shows it.
#[derive(Debug, Clone)]
pub(crate) struct MemberView {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    /// The member's host as the broker saw it (`-` in-process).
    pub(crate) host: String,
    /// Its assigned partitions, sorted.
    pub(crate) partitions: Vec<(String, u32)>,
}

impl LogAccess {
    /// Opens the log of `data_dir` in-process, or, when another process holds it and
    /// a broker serving it answers, through the broker (see the module docs).
    /// `open` opens it in-process (with the caller's options and error context).
    pub(crate) fn open(data_dir: &Path, open: impl FnOnce() -> Result<Log>) -> Result<LogAccess> {
        let local_err = match open() {
            Ok(log) => return Ok(LogAccess::Local(log)),
            Err(e) => e,
        };
        let locked = local_err
            .chain()
            .any(|c| matches!(c.downcast_ref::<LogError>(), Some(LogError::Locked { .. })));
        if !locked {
            return Err(local_err);
        }
        let Some(addr) = brook_broker::read_address(data_dir) else {
            return Err(local_err);
        };
        match RemoteLog::connect(addr, PROBE_TIMEOUT) {
            Ok(remote) => {
                tracing::debug!(%addr, "the data directory is served by a brook broker: going through it");
                Ok(LogAccess::Remote(remote))
            }
            Err(e) => {
                tracing::debug!(%addr, "broker.addr names a broker that does not answer: {e:#}");
                Err(local_err)
            }
        }
    }

    /// Applies retention now (in-process: a short command would otherwise end before
    /// the background maintenance first runs; a broker runs its own).
    pub(crate) fn run_maintenance(&self) -> Result<()> {
        if let LogAccess::Local(log) = self {
            log.run_maintenance().context("applying retention")?;
        }
        Ok(())
    }

    pub(crate) fn close(self) -> Result<()> {
        if let LogAccess::Local(log) = self {
            log.close().context("closing the log")?;
        }
        Ok(())
    }

    pub(crate) fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<()> {
        match self {
            LogAccess::Local(log) => Ok(log.create_topic(name, partitions, config).map(|_| ())?),
            LogAccess::Remote(r) => r.create_topic(name, partitions, &config),
        }
    }

    pub(crate) fn topics(&self) -> Result<Vec<String>> {
        match self {
            LogAccess::Local(log) => Ok(log.topics()),
            LogAccess::Remote(r) => r.topics(),
        }
    }

    pub(crate) fn describe_topic(&self, name: &str) -> Result<TopicView> {
        match self {
            LogAccess::Local(log) => {
                let info = log.describe_topic(name)?;
                Ok(TopicView {
                    name: info.name,
                    config: Some(info.config),
                    partitions: info
                        .partitions
                        .into_iter()
                        .map(|p| PartitionView {
                            partition: p.partition,
                            start: p.log_start_offset,
                            end: p.log_end_offset,
                            stable: p.last_stable_offset,
                            size_bytes: Some(p.size_bytes),
                            segments: Some(p.segments),
                            future_held: Some(p.segments_held_by_future_timestamps),
                        })
                        .collect(),
                })
            }
            LogAccess::Remote(r) => r.describe_topic(name),
        }
    }

    pub(crate) fn delete_topic(&self, name: &str) -> Result<()> {
        match self {
            LogAccess::Local(log) => Ok(log.delete_topic(name)?),
            LogAccess::Remote(r) => r.delete_topic(name),
        }
    }

    /// The topic's current configuration (through a broker: DescribeConfigs).
    pub(crate) fn topic_config(&self, name: &str) -> Result<TopicConfig> {
        match self {
            LogAccess::Local(log) => Ok((*log.topic(name)?.config()).clone()),
            LogAccess::Remote(r) => {
                r.partition_count(name)?;
                r.topic_config(name).ok_or_else(|| {
                    anyhow!(
                        "the brook broker at {} did not report the configs of topic {name:?}",
                        r.addr
                    )
                })
            }
        }
    }

    /// Alters a topic's configs: `config` is the whole new configuration (applied
    /// in-process), `changes` the `(name, value)` pairs that made it from
    /// [`LogAccess::topic_config`], sent to a broker as IncrementalAlterConfigs SETs
    /// (so a change made meanwhile to another config is kept, as Kafka's tool does).
    pub(crate) fn alter_topic(
        &self,
        name: &str,
        config: TopicConfig,
        changes: &[(&str, &str)],
    ) -> Result<()> {
        match self {
            LogAccess::Local(log) => Ok(log.alter_topic(name, config)?),
            LogAccess::Remote(r) => r.alter_topic(name, changes),
        }
    }

    /// Moves `group`'s committed offsets on every partition of `topic` (Kafka's
    /// `kafka-consumer-groups --reset-offsets`), refused while the group has members;
    /// with `dry_run` only the plan. Through a broker as Kafka's tool does it:
    /// ListOffsets, OffsetFetch and an OffsetCommit without member or generation.
    pub(crate) fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
        dry_run: bool,
    ) -> Result<Vec<OffsetResetRow>> {
        match self {
            LogAccess::Local(log) => Ok(log.reset_offsets(group, topic, to, dry_run)?),
            LogAccess::Remote(r) => r.reset_offsets(group, topic, to, dry_run),
        }
    }

    /// Deletes a group and its committed offsets (through a broker: DeleteGroups);
    /// refused while it has members; an unknown group is an error.
    pub(crate) fn delete_group(&self, group: &str) -> Result<()> {
        let existed = match self {
            LogAccess::Local(log) => log.delete_group(group)?,
            LogAccess::Remote(r) => r.delete_group(group)?,
        };
        if !existed {
            bail!("group {group:?} has no committed offsets and no members");
        }
        Ok(())
    }

    /// Grows the topic to `total` partitions; the count before.
    pub(crate) fn add_partitions(&self, name: &str, total: u32) -> Result<u32> {
        match self {
            LogAccess::Local(log) => {
                let before = log.topic(name)?.partition_count();
                log.add_partitions(name, total)?;
                Ok(before)
            }
            LogAccess::Remote(r) => r.add_partitions(name, total),
        }
    }

    /// A writer of `topic` appending `batch` records at a time (in-process; a broker's
    /// producer batches by itself).
    pub(crate) fn writer(&self, topic: &str, batch: usize) -> Result<RecordWriter> {
        match self {
            LogAccess::Local(log) => {
                let topic = log.topic(topic)?;
                Ok(RecordWriter::Local {
                    max: topic.config().max_record_bytes as usize,
                    topic,
                    batch: Vec::with_capacity(batch),
                    batch_size: batch,
                    written: 0,
                })
            }
            LogAccess::Remote(r) => Ok(RecordWriter::Remote(r.writer(topic)?)),
        }
    }

    /// A reader of `topic` as `spec` says: explicit offsets, a group's member, or
    /// every partition from the start or the end.
    pub(crate) fn reader(&self, topic: &str, spec: &ReadSpec) -> Result<RecordReader> {
        let log = match self {
            LogAccess::Remote(r) => return Ok(RecordReader::Remote(r.reader(topic, spec)?)),
            LogAccess::Local(log) => log,
        };
        let t = log.topic(topic)?;
        let mut config = ConsumerConfig {
            group: spec.group.clone(),
            client_id: "brook-cli".into(),
            auto_offset_reset: spec.auto_offset_reset,
            strategy: AssignmentStrategy::Range,
            isolation: spec.isolation,
            ..ConsumerConfig::default()
        };
        let consumer = if !spec.offsets.is_empty() {
            let mut starts = Vec::new();
            for &(p, off) in &spec.offsets {
                // Past the end is an error, as Kafka's OffsetOutOfRange (kcat reports
                // it); the end itself is where the next record will be: no error.
                let end = t.partition(p)?.log_end_offset();
                if off > end {
                    bail!(
                        "--offset {p}:{off}: past the end of partition {p} of {topic}, which ends at offset {end} (the next record's)"
                    );
                }
                starts.push((TopicPartition::new(topic, p), off));
            }
            config.auto_offset_reset = OffsetReset::None;
            let tps = starts.iter().map(|(tp, _)| tp.clone()).collect();
            let mut c = Consumer::assign(log.clone(), tps, config)?;
            for (tp, off) in &starts {
                c.seek(tp, *off)?;
            }
            c
        } else if spec.group.is_some() {
            Consumer::subscribe(log.clone(), vec![topic.to_string()], config)?
        } else {
            let tps = (0..t.partition_count())
                .map(|p| TopicPartition::new(topic, p))
                .collect();
            Consumer::assign(log.clone(), tps, config)?
        };
        let group = spec.group.is_some();
        let mut reader = LocalReader {
            consumer,
            done: BTreeMap::new(),
            group,
        };
        if group {
            // Every assigned partition starts at its initial position, so a commit
            // covers partitions nothing was printed from too.
            for tp in reader.consumer.assignment() {
                let start = reader.consumer.position(&tp)?;
                reader.done.insert(tp, start);
            }
        }
        Ok(RecordReader::Local(reader))
    }

    /// Group names with members or committed offsets, sorted.
    pub(crate) fn groups(&self) -> Result<Vec<String>> {
        match self {
            LogAccess::Local(log) => Ok(log.groups()),
            LogAccess::Remote(r) => r.groups(),
        }
    }

    /// A group's committed offsets, ends and lag per partition, and its live members.
    pub(crate) fn group_lag(&self, group: &str) -> Result<(Vec<PartitionLag>, Vec<MemberView>)> {
        match self {
            LogAccess::Local(log) => {
                let rows = log.group_lag(group)?;
                let members = log
                    .describe_group(group)
                    .map(|d| {
                        d.members
                            .into_iter()
                            .map(|m| MemberView {
                                member_id: m.member_id,
                                client_id: m.client_id,
                                host: "-".into(),
                                partitions: m
                                    .assignment
                                    .into_iter()
                                    .map(|tp| (tp.topic.to_string(), tp.partition))
                                    .collect(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Ok((rows, members))
            }
            LogAccess::Remote(r) => r.group_lag(group),
        }
    }
}

/// Appends records to a topic, in-process in batches or through a broker.
pub(crate) enum RecordWriter {
    /// In-process: batches of `batch_size` records, each checked against the topic's
    /// maximum record size before it is taken.
    Local {
        topic: Arc<Topic>,
        max: usize,
        batch: Vec<ProducerRecord>,
        batch_size: usize,
        written: u64,
    },
    /// A producer of the broker (acks=all).
    Remote(RemoteWriter),
}

impl RecordWriter {
    /// The topic's maximum record size, if known (through a broker: from
    /// DescribeConfigs, when served).
    fn max_record_bytes(&self) -> Option<usize> {
        match self {
            RecordWriter::Local { max, .. } => Some(*max),
            RecordWriter::Remote(w) => w.max_record_bytes(),
        }
    }

    /// Takes the record of input line `line_no`. A record over the topic's maximum
    /// size is refused before anything after it is taken (through a broker that does
    /// not tell the maximum, the broker refuses it: with the records batched with it).
    pub(crate) fn send(&mut self, line_no: usize, record: ProducerRecord) -> Result<()> {
        if let Some(max) = self.max_record_bytes() {
            let size = record_len(&record);
            if size > max {
                bail!(
                    "line {line_no}: record of {size} bytes exceeds the topic's maximum record size of {max} bytes"
                );
            }
        }
        match self {
            RecordWriter::Local {
                topic,
                batch,
                batch_size,
                written,
                ..
            } => {
                batch.push(record);
                if batch.len() >= *batch_size {
                    Self::flush(topic, batch, written)?;
                }
                Ok(())
            }
            RecordWriter::Remote(w) => {
                // A tombstone goes out as a null value (no payload), not an empty one.
                let value = (!record.tombstone).then_some(&record.value[..]);
                w.send(line_no, record.key.as_deref(), value, record.timestamp)
            }
        }
    }

    fn flush(topic: &Topic, batch: &mut Vec<ProducerRecord>, written: &mut u64) -> Result<()> {
        if !batch.is_empty() {
            let n = batch.len() as u64;
            topic.append(std::mem::take(batch)).context("appending")?;
            *written += n;
        }
        Ok(())
    }

    /// Writes what is left; the number of records written.
    pub(crate) fn finish(self) -> Result<u64> {
        match self {
            RecordWriter::Local {
                topic,
                mut batch,
                mut written,
                ..
            } => {
                Self::flush(&topic, &mut batch, &mut written)?;
                Ok(written)
            }
            RecordWriter::Remote(w) => w.finish(),
        }
    }
}

/// An in-process consumer and, for a group, what it has consumed per partition.
pub(crate) struct LocalReader {
    consumer: Consumer,
    /// The next offset per assigned partition: printed records, or the consumer's
    /// position for partitions nothing was printed from.
    done: BTreeMap<TopicPartition, u64>,
    group: bool,
}

/// Reads records, in-process or through a broker.
pub(crate) enum RecordReader {
    Local(LocalReader),
    Remote(RemoteReader),
}

impl RecordReader {
    /// Up to `limit` records; with `follow` waits up to a second for some, else
    /// returns none once caught up.
    pub(crate) async fn poll(&mut self, limit: usize, follow: bool) -> Result<Vec<ConsumerRecord>> {
        match self {
            RecordReader::Local(l) => {
                let batch = if follow {
                    l.consumer.poll(Duration::from_secs(1)).await?
                } else {
                    l.consumer.try_poll()?
                };
                if l.group {
                    // A partition this poll returned nothing from is consumed up to the
                    // consumer's position, which a reset may have moved (when retention
                    // deleted the committed offset), as a Kafka consumer commits its
                    // position.
                    let fetched: std::collections::BTreeSet<u32> =
                        batch.iter().map(|cr| cr.partition).collect();
                    for (tp, o) in l.done.iter_mut() {
                        if !fetched.contains(&tp.partition) {
                            *o = l.consumer.position(tp)?;
                        }
                    }
                }
                Ok(batch)
            }
            RecordReader::Remote(r) => r.poll(limit, follow).await,
        }
    }

    /// Notes that the record at `offset` of `partition` was printed.
    pub(crate) fn printed(&mut self, topic: &str, partition: u32, offset: u64) {
        if let RecordReader::Local(l) = self {
            if l.group {
                l.done
                    .insert(TopicPartition::new(topic, partition), offset + 1);
            }
        }
    }

    /// Commits what was printed to the group (nothing without one).
    pub(crate) fn commit(&mut self) -> Result<()> {
        match self {
            RecordReader::Local(l) if l.group => {
                let offsets: Vec<_> = l.done.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
                l.consumer
                    .commit_offsets(&offsets)
                    .context("committing offsets")?;
                Ok(())
            }
            RecordReader::Local(_) => Ok(()),
            RecordReader::Remote(r) => r.commit(),
        }
    }

    /// Leaves the group, if any.
    pub(crate) fn close(self) -> Result<()> {
        match self {
            RecordReader::Local(l) => l.consumer.close().context("leaving the group"),
            RecordReader::Remote(r) => {
                r.close();
                Ok(())
            }
        }
    }
}
