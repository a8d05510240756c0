//! Typed keyed state addressed by key and namespace, for operators on the hot path.
//!
//! A [`NamespacedTable`] maps `(key, namespace) -> value` for one named state, as
//! Flink's `StateTable`: window operators keep one entry per key and window (the window
//! is the namespace). Two implementations, chosen by [`namespaced_table`] from the
//! backend's [`BackendKind`]:
//!
//! - [`HeapTable`]: Rust values in a hash map `(key, namespace) -> value`, never
//!   serialized, looked up by `(&K, &N)` without cloning (as Flink's heap backend).
//!   Used for [`crate::MemoryStateBackend`].
//! - [`BytesTable`]: values encoded with bincode in any [`KeyedStateBackend`] under
//!   [`compose_key`] (`key group | key | namespace`), for byte stores such as RocksDB.
//!   The value last handed out is cached decoded and written back on the next access
//!   or on [`NamespacedTable::flush`].
//!
//! [`NamespaceMajorTable`] is heap state organised the other way round, `namespace ->
//! (key -> value)` with namespaces in order, for window operators whose windows fire
//! and are dropped whole (no per-entry timers).

use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

use brook_core::checkpoint::{NativeKeyedState, RestoredState, SnapshotStorage};
use brook_core::keys::{KeyGroup, KeyGroupRange};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::{compose_key, BackendKind, KeyedStateBackend};
use crate::{Result, StateError};

/// A typed map `(key, namespace) -> value` for one named state of an operator.
///
/// `key_group` is the key's key group (`brook_core::keys::key_group_for_key`); only
/// tables whose [`NamespacedTable::needs_key_group`] is true read it, so callers may
/// skip computing it (and pass 0) otherwise.
pub trait NamespacedTable<K, N, V>: Send + fmt::Debug {
    /// The value of `(key, ns)`, for reading or changing in place.
    ///
    /// # Errors
    /// [`StateError::Codec`] when a stored value cannot be decoded.
    fn get_mut(&mut self, key_group: KeyGroup, key: &K, ns: &N) -> Result<Option<&mut V>>;

    /// Sets the value of `(key, ns)` (replacing any) and returns it.
    ///
    /// # Errors
    /// As [`NamespacedTable::get_mut`].
    fn insert(&mut self, key_group: KeyGroup, key: &K, ns: &N, value: V) -> Result<&mut V>;

    /// Removes `(key, ns)`, returning its value.
    ///
    /// # Errors
    /// As [`NamespacedTable::get_mut`].
    fn remove(&mut self, key_group: KeyGroup, key: &K, ns: &N) -> Result<Option<V>>;

    /// Appends the namespaces that `key` has a value in to `out` (in no particular
    /// order).
    ///
    /// # Errors
    /// As [`NamespacedTable::get_mut`].
    fn namespaces(&mut self, key_group: KeyGroup, key: &K, out: &mut Vec<N>) -> Result<()>;

    /// Number of `(key, namespace)` entries.
    fn len(&self) -> usize;

    /// Whether the table has no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes back a value changed through [`NamespacedTable::get_mut`] or
    /// [`NamespacedTable::insert`] that is still cached (bytes tables; a no-op for heap
    /// tables). Call at the end of each batch, watermark and timer callback.
    ///
    /// # Errors
    /// [`StateError::Codec`] when the value cannot be encoded.
    fn flush(&mut self) -> Result<()>;

    /// Whether the `key_group` arguments are used (true for bytes tables).
    fn needs_key_group(&self) -> bool;

    /// Calls `f(key, namespace, value)` for every entry, in no particular order (for
    /// snapshots). Bytes tables write back their cached value first and decode each
    /// entry.
    ///
    /// # Errors
    /// As [`NamespacedTable::get_mut`].
    fn for_each_entry(&mut self, f: &mut dyn FnMut(&K, &N, &V)) -> Result<()>;

    /// Writes the table's backend as native files into `storage` (see
    /// [`KeyedStateBackend::snapshot_native`]); `None` for heap tables and backends
    /// without a native format, whose entries the caller writes itself.
    ///
    /// # Errors
    /// The backend's error when its snapshot fails.
    fn snapshot_native(
        &mut self,
        _storage: &SnapshotStorage,
        _key_groups: KeyGroupRange,
    ) -> Result<Option<NativeKeyedState>> {
        Ok(None)
    }

