//! brook: a dataflow stream-processing engine in one binary, with an embedded
//! partitioned log as its default source and sink.
//!
//! This crate re-exports brook's public API and provides the `brook` binary:
//!
//! - [`prelude`]: what a job written in Rust needs, in Flink's vocabulary;
//! - [`core`]: shared vocabulary (records, time, keys, the Operator/Source/Sink traits);
//! - [`engine`]: the runtime and builder API ([`engine::StreamEnvironment`]);
//! - [`operators`], [`state`], [`connectors`]: operators, keyed state, sources and sinks;
//! - [`log`]: the embedded, Kafka-like partitioned log with consumer groups;
//! - [`spec`]: YAML job specs, as run by `brook run`;
//! - [`runner`]: the runner service (`brook runner`), its clients, and the contract
//!   with the job processes it supervises;
//! - [`verify`]: the decisions of `brook verify` (kill schedule, output comparison,
//!   arrival-order rule).
//! - [`ui`]: the web dashboard the runner serves at `/` (and `brook run --ui`).
//!
//! # Example
//! ```
//! use brook::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Sale { student: String, item: String, price_cents: i64 }
//!
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Tally { student: String, n: u64 }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let sales = dir.path().join("sales.jsonl");
//! # let out = dir.path().join("out.jsonl");
//! # std::fs::write(&sales, "{\"student\":\"mia\",\"item\":\"chocolate milk\",\"price_cents\":120}\n{\"student\":\"leo\",\"item\":\"apple\",\"price_cents\":50}\n")?;
//! let env = StreamEnvironment::new(JobConfig::default());
//! env.source(FileSource::jsonl::<Sale>(sales))
//!     .filter(|s| s.item == "chocolate milk")
//!     .key_by(|s| s.student.clone())
//!     .map(|s| Tally { student: s.student, n: 1 })
//!     .sink(FileSink::jsonl(&out));
//! env.execute("sales")?;
//! # assert_eq!(std::fs::read_to_string(&out)?, "{\"student\":\"mia\",\"n\":1}\n");
//! # Ok(()) }
//! ```
//!
//! # Event time and windows
//! ```
//! use brook::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Sale { item: String, price_cents: i64, ts: i64 }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let sales = dir.path().join("sales.jsonl");
//! # let (out, late_out) = (dir.path().join("out.jsonl"), dir.path().join("late.jsonl"));
//! # std::fs::write(&sales, concat!(
//! #     "{\"item\":\"apple\",\"price_cents\":50,\"ts\":1000}\n",
//! #     "{\"item\":\"apple\",\"price_cents\":60,\"ts\":61000}\n",
//! #     "{\"item\":\"apple\",\"price_cents\":70,\"ts\":95000}\n",
//! #     "{\"item\":\"apple\",\"price_cents\":80,\"ts\":2000}\n"))?;
//! let env = StreamEnvironment::new(JobConfig::default());
//! let late = OutputTag::<Sale>::new("late");
//! let per_minute = env
//!     .from_source(
//!         FileSource::jsonl::<Sale>(sales),
//!         WatermarkStrategy::for_bounded_out_of_orderness(30_000) // ms
//!             .with_timestamp_assigner(|s: &Sale, _| s.ts)
//!             // A watermark after every record (default: every 200 ms), so that the
//!             // sale at 2 s is late here whatever the speed of the machine.
//!             .with_emit_interval(0),
//!     )
//!     .key_by(|s| s.item.clone())
//!     .window(TumblingEventTimeWindows::of(60_000)?)
//!     .side_output_late_data(&late)
//!     .aggregate((Count, Sum::of(|s: &Sale| s.price_cents)));
//! per_minute.get_side_output(&late)?.sink(FileSink::jsonl(&late_out));
//! per_minute
//!     .map(|r| (r.key, r.window.start, r.value))
//!     .sink(FileSink::jsonl(&out));
//! env.execute("per-minute")?;
//! # assert_eq!(std::fs::read_to_string(&out)?, "[\"apple\",0,[1,50]]\n[\"apple\",60000,[2,130]]\n");
//! # assert!(std::fs::read_to_string(&late_out)?.contains("\"ts\":2000"));
//! # Ok(()) }
//! ```

pub use brook_connectors as connectors;
pub use brook_core as core;
pub use brook_engine as engine;
/// The Kafka connector (librdkafka).
pub use brook_kafka as kafka;
pub use brook_log as log;
/// The Nexmark benchmark: its generator and queries (`brook nexmark`).
pub use brook_nexmark as nexmark;
pub use brook_operators as operators;
pub use brook_state as state;

pub mod log_metrics;
pub mod runner;
pub mod spec;
pub mod ui;
pub mod verify;

/// The names a job written in Rust uses most.
pub mod prelude {
    pub use brook_connectors::{
        FileSink, FileSource, GeneratorEvent, GeneratorSource, LogSink, LogSource, StdoutSink,
    };
    pub use brook_core::bad_record::BadRecordPolicy;
    pub use brook_core::element::StreamRecord;
    pub use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
    pub use brook_core::time::{Millis, Watermark};
    pub use brook_core::watermark::WatermarkStrategy;
    pub use brook_engine::{
        DataStream, EngineError, JobConfig, KeyedStream, OutputTag, StateBackendFactory,
        StreamEnvironment, WindowedStream,
    };
    pub use brook_operators::process::{KeyedContext, KeyedProcessFunction};
    pub use brook_operators::window::{
        AggregateFunction, Avg, Count, CountDistinct, EventTimeSessionWindows, First, Last, Max,
        Min, ProcessWindowFunction, SlidingEventTimeWindows, Sum, TimeWindow, Trigger,
        TumblingEventTimeWindows, WindowResult,
    };
    pub use brook_state::{
        AggregatingStateDescriptor, ReducingStateDescriptor, RocksDbOptions, StateDescriptor,
        StateTtl, TimeDomain,
    };
}
