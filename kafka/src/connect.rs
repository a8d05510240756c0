//! Reaching the brokers when a source or sink starts: bounded, and visible.
//!
//! librdkafka retries an unreachable bootstrap address for ever, and its own timeouts
//! bound one connection attempt (`socket.connection.setup.timeout.ms`) or one request,
//! not the wait as a whole: `bootstrap: 127.0.0.1:1` used to print nothing for
//! minutes (issue 15). So a source or sink first asks for its topic's metadata in
//! attempts of at most [`REPORT_EVERY_MS`], warns after each failed one naming the
//! address ("cannot reach Kafka at 127.0.0.1:1 (retrying; 5 s of 60 s)"), and gives up
//! after its `connect_timeout` (default [`DEFAULT_CONNECT_TIMEOUT_MS`], as the Java
//! clients' `max.block.ms` and `default.api.timeout.ms`) with
//! [`KafkaConnectorError::Unreachable`].

use std::time::Duration;

use brook_core::time::Stopwatch;
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::ClientContext;

use crate::KafkaConnectorError;

/// How long a source or sink waits for its brokers by default (ms): 60 s, as the Java
/// clients' `max.block.ms` (producer) and `default.api.timeout.ms` (consumer).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 60_000;

/// The longest metadata attempt (ms): how often a waiting client says so.
pub const REPORT_EVERY_MS: u64 = 5_000;

/// How long the next metadata attempt may take after `elapsed_ms` of waiting with a
/// budget of `timeout_ms`: up to [`REPORT_EVERY_MS`], never past the budget; `None`
/// once the budget is spent (give up). The first attempt always gets some time, even
/// with a zero budget.
pub fn next_attempt_ms(elapsed_ms: u64, timeout_ms: u64) -> Option<u64> {
    if elapsed_ms >= timeout_ms.max(1) {
        return None;
    }
    Some((timeout_ms.max(1) - elapsed_ms).min(REPORT_EVERY_MS))
}

/// The line a client waiting for `bootstrap` logs after a failed attempt.
pub fn retry_message(bootstrap: &str, elapsed_ms: u64, timeout_ms: u64) -> String {
    format!(
        "cannot reach Kafka at {bootstrap} (retrying; {} s of {} s)",
        elapsed_ms / 1000,
        timeout_ms.div_ceil(1000)
    )
}

/// Fetches the metadata of `topic` (of the cluster when `None`: no topic is created
/// by asking) through `client`, retrying for up to `timeout_ms` and warning after each
/// failed attempt (see the module docs).
///
/// # Errors
/// [`KafkaConnectorError::Unreachable`] naming `bootstrap`, with librdkafka's last
/// error, when no broker answered within `timeout_ms`.
pub(crate) fn topic_metadata<C: ClientContext>(
    client: &Client<C>,
    bootstrap: &str,
    topic: Option<&str>,
    timeout_ms: u64,
) -> Result<Metadata, KafkaConnectorError> {
    let clock = Stopwatch::start();
    let elapsed_ms = || clock.elapsed_nanos() / 1_000_000;
    let mut last: Option<KafkaError> = None;
    while let Some(attempt_ms) = next_attempt_ms(elapsed_ms(), timeout_ms) {
        let started = elapsed_ms();
        match client.fetch_metadata(topic, Duration::from_millis(attempt_ms)) {
            Ok(md) => return Ok(md),
            Err(e) => {
                // An attempt that failed at once (a refused name lookup) is not repeated
                // in a busy loop: the rest of its slot is waited out, so the warnings
                // come every REPORT_EVERY_MS.
                let used = elapsed_ms().saturating_sub(started);
                std::thread::sleep(Duration::from_millis(attempt_ms.saturating_sub(used)));
                let now = elapsed_ms();
                if next_attempt_ms(now, timeout_ms).is_some() {
                    tracing::warn!(error = %e, "{}", retry_message(bootstrap, now, timeout_ms));
                }
                last = Some(e);
            }
        }
    }
    Err(KafkaConnectorError::Unreachable {
        bootstrap: bootstrap.to_string(),
        timeout_ms,
        source: last.unwrap_or(KafkaError::MetadataFetch(
            RDKafkaErrorCode::OperationTimedOut,
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_fill_the_budget_in_report_sized_slots() {
        // 12 s of budget: 5 s, 5 s, then the 2 s left, then give up.
        assert_eq!(next_attempt_ms(0, 12_000), Some(5_000));
        assert_eq!(next_attempt_ms(5_000, 12_000), Some(5_000));
        assert_eq!(next_attempt_ms(10_000, 12_000), Some(2_000));
        assert_eq!(next_attempt_ms(11_999, 12_000), Some(1));
        // Exactly at the budget: spent.
        assert_eq!(next_attempt_ms(12_000, 12_000), None);
        assert_eq!(next_attempt_ms(30_000, 12_000), None);
        // A short budget is one attempt of that length.
        assert_eq!(next_attempt_ms(0, 3_000), Some(3_000));
        // A zero budget still makes one attempt.
        assert_eq!(next_attempt_ms(0, 0), Some(1));
    }

    #[test]
    fn the_retry_message_names_the_address_and_the_budget() {
        assert_eq!(
            retry_message("127.0.0.1:1", 10_400, 60_000),
            "cannot reach Kafka at 127.0.0.1:1 (retrying; 10 s of 60 s)"
        );
        assert_eq!(
            retry_message("b:9092", 0, 2_500),
            "cannot reach Kafka at b:9092 (retrying; 0 s of 3 s)"
        );
    }
}
