//! The byte-level keyed state backend.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Bound;

use std::path::Path;

use brook_core::checkpoint::{NativeKeyedState, SnapshotStorage};
use brook_core::keys::{KeyGroup, KeyGroupRange};

use crate::Result;

/// Builds the full key of an entry: `key group (2 bytes BE) | key length (4 bytes BE) |
/// key | namespace length (4 bytes BE) | namespace`. Big-endian key groups sort
/// numerically, so a key-group range is one contiguous key range; the length prefixes
/// keep key, namespace and (for map state) the user key after them apart.
pub fn compose_key(out: &mut Vec<u8>, kg: KeyGroup, key: &[u8], ns: &[u8]) {
    out.clear();
    out.extend_from_slice(&(kg as u16).to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(ns.len() as u32).to_be_bytes());
    out.extend_from_slice(ns);
}

/// How a backend keeps its entries; decides which [`crate::table`] implementation an
/// operator uses for typed, namespaced state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// In this process's memory: typed tables keep Rust values on the heap and never
    /// serialize (as Flink's heap state backend). [`MemoryStateBackend`] is one.
    Heap,
    /// Entries are bytes (for example in RocksDB): typed tables encode each value with
    /// bincode under [`compose_key`].
    Serialized,
}

/// Sees `(state, full key, value)` of each entry of a backend.
pub type EntryVisitor<'a> = dyn FnMut(&str, &[u8], &[u8]) + 'a;

/// A store of keyed state entries, one keyspace per named state.
///
/// Keys are composed with [`compose_key`]. Implementations: [`MemoryStateBackend`]
/// (here) and [`crate::RocksDbStateBackend`].
pub trait KeyedStateBackend: Send + Debug {
    /// The value of an entry: borrowed from the backend where it lives in memory
    /// ([`MemoryStateBackend`]), owned where it had to be read (RocksDB).
    fn get(&self, state: &str, key: &[u8]) -> Option<Cow<'_, [u8]>>;
    /// Sets an entry.
    fn put(&mut self, state: &str, key: &[u8], value: Vec<u8>);
    /// Sets an entry the caller knows is not there (it just looked it up): backends
    /// that check existence on every write (RocksDB, for its exact `len`) skip that.
    /// Default: [`KeyedStateBackend::put`].
    fn insert_new(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        self.put(state, key, value);
    }
    /// Removes an entry.
    fn delete(&mut self, state: &str, key: &[u8]);
    /// Removes an entry the caller knows is there (it just read it): backends that
    /// check existence on every write (RocksDB) skip that. Default:
    /// [`KeyedStateBackend::delete`].
    fn delete_existing(&mut self, state: &str, key: &[u8]) {
        self.delete(state, key);
    }
    /// Entries whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, state: &str, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)>;
    /// Number of entries over all states (for metrics and tests).
    fn len(&self) -> usize;
    /// Number of entries of one state. Default: a scan.
    fn state_len(&self, state: &str) -> usize {
        self.scan_prefix(state, &[]).len()
    }
    /// Calls `f(state, key, value)` for every entry (for snapshots; the key group is
    /// the key's first two bytes, see [`compose_key`]).
    fn for_each_entry(&self, f: &mut EntryVisitor<'_>);
    /// Whether the backend holds no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How entries are kept (default [`BackendKind::Serialized`]): with
    /// [`BackendKind::Heap`], typed tables bypass the byte store.
    fn kind(&self) -> BackendKind {
        BackendKind::Serialized
    }
    /// Writes every entry (of key groups `key_groups`, the subtask's) as files of the
    /// backend's own format into `storage`, sharing files that did not change since an
    /// earlier checkpoint. `None` (the default) when the backend has no such format;
    /// the caller then writes key-group blobs ([`crate::snapshot::snapshot_keyed`]).
    ///
    /// # Errors
    /// [`crate::StateError::RocksDb`] (or the backend's own) when files cannot be
    /// written.
    fn snapshot_native(
        &mut self,
        _storage: &SnapshotStorage,
        _key_groups: KeyGroupRange,
    ) -> Result<Option<NativeKeyedState>> {
        Ok(None)
    }
    /// Takes over `states` (files relative to `root`) as they are, if the backend can:
    /// it is empty, the files are of its format and cover `key_groups`. `false` (the
    /// default) when it cannot; the caller then reads the entries out of the files.
    ///
    /// # Errors
    /// When the files cannot be read or opened.
    fn restore_native(
        &mut self,
        _states: &[NativeKeyedState],
        _root: &Path,
        _key_groups: KeyGroupRange,
    ) -> Result<bool> {
        Ok(false)
    }
}

/// Keyed state in memory: one ordered map per state.
#[derive(Debug, Default)]
pub struct MemoryStateBackend {
    states: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Report [`BackendKind::Serialized`], so operators keep encoded state here as they
    /// would in RocksDB (for tests of that path).
    serialized: bool,
}

impl MemoryStateBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty backend that reports itself as a byte store
    /// ([`BackendKind::Serialized`]): operators then encode their state in it, as with
    /// RocksDB. For tests of that path without RocksDB.
    pub fn serialized() -> Self {
        MemoryStateBackend {
            serialized: true,
            ..Self::default()
        }
    }
}

impl KeyedStateBackend for MemoryStateBackend {
    fn get(&self, state: &str, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.states
            .get(state)?
            .get(key)
            .map(|v| Cow::Borrowed(v.as_slice()))
    }

    fn put(&mut self, state: &str, key: &[u8], value: Vec<u8>) {
        match self.states.get_mut(state) {
            Some(m) => {
                m.insert(key.to_vec(), value);
            }
            None => {
                self.states
                    .entry(state.to_string())
                    .or_default()
                    .insert(key.to_vec(), value);
            }
        }
    }

    fn delete(&mut self, state: &str, key: &[u8]) {
        if let Some(m) = self.states.get_mut(state) {
            m.remove(key);
        }
    }

    fn scan_prefix(&self, state: &str, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(m) = self.states.get(state) else {
            return Vec::new();
        };
        m.range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn len(&self) -> usize {
        self.states.values().map(BTreeMap::len).sum()
    }

    fn state_len(&self, state: &str) -> usize {
        self.states.get(state).map_or(0, BTreeMap::len)
    }

    fn for_each_entry(&self, f: &mut EntryVisitor<'_>) {
        for (name, m) in &self.states {
            for (k, v) in m {
                f(name, k, v);
            }
        }
    }

    fn kind(&self) -> BackendKind {
        if self.serialized {
            BackendKind::Serialized
        } else {
            BackendKind::Heap
        }
    }
}
