//! q11, user sessions: per bidder, the number of bids in each session of activity that
//! ends after 10 s without a bid, as the reference query (`GROUP BY bidder,
//! SESSION(dateTime, INTERVAL '10' SECOND)`). A session is `[first bid, last bid +
//! 10 s)`, as Flink's `EventTimeSessionWindows` (docs/semantics.md §3).

use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::window::aggregate::Count;
use brook_operators::window::assigner::EventTimeSessionWindows;
use brook_operators::window::WindowResult;
use serde::{Deserialize, Serialize};

use crate::model::{Bid, Event};

/// The session gap (ms).
pub const Q11_GAP_MS: Millis = 10_000;

/// One bidder's bids in one session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BidderSession {
    /// The bidder (a person's id).
    pub bidder: u64,
    /// The bids in the session.
    pub bid_count: u64,
    /// The session's first bid's time.
    pub start: Millis,
    /// Its last bid's time + the gap.
    pub end: Millis,
}

/// The bids of each bidder's sessions.
pub fn q11(events: DataStream<Event>) -> DataStream<BidderSession> {
    // The gap is a constant that passes the assigner's check.
    #[allow(clippy::unwrap_used)]
    let sessions = EventTimeSessionWindows::with_gap(Q11_GAP_MS).unwrap();
    events
        .flat_map(Event::into_bid)
        .key_by(|b: &Bid| b.bidder)
        .window(sessions)
        .name("q11-sessions")
        .aggregate(Count)
        .map(|r: WindowResult<u64, u64>| BidderSession {
            bidder: r.key,
            bid_count: r.value,
            start: r.window.start,
            end: r.window.end,
        })
        .name("q11")
}
