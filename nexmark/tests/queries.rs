//! Each query through the engine at parallelism 1 and 2 equals a small offline
//! computation of the same query (plain Rust over the generator's events), on events
//! in order and out of order.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use brook_core::time::Millis;
use brook_engine::testing::CollectSink;
use brook_engine::{DataStream, JobConfig, StreamEnvironment};
use brook_nexmark::queries::{
    self, AuctionPrice, EuroBid, HotItem, LocalItem, NewUser, Q2_AUCTION_MODULUS, Q5_SIZE_MS,
    Q5_SLIDE_MS, Q7_SIZE_MS, Q8_SIZE_MS,
};
use brook_nexmark::{Bid, Event, NexmarkConfig, NexmarkSource, Person};

/// 20,000 events 2 ms apart: 40 s of event time, 4 windows of q7, 24 of q5. Out of
/// order (`group > 1`) without hot auctions, so that several auctions share a window's
/// most bids in q5.
fn config(group: u64) -> NexmarkConfig {
    NexmarkConfig {
        events: 20_000,
        inter_event_delay_us: 2_000,
        out_of_order_group_size: group,
        hot_auction_ratio: if group > 1 { 1 } else { 2 },
        ..NexmarkConfig::default()
    }
}

/// Runs `query` over the events of `config` at `parallelism`.
fn run<T: Clone + Send + 'static>(
    config: NexmarkConfig,
    parallelism: u32,
    query: impl FnOnce(DataStream<Event>) -> DataStream<T>,
) -> Vec<T> {
    let source = NexmarkSource::new(config).unwrap();
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let out = CollectSink::new();
    let strategy = source.watermark_strategy();
    query(env.from_source(source, strategy)).sink(out.clone());
    env.execute("nexmark").unwrap();
    out.values()
}

fn bids(config: &NexmarkConfig) -> Vec<Bid> {
    let source = NexmarkSource::new(config.clone()).unwrap();
    source.events().filter_map(Event::into_bid).collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Every query is checked on events in order and in groups of 64 out of order.
const GROUPS: [u64; 2] = [1, 64];

#[test]
fn the_source_emits_every_event_once_at_any_parallelism() {
    let cfg = config(64);
    let want = sorted(NexmarkSource::new(cfg.clone()).unwrap().events().collect());
    assert_eq!(want.len(), 20_000);
    for p in [1, 2, 3] {
        let got = run(cfg.clone(), p, |s| s);
        assert_eq!(sorted(got), want, "parallelism {p}");
    }
}

#[test]
fn q0_passes_every_bid() {
    for group in GROUPS {
        let want = sorted(bids(&config(group)));
        assert!(want.len() > 18_000);
        for p in [1, 2] {
            assert_eq!(sorted(run(config(group), p, queries::q0)), want);
        }
    }
}

#[test]
fn q1_converts_every_price() {
    let key = |b: &EuroBid| (b.date_time, b.auction, b.bidder, b.price.to_bits());
    for group in GROUPS {
        let mut want: Vec<EuroBid> = bids(&config(group))
            .into_iter()
            .map(|b| EuroBid {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price as f64 * 0.908,
                date_time: b.date_time,
                extra: b.extra,
            })
            .collect();
        want.sort_by_key(key);
        for p in [1, 2] {
            let mut got = run(config(group), p, queries::q1);
            got.sort_by_key(key);
            assert_eq!(got, want);
        }
    }
}

#[test]
fn q2_selects_the_auctions_divisible_by_123() {
    for group in GROUPS {
        let want: Vec<AuctionPrice> = sorted(
            bids(&config(group))
                .into_iter()
                .filter(|b| b.auction % 123 == 0)
                .map(|b| AuctionPrice {
                    auction: b.auction,
                    price: b.price,
                })
                .collect(),
        );
        // The test means something: some bids pass, most do not.
        assert!(!want.is_empty() && want.len() < 2_000, "{}", want.len());
        assert_eq!(Q2_AUCTION_MODULUS, 123);
        for p in [1, 2] {
            assert_eq!(sorted(run(config(group), p, queries::q2)), want);
        }
    }
}

/// q5 offline: count the bids of every hopping window per auction, keep the maxima.
fn q5_offline(bids: &[Bid]) -> Vec<HotItem> {
    let mut counts: BTreeMap<(Millis, u64), u64> = BTreeMap::new();
    for b in bids {
        // The windows [start, start + 10 s) holding the bid, starts on the 2 s grid.
        let last = b.date_time.div_euclid(Q5_SLIDE_MS) * Q5_SLIDE_MS;
        let mut start = last;
        while start > b.date_time - Q5_SIZE_MS {
            *counts.entry((start, b.auction)).or_default() += 1;
            start -= Q5_SLIDE_MS;
        }
    }
    let mut max: BTreeMap<Millis, u64> = BTreeMap::new();
    for ((start, _), n) in &counts {
        let m = max.entry(*start).or_default();
        *m = (*m).max(*n);
    }
    sorted(
        counts
            .into_iter()
            .filter(|((start, _), n)| max[start] == *n)
            .map(|((start, auction), count)| HotItem {
                window_start: start,
                window_end: start + Q5_SIZE_MS,
                auction,
                count,
            })
            .collect(),
    )
}

#[test]
fn q5_finds_the_auctions_with_the_most_bids_per_hopping_window() {
    for group in GROUPS {
        let want = q5_offline(&bids(&config(group)));
        // 40 s of bids: windows start from 8 s before the first bid to the last.
        let windows = sorted(want.iter().map(|h| h.window_start).collect::<Vec<_>>());
        let mut distinct = windows.clone();
        distinct.dedup();
        assert!(distinct.len() >= 20, "{}", distinct.len());
        if group > 1 {
            // Ties: more results than windows.
            assert!(want.len() > distinct.len(), "{}", want.len());
        }
        for p in [1, 2] {
            assert_eq!(sorted(run(config(group), p, queries::q5)), want, "p {p}");
        }
    }
}

/// q7 offline: the bids at the highest price of every tumbling window.
fn q7_offline(bids: &[Bid]) -> Vec<Bid> {
    let mut max: BTreeMap<Millis, u64> = BTreeMap::new();
    let window = |b: &Bid| b.date_time.div_euclid(Q7_SIZE_MS);
    for b in bids {
        let m = max.entry(window(b)).or_default();
        *m = (*m).max(b.price);
    }
    sorted(
        bids.iter()
            .filter(|b| max[&window(b)] == b.price)
            .cloned()
            .collect(),
    )
}

#[test]
fn q7_finds_the_highest_bids_per_tumbling_window() {
    for group in GROUPS {
        let want = q7_offline(&bids(&config(group)));
        assert!(want.len() >= 4, "{}", want.len());
        for p in [1, 2] {
            assert_eq!(sorted(run(config(group), p, queries::q7)), want, "p {p}");
        }
    }
}

/// q8 offline: the (person, window) pairs where the person registered and sold.
fn q8_offline(events: &[Event]) -> Vec<NewUser> {
    let window = |t: Millis| t.div_euclid(Q8_SIZE_MS) * Q8_SIZE_MS;
    let sellers: BTreeSet<(u64, Millis)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Auction(a) => Some((a.seller, window(a.date_time))),
            _ => None,
        })
        .collect();
    sorted(
        events
            .iter()
            .filter_map(|e| match e {
                Event::Person(p) if sellers.contains(&(p.id, window(p.date_time))) => {
                    Some(NewUser {
                        id: p.id,
                        name: p.name.clone(),
                        window_start: window(p.date_time),
                    })
                }
                _ => None,
            })
            .collect(),
    )
}

