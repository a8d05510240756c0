//! One state test suite, run against every keyed state backend: `MemoryStateBackend`
//! (heap and serialized kinds) and `RocksDbStateBackend` (each test is generated once
//! per backend by `suite!`),
//! plus tests of what only RocksDB has (native checkpoints, its directory).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use brook_core::checkpoint::{RestoredState, SnapshotStorage, StateSnapshot};
use brook_core::keys::{key_group_range, KeyGroup};
use brook_state::backend::compose_key;
use brook_state::snapshot::{restore_keyed, snapshot_keyed};
use brook_state::{
    AggregatingStateDescriptor, BytesTable, KeyedStateBackend, KeyedStateStore, MemoryStateBackend,
    NamespacedTable, ReducingStateDescriptor, RocksDbOptions, RocksDbStateBackend, StateDescriptor,
    StateError, StateTtl, TimeDomain, Timer, TimerService,
};
use proptest::prelude::*;

type Make = fn() -> Box<dyn KeyedStateBackend>;

/// A fresh temporary directory path (not created). Backends remove theirs on drop;
/// tests that make other directories remove them.
fn fresh_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "brook-state-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn memory() -> Box<dyn KeyedStateBackend> {
    Box::new(MemoryStateBackend::new())
}

/// The memory backend reporting itself as a byte store (typed tables encode).
fn memory_serialized() -> Box<dyn KeyedStateBackend> {
    Box::new(MemoryStateBackend::serialized())
}

/// Small memory so tests do not reserve 256 MiB of cache each.
fn small() -> RocksDbOptions {
    RocksDbOptions::new()
        .memory_bytes(8 << 20)
        .write_buffer_bytes(1 << 20)
}

fn rocks_at(dir: &Path) -> RocksDbStateBackend {
    RocksDbStateBackend::open(dir, small()).unwrap()
}

fn rocks() -> Box<dyn KeyedStateBackend> {
    Box::new(rocks_at(&fresh_dir()))
}

fn key(kg: KeyGroup, k: &[u8], ns: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    compose_key(&mut out, kg, k, ns);
    out
}

fn entries(b: &dyn KeyedStateBackend) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    b.for_each_entry(&mut |s, k, v| out.push((s.to_string(), k.to_vec(), v.to_vec())));
    out
}

