//! q8, new users: the persons who registered and opened an auction within the same
//! 10 s tumbling window, as the reference query (persons per window joined to the
//! auctions' sellers grouped per window: one result per person and window however many
//! auctions they opened).
//!
//! The auctions are counted per seller and window first (the reference's `GROUP BY
//! seller, window`; a count's timestamp is its window's end − 1, so it stays in its
//! window), then window-joined to the persons by id in the same windows.

use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::window::aggregate::Count;
use brook_operators::window::assigner::TumblingEventTimeWindows;
use brook_operators::window::WindowResult;
use serde::{Deserialize, Serialize};

use crate::model::{Auction, Event, Person};

/// The tumbling window's size (ms).
pub const Q8_SIZE_MS: Millis = 10_000;

/// A person who registered and opened an auction in the same window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NewUser {
    /// The person's id.
    pub id: u64,
    /// The person's name.
    pub name: String,
    /// The window's first millisecond.
    pub window_start: Millis,
}

/// The persons who opened an auction in the window they registered in.
pub fn q8(events: DataStream<Event>) -> DataStream<NewUser> {
    // The size is a constant that passes the assigners' checks; tumbling event-time
    // windows are windows a join takes.
    #[allow(clippy::unwrap_used)]
    let tumbling = TumblingEventTimeWindows::of(Q8_SIZE_MS).unwrap();
    let persons = events
        .clone()
        .flat_map(Event::into_person)
        .name("q8-persons")
        .key_by(|p: &Person| p.id);
    let sellers = events
        .flat_map(Event::into_auction)
        .name("q8-auctions")
        .key_by(|a: &Auction| a.seller)
        .window(tumbling)
        .name("q8-sellers")
        .aggregate(Count)
        .key_by(|s: &WindowResult<u64, u64>| s.key);
    #[allow(clippy::unwrap_used)]
    persons
        .window_join(sellers, tumbling)
        .unwrap()
        .name("q8")
        .apply(|p: &Person, s: Option<&WindowResult<u64, u64>>| NewUser {
            id: p.id,
            name: p.name.clone(),
            // An inner join: `s` is there. Without it, the person's own window.
            window_start: s.map_or(p.date_time.div_euclid(Q8_SIZE_MS) * Q8_SIZE_MS, |s| {
                s.window.start
            }),
        })
}