#[test]
fn q8_finds_the_persons_who_sold_in_the_window_they_registered() {
    for group in GROUPS {
        let cfg = config(group);
        let events: Vec<Event> = NexmarkSource::new(cfg.clone()).unwrap().events().collect();
        let want = q8_offline(&events);
        // Some persons sold in their first window, most did not.
        let persons = events
            .iter()
            .filter(|e| matches!(e, Event::Person(_)))
            .count();
        assert!(want.len() >= 4 && want.len() < persons, "{}", want.len());
        for p in [1, 2] {
            assert_eq!(sorted(run(cfg.clone(), p, queries::q8)), want, "p {p}");
        }
    }
}

/// q3 offline: every auction of category 10 with its seller, if from OR, ID or CA.
fn q3_offline(events: &[Event]) -> Vec<LocalItem> {
    let persons: BTreeMap<u64, &Person> = events
        .iter()
        .filter_map(|e| match e {
            Event::Person(p) => Some((p.id, p)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for e in events {
        let Event::Auction(a) = e else { continue };
        let Some(p) = persons.get(&a.seller) else {
            continue;
        };
        if a.category == 10 && ["OR", "ID", "CA"].contains(&p.state.as_ref()) {
            out.push(LocalItem {
                name: p.name.clone(),
                city: p.city.to_string(),
                state: p.state.to_string(),
                auction: a.id,
            });
        }
    }
    sorted(out)
}

#[test]
fn q3_joins_the_local_sellers_to_their_auctions() {
    for group in GROUPS {
        let cfg = config(group);
        let events: Vec<Event> = NexmarkSource::new(cfg.clone()).unwrap().events().collect();
        let want = q3_offline(&events);
        let auctions = events
            .iter()
            .filter(|e| matches!(e, Event::Auction(_)))
            .count();
        assert!(
            want.len() >= 20 && want.len() < auctions / 5,
            "{}",
            want.len()
        );
        for p in [1, 2] {
            assert_eq!(sorted(run(cfg.clone(), p, queries::q3)), want, "p {p}");
        }
    }
}
