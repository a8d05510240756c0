//! Hot keys: the keys that receive the most records of a keyed operator, so that skew
//! names the key and not only the subtask.
//!
//! Every upstream subtask writing a key-partitioned edge counts a sample of the key
//! hashes it already computes for partitioning (one record in [`SAMPLE_EVERY`]) in a
//! Space-Saving summary of [`COUNTERS`] counters (Metwally, Agrawal, El Abbadi: "Efficient
//! Computation of Frequent and Top-k Elements in Data Streams", 2005). Its guarantee:
//! every key counted more than `total / COUNTERS` times is in the summary, and a
//! counter's `count` exceeds the key's true count by at most its `error`. A counter
//! learns its key's text (the key serialized as JSON, a string key as itself) the second
//! time the key is seen while counted, so tail keys that come and go cost no text.
//!
//! "The last minute" is two windows of [`WINDOW_MS`]: the summary shows the previous
//! window plus the current one (30 to 60 s of records). Writers publish their window to
//! the downstream vertex's [`HotKeyBoard`] about every [`PUBLISH_MS`] and at end of
//! input; the board merges the writers' figures when asked. Nothing here allocates per
//! record: counting is a scan of a fixed array; text and publishing happen per counter
//! or per second.

use std::sync::{Arc, Mutex};

use brook_core::keys::{key_group_for_hash, subtask_for_key_group};
use brook_core::time::{Millis, SharedClock};
use serde::{Deserialize, Serialize};

/// Counters per summary (per upstream subtask of a keyed edge): keys with more than
/// 1/32 of the sampled records are always reported.
pub const COUNTERS: usize = 32;
/// One record in this many is counted (with this weight).
pub const SAMPLE_EVERY: u32 = 8;
/// Length of one counting window (ms); the figures cover the last one or two.
pub const WINDOW_MS: Millis = 30_000;
/// How often a writer publishes its figures to the board (ms).
pub const PUBLISH_MS: Millis = 1_000;
/// Keys reported per operator.
pub const TOP: usize = 10;

/// One counter of a [`SpaceSaving`] summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The key's hash (as used for key groups).
    pub hash: u64,
    /// Records counted for it, an over-estimate by at most `error`.
    pub count: u64,
    /// The count the counter had when this key took it over.
    pub error: u64,
    /// The key's text, once learned.
    pub label: Option<String>,
}

/// A Space-Saving summary of key hashes with a fixed number of counters.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    counters: Vec<Counter>,
    capacity: usize,
    total: u64,
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            counters: Vec::with_capacity(capacity),
            capacity,
            total: 0,
        }
    }

    /// Counts `weight` records of the key with this hash. Returns the counter's index
    /// when the key was already counted and has no text yet: the caller may give it
    /// one with [`SpaceSaving::set_label`].
    #[inline]
    pub fn add(&mut self, hash: u64, weight: u64) -> Option<usize> {
        self.total += weight;
        if let Some(i) = self.counters.iter().position(|c| c.hash == hash) {
            let c = &mut self.counters[i];
            c.count += weight;
            return c.label.is_none().then_some(i);
        }
        if self.counters.len() < self.capacity {
            // Within the capacity reserved by `new`: no allocation.
            self.counters.push(Counter {
                hash,
                count: weight,
                error: 0,
                label: None,
            });
            return None;
        }
        // Full: the key takes over the smallest counter (Space-Saving's rule).
        let (i, min) = self
            .counters
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.count)
            .map(|(i, c)| (i, c.count))?;
        self.counters[i] = Counter {
            hash,
            count: min + weight,
            error: min,
            label: None,
        };
        None
    }

    /// Gives counter `i` its key's text.
    pub fn set_label(&mut self, i: usize, label: String) {
        if let Some(c) = self.counters.get_mut(i) {
            c.label = Some(label);
        }
    }

    /// The counters, in no order.
    pub fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// Records counted (with their weights).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every count (keeps the counters' memory).
    pub fn clear(&mut self) {
        self.counters.clear();
        self.total = 0;
    }
}

/// A hot key as reported: its text, the subtask owning it, its records and share of
/// the operator's records over the last minute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotKey {
    /// The key's text (the key as JSON, a string key as itself), or `#<hash>` while
    /// unknown.
    pub key: String,
    /// The subtask of the keyed operator that owns the key (by its key group).
    pub subtask: u32,
    /// Records of the key, estimated from the sample (an over-estimate by at most
    /// `error`).
    pub records: u64,
    /// Largest over-estimate of `records`.
    pub error: u64,
    /// `records` over all records of the operator in the same time (0 to 1).
    pub share: f64,
}

/// What one writer published: its keys (previous plus current window) and its total.
#[derive(Debug, Clone, Default, PartialEq)]
struct Published {
    keys: Vec<(u64, HotKey)>,
    total: u64,
}

