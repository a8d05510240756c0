//! "Who holds the watermark back": for each operator downstream of a source, the
//! source splits whose watermark is the minimum that gates it, and why.
//!
//! The rule is Flink's: a source subtask's watermark is the minimum over its splits
//! that are not idle, an operator's the minimum over its inputs; an idle split (no
//! record for the source's `idle_timeout`) holds nothing back. So the splits holding an
//! operator back are, among the splits of the sources upstream of it that are not
//! idle, those at the smallest watermark, a split without a record yet (no watermark)
//! smallest of all. A pure function of one status report.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::runner::status::{JobStatus, SplitStatus};

/// An operator and the splits that gate its watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    /// The operator (not a source).
    pub operator: String,
    /// Its watermark (ms), absent before the first.
    pub watermark_ms: Option<i64>,
    /// The splits at the minimum, ranked by source, subtask and split; empty when every
    /// upstream split is idle.
    pub held_by: Vec<Holder>,
}

/// A split that holds an operator's watermark back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The source operator.
    pub source: String,
    /// The source subtask reading it.
    pub subtask: u32,
    /// The split (`topic/partition`, a file).
    pub split: String,
    /// Its watermark (ms), absent before its first record.
    pub watermark_ms: Option<i64>,
    /// Why it is behind.
    pub reason: Reason,
    /// Since when (ms since the epoch) it has held this operator back at this same
    /// watermark, as the server saw it ([`GateClock`]): how long the split has kept
    /// the operator's watermark from moving. A split that gates while its watermark
    /// advances (every split gates some of the time: the minimum is someone's)
    /// starts anew at each advance. Absent from [`gates`] alone.
    #[serde(default)]
    pub since_ms: Option<i64>,
}

/// Why a split holds the watermark back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// It has had no record yet and is not idle: without an `idle_timeout` on the
    /// source it holds every downstream window back until it gets one.
    NoData,
    /// Its reader is behind: records are left to read in it.
    SlowReader,
    /// It is read to its end but not idle: its newest event time is the oldest (the
    /// `idle_timeout` is not set, or not reached yet).
    NoNewData,
    /// The source does not tell how far it has read; its watermark is the smallest.
    Slowest,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::NoData => "no record yet, and the source sets no idle_timeout",
            Reason::SlowReader => "its reader is behind",
            Reason::NoNewData => "no new data, not idle (idle_timeout not set or not reached)",
            Reason::Slowest => "the slowest split",
        })
    }
}

/// The gates of every operator that has a source upstream, in the report's order.
pub fn gates(status: &JobStatus) -> Vec<Gate> {
    let n = status.operators.len();
    // Sources: operators with splits, or without an input edge when edges are known.
    let has_input: BTreeSet<usize> = status.edges.iter().map(|e| e.to).collect();
    let is_source = |i: usize| {
        let name = &status.operators[i].name;
        status.splits.iter().any(|s| &s.operator == name)
            || (!status.edges.is_empty() && !has_input.contains(&i))
    };
    let mut out = Vec::new();
    for (i, op) in status.operators.iter().enumerate() {
        if is_source(i) {
            continue;
        }
        let upstream: BTreeSet<&str> = if status.edges.is_empty() {
            // A report without the graph: every source may feed it.
            (0..n)
                .filter(|&j| is_source(j))
                .map(|j| status.operators[j].name.as_str())
                .collect()
        } else {
            ancestors(status, i)
                .into_iter()
                .filter(|&j| is_source(j))
                .map(|j| status.operators[j].name.as_str())
                .collect()
        };
        let live: Vec<&SplitStatus> = status
            .splits
            .iter()
            .filter(|s| !s.idle && upstream.contains(s.operator.as_str()))
            .collect();
        // `None` (no record yet) orders before every watermark.
        let min = live.iter().map(|s| s.watermark_ms).min();
        // At the final watermark (its input ended) nothing holds it back.
        let ended = op.watermark_ms == Some(i64::MAX);
        let held_by = match min {
            _ if ended => Vec::new(),
            None => Vec::new(),
            Some(min) => live
                .iter()
                .filter(|s| s.watermark_ms == min)
                .map(|s| Holder {
                    source: s.operator.clone(),
                    subtask: s.subtask,
                    split: s.split.clone(),
                    watermark_ms: s.watermark_ms,
                    reason: reason(s),
                    since_ms: None,
                })
                .collect(),
        };
        out.push(Gate {
            operator: op.name.clone(),
            watermark_ms: op.watermark_ms,
            held_by,
        });
    }
    out
}

