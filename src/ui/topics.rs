//! The Topics and groups page's data: the runner's log (`brook runner
//! --broker-listen`) as `brook topic describe` and `brook group describe` show it. The
//! figures are the log's own ([`Log::describe_topic`], [`Log::group_lag`],
//! [`Log::describe_group`], the functions those commands call in-process); this only
//! shapes them for JSON.

use brook_log::Log;
use serde::{Deserialize, Serialize};

/// `GET /ui/api/topics`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LogView {
    /// Whether this server holds a log (the runner with `--broker-listen`); without
    /// one the lists are empty.
    pub log: bool,
    /// Topics by name.
    pub topics: Vec<TopicRow>,
    /// Consumer groups with members or committed offsets, by name.
    pub groups: Vec<GroupRow>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicRow {
    /// Its name.
    pub name: String,
    /// Time retention (ms), `None` for none.
    pub retention_ms: Option<i64>,
    /// Size retention per partition (bytes), `None` for none.
    pub retention_bytes: Option<u64>,
    /// `delete`, `compact` or both.
    pub cleanup_policy: String,
    /// Its partitions in order.
    pub partitions: Vec<PartitionRow>,
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRow {
    /// Its number.
    pub partition: u32,
    /// Log start offset (the oldest offset stored).
    pub start: u64,
    /// Log end offset (the next offset written).
    pub end: u64,
    /// Last stable offset (where read-committed consumers stop).
    pub stable: u64,
    /// Bytes in its segment files.
    pub size_bytes: u64,
    /// Its segments (closed and active).
    pub segments: usize,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRow {
    /// Its name.
    pub group: String,
    /// `Stable` with members, `Empty` without (Kafka's names; a rebalance in progress
    /// is not told apart).
    pub state: String,
    /// Its generation, `None` when it never had members in this process.
    pub generation: Option<u32>,
    /// Its live members.
    pub members: Vec<MemberRow>,
    /// Per partition with a commit or an owner: committed offset and lag.
    pub partitions: Vec<LagRow>,
    /// Its total lag over the last [`LAG_HISTORY_MS`], oldest first, one point per
    /// [`LAG_SAMPLE_MS`] (from [`LagHistory`]; empty where the server keeps none).
    #[serde(default)]
    pub lag_history: Vec<LagPoint>,
}

/// A group's total lag (the sum over its partitions with a commit) at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagPoint {
    /// When it was sampled (ms since the epoch).
    pub t_ms: i64,
    /// Its total lag then (records).
    pub lag: u64,
}

/// How far back [`LagHistory`] keeps each group's lag (ms): ten minutes.
pub const LAG_HISTORY_MS: i64 = 10 * 60 * 1000;

/// How often the dashboard samples the groups' lag (ms).
pub const LAG_SAMPLE_MS: i64 = 1000;

/// Each group's total lag over the last [`LAG_HISTORY_MS`], for the lag chart. A pure
/// state machine: samples in ([`LagHistory::record`]), series out.
#[derive(Debug, Clone, Default)]
pub struct LagHistory {
    series: std::collections::BTreeMap<String, std::collections::VecDeque<LagPoint>>,
}

impl LagHistory {
    /// Adds a sample taken at `now_ms`: every group there is, with its total lag
    /// (`None` for a group without a committed offset: no point). A group absent from
    /// the sample was deleted: its series goes (a group made again under its name
    /// starts anew). Points older than [`LAG_HISTORY_MS`] go, and with them a group
    /// that has none left.
    pub fn record(&mut self, now_ms: i64, lags: impl IntoIterator<Item = (String, Option<u64>)>) {
        let mut present = std::collections::BTreeSet::new();
        for (group, lag) in lags {
            if let Some(lag) = lag {
                self.series
                    .entry(group.clone())
                    .or_default()
                    .push_back(LagPoint { t_ms: now_ms, lag });
            }
            present.insert(group);
        }
        self.series.retain(|group, points| {
            while points
                .front()
                .is_some_and(|p| now_ms - p.t_ms > LAG_HISTORY_MS)
            {
                points.pop_front();
            }
            present.contains(group) && !points.is_empty()
        });
    }

    /// The points of `group`, oldest first.
    pub fn of(&self, group: &str) -> Vec<LagPoint> {
        self.series
            .get(group)
            .map(|p| p.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Fills each group's [`GroupRow::lag_history`] of `view`, made at `now_ms`,
    /// ending with the view's own total lag at `now_ms`, so the chart ends where the
    /// table's lag column stands (the last sample can be a second older).
    pub fn fill(&self, view: &mut LogView, now_ms: i64) {
        for g in &mut view.groups {
            let mut points = self.of(&g.group);
            let lags: Vec<u64> = g.partitions.iter().filter_map(|p| p.lag).collect();
            if !lags.is_empty() && points.last().is_none_or(|p| p.t_ms < now_ms) {
                points.push(LagPoint {
                    t_ms: now_ms,
                    lag: lags.iter().sum(),
                });
            }
            g.lag_history = points;
        }
    }
}

/// Each group's total lag now (the sum over its partitions with a committed offset;
/// `None` when it has none), for [`LagHistory::record`].
pub fn group_lags(log: &Log) -> Vec<(String, Option<u64>)> {
    log.groups()
        .into_iter()
        .filter_map(|group| {
            let rows = log.group_lag(&group).ok()?;
            let lags: Vec<u64> = rows.iter().filter_map(|r| r.lag).collect();
            let total = (!lags.is_empty()).then(|| lags.iter().sum());
            Some((group, total))
        })
        .collect()
}

/// A live member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRow {
    /// Member id.
    pub member_id: String,
    /// Client id given at join.
    pub client_id: String,
    /// Assigned partitions as `topic/partition`.
    pub partitions: Vec<String>,
}

/// A group's position on one partition (as `brook group describe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagRow {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Committed offset (the next the group reads), if any.
    pub committed: Option<u64>,
    /// Log end offset.
    pub end: u64,
    /// Last stable offset.
    pub stable: u64,
    /// `stable - committed` (semantics.md §1); `None` without a commit.
    pub lag: Option<u64>,
    /// The committed offset is outside the log (retention passed it).
    pub out_of_range: bool,
    /// The member assigned the partition, if any.
    pub member: Option<String>,
}

/// The log a server holds, with the coordinator of the consumer groups it serves
/// over Kafka's protocol, if it serves the log (their members live there, not in the
/// log: the log knows its own consumers' groups and everyone's committed offsets).
#[derive(Debug, Clone)]
pub struct ServedLog {
    /// The log.
    pub log: Log,
    /// The Kafka-protocol groups' coordinator (`brook_broker::Server::groups`).
    pub groups: Option<std::sync::Arc<brook_broker::group::Coordinator>>,
}

/// The topics and groups of `served` now: the groups of the log and of the broker's
/// coordinator, each with the members of whichever has them. A topic deleted while
/// this runs is left out; a group whose lag cannot be read is shown without it.
pub fn log_view(served: &ServedLog) -> LogView {
    let log = &served.log;
    let topics = log
        .topics()
        .into_iter()
        .filter_map(|name| log.describe_topic(&name).ok())
        .map(|info| TopicRow {
            name: info.name,
            retention_ms: info.config.retention_ms,
            retention_bytes: info.config.retention_bytes,
            cleanup_policy: info.config.cleanup_policy.to_string(),
            partitions: info
                .partitions
                .into_iter()
                .map(|p| PartitionRow {
                    partition: p.partition,
                    start: p.log_start_offset,
                    end: p.log_end_offset,
                    stable: p.last_stable_offset,
                    size_bytes: p.size_bytes,
                    segments: p.segments,
                })
                .collect(),
        })
        .collect();
    let mut names: std::collections::BTreeSet<String> = log.groups().into_iter().collect();
    if let Some(c) = &served.groups {
        names.extend(c.list().into_iter().map(|(group, _, _)| group));
    }
    let groups = names
        .into_iter()
        .map(|group| group_row(served, group))
        .collect();
    LogView {
        log: true,
        topics,
        groups,
    }
}

/// One group as the Topics page shows it: its members from the broker's coordinator
/// when it has any there (a Kafka client's group), else from the log's own.
fn group_row(served: &ServedLog, group: String) -> GroupRow {
    let log = &served.log;
    let lag = log.group_lag(&group).unwrap_or_default();
    let broker = served
        .groups
        .as_ref()
        .and_then(|c| c.describe(&group))
        .filter(|g| !g.members.is_empty());
    let (state, generation, members) = match &broker {
        Some(g) => (
            g.state.as_str().to_string(),
            u32::try_from(g.generation).ok(),
            g.members
                .iter()
                .map(|m| MemberRow {
                    member_id: m.member_id.clone(),
                    client_id: m.client_id.clone(),
                    partitions: brook_broker::group::assigned_partitions(&m.assignment)
                        .into_iter()
                        .map(|(t, p)| format!("{t}/{p}"))
                        .collect(),
                })
                .collect::<Vec<_>>(),
        ),
        None => {
            let described = log.describe_group(&group);
            let members: Vec<MemberRow> = described
                .as_ref()
                .map(|d| {
                    d.members
                        .iter()
                        .map(|m| MemberRow {
                            member_id: m.member_id.clone(),
                            client_id: m.client_id.clone(),
                            partitions: m
                                .assignment
                                .iter()
                                .map(|tp| format!("{}/{}", tp.topic, tp.partition))
                                .collect(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let state = if members.is_empty() {
                "Empty"
            } else {
                "Stable"
            };
            (state.to_string(), described.map(|d| d.generation), members)
        }
    };
    // Who owns each partition, for a broker group (the log's rows name its own).
    let owner = |topic: &str, partition: u32| {
        members
            .iter()
            .find(|m| m.partitions.contains(&format!("{topic}/{partition}")))
            .map(|m| m.member_id.clone())
    };
    let partitions = lag
        .into_iter()
        .map(|r| LagRow {
            member: r.member.or_else(|| owner(&r.topic, r.partition)),
            topic: r.topic,
            partition: r.partition,
            committed: r.committed,
            end: r.log_end_offset,
            stable: r.last_stable_offset,
            lag: r.lag,
            out_of_range: r.out_of_range,
        })
        .collect();
    GroupRow {
        state,
        generation,
        members,
        partitions,
        lag_history: Vec::new(),
        group,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_history_keeps_ten_minutes_of_each_groups_lag() {
        let point = |t_ms, lag| LagPoint { t_ms, lag };
        let mut h = LagHistory::default();
        h.record(0, [("g".to_string(), Some(900)), ("new".to_string(), None)]);
        h.record(
            1_000,
            [("g".to_string(), Some(400)), ("new".to_string(), None)],
        );
        assert_eq!(h.of("g"), vec![point(0, 900), point(1_000, 400)]);
        // A group without a commit has no point.
        assert!(h.of("new").is_empty());
        // Ten minutes on, the first point is gone; the group whose points all went
        // is forgotten.
        let t = LAG_HISTORY_MS;
        h.record(
            t + 500,
            [("h".to_string(), Some(1)), ("g".to_string(), None)],
        );
        assert_eq!(h.of("g"), vec![point(1_000, 400)]);
        h.record(
            t + 2_000,
            [("g".to_string(), None), ("h".to_string(), None)],
        );
        assert!(h.of("g").is_empty());
        assert_eq!(h.of("h").len(), 1);
        // A deleted group (absent from a sample) loses its series at once.
        let mut deleted = h.clone();
        deleted.record(t + 3_000, []);
        assert!(deleted.of("h").is_empty());
        let mut view = LogView {
            log: true,
            topics: Vec::new(),
            groups: vec![GroupRow {
                group: "h".into(),
                state: "Empty".into(),
                generation: None,
                members: Vec::new(),
                partitions: vec![LagRow {
                    topic: "t".into(),
                    partition: 0,
                    committed: Some(3),
                    end: 10,
                    stable: 10,
                    lag: Some(7),
                    out_of_range: false,
                    member: None,
                }],
                lag_history: Vec::new(),
            }],
        };
        // The chart ends at the view's own lag.
        h.fill(&mut view, t + 2_500);
        assert_eq!(
            view.groups[0].lag_history,
            vec![point(t + 500, 1), point(t + 2_500, 7)]
        );
    }
}
