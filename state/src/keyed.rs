//! Typed keyed state, scoped to the current key and namespace.

use std::marker::PhantomData;

use brook_core::keys::KeyGroup;
use brook_core::time::Millis;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::{compose_key, KeyedStateBackend};
use crate::{Result, StateError};

/// Declares a piece of keyed state: its name (unique within the operator), type, and
/// optional time to live.
#[derive(Debug)]
pub struct StateDescriptor<T> {
    name: &'static str,
    ttl: Option<StateTtl>,
    _type: PhantomData<fn() -> T>,
}

impl<T> StateDescriptor<T> {
    /// A descriptor; usable in a `const`.
    pub const fn new(name: &'static str) -> Self {
        StateDescriptor {
            name,
            ttl: None,
            _type: PhantomData,
        }
    }

    /// The same state with a time to live (Flink's `enableTimeToLive`).
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The state's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// Time to live of keyed state entries, in processing time, as Flink's
/// `StateTtlConfig`: an entry not written (or, with [`TtlUpdate::OnReadAndWrite`],
/// not read or written) for `ttl_ms` is expired: reads do not see it and remove it.
/// Entries of a list state or a value expire whole; map entries one by one. The
/// last-access time is stored with each entry, so it survives checkpoints.
///
/// Expired entries that are never read again stay until their key is read or the
/// state is cleared (Flink's default without a cleanup strategy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtl {
    /// Time to live (ms).
    pub ttl_ms: Millis,
    /// Which accesses renew an entry.
    pub update: TtlUpdate,
}

impl StateTtl {
    /// Expires entries `ttl_ms` after they were last written.
    pub const fn new(ttl_ms: Millis) -> Self {
        StateTtl {
            ttl_ms,
            update: TtlUpdate::OnCreateAndWrite,
        }
    }

    /// Reads renew entries too.
    pub const fn renew_on_read(mut self) -> Self {
        self.update = TtlUpdate::OnReadAndWrite;
        self
    }
}

/// Which accesses renew an entry's time to live (Flink's `StateTtlConfig.UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlUpdate {
    /// Writes only.
    OnCreateAndWrite,
    /// Reads and writes.
    OnReadAndWrite,
}

/// Declares a reducing state (Flink's `ReducingStateDescriptor`): values added to it
/// are combined with `reduce` into one.
#[derive(Debug)]
pub struct ReducingStateDescriptor<T> {
    state: StateDescriptor<T>,
    reduce: fn(T, T) -> T,
}

impl<T> ReducingStateDescriptor<T> {
    /// A descriptor; usable in a `const`.
    pub const fn new(name: &'static str, reduce: fn(T, T) -> T) -> Self {
        ReducingStateDescriptor {
            state: StateDescriptor::new(name),
            reduce,
        }
    }

    /// The same state with a time to live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.state = self.state.with_ttl(ttl);
        self
    }
}

/// Declares an aggregating state (Flink's `AggregatingStateDescriptor`): inputs are
/// folded into an accumulator (`create`, `add`), read out with `result`.
#[derive(Debug)]
pub struct AggregatingStateDescriptor<In, Acc, Out> {
    state: StateDescriptor<Acc>,
    create: fn() -> Acc,
    add: fn(Acc, &In) -> Acc,
    result: fn(&Acc) -> Out,
}

impl<In, Acc, Out> AggregatingStateDescriptor<In, Acc, Out> {
    /// A descriptor; usable in a `const`.
    pub const fn new(
        name: &'static str,
        create: fn() -> Acc,
        add: fn(Acc, &In) -> Acc,
        result: fn(&Acc) -> Out,
    ) -> Self {
        AggregatingStateDescriptor {
            state: StateDescriptor::new(name),
            create,
            add,
            result,
        }
    }

    /// The same state with a time to live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.state = self.state.with_ttl(ttl);
        self
    }
}

/// A backend scoped to the current key (and namespace), handing out typed states.
///
/// The runtime sets the current key before each record and timer; operators only see
/// the state of that key, as in Flink.
#[derive(Debug)]
pub struct KeyedStateStore {
    backend: Box<dyn KeyedStateBackend>,
    key: Vec<u8>,
    key_group: KeyGroup,
    has_key: bool,
    namespace: Vec<u8>,
    buf: Vec<u8>,
    /// Processing time (ms) for state time to live.
    now: Millis,
}

/// Bytes before a value with a time to live: its last access (ms, little endian).
const TTL_HEADER: usize = 8;

