//! The Nexmark generator's model, as pure functions of the event number.
//!
//! The model is the reference generator's (Beam's `NexmarkGenerator`, the
//! nexmark/nexmark project's `NexmarkGenerator`), written anew:
//!
//! - Event numbers are dealt in rounds of 50: per round 1 person, 3 auctions and 46
//!   bids ([`PERSON_PROPORTION`], [`AUCTION_PROPORTION`], [`BID_PROPORTION`]), in
//!   that order. Person and auction ids follow from the number alone (the `k`-th
//!   person is `1000 + k`).
//! - A new auction's seller is, `hot_seller_ratio - 1` times in `hot_seller_ratio`,
//!   the newest *hot* person (every 100th); otherwise one of the 1,000 newest persons
//!   (or up to 10 not yet registered, as in the reference). A bid's auction is, `r - 1`
//!   times in `r = hot_auction_ratio`, the newest hot auction (every 100th), otherwise
//!   one of the 100 newest (or up to 10 not yet open); its bidder likewise with
//!   `hot_bidder_ratio`, the hot bidders being every 100th person plus one.
//! - Prices are `round(10^(6u) × 100)` cents for `u` uniform in `[0, 1)`: $1 to
//!   $1,000,000, log-uniform.
//! - Event `e` happens at `base_time_ms + e × inter_event_delay_us / 1000`.
//! - Each event draws from its own random generator seeded with its number, so any
//!   event is computed from its number alone, the same at any parallelism.
//! - Out of order: position `p` of the output holds the event number `shuffle(p)`, a
//!   permutation within each group of `out_of_order_group_size` consecutive positions
//!   (the reference permutes within groups too, with its own permutation).
//!
//! What differs from the reference: names, cities, items and channels come from short
//! fixed lists (no random strings, so a bid allocates nothing), `extra` is empty, and
//! an auction runs for a random time averaging the time of 100 auctions' worth of
//! events (the reference computes a length per auction from the event rate).

use std::borrow::Cow;

use brook_connectors::NumberedEvents;
use brook_core::time::Millis;
use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;

use crate::config::NexmarkConfig;
use crate::model::{Auction, Bid, Event, Person};

/// Persons per round of [`PROPORTION_DENOMINATOR`] events.
pub const PERSON_PROPORTION: u64 = 1;
/// Auctions per round.
pub const AUCTION_PROPORTION: u64 = 3;
/// Bids per round.
pub const BID_PROPORTION: u64 = 46;
/// Events per round.
pub const PROPORTION_DENOMINATOR: u64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;

/// The first person's id.
pub const FIRST_PERSON_ID: u64 = 1000;
/// The first auction's id.
pub const FIRST_AUCTION_ID: u64 = 1000;
/// The first category's id; there are [`CATEGORIES`].
pub const FIRST_CATEGORY_ID: u64 = 10;
/// How many categories.
pub const CATEGORIES: u64 = 5;

/// Every `HOT_GROUP`-th person, auction is hot.
const HOT_GROUP: u64 = 100;
/// A random person is one of this many newest.
const ACTIVE_PERSONS: u64 = 1000;
/// ... or one of this many not registered yet.
const PERSON_ID_LEAD: u64 = 10;
/// A random auction is one of this many newest.
const AUCTIONS_IN_FLIGHT: u64 = 100;
/// ... or one of this many not open yet.
const AUCTION_ID_LEAD: u64 = 10;
/// A prime larger than any out-of-order group: `k ↦ k × SHUFFLE mod m` permutes
/// `0..m` for every `m` up to [`crate::config::MAX_OUT_OF_ORDER_GROUP_SIZE`].
const SHUFFLE: u128 = 2_654_435_761;

