//! `run`: a query into the counting sink reports every event and the query's rows.
#![allow(clippy::unwrap_used)]

use brook_engine::JobConfig;
use brook_nexmark::run::{run, Query};
use brook_nexmark::{Event, NexmarkConfig, NexmarkSource};

#[test]
fn a_run_counts_the_events_and_the_rows_out() {
    let config = NexmarkConfig {
        events: 10_000,
        ..NexmarkConfig::default()
    };
    let source = NexmarkSource::new(config).unwrap();
    let bids = source
        .events()
        .filter_map(Event::into_bid)
        .collect::<Vec<_>>();
    let selected = bids.iter().filter(|b| b.auction % 123 == 0).count() as u64;
    assert!(selected > 0);
    for (query, want) in [(Query::Q0, bids.len() as u64), (Query::Q2, selected)] {
        let report = run(query, source.clone(), JobConfig::with_parallelism(2)).unwrap();
        assert_eq!(report.events, 10_000);
        assert_eq!(report.rows, want, "{query:?}");
        assert!(report.secs > 0.0 && report.events_per_sec() > 0.0);
    }
}

#[test]
fn queries_parse_by_name() {
    assert_eq!("q5".parse::<Query>(), Ok(Query::Q5));
    assert_eq!("Q7".parse::<Query>(), Ok(Query::Q7));
    assert_eq!("q4".parse::<Query>(), Ok(Query::Q4));
    let err = "q6".parse::<Query>().unwrap_err().to_string();
    assert!(err.contains("\"q6\"") && err.contains("q12"), "{err}");
}