/// `bytes` behind a last-access time of `now`.
fn with_access_time(now: Millis, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(TTL_HEADER + bytes.len());
    v.extend_from_slice(&now.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

/// What a stored entry with a time to live holds now.
enum Lived<'a> {
    /// Alive: the value's bytes, and whether the access renews it.
    Alive(&'a [u8], bool),
    /// Expired (or damaged): to be removed.
    Expired,
}

fn check_ttl<'a>(ttl: &StateTtl, now: Millis, stored: &'a [u8]) -> Lived<'a> {
    let Some((at, value)) = stored.split_first_chunk::<TTL_HEADER>() else {
        return Lived::Expired;
    };
    let at = Millis::from_le_bytes(*at);
    if now.saturating_sub(at) >= ttl.ttl_ms {
        Lived::Expired
    } else {
        Lived::Alive(value, ttl.update == TtlUpdate::OnReadAndWrite && at != now)
    }
}

fn encode<T: Serialize + ?Sized>(state: &str, v: &T) -> Result<Vec<u8>> {
    bincode::serialize(v).map_err(|source| StateError::Codec {
        state: state.into(),
        op: "encode",
        source,
    })
}

fn decode<T: DeserializeOwned>(state: &str, b: &[u8]) -> Result<T> {
    bincode::deserialize(b).map_err(|source| StateError::Codec {
        state: state.into(),
        op: "decode",
        source,
    })
}

impl KeyedStateStore {
    /// A store over `backend`, with no current key.
    pub fn new(backend: Box<dyn KeyedStateBackend>) -> Self {
        KeyedStateStore {
            backend,
            key: Vec::new(),
            key_group: 0,
            has_key: false,
            namespace: Vec::new(),
            buf: Vec::new(),
            now: 0,
        }
    }

    /// Sets the processing time (ms) that state time to live is measured in; the
    /// runtime sets it before each record and timer.
    pub fn set_current_time(&mut self, now: Millis) {
        self.now = now;
    }

    /// Sets the current key (its encoded bytes and key group) and clears the namespace.
    pub fn set_current_key(&mut self, key_group: KeyGroup, key: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(key);
        self.key_group = key_group;
        self.has_key = true;
        self.namespace.clear();
    }

    /// The current key's encoded bytes.
    pub fn current_key(&self) -> Option<&[u8]> {
        self.has_key.then_some(self.key.as_slice())
    }

    /// The current key's key group.
    pub fn current_key_group(&self) -> KeyGroup {
        self.key_group
    }

    /// Sets the namespace (for example a window) for the following state accesses.
    pub fn set_namespace(&mut self, ns: &[u8]) {
        self.namespace.clear();
        self.namespace.extend_from_slice(ns);
    }

    /// The backend.
    pub fn backend(&self) -> &dyn KeyedStateBackend {
        self.backend.as_ref()
    }

    /// The backend, to restore into.
    pub fn backend_mut(&mut self) -> &mut dyn KeyedStateBackend {
        self.backend.as_mut()
    }

    fn full_key(&mut self, state: &str) -> Result<()> {
        if !self.has_key {
            return Err(StateError::NoCurrentKey(state.into()));
        }
        compose_key(&mut self.buf, self.key_group, &self.key, &self.namespace);
        Ok(())
    }

    /// Reads the entry at `self.buf` of state `name`: expired entries are removed and
    /// not returned; a read with [`TtlUpdate::OnReadAndWrite`] renews the entry.
    fn read_at<V: DeserializeOwned>(
        &mut self,
        name: &str,
        ttl: Option<StateTtl>,
    ) -> Result<Option<V>> {
        let Some(ttl) = ttl else {
            return match self.backend.get(name, &self.buf) {
                Some(b) => decode(name, &b).map(Some),
                None => Ok(None),
            };
        };
        let now = self.now;
        let (value, renew): (Option<V>, Option<Vec<u8>>) = {
            let Some(stored) = self.backend.get(name, &self.buf) else {
                return Ok(None);
            };
            match check_ttl(&ttl, now, &stored) {
                Lived::Alive(v, renew) => (
                    Some(decode(name, v)?),
                    renew.then(|| with_access_time(now, v)),
                ),
                Lived::Expired => (None, None),
            }
        };
        match value {
            None => {
                self.backend.delete(name, &self.buf);
                Ok(None)
            }
            Some(v) => {
                if let Some(renewed) = renew {
                    self.backend.put(name, &self.buf, renewed);
                }
                Ok(Some(v))
            }
        }
    }

    /// Writes `v` at `self.buf` of state `name` (with its access time under a TTL).
    fn write_at<V: Serialize + ?Sized>(
        &mut self,
        name: &str,
        ttl: Option<StateTtl>,
        v: &V,
    ) -> Result<()> {
        let bytes = encode(name, v)?;
        let stored = match ttl {
            Some(_) => with_access_time(self.now, &bytes),
            None => bytes,
        };
        self.backend.put(name, &self.buf, stored);
        Ok(())
    }

