//! q1, currency conversion: `SELECT auction, bidder, 0.908 * price AS price, dateTime,
//! extra FROM bid` (the reference's rate, dollars to euros).

use brook_core::time::Millis;
use brook_engine::DataStream;
use serde::{Deserialize, Serialize};

use crate::model::{Bid, Event};

/// Euros per dollar in q1 (the reference query's constant).
pub const DOLLAR_TO_EURO: f64 = 0.908;

/// A bid with its price in euros.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EuroBid {
    /// The auction's id.
    pub auction: u64,
    /// The bidder's person id.
    pub bidder: u64,
    /// The bid's price × [`DOLLAR_TO_EURO`] (cents).
    pub price: f64,
    /// When the bid was made (ms).
    pub date_time: Millis,
    /// The bid's padding.
    pub extra: String,
}

impl EuroBid {
    /// `bid` in euros.
    pub fn of(bid: Bid) -> Self {
        EuroBid {
            auction: bid.auction,
            bidder: bid.bidder,
            price: DOLLAR_TO_EURO * bid.price as f64,
            date_time: bid.date_time,
            extra: bid.extra,
        }
    }
}

/// Every bid, its price in euros.
pub fn q1(events: DataStream<Event>) -> DataStream<EuroBid> {
    events
        .flat_map(|e: Event| e.into_bid().map(EuroBid::of))
        .name("q1")
}