    /// Restores the native keyed state of `restored` into the table's backend;
    /// `false` for heap tables (the caller then decodes the entries with
    /// [`read_native_entries`]).
    ///
    /// # Errors
    /// As [`crate::snapshot::restore_native`].
    fn restore_native(&mut self, _restored: &RestoredState) -> Result<bool> {
        Ok(false)
    }
}

/// The table for state `name` over `backend`: a [`HeapTable`] when the backend's kind is
/// [`BackendKind::Heap`] (the backend then stays unused), else a [`BytesTable`].
pub fn namespaced_table<K, N, V>(
    name: &str,
    backend: Box<dyn KeyedStateBackend>,
) -> Box<dyn NamespacedTable<K, N, V>>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned + Send + 'static,
    V: Serialize + DeserializeOwned + Send + 'static,
{
    match backend.kind() {
        BackendKind::Heap => Box::new(HeapTable::new()),
        BackendKind::Serialized => Box::new(BytesTable::new(name, backend)),
    }
}

/// Looks up a `(K, N)` entry by reference: hashes as the tuple does (field by field).
struct Lookup<'a, K, N>(&'a K, &'a N);

impl<K: Hash, N: Hash> Hash for Lookup<'_, K, N> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
        self.1.hash(state);
    }
}

impl<K: Eq, N: Eq> hashbrown::Equivalent<(K, N)> for Lookup<'_, K, N> {
    fn equivalent(&self, key: &(K, N)) -> bool {
        *self.0 == key.0 && *self.1 == key.1
    }
}

/// A [`NamespacedTable`] of Rust values on the heap: one hash map `(key, namespace) ->
/// value`, looked up by reference (a key is cloned only when an entry is inserted),
/// nothing serialized. The namespaces of each key are indexed only once
/// [`NamespacedTable::namespaces`] is first called (merging windows), so tables that
/// never ask pay nothing for it.
pub struct HeapTable<K, N, V> {
    map: hashbrown::HashMap<(K, N), V>,
    names: Option<hashbrown::HashMap<K, Vec<N>>>,
}

impl<K, N, V> fmt::Debug for HeapTable<K, N, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapTable")
            .field("len", &self.map.len())
            .field("indexed", &self.names.is_some())
            .finish()
    }
}

impl<K, N, V> Default for HeapTable<K, N, V> {
    fn default() -> Self {
        HeapTable {
            map: hashbrown::HashMap::default(),
            names: None,
        }
    }
}