    /// Reads the entry of state `name` under the current key and namespace.
    fn read<V: DeserializeOwned>(
        &mut self,
        name: &str,
        ttl: Option<StateTtl>,
    ) -> Result<Option<V>> {
        self.full_key(name)?;
        self.read_at(name, ttl)
    }

    /// Writes the entry of state `name` under the current key and namespace.
    fn write<V: Serialize + ?Sized>(
        &mut self,
        name: &str,
        ttl: Option<StateTtl>,
        v: &V,
    ) -> Result<()> {
        self.full_key(name)?;
        self.write_at(name, ttl, v)
    }

    /// Removes the entry of state `name` under the current key and namespace.
    fn remove(&mut self, name: &str) -> Result<()> {
        self.full_key(name)?;
        self.backend.delete(name, &self.buf);
        Ok(())
    }

    /// The value state of the current key.
    pub fn value<T: Serialize + DeserializeOwned>(
        &mut self,
        d: &StateDescriptor<T>,
    ) -> ValueState<'_, T> {
        ValueState {
            store: self,
            name: d.name,
            ttl: d.ttl,
            _type: PhantomData,
        }
    }

    /// The list state of the current key.
    pub fn list<T: Serialize + DeserializeOwned>(
        &mut self,
        d: &StateDescriptor<Vec<T>>,
    ) -> ListState<'_, T> {
        ListState {
            store: self,
            name: d.name,
            ttl: d.ttl,
            _type: PhantomData,
        }
    }

    /// The map state of the current key.
    pub fn map<K, V>(&mut self, d: &StateDescriptor<(K, V)>) -> MapState<'_, K, V>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        MapState {
            store: self,
            name: d.name,
            ttl: d.ttl,
            _type: PhantomData,
        }
    }

    /// The reducing state of the current key.
    pub fn reducing<T: Serialize + DeserializeOwned>(
        &mut self,
        d: &ReducingStateDescriptor<T>,
    ) -> ReducingState<'_, T> {
        ReducingState {
            value: self.value(&d.state),
            reduce: d.reduce,
        }
    }

    /// The aggregating state of the current key.
    pub fn aggregating<In, Acc, Out>(
        &mut self,
        d: &AggregatingStateDescriptor<In, Acc, Out>,
    ) -> AggregatingState<'_, In, Acc, Out>
    where
        Acc: Serialize + DeserializeOwned,
    {
        AggregatingState {
            value: self.value(&d.state),
            create: d.create,
            add: d.add,
            result: d.result,
        }
    }
}

/// One value per key that values added to it are reduced into (Flink's
/// `ReducingState`).
#[derive(Debug)]
pub struct ReducingState<'a, T> {
    value: ValueState<'a, T>,
    reduce: fn(T, T) -> T,
}

impl<T: Serialize + DeserializeOwned> ReducingState<'_, T> {
    /// The reduced value, if any was added.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Option<T>> {
        self.value.get()
    }

    /// Reduces `v` into the value.
    ///
    /// # Errors
    /// As [`ReducingState::get`].
    pub fn add(&mut self, v: T) -> Result<()> {
        let next = match self.value.get()? {
            Some(old) => (self.reduce)(old, v),
            None => v,
        };
        self.value.set(&next)
    }

    /// Removes the value.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`].
    pub fn clear(&mut self) -> Result<()> {
        self.value.clear()
    }
}

/// An accumulator per key that inputs are added to (Flink's `AggregatingState`).
pub struct AggregatingState<'a, In, Acc, Out> {
    value: ValueState<'a, Acc>,
    create: fn() -> Acc,
    add: fn(Acc, &In) -> Acc,
    result: fn(&Acc) -> Out,
}

impl<In, Acc, Out> std::fmt::Debug for AggregatingState<'_, In, Acc, Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatingState")
            .field("name", &self.value.name)
            .finish_non_exhaustive()
    }
}

impl<In, Acc: Serialize + DeserializeOwned, Out> AggregatingState<'_, In, Acc, Out> {
    /// The result of the accumulator, if anything was added.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Option<Out>> {
        Ok(self.value.get()?.map(|acc| (self.result)(&acc)))
    }

    /// Adds `v` to the accumulator (created on the first add).
    ///
    /// # Errors
    /// As [`AggregatingState::get`].
    pub fn add(&mut self, v: &In) -> Result<()> {
        let acc = self.value.get()?.unwrap_or_else(self.create);
        self.value.set(&(self.add)(acc, v))
    }

    /// Removes the accumulator.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`].
    pub fn clear(&mut self) -> Result<()> {
        self.value.clear()
    }
}

