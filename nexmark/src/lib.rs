//! The Nexmark benchmark on brook (issue 22): persons, auctions and bids of an online
//! auction, and the queries every streaming engine publishes figures for.
//!
//! - [`config`]: [`NexmarkConfig`], the generator's settings with the reference's
//!   defaults.
//! - [`model`]: the records, [`Person`], [`Auction`], [`Bid`] and the [`Event`] that is
//!   one of them.
//! - [`generator`]: the reference generator's model as pure functions of the event
//!   number ([`Generator`]).
//! - [`source`]: [`NexmarkSource`], the generator as a parallel, checkpointable brook
//!   source.
//! - [`queries`]: the queries with the builder API.
//! - [`run`]: a query into a counting sink, timed ([`run::run`], for `brook nexmark`).
//! - [`latency`]: end-to-end latency percentiles of a run at a rate.
//! - [`published`]: Flink's published figures, for comparison.
//! - [`recovery`]: how fast a killed run is current again, from its latencies.
//!
//! Must not know about: the `brook` binary, YAML jobs.
//!
//! # Example
//! ```
//! use brook_engine::testing::CollectSink;
//! use brook_engine::{JobConfig, StreamEnvironment};
//! use brook_nexmark::{queries, NexmarkConfig, NexmarkSource};
//!
//! let source = NexmarkSource::new(NexmarkConfig { events: 1_000, ..Default::default() }).unwrap();
//! let bids = source.events().filter_map(|e| e.into_bid()).count();
//! let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
//! let out = CollectSink::new();
//! let strategy = source.watermark_strategy();
//! queries::q0(env.from_source(source, strategy)).sink(out.clone());
//! env.execute("q0").unwrap();
//! assert_eq!(out.values().len(), bids);
//! ```

pub mod config;
pub mod generator;
pub mod latency;
pub mod model;
pub mod published;
pub mod queries;
pub mod recovery;
pub mod run;
pub mod source;

pub use config::NexmarkConfig;
pub use generator::Generator;
pub use model::{Auction, Bid, Event, Person};
pub use source::NexmarkSource;
