//! The execution plan: everything `execute::start` decides about a job graph before it
//! creates a channel or a thread, as one pure function, [`plan`].
//!
//! The rules, as Flink's `StreamingJobGraphGenerator`:
//! - A vertex runs with its own parallelism, else the job's; it must lie in
//!   `1..=max_parallelism` (each subtask owns at least one key group).
//! - An edge without a partitioner, or with `Forward`, is `Forward` when both ends have
//!   the same parallelism and `Rebalance` otherwise (forward cannot change the
//!   parallelism); any other partitioner stays as given.
//! - An edge is chained (its two vertices run in one task, records handed over by a
//!   call, no channel) when it is `Forward`, it is the only input of its target, the
//!   only output of its source, and its source is not a sink.
//! - A chain is a head (a vertex with no chained input) and the vertices its chained
//!   outputs lead to; it runs as one task per subtask of the head, named after the
//!   head's subtask (`"{vertex} (subtask {i + 1}/{p})"`): these names are the tasks'
//!   thread names, metrics labels and checkpoint file names, so they must not change.
//! - Every vertex but a source has an input.

use brook_core::operator::SubtaskInfo;
use brook_core::partition::Partitioner;

use crate::error::EngineError;
use crate::graph::{JobGraph, VertexKind};
use crate::ids::VertexId;

/// Index of an edge in the job graph.
pub(crate) type EdgeId = usize;

/// What [`plan`] decided for a job graph; `vertices` and `edges` are indexed as the
/// graph's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecutionPlan {
    pub(crate) vertices: Vec<VertexPlan>,
    pub(crate) edges: Vec<EdgePlan>,
    /// The chains in the order of their heads' ids.
    pub(crate) chains: Vec<Chain>,
}

/// One vertex: its subtasks and its edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VertexPlan {
    pub(crate) parallelism: u32,
    /// One per subtask, in index order.
    pub(crate) subtasks: Vec<SubtaskInfo>,
    /// Its input edges, in graph order (the order of its input gate's channels).
    pub(crate) inputs: Vec<EdgeId>,
    /// Its output edges, in graph order (the order of its outputs).
    pub(crate) outputs: Vec<EdgeId>,
    pub(crate) is_source: bool,
}

/// One edge: how records cross it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EdgePlan {
    pub(crate) partitioner: Partitioner,
    /// In one task with its source vertex: no channel.
    pub(crate) chained: bool,
}

/// Vertices that run in one task per subtask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chain {
    /// Head first, then downstream along the chained edges.
    pub(crate) vertices: Vec<VertexId>,
    /// The task of each subtask, in index order.
    pub(crate) tasks: Vec<String>,
}

impl Chain {
    /// The first vertex: the one whose subtasks name the tasks.
    pub(crate) fn head(&self) -> VertexId {
        // `plan` starts every chain with its head, so `vertices` is never empty.
        self.vertices[0]
    }
}

impl ExecutionPlan {
    /// Subtasks of all sources: the checkpoint coordinator's count of the inputs that
    /// must end before the job has.
    pub(crate) fn source_subtasks(&self) -> usize {
        self.vertices
            .iter()
            .filter(|v| v.is_source)
            .map(|v| v.parallelism as usize)
            .sum()
    }

    /// Tasks of the job (threads): one per subtask of each chain; the checkpoint
    /// coordinator waits for an acknowledgement from each.
    pub(crate) fn task_count(&self) -> usize {
        self.chains.iter().map(|c| c.tasks.len()).sum()
    }
}