fn keys(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<&[u8]> {
    rows.iter().map(|(k, _)| k.as_slice()).collect()
}

// ---------------------------------------------------------------------------------
// The shared suite: each `fn name(make: Make)` runs once per backend.

fn put_get_delete(make: Make) {
    let mut b = make();
    assert!(b.is_empty());
    assert_eq!(b.get("s", b"k"), None, "unknown state");
    b.delete("s", b"k");
    b.put("s", b"k", b"v1".to_vec());
    b.put("s", b"k", b"v2".to_vec());
    b.put("t", b"k", b"other".to_vec());
    b.put("s", b"", b"empty key".to_vec());
    b.put("s", b"z", Vec::new());
    assert_eq!(b.get("s", b"k").as_deref(), Some(&b"v2"[..]));
    assert_eq!(b.get("t", b"k").as_deref(), Some(&b"other"[..]));
    assert_eq!(b.get("s", b"").as_deref(), Some(&b"empty key"[..]));
    assert_eq!(b.get("s", b"z").as_deref(), Some(&b""[..]), "empty value");
    assert_eq!(b.get("s", b"k2"), None);
    assert_eq!(b.len(), 4);
    b.delete("s", b"k");
    b.delete("s", b"k");
    b.delete("s", b"missing");
    assert_eq!(b.get("s", b"k"), None);
    assert_eq!(b.get("t", b"k").as_deref(), Some(&b"other"[..]));
    assert_eq!(b.len(), 3);
    for (s, k) in [("t", &b"k"[..]), ("s", b""), ("s", b"z")] {
        b.delete(s, k);
    }
    assert!(b.is_empty());
    assert!(entries(b.as_ref()).is_empty());
}

fn scan_prefix_boundaries(make: Make) {
    let mut b = make();
    let raw: [&[u8]; 8] = [
        b"a",
        b"ab",
        b"a\xff",
        b"a\xff\xff",
        b"b",
        b"",
        b"\xff",
        b"\xff\xff",
    ];
    for k in raw {
        b.put("raw", k, k.to_vec());
    }
    let rows = b.scan_prefix("raw", b"a");
    assert_eq!(keys(&rows), vec![&b"a"[..], b"ab", b"a\xff", b"a\xff\xff"]);
    assert!(rows.iter().all(|(k, v)| k == v));
    assert_eq!(
        keys(&b.scan_prefix("raw", b"a\xff")),
        vec![&b"a\xff"[..], b"a\xff\xff"]
    );
    assert_eq!(keys(&b.scan_prefix("raw", b"ab")), vec![&b"ab"[..]]);
    assert_eq!(
        keys(&b.scan_prefix("raw", b"\xff")),
        vec![&b"\xff"[..], b"\xff\xff"]
    );
    assert_eq!(
        keys(&b.scan_prefix("raw", b"\xff\xff")),
        vec![&b"\xff\xff"[..]]
    );
    assert!(b.scan_prefix("raw", b"c").is_empty());
    assert!(b.scan_prefix("raw", b"abc").is_empty());
    assert!(b.scan_prefix("other", b"").is_empty());
    assert_eq!(b.scan_prefix("raw", b"").len(), raw.len());

    // Composed keys: a key that is a byte prefix of another ("k" / "k2") is kept apart
    // by the length prefix; namespaces of one key are one prefix.
    for (kg, k, ns) in [
        (1, &b"k"[..], &b"n1"[..]),
        (1, b"k", b"n2"),
        (1, b"k", b""),
        (1, b"k2", b"n1"),
        (1, b"", b"n1"),
        (2, b"k", b"n1"),
        (256, b"k", b"n1"),
        (255, b"k", b"n1"),
        (127, b"k", b"n1"),
    ] {
        b.put("c", &key(kg, k, ns), vec![kg as u8]);
    }
    let key_prefix = |kg, k: &[u8]| {
        let mut p = key(kg, k, b"");
        p.truncate(p.len() - 4);
        p
    };
    let rows = b.scan_prefix("c", &key_prefix(1, b"k"));
    assert_eq!(
        keys(&rows),
        vec![
            &key(1, b"k", b"")[..],
            &key(1, b"k", b"n1"),
            &key(1, b"k", b"n2")
        ]
    );
    assert_eq!(b.scan_prefix("c", &key_prefix(1, b"k2")).len(), 1);
    assert_eq!(b.scan_prefix("c", &key_prefix(1, b"")).len(), 1);
    assert_eq!(
        keys(&b.scan_prefix("c", &key(1, b"k", b"n1"))),
        vec![&key(1, b"k", b"n1")[..]]
    );
    assert!(b.scan_prefix("c", &key_prefix(3, b"k")).is_empty());
    // Key groups are big-endian: group 256 is [1, 0], after group 255 and not in group 1.
    assert_eq!(b.scan_prefix("c", &1u16.to_be_bytes()).len(), 5);
    let rows = b.scan_prefix("c", &256u16.to_be_bytes());
    assert_eq!(keys(&rows), vec![&key(256, b"k", b"n1")[..]]);
    let groups: Vec<u8> = b.scan_prefix("c", b"").iter().map(|(_, v)| v[0]).collect();
    assert_eq!(groups, vec![1, 1, 1, 1, 1, 2, 127, 255, 0]);
}

fn for_each_entry_in_order(make: Make) {
    let mut b = make();
    for (s, k) in [
        ("b", &b"2"[..]),
        ("a", b"9"),
        ("b", b"1"),
        ("ab", b"0"),
        ("a", b"10"),
    ] {
        b.put(s, k, k.to_vec());
    }
    b.put("c", b"gone", Vec::new());
    b.delete("c", b"gone");
    let seen: Vec<(String, Vec<u8>)> = entries(b.as_ref())
        .into_iter()
        .map(|(s, k, _)| (s, k))
        .collect();
    let want: Vec<(String, Vec<u8>)> =
        [("a", "10"), ("a", "9"), ("ab", "0"), ("b", "1"), ("b", "2")]
            .iter()
            .map(|(s, k)| (s.to_string(), k.as_bytes().to_vec()))
            .collect();
    assert_eq!(seen, want);
}

const COUNT: StateDescriptor<u64> = StateDescriptor::new("count");
const SEEN: StateDescriptor<Vec<String>> = StateDescriptor::new("seen");
const PRICES: StateDescriptor<(String, i64)> = StateDescriptor::new("prices");

fn typed_states(make: Make) {
    let mut s = KeyedStateStore::new(make());
    assert!(matches!(
        s.value(&COUNT).get(),
        Err(StateError::NoCurrentKey(_))
    ));
    s.set_current_key(3, b"mia");
    s.value(&COUNT).set(&5).unwrap();
    s.list(&SEEN).add("apple".into()).unwrap();
    s.list(&SEEN).add("pear".into()).unwrap();
    for (item, price) in [("pear", 70), ("apple", 50), ("fig", 90)] {
        s.map(&PRICES).put(&item.into(), &price).unwrap();
    }
    s.map(&PRICES).remove(&"fig".into()).unwrap();
    // Another key whose bytes extend "mia", and another key group.
    s.set_current_key(3, b"miab");
    s.value(&COUNT).set(&1).unwrap();
    s.map(&PRICES).put(&"kiwi".into(), &10).unwrap();
    s.set_current_key(4, b"mia");
    assert_eq!(s.value(&COUNT).get().unwrap(), None);
    assert!(s.map(&PRICES).entries().unwrap().is_empty());

    s.set_current_key(3, b"mia");
    assert_eq!(s.value(&COUNT).get().unwrap(), Some(5));
    assert_eq!(
        s.list(&SEEN).get().unwrap(),
        vec!["apple".to_string(), "pear".into()]
    );
    assert_eq!(s.map(&PRICES).get(&"pear".into()).unwrap(), Some(70));
    assert_eq!(s.map(&PRICES).get(&"fig".into()).unwrap(), None);
    // Ordered by the encoded key (bincode: length first, then bytes).
    assert_eq!(
        s.map(&PRICES).entries().unwrap(),
        vec![("pear".to_string(), 70), ("apple".to_string(), 50)]
    );
    s.set_namespace(b"w1");
    assert_eq!(s.value(&COUNT).get().unwrap(), None);
    s.value(&COUNT).set(&7).unwrap();
    s.set_namespace(b"");
    assert_eq!(s.value(&COUNT).get().unwrap(), Some(5));
    assert_eq!(s.backend().len(), 7);

    s.map(&PRICES).clear().unwrap();
    assert!(s.map(&PRICES).entries().unwrap().is_empty());
    s.value(&COUNT).clear().unwrap();
    s.list(&SEEN).clear().unwrap();
    s.set_namespace(b"w1");
    s.value(&COUNT).clear().unwrap();
    s.set_current_key(3, b"miab");
    assert_eq!(
        s.map(&PRICES).entries().unwrap(),
        vec![("kiwi".to_string(), 10)]
    );
    s.map(&PRICES).clear().unwrap();
    s.value(&COUNT).clear().unwrap();
    assert!(s.backend().is_empty());
}

fn bytes_table(make: Make) {
    let mut t: BytesTable<String, (i64, i64), u64> = BytesTable::new("w", make());
    let (a, ab) = ("a".to_string(), "ab".to_string());
    assert!(t.get_mut(1, &a, &(0, 10)).unwrap().is_none());
    *t.insert(1, &a, &(0, 10), 1).unwrap() += 1;
    t.insert(1, &a, &(10, 20), 5).unwrap();
    t.insert(1, &ab, &(0, 10), 7).unwrap();
    t.insert(300, &a, &(0, 10), 9).unwrap();
    *t.get_mut(1, &ab, &(0, 10)).unwrap().unwrap() += 1;
    assert_eq!(t.len(), 4);
    assert_eq!(t.get_mut(1, &a, &(0, 10)).unwrap().copied(), Some(2));
    assert_eq!(t.get_mut(1, &ab, &(0, 10)).unwrap().copied(), Some(8));
    let mut ns = Vec::new();
    t.namespaces(1, &a, &mut ns).unwrap();
    ns.sort();
    assert_eq!(ns, vec![(0, 10), (10, 20)]);
    assert_eq!(t.remove(1, &a, &(0, 10)).unwrap(), Some(2));
    assert_eq!(t.remove(1, &a, &(0, 10)).unwrap(), None);
    assert_eq!(t.len(), 3);
    for i in 0..50 {
        t.insert(2, &ab, &(100 + i, 0), i as u64).unwrap();
    }
    for i in 0..50 {
        assert_eq!(
            t.get_mut(2, &ab, &(100 + i, 0)).unwrap().copied(),
            Some(i as u64)
        );
    }
    t.flush().unwrap();
    assert_eq!(t.len(), 53);
    assert_eq!(t.backend().len(), 53);
    let groups: Vec<u16> = t
        .backend()
        .scan_prefix("w", b"")
        .iter()
        .map(|(k, _)| u16::from_be_bytes([k[0], k[1]]))
        .collect();
    assert!(groups.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(groups.last(), Some(&300));
}

/// Fills a backend with one entry per key group in two states, snapshots it with one
/// timer per key group, and restores it into three backends (another parallelism) of
/// both kinds.
fn snapshot_restore_at_another_parallelism(make: Make) {
    let mut b = make();
    let mut t = TimerService::new();
    for kg in 0..128u32 {
        b.put("count", &key(kg, &[kg as u8], b"ns"), vec![kg as u8; 3]);
        if kg % 2 == 0 {
            b.put("list", &key(kg, b"k", b""), vec![kg as u8]);
        }
        t.register(
            TimeDomain::EventTime,
            Timer {
                timestamp: i64::from(kg),
                key_group: kg,
                key: vec![kg as u8],
                namespace: Vec::new(),
            },
        );
    }
    let mut snap = StateSnapshot::new();
    snapshot_keyed(b.as_mut(), &t, &mut snap, key_group_range(128, 1, 0)).unwrap();
    for into in [memory as Make, rocks as Make] {
        let mut restored = Vec::new();
        for i in 0..3 {
            let range = key_group_range(128, 3, i);
            let r = RestoredState::collect([&snap], range);
            let (mut b2, mut t2) = (into(), TimerService::new());
            restore_keyed(&r, b2.as_mut(), &mut t2).unwrap();
            for (_, k, v) in entries(b2.as_ref()) {
                let kg = u32::from(u16::from_be_bytes([k[0], k[1]]));
                assert!(range.contains(kg), "key group {kg} outside {range:?}");
                assert_eq!(u32::from(v[0]), kg);
            }
            assert_eq!(t2.len(TimeDomain::EventTime), range.len() as usize);
            restored.extend(entries(b2.as_ref()));
        }
        restored.sort();
        let mut all = entries(b.as_ref());
        all.sort();
        assert_eq!(restored, all);
        assert_eq!(all.len(), 128 + 64);
    }
}

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $test() { super::$test(super::memory) })*
        }
        mod memory_serialized {
            $(#[test] fn $test() { super::$test(super::memory_serialized) })*
        }
        mod rocksdb {
            $(#[test] fn $test() { super::$test(super::rocks) })*
        }
    };
}

