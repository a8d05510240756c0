//! [`RocksDbStateBackend`]: keyed state in RocksDB, one instance per operator subtask.
//!
//! # Layout
//!
//! - One RocksDB instance per subtask, in a directory the backend owns: it is created
//!   on [`RocksDbStateBackend::open`] and removed when the backend is dropped, unless
//!   [`RocksDbStateBackend::keep_on_drop`] says otherwise.
//! - Each named state is a **column family of the same name**, created on its first
//!   `put` (reads of a state that was never written find nothing and create nothing).
//!   A state is then a keyspace of its own with its own memtable, and
//!   [`KeyedStateBackend::for_each_entry`] visits the states in name order and each
//!   state in key order, as [`crate::MemoryStateBackend`] does.
//! - Keys are [`compose_key`](crate::backend::compose_key)'s `key group (2 bytes BE) |
//!   key length | key | namespace length | namespace`, compared bytewise (RocksDB's
//!   default comparator), so a key-group range is one contiguous key range.
//!
//! # Tuning (see [`RocksDbOptions`] for the knobs and defaults)
//!
//! - **No write-ahead log**: every write uses `disable_wal`. Durability comes from
//!   checkpoints (semantics.md §4): after a crash a job restores the last complete
//!   checkpoint and never reopens a working directory, so a WAL would only cost a
//!   second write of every update. Memtables are flushed when a native checkpoint is
//!   taken ([`RocksDbStateBackend::checkpoint_to`]) and when a kept directory closes.
//! - **One memory budget per [`RocksDbOptions`] value, shared by every backend opened
//!   with it or its clones** (all subtasks of a job): an LRU block cache of
//!   `memory_bytes`, and a write-buffer manager that charges memtables to that cache
//!   and flushes once they pass half of it (as Flink's managed memory with write
//!   buffer ratio 0.5). Index and filter blocks live in the cache too (L0's pinned),
//!   so RocksDB's memory stays near the budget however many states and subtasks
//!   there are.
//! - **Write buffer** of `write_buffer_bytes` (16 MiB) per column family instead of
//!   RocksDB's 64 MiB: a job has parallelism × states column families, and the shared
//!   write-buffer manager bounds the total anyway; smaller memtables flush sooner
//!   but keep many states from each pinning 128 MiB.
//! - **Bloom filters** (10 bits per key, ~1% false positives) on whole keys, in SST
//!   files (partitioned, with a two-level index, so a lookup reads a 4 KiB partition
//!   through the block cache, never a whole-file filter) and in memtables: a point lookup of a key that is not there
//!   (a new key; every `put` and `delete` checks existence for the exact `len`) skips
//!   the files instead of reading a block from each.
//! - **Prefix extractor on `key group | key length | key`** (the current key, without
//!   namespace) with prefix blooms: `scan_prefix` with a prefix that covers a whole
//!   key (all namespaces of a key, a map state's entries) seeks in prefix mode and
//!   skips files without that key; shorter prefixes (a key group, everything) seek in
//!   total order, so every prefix scan is correct. Each scan also sets an upper bound
//!   (the prefix's successor), so iteration stops at the end of the prefix.
//! - **lz4 compression** (cheap to build: bundled C, no system library; fast to
//!   decompress on the read path).
//! - **Write-back cache** ([`RocksDbOptions::write_cache_bytes`], 8 MiB): `put` and
//!   `delete` collect in an ordered map that reads and scans consult first, and go to
//!   RocksDB in one write batch when it is full, before a native checkpoint, and when
//!   a kept directory closes. An aggregate updated by every record of its key and
//!   window then costs RocksDB one write per flush, not one per record.
//! - **`len` is exact**: a counter kept by `put` (+1 when the key was new) and
//!   `delete` (−1 when it was there), which costs one point lookup per entry not in
//!   the write-back cache (bloom filters make it cheap for new keys; `delete` of a
//!   missing key then writes no tombstone). On open it comes from the count stored with a checkpoint or a kept
//!   directory, else from one scan of the keys.
//!
//! # Errors
//!
//! Opening and checkpoints return [`StateError::RocksDb`]. The
//! [`KeyedStateBackend`] methods cannot return errors, so a RocksDB failure there
//! (an I/O error, corruption) panics with the directory and the operation: the task
//! fails and the job restores its last checkpoint. RocksDB types never leave this
//! module.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ::rocksdb as rdb;

use brook_core::checkpoint::{NativeKeyedState, SnapshotStorage};
use brook_core::keys::KeyGroupRange;

use crate::backend::{BackendKind, EntryVisitor, KeyedStateBackend};
use crate::StateError;

/// The file, in a checkpoint or a kept directory, that holds the entry count
/// (decimal) so an open need not count the keys. Deleted when read: a directory left
/// by a crash has none and is counted.
const LEN_FILE: &str = "BROOK-LEN";