/// The plan of `g` (the rules are in the [module docs](self)).
///
/// # Errors
/// [`EngineError::InvalidGraph`] for a graph without vertices, a parallelism outside
/// `1..=max_parallelism` (naming the vertex), a vertex other than a source without an
/// input.
pub(crate) fn plan(g: &JobGraph) -> Result<ExecutionPlan, EngineError> {
    let n = g.vertices.len();
    if n == 0 {
        return Err(EngineError::InvalidGraph("the job has no sources".into()));
    }
    let max = g.config.max_parallelism;
    let mut vertices = Vec::with_capacity(n);
    for v in &g.vertices {
        let p = v.parallelism.unwrap_or(g.config.parallelism);
        if p == 0 || p > max {
            return Err(EngineError::InvalidGraph(format!(
                "{}: parallelism {p} must be between 1 and max_parallelism ({max}), the number of key groups",
                v.name
            )));
        }
        let subtasks = (0..p)
            .map(|index| SubtaskInfo {
                name: v.name.clone(),
                index,
                parallelism: p,
                max_parallelism: max,
            })
            .collect();
        vertices.push(VertexPlan {
            parallelism: p,
            subtasks,
            inputs: Vec::new(),
            outputs: Vec::new(),
            is_source: matches!(v.kind, VertexKind::Source(_)),
        });
    }
    for (i, e) in g.edges.iter().enumerate() {
        vertices[e.from].outputs.push(i);
        vertices[e.to].inputs.push(i);
    }
    if let Some((v, _)) = g
        .vertices
        .iter()
        .zip(&vertices)
        .find(|(_, p)| !p.is_source && p.inputs.is_empty())
    {
        return Err(EngineError::InvalidGraph(format!(
            "{} has no input",
            v.name
        )));
    }
    let edges: Vec<EdgePlan> = g
        .edges
        .iter()
        .map(|e| {
            let same = vertices[e.from].parallelism == vertices[e.to].parallelism;
            let partitioner = match e.partitioner {
                None | Some(Partitioner::Forward) if same => Partitioner::Forward,
                None | Some(Partitioner::Forward) => Partitioner::Rebalance,
                Some(p) => p,
            };
            let chained = partitioner == Partitioner::Forward
                && vertices[e.to].inputs.len() == 1
                && vertices[e.from].outputs.len() == 1
                && !matches!(g.vertices[e.from].kind, VertexKind::Sink(_));
            EdgePlan {
                partitioner,
                chained,
            }
        })
        .collect();
    let chains = (0..n)
        .filter(|&v| !vertices[v].inputs.iter().any(|&e| edges[e].chained))
        .map(|head| {
            let mut members = vec![head];
            let mut at = head;
            // A chained edge is the only output of its source, so a chain is a path;
            // edges go from lower to higher vertex ids, so the path ends.
            while let [e] = vertices[at].outputs[..] {
                if !edges[e].chained {
                    break;
                }
                at = g.edges[e].to;
                members.push(at);
            }
            Chain {
                vertices: members,
                tasks: vertices[head]
                    .subtasks
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            }
        })
        .collect();
    Ok(ExecutionPlan {
        vertices,
        edges,
        chains,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use brook_operators::window::aggregate::Count;
    use brook_operators::window::assigner::TumblingEventTimeWindows;

    use super::*;
    use crate::testing::{CollectSink, VecSource};
    use crate::{JobConfig, OutputTag, StreamEnvironment};

    /// The plan of the graph `build` makes at job parallelism `p`, as lines:
    /// `name pN` per vertex, `from -> to: partitioner[, chained]` per edge,
    /// `task names: vertex > vertex` per chain.
    fn planned(p: u32, build: impl FnOnce(&StreamEnvironment)) -> Vec<String> {
        let env = StreamEnvironment::new(JobConfig::with_parallelism(p));
        build(&env);
        let g = env.graph();
        let plan = plan(&g).unwrap();
        let name = |v: VertexId| g.vertices[v].name.as_str();
        let mut lines: Vec<String> = plan
            .vertices
            .iter()
            .enumerate()
            .map(|(v, vp)| format!("{} p{}", name(v), vp.parallelism))
            .collect();
        for (e, ep) in g.edges.iter().zip(&plan.edges) {
            let chained = if ep.chained { ", chained" } else { "" };
            lines.push(format!(
                "{} -> {}: {}{chained}",
                name(e.from),
                name(e.to),
                ep.partitioner
            ));
        }
        for c in &plan.chains {
            let members: Vec<&str> = c.vertices.iter().map(|&v| name(v)).collect();
            lines.push(format!("{}: {}", c.tasks.join(", "), members.join(" > ")));
        }
        lines.push(format!(
            "source subtasks {}, tasks {}",
            plan.source_subtasks(),
            plan.task_count()
        ));
        lines
    }

    fn numbers(env: &StreamEnvironment) -> crate::DataStream<i64> {
        env.source(VecSource::new(vec![1i64, 2, 3]))
    }

    #[test]
    fn a_pipeline_of_equal_parallelism_is_one_chain() {
        let got = planned(1, |env| {
            numbers(env).map(|x| x + 1).sink(CollectSink::new());
        });
        assert_eq!(
            got,
            [
                "source p1",
                "map p1",
                "sink p1",
                "source -> map: forward, chained",
                "map -> sink: forward, chained",
                "source (subtask 1/1): source > map > sink",
                "source subtasks 1, tasks 1",
            ]
        );
    }

    #[test]
    fn a_key_by_to_another_parallelism_is_hashed_and_splits_the_chain() {
        let got = planned(2, |env| {
            numbers(env)
                .key_by(|x: &i64| *x)
                .map(|x| x)
                .set_parallelism(3)
                .sink(CollectSink::new())
                .set_parallelism(3);
        });
        assert_eq!(
            got,
            [
                "source p2",
                "map p3",
                "sink p3",
                "source -> map: hash",
                "map -> sink: forward, chained",
                "source (subtask 1/2), source (subtask 2/2): source",
                "map (subtask 1/3), map (subtask 2/3), map (subtask 3/3): map > sink",
                "source subtasks 2, tasks 5",
            ]
        );
    }

    #[test]
    fn a_rebalance_is_kept_and_a_parallelism_change_rebalances() {
        let got = planned(2, |env| {
            numbers(env)
                .rebalance()
                .map(|x| x)
                .filter(|_| true)
                .set_parallelism(1)
                .sink(CollectSink::new())
                .set_parallelism(1);
        });
        assert_eq!(
            got,
            [
                "source p2",
                "map p2",
                "filter p1",
                "sink p1",
                "source -> map: rebalance",
                "map -> filter: rebalance",
                "filter -> sink: forward, chained",
                "source (subtask 1/2), source (subtask 2/2): source",
                "map (subtask 1/2), map (subtask 2/2): map",
                "filter (subtask 1/1): filter > sink",
                "source subtasks 2, tasks 5",
            ]
        );
    }

    #[test]
    fn an_explicit_forward_between_parallelisms_rebalances() {
        let env = StreamEnvironment::new(JobConfig::with_parallelism(2));
        numbers(&env).sink(CollectSink::new()).set_parallelism(1);
        let mut g = env.graph_mut();
        g.edges[0].partitioner = Some(Partitioner::Forward);
        let plan = plan(&g).unwrap();
        assert_eq!(
            plan.edges,
            [EdgePlan {
                partitioner: Partitioner::Rebalance,
                chained: false
            }]
        );
    }

    #[test]
    fn a_two_input_join_reads_both_inputs_in_one_task() {
        let got = planned(2, |env| {
            let left = numbers(env).key_by(|x: &i64| *x);
            let right = numbers(env).key_by(|x: &i64| *x);
            left.interval_join(right, 0, 0)
                .unwrap()
                .apply(|a: &i64, b: Option<&i64>| (*a, b.copied()))
                .sink(CollectSink::new());
        });
        assert_eq!(
            got,
            [
                "source p2",
                "source#1 p2",
                "interval-join-left p2",
                "interval-join-right p2",
                "interval-join p2",
                "interval-join-results p2",
                "sink p2",
                // The join's sides are keyed before they are tagged, so the tagging
                // maps read hashed input too.
                "source -> interval-join-left: hash",
                "source#1 -> interval-join-right: hash",
                "interval-join-left -> interval-join: hash",
                "interval-join-right -> interval-join: hash",
                "interval-join -> interval-join-results: forward, chained",
                "interval-join-results -> sink: forward, chained",
                "source (subtask 1/2), source (subtask 2/2): source",
                "source#1 (subtask 1/2), source#1 (subtask 2/2): source#1",
                "interval-join-left (subtask 1/2), interval-join-left (subtask 2/2): \
                 interval-join-left",
                "interval-join-right (subtask 1/2), interval-join-right (subtask 2/2): \
                 interval-join-right",
                "interval-join (subtask 1/2), interval-join (subtask 2/2): \
                 interval-join > interval-join-results > sink",
                "source subtasks 4, tasks 10",
            ]
        );
    }

    #[test]
    fn a_side_output_ends_the_chain_at_its_operator() {
        let got = planned(1, |env| {
            let late = OutputTag::new("late");
            let counts = numbers(env)
                .key_by(|x: &i64| *x)
                .window(TumblingEventTimeWindows::of(1_000).unwrap())
                .side_output_late_data(&late)
                .aggregate(Count);
            counts
                .get_side_output(&late)
                .unwrap()
                .sink(CollectSink::new());
            counts.sink(CollectSink::new());
        });
        assert_eq!(
            got,
            [
                "source p1",
                "window p1",
                "window-late p1",
                "window-results p1",
                "sink p1",
                "sink#5 p1",
                "source -> window: hash",
                "window -> window-late: forward",
                "window -> window-results: forward",
                "window-late -> sink: forward, chained",
                "window-results -> sink#5: forward, chained",
                "source (subtask 1/1): source",
                "window (subtask 1/1): window",
                "window-late (subtask 1/1): window-late > sink",
                "window-results (subtask 1/1): window-results > sink#5",
                "source subtasks 1, tasks 4",
            ]
        );
    }

    #[test]
    fn a_parallelism_outside_the_key_groups_names_the_vertex() {
        for p in [0, 129] {
            let env = StreamEnvironment::new(JobConfig {
                max_parallelism: 128,
                ..JobConfig::with_parallelism(1)
            });
            numbers(&env).map(|x| x).name("double").set_parallelism(p);
            let err = plan(&env.graph()).err().map(|e| e.to_string());
            assert_eq!(
                err.as_deref(),
                Some(
                    format!(
                        "invalid job graph: double: parallelism {p} must be between 1 and \
                         max_parallelism (128), the number of key groups"
                    )
                    .as_str()
                ),
            );
        }
    }

    #[test]
    fn an_empty_graph_has_no_plan() {
        let env = StreamEnvironment::new(JobConfig::default());
        let err = plan(&env.graph()).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid job graph: the job has no sources")
        );
    }
}
