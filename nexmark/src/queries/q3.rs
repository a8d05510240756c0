//! q3, local item suggestion: `SELECT P.name, P.city, P.state, A.id FROM auction A JOIN
//! person P ON A.seller = P.id WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')`,
//! the reference query: a stateful join of every auction to its seller, whichever
//! comes first (a seller may register after opening an auction, as in the reference
//! generator).
//!
//! A regular join, as the reference's, is an interval join over all of time: each
//! side waits in keyed state until the input ends (state grows with the persons and
//! auctions that pass the filters, as Flink's regular join without a state TTL).

use brook_core::time::Millis;
use brook_engine::DataStream;
use serde::{Deserialize, Serialize};

use crate::model::{Auction, Event, Person};

/// q3 keeps the auctions of this category.
pub const Q3_CATEGORY: u64 = 10;
/// q3 keeps the sellers of these states.
pub const Q3_STATES: [&str; 3] = ["OR", "ID", "CA"];

/// An auction of category 10 and its seller from Oregon, Idaho or California.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LocalItem {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: String,
    /// The seller's state.
    pub state: String,
    /// The auction's id.
    pub auction: u64,
}

/// The auctions of category 10 joined to their sellers of OR, ID or CA.
pub fn q3(events: DataStream<Event>) -> DataStream<LocalItem> {
    let auctions = events
        .clone()
        .flat_map(|e: Event| e.into_auction().filter(|a| a.category == Q3_CATEGORY))
        .name("q3-auctions")
        .key_by(|a: &Auction| a.seller);
    let persons = events
        .flat_map(|e: Event| {
            e.into_person()
                .filter(|p| Q3_STATES.contains(&p.state.as_ref()))
        })
        .name("q3-persons")
        .key_by(|p: &Person| p.id);
    // All of time: the bounds saturate (lower <= upper, so this cannot fail).
    #[allow(clippy::unwrap_used)]
    auctions
        .interval_join(persons, Millis::MIN, Millis::MAX)
        .unwrap()
        .name("q3")
        .apply(|a: &Auction, p: Option<&Person>| LocalItem {
            // An inner join: `p` is there.
            name: p.map(|p| p.name.clone()).unwrap_or_default(),
            city: p.map(|p| p.city.to_string()).unwrap_or_default(),
            state: p.map(|p| p.state.to_string()).unwrap_or_default(),
            auction: a.id,
        })
}
