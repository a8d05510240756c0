//! A topic: named, configured, split into partitions.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use brook_core::time::SharedClock;
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, LogError, Result};
use crate::options::{ConfigCell, FsyncPolicy, TopicConfig};
use crate::partition::{sync_dir, AppendInfo, Partition, PartitionInfo};
use crate::partitioner::{partition_for_key, StickyPartitioner};
use crate::record::ProducerRecord;

/// Format version of `topic.json`.
const TOPIC_META_VERSION: u32 = 1;

/// What is stored in `topic.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicMeta {
    pub(crate) version: u32,
    pub(crate) partitions: u32,
    pub(crate) config: TopicConfig,
}

impl TopicMeta {
    pub(crate) fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("topic.json");
        let text = fs::read(&path).ctx("read", &path)?;
        let meta: TopicMeta = serde_json::from_slice(&text).map_err(|e| LogError::Corrupt {
            path: path.clone(),
            position: e.column() as u64,
            reason: format!("topic metadata does not parse: {e}"),
        })?;
        if meta.version != TOPIC_META_VERSION {
            return Err(LogError::Corrupt {
                path,
                position: 0,
                reason: format!("unsupported topic metadata version {}", meta.version),
            });
        }
        Ok(meta)
    }

    /// Writes atomically: temporary file, fsync, rename, fsync of the directory.
    pub(crate) fn store(&self, dir: &Path) -> Result<()> {
        let path = dir.join("topic.json");
        let tmp = dir.join("topic.json.tmp");
        // Serialising plain integers and strings cannot fail.
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        fs::write(&tmp, text).ctx("write", &tmp)?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .ctx("fsync", &tmp)?;
        fs::rename(&tmp, &path).ctx("rename", &path)?;
        sync_dir(dir)
    }
}

/// Facts about a topic, for `describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// The topic's name.
    pub name: String,
    /// Its configuration.
    pub config: TopicConfig,
    /// One entry per partition.
    pub partitions: Vec<PartitionInfo>,
}

/// A topic of the log.
#[derive(Debug)]
pub struct Topic {
    name: Arc<str>,
    dir: PathBuf,
    config: Arc<ConfigCell>,
    fsync: FsyncPolicy,
    clock: SharedClock,
    partitions: RwLock<Vec<Arc<Partition>>>,
    /// Where keyless records go (random start per process: per producer).
    sticky: StickyPartitioner,
}

