//! q0, pass-through: `SELECT auction, bidder, price, dateTime, extra FROM bid`. Measures
//! the cost of reading the events and the job around a query.

use brook_engine::DataStream;

use crate::model::{Bid, Event};

/// Every bid, unchanged.
pub fn q0(events: DataStream<Event>) -> DataStream<Bid> {
    events.flat_map(Event::into_bid).name("q0")
}