/// Reducing and aggregating state, and time to live, on each backend.
fn reducing_aggregating_and_ttl(make: Make) {
    const SUM: ReducingStateDescriptor<u64> = ReducingStateDescriptor::new("sum", |a, b| a + b);
    const MAX: AggregatingStateDescriptor<u64, Option<u64>, u64> = AggregatingStateDescriptor::new(
        "max",
        || None,
        |m, v| Some(m.map_or(*v, |m| m.max(*v))),
        |m| m.unwrap_or(0),
    );
    const SEEN: StateDescriptor<(u64, bool)> =
        StateDescriptor::new("seen").with_ttl(StateTtl::new(1_000));
    let mut s = KeyedStateStore::new(make());
    for k in 0..50u64 {
        s.set_current_key(k as KeyGroup % 128, &k.to_be_bytes());
        s.set_current_time(k as i64 * 100);
        for v in 0..=k {
            s.reducing(&SUM).add(v).unwrap();
            s.aggregating(&MAX).add(&(v * 7 % 50)).unwrap();
        }
        s.map(&SEEN).put(&k, &true).unwrap();
    }
    // At 5,000 ms, keys written before 4,001 ms (k <= 40) have expired.
    s.set_current_time(5_000);
    for k in 0..50u64 {
        s.set_current_key(k as KeyGroup % 128, &k.to_be_bytes());
        assert_eq!(s.reducing(&SUM).get().unwrap(), Some(k * (k + 1) / 2));
        let max = (0..=k).map(|v| v * 7 % 50).max().unwrap();
        assert_eq!(s.aggregating(&MAX).get().unwrap(), Some(max));
        let seen = s.map(&SEEN).get(&k).unwrap();
        assert_eq!(seen.is_some(), k > 40, "key {k}");
    }
    assert_eq!(
        s.backend().state_len("seen"),
        9,
        "expired entries were removed"
    );
}

