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
/// One record in this many, on average, is counted (with this weight). The gaps
/// between counted records vary (1 to `2 * SAMPLE_EVERY - 1`, [`next_gap`]): a fixed
/// stride would see only one key of keys that arrive in a cycle of its length.
pub const SAMPLE_EVERY: u32 = 32;
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
///
/// Held as columns (hashes, counts, errors, labels) so that the two scans a counted
/// record may take (is its hash counted? which count is smallest?) read 32 packed
/// `u64`s each rather than 32 structs with their labels.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    hashes: Vec<u64>,
    counts: Vec<u64>,
    errors: Vec<u64>,
    labels: Vec<Option<String>>,
    capacity: usize,
    total: u64,
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            hashes: Vec::with_capacity(capacity),
            counts: Vec::with_capacity(capacity),
            errors: Vec::with_capacity(capacity),
            labels: Vec::with_capacity(capacity),
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
        // Branch-free scans (the compiler vectorizes them); an early exit does not pay
        // over 32 packed values, and most counted records of a skew-free stream miss.
        let hit = self
            .hashes
            .iter()
            .enumerate()
            .fold(usize::MAX, |at, (i, &h)| if h == hash { i } else { at });
        if let Some(c) = self.counts.get_mut(hit) {
            *c += weight;
            return self.labels[hit].is_none().then_some(hit);
        }
        if self.hashes.len() < self.capacity {
            // Within the capacity reserved by `new`: no allocation.
            self.hashes.push(hash);
            self.counts.push(weight);
            self.errors.push(0);
            self.labels.push(None);
            return None;
        }
        // Full: the key takes over the smallest counter (Space-Saving's rule).
        let min = self.counts.iter().copied().min()?;
        let i = self.counts.iter().position(|&c| c == min)?;
        self.hashes[i] = hash;
        self.counts[i] = min + weight;
        self.errors[i] = min;
        self.labels[i] = None;
        None
    }

    /// Gives counter `i` its key's text.
    pub fn set_label(&mut self, i: usize, label: String) {
        if let Some(l) = self.labels.get_mut(i) {
            *l = Some(label);
        }
    }

    /// The counters, in no order (built per call: for publishing, once a second).
    pub fn counters(&self) -> Vec<Counter> {
        (0..self.hashes.len())
            .map(|i| Counter {
                hash: self.hashes[i],
                count: self.counts[i],
                error: self.errors[i],
                label: self.labels[i].clone(),
            })
            .collect()
    }

    /// Records counted (with their weights).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every count (keeps the counters' memory).
    pub fn clear(&mut self) {
        self.hashes.clear();
        self.counts.clear();
        self.errors.clear();
        self.labels.clear();
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

/// The number of records until the next counted one: 1 to `2 * SAMPLE_EVERY - 1`,
/// `SAMPLE_EVERY` on average, from a xorshift64 generator whose state is `rng`
/// (Marsaglia, "Xorshift RNGs", 2003; a non-zero state stays non-zero).
fn next_gap(rng: &mut u64) -> u32 {
    let mut x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    // (The remainder is below 2 * SAMPLE_EVERY - 1, so it fits.)
    1 + (x % u64::from(2 * SAMPLE_EVERY - 1)) as u32
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
    /// The state of [`next_gap`]'s generator (never 0).
    rng: u64,
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
        // Any odd constant mixed with the writer: writers sample different records.
        let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (writer as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        if rng == 0 {
            rng = 1;
        }
        HotKeyTracker {
            current: SpaceSaving::new(COUNTERS),
            previous: Vec::with_capacity(COUNTERS),
            previous_total: 0,
            window_start: Millis::MIN,
            published: Millis::MIN,
            countdown: next_gap(&mut rng),
            rng,
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
            self.countdown = next_gap(&mut self.rng);
            true
        } else {
            false
        }
    }

    /// Counts the sampled records among `records` (the values `value` gives), hashing
    /// only those with `hash`: the batch is not walked record by record, the count
    /// jumps from one sampled record to the next.
    #[inline]
    pub(crate) fn count_sampled<R>(
        &mut self,
        records: &[R],
        value: impl Fn(&R) -> &T,
        hash: impl Fn(&T) -> u64,
    ) {
        let n = records.len();
        // `countdown` is at least 1: the next sampled record is `countdown - 1` on.
        let mut at = self.countdown as usize - 1;
        while let Some(r) = records.get(at) {
            let v = value(r);
            self.count(hash(v), v);
            at += next_gap(&mut self.rng) as usize;
        }
        // `at >= n` here, and less than `n` plus a gap: it fits.
        self.countdown = (at - n + 1) as u32;
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
            self.previous = self.current.counters();
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
        let current = self.current.counters();
        for c in self.previous.iter().chain(&current) {
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
    fn sampling_gaps_average_sample_every_and_do_not_repeat_a_cycle() {
        let mut rng = 0x9E37_79B9_7F4A_7C15;
        let gaps: Vec<u32> = (0..100_000).map(|_| next_gap(&mut rng)).collect();
        assert!(gaps.iter().all(|&g| (1..2 * SAMPLE_EVERY).contains(&g)));
        let mean = gaps.iter().map(|&g| f64::from(g)).sum::<f64>() / gaps.len() as f64;
        assert!(
            (mean - f64::from(SAMPLE_EVERY)).abs() < 0.1,
            "mean gap {mean}"
        );
        // Keys arriving in a cycle of SAMPLE_EVERY: every key is sampled about
        // equally (a fixed stride would count one key only).
        let mut seen = [0u32; SAMPLE_EVERY as usize];
        let mut at = 0u64;
        for g in gaps {
            at += u64::from(g);
            seen[(at % u64::from(SAMPLE_EVERY)) as usize] += 1;
        }
        let (lo, hi) = (seen.iter().min().copied(), seen.iter().max().copied());
        assert!(
            lo.zip(hi)
                .is_some_and(|(l, h)| f64::from(h) < 1.2 * f64::from(l)),
            "{seen:?}"
        );
    }

    #[test]
    fn counting_a_batch_samples_the_records_one_at_a_time_would() {
        let tracker = || {
            let label: KeyLabel<u64> = Arc::new(|k: &u64| k.to_string());
            let clock = brook_core::time::ManualClock::new(0);
            HotKeyTracker::new(
                label,
                Arc::new(HotKeyBoard::default()),
                clock.shared(),
                128,
                1,
            )
        };
        let (mut batched, mut single) = (tracker(), tracker());
        let records: Vec<u64> = (0..10_000).map(|i| i * 7 % 40).collect();
        let hash = |k: &u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Batches of 0 to 99 records, across which the gaps carry on.
        let mut rest = &records[..];
        let mut size = 0;
        while !rest.is_empty() {
            let (batch, after) = rest.split_at(size.min(rest.len()));
            batched.count_sampled(batch, |r| r, hash);
            rest = after;
            size = (size + 37) % 100;
        }
        for r in &records {
            if single.sample() {
                single.count(hash(r), r);
            }
        }
        assert!(batched.current.total() > 0);
        assert_eq!(batched.current.total(), single.current.total());
        let sorted = |t: &HotKeyTracker<u64>| {
            let mut c = t.current.counters();
            c.sort_by_key(|c| c.hash);
            c
        };
        assert_eq!(sorted(&batched), sorted(&single));
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