/// Settings of [`RocksDbStateBackend`]s, and the memory (block cache and write-buffer
/// manager) shared by every backend opened with this value or a clone of it.
///
/// Setters that change the memory budget start a new shared pool for this value (and
/// the clones made after).
#[derive(Clone)]
pub struct RocksDbOptions {
    memory_bytes: usize,
    write_buffer_bytes: usize,
    bloom_bits_per_key: f64,
    background_jobs: i32,
    write_cache_bytes: usize,
    max_manifest_bytes: usize,
    shared: Arc<OnceLock<SharedMemory>>,
}

/// The block cache and write-buffer manager of one [`RocksDbOptions`] pool.
struct SharedMemory {
    cache: rdb::Cache,
    write_buffers: rdb::WriteBufferManager,
}

impl fmt::Debug for RocksDbOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbOptions")
            .field("memory_bytes", &self.memory_bytes)
            .field("write_buffer_bytes", &self.write_buffer_bytes)
            .field("bloom_bits_per_key", &self.bloom_bits_per_key)
            .field("background_jobs", &self.background_jobs)
            .field("write_cache_bytes", &self.write_cache_bytes)
            .field("max_manifest_bytes", &self.max_manifest_bytes)
            .finish_non_exhaustive()
    }
}

impl Default for RocksDbOptions {
    /// 256 MiB shared memory, 16 MiB write buffers, 10 bloom bits per key, 2
    /// background jobs, an 8 MiB write-back cache per instance, a 256 KiB MANIFEST.
    fn default() -> Self {
        RocksDbOptions {
            memory_bytes: 256 << 20,
            write_buffer_bytes: 16 << 20,
            bloom_bits_per_key: 10.0,
            background_jobs: 2,
            write_cache_bytes: 8 << 20,
            max_manifest_bytes: 256 << 10,
            shared: Arc::default(),
        }
    }
}

impl RocksDbOptions {
    /// The defaults (see [`Default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Memory shared by all backends opened with these options: the block cache's
    /// capacity, of which memtables may take half before they are flushed.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self.shared = Arc::default();
        self
    }

    /// Size of one column family's memtable (RocksDB's `write_buffer_size`).
    pub fn write_buffer_bytes(mut self, bytes: usize) -> Self {
        self.write_buffer_bytes = bytes;
        self
    }

    /// Size of each instance's write-back cache (approximate bytes of keys and values;
    /// 0 turns it off): writes collect in memory and go to RocksDB in one write batch
    /// when the cache is full, before a native checkpoint and when a kept directory
    /// closes. Repeated updates of one entry (an aggregate per key and window) then
    /// cost one RocksDB write, and the existence check behind the exact `len` is
    /// made once per entry, not per update.
    pub fn write_cache_bytes(mut self, bytes: usize) -> Self {
        self.write_cache_bytes = bytes;
        self
    }

    /// The MANIFEST size past which RocksDB writes a new, compacted one
    /// (`max_manifest_file_size`; default 256 KiB).
    pub fn max_manifest_bytes(mut self, bytes: usize) -> Self {
        self.max_manifest_bytes = bytes.max(1);
        self
    }

    /// Bloom filter bits per key (0 disables the filters).
    pub fn bloom_bits_per_key(mut self, bits: f64) -> Self {
        self.bloom_bits_per_key = bits;
        self
    }

    /// Background flush and compaction threads (RocksDB's `max_background_jobs`; the
    /// thread pool is shared by all instances in the process).
    pub fn background_jobs(mut self, jobs: i32) -> Self {
        self.background_jobs = jobs.max(1);
        self
    }

    /// Bytes the shared block cache holds now (RocksDB's `GetUsage`: cached blocks and
    /// the memtables charged to it by the write-buffer manager), as Flink's
    /// `state.backend.rocksdb.metrics.block-cache-usage`.
    pub fn block_cache_usage(&self) -> usize {
        self.shared().cache.get_usage()
    }

    fn shared(&self) -> &SharedMemory {
        self.shared.get_or_init(|| {
            let cache = rdb::Cache::new_lru_cache(self.memory_bytes);
            let write_buffers = rdb::WriteBufferManager::new_write_buffer_manager_with_cache(
                self.memory_bytes / 2,
                false,
                cache.clone(),
            );
            SharedMemory {
                cache,
                write_buffers,
            }
        })
    }

    /// RocksDB options for the instance and every column family.
    fn rocksdb_options(&self) -> rdb::Options {
        let shared = self.shared();
        let mut table = rdb::BlockBasedOptions::default();
        table.set_block_cache(&shared.cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        if self.bloom_bits_per_key > 0.0 {
            table.set_bloom_filter(self.bloom_bits_per_key, false);
            table.set_whole_key_filtering(true);
        }
        // Partitioned filters and a two-level index: a lookup loads one small (4 KiB)
        // partition through the cache, not a whole-file filter (several MB for the
        // large files compaction writes), which the LRU cache did not keep: at 10 M
        // keys every lookup read and checksummed one from disk (benches/README.md,
        // state). The top level stays pinned.
        table.set_index_type(rdb::BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4096);
        table.set_pin_top_level_index_and_filter(true);

        let mut o = rdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        o.set_block_based_table_factory(&table);
        o.set_write_buffer_manager(&shared.write_buffers);
        o.set_write_buffer_size(self.write_buffer_bytes);
        o.set_max_write_buffer_number(2);
        // Every checkpoint flushes the memtables, and every flush adds a version edit
        // to the MANIFEST (about 230 bytes in the soak), which RocksDB only rewrites
        // compacted at `max_manifest_file_size`, 1 GiB by default: the one-hour soak's
        // state directory grew by 0.7 MB and its checkpoints (each copies the
        // MANIFEST) by 2.4 MB, without end. RocksDB 11 treats this as the minimum of
        // an auto-tuned limit (`max_manifest_space_amp_pct`), so a small value does
        // not make large databases rewrite their MANIFEST on every edit.
        o.set_max_manifest_file_size(self.max_manifest_bytes);
        o.set_compression_type(rdb::DBCompressionType::Lz4);
        o.set_bottommost_compression_type(rdb::DBCompressionType::Lz4);
        o.set_level_compaction_dynamic_level_bytes(true);
        o.set_max_background_jobs(self.background_jobs);
        o.set_prefix_extractor(rdb::SliceTransform::create(
            "brook.key_group_and_key",
            key_prefix,
            Some(has_key_prefix),
        ));
        if self.bloom_bits_per_key > 0.0 {
            o.set_memtable_prefix_bloom_ratio(0.1);
            o.set_memtable_whole_key_filtering(true);
        }
        // RocksDB's own LOG: warnings only, and few old files.
        o.set_log_level(rdb::LogLevel::Warn);
        o.set_keep_log_file_num(2);
        o
    }
}

