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
//! - [`spec`]: YAML job specs, as run by `brook run`.
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

pub use brook_connectors as connectors;
pub use brook_core as core;
pub use brook_engine as engine;
pub use brook_log as log;
pub use brook_operators as operators;
pub use brook_state as state;

pub mod spec;

/// The names a job written in Rust uses most.
pub mod prelude {
    pub use brook_connectors::{
        FileSink, FileSource, GeneratorEvent, GeneratorSource, LogSink, LogSource, StdoutSink,
    };
    pub use brook_core::bad_record::BadRecordPolicy;
    pub use brook_core::element::StreamRecord;
    pub use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
    pub use brook_core::time::{Millis, Watermark};
    pub use brook_engine::{DataStream, EngineError, JobConfig, KeyedStream, StreamEnvironment};
    pub use brook_operators::process::{KeyedContext, KeyedProcessFunction};
    pub use brook_state::{StateDescriptor, TimeDomain};
}
