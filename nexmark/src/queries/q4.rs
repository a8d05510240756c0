//! q4, average price for a category: per category, the average of the closing prices
//! of its auctions, as the reference query (the highest bid of each auction among the
//! bids made while it was open, `B.dateTime BETWEEN A.dateTime AND A.expires`, then
//! `AVG` per category over the auctions with such a bid). An updating result: each
//! auction that closes emits its category's new average.
//!
//! Three stages: auctions interval-joined to their bids (keyed by auction; a bid up
//! to the longest auction after its auction's start, then only those until its
//! `expires`); the highest price per auction, emitted by an event-time timer at the
//! auction's `expires` (when the watermark passes it no bid of its open time can
//! still come); the running sum and count per category.

use brook_core::operator::{OpResult, OperatorError, Output};
use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::process::{KeyedContext, KeyedProcessFunction};
use brook_state::{StateDescriptor, StateError, TimeDomain};
use serde::{Deserialize, Serialize};

use crate::model::{Auction, Bid, Event};

/// A category's average closing price after one more of its auctions closed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryAverage {
    /// The category.
    pub category: u64,
    /// The average closing price (cents).
    pub average: f64,
    /// The closing prices summed (cents).
    pub sum: u64,
    /// The auctions closed with a bid.
    pub auctions: u64,
}

/// A bid made while its auction was open.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenBid {
    auction: u64,
    category: u64,
    expires: Millis,
    price: u64,
}

/// An auction's closing price.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Closed {
    category: u64,
    price: u64,
}

/// The average closing price per category, updated as auctions close.
/// `max_auction_length_ms` is the longest an auction runs
/// ([`crate::generator::max_auction_length_ms`] of the source's settings): how long
/// the join keeps an auction for its bids.
pub fn q4(events: DataStream<Event>, max_auction_length_ms: Millis) -> DataStream<CategoryAverage> {
    let auctions = events
        .clone()
        .flat_map(Event::into_auction)
        .name("q4-auctions")
        .key_by(|a: &Auction| a.id);
    let bids = events
        .flat_map(Event::into_bid)
        .name("q4-bids")
        .key_by(|b: &Bid| b.auction);
    // 0 <= the length: the bounds are ordered, so this cannot fail.
    #[allow(clippy::unwrap_used)]
    auctions
        .interval_join(bids, 0, max_auction_length_ms.max(0))
        .unwrap()
        .name("q4-join")
        .apply(|a: &Auction, b: Option<&Bid>| {
            // An inner join: `b` is there.
            let (price, time) = b.map_or((0, Millis::MAX), |b| (b.price, b.date_time));
            (
                OpenBid {
                    auction: a.id,
                    category: a.category,
                    expires: a.expires,
                    price,
                },
                time,
            )
        })
        .filter(|(b, time): &(OpenBid, Millis)| *time <= b.expires)
        .map(|(b, _)| b)
        .key_by(|b: &OpenBid| b.auction)
        .process(|| ClosingPrice)
        .name("q4-closing")
        .key_by(|c: &Closed| c.category)
        .process(|| CategoryAverages)
        .name("q4")
}

const HIGHEST: StateDescriptor<Closed> = StateDescriptor::new("highest");

/// The highest bid of an auction, emitted when it closes.
struct ClosingPrice;

impl KeyedProcessFunction for ClosingPrice {
    type Key = u64;
    type In = OpenBid;
    type Out = Closed;

    fn process_element(
        &mut self,
        b: OpenBid,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Output<Closed>,
    ) -> OpResult {
        let highest = ctx.state().value(&HIGHEST).get().map_err(state_err)?;
        if highest.is_none() {
            // The auction's first bid: it closes at its `expires`.
            ctx.register_event_time_timer(b.expires);
        }
        if highest.as_ref().is_none_or(|h| b.price > h.price) {
            ctx.state()
                .value(&HIGHEST)
                .set(&Closed {
                    category: b.category,
                    price: b.price,
                })
                .map_err(state_err)?;
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Output<Closed>,
    ) -> OpResult {
        if let Some(h) = ctx.state().value(&HIGHEST).get().map_err(state_err)? {
            out.collect(h, Some(timestamp));
        }
        ctx.state().value(&HIGHEST).clear().map_err(state_err)?;
        Ok(())
    }
}

const TOTALS: StateDescriptor<(u64, u64)> = StateDescriptor::new("totals");

/// The running sum and count of closing prices per category.
struct CategoryAverages;

impl KeyedProcessFunction for CategoryAverages {
    type Key = u64;
    type In = Closed;
    type Out = CategoryAverage;

    fn process_element(
        &mut self,
        c: Closed,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Output<CategoryAverage>,
    ) -> OpResult {
        let (sum, n) = ctx
            .state()
            .value(&TOTALS)
            .get()
            .map_err(state_err)?
            .unwrap_or((0, 0));
        let (sum, n) = (sum + c.price, n + 1);
        ctx.state()
            .value(&TOTALS)
            .set(&(sum, n))
            .map_err(state_err)?;
        out.collect(
            CategoryAverage {
                category: c.category,
                average: sum as f64 / n as f64,
                sum,
                auctions: n,
            },
            ctx.timestamp(),
        );
        Ok(())
    }
}

fn state_err(e: StateError) -> OperatorError {
    OperatorError::failed(format!("q4's state: {e}"))
}
