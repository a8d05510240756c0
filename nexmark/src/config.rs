//! [`NexmarkConfig`]: the generator's settings, with the reference generator's defaults
//! (Beam's `NexmarkConfiguration` / the nexmark/nexmark project's), and their checks.

use brook_connectors::ConnectorError;
use brook_core::time::Millis;

/// The largest out-of-order group: the generator permutes events within groups (see
/// [`NexmarkConfig::out_of_order_group_size`]) with a multiplier that is prime and
/// larger, so the permutation is one for every group size up to this.
pub const MAX_OUT_OF_ORDER_GROUP_SIZE: u64 = 1_000_000;

/// Settings of the Nexmark generator.
#[derive(Debug, Clone, PartialEq)]
pub struct NexmarkConfig {
    /// How many events in total. Default 100,000.
    pub events: u64,
    /// Event time between consecutive events, in µs (at least 1). Default 100: the
    /// reference's 10,000 events per second of event time.
    pub inter_event_delay_us: u64,
    /// The event time of event 0 (ms since the epoch). Default 1,700,000,000,000
    /// (2023-11-14T22:13:20Z): fixed, so that runs compare.
    pub base_time_ms: Millis,
    /// Of `r` bids, `r - 1` go to the newest hot auction (every 100th), the others to a
    /// recent one (at least 1; 1: none). Default 2, the reference's.
    pub hot_auction_ratio: u64,
    /// Of `r` auctions, `r - 1` are opened by the newest hot seller (every 100th
    /// person), the others by a recent person (at least 1). Default 4.
    pub hot_seller_ratio: u64,
    /// Of `r` bids, `r - 1` are made by the newest hot bidder (every 100th person,
    /// plus one), the others by a recent person (at least 1). Default 4.
    pub hot_bidder_ratio: u64,
    /// Events come out of event-time order within groups of this many consecutive
    /// events (1 to 1,000,000; 1: in order). Default 1. Event times then lag the
    /// newest by up to [`NexmarkConfig::max_out_of_orderness_ms`].
    pub out_of_order_group_size: u64,
    /// How many splits (at least 1): the most subtasks with events to read; a
    /// checkpoint restores only with the same number. Default 16.
    pub splits: u32,
    /// Events per second of processing time over all subtasks, or as fast as possible
    /// (`None`, the default).
    pub rate: Option<f64>,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            events: 100_000,
            inter_event_delay_us: 100,
            base_time_ms: 1_700_000_000_000,
            hot_auction_ratio: 2,
            hot_seller_ratio: 4,
            hot_bidder_ratio: 4,
            out_of_order_group_size: 1,
            splits: 16,
            rate: None,
        }
    }
}

impl NexmarkConfig {
    /// The event time of event number `e` (ms): `base_time_ms + e × delay / 1000`,
    /// rounded down.
    pub fn timestamp(&self, e: u64) -> Millis {
        // `check` made sure the times of 0..events fit; wrap (never panic) beyond.
        let offset = u128::from(e) * u128::from(self.inter_event_delay_us) / 1000;
        self.base_time_ms.wrapping_add(offset as Millis)
    }

    /// How far behind the newest event time an event may come (ms): the time spanned
    /// by one out-of-order group. The bound of the jobs' watermarks.
    pub fn max_out_of_orderness_ms(&self) -> Millis {
        let span = u128::from(self.out_of_order_group_size.saturating_sub(1))
            * u128::from(self.inter_event_delay_us);
        // Rounded up: a group of g events spans (g - 1) delays.
        span.div_ceil(1000).min(Millis::MAX as u128) as Millis
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ConnectorError::Config`] naming the setting: a ratio, delay or group size out
    /// of its range, event times that do not fit in an `i64`.
    pub fn check(&self) -> Result<(), ConnectorError> {
        let bad =
            |field: &'static str, reason: String| Err(ConnectorError::Config { field, reason });
        for (field, r) in [
            ("hot_auction_ratio", self.hot_auction_ratio),
            ("hot_seller_ratio", self.hot_seller_ratio),
            ("hot_bidder_ratio", self.hot_bidder_ratio),
        ] {
            if r == 0 {
                return bad(field, "must be at least 1".into());
            }
        }
        if self.inter_event_delay_us == 0 {
            return bad("inter_event_delay_us", "must be at least 1 µs".into());
        }
        if !(1..=MAX_OUT_OF_ORDER_GROUP_SIZE).contains(&self.out_of_order_group_size) {
            return bad(
                "out_of_order_group_size",
                format!(
                    "must be 1 to {MAX_OUT_OF_ORDER_GROUP_SIZE}, not {}",
                    self.out_of_order_group_size
                ),
            );
        }
        let last = i128::from(self.base_time_ms)
            + i128::from(self.events) * i128::from(self.inter_event_delay_us) / 1000;
        if Millis::try_from(last).is_err() {
            return bad(
                "inter_event_delay_us",
                format!(
                    "the event time of event {} does not fit in 64 bits",
                    self.events
                ),
            );
        }
        Ok(())
    }
}