const FIRST_NAMES: [&str; 8] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie",
];
const LAST_NAMES: [&str; 8] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
];
const CITIES: [(&str, &str); 8] = [
    ("Phoenix", "AZ"),
    ("Los Angeles", "CA"),
    ("San Francisco", "CA"),
    ("Boise", "ID"),
    ("Portland", "OR"),
    ("Bend", "OR"),
    ("Redmond", "WA"),
    ("Seattle", "WA"),
];
const ITEMS: [(&str, &str); 6] = [
    ("lamp", "a reading lamp, brass"),
    ("chair", "an oak chair"),
    ("bicycle", "a road bicycle, 56 cm"),
    ("camera", "a film camera with its lens"),
    ("guitar", "an acoustic guitar"),
    ("clock", "a wall clock, working"),
];
const CHANNELS: [(&str, &str); 4] = [
    ("Google", "https://www.nexmark.com/item.htm?channel=google"),
    (
        "Facebook",
        "https://www.nexmark.com/item.htm?channel=facebook",
    ),
    ("Baidu", "https://www.nexmark.com/item.htm?channel=baidu"),
    ("Apple", "https://www.nexmark.com/item.htm?channel=apple"),
];

/// What event number `e` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A new person.
    Person,
    /// A new auction.
    Auction,
    /// A bid.
    Bid,
}

/// The kind of event number `e`: in each round of 50, the first is a person, the next
/// three auctions, the rest bids.
pub fn kind(e: u64) -> EventKind {
    let r = e % PROPORTION_DENOMINATOR;
    if r < PERSON_PROPORTION {
        EventKind::Person
    } else if r < PERSON_PROPORTION + AUCTION_PROPORTION {
        EventKind::Auction
    } else {
        EventKind::Bid
    }
}

/// How many persons registered with event numbers `0..=e`.
fn persons_upto(e: u64) -> u64 {
    let (round, r) = (e / PROPORTION_DENOMINATOR, e % PROPORTION_DENOMINATOR);
    round * PERSON_PROPORTION + (r + 1).min(PERSON_PROPORTION)
}

/// How many auctions opened with event numbers `0..=e`.
fn auctions_upto(e: u64) -> u64 {
    let (round, r) = (e / PROPORTION_DENOMINATOR, e % PROPORTION_DENOMINATOR);
    round * AUCTION_PROPORTION
        + (r + 1)
            .saturating_sub(PERSON_PROPORTION)
            .min(AUCTION_PROPORTION)
}

/// The generator: the checked settings, computing event `p` of the output.
#[derive(Debug, Clone)]
pub struct Generator {
    cfg: NexmarkConfig,
}

impl Generator {
    /// A generator with checked settings (see [`NexmarkConfig::check`]).
    pub(crate) fn new(cfg: NexmarkConfig) -> Self {
        Generator { cfg }
    }

    /// The settings.
    pub fn config(&self) -> &NexmarkConfig {
        &self.cfg
    }

    /// The event number at output position `p`: `p` itself in order, else permuted
    /// within its out-of-order group (the last group of `0..events` may be shorter and
    /// is permuted within itself, so positions `0..events` hold events `0..events`).
    pub fn event_number(&self, p: u64) -> u64 {
        let g = self.cfg.out_of_order_group_size;
        if g <= 1 {
            return p;
        }
        let start = p / g * g;
        let m = if p < self.cfg.events {
            g.min(self.cfg.events - start)
        } else {
            g
        };
        let k = u128::from(p - start);
        // The remainder is < m, a u64.
        start + (k * SHUFFLE % u128::from(m)) as u64
    }

    /// The event at output position `p` (see [`Generator::event_number`]).
    pub fn event_at(&self, p: u64) -> Event {
        self.event(self.event_number(p))
    }

    /// Event number `e`, computed from `e` alone.
    pub fn event(&self, e: u64) -> Event {
        let mut rng = XorShiftRng::seed_from_u64(e);
        let date_time = self.cfg.timestamp(e);
        match kind(e) {
            EventKind::Person => Event::Person(self.person(e, date_time, &mut rng)),
            EventKind::Auction => Event::Auction(self.auction(e, date_time, &mut rng)),
            EventKind::Bid => Event::Bid(self.bid(e, date_time, &mut rng)),
        }
    }