impl Topic {
    pub(crate) fn open(
        name: &str,
        dir: PathBuf,
        meta: &TopicMeta,
        fsync: FsyncPolicy,
        clock: SharedClock,
        recover: bool,
    ) -> Result<Self> {
        let name: Arc<str> = Arc::from(name);
        let config = Arc::new(ConfigCell::new(meta.config.clone()));
        let mut partitions = Vec::with_capacity(meta.partitions as usize);
        for p in 0..meta.partitions {
            partitions.push(Arc::new(Partition::open(
                Arc::clone(&name),
                p,
                dir.join(p.to_string()),
                Arc::clone(&config),
                fsync,
                clock.clone(),
                recover,
            )?));
        }
        Ok(Topic {
            name,
            dir,
            config,
            fsync,
            clock,
            partitions: RwLock::new(partitions),
            sticky: StickyPartitioner::random(),
        })
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The topic's configuration (as of now: [`crate::Log::alter_topic`] replaces it).
    pub fn config(&self) -> Arc<TopicConfig> {
        self.config.get()
    }

    /// Stores `config` (validated) in `topic.json` and makes it the configuration of
    /// every partition from their next append or retention pass on. Serialised with
    /// adding partitions by the partitions lock.
    pub(crate) fn set_config(&self, config: TopicConfig) -> Result<()> {
        config.validate()?;
        let parts = self.partitions.write().unwrap_or_else(|e| e.into_inner());
        TopicMeta {
            version: TOPIC_META_VERSION,
            partitions: parts.len() as u32,
            config: config.clone(),
        }
        .store(&self.dir)?;
        self.config.set(config);
        Ok(())
    }

    fn read_partitions(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Partition>>> {
        // Nothing panics while holding this lock (only a push happens under the
        // write lock), so poisoning cannot happen; recover the guard if it ever did.
        self.partitions.read().unwrap_or_else(|e| e.into_inner())
    }

    /// How many partitions the topic has.
    pub fn partition_count(&self) -> u32 {
        self.read_partitions().len() as u32
    }

    /// One partition.
    ///
    /// # Errors
    /// [`LogError::UnknownPartition`].
    pub fn partition(&self, id: u32) -> Result<Arc<Partition>> {
        let parts = self.read_partitions();
        parts
            .get(id as usize)
            .cloned()
            .ok_or_else(|| LogError::UnknownPartition {
                topic: self.name.to_string(),
                partition: id,
                partitions: parts.len() as u32,
            })
    }

    /// All partitions, in order.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.read_partitions().clone()
    }

    /// The partition a record with this key goes to: Kafka's default partitioner for
    /// keys, the sticky partitioner's current partition for keyless records
    /// ([`StickyPartitioner`]).
    pub fn partition_for(&self, key: Option<&[u8]>) -> u32 {
        let n = self.partition_count();
        match key {
            Some(k) => partition_for_key(k, n),
            None => self.sticky.partition(n),
        }
    }

    /// Splits one batch of records by partition: keyed records by Kafka's default
    /// partitioner, keyless ones all to the sticky partition, which then moves on for
    /// the next batch. Records of one partition keep their order. Every append of
    /// records (plain and transactional) goes through here, so keyless records are
    /// spread the same way everywhere.
    ///
    /// # Errors
    /// [`LogError::RecordTooLarge`] for a record over `max_record_bytes`,
    /// [`LogError::InvalidRecord`] for a keyless record on a compacted topic (nothing
    /// is written then).
    pub(crate) fn split_batch(
        &self,
        records: Vec<ProducerRecord>,
    ) -> Result<BTreeMap<u32, Vec<ProducerRecord>>> {
        let mut by_partition: BTreeMap<u32, Vec<ProducerRecord>> = BTreeMap::new();
        let config = self.config.get();
        let max = config.max_record_bytes as usize;
        let compacted = config.cleanup_policy.compacts();
        let n = self.partition_count();
        let keyless = self.sticky.partition(n);
        let mut any_keyless = false;
        for (index, r) in records.into_iter().enumerate() {
            let size = crate::format::record_len(&r);
            if size > max {
                return Err(LogError::RecordTooLarge { index, size, max });
            }
            if r.key.is_none() && compacted {
                // Checked here too so that nothing of the request is written (the
                // partition checks its own batch again).
                return Err(LogError::InvalidRecord {
                    topic: self.name.to_string(),
                    index,
                    reason: format!(
                        "the topic is compacted (cleanup.policy={}), so every record needs a key",
                        config.cleanup_policy
                    ),
                });
            }
            let p = match r.key.as_deref() {
                Some(k) => partition_for_key(k, n),
                None => {
                    any_keyless = true;
                    keyless
                }
            };
            by_partition.entry(p).or_default().push(r);
        }
        if any_keyless {
            self.sticky.batch_done();
        }
        Ok(by_partition)
    }

    /// Appends records, each to the partition its key chooses (keyless ones of this
    /// call all to one partition, see [`Topic::partition_for`]), as one batch per
    /// partition. Records of one partition keep their order. Returns one entry per
    /// partition written, in partition order.
    ///
    /// Records are checked before anything is written; if a partition's append fails,
    /// the partitions before it in partition order have been written (their
    /// [`AppendInfo`] is lost with the error), as with a failed Kafka produce request.
    ///
    /// # Errors
    /// As [`Partition::append`].
    pub fn append(&self, records: Vec<ProducerRecord>) -> Result<Vec<AppendInfo>> {
        let by_partition = self.split_batch(records)?;
        let mut out = Vec::with_capacity(by_partition.len());
        for (p, recs) in by_partition {
            out.push(self.partition(p)?.append(&recs)?);
        }
        Ok(out)
    }

    /// Adds partitions so the topic has `total`. Keys will map to different partitions
    /// from now on (the caller should warn users, as Kafka's tools do).
    pub(crate) fn add_partitions(&self, total: u32, recover: bool) -> Result<()> {
        let mut parts = self.partitions.write().unwrap_or_else(|e| e.into_inner());
        let current = parts.len() as u32;
        if total <= current {
            return Err(LogError::InvalidConfig {
                field: "partitions",
                reason: format!(
                    "topic {:?} already has {current} partitions; the new count must be larger",
                    &*self.name
                ),
            });
        }
        let mut added = Vec::new();
        for p in current..total {
            let opened = Partition::open(
                Arc::clone(&self.name),
                p,
                self.dir.join(p.to_string()),
                Arc::clone(&self.config),
                self.fsync,
                self.clock.clone(),
                recover,
            );
            match opened {
                Ok(part) => added.push(Arc::new(part)),
                Err(e) => {
                    // Roll back: the topic keeps its old partitions, without debris.
                    drop(added);
                    for q in current..=p {
                        let _ = std::fs::remove_dir_all(self.dir.join(q.to_string()));
                    }
                    return Err(e);
                }
            }
        }
        TopicMeta {
            version: TOPIC_META_VERSION,
            partitions: total,
            config: (*self.config.get()).clone(),
        }
        .store(&self.dir)?;
        parts.extend(added);
        Ok(())
    }

    /// Start and end offsets, sizes and segment counts per partition.
    pub fn info(&self) -> TopicInfo {
        TopicInfo {
            name: self.name.to_string(),
            config: (*self.config.get()).clone(),
            partitions: self.read_partitions().iter().map(|p| p.info()).collect(),
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn close(&self) -> Result<()> {
        for p in self.read_partitions().iter() {
            p.close()?;
        }
        Ok(())
    }
}

pub(crate) fn new_meta(partitions: u32, config: TopicConfig) -> TopicMeta {
    TopicMeta {
        version: TOPIC_META_VERSION,
        partitions,
        config,
    }
}