impl<K, N, V> HeapTable<K, N, V> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<K, N, V> NamespacedTable<K, N, V> for HeapTable<K, N, V>
where
    K: Hash + Eq + Clone + Send,
    N: Hash + Eq + Clone + Send,
    V: Send,
{
    #[inline]
    fn get_mut(&mut self, _kg: KeyGroup, key: &K, ns: &N) -> Result<Option<&mut V>> {
        Ok(self.map.get_mut(&Lookup(key, ns)))
    }

    fn insert(&mut self, _kg: KeyGroup, key: &K, ns: &N, value: V) -> Result<&mut V> {
        let v = match self.map.entry((key.clone(), ns.clone())) {
            hashbrown::hash_map::Entry::Occupied(o) => {
                let v = o.into_mut();
                *v = value;
                return Ok(v);
            }
            hashbrown::hash_map::Entry::Vacant(e) => e.insert(value),
        };
        if let Some(names) = &mut self.names {
            match names.get_mut(key) {
                Some(list) => list.push(ns.clone()),
                None => {
                    names.insert(key.clone(), vec![ns.clone()]);
                }
            }
        }
        Ok(v)
    }

    fn remove(&mut self, _kg: KeyGroup, key: &K, ns: &N) -> Result<Option<V>> {
        let old = self.map.remove(&Lookup(key, ns));
        if old.is_some() {
            if let Some(names) = &mut self.names {
                if let Some(list) = names.get_mut(key) {
                    list.retain(|n| n != ns);
                    if list.is_empty() {
                        names.remove(key);
                    }
                }
            }
        }
        Ok(old)
    }

    fn namespaces(&mut self, _kg: KeyGroup, key: &K, out: &mut Vec<N>) -> Result<()> {
        let map = &self.map;
        let names = self.names.get_or_insert_with(|| {
            let mut names: hashbrown::HashMap<K, Vec<N>> = hashbrown::HashMap::default();
            for (k, n) in map.keys() {
                names.entry(k.clone()).or_default().push(n.clone());
            }
            names
        });
        if let Some(list) = names.get(key) {
            out.extend(list.iter().cloned());
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn needs_key_group(&self) -> bool {
        false
    }

    fn for_each_entry(&mut self, f: &mut dyn FnMut(&K, &N, &V)) -> Result<()> {
        for ((k, n), v) in &self.map {
            f(k, n, v);
        }
        Ok(())
    }
}

/// A hash map with the hasher every heap table uses (hashbrown's default, foldhash):
/// for operators keeping typed state of their own on the heap.
pub type FastHashMap<K, V> = hashbrown::HashMap<K, V>;

/// One namespace of a [`NamespaceMajorTable`]: its entries `key -> value`.
struct NsMap<N, K, V> {
    ns: N,
    map: hashbrown::HashTable<(K, V)>,
}

/// Emptied per-namespace maps are kept for reuse up to this many entries of capacity
/// even when the table never held that many.
const SPARE_MIN_CAPACITY: usize = 1 << 16;

/// Heap state organised by namespace first: namespaces kept in order (`N: Ord`), each
/// with its own hash map `key -> value`, as a window operator keeps
/// `window -> (key -> accumulator)` when windows fire and are dropped whole, in order.
///
/// Records that arrive in namespace order mostly hit the namespace of the record before
/// (a cached position), so a lookup is one hash probe in a small map that stays in the
/// cache; dropping a namespace drops its map at once and keeps the memory for the next
/// one (no allocation per entry in the steady state). Keys are hashed once per record
/// ([`NamespaceMajorTable::hash_key`]) and cloned only when inserted. Entries are visible
/// per namespace and key ([`NamespaceMajorTable::iter`]), for snapshots by key group.
pub struct NamespaceMajorTable<N, K, V> {
    /// Namespaces in ascending order.
    spaces: VecDeque<NsMap<N, K, V>>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Emptied maps kept for new namespaces (their memory is already mapped: a table
    /// that drops and creates namespaces all the time allocates nothing).
    spare: Vec<hashbrown::HashTable<(K, V)>>,
    /// Total capacity of the spare maps, kept at most the largest number of entries
    /// the table held (or [`SPARE_MIN_CAPACITY`]).
    spare_capacity: usize,
    /// The largest number of entries held so far.
    peak_len: usize,
    /// Entries of the namespace created or dropped last: the capacity for a new map
    /// when there is no spare one.
    last_size: usize,
    len: usize,
    /// The position last found or inserted.
    hint: usize,
}

impl<N: fmt::Debug, K, V> fmt::Debug for NamespaceMajorTable<N, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceMajorTable")
            .field("namespaces", &self.spaces.len())
            .field("first", &self.spaces.front().map(|s| &s.ns))
            .field("len", &self.len)
            .finish()
    }
}

impl<N, K, V> Default for NamespaceMajorTable<N, K, V> {
    fn default() -> Self {
        NamespaceMajorTable {
            spaces: VecDeque::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            spare: Vec::new(),
            spare_capacity: 0,
            peak_len: 0,
            last_size: 0,
            len: 0,
            hint: 0,
        }
    }
}

impl<N, K, V> NamespaceMajorTable<N, K, V> {
    /// Number of `(namespace, key)` entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<N: Ord + Copy, K: Hash + Eq + Clone, V> NamespaceMajorTable<N, K, V> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hash of `key`, to pass to [`NamespaceMajorTable::get_or_insert_with`] (the
    /// same for every namespace).
    #[inline]
    pub fn hash_key(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of namespace `ns`, if it has a map.
    #[inline]
    pub fn find(&self, ns: &N) -> Option<usize> {
        self.spaces.binary_search_by(|s| s.ns.cmp(ns)).ok()
    }

    /// The position of namespace `ns`, adding an empty map for it when there is none.
    /// Positions stay valid until a namespace is added or removed.
    #[inline]
    pub fn namespace(&mut self, ns: N) -> usize {
        let h = self.hint;
        for i in [h, h.wrapping_sub(1), h + 1] {
            if let Some(s) = self.spaces.get(i) {
                if s.ns == ns {
                    self.hint = i;
                    return i;
                }
            }
        }
        let i = match self.spaces.binary_search_by(|s| s.ns.cmp(&ns)) {
            Ok(i) => i,
            Err(i) => {
                let map = match self.spare.pop() {
                    Some(m) => {
                        self.spare_capacity -= m.capacity();
                        m
                    }
                    None => hashbrown::HashTable::with_capacity(self.last_size),
                };
                self.spaces.insert(i, NsMap { ns, map });
                i
            }
        };
        self.hint = i;
        i
    }

    /// The value of `key` (whose [`NamespaceMajorTable::hash_key`] is `hash`) in the
    /// namespace at position `pos`, inserting `create()` (and a clone of the key) when
    /// there is none: one probe either way.
    ///
    /// # Panics
    /// When `pos` is not a position.
    #[inline]
    pub fn get_or_insert_with(
        &mut self,
        pos: usize,
        hash: u64,
        key: &K,
        create: impl FnOnce() -> V,
    ) -> &mut V {
        let hasher = &self.hasher;
        let map = &mut self.spaces[pos].map;
        match map.entry(hash, |e| e.0 == *key, |e| hasher.hash_one(&e.0)) {
            hashbrown::hash_table::Entry::Occupied(o) => &mut o.into_mut().1,
            hashbrown::hash_table::Entry::Vacant(v) => {
                self.len += 1;
                self.peak_len = self.peak_len.max(self.len);
                &mut v.insert((key.clone(), create())).into_mut().1
            }
        }
    }

    /// Number of namespaces with a map.
    pub fn namespace_count(&self) -> usize {
        self.spaces.len()
    }

    /// The namespace at position `pos`.
    pub fn namespace_at(&self, pos: usize) -> Option<&N> {
        self.spaces.get(pos).map(|s| &s.ns)
    }

    /// The first position whose namespace does not satisfy `pred` (namespaces are in
    /// order, so `pred` must hold for a prefix of them).
    pub fn partition_point(&self, mut pred: impl FnMut(&N) -> bool) -> usize {
        self.spaces.partition_point(|s| pred(&s.ns))
    }

    /// The entries of the namespace at position `pos` (in no particular order).
    pub fn entries_at(&self, pos: usize) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.spaces
            .get(pos)
            .into_iter()
            .flat_map(|s| s.map.iter().map(|(k, v)| (k, v)))
    }

    /// The first (smallest) namespace.
    pub fn first(&self) -> Option<&N> {
        self.spaces.front().map(|s| &s.ns)
    }

    /// Drops the first namespace and its entries (keeping the map's memory for reuse).
    pub fn remove_first(&mut self) -> Option<N> {
        let NsMap { ns, mut map } = self.spaces.pop_front()?;
        self.len -= map.len();
        self.last_size = map.len();
        self.hint = self.hint.saturating_sub(1);
        map.clear();
        if self.spare_capacity + map.capacity() <= self.peak_len.max(SPARE_MIN_CAPACITY) {
            self.spare_capacity += map.capacity();
            self.spare.push(map);
        }
        Some(ns)
    }

    /// Every entry as `(namespace, key, value)`, namespaces in order.
    pub fn iter(&self) -> impl Iterator<Item = (&N, &K, &V)> + '_ {
        self.spaces
            .iter()
            .flat_map(|s| s.map.iter().map(move |(k, v)| (&s.ns, k, v)))
    }
}

