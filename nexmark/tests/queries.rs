//! Each query through the engine at parallelism 1 and 2 equals a small offline
//! computation of the same query (plain Rust over the generator's events), on events
//! in order and out of order.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brook_core::time::Millis;
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{DataStream, JobConfig, StreamEnvironment};
use brook_nexmark::queries::{
    self, AuctionPrice, BidderCount, BidderSession, EuroBid, HotItem, LocalItem, NewUser,
    Q11_GAP_MS, Q2_AUCTION_MODULUS, Q5_SIZE_MS, Q5_SLIDE_MS, Q7_SIZE_MS, Q8_SIZE_MS,
};
use brook_nexmark::{Auction, Bid, Event, NexmarkConfig, NexmarkSource, Person};

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

/// q11 offline: each bidder's bids in time order, a new session after more than the
/// gap without a bid (windows `[t, t + gap)` that touch merge: docs/semantics.md §3).
fn q11_offline(bids: &[Bid]) -> Vec<BidderSession> {
    let mut times: BTreeMap<u64, Vec<Millis>> = BTreeMap::new();
    for b in bids {
        times.entry(b.bidder).or_default().push(b.date_time);
    }
    let mut out = Vec::new();
    for (bidder, mut ts) in times {
        ts.sort_unstable();
        let mut start = ts[0];
        let mut last = ts[0];
        let mut count = 0;
        for t in ts {
            if t > last + Q11_GAP_MS {
                out.push(BidderSession {
                    bidder,
                    bid_count: count,
                    start,
                    end: last + Q11_GAP_MS,
                });
                start = t;
                count = 0;
            }
            last = t;
            count += 1;
        }
        out.push(BidderSession {
            bidder,
            bid_count: count,
            start,
            end: last + Q11_GAP_MS,
        });
    }
    sorted(out)
}

#[test]
fn q11_counts_each_bidders_bids_per_session() {
    for group in GROUPS {
        let cfg = config(group);
        let want = q11_offline(&bids(&cfg));
        let bidders: BTreeSet<u64> = want.iter().map(|s| s.bidder).collect();
        // Some bidders pause for longer than the gap, so they have several sessions.
        assert!(
            want.len() > bidders.len() + 10,
            "{} sessions of {} bidders",
            want.len(),
            bidders.len()
        );
        for p in [1, 2] {
            assert_eq!(sorted(run(cfg.clone(), p, queries::q11)), want, "p {p}");
        }
    }
}

/// q12: which processing-time window a bid lands in depends on when it is processed,
/// so the check is that every bid is counted once, for its bidder, in aligned windows
/// of processing time. Windows of 100 ms, and a second input (a Person, which q12
/// ignores) that ends only once the windows have counted every bid: a window open when
/// the input ends is not fired (as Flink's), and its bids would be missing.
#[test]
fn q12_counts_every_bid_once_in_processing_time_windows() {
    const SIZE_MS: Millis = 100;
    let cfg = config(64);
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    let events: Vec<Event> = NexmarkSource::new(cfg.clone()).unwrap().events().collect();
    for b in events.iter().cloned().filter_map(Event::into_bid) {
        *want.entry(b.bidder).or_default() += 1;
    }
    let bids: u64 = want.values().sum();
    let sentinel = events
        .iter()
        .find(|e| matches!(e, Event::Person(_)))
        .unwrap()
        .clone();
    for p in [1, 2] {
        let source = NexmarkSource::new(cfg.clone()).unwrap();
        let env = StreamEnvironment::new(JobConfig::with_parallelism(p));
        let out = CollectSink::new();
        let strategy = source.watermark_strategy();
        let counted = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&counted);
        let tail = env
            .source(VecSource::new(vec![sentinel.clone()]))
            .map(move |e: Event| {
                // At most a minute for the windows to count every bid.
                for _ in 0..12_000 {
                    if seen.load(Ordering::SeqCst) >= bids {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                e
            });
        let count = Arc::clone(&counted);
        queries::q12_windows(env.from_source(source, strategy).union(tail), SIZE_MS)
            .map(move |r: BidderCount| {
                count.fetch_add(r.bid_count, Ordering::SeqCst);
                r
            })
            .sink(out.clone());
        env.execute("nexmark-q12").unwrap();
        let rows = out.values();
        let mut got: BTreeMap<u64, u64> = BTreeMap::new();
        let mut windows = BTreeSet::new();
        for r in &rows {
            assert_eq!(r.window_end - r.window_start, SIZE_MS, "{r:?}");
            assert_eq!(r.window_start.rem_euclid(SIZE_MS), 0, "{r:?}");
            assert!(
                windows.insert((r.bidder, r.window_start)),
                "one row per bidder and window: {r:?}"
            );
            *got.entry(r.bidder).or_default() += r.bid_count;
        }
        assert_eq!(got, want, "p {p}");
    }
}

/// q4 offline: per auction the highest bid made while it was open (`date_time <=
/// bid <= expires`), then per category the sum and count of those closing prices.
fn q4_offline(events: &[Event]) -> BTreeMap<u64, (u64, u64)> {
    let auctions: BTreeMap<u64, &Auction> = events
        .iter()
        .filter_map(|e| match e {
            Event::Auction(a) => Some((a.id, a)),
            _ => None,
        })
        .collect();
    let mut highest: BTreeMap<u64, u64> = BTreeMap::new();
    for e in events {
        let Event::Bid(b) = e else { continue };
        let Some(a) = auctions.get(&b.auction) else {
            continue;
        };
        if a.date_time <= b.date_time && b.date_time <= a.expires {
            let h = highest.entry(a.id).or_default();
            *h = (*h).max(b.price);
        }
    }
    let mut out: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (id, price) in highest {
        let t = out.entry(auctions[&id].category).or_default();
        t.0 += price;
        t.1 += 1;
    }
    out
}

#[test]
fn q4_averages_the_closing_prices_per_category() {
    for group in GROUPS {
        let cfg = config(group);
        let events: Vec<Event> = NexmarkSource::new(cfg.clone()).unwrap().events().collect();
        let want = q4_offline(&events);
        assert!(
            want.len() >= 3 && want.values().map(|t| t.1).sum::<u64>() > 100,
            "{want:?}"
        );
        let max_len = brook_nexmark::generator::max_auction_length_ms(&cfg);
        for p in [1, 2] {
            let rows = run(cfg.clone(), p, |s| queries::q4(s, max_len));
            // An updating result: each category's last row (the most auctions) is final,
            // and its average is its sum over its count.
            let mut last: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
            for r in &rows {
                assert!(
                    (r.average - r.sum as f64 / r.auctions as f64).abs() < 1e-6,
                    "{r:?}"
                );
                let e = last.entry(r.category).or_default();
                if r.auctions > e.1 {
                    *e = (r.sum, r.auctions);
                }
            }
            assert_eq!(last, want, "group {group}, p {p}");
            // One row per closed auction.
            assert_eq!(rows.len() as u64, want.values().map(|t| t.1).sum::<u64>());
        }
    }
}