suite!(
    put_get_delete,
    scan_prefix_boundaries,
    for_each_entry_in_order,
    typed_states,
    reducing_aggregating_and_ttl,
    bytes_table,
    snapshot_restore_at_another_parallelism,
);

// ---------------------------------------------------------------------------------
// Model test: random operations against a BTreeMap.

#[derive(Debug, Clone)]
enum Op {
    Put(usize, Vec<u8>, u8),
    Delete(usize, Vec<u8>),
    Get(usize, Vec<u8>),
    Scan(usize, Vec<u8>),
    /// Memtables to SST files (RocksDB), so reads and scans also go through SST files
    /// with their bloom and prefix filters.
    Flush,
}

const STATES: [&str; 3] = ["a", "b", "default"];

/// Keys from a small alphabet (so prefixes and overwrites are common), raw or composed.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    let raw = prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xff]), 0..4);
    let composed =
        (0u32..3, raw.clone(), raw.clone()).prop_map(|(kg, k, ns)| key(kg * 255, &k, &ns));
    prop_oneof![raw, composed]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let s = 0..STATES.len();
    prop_oneof![
        3 => (s.clone(), key_strategy(), any::<u8>()).prop_map(|(s, k, v)| Op::Put(s, k, v)),
        2 => (s.clone(), key_strategy()).prop_map(|(s, k)| Op::Delete(s, k)),
        2 => (s.clone(), key_strategy()).prop_map(|(s, k)| Op::Get(s, k)),
        // Scan prefixes: any key's prefix, including a composed key cut anywhere.
        2 => (s, key_strategy(), 0usize..12).prop_map(|(s, mut k, cut)| {
            k.truncate(cut);
            Op::Scan(s, k)
        }),
        1 => Just(Op::Flush),
    ]
}

