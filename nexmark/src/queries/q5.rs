//! q5, hot items: per hopping window of 10 s sliding by 2 s, the auctions with the most
//! bids, as the reference query (which joins each auction's count to the window's
//! maximum with `>=`: every auction at the maximum is a result, ties included).
//!
//! Two window stages: the bids counted per auction and window (keyed by auction); then
//! the counts of each window, keyed by the window's end, gathered in a tumbling window
//! of one slide (a count's timestamp is its window's end − 1, so each slide holds
//! the counts of exactly one hopping window), keeping the maximum and its auctions.

use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::window::aggregate::Count;
use brook_operators::window::assigner::{SlidingEventTimeWindows, TumblingEventTimeWindows};
use brook_operators::window::{AggregateFunction, WindowResult};
use serde::{Deserialize, Serialize};

use crate::model::{Bid, Event};

/// The hopping window's size (ms).
pub const Q5_SIZE_MS: Millis = 10_000;
/// The hopping window's slide (ms).
pub const Q5_SLIDE_MS: Millis = 2_000;

/// An auction with the most bids of a window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HotItem {
    /// The window's first millisecond.
    pub window_start: Millis,
    /// The first millisecond after the window.
    pub window_end: Millis,
    /// The auction's id.
    pub auction: u64,
    /// Its bids in the window: the window's most.
    pub count: u64,
}

/// The auctions with the most bids in each hopping window.
pub fn q5(events: DataStream<Event>) -> DataStream<HotItem> {
    // The sizes are constants that pass the assigners' checks.
    #[allow(clippy::unwrap_used)]
    let (hopping, slide) = (
        SlidingEventTimeWindows::of(Q5_SIZE_MS, Q5_SLIDE_MS).unwrap(),
        TumblingEventTimeWindows::of(Q5_SLIDE_MS).unwrap(),
    );
    events
        .flat_map(Event::into_bid)
        .key_by(|b: &Bid| b.auction)
        .window(hopping)
        .name("q5-count")
        .aggregate(Count)
        .key_by(|c: &WindowResult<u64, u64>| c.window.end)
        .window(slide)
        .name("q5-max")
        .aggregate(MostBids)
        .flat_map(|r: WindowResult<Millis, (u64, Vec<u64>)>| {
            let (count, auctions) = r.value;
            let end = r.key;
            auctions.into_iter().map(move |auction| HotItem {
                window_start: end - Q5_SIZE_MS,
                window_end: end,
                auction,
                count,
            })
        })
        .name("q5")
}

/// The largest count of a window and the auctions that have it.
#[derive(Debug, Clone, Copy)]
struct MostBids;

impl AggregateFunction<WindowResult<u64, u64>> for MostBids {
    type Acc = (u64, Vec<u64>);
    type Out = (u64, Vec<u64>);

    fn create_accumulator(&self) -> Self::Acc {
        (0, Vec::new())
    }

    fn add(&self, acc: &mut Self::Acc, c: &WindowResult<u64, u64>) {
        add_count(acc, c.value, c.key);
    }

    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc) {
        for auction in other.1 {
            add_count(acc, other.0, auction);
        }
    }

    fn get_result(&self, acc: &Self::Acc) -> Self::Out {
        acc.clone()
    }
}

fn add_count(acc: &mut (u64, Vec<u64>), count: u64, auction: u64) {
    if count > acc.0 {
        acc.0 = count;
        acc.1.clear();
    }
    if count == acc.0 {
        acc.1.push(auction);
    }
}