    fn person(&self, e: u64, date_time: Millis, rng: &mut XorShiftRng) -> Person {
        let first = FIRST_NAMES[rng.random_range(0..FIRST_NAMES.len())];
        let last = LAST_NAMES[rng.random_range(0..LAST_NAMES.len())];
        let (city, state) = CITIES[rng.random_range(0..CITIES.len())];
        let card: u64 = rng.random_range(0..10_000_000_000_000_000);
        let card = format!("{card:016}");
        Person {
            id: FIRST_PERSON_ID + persons_upto(e) - 1,
            name: format!("{first} {last}"),
            email_address: format!("{}.{}@nexmark.com", first, last).to_lowercase(),
            credit_card: format!(
                "{} {} {} {}",
                &card[0..4],
                &card[4..8],
                &card[8..12],
                &card[12..16]
            ),
            city: Cow::Borrowed(city),
            state: Cow::Borrowed(state),
            date_time,
            extra: String::new(),
        }
    }

    fn auction(&self, e: u64, date_time: Millis, rng: &mut XorShiftRng) -> Auction {
        let seller = if rng.random_range(0..self.cfg.hot_seller_ratio) > 0 {
            (persons_upto(e) - 1) / HOT_GROUP * HOT_GROUP
        } else {
            recent_person(e, rng)
        };
        let (item_name, description) = ITEMS[rng.random_range(0..ITEMS.len())];
        let initial_bid = price(rng);
        let reserve = initial_bid + price(rng);
        let length = rng.random_range(1..=max_auction_length_ms(&self.cfg) as u64);
        Auction {
            id: FIRST_AUCTION_ID + auctions_upto(e) - 1,
            item_name: Cow::Borrowed(item_name),
            description: Cow::Borrowed(description),
            initial_bid,
            reserve,
            date_time,
            expires: date_time.saturating_add(length as Millis),
            seller: FIRST_PERSON_ID + seller,
            category: FIRST_CATEGORY_ID + rng.random_range(0..CATEGORIES),
            extra: String::new(),
        }
    }

    fn bid(&self, e: u64, date_time: Millis, rng: &mut XorShiftRng) -> Bid {
        let auction = if rng.random_range(0..self.cfg.hot_auction_ratio) > 0 {
            // A bid comes after the round's auctions: at least one has opened.
            (auctions_upto(e) - 1) / HOT_GROUP * HOT_GROUP
        } else {
            recent_auction(e, rng)
        };
        let bidder = if rng.random_range(0..self.cfg.hot_bidder_ratio) > 0 {
            (persons_upto(e) - 1) / HOT_GROUP * HOT_GROUP + 1
        } else {
            recent_person(e, rng)
        };
        let (channel, url) = CHANNELS[rng.random_range(0..CHANNELS.len())];
        Bid {
            auction: FIRST_AUCTION_ID + auction,
            bidder: FIRST_PERSON_ID + bidder,
            price: price(rng),
            channel: Cow::Borrowed(channel),
            url: Cow::Borrowed(url),
            date_time,
            extra: String::new(),
        }
    }
}

/// The longest an auction of `config` runs (ms; `expires - date_time` is 1 to this):
/// twice the event time of 100 auctions' worth of events (100 × 50 / 3), the
/// reference generator's average.
pub fn max_auction_length_ms(config: &NexmarkConfig) -> Millis {
    let events = AUCTIONS_IN_FLIGHT * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
    let mean_ms = (events * config.inter_event_delay_us / 1000).max(1);
    (2 * mean_ms) as Millis
}

/// One of the newest persons as of event `e` (0-based), or one not registered yet.
fn recent_person(e: u64, rng: &mut XorShiftRng) -> u64 {
    let persons = persons_upto(e);
    let active = persons.min(ACTIVE_PERSONS);
    persons - active + rng.random_range(0..active + PERSON_ID_LEAD)
}