fn check_against_model<B: KeyedStateBackend>(
    b: &mut B,
    ops: &[Op],
    flush: impl Fn(&mut B),
) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<(&str, Vec<u8>), Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(s, k, v) => {
                b.put(STATES[*s], k, vec![*v; usize::from(*v % 5)]);
                model.insert((STATES[*s], k.clone()), vec![*v; usize::from(*v % 5)]);
            }
            Op::Delete(s, k) => {
                // `delete_existing` where the caller knows the key is there.
                if model.contains_key(&(STATES[*s], k.clone())) && k.len() % 2 == 0 {
                    b.delete_existing(STATES[*s], k);
                } else {
                    b.delete(STATES[*s], k);
                }
                model.remove(&(STATES[*s], k.clone()));
            }
            Op::Get(s, k) => {
                let got = b.get(STATES[*s], k).map(|v| v.into_owned());
                prop_assert_eq!(got.as_ref(), model.get(&(STATES[*s], k.clone())));
            }
            Op::Scan(s, p) => {
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range((STATES[*s], p.clone())..)
                    .take_while(|((st, k), _)| *st == STATES[*s] && k.starts_with(p))
                    .map(|((_, k), v)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(b.scan_prefix(STATES[*s], p), want);
            }
            Op::Flush => flush(b),
        }
        prop_assert_eq!(b.len(), model.len());
    }
    for state in STATES {
        let n = model.keys().filter(|(s, _)| *s == state).count();
        prop_assert_eq!(b.state_len(state), n);
    }
    let want: Vec<(String, Vec<u8>, Vec<u8>)> = model
        .into_iter()
        .map(|((s, k), v)| (s.to_string(), k, v))
        .collect();
    prop_assert_eq!(entries(&*b), want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn memory_matches_a_btreemap(ops in prop::collection::vec(op_strategy(), 0..200)) {
        check_against_model(&mut MemoryStateBackend::new(), &ops, |_| {})?;
    }

    #[test]
    fn rocksdb_matches_a_btreemap(ops in prop::collection::vec(op_strategy(), 0..200)) {
        let mut b = rocks_at(&fresh_dir());
        check_against_model(&mut b, &ops, |b| b.flush().unwrap())?;
    }

    /// A write-back cache of a few entries: writes reach RocksDB in many small
    /// batches, and reads and scans merge cache and store at every step.
    #[test]
    fn rocksdb_with_a_tiny_write_cache_matches_a_btreemap(
        ops in prop::collection::vec(op_strategy(), 0..200)
    ) {
        let opts = small().write_cache_bytes(300);
        let mut b = RocksDbStateBackend::open(&fresh_dir(), opts).unwrap();
        check_against_model(&mut b, &ops, |b| b.flush().unwrap())?;
    }

    #[test]
    fn rocksdb_without_write_cache_matches_a_btreemap(
        ops in prop::collection::vec(op_strategy(), 0..200)
    ) {
        let opts = small().write_cache_bytes(0);
        let mut b = RocksDbStateBackend::open(&fresh_dir(), opts).unwrap();
        check_against_model(&mut b, &ops, |b| b.flush().unwrap())?;
    }
}

// ---------------------------------------------------------------------------------
// RocksDB only: its directory, native checkpoints, reopening.

fn fill(b: &mut dyn KeyedStateBackend, range: std::ops::Range<u32>) {
    for i in range {
        b.put(
            "count",
            &key(i % 128, &i.to_be_bytes(), b""),
            i.to_le_bytes().to_vec(),
        );
    }
}

fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

fn ssts(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                inode(&p),
            )
        })
        .collect()
}

