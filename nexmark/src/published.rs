//! Flink's published Nexmark figures, printed beside brook's by `brook nexmark --all`.
//!
//! Source: the nexmark/nexmark project's README, "Nexmark Benchmark Result" (Flink
//! 1.13; 3 worker nodes of 8 cores; parallelism 8; RocksDB state with incremental
//! checkpoints every 3 minutes; mini-batches of 2 s; 100 M events from the datagen
//! source at 10 M per second), column "Throughput/Cores": events per second per core
//! used. brook's figure to compare is events per CPU-second of the whole process.

use crate::run::Query;

/// Where [`flink_events_per_core_sec`] comes from, for the printed table.
pub const FLINK_SOURCE: &str =
    "nexmark/nexmark README, Flink 1.13, 3 x 8 cores, parallelism 8, RocksDB, \
     checkpoints every 3 min: Throughput/Cores";

/// Flink's events per second per core for `query`, where the source publishes one.
pub fn flink_events_per_core_sec(query: Query) -> Option<f64> {
    Some(match query {
        Query::Q0 => 155_020.0,
        Query::Q1 => 157_940.0,
        Query::Q2 => 175_210.0,
        Query::Q3 => 152_120.0,
        Query::Q4 => 34_330.0,
        Query::Q5 => 22_140.0,
        Query::Q7 => 12_330.0,
        Query::Q8 => 146_140.0,
        Query::Q11 => 39_700.0,
        Query::Q12 => 75_670.0,
    })
}