/// One of the newest auctions as of event `e` (0-based; an auction or a bid, so at
/// least one is open), or one not open yet.
fn recent_auction(e: u64, rng: &mut XorShiftRng) -> u64 {
    let newest = auctions_upto(e).saturating_sub(1);
    let oldest = newest.saturating_sub(AUCTIONS_IN_FLIGHT);
    oldest + rng.random_range(0..newest - oldest + 1 + AUCTION_ID_LEAD)
}

/// A price in cents, log-uniform from $1 to $1,000,000.
fn price(rng: &mut XorShiftRng) -> u64 {
    let u: f64 = rng.random();
    (10f64.powf(u * 6.0) * 100.0).round() as u64
}

impl NumberedEvents for Generator {
    type Out = Event;

    #[inline]
    fn event(&self, p: u64) -> (Event, Millis) {
        let e = self.event_at(p);
        let t = e.date_time();
        (e, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(group: u64, events: u64) -> Generator {
        Generator::new(NexmarkConfig {
            events,
            out_of_order_group_size: group,
            ..NexmarkConfig::default()
        })
    }

    #[test]
    fn rounds_hold_one_person_three_auctions_and_46_bids() {
        let kinds: Vec<EventKind> = (0..100).map(kind).collect();
        for round in kinds.chunks(50) {
            let count = |k| round.iter().filter(|x| **x == k).count();
            assert_eq!(count(EventKind::Person), 1);
            assert_eq!(count(EventKind::Auction), 3);
            assert_eq!(count(EventKind::Bid), 46);
        }
    }

    #[test]
    fn ids_count_the_persons_and_auctions_before() {
        let g = generator(1, 1_000);
        let mut persons = Vec::new();
        let mut auctions = Vec::new();
        for e in 0..1_000 {
            match g.event(e) {
                Event::Person(p) => persons.push(p.id),
                Event::Auction(a) => auctions.push(a.id),
                Event::Bid(b) => {
                    // Bids go to auctions open by now or up to 10 ahead.
                    assert!(b.auction < FIRST_AUCTION_ID + auctions.len() as u64 + 10);
                }
            }
        }
        assert_eq!(persons, (1000..1020).collect::<Vec<_>>());
        assert_eq!(auctions, (1000..1060).collect::<Vec<_>>());
    }

    #[test]
    fn an_event_is_the_same_however_it_is_reached() {
        let g = generator(1, 10_000);
        for e in [0, 1, 4, 49, 50, 9_999] {
            assert_eq!(g.event(e), g.event(e));
            assert_eq!(g.event(e).date_time(), g.config().timestamp(e));
        }
        assert_ne!(g.event(10), g.event(11));
    }

    #[test]
    fn out_of_order_groups_are_permutations() {
        for (group, n) in [(1, 100), (7, 100), (100, 1_000), (64, 1_000), (100, 1_050)] {
            let g = generator(group, n);
            let mut seen: Vec<u64> = (0..n).map(|p| g.event_number(p)).collect();
            let moved = seen.iter().enumerate().any(|(p, e)| p as u64 != *e);
            assert_eq!(moved, group > 1, "group {group}");
            for (p, e) in seen.iter().enumerate() {
                assert_eq!(p as u64 / group, e / group, "position {p} left its group");
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "group {group}, n {n}");
        }
    }

    #[test]
    fn hot_auctions_get_about_half_the_bids() {
        let g = generator(1, 50_000);
        let (mut hot, mut bids) = (0, 0);
        for e in 0..50_000 {
            if let Event::Bid(b) = g.event(e) {
                bids += 1;
                let newest_hot = (auctions_upto(e) - 1) / HOT_GROUP * HOT_GROUP;
                hot += u32::from(b.auction == FIRST_AUCTION_ID + newest_hot);
                assert!((100..=100_000_000).contains(&b.price), "{}", b.price);
            }
        }
        // Ratio 2: half the bids, plus the few random picks of the hot one.
        let share = f64::from(hot) / f64::from(bids);
        assert!((0.48..0.56).contains(&share), "{share}");
    }
}
