//! q7, highest bid: per tumbling window of 10 s, the bids with the highest price (the
//! reference query joins the bids to their window's maximum price: every bid at the
//! maximum is a result). Windows are `[start, start + 10 s)` as Beam's q7.
//!
//! Two window stages: the highest bids per auction and window (keyed by auction, so the
//! work spreads over the subtasks); then those of each window, keyed by its end,
//! gathered in a window of the same size (a result's timestamp is its window's end − 1).

use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::window::assigner::TumblingEventTimeWindows;
use brook_operators::window::{AggregateFunction, WindowResult};

use crate::model::{Bid, Event};

/// The tumbling window's size (ms).
pub const Q7_SIZE_MS: Millis = 10_000;

/// The bids with the highest price in each 10 s window.
pub fn q7(events: DataStream<Event>) -> DataStream<Bid> {
    // The size is a constant that passes the assigner's checks.
    #[allow(clippy::unwrap_used)]
    let tumbling = TumblingEventTimeWindows::of(Q7_SIZE_MS).unwrap();
    events
        .flat_map(Event::into_bid)
        .key_by(|b: &Bid| b.auction)
        .window(tumbling)
        .name("q7-auction")
        .aggregate(HighestBids)
        .key_by(|r: &WindowResult<u64, Vec<Bid>>| r.window.end)
        .window(tumbling)
        .name("q7-max")
        .aggregate(HighestBids)
        .flat_map(|r: WindowResult<Millis, Vec<Bid>>| r.value)
        .name("q7")
}

/// The bids at the highest price seen.
#[derive(Debug, Clone, Copy)]
struct HighestBids;

fn add_bid(acc: &mut Vec<Bid>, bid: &Bid) {
    match acc.first().map(|b| b.price) {
        Some(max) if bid.price < max => {}
        Some(max) if bid.price == max => acc.push(bid.clone()),
        _ => {
            acc.clear();
            acc.push(bid.clone());
        }
    }
}

impl AggregateFunction<Bid> for HighestBids {
    type Acc = Vec<Bid>;
    type Out = Vec<Bid>;

    fn create_accumulator(&self) -> Vec<Bid> {
        Vec::new()
    }

    fn add(&self, acc: &mut Vec<Bid>, bid: &Bid) {
        add_bid(acc, bid);
    }

    fn merge(&self, acc: &mut Vec<Bid>, other: Vec<Bid>) {
        other.iter().for_each(|b| add_bid(acc, b));
    }

    fn get_result(&self, acc: &Vec<Bid>) -> Vec<Bid> {
        acc.clone()
    }
}

/// The second stage: the first stage's highest bids of each auction.
impl AggregateFunction<WindowResult<u64, Vec<Bid>>> for HighestBids {
    type Acc = Vec<Bid>;
    type Out = Vec<Bid>;

    fn create_accumulator(&self) -> Vec<Bid> {
        Vec::new()
    }

    fn add(&self, acc: &mut Vec<Bid>, r: &WindowResult<u64, Vec<Bid>>) {
        r.value.iter().for_each(|b| add_bid(acc, b));
    }

    fn merge(&self, acc: &mut Vec<Bid>, other: Vec<Bid>) {
        other.iter().for_each(|b| add_bid(acc, b));
    }

    fn get_result(&self, acc: &Vec<Bid>) -> Vec<Bid> {
        acc.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bid(auction: u64, price: u64) -> Bid {
        Bid {
            auction,
            bidder: 1,
            price,
            channel: "c".into(),
            url: "u".into(),
            date_time: 0,
            extra: String::new(),
        }
    }

    #[test]
    fn ties_at_the_highest_price_are_all_kept() {
        let f = HighestBids;
        let mut acc = AggregateFunction::<Bid>::create_accumulator(&f);
        for b in [bid(1, 5), bid(2, 9), bid(3, 9), bid(4, 7)] {
            f.add(&mut acc, &b);
        }
        assert_eq!(acc, vec![bid(2, 9), bid(3, 9)]);
        // Merging keeps ties across accumulators and drops lower prices.
        AggregateFunction::<Bid>::merge(&f, &mut acc, vec![bid(5, 9)]);
        AggregateFunction::<Bid>::merge(&f, &mut acc, vec![bid(6, 8)]);
        assert_eq!(acc, vec![bid(2, 9), bid(3, 9), bid(5, 9)]);
        AggregateFunction::<Bid>::merge(&f, &mut acc, vec![bid(7, 10)]);
        assert_eq!(acc, vec![bid(7, 10)]);
    }
}
