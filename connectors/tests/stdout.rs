#![allow(clippy::unwrap_used)]
//! The stdout sink through the engine (its encoding is unit-tested in the crate).

use brook_connectors::StdoutSink;
use brook_engine::testing::VecSource;
use brook_engine::{JobConfig, StreamEnvironment};

#[test]
fn a_job_prints_to_stdout() {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
    env.source(VecSource::new(vec![
        serde_json::json!({"stdout_sink_test": 1}),
        serde_json::json!({"stdout_sink_test": 2}),
    ]))
    .sink(StdoutSink::new());
    let result = env.execute("print").unwrap();
    let (_, sink) = result.vertices.last().unwrap();
    assert_eq!(sink.records_in, 2);
}