/// A single value per key (Flink's `ValueState`).
#[derive(Debug)]
pub struct ValueState<'a, T> {
    store: &'a mut KeyedStateStore,
    name: &'static str,
    ttl: Option<StateTtl>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ValueState<'_, T> {
    /// The value, if set.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Option<T>> {
        self.store.read(self.name, self.ttl)
    }

    /// Sets the value.
    ///
    /// # Errors
    /// As [`ValueState::get`].
    pub fn set(&mut self, v: &T) -> Result<()> {
        self.store.write(self.name, self.ttl, v)
    }

    /// Removes the value.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`].
    pub fn clear(&mut self) -> Result<()> {
        self.store.remove(self.name)
    }
}

/// A list of values per key (Flink's `ListState`).
#[derive(Debug)]
pub struct ListState<'a, T> {
    store: &'a mut KeyedStateStore,
    name: &'static str,
    ttl: Option<StateTtl>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ListState<'_, T> {
    /// All values, in the order they were added.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Vec<T>> {
        Ok(self.store.read(self.name, self.ttl)?.unwrap_or_default())
    }

    /// Appends a value.
    ///
    /// # Errors
    /// As [`ListState::get`].
    pub fn add(&mut self, v: T) -> Result<()> {
        let mut all = self.get()?;
        all.push(v);
        self.update(&all)
    }

    /// Replaces all values.
    ///
    /// # Errors
    /// As [`ListState::get`].
    pub fn update(&mut self, all: &[T]) -> Result<()> {
        self.store.write(self.name, self.ttl, all)
    }

    /// Removes all values.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`].
    pub fn clear(&mut self) -> Result<()> {
        self.store.remove(self.name)
    }
}

/// A map per key (Flink's `MapState`); each entry is stored separately.
#[derive(Debug)]
pub struct MapState<'a, K, V> {
    store: &'a mut KeyedStateStore,
    name: &'static str,
    ttl: Option<StateTtl>,
    _type: PhantomData<fn() -> (K, V)>,
}