/// How long each split has held each operator's watermark still: fed the gates of
/// successive reports of one job, it stamps every holder with the time it was first
/// seen holding that operator back at its current watermark in an unbroken run of
/// reports. A split whose watermark moves, or that stops gating and gates again,
/// starts a new run. State machine: reports in, stamped gates out.
#[derive(Debug, Clone, Default)]
pub struct GateClock {
    since: std::collections::HashMap<HolderKey, HeldSince>,
}

/// (operator, source, subtask, split).
type HolderKey = (String, String, u32, String);

/// (first seen, the split's watermark then).
type HeldSince = (i64, Option<i64>);

impl GateClock {
    /// Stamps `gates` (of a report seen at `now_ms`) with each holder's `since_ms`,
    /// and forgets the holders absent from them.
    pub fn observe(&mut self, now_ms: i64, gates: &mut [Gate]) {
        let mut next = std::collections::HashMap::new();
        for g in gates.iter_mut() {
            for h in &mut g.held_by {
                let key = (
                    g.operator.clone(),
                    h.source.clone(),
                    h.subtask,
                    h.split.clone(),
                );
                let since = match self.since.get(&key) {
                    Some(&(since, watermark)) if watermark == h.watermark_ms => since,
                    _ => now_ms,
                };
                h.since_ms = Some(since);
                next.insert(key, (since, h.watermark_ms));
            }
        }
        self.since = next;
    }
}

fn reason(s: &SplitStatus) -> Reason {
    match (s.watermark_ms, s.lag) {
        (None, _) => Reason::NoData,
        (Some(_), Some(lag)) if lag > 0 => Reason::SlowReader,
        (Some(_), Some(_)) => Reason::NoNewData,
        (Some(_), None) => Reason::Slowest,
    }
}

