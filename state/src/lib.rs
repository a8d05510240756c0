//! Keyed state for brook operators.
//!
//! Owns (as the runtime grows, see issue 5): the `StateBackend` trait and its keyed
//! state handles (`ValueState`, `ListState`, `MapState`), the timer service, and
//! snapshots split by key group so state can be rescaled. RocksDB types stay inside this
//! crate's `rocksdb` module and never leak out.
//!
//! Must not know about: operators, the engine, the log or any connector.