/// The figures of one keyed vertex, published by the writers of its input edges.
#[derive(Debug, Default)]
pub struct HotKeyBoard {
    writers: Mutex<Vec<Published>>,
}

impl HotKeyBoard {
    /// A place for one more writer's figures; its index for [`HotKeyBoard::publish`].
    pub(crate) fn add_writer(&self) -> usize {
        let mut w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        w.push(Published::default());
        w.len() - 1
    }

    fn publish(&self, writer: usize, p: Published) {
        let mut w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = w.get_mut(writer) {
            *slot = p;
        }
    }

    /// Whether any writer counts keys for this vertex (it is keyed).
    pub fn is_keyed(&self) -> bool {
        !self
            .writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The `n` hottest keys over every writer, hottest first.
    pub fn top(&self, n: usize) -> Vec<HotKey> {
        let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        merge(&w, n)
    }
}

/// Sums the writers' figures per key and ranks them; shares are of the summed totals.
fn merge(writers: &[Published], n: usize) -> Vec<HotKey> {
    let total: u64 = writers.iter().map(|p| p.total).sum();
    let mut keys: Vec<(u64, HotKey)> = Vec::new();
    for (hash, k) in writers.iter().flat_map(|p| &p.keys) {
        match keys.iter_mut().find(|(h, _)| h == hash) {
            Some((_, m)) => {
                m.records += k.records;
                m.error += k.error;
                if m.key.starts_with('#') && !k.key.starts_with('#') {
                    m.key.clone_from(&k.key);
                }
            }
            None => keys.push((*hash, k.clone())),
        }
    }
    let mut keys: Vec<HotKey> = keys.into_iter().map(|(_, k)| k).collect();
    keys.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.key.cmp(&b.key)));
    keys.truncate(n);
    for k in &mut keys {
        k.share = if total == 0 {
            0.0
        } else {
            k.records as f64 / total as f64
        };
    }
    keys
}

/// Turns a record into its key's text.
pub(crate) type KeyLabel<T> = Arc<dyn Fn(&T) -> String + Send + Sync>;

/// The text of a key: a JSON string as itself, anything else as JSON.
pub fn key_text<K: Serialize + ?Sized>(key: &K) -> String {
    match serde_json::to_value(key) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => "?".to_string(),
    }
}

/// The hot-key counting of one writer of a keyed edge: samples records, rotates the
/// windows by the job's clock and publishes to the board.
pub(crate) struct HotKeyTracker<T> {
    current: SpaceSaving,
    previous: Vec<Counter>,
    previous_total: u64,
    window_start: Millis,
    published: Millis,
    countdown: u32,
    label: KeyLabel<T>,
    board: Arc<HotKeyBoard>,
    writer: usize,
    clock: SharedClock,
    max_parallelism: u32,
    parallelism: u32,
}

impl<T> HotKeyTracker<T> {
    pub(crate) fn new(
        label: KeyLabel<T>,
        board: Arc<HotKeyBoard>,
        clock: SharedClock,
        max_parallelism: u32,
        parallelism: u32,
    ) -> Self {
        let writer = board.add_writer();
        HotKeyTracker {
            current: SpaceSaving::new(COUNTERS),
            previous: Vec::with_capacity(COUNTERS),
            previous_total: 0,
            window_start: Millis::MIN,
            published: Millis::MIN,
            countdown: SAMPLE_EVERY,
            label,
            board,
            writer,
            clock,
            max_parallelism,
            parallelism,
        }
    }

