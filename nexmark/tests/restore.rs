//! The Nexmark source in a checkpointed job: q7 fails part-way at parallelism 1, is
//! restored from its latest complete checkpoint at parallelism 2, and its results are
//! those of the offline computation (the source resumes at its checkpointed positions:
//! it neither starts over nor skips events).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brook_core::time::Millis;
use brook_engine::testing::CollectSink;
use brook_engine::{latest_complete, CheckpointConfig, JobConfig, StreamEnvironment};
use brook_nexmark::queries::{self, Q7_SIZE_MS};
use brook_nexmark::{Bid, Event, NexmarkConfig, NexmarkSource};

const EVENTS: u64 = 20_000;

fn nexmark() -> NexmarkConfig {
    NexmarkConfig {
        events: EVENTS,
        inter_event_delay_us: 2_000,
        out_of_order_group_size: 16,
        ..NexmarkConfig::default()
    }
}

/// q7 with checkpoints every 20 ms, failing at the event of time `fail_at`; returns
/// the results (or the error) and how many events the job read.
fn q7_job(
    dir: &Path,
    parallelism: u32,
    fail_at: Option<Millis>,
    restore: bool,
    out: &CollectSink<Bid>,
) -> (Result<(), String>, u64) {
    let config = JobConfig {
        checkpoint: Some(CheckpointConfig::new(dir, 20)),
        restore: restore.then(|| Arc::new(latest_complete(dir).unwrap())),
        ..JobConfig::with_parallelism(parallelism)
    };
    let env = StreamEnvironment::new(config);
    let source = NexmarkSource::new(nexmark()).unwrap();
    let strategy = source.watermark_strategy();
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    let events = env.from_source(source, strategy).map(move |e: Event| {
        s.fetch_add(1, Ordering::SeqCst);
        // Slow enough for checkpoints to complete between the source's polls.
        std::thread::sleep(Duration::from_micros(20));
        assert!(fail_at != Some(e.date_time()), "injected failure");
        e
    });
    queries::q7(events).sink(out.clone());
    let r = env.execute("q7").map(|_| ()).map_err(|e| e.to_string());
    (r, seen.load(Ordering::SeqCst))
}

#[test]
fn q7_restored_at_another_parallelism_has_the_offline_result() {
    let source = NexmarkSource::new(nexmark()).unwrap();
    let bids: Vec<Bid> = source.events().filter_map(Event::into_bid).collect();
    let mut max: BTreeMap<Millis, u64> = BTreeMap::new();
    for b in &bids {
        let m = max.entry(b.date_time.div_euclid(Q7_SIZE_MS)).or_default();
        *m = (*m).max(b.price);
    }
    let mut want: Vec<Bid> = bids
        .iter()
        .filter(|b| max[&b.date_time.div_euclid(Q7_SIZE_MS)] == b.price)
        .cloned()
        .collect();
    want.sort();

    let dir = tempfile::tempdir().unwrap();
    let out = CollectSink::new();
    // The event three quarters in (a bid or not, it goes through the map).
    let fail_at = source.generator().config().timestamp(EVENTS * 3 / 4);
    let (r, first) = q7_job(dir.path(), 1, Some(fail_at), false, &out);
    assert!(r.unwrap_err().contains("injected failure"));
    assert!(latest_complete(dir.path()).unwrap().id >= 1);
    let (r, second) = q7_job(dir.path(), 2, None, true, &out);
    r.unwrap();
    // The restored job resumed: it did not read everything again.
    assert!(second < EVENTS, "read {second} events after the restore");
    assert!(first + second >= EVENTS);
    // Results emitted before the failure may come again (the collecting sink is not
    // transactional): compare the distinct results.
    let mut got = out.values();
    got.sort();
    got.dedup();
    assert_eq!(got, want);
}
