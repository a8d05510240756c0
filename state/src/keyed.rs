//! Typed keyed state, scoped to the current key and namespace.

use std::marker::PhantomData;

use brook_core::keys::KeyGroup;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::{compose_key, KeyedStateBackend};
use crate::{Result, StateError};

/// Declares a piece of keyed state: its name (unique within the operator) and type.
#[derive(Debug)]
pub struct StateDescriptor<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> StateDescriptor<T> {
    /// A descriptor; usable in a `const`.
    pub const fn new(name: &'static str) -> Self {
        StateDescriptor {
            name,
            _type: PhantomData,
        }
    }

    /// The state's name.
    pub fn name(&self) -> &'static str {
        self.name
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
        }
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

    /// Reads the entry of state `name` under the current key and namespace.
    fn read<V: DeserializeOwned>(&mut self, name: &str) -> Result<Option<V>> {
        self.full_key(name)?;
        match self.backend.get(name, &self.buf) {
            Some(b) => decode(name, &b).map(Some),
            None => Ok(None),
        }
    }

    /// Writes the entry of state `name` under the current key and namespace.
    fn write<V: Serialize + ?Sized>(&mut self, name: &str, v: &V) -> Result<()> {
        let bytes = encode(name, v)?;
        self.full_key(name)?;
        self.backend.put(name, &self.buf, bytes);
        Ok(())
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
            _type: PhantomData,
        }
    }
}

/// A single value per key (Flink's `ValueState`).
#[derive(Debug)]
pub struct ValueState<'a, T> {
    store: &'a mut KeyedStateStore,
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ValueState<'_, T> {
    /// The value, if set.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Option<T>> {
        self.store.read(self.name)
    }

    /// Sets the value.
    ///
    /// # Errors
    /// As [`ValueState::get`].
    pub fn set(&mut self, v: &T) -> Result<()> {
        self.store.write(self.name, v)
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
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ListState<'_, T> {
    /// All values, in the order they were added.
    ///
    /// # Errors
    /// [`StateError::NoCurrentKey`], [`StateError::Codec`].
    pub fn get(&mut self) -> Result<Vec<T>> {
        Ok(self.store.read(self.name)?.unwrap_or_default())
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
        self.store.write(self.name, all)
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
        match self.store.backend.get(self.name, &self.store.buf) {
            Some(b) => decode(self.name, &b).map(Some),
            None => Ok(None),
        }
    }

    /// Sets the value under `k`.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn put(&mut self, k: &K, v: &V) -> Result<()> {
        let bytes = encode(self.name, v)?;
        self.entry_key(k)?;
        self.store.backend.put(self.name, &self.store.buf, bytes);
        Ok(())
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

    /// All entries, ordered by the encoded key.
    ///
    /// # Errors
    /// As [`MapState::get`].
    pub fn entries(&mut self) -> Result<Vec<(K, V)>> {
        self.store.full_key(self.name)?;
        let prefix_len = self.store.buf.len();
        let rows = self.store.backend.scan_prefix(self.name, &self.store.buf);
        rows.into_iter()
            .map(|(k, v)| Ok((decode(self.name, &k[prefix_len..])?, decode(self.name, &v)?)))
            .collect()
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