/// Length of the `key group | key length | key` prefix of a composed key, if `key` is
/// long enough to hold it.
fn key_prefix_len(key: &[u8]) -> Option<usize> {
    let len_bytes: [u8; 4] = key.get(2..6)?.try_into().ok()?;
    let end = 6usize.checked_add(u32::from_be_bytes(len_bytes) as usize)?;
    (key.len() >= end).then_some(end)
}

/// The prefix extractor: `key group | key length | key` of a composed key.
fn key_prefix(key: &[u8]) -> &[u8] {
    match key_prefix_len(key) {
        Some(end) => &key[..end],
        None => key,
    }
}

/// The prefix extractor's domain: keys that hold a whole `key group | key` prefix.
fn has_key_prefix(key: &[u8]) -> bool {
    key_prefix_len(key).is_some()
}

/// RocksDB's `uncache_aggressiveness` for every column family: how hard it tries to
/// erase the block cache entries of an SST file that compaction made obsolete.
/// RocksDB's default, 0, leaves them to age out of the LRU cache; with a checkpoint a
/// second every flush writes new files that compaction soon replaces, so blocks of
/// deleted files filled the whole cache (256 MiB by default) over about 18 minutes
/// while the live state was under 1 MB (benches/README.md, "Soak"). 300 is the value
/// RocksDB's documentation names as its likely future default (options.h). A mutable
/// option: set on the open column family, as `SetOptions` does.
const UNCACHE_AGGRESSIVENESS: &str = "300";

fn uncache_obsolete_files(db: &rdb::DB, cf: &rdb::ColumnFamily) -> Result<(), rdb::Error> {
    db.set_options_cf(cf, &[("uncache_aggressiveness", UNCACHE_AGGRESSIVENESS)])
}

/// The format of native snapshots ([`NativeKeyedState::format`]).
const NATIVE_FORMAT: &str = "rocksdb/1";

/// A name no other instance of this job gets (64 random bits, the process and a
/// counter).
fn new_instance_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{:016x}-{:x}-{n}",
        rand::random::<u64>(),
        std::process::id()
    )
}

/// Fsyncs a directory, so the names in it survive a crash.
fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Passes the cached writes with keys below `bound` (all, for `None`) to `f`, skipping
/// cached deletes: the part of a merged scan that comes before a stored key.
fn merge_cached_until<'a, I>(
    cached: &mut std::iter::Peekable<I>,
    bound: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]),
) where
    I: Iterator<Item = (&'a Vec<u8>, &'a Pending)>,
{
    while let Some((k, _)) = cached.peek() {
        if bound.is_some_and(|b| k.as_slice() >= b) {
            return;
        }
        if let Some((k, Pending { value: Some(v), .. })) = cached.next() {
            f(k, v);
        }
    }
}

/// The smallest byte string greater than every string starting with `prefix`, or
/// `None` when there is none (`prefix` is empty or all `0xff`).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != u8::MAX {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// Maps a RocksDB or I/O error of `op` on `path` to [`StateError::RocksDb`].
fn error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(&dyn fmt::Display) -> StateError + 'a {
    move |e| StateError::RocksDb {
        path: path.to_path_buf(),
        op,
        message: e.to_string(),
    }
}

/// Removes the backend's directory when dropped, unless told to keep it. A field of
/// the backend declared after the database, so it runs once the database is closed.
#[derive(Debug)]
struct DirGuard {
    dir: PathBuf,
    keep: bool,
}

