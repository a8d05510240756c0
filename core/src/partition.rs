//! How records travel along a job-graph edge from upstream to downstream subtasks.

use std::fmt;

/// The partitioning of an edge (Flink's `StreamPartitioner`s; timely's "pact").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partitioner {
    /// Subtask `i` sends to subtask `i` (equal parallelism); such edges are chained.
    Forward,
    /// Batches are dealt round-robin to all downstream subtasks.
    Rebalance,
    /// Each record goes to the subtask owning its key's key group.
    KeyGroups,
    /// Every record goes to every downstream subtask.
    Broadcast,
}

impl fmt::Display for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Partitioner::Forward => "forward",
            Partitioner::Rebalance => "rebalance",
            Partitioner::KeyGroups => "hash",
            Partitioner::Broadcast => "broadcast",
        })
    }
}