    /// Whether the next record is sampled (counts it down); the caller then hashes it
    /// and calls [`HotKeyTracker::count`].
    #[inline]
    pub(crate) fn sample(&mut self) -> bool {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = SAMPLE_EVERY;
            true
        } else {
            false
        }
    }

    /// Counts a sampled record whose key hashes to `hash`.
    #[inline]
    pub(crate) fn count(&mut self, hash: u64, record: &T) {
        if let Some(i) = self.current.add(hash, u64::from(SAMPLE_EVERY)) {
            self.current.set_label(i, (self.label)(record));
        }
    }

    /// Once per batch: rotates the window and publishes when due.
    pub(crate) fn tick(&mut self) {
        let now = self.clock.now_ms();
        if self.window_start == Millis::MIN {
            self.window_start = now;
        }
        if now.saturating_sub(self.window_start) >= WINDOW_MS {
            self.previous.clear();
            self.previous.extend_from_slice(self.current.counters());
            self.previous_total = self.current.total();
            self.current.clear();
            self.window_start = now;
        }
        if now.saturating_sub(self.published) >= PUBLISH_MS {
            self.publish();
            self.published = now;
        }
    }

    /// Publishes the figures of the previous and the current window.
    pub(crate) fn publish(&self) {
        let mut keys: Vec<(u64, HotKey)> = Vec::with_capacity(2 * COUNTERS);
        for c in self.previous.iter().chain(self.current.counters()) {
            match keys.iter_mut().find(|(h, _)| *h == c.hash) {
                Some((_, k)) => {
                    k.records += c.count;
                    k.error += c.error;
                    if let (true, Some(l)) = (k.key.starts_with('#'), &c.label) {
                        k.key.clone_from(l);
                    }
                }
                None => {
                    let kg = key_group_for_hash(c.hash, self.max_parallelism);
                    keys.push((
                        c.hash,
                        HotKey {
                            key: c
                                .label
                                .clone()
                                .unwrap_or_else(|| format!("#{:016x}", c.hash)),
                            subtask: subtask_for_key_group(
                                self.max_parallelism,
                                self.parallelism,
                                kg,
                            ),
                            records: c.count,
                            error: c.error,
                            share: 0.0,
                        },
                    ));
                }
            }
        }
        let total = self.previous_total + self.current.total();
        self.board.publish(self.writer, Published { keys, total });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn exact(stream: &[u64]) -> HashMap<u64, u64> {
        let mut m = HashMap::new();
        for k in stream {
            *m.entry(*k).or_insert(0) += 1;
        }
        m
    }

    /// A skewed stream: a few heavy keys, each a fixed share, in a uniform tail; the
    /// heavy keys start after the tail filled the counters.
    fn skewed() -> impl Strategy<Value = Vec<u64>> {
        (
            prop::collection::vec((1u64..5, 5usize..30), 1..4),
            prop::collection::vec(100u64..10_000, 200..2_000),
            any::<u64>(),
            50usize..150,
        )
            .prop_map(|(heavy, tail, seed, start)| {
                let mut s = tail;
                for (key, every) in heavy {
                    let mut i = start + (seed as usize + key as usize) % every;
                    while i < s.len() {
                        s.insert(i, key);
                        i += every;
                    }
                }
                s
            })
    }

    proptest! {
        /// Space-Saving's guarantee against an exact count: every key above
        /// `total / counters` is reported, and no count is under the truth or over it
        /// by more than its error.
        #[test]
        fn heavy_hitters_are_always_reported(stream in skewed(), capacity in 4usize..40) {
            let mut s = SpaceSaving::new(capacity);
            for k in &stream {
                s.add(*k, 1);
            }
            let truth = exact(&stream);
            let total = stream.len() as u64;
            prop_assert_eq!(s.total(), total);
            for (key, n) in &truth {
                if *n > total / capacity as u64 {
                    prop_assert!(s.counters().iter().any(|c| c.hash == *key), "key {} with {} of {} missing", key, n, total);
                }
            }
            for c in s.counters() {
                let n = truth.get(&c.hash).copied().unwrap_or(0);
                prop_assert!(c.count >= n && c.count - c.error <= n, "{:?} truth {}", c, n);
            }
        }
    }

    #[test]
    fn labels_a_key_seen_twice_and_forgets_it_when_replaced() {
        let mut s = SpaceSaving::new(2);
        assert_eq!(s.add(1, 1), None);
        assert_eq!(s.add(1, 1), Some(0));
        s.set_label(0, "alice".into());
        assert_eq!(s.add(1, 1), None);
        s.add(2, 1);
        s.add(3, 1); // takes over key 2's counter (the smallest)
        let c3 = s.counters().iter().find(|c| c.hash == 3).cloned();
        assert_eq!(
            c3,
            Some(Counter {
                hash: 3,
                count: 2,
                error: 1,
                label: None
            })
        );
    }

    #[test]
    fn board_merges_writers_and_ranks_by_share() {
        let board = HotKeyBoard::default();
        let (a, b) = (board.add_writer(), board.add_writer());
        let key = |k: &str, records| HotKey {
            key: k.into(),
            subtask: 0,
            records,
            error: 0,
            share: 0.0,
        };
        board.publish(
            a,
            Published {
                keys: vec![(1, key("hot", 60)), (2, key("#2", 10))],
                total: 100,
            },
        );
        board.publish(
            b,
            Published {
                keys: vec![(1, key("#1", 20)), (2, key("cold", 30))],
                total: 100,
            },
        );
        let top = board.top(10);
        assert_eq!(top.len(), 2);
        assert_eq!((top[0].key.as_str(), top[0].records), ("hot", 80));
        assert!((top[0].share - 0.4).abs() < 1e-9);
        assert_eq!((top[1].key.as_str(), top[1].records), ("cold", 40));
        assert_eq!(board.top(1).len(), 1);
    }

    #[test]
    fn key_text_is_plain_for_strings() {
        assert_eq!(key_text("alice"), "alice");
        assert_eq!(key_text(&(1, "a")), "[1,\"a\"]");
    }
}