impl Drop for DirGuard {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a directory that cannot be removed is not worth a panic in drop.
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Keyed state in a RocksDB instance of its own (see the [module docs](self) for the
/// layout and tuning).
pub struct RocksDbStateBackend {
    // Field order matters: the database closes before the guard removes its directory.
    db: rdb::DB,
    /// Options for column families created later.
    cf_options: rdb::Options,
    write: rdb::WriteOptions,
    read: rdb::ReadOptions,
    /// Names of the states (column families other than an empty `default`), sorted.
    states: BTreeSet<String>,
    len: usize,
    /// Writes not yet in RocksDB, per state, in key order (scans merge them in).
    pending: BTreeMap<String, BTreeMap<Vec<u8>, Pending>>,
    /// Approximate bytes held by `pending`.
    pending_bytes: usize,
    write_cache_bytes: usize,
    /// Names this instance's SST files in a checkpoint's shared directory.
    instance: String,
    /// SST files this instance was restored from (file name -> path under the
    /// checkpoint root): later checkpoints refer to them instead of storing them again.
    /// New files get this instance's own names: a run restored from the same
    /// checkpoint before (and killed) may have stored different files under the same
    /// numbers, so the restored instance must not take over the old instance's names.
    inherited: std::collections::HashMap<String, String>,
    options: RocksDbOptions,
    guard: DirGuard,
}

/// A write held in the write-back cache.
#[derive(Debug)]
struct Pending {
    /// The new value, or `None` for a delete.
    value: Option<Vec<u8>>,
    /// Whether RocksDB holds the key (a delete of a key it does not hold writes no
    /// tombstone).
    in_db: bool,
}

/// What one cached entry is charged beyond its key and value (map nodes, lengths).
const PENDING_OVERHEAD: usize = 64;

impl fmt::Debug for RocksDbStateBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbStateBackend")
            .field("dir", &self.guard.dir)
            .field("states", &self.states)
            .field("len", &self.len)
            .field("keep_on_drop", &self.guard.keep)
            .finish()
    }
}

impl RocksDbStateBackend {
    /// Opens the RocksDB instance in `dir`, creating the directory and the database
    /// if missing (an existing database, for example one kept on drop, is opened with
    /// its states). The backend owns `dir`: it is removed on drop unless
    /// [`RocksDbStateBackend::keep_on_drop`] is set.
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when the directory cannot be created or RocksDB cannot
    /// open it (it is locked by another instance, damaged, not a directory). A
    /// directory this call created is removed again; an existing one is left as it is.
    pub fn open(dir: &Path, options: RocksDbOptions) -> Result<Self, StateError> {
        let created = !dir.exists();
        let opened = Self::open_in(dir, &options);
        if opened.is_err() && created {
            // Leave nothing behind for a directory this call made.
            let _ = fs::remove_dir_all(dir);
        }
        opened
    }

    fn open_in(dir: &Path, options: &RocksDbOptions) -> Result<Self, StateError> {
        fs::create_dir_all(dir).map_err(|e| error("create directory", dir)(&e))?;
        let opts = options.rocksdb_options();
        let mut names = if dir.join("CURRENT").exists() {
            rdb::DB::list_cf(&opts, dir).map_err(|e| error("list column families", dir)(&e))?
        } else {
            Vec::new()
        };
        if !names.iter().any(|n| n == rdb::DEFAULT_COLUMN_FAMILY_NAME) {
            names.push(rdb::DEFAULT_COLUMN_FAMILY_NAME.to_string());
        }
        let descriptors = names
            .iter()
            .map(|n| rdb::ColumnFamilyDescriptor::new(n, opts.clone()));
        let db = rdb::DB::open_cf_descriptors(&opts, dir, descriptors)
            .map_err(|e| error("open", dir)(&e))?;
        for name in &names {
            if let Some(cf) = db.cf_handle(name) {
                uncache_obsolete_files(&db, cf).map_err(|e| error("set options", dir)(&e))?;
            }
        }
        let mut write = rdb::WriteOptions::default();
        write.disable_wal(true);
        let mut backend = RocksDbStateBackend {
            db,
            cf_options: opts,
            write,
            read: rdb::ReadOptions::default(),
            states: names.into_iter().collect(),
            len: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            write_cache_bytes: options.write_cache_bytes,
            instance: new_instance_id(),
            inherited: std::collections::HashMap::new(),
            options: options.clone(),
            guard: DirGuard {
                dir: dir.to_path_buf(),
                keep: false,
            },
        };
        backend.len = match backend.take_stored_len() {
            Some(n) => n,
            None => backend.count_entries()?,
        };
        Ok(backend)
    }