/// The operators with a path to `target` (not `target` itself).
fn ancestors(status: &JobStatus, target: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![target];
    while let Some(v) = todo.pop() {
        for e in status.edges.iter().filter(|e| e.to == v) {
            if seen.insert(e.from) {
                todo.push(e.from);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::status::{
        CheckpointStatus, EdgeStatus, OperatorStatus, ProcessState, SplitStatus,
    };

    fn op(name: &str, wm: Option<i64>) -> OperatorStatus {
        OperatorStatus {
            name: name.into(),
            parallelism: 1,
            records_in: 0,
            records_out: 0,
            watermark_ms: wm,
            backpressure_ms: 0,
            busy_ms: 0,
            late_records: 0,
            subtasks: Vec::new(),
            hot_keys: Vec::new(),
        }
    }

    fn split(source: &str, id: &str, wm: Option<i64>, idle: bool, lag: Option<u64>) -> SplitStatus {
        SplitStatus {
            operator: source.into(),
            subtask: 0,
            split: id.into(),
            offset: Some(0),
            lag,
            watermark_ms: wm,
            idle,
            late_records: 0,
        }
    }

    fn edge(from: usize, to: usize) -> EdgeStatus {
        EdgeStatus {
            from,
            to,
            partitioner: "hash".into(),
            chained: false,
        }
    }

    fn status(
        ops: Vec<OperatorStatus>,
        splits: Vec<SplitStatus>,
        edges: Vec<EdgeStatus>,
    ) -> JobStatus {
        JobStatus {
            job_id: "j".into(),
            pid: 1,
            updated_ms: 0,
            state: ProcessState::Running,
            operators: ops,
            splits,
            edges,
            checkpoints: CheckpointStatus::default(),
            savepoint: None,
            error: None,
        }
    }

    fn held(g: &Gate) -> Vec<(&str, Reason)> {
        g.held_by
            .iter()
            .map(|h| (h.split.as_str(), h.reason))
            .collect()
    }

    #[test]
    fn the_split_at_the_minimum_that_is_not_idle_holds_the_window_back() {
        // clicks (2 partitions) -> counts -> out; partition 1 stopped receiving data.
        let s = status(
            vec![
                op("clicks", Some(100)),
                op("counts", Some(100)),
                op("out", Some(100)),
            ],
            vec![
                split("clicks", "clicks/0", Some(5_000), false, Some(0)),
                split("clicks", "clicks/1", Some(100), false, Some(0)),
            ],
            vec![edge(0, 1), edge(1, 2)],
        );
        let g = gates(&s);
        assert_eq!(g.len(), 2, "the source has no gate");
        assert_eq!(g[0].operator, "counts");
        assert_eq!(held(&g[0]), vec![("clicks/1", Reason::NoNewData)]);
        assert_eq!(held(&g[1]), vec![("clicks/1", Reason::NoNewData)]);

        // Once idle it holds nothing back: the other partition gates.
        let mut s2 = s.clone();
        s2.splits[1].idle = true;
        s2.splits[0].lag = Some(7);
        assert_eq!(held(&gates(&s2)[0]), vec![("clicks/0", Reason::SlowReader)]);

        // All idle: no one holds it back.
        s2.splits[0].idle = true;
        assert!(gates(&s2)[0].held_by.is_empty());
    }

    #[test]
    fn a_split_without_records_holds_back_only_what_is_downstream_of_its_source() {
        // a -> ja, b -> jb (two independent pipelines); b/0 has no record yet.
        let s = status(
            vec![
                op("a", Some(10)),
                op("b", None),
                op("ja", Some(10)),
                op("jb", None),
            ],
            vec![
                split("a", "a/0", Some(10), false, None),
                split("b", "b/0", None, false, Some(0)),
                split("b", "b/1", Some(50), false, Some(3)),
            ],
            vec![edge(0, 2), edge(1, 3)],
        );
        let g = gates(&s);
        assert_eq!(held(&g[0]), vec![("a/0", Reason::Slowest)]);
        assert_eq!(held(&g[1]), vec![("b/0", Reason::NoData)]);
    }

    #[test]
    fn the_clock_tells_how_long_a_split_has_gated_each_operator() {
        let s = status(
            vec![op("clicks", Some(100)), op("counts", Some(100))],
            vec![
                split("clicks", "clicks/0", Some(5_000), false, Some(0)),
                split("clicks", "clicks/1", Some(100), false, Some(0)),
            ],
            vec![edge(0, 1)],
        );
        let since = |g: &[Gate]| {
            g[0].held_by
                .iter()
                .map(|h| (h.split.clone(), h.since_ms))
                .collect::<Vec<_>>()
        };
        let mut clock = GateClock::default();
        let mut g = gates(&s);
        assert_eq!(g[0].held_by[0].since_ms, None);
        clock.observe(1_000, &mut g);
        assert_eq!(since(&g), vec![("clicks/1".to_string(), Some(1_000))]);
        // Still gating at the same watermark: the run goes on.
        let mut g = gates(&s);
        clock.observe(3_000, &mut g);
        assert_eq!(since(&g), vec![("clicks/1".to_string(), Some(1_000))]);
        // Still gating, but its watermark moved: held still only since now.
        let mut s2 = s.clone();
        s2.splits[1].watermark_ms = Some(200);
        let mut g = gates(&s2);
        clock.observe(4_000, &mut g);
        assert_eq!(since(&g), vec![("clicks/1".to_string(), Some(4_000))]);
        // Partition 0 falls behind: it gates from now, partition 1's run ends.
        s2.splits[0].watermark_ms = Some(150);
        let mut g = gates(&s2);
        clock.observe(5_000, &mut g);
        assert_eq!(since(&g), vec![("clicks/0".to_string(), Some(5_000))]);
        // Partition 1 gating again starts a new run.
        let mut g = gates(&s);
        clock.observe(6_000, &mut g);
        assert_eq!(since(&g), vec![("clicks/1".to_string(), Some(6_000))]);
        // An operator whose input ended (final watermark) is held back by nothing.
        let mut ended = s.clone();
        ended.operators[1].watermark_ms = Some(i64::MAX);
        assert!(gates(&ended)[0].held_by.is_empty());
    }
}
