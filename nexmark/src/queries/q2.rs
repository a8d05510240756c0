//! q2, selection: `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0` (the
//! reference's modulus).

use brook_engine::DataStream;
use serde::{Deserialize, Serialize};

use crate::model::Event;

/// q2 keeps the bids on auctions whose id is a multiple of this.
pub const Q2_AUCTION_MODULUS: u64 = 123;

/// An auction's id and a bid's price on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AuctionPrice {
    /// The auction's id.
    pub auction: u64,
    /// The bid's price (cents).
    pub price: u64,
}

/// The bids on every 123rd auction.
pub fn q2(events: DataStream<Event>) -> DataStream<AuctionPrice> {
    events
        .flat_map(|e: Event| match e {
            Event::Bid(b) if b.auction % Q2_AUCTION_MODULUS == 0 => Some(AuctionPrice {
                auction: b.auction,
                price: b.price,
            }),
            _ => None,
        })
        .name("q2")
}