/// The decoded value of one entry, handed out and not yet written back.
struct Cached<V> {
    full_key: Vec<u8>,
    value: V,
    /// The backend does not hold the key (it was just looked up and not found): the
    /// write-back inserts without another existence check.
    new: bool,
}

/// A [`NamespacedTable`] over a byte-level [`KeyedStateBackend`]: each value is encoded
/// with bincode under `compose_key(key group, bincode(key), bincode(namespace))` in the
/// backend's state `name`.
pub struct BytesTable<K, N, V> {
    name: String,
    backend: Box<dyn KeyedStateBackend>,
    buf: Vec<u8>,
    key_bytes: Vec<u8>,
    ns_bytes: Vec<u8>,
    cached: Option<Cached<V>>,
    /// The full key last looked up and found missing in the backend (see
    /// [`Cached::new`]); cleared by any write.
    absent: Option<Vec<u8>>,
    len: usize,
    _types: PhantomData<fn() -> (K, N)>,
}

impl<K, N, V> fmt::Debug for BytesTable<K, N, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BytesTable")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<K, N, V> BytesTable<K, N, V>
where
    K: Serialize,
    N: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// The table of state `name` in `backend` (entries already there count).
    pub fn new(name: &str, backend: Box<dyn KeyedStateBackend>) -> Self {
        let len = backend.state_len(name);
        BytesTable {
            name: name.to_string(),
            backend,
            buf: Vec::new(),
            key_bytes: Vec::new(),
            ns_bytes: Vec::new(),
            cached: None,
            absent: None,
            len,
            _types: PhantomData,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &dyn KeyedStateBackend {
        self.backend.as_ref()
    }

    fn codec(&self, op: &'static str, source: bincode::Error) -> StateError {
        StateError::Codec {
            state: self.name.clone(),
            op,
            source,
        }
    }

    /// Composes the full key of `(key, ns)` into `self.buf`.
    fn compose(&mut self, kg: KeyGroup, key: &K, ns: &N) -> Result<()> {
        self.key_bytes.clear();
        if let Err(e) = bincode::serialize_into(&mut self.key_bytes, key) {
            return Err(self.codec("encode", e));
        }
        self.ns_bytes.clear();
        if let Err(e) = bincode::serialize_into(&mut self.ns_bytes, ns) {
            return Err(self.codec("encode", e));
        }
        compose_key(&mut self.buf, kg, &self.key_bytes, &self.ns_bytes);
        Ok(())
    }

    fn is_cached(&self) -> bool {
        self.cached.as_ref().is_some_and(|c| c.full_key == self.buf)
    }

    fn write_back(&mut self) -> Result<()> {
        if let Some(c) = self.cached.take() {
            let bytes = bincode::serialize(&c.value).map_err(|e| self.codec("encode", e))?;
            if c.new {
                self.backend.insert_new(&self.name, &c.full_key, bytes);
            } else {
                self.backend.put(&self.name, &c.full_key, bytes);
            }
        }
        Ok(())
    }

    fn cache(&mut self, value: V, new: bool) -> &mut V {
        let c = self.cached.insert(Cached {
            full_key: self.buf.clone(),
            value,
            new,
        });
        &mut c.value
    }

    /// Whether the last lookup found `self.buf` missing (and nothing wrote since).
    fn known_absent(&self) -> bool {
        self.absent.as_deref() == Some(self.buf.as_slice())
    }
}

/// The entries of table `name` in the native keyed state of `restored`, decoded, with
/// their key groups: for operators that keep the table on the heap and restore a
/// checkpoint taken on a byte backend (RocksDB).
///
/// # Errors
/// As [`crate::snapshot::restore_native`]; [`StateError::Codec`] for an entry that
/// does not decode.
pub fn read_native_entries<K, N, V>(
    name: &str,
    restored: &RestoredState,
) -> Result<Vec<(KeyGroup, K, N, V)>>
where
    K: DeserializeOwned,
    N: DeserializeOwned,
    V: DeserializeOwned,
{
    let mut bytes = crate::MemoryStateBackend::serialized();
    crate::snapshot::restore_native(restored, &mut bytes)?;
    let mut out = Vec::new();
    let mut failed = None;
    let codec = |source| StateError::Codec {
        state: name.to_string(),
        op: "decode",
        source,
    };
    for (full, value) in bytes.scan_prefix(name, &[]) {
        let decoded = (|| {
            let (k, n) = split_full_key(&full)
                .ok_or_else(|| Box::new(bincode::ErrorKind::Custom("short key".into())))?;
            // split_full_key read past the two key-group bytes.
            let kg = KeyGroup::from(u16::from_be_bytes([full[0], full[1]]));
            Ok::<_, bincode::Error>((
                kg,
                bincode::deserialize(k)?,
                bincode::deserialize(n)?,
                bincode::deserialize(&value)?,
            ))
        })();
        match decoded {
            Ok(e) => out.push(e),
            Err(e) => {
                failed = Some(codec(e));
                break;
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Splits a full key made by [`compose_key`] into its key and namespace bytes.
fn split_full_key(full: &[u8]) -> Option<(&[u8], &[u8])> {
    let len_at = |b: &[u8], at: usize| -> Option<usize> {
        let l: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_be_bytes(l) as usize)
    };
    let klen = len_at(full, 2)?;
    let key = full.get(6..6 + klen)?;
    let nlen = len_at(full, 6 + klen)?;
    let ns = full.get(10 + klen..10 + klen + nlen)?;
    Some((key, ns))
}

impl<K, N, V> NamespacedTable<K, N, V> for BytesTable<K, N, V>
where
    K: Serialize + DeserializeOwned + Send,
    N: Serialize + DeserializeOwned + Send,
    V: Serialize + DeserializeOwned + Send,
{
    fn get_mut(&mut self, kg: KeyGroup, key: &K, ns: &N) -> Result<Option<&mut V>> {
        self.compose(kg, key, ns)?;
        if !self.is_cached() {
            self.write_back()?;
            let value: V = match self.backend.get(&self.name, &self.buf) {
                None => {
                    self.absent = Some(std::mem::take(&mut self.absent).map_or_else(
                        || self.buf.clone(),
                        |mut a| {
                            a.clear();
                            a.extend_from_slice(&self.buf);
                            a
                        },
                    ));
                    return Ok(None);
                }
                Some(b) => match bincode::deserialize(&b) {
                    Ok(v) => v,
                    Err(e) => return Err(self.codec("decode", e)),
                },
            };
            self.cache(value, false);
        }
        Ok(self.cached.as_mut().map(|c| &mut c.value))
    }

    fn insert(&mut self, kg: KeyGroup, key: &K, ns: &N, value: V) -> Result<&mut V> {
        self.compose(kg, key, ns)?;
        let mut new = false;
        if !self.is_cached() {
            self.write_back()?;
            // A lookup that just missed spares the existence check, here and when
            // the value is written back.
            new = self.known_absent() || self.backend.get(&self.name, &self.buf).is_none();
            if new {
                self.len += 1;
            }
        }
        self.absent = None;
        Ok(self.cache(value, new))
    }

    fn remove(&mut self, kg: KeyGroup, key: &K, ns: &N) -> Result<Option<V>> {
        self.compose(kg, key, ns)?;
        self.absent = None;
        let (old, stored) = if self.is_cached() {
            match self.cached.take() {
                Some(c) => (Some(c.value), !c.new),
                None => (None, false),
            }
        } else {
            match self.backend.get(&self.name, &self.buf) {
                None => (None, false),
                Some(b) => match bincode::deserialize(&b) {
                    Ok(v) => (Some(v), true),
                    Err(e) => return Err(self.codec("decode", e)),
                },
            }
        };
        if stored {
            // Just read from the backend (or its cached copy was): it is there.
            self.backend.delete_existing(&self.name, &self.buf);
        }
        if old.is_some() {
            self.len -= 1;
        }
        Ok(old)
    }

    fn namespaces(&mut self, kg: KeyGroup, key: &K, out: &mut Vec<N>) -> Result<()> {
        self.write_back()?;
        self.key_bytes.clear();
        if let Err(e) = bincode::serialize_into(&mut self.key_bytes, key) {
            return Err(self.codec("encode", e));
        }
        compose_key(&mut self.buf, kg, &self.key_bytes, &[]);
        // Drop the empty namespace's length: what is left is `key group | key`.
        self.buf.truncate(self.buf.len() - 4);
        let ns_at = self.buf.len() + 4;
        for (k, _) in self.backend.scan_prefix(&self.name, &self.buf) {
            match bincode::deserialize(&k[ns_at..]) {
                Ok(ns) => out.push(ns),
                Err(e) => return Err(self.codec("decode", e)),
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.len
    }

    fn flush(&mut self) -> Result<()> {
        self.write_back()
    }

    fn snapshot_native(
        &mut self,
        storage: &SnapshotStorage,
        key_groups: KeyGroupRange,
    ) -> Result<Option<NativeKeyedState>> {
        self.write_back()?;
        self.backend.snapshot_native(storage, key_groups)
    }

    fn restore_native(&mut self, restored: &RestoredState) -> Result<bool> {
        self.write_back()?;
        self.absent = None;
        crate::snapshot::restore_native(restored, self.backend.as_mut())?;
        self.len = self.backend.state_len(&self.name);
        Ok(true)
    }

    fn needs_key_group(&self) -> bool {
        true
    }

    fn for_each_entry(&mut self, f: &mut dyn FnMut(&K, &N, &V)) -> Result<()> {
        self.write_back()?;
        let name = self.name.as_str();
        let mut failed: Option<bincode::Error> = None;
        self.backend.for_each_entry(&mut |state, full, value| {
            if state != name || failed.is_some() {
                return;
            }
            let decoded = split_full_key(full)
                .ok_or_else(|| {
                    Box::new(bincode::ErrorKind::Custom(
                        "a state key is not `key group | key | namespace`".into(),
                    ))
                })
                .and_then(|(k, n)| {
                    Ok((
                        bincode::deserialize::<K>(k)?,
                        bincode::deserialize::<N>(n)?,
                        bincode::deserialize::<V>(value)?,
                    ))
                });
            match decoded {
                Ok((k, n, v)) => f(&k, &n, &v),
                Err(e) => failed = Some(e),
            }
        });
        match failed {
            Some(e) => Err(self.codec("decode", e)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStateBackend;

    fn exercise(t: &mut dyn NamespacedTable<String, (i64, i64), u64>) {
        let (a, b) = ("a".to_string(), "ab".to_string());
        assert!(t.get_mut(1, &a, &(0, 10)).unwrap().is_none());
        *t.insert(1, &a, &(0, 10), 1).unwrap() += 1;
        t.insert(1, &a, &(10, 20), 5).unwrap();
        t.insert(2, &b, &(0, 10), 7).unwrap();
        *t.get_mut(2, &b, &(0, 10)).unwrap().unwrap() += 1;
        assert_eq!(t.len(), 3);
        assert_eq!(t.get_mut(1, &a, &(0, 10)).unwrap().copied(), Some(2));
        assert_eq!(t.get_mut(2, &b, &(0, 10)).unwrap().copied(), Some(8));
        let mut ns = Vec::new();
        t.namespaces(1, &a, &mut ns).unwrap();
        ns.sort();
        assert_eq!(ns, vec![(0, 10), (10, 20)]);
        assert_eq!(t.remove(1, &a, &(0, 10)).unwrap(), Some(2));
        assert_eq!(t.remove(1, &a, &(0, 10)).unwrap(), None);
        assert_eq!(t.len(), 2);
        // Growing past the short-vector form keeps every entry.
        for i in 0..20 {
            t.insert(3, &b, &(100 + i, 0), i as u64).unwrap();
        }
        for i in 0..20 {
            assert_eq!(
                t.get_mut(3, &b, &(100 + i, 0)).unwrap().copied(),
                Some(i as u64)
            );
        }
        t.insert(3, &b, &(100, 0), 99).unwrap();
        assert_eq!(t.len(), 22);
        // The value changed last is still cached in a bytes table: visited too.
        *t.get_mut(2, &b, &(0, 10)).unwrap().unwrap() += 1;
        let mut all = Vec::new();
        t.for_each_entry(&mut |k, n, v| all.push((k.clone(), *n, *v)))
            .unwrap();
        all.sort();
        assert_eq!(all.len(), 22);
        assert_eq!(all[0], (a.clone(), (10, 20), 5));
        assert_eq!(all[1], (b.clone(), (0, 10), 9));
        assert_eq!(all[2], (b.clone(), (100, 0), 99));
        t.flush().unwrap();
    }

    #[test]
    fn heap_table() {
        let mut t = HeapTable::new();
        exercise(&mut t);
        assert!(!NamespacedTable::<String, (i64, i64), u64>::needs_key_group(&t));
    }

    #[test]
    fn bytes_table_writes_back_to_the_backend() {
        let mut t: BytesTable<String, (i64, i64), u64> =
            BytesTable::new("w", Box::new(MemoryStateBackend::serialized()));
        exercise(&mut t);
        assert_eq!(t.backend().len(), 22);
        let t2: Box<dyn NamespacedTable<String, (i64, i64), u64>> =
            namespaced_table("w", Box::new(MemoryStateBackend::new()));
        assert!(!t2.needs_key_group());
        let t3: Box<dyn NamespacedTable<String, (i64, i64), u64>> =
            namespaced_table("w", Box::new(MemoryStateBackend::serialized()));
        assert!(t3.needs_key_group());
    }
}