/// Blocks of SST files that compaction made obsolete leave the block cache (RocksDB's
/// `uncache_aggressiveness`): with RocksDB's default the cache of a job that overwrote
/// the same keys and flushed at every checkpoint grew by each flush's blocks until it
/// was full, 256 MiB for 1000 keys (benches/README.md, "Soak").
#[test]
fn rocksdb_blocks_of_compacted_files_leave_the_block_cache() {
    let options = RocksDbOptions::new()
        .memory_bytes(64 << 20)
        .write_buffer_bytes(1 << 20);
    let mut b = RocksDbStateBackend::open(&fresh_dir(), options.clone()).unwrap();
    // 2000 keys of 256 bytes that LZ4 cannot shrink: about 0.5 MB live, rewritten by
    // every round, as a window's accumulators are.
    let value = |i: u32, round: u32| -> Vec<u8> {
        let mut x = u64::from(i) << 32 | u64::from(round) | 1;
        (0..256)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let k = |i: u32| key(i % 128, &i.to_be_bytes(), b"");
    let live = 2000 * 256;
    let rounds = 40;
    for round in 0..rounds {
        for i in 0..2000 {
            b.put("acc", &k(i), value(i, round));
        }
        b.flush().unwrap();
        // Reads load the new file's blocks into the cache.
        for i in (0..2000).step_by(7) {
            assert_eq!(b.get("acc", &k(i)).unwrap().as_ref(), value(i, round));
        }
    }
    // Compaction runs in the background: the obsolete files' blocks leave when it has
    // deleted them. Without uncaching the usage stays at about `rounds * live` (20 MB).
    let bound = 8 * live;
    let mut usage = options.block_cache_usage();
    // At most 20 s (400 looks 50 ms apart).
    for _ in 0..400 {
        if usage <= bound {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        usage = options.block_cache_usage();
    }
    assert!(
        usage <= bound,
        "block cache holds {usage} bytes after {rounds} rewrites of {live} live bytes"
    );
}

/// The MANIFEST does not grow with every flush (every checkpoint flushes): RocksDB
/// writes a compacted one past `max_manifest_bytes` (1 GiB by default, which let the
/// soak's state directory and checkpoints grow for as long as it ran).
#[test]
fn rocksdb_manifest_stays_bounded_over_many_flushes() {
    let dir = fresh_dir();
    let mut b = RocksDbStateBackend::open(&dir, small().max_manifest_bytes(4 << 10)).unwrap();
    // The same 8 keys rewritten (as a window's accumulators are): compaction keeps
    // few files, so a compacted MANIFEST is small.
    for i in 0..200u32 {
        let k = i % 8;
        b.put(
            "count",
            &key(k, &k.to_be_bytes(), b""),
            i.to_le_bytes().to_vec(),
        );
        b.flush().unwrap();
    }
    let manifest: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("MANIFEST-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    // 200 flushes (and their compactions) write about 46 KiB of version edits.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| {
            format!(
                "{} {}",
                e.file_name().to_string_lossy(),
                e.metadata().unwrap().len()
            )
        })
        .collect();
    assert!(
        manifest <= 16 << 10,
        "MANIFEST files hold {manifest} bytes: {names:?}"
    );
}

#[test]
fn rocksdb_directory_is_removed_on_drop_unless_kept() {
    let dir = fresh_dir();
    let mut b = rocks_at(&dir);
    fill(&mut b, 0..10);
    assert!(dir.exists());
    drop(b);
    assert!(!dir.exists());

    let mut b = rocks_at(&dir);
    fill(&mut b, 0..1000);
    b.delete("count", &key(5, &5u32.to_be_bytes(), b""));
    b.keep_on_drop(true);
    let before = entries(&b);
    drop(b);
    assert!(dir.exists());
    // Reopened (WAL off: closing flushed the memtables), with its count.
    let mut b = rocks_at(&dir);
    assert_eq!(b.len(), 999);
    assert_eq!(entries(&b), before);
    b.keep_on_drop(true);
    drop(b);
    // Without the stored count (as after a crash) the keys are counted.
    std::fs::remove_file(dir.join("BROOK-LEN")).unwrap();
    let b = rocks_at(&dir);
    assert_eq!(b.len(), 999);
    assert_eq!(b.dir(), dir);
    drop(b);
    assert!(!dir.exists());
}

#[test]
fn rocksdb_open_errors_are_typed() {
    let dir = fresh_dir();
    let mut b = rocks_at(&dir);
    // Locked by the open instance.
    let err = RocksDbStateBackend::open(&dir, small()).unwrap_err();
    assert!(
        matches!(err, StateError::RocksDb { op: "open", .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&dir.display().to_string()),
        "{err}"
    );
    // A file where the directory should be.
    let file = dir.join("CURRENT");
    let err = RocksDbStateBackend::open(&file, small()).unwrap_err();
    assert!(matches!(err, StateError::RocksDb { .. }), "{err}");
    // A damaged database; the directory the failed open made is removed again.
    let damaged = fresh_dir();
    std::fs::create_dir_all(damaged.join("db")).unwrap();
    std::fs::write(damaged.join("db/CURRENT"), "MANIFEST-000099\n").unwrap();
    assert!(RocksDbStateBackend::open(&damaged.join("db"), small()).is_err());
    assert!(
        damaged.join("db/CURRENT").exists(),
        "an existing directory stays"
    );
    let err =
        RocksDbStateBackend::open_from_checkpoint(&damaged.join("db"), &damaged.join("r"), small())
            .unwrap_err();
    assert!(matches!(err, StateError::RocksDb { .. }), "{err}");
    assert!(
        !damaged.join("r").exists(),
        "a failed restore leaves nothing"
    );
    std::fs::remove_dir_all(&damaged).unwrap();
    // A checkpoint into an existing directory.
    let err = b.checkpoint_to(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::RocksDb {
                op: "checkpoint",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn rocksdb_native_checkpoints_are_incremental_and_restore() {
    let root = fresh_dir();
    let mut b = rocks_at(&root.join("work"));
    fill(&mut b, 0..5000);
    b.put("other", b"x", b"y".to_vec());
    // Nothing flushed yet (no WAL): the checkpoint flushes.
    let (cp1, cp2) = (root.join("cp1"), root.join("cp2"));
    b.checkpoint_to(&cp1).unwrap();
    let at_cp1 = entries(&b);
    fill(&mut b, 5000..6000);
    b.delete("other", b"x");
    b.checkpoint_to(&cp2).unwrap();
    let at_cp2 = entries(&b);

    // Incremental: cp2 shares cp1's SST files (same inodes), and both link the
    // instance's.
    let (s1, s2, work) = (ssts(&cp1), ssts(&cp2), ssts(&root.join("work")));
    assert!(!s1.is_empty());
    for (name, ino) in &s1 {
        assert_eq!(s2.get(name), Some(ino), "{name} shared by cp1 and cp2");
    }
    assert!(s2.len() > s1.len(), "cp2 adds the new data's files");
    for (name, ino) in &s2 {
        assert_eq!(work.get(name), Some(ino), "{name} hard-linked");
    }

    // Changes after a checkpoint do not reach it.
    fill(&mut b, 6000..7000);
    b.put("other", b"late", Vec::new());
    drop(b);

    let r1 = RocksDbStateBackend::open_from_checkpoint(&cp1, &root.join("r1"), small()).unwrap();
    assert_eq!(entries(&r1), at_cp1);
    assert_eq!(r1.len(), 5001);
    let mut r2 =
        RocksDbStateBackend::open_from_checkpoint(&cp2, &root.join("r2"), small()).unwrap();
    assert_eq!(entries(&r2), at_cp2);
    assert_eq!(r2.len(), 6000);
    assert_eq!(r2.get("other", b"x"), None);
    // The restored copy is writable and does not change the checkpoint.
    r2.put("other", b"new", b"1".to_vec());
    fill(&mut r2, 0..100);
    drop(r2);
    let again = RocksDbStateBackend::open_from_checkpoint(&cp2, &root.join("r3"), small()).unwrap();
    assert_eq!(entries(&again), at_cp2);
    // A non-empty target is refused.
    let err = RocksDbStateBackend::open_from_checkpoint(&cp2, &cp1, small()).unwrap_err();
    assert!(matches!(err, StateError::RocksDb { .. }), "{err}");
    drop((r1, again));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn rocksdb_backends_share_one_memory_pool() {
    // Two subtasks opened with clones of one options value: both work, both clean up.
    let opts = small();
    let (d1, d2) = (fresh_dir(), fresh_dir());
    let mut b1 = RocksDbStateBackend::open(&d1, opts.clone()).unwrap();
    let mut b2 = RocksDbStateBackend::open(&d2, opts).unwrap();
    fill(&mut b1, 0..100);
    fill(&mut b2, 100..150);
    assert_eq!((b1.len(), b2.len()), (100, 50));
    drop((b1, b2));
    assert!(!d1.exists() && !d2.exists());
}

/// Native checkpoints: a second checkpoint after a small change adds one SST file and
/// shares the rest; the files restore at the same key groups (taken over, and the
/// restored instance goes on sharing them) and at another parallelism, on RocksDB and
/// in memory, with exactly the entries of each subtask's key groups.
#[test]
fn rocksdb_native_checkpoints_are_incremental_and_restore_at_any_parallelism() {
    let root = fresh_dir();
    let storage = |id: u32| SnapshotStorage {
        root: root.clone(),
        private_dir: format!("chk-{id}/task-op1").into(),
        shared_dir: "shared".into(),
    };
    let all = key_group_range(128, 1, 0);
    let mut b = rocks_at(&fresh_dir());
    for kg in 0..128u32 {
        for i in 0..20u8 {
            b.put("s", &key(kg, &[i], b"ns"), vec![kg as u8; 64]);
        }
        b.put("t", &key(kg, b"x", b""), vec![1]);
    }
    let h1 = b.snapshot_native(&storage(1), all).unwrap().unwrap();
    b.put("s", &key(5, b"new", b""), vec![7]);
    b.delete("t", &key(6, b"x", b""));
    let h2 = b.snapshot_native(&storage(2), all).unwrap().unwrap();
    let shared = |h: &brook_core::checkpoint::NativeKeyedState| -> BTreeSet<String> {
        h.shared_files().map(str::to_string).collect()
    };
    let (s1, s2) = (shared(&h1), shared(&h2));
    assert_eq!(s1.len(), 2, "one SST per state: {s1:?}");
    assert!(
        s1.is_subset(&s2),
        "unchanged files are shared: {s1:?} {s2:?}"
    );
    assert_eq!(s2.len() - s1.len(), 2, "the change adds one SST per state");
    assert_eq!(h2.entries, 128 * 21);
    let want = entries(&b);
    drop(b);

    let mut snap = StateSnapshot::new();
    snap.put_native(h2.clone());
    let restored = |range| RestoredState::collect([&snap], range).with_root(&root);
    // Same key groups: the files are taken over; later checkpoints share them.
    let mut same = rocks_at(&fresh_dir());
    restore_keyed(&restored(all), &mut same, &mut TimerService::new()).unwrap();
    assert_eq!(entries(&same), want);
    assert_eq!(same.len(), want.len());
    let h3 = same.snapshot_native(&storage(3), all).unwrap().unwrap();
    assert_eq!(
        shared(&h3),
        s2,
        "the restored instance shares the same files"
    );
    drop(same);
    // Two runs restored from the same checkpoint (the first one killed after a
    // checkpoint of its own) write different files under the same file numbers: each
    // run's checkpoint restores its own state (a restored instance used to take over
    // the old instance's file names, and the second run's checkpoint then referred to
    // the first run's file: "Mismatch in unique ID on table file").
    let mut runs = Vec::new();
    for (id, v) in [(4u32, 1u8), (5, 2)] {
        let mut run = rocks_at(&fresh_dir());
        restore_keyed(&restored(all), &mut run, &mut TimerService::new()).unwrap();
        run.put("s", &key(9, b"run", b""), vec![v; 8]);
        let h = run.snapshot_native(&storage(id), all).unwrap().unwrap();
        assert!(
            s2.iter().all(|f| shared(&h).contains(f)),
            "the restored files are shared, not stored again"
        );
        runs.push((h, entries(&run)));
    }
    for (h, want) in runs {
        let mut snap = StateSnapshot::new();
        snap.put_native(h);
        let mut back = rocks_at(&fresh_dir());
        restore_keyed(
            &RestoredState::collect([&snap], all).with_root(&root),
            &mut back,
            &mut TimerService::new(),
        )
        .unwrap();
        assert_eq!(entries(&back), want);
    }
    // Three subtasks, on RocksDB (files taken over, other key groups deleted) and in
    // memory (entries read out of the files).
    for into in [memory as Make, rocks as Make] {
        let mut seen = Vec::new();
        for i in 0..3 {
            let range = key_group_range(128, 3, i);
            let mut b2 = into();
            restore_keyed(&restored(range), b2.as_mut(), &mut TimerService::new()).unwrap();
            let got = entries(b2.as_ref());
            assert_eq!(b2.len(), got.len());
            for (_, k, _) in &got {
                let kg = u32::from(u16::from_be_bytes([k[0], k[1]]));
                assert!(range.contains(kg), "key group {kg} outside {range:?}");
            }
            seen.extend(got);
        }
        seen.sort();
        let mut all_want = want.clone();
        all_want.sort();
        assert_eq!(seen, all_want);
    }
    // The first checkpoint is still whole (its files are links, not the instance's).
    let mut snap1 = StateSnapshot::new();
    snap1.put_native(h1);
    let mut old = memory();
    restore_keyed(
        &RestoredState::collect([&snap1], all).with_root(&root),
        old.as_mut(),
        &mut TimerService::new(),
    )
    .unwrap();
    assert_eq!(old.len(), 128 * 21);
    std::fs::remove_dir_all(&root).unwrap();
}
