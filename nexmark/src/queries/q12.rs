//! q12, processing-time windows: per bidder, the number of bids in each tumbling
//! window of 10 s of *processing* time, as the reference query (`GROUP BY bidder,
//! TUMBLE(PROCTIME(), INTERVAL '10' SECOND)`). Which window a bid lands in depends on
//! when it is processed, so only the totals per bidder are repeatable: every bid is
//! counted in exactly one window.

use brook_core::time::Millis;
use brook_engine::DataStream;
use brook_operators::window::aggregate::Count;
use brook_operators::window::assigner::TumblingProcessingTimeWindows;
use brook_operators::window::WindowResult;
use serde::{Deserialize, Serialize};

use crate::model::{Bid, Event};

/// The tumbling window's size (ms of processing time).
pub const Q12_SIZE_MS: Millis = 10_000;

/// One bidder's bids in one processing-time window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BidderCount {
    /// The bidder (a person's id).
    pub bidder: u64,
    /// The bids processed in the window.
    pub bid_count: u64,
    /// The window's first millisecond (wall clock).
    pub window_start: Millis,
    /// The first millisecond after it.
    pub window_end: Millis,
}

/// The bids of each bidder per 10 s of processing time.
///
/// As in Flink (FLINK-14231: the processing-time service is quiesced when the input
/// ends), a window still open when a bounded input ends is not fired: a run over a
/// fixed number of events loses its last window's counts.
pub fn q12(events: DataStream<Event>) -> DataStream<BidderCount> {
    q12_windows(events, Q12_SIZE_MS)
}

/// [`q12`] with windows of `size_ms` of processing time (tests use short ones).
///
/// # Panics
/// When `size_ms <= 0`.
pub fn q12_windows(events: DataStream<Event>, size_ms: Millis) -> DataStream<BidderCount> {
    let tumbling = match TumblingProcessingTimeWindows::of(size_ms) {
        Ok(t) => t,
        Err(e) => panic!("q12's window: {e}"),
    };
    events
        .flat_map(Event::into_bid)
        .key_by(|b: &Bid| b.bidder)
        .window(tumbling)
        .name("q12-windows")
        .aggregate(Count)
        .map(|r: WindowResult<u64, u64>| BidderCount {
            bidder: r.key,
            bid_count: r.value,
            window_start: r.window.start,
            window_end: r.window.end,
        })
        .name("q12")
}