    /// Opens a working copy of the native checkpoint `checkpoint` (written by
    /// [`RocksDbStateBackend::checkpoint_to`]) in `dir`, which must not exist or be
    /// empty. SST files are hard-linked (copied where links fail, for example across
    /// file systems): RocksDB never changes an SST file, so the checkpoint stays intact
    /// while the copy is written and compacted. The other files (manifest, options,
    /// the entry count) are small and copied.
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when `dir` is not empty, a file cannot be linked or
    /// copied, or RocksDB cannot open the copy; `dir` is then removed.
    pub fn open_from_checkpoint(
        checkpoint: &Path,
        dir: &Path,
        options: RocksDbOptions,
    ) -> Result<Self, StateError> {
        let err = |op| error(op, dir);
        if fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(err("restore checkpoint")(&"the directory is not empty"));
        }
        let restored =
            Self::link_checkpoint(checkpoint, dir).and_then(|()| Self::open(dir, options));
        if restored.is_err() {
            let _ = fs::remove_dir_all(dir);
        }
        restored
    }

    /// Fills `dir` with `checkpoint`'s files: SST files hard-linked, others copied.
    fn link_checkpoint(checkpoint: &Path, dir: &Path) -> Result<(), StateError> {
        let err = |op| error(op, dir);
        fs::create_dir_all(dir).map_err(|e| err("create directory")(&e))?;
        let entries =
            fs::read_dir(checkpoint).map_err(|e| error("read checkpoint", checkpoint)(&e))?;
        for entry in entries {
            let entry = entry.map_err(|e| error("read checkpoint", checkpoint)(&e))?;
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let (from, to) = (entry.path(), dir.join(entry.file_name()));
            let immutable = from.extension().is_some_and(|x| x == "sst" || x == "blob");
            if !(immutable && fs::hard_link(&from, &to).is_ok()) {
                fs::copy(&from, &to).map_err(|e| err("copy checkpoint file")(&e))?;
            }
        }
        Ok(())
    }

    /// Writes a native RocksDB checkpoint of the current state to `dir`, which must not
    /// exist (its parent must). Memtables are flushed first; the checkpoint's SST
    /// files are hard links to the instance's, so successive checkpoints share every
    /// file that did not change (incremental checkpoints), and the checkpoint costs
    /// little more than the flush.
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when the flush or the checkpoint fails (for example,
    /// `dir` exists).
    pub fn checkpoint_to(&mut self, dir: &Path) -> Result<(), StateError> {
        let err = |op| error(op, dir);
        self.write_back().map_err(|e| err("write back")(&e))?;
        self.flush_memtables().map_err(|e| err("flush")(&e))?;
        let cp = rdb::checkpoint::Checkpoint::new(&self.db).map_err(|e| err("checkpoint")(&e))?;
        cp.create_checkpoint(dir)
            .map_err(|e| err("checkpoint")(&e))?;
        fs::write(dir.join(LEN_FILE), self.len.to_string())
            .map_err(|e| err("write entry count")(&e))
    }

    /// Writes a native checkpoint into `storage` (see
    /// [`KeyedStateBackend::snapshot_native`]): a RocksDB checkpoint in the private
    /// directory, whose SST files then move to the shared directory as
    /// `<instance>-<file>.sst` unless a file of that name is there already (SST
    /// files never change, so an earlier checkpoint of this instance put the same
    /// bytes there). Only SST files written since the last checkpoint are new: the
    /// checkpoint is incremental. Same file system as the working directory: links,
    /// not copies.
    fn native_checkpoint(
        &mut self,
        storage: &SnapshotStorage,
        key_groups: KeyGroupRange,
    ) -> Result<NativeKeyedState, StateError> {
        let private = storage.root.join(&storage.private_dir);
        let shared = storage.root.join(&storage.shared_dir);
        fs::create_dir_all(&shared).map_err(|e| error("create directory", &shared)(&e))?;
        if let Some(parent) = private.parent() {
            fs::create_dir_all(parent).map_err(|e| error("create directory", parent)(&e))?;
        }
        self.checkpoint_to(&private)?;
        let rel = |dir: &Path, name: &str| format!("{}/{name}", dir.to_string_lossy());
        let mut files = Vec::new();
        let entries = fs::read_dir(&private).map_err(|e| error("read checkpoint", &private)(&e))?;
        for entry in entries {
            let entry = entry.map_err(|e| error("read checkpoint", &private)(&e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(path) = self
                .inherited
                .get(&name)
                .filter(|p| storage.root.join(p).is_file())
            {
                // The very file this instance was restored from (SST files never
                // change, and RocksDB never reuses a file number).
                fs::remove_file(entry.path())
                    .map_err(|e| error("remove checkpoint file", &entry.path())(&e))?;
                files.push((name, path.clone()));
            } else if name.ends_with(".sst") {
                let shared_name = format!("{}-{name}", self.instance);
                let target = shared.join(&shared_name);
                if target.exists() {
                    fs::remove_file(entry.path())
                } else {
                    fs::rename(entry.path(), &target)
                }
                .map_err(|e| error("move to the shared directory", &target)(&e))?;
                files.push((name, rel(&storage.shared_dir, &shared_name)));
            } else {
                files.push((name.clone(), rel(&storage.private_dir, &name)));
            }
        }
        files.sort();
        fsync_dir(&shared)
            .and_then(|()| fsync_dir(&private))
            .map_err(|e| error("sync", &private)(&e))?;
        Ok(NativeKeyedState {
            format: NATIVE_FORMAT.into(),
            key_groups,
            files,
            instance: self.instance.clone(),
            entries: self.len as u64,
        })
    }

    /// Opens a working copy of native state `state` (files relative to `root`) in
    /// `dir`, which must not exist: files linked (copied across file systems).
    fn open_native(
        state: &NativeKeyedState,
        root: &Path,
        dir: &Path,
        options: RocksDbOptions,
    ) -> Result<Self, StateError> {
        if state.format != NATIVE_FORMAT {
            return Err(error("restore", root)(&format_args!(
                "native state of format {:?}, this brook reads {NATIVE_FORMAT:?}",
                state.format
            )));
        }
        let linked = (|| {
            fs::create_dir_all(dir).map_err(|e| error("create directory", dir)(&e))?;
            for (name, path) in &state.files {
                if name.contains('/') || name.contains("..") || path.contains("..") {
                    return Err(error("restore", root)(&format_args!(
                        "bad file reference {name:?} -> {path:?}"
                    )));
                }
                let (from, to) = (root.join(path), dir.join(name));
                let immutable = name.ends_with(".sst") || name.ends_with(".blob");
                if !(immutable && fs::hard_link(&from, &to).is_ok()) {
                    fs::copy(&from, &to).map_err(|e| error("copy checkpoint file", &from)(&e))?;
                }
            }
            Self::open(dir, options)
        })();
        if linked.is_err() {
            let _ = fs::remove_dir_all(dir);
        }
        linked
    }

    /// Deletes every entry outside `keep` (after a restore from files that cover
    /// more key groups than this subtask owns) and recounts.
    fn retain_key_groups(&mut self, keep: KeyGroupRange) -> Result<(), StateError> {
        let dir = self.guard.dir.clone();
        for state in &self.states {
            let Some(cf) = self.db.cf_handle(state) else {
                continue;
            };
            let below = (keep.start as u16).to_be_bytes();
            if keep.start > 0 {
                self.db
                    .delete_range_cf_opt(cf, [0u8, 0].as_slice(), below.as_slice(), &self.write)
                    .map_err(|e| error("delete range", &dir)(&e))?;
            }
            // Key groups are below 2^15 (the largest max parallelism), so `ff ff`
            // is above every key.
            let above = (keep.end as u16).saturating_add(1).to_be_bytes();
            self.db
                .delete_range_cf_opt(cf, above.as_slice(), [0xffu8, 0xff].as_slice(), &self.write)
                .map_err(|e| error("delete range", &dir)(&e))?;
        }
        self.len = self.count_entries()?;
        Ok(())
    }

    /// Calls `f(state, key, value)` for each entry of key groups `key_groups` in
    /// native state `state` (files relative to `root`), of any layout of key groups:
    /// the restore path for another parallelism or another backend. The files are
    /// opened in a scratch copy under `root`, removed afterwards.
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when the files cannot be linked, opened or read.
    pub fn read_native(
        state: &NativeKeyedState,
        root: &Path,
        key_groups: KeyGroupRange,
        f: &mut EntryVisitor<'_>,
    ) -> Result<(), StateError> {
        let scratch = root.join(format!(".restore-{}", new_instance_id()));
        let options = RocksDbOptions::default().write_cache_bytes(0);
        let copy = Self::open_native(state, root, &scratch, options)?;
        copy.for_each_entry(&mut |name, key, value| {
            let kg = match key {
                [a, b, ..] => u32::from(u16::from_be_bytes([*a, *b])),
                _ => return,
            };
            if key_groups.contains(kg as brook_core::keys::KeyGroup) {
                f(name, key, value);
            }
        });
        Ok(())
    }

    /// Calls `f(key, value)` for every entry of `state` whose key starts with
    /// `prefix`, in key order: RocksDB's entries merged with the write-back cache (a
    /// cached write replaces the stored entry; a cached delete hides it).
    fn merged_scan(&self, state: &str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) {
        let mut cached = self
            .pending
            .get(state)
            .into_iter()
            .flat_map(|m| {
                m.range::<[u8], _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
            })
            .take_while(|(k, _)| k.starts_with(prefix))
            .peekable();
        if let Some(cf) = self.db.cf_handle(state) {
            let mut ro = rdb::ReadOptions::default();
            if let Some(upper) = prefix_successor(prefix) {
                ro.set_iterate_upper_bound(upper);
            }
            if has_key_prefix(prefix) {
                // Every key starting with `prefix` has the same extracted prefix: the
                // prefix blooms may skip files.
                ro.set_prefix_same_as_start(true);
            } else {
                ro.set_total_order_seek(true);
            }
            let mut it = self.db.raw_iterator_cf_opt(cf, ro);
            it.seek(prefix);
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                if !k.starts_with(prefix) {
                    break;
                }
                merge_cached_until(&mut cached, Some(k), f);
                match cached.peek() {
                    Some((ck, p)) if ck.as_slice() == k => {
                        if let Some(cv) = &p.value {
                            f(k, cv);
                        }
                        cached.next();
                    }
                    _ => f(k, v),
                }
                it.next();
            }
            if let Err(e) = it.status() {
                self.fail("scan", &e);
            }
        }
        merge_cached_until(&mut cached, None, f);
    }

    /// Whether the directory stays when the backend is dropped (default: it is
    /// removed). A kept directory is flushed on close and can be opened again with
    /// [`RocksDbStateBackend::open`].
    pub fn keep_on_drop(&mut self, keep: bool) -> &mut Self {
        self.guard.keep = keep;
        self
    }

    /// The instance's directory.
    pub fn dir(&self) -> &Path {
        &self.guard.dir
    }

    /// Writes the write-back cache to RocksDB and flushes every state's memtable to
    /// SST files (checkpoints do this themselves).
    ///
    /// # Errors
    /// [`StateError::RocksDb`] when the write or the flush fails.
    pub fn flush(&mut self) -> Result<(), StateError> {
        self.write_back()
            .and_then(|()| self.flush_memtables())
            .map_err(|e| error("flush", &self.guard.dir)(&e))
    }

    /// Writes the write-back cache to RocksDB in one batch.
    fn write_back(&mut self) -> Result<(), rdb::Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        for state in self.pending.keys() {
            if self.db.cf_handle(state).is_none() {
                self.db.create_cf(state, &self.cf_options)?;
                if let Some(cf) = self.db.cf_handle(state) {
                    uncache_obsolete_files(&self.db, cf)?;
                }
                self.states.insert(state.clone());
            }
        }
        let mut batch = rdb::WriteBatch::default();
        for (state, entries) in &self.pending {
            let Some(cf) = self.db.cf_handle(state) else {
                continue; // created above
            };
            for (key, p) in entries {
                match &p.value {
                    Some(v) => batch.put_cf(cf, key, v),
                    None if p.in_db => batch.delete_cf(cf, key),
                    None => {}
                }
            }
        }
        self.db.write_opt(batch, &self.write)?;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    /// Whether RocksDB (not the cache) holds `key` in `state`.
    fn in_db(&self, state: &str, key: &[u8]) -> bool {
        self.db
            .cf_handle(state)
            .is_some_and(|cf| self.contains(cf, key))
    }

    /// Records a write (`None`: a delete) in the cache and keeps `len`; writes the
    /// cache back when full. `in_db`: whether RocksDB holds the key, when the caller
    /// knows (spares the lookup); only used for a key not in the cache.
    fn write(&mut self, state: &str, key: &[u8], value: Option<Vec<u8>>, in_db: Option<bool>) {
        let is_put = value.is_some();
        let new_bytes = value.as_ref().map_or(0, Vec::len);
        if let Some(p) = self.pending.get_mut(state).and_then(|m| m.get_mut(key)) {
            let existed = p.value.is_some();
            let old_bytes = p.value.as_ref().map_or(0, Vec::len);
            p.value = value;
            self.pending_bytes = (self.pending_bytes + new_bytes).saturating_sub(old_bytes);
            match (existed, is_put) {
                (false, true) => self.len += 1,
                (true, false) => self.len -= 1,
                _ => {}
            }
        } else {
            let in_db = in_db.unwrap_or_else(|| self.in_db(state, key));
            if !in_db && !is_put {
                return; // deleting what is not there
            }
            self.pending_bytes += key.len() + new_bytes + PENDING_OVERHEAD;
            let entries = match self.pending.get_mut(state) {
                Some(m) => m,
                None => self.pending.entry(state.to_string()).or_default(),
            };
            entries.insert(key.to_vec(), Pending { value, in_db });
            match (in_db, is_put) {
                (false, true) => self.len += 1,
                (true, false) => self.len -= 1,
                _ => {}
            }
        }
        self.write_back_if_full();
    }

    fn write_back_if_full(&mut self) {
        if self.pending_bytes > self.write_cache_bytes {
            if let Err(e) = self.write_back() {
                self.fail("write back", &e);
            }
        }
    }

    fn flush_memtables(&self) -> Result<(), rdb::Error> {
        let mut fo = rdb::FlushOptions::default();
        fo.set_wait(true);
        let cfs: Vec<_> = self
            .states
            .iter()
            .filter_map(|s| self.db.cf_handle(s))
            .collect();
        self.db.flush_cfs_opt(&cfs, &fo)
    }

    /// Reads and deletes the stored entry count, if any.
    fn take_stored_len(&self) -> Option<usize> {
        let path = self.guard.dir.join(LEN_FILE);
        let text = fs::read_to_string(&path).ok()?;
        // Gone before any write: a crash later must not find a stale count.
        fs::remove_file(&path).ok()?;
        text.trim().parse().ok()
    }

    /// Counts the entries of every state with one scan.
    fn count_entries(&self) -> Result<usize, StateError> {
        let mut n = 0;
        for state in &self.states {
            let Some(cf) = self.db.cf_handle(state) else {
                continue;
            };
            let mut it = self.db.raw_iterator_cf_opt(cf, Self::total_order());
            it.seek_to_first();
            while it.valid() {
                n += 1;
                it.next();
            }
            it.status()
                .map_err(|e| error("count entries", &self.guard.dir)(&e))?;
        }
        Ok(n)
    }

    fn total_order() -> rdb::ReadOptions {
        let mut ro = rdb::ReadOptions::default();
        ro.set_total_order_seek(true);
        ro
    }

    /// Panics for a RocksDB failure inside a [`KeyedStateBackend`] method, which cannot
    /// return it.
    fn fail(&self, op: &str, e: &rdb::Error) -> ! {
        panic!(
            "RocksDB state backend at {}: {op} failed: {e}",
            self.guard.dir.display()
        )
    }

    /// Whether `key` is in `state`'s column family.
    fn contains(&self, cf: &rdb::ColumnFamily, key: &[u8]) -> bool {
        match self.db.get_pinned_cf_opt(cf, key, &self.read) {
            Ok(v) => v.is_some(),
            Err(e) => self.fail("get", &e),
        }
    }
}

impl Drop for RocksDbStateBackend {
    fn drop(&mut self) {
        if self.guard.keep {
            // Closing flushes the memtables (no WAL); the count spares the next open a
            // scan. Nothing to report an error to in drop.
            let _ = self.write_back();
            let _ = fs::write(self.guard.dir.join(LEN_FILE), self.len.to_string());
        } else {
            // The directory goes away: skip the flush on close.
            let _ = self
                .db
                .set_options(&[("avoid_flush_during_shutdown", "true")]);
        }
    }
}

impl KeyedStateBackend for RocksDbStateBackend {
    fn get(&self, state: &str, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        if let Some(p) = self.pending.get(state).and_then(|m| m.get(key)) {
            return p.value.as_deref().map(Cow::Borrowed);
        }
        let cf = self.db.cf_handle(state)?;
        match self.db.get_pinned_cf_opt(cf, key, &self.read) {
            Ok(v) => v.map(|v| Cow::Owned(v.to_vec())),
            Err(e) => self.fail("get", &e),
        }
    }

    fn put(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        self.write(state, key, Some(value), None);
    }

    fn insert_new(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        self.write(state, key, Some(value), Some(false));
    }

    fn delete(&mut self, state: &str, key: &[u8]) {
        self.write(state, key, None, None);
    }

    fn delete_existing(&mut self, state: &str, key: &[u8]) {
        self.write(state, key, None, Some(true));
    }

    fn scan_prefix(&self, state: &str, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        self.merged_scan(state, prefix, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()))
        });
        out
    }

    fn len(&self) -> usize {
        self.len
    }

    fn state_len(&self, state: &str) -> usize {
        let mut n = 0;
        self.merged_scan(state, &[], &mut |_, _| n += 1);
        n
    }

    fn for_each_entry(&self, f: &mut EntryVisitor<'_>) {
        let names: BTreeSet<&str> = self
            .states
            .iter()
            .chain(self.pending.keys())
            .map(String::as_str)
            .collect();
        for state in names {
            self.merged_scan(state, &[], &mut |k, v| f(state, k, v));
        }
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Serialized
    }

    fn snapshot_native(
        &mut self,
        storage: &SnapshotStorage,
        key_groups: KeyGroupRange,
    ) -> Result<Option<NativeKeyedState>, StateError> {
        self.native_checkpoint(storage, key_groups).map(Some)
    }

    fn restore_native(
        &mut self,
        states: &[NativeKeyedState],
        root: &Path,
        key_groups: KeyGroupRange,
    ) -> Result<bool, StateError> {
        let [state] = states else {
            return Ok(false);
        };
        let covers =
            state.key_groups.start <= key_groups.start && key_groups.end <= state.key_groups.end;
        if state.format != NATIVE_FORMAT || !covers || self.len > 0 || !self.pending.is_empty() {
            return Ok(false);
        }
        // The files become a new instance beside this (empty) one, which goes.
        let dir = self
            .guard
            .dir
            .with_extension(format!("r{}", new_instance_id()));
        let mut restored = Self::open_native(state, root, &dir, self.options.clone())?;
        restored.guard.keep = self.guard.keep;
        if state.key_groups == key_groups {
            // This subtask alone continues the state: its later checkpoints refer to
            // the restored files already in the shared directory.
            restored.inherited = state
                .files
                .iter()
                .filter(|(name, _)| name.ends_with(".sst"))
                .cloned()
                .collect();
        } else {
            restored.retain_key_groups(key_groups)?;
        }
        *self = restored;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(b""), None);
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
    }

    #[test]
    fn key_prefix_is_key_group_and_key() {
        let mut k = Vec::new();
        crate::backend::compose_key(&mut k, 7, b"mia", b"ns");
        assert_eq!(key_prefix(&k), &k[..9]);
        assert!(has_key_prefix(&k));
        assert!(has_key_prefix(&k[..9]));
        assert!(!has_key_prefix(&k[..8]));
        assert!(!has_key_prefix(b"ab"));
        assert!(!has_key_prefix(&[0, 0, 0xff, 0xff, 0xff, 0xff, 1]));
    }
}