impl<K, V> MapState<'_, K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    fn entry_key(&mut self, k: &K) -> Result<()> {
        let kb = encode(self.name, k)?;
        self.store.full_key(self.name)?;
        self.store.buf.extend_from_slice(&kb);
        Ok(())
    }

    /// The value under `k`.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self, k: &K) -> Result<Option<V>> {
        self.entry_key(k)?;
        self.store.read_at(self.name, self.ttl)
    }

    /// Sets the value under `k`.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn put(&mut self, k: &K, v: &V) -> Result<()> {
        self.entry_key(k)?;
        self.store.write_at(self.name, self.ttl, v)
    }

    /// Removes the entry under `k`.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn remove(&mut self, k: &K) -> Result<()> {
        self.entry_key(k)?;
        self.store.backend.delete(self.name, &self.store.buf);
        Ok(())
    }

    /// All entries (alive ones, under a time to live), ordered by the encoded key.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn entries(&mut self) -> Result<Vec<(K, V)>> {
        self.store.full_key(self.name)?;
        let prefix_len = self.store.buf.len();
        let rows = self.store.backend.scan_prefix(self.name, &self.store.buf);
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let now = self.store.now;
            let value = match &self.ttl {
                None => &v[..],
                Some(ttl) => match check_ttl(ttl, now, &v) {
                    Lived::Alive(value, renew) => {
                        if renew {
                            let renewed = with_access_time(now, value);
                            self.store.backend.put(self.name, &k, renewed);
                        }
                        value
                    }
                    Lived::Expired => {
                        self.store.backend.delete(self.name, &k);
                        continue;
                    }
                },
            };
            out.push((
                decode(self.name, &k[prefix_len..])?,
                decode(self.name, value)?,
            ));
        }
        Ok(out)
    }

    /// Removes all entries.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn clear(&mut self) -> Result<()> {
        self.store.full_key(self.name)?;
        let rows = self.store.backend.scan_prefix(self.name, &self.store.buf);
        for (k, _) in rows {
            self.store.backend.delete(self.name, &k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStateBackend;

    const SUM: ReducingStateDescriptor<i64> = ReducingStateDescriptor::new("sum", |a, b| a + b);
    /// Average of the inputs: (sum, count) -> sum / count.
    const AVG: AggregatingStateDescriptor<i64, (i64, i64), f64> = AggregatingStateDescriptor::new(
        "avg",
        || (0, 0),
        |(s, n), v| (s + v, n + 1),
        |(s, n)| *s as f64 / *n as f64,
    );
    const LAST: StateDescriptor<String> = StateDescriptor::new("last").with_ttl(StateTtl::new(100));
    const TAGS: StateDescriptor<(String, u32)> =
        StateDescriptor::new("tags").with_ttl(StateTtl::new(100).renew_on_read());

    #[test]
    fn reducing_and_aggregating_state() {
        let mut s = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        s.set_current_key(1, b"k");
        assert_eq!(s.reducing(&SUM).get().unwrap(), None);
        for v in [3, 4, 5] {
            s.reducing(&SUM).add(v).unwrap();
            s.aggregating(&AVG).add(&v).unwrap();
        }
        assert_eq!(s.reducing(&SUM).get().unwrap(), Some(12));
        assert_eq!(s.aggregating(&AVG).get().unwrap(), Some(4.0));
        s.set_current_key(1, b"other");
        assert_eq!(s.aggregating(&AVG).get().unwrap(), None);
        s.set_current_key(1, b"k");
        s.reducing(&SUM).clear().unwrap();
        s.aggregating(&AVG).clear().unwrap();
        assert!(s.backend().is_empty());
    }

    #[test]
    fn entries_expire_after_their_time_to_live() {
        let mut s = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        s.set_current_key(1, b"k");
        s.set_current_time(1_000);
        s.value(&LAST).set(&"a".into()).unwrap();
        s.map(&TAGS).put(&"x".into(), &1).unwrap();
        s.map(&TAGS).put(&"y".into(), &2).unwrap();
        s.set_current_time(1_099);
        assert_eq!(s.value(&LAST).get().unwrap().as_deref(), Some("a"));
        // Reading renews map entries (renew_on_read), not the value.
        assert_eq!(s.map(&TAGS).get(&"x".into()).unwrap(), Some(1));
        s.set_current_time(1_100);
        assert_eq!(
            s.value(&LAST).get().unwrap(),
            None,
            "written at 1000, ttl 100"
        );
        assert_eq!(s.map(&TAGS).entries().unwrap(), vec![("x".to_string(), 1)]);
        s.set_current_time(1_199);
        assert_eq!(s.map(&TAGS).get(&"x".into()).unwrap(), Some(1));
        s.set_current_time(1_400);
        assert!(s.map(&TAGS).entries().unwrap().is_empty());
        assert!(
            s.backend().is_empty(),
            "expired entries are removed when read"
        );
        // A write renews.
        s.value(&LAST).set(&"b".into()).unwrap();
        s.set_current_time(1_450);
        assert_eq!(s.value(&LAST).get().unwrap().as_deref(), Some("b"));
    }

    const COUNT: StateDescriptor<u64> = StateDescriptor::new("count");
    const SEEN: StateDescriptor<Vec<String>> = StateDescriptor::new("seen");
    const PRICES: StateDescriptor<(String, i64)> = StateDescriptor::new("prices");

    #[test]
    fn state_is_scoped_by_key_and_namespace() {
        let mut s = KeyedStateStore::new(Box::new(MemoryStateBackend::new()));
        assert!(s.value(&COUNT).get().is_err(), "no current key");
        s.set_current_key(3, b"mia");
        s.value(&COUNT).set(&5).unwrap();
        s.list(&SEEN).add("apple".into()).unwrap();
        s.list(&SEEN).add("pear".into()).unwrap();
        s.map(&PRICES).put(&"apple".into(), &50).unwrap();
        s.map(&PRICES).put(&"pear".into(), &70).unwrap();
        s.set_current_key(3, b"leo");
        assert_eq!(s.value(&COUNT).get().unwrap(), None);
        assert!(s.map(&PRICES).entries().unwrap().is_empty());
        s.set_current_key(3, b"mia");
        assert_eq!(s.value(&COUNT).get().unwrap(), Some(5));
        assert_eq!(
            s.list(&SEEN).get().unwrap(),
            vec!["apple".to_string(), "pear".into()]
        );
        assert_eq!(s.map(&PRICES).get(&"pear".into()).unwrap(), Some(70));
        assert_eq!(s.map(&PRICES).entries().unwrap().len(), 2);
        s.set_namespace(b"w1");
        assert_eq!(s.value(&COUNT).get().unwrap(), None);
        s.set_namespace(b"");
        s.map(&PRICES).clear().unwrap();
        assert!(s.map(&PRICES).entries().unwrap().is_empty());
        s.value(&COUNT).clear().unwrap();
        s.list(&SEEN).clear().unwrap();
        assert!(s.backend().is_empty());
    }
}
