//! Consumer-group coordination: membership, liveness and partition assignment.
//!
//! This is the in-process equivalent of Kafka's group coordinator with *eager* rebalancing.
//! A [`GroupCoordinator`] holds any number of named groups. Each group has members that
//! subscribe to topics; the partitions of every subscribed topic are assigned so that each
//! partition has at most one owner, and a partition of a topic only ever goes to a member
//! subscribed to that topic. Members beyond the number of partitions they could own stay idle
//! (their assignment is empty).
//!
//! # Rebalances and generations
//!
//! A join, a leave, the eviction of members that missed their session timeout, or a change in
//! the partition count of a subscribed topic starts a rebalance: the group's generation
//! increments by one and the assignment of *every* member is recomputed at once. There is no
//! separate sync phase: the new assignment is visible as soon as the call returns, and members
//! learn about it through a changed generation in the [`Membership`] returned by
//! [`GroupCoordinator::heartbeat`]. The generation is 1 after the first join of a new group and
//! is never reset while the group exists, not even when its last member leaves, so a member id
//! and generation from an earlier incarnation of the group can never validate a commit again.
//!
//! # Time and liveness
//!
//! This module never reads a clock: every method that needs time takes `now_ms`
//! (milliseconds, on whatever monotonic-enough scale the caller uses). A member is alive while
//! `now_ms - last_heartbeat_ms <= session_timeout_ms`; **exactly at**
//! `last_heartbeat_ms + session_timeout_ms` it is still alive, one millisecond later it is
//! expired. Expired members are evicted by [`GroupCoordinator::expire`], which the owner calls
//! periodically, and also lazily by every method that takes `now_ms`, so state is always
//! current when a member interacts with its group.
//!
//! # Assignment strategies
//!
//! - [`AssignmentStrategy::Range`]: Kafka's `RangeAssignor`. Per topic, the subscribed members
//!   sorted by member id get contiguous ranges of partitions; the first `n % m` members get one
//!   partition more.
//! - [`AssignmentStrategy::RoundRobin`]: Kafka's `RoundRobinAssignor`. All topic-partitions,
//!   sorted by topic then partition, are dealt in turn to the members sorted by member id,
//!   skipping members not subscribed to the partition's topic.
//! - [`AssignmentStrategy::Sticky`]: keeps every partition with its previous owner where that
//!   owner is still in the group and subscribed, then balances. When all members subscribe to
//!   the same topics the result is balanced (assignment sizes differ by at most one) and moves
//!   the fewest previously owned partitions possible. With different subscriptions it is
//!   balanced as far as one-partition moves between members allow: no member owns two or more
//!   partitions more than another member that could take one of them.
//!
//! Member ids are generated here as `"{client_id}-{n}"`, with `n` a per-group counter starting
//! at 1, so ids are unique within a group and tests can predict them. Members are ordered by
//! member id as strings (so `"c-10"` sorts before `"c-2"`), exactly as Kafka sorts its ids.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How a group's partitions are distributed among its members.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AssignmentStrategy {
    /// Kafka's `RangeAssignor` (`"range"`): contiguous ranges of each topic's partitions.
    #[default]
    Range,
    /// Kafka's `RoundRobinAssignor` (`"roundrobin"`): partitions of all topics dealt in turn.
    RoundRobin,
    /// Keeps previous owners where possible while staying balanced (`"sticky"`).
    Sticky,
}

impl AssignmentStrategy {
    /// Every strategy, in declaration order.
    pub const ALL: [AssignmentStrategy; 3] = [
        AssignmentStrategy::Range,
        AssignmentStrategy::RoundRobin,
        AssignmentStrategy::Sticky,
    ];

    /// The strategy's name as accepted by [`FromStr`] and written by [`fmt::Display`] and serde.
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::RoundRobin => "roundrobin",
            AssignmentStrategy::Sticky => "sticky",
        }
    }
}

impl fmt::Display for AssignmentStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error returned when parsing an unknown [`AssignmentStrategy`] name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown assignment strategy {input:?}: expected one of range, roundrobin, sticky")]
pub struct ParseStrategyError {
    /// The text that was not recognised.
    pub input: String,
}

impl FromStr for AssignmentStrategy {
    type Err = ParseStrategyError;

    /// Parses `range`, `roundrobin` or `sticky`, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AssignmentStrategy::ALL
            .into_iter()
            .find(|strategy| strategy.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseStrategyError {
                input: s.to_owned(),
            })
    }
}

/// One partition of one topic. Orders by topic, then partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition number, from 0.
    pub partition: u32,
}

impl TopicPartition {
    /// Creates a topic-partition.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// Writes `topic-partition`, as Kafka does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A member's view of its group: who it is, which generation it is in, what it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The member id generated by the coordinator at join.
    pub member_id: String,
    /// The group's current generation; it changes on every rebalance.
    pub generation: u32,
    /// The partitions this member owns in this generation, sorted.
    pub assignment: Vec<TopicPartition>,
}

/// Who is committing offsets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommitIdentity {
    /// A standalone consumer (Kafka's "simple" commit: no member id, generation -1). Allowed
    /// only while the group has no members.
    Standalone,
    /// A group member, as returned by [`GroupCoordinator::join`] or
    /// [`GroupCoordinator::heartbeat`].
    Member {
        /// The member id.
        member_id: String,
        /// The generation the member believes is current.
        generation: u32,
    },
}

/// A snapshot of one member, as part of a [`GroupDescription`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDescription {
    /// The member id.
    pub member_id: String,
    /// The client id given at join.
    pub client_id: String,
    /// The subscribed topics, sorted and without duplicates.
    pub topics: Vec<String>,
    /// The partitions owned in the current generation, sorted.
    pub assignment: Vec<TopicPartition>,
    /// When the member last joined, heartbeated or committed (ms).
    pub last_heartbeat_ms: i64,
    /// The member's session timeout (ms).
    pub session_timeout_ms: i64,
}

/// A snapshot of one group, returned by [`GroupCoordinator::describe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDescription {
    /// The group's name.
    pub group: String,
    /// The current generation: 1 after the first join, incremented by every rebalance.
    pub generation: u32,
    /// The group's strategy. For a group without members this is the strategy of the last
    /// members; the next member to join may pick another.
    pub strategy: AssignmentStrategy,
    /// The partition counts of the subscribed topics that the current assignment was computed
    /// with.
    pub partition_counts: BTreeMap<String, u32>,
    /// The members, sorted by member id.
    pub members: Vec<MemberDescription>,
}

/// A refused group operation. Messages name the group, the member and the generations involved.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GroupError {
    /// A joining member subscribed to a topic that does not exist.
    #[error("group {group:?}: cannot subscribe to unknown topic {topic:?}")]
    UnknownTopic {
        /// The group.
        group: String,
        /// The unknown topic.
        topic: String,
    },
    /// The member id is not (or no longer) in the group: it never joined, it left, or it was
    /// evicted after missing its session timeout. It must join again to get a new id.
    #[error(
        "group {group:?} has no member {member:?} (it never joined, left, or was evicted after \
         missing its session timeout); join again to get a new member id"
    )]
    UnknownMember {
        /// The group.
        group: String,
        /// The member id that was given.
        member: String,
    },
    /// The member is in the group but used a generation other than the current one: the group
    /// rebalanced since the member last saw it.
    #[error(
        "group {group:?}: member {member:?} used generation {given} but the current generation \
         is {current}; the group has rebalanced, fetch the new assignment with a heartbeat"
    )]
    IllegalGeneration {
        /// The group.
        group: String,
        /// The member.
        member: String,
        /// The generation the member gave.
        given: u32,
        /// The group's current generation.
        current: u32,
    },
    /// The member committed an offset for a partition it does not own in this generation.
    #[error(
        "group {group:?}: member {member:?} (generation {generation}) is not assigned \
         partition {partition} of topic {topic:?}"
    )]
    NotAssigned {
        /// The group.
        group: String,
        /// The member.
        member: String,
        /// The current generation.
        generation: u32,
        /// The topic of the partition.
        topic: String,
        /// The partition.
        partition: u32,
    },
    /// A member tried to join with a strategy other than the one the group's members use.
    #[error(
        "group {group:?} uses the {current} assignment strategy; cannot join with {requested}"
    )]
    InconsistentStrategy {
        /// The group.
        group: String,
        /// The strategy the joining member asked for.
        requested: AssignmentStrategy,
        /// The strategy of the group's current members.
        current: AssignmentStrategy,
    },
    /// A standalone commit (no member id or generation) to a group that has members.
    #[error(
        "group {group:?} has {members} active member(s); a standalone commit (without member id \
         and generation) is only allowed while the group has no members"
    )]
    GroupHasMembers {
        /// The group.
        group: String,
        /// How many members it has.
        members: usize,
    },
    /// A join without any topic.
    #[error("group {group:?}: client {client_id:?} must subscribe to at least one topic")]
    EmptySubscription {
        /// The group.
        group: String,
        /// The joining client.
        client_id: String,
    },
    /// A join with a session timeout that is zero or negative.
    #[error("group {group:?}: session timeout must be positive, got {session_timeout_ms} ms")]
    InvalidSessionTimeout {
        /// The group.
        group: String,
        /// The timeout that was given.
        session_timeout_ms: i64,
    },
    /// [`GroupCoordinator::delete_group`] on a group that still has members.
    #[error("group {group:?} still has {members} member(s) and cannot be deleted")]
    NonEmptyGroup {
        /// The group.
        group: String,
        /// How many members it has.
        members: usize,
    },
}

/// One member's state inside a group.
#[derive(Debug, Clone)]
struct Member {
    client_id: String,
    topics: BTreeSet<String>,
    session_timeout_ms: i64,
    last_heartbeat_ms: i64,
    assignment: Vec<TopicPartition>,
}

impl Member {
    /// Whether the member missed its session timeout at `now_ms`: strictly more than
    /// `session_timeout_ms` since its last heartbeat.
    fn is_expired(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_heartbeat_ms) > self.session_timeout_ms
    }

    fn touch(&mut self, now_ms: i64) {
        self.last_heartbeat_ms = self.last_heartbeat_ms.max(now_ms);
    }
}

/// One group's state.
#[derive(Debug, Clone)]
struct Group {
    strategy: AssignmentStrategy,
    generation: u32,
    /// The last sequence number used in a member id.
    member_seq: u64,
    members: BTreeMap<String, Member>,
    /// Partition counts of subscribed topics that the assignment was computed with.
    partition_counts: BTreeMap<String, u32>,
    /// The owner of every assigned partition.
    owners: BTreeMap<TopicPartition, String>,
}

impl Group {
    fn new(strategy: AssignmentStrategy) -> Self {
        Group {
            strategy,
            generation: 0,
            member_seq: 0,
            members: BTreeMap::new(),
            partition_counts: BTreeMap::new(),
            owners: BTreeMap::new(),
        }
    }

    fn is_subscribed(&self, topic: &str) -> bool {
        self.members.values().any(|m| m.topics.contains(topic))
    }

    fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.topics.iter().cloned())
            .collect()
    }

    /// Removes expired members without rebalancing; returns their ids.
    fn remove_expired(&mut self, now_ms: i64) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, member)| member.is_expired(now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.members.remove(id);
        }
        expired
    }

    /// Starts a new generation and recomputes every member's assignment.
    fn rebalance(&mut self) {
        // Wrap to 1, never 0, in the (theoretical) case of 4 billion rebalances.
        self.generation = self.generation.checked_add(1).unwrap_or(1);
        let subscribed = self.subscribed_topics();
        self.partition_counts
            .retain(|topic, _| subscribed.contains(topic));
        let subscriptions: BTreeMap<&str, &BTreeSet<String>> = self
            .members
            .iter()
            .map(|(id, m)| (id.as_str(), &m.topics))
            .collect();
        let mut assignment: BTreeMap<String, Vec<TopicPartition>> = assign(
            self.strategy,
            &subscriptions,
            &self.partition_counts,
            &self.owners,
        )
        .into_iter()
        .map(|(id, tps)| (id.to_owned(), tps))
        .collect();
        let mut owners = BTreeMap::new();
        for (id, member) in &mut self.members {
            let mut tps = assignment.remove(id).unwrap_or_default();
            tps.sort();
            for tp in &tps {
                owners.insert(tp.clone(), id.clone());
            }
            member.assignment = tps;
        }
        self.owners = owners;
    }
}

/// Coordinates any number of consumer groups in one process. Pure state, no I/O, no clock.
///
/// See the [module documentation](self) for the semantics. The owner should call
/// [`expire`](Self::expire) periodically: besides evicting members, it drains the record of
/// members evicted lazily by the other methods.
#[derive(Debug, Clone, Default)]
pub struct GroupCoordinator {
    groups: BTreeMap<String, Group>,
    /// Members evicted since the last call to [`GroupCoordinator::expire`].
    evicted: Vec<(String, String)>,
}

impl GroupCoordinator {
    /// Creates a coordinator without groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a new member to `group` (creating the group on its first join) and rebalances.
    ///
    /// `topics` is the subscription (duplicates are ignored; it must not be empty);
    /// `partitions(topic)` gives a topic's current partition count, `None` for an unknown topic.
    /// The counts of all topics the group subscribes to are refreshed through it. The group's
    /// strategy is set by the first member to join an empty group; joining a group that has
    /// members with another strategy fails with [`GroupError::InconsistentStrategy`].
    /// Expired members of the group are evicted first.
    ///
    /// Returns the new member's id (`"{client_id}-{n}"`), the new generation and its
    /// assignment.
    #[allow(clippy::too_many_arguments)]
    pub fn join(
        &mut self,
        group: &str,
        client_id: &str,
        topics: Vec<String>,
        session_timeout_ms: i64,
        strategy: AssignmentStrategy,
        now_ms: i64,
        partitions: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Membership, GroupError> {
        if session_timeout_ms <= 0 {
            return Err(GroupError::InvalidSessionTimeout {
                group: group.to_owned(),
                session_timeout_ms,
            });
        }
        let topics: BTreeSet<String> = topics.into_iter().collect();
        if topics.is_empty() {
            return Err(GroupError::EmptySubscription {
                group: group.to_owned(),
                client_id: client_id.to_owned(),
            });
        }
        if let Some(topic) = topics.iter().find(|topic| partitions(topic).is_none()) {
            return Err(GroupError::UnknownTopic {
                group: group.to_owned(),
                topic: topic.clone(),
            });
        }
        // Expired members go in the same rebalance as the join.
        let expired = self.remove_expired(group, now_ms);
        let g = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(|| Group::new(strategy));
        if g.members.is_empty() {
            g.strategy = strategy;
        } else if g.strategy != strategy {
            if expired {
                g.rebalance();
            }
            return Err(GroupError::InconsistentStrategy {
                group: group.to_owned(),
                requested: strategy,
                current: g.strategy,
            });
        }
        g.member_seq += 1;
        // The sequence number has no '-', so the id's last '-' separates the client id from
        // it: ids are unique because sequence numbers are.
        let member_id = format!("{client_id}-{}", g.member_seq);
        g.members.insert(
            member_id.clone(),
            Member {
                client_id: client_id.to_owned(),
                topics,
                session_timeout_ms,
                last_heartbeat_ms: now_ms,
                assignment: Vec::new(),
            },
        );
        for topic in g.subscribed_topics() {
            let count = partitions(&topic).unwrap_or(0);
            g.partition_counts.insert(topic, count);
        }
        g.rebalance();
        let assignment = g
            .members
            .get(&member_id)
            .map(|m| m.assignment.clone())
            .unwrap_or_default();
        Ok(Membership {
            member_id,
            generation: g.generation,
            assignment,
        })
    }

    /// Records that `member_id` is alive at `now_ms` and returns its current generation and
    /// assignment; a generation different from the one the member last saw means the group
    /// rebalanced.
    ///
    /// Expired members are evicted first, so a member whose session timed out gets
    /// [`GroupError::UnknownMember`] and must join again.
    pub fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        now_ms: i64,
    ) -> Result<Membership, GroupError> {
        self.expire_group(group, now_ms);
        let g = self
            .groups
            .get_mut(group)
            .ok_or_else(|| unknown_member(group, member_id))?;
        let generation = g.generation;
        let member = g
            .members
            .get_mut(member_id)
            .ok_or_else(|| unknown_member(group, member_id))?;
        member.touch(now_ms);
        Ok(Membership {
            member_id: member_id.to_owned(),
            generation,
            assignment: member.assignment.clone(),
        })
    }

    /// Removes `member_id` from `group` and rebalances the remaining members. The group's
    /// state (generation, member-id counter) is kept even when it becomes empty.
    ///
    /// Expired members are evicted first; leaving with an unknown or evicted member id fails
    /// with [`GroupError::UnknownMember`].
    pub fn leave(&mut self, group: &str, member_id: &str, now_ms: i64) -> Result<(), GroupError> {
        // Expired members go in the same rebalance as the leave.
        let expired = self.remove_expired(group, now_ms);
        let g = self
            .groups
            .get_mut(group)
            .ok_or_else(|| unknown_member(group, member_id))?;
        let left = g.members.remove(member_id).is_some();
        if left || expired {
            g.rebalance();
        }
        if left {
            Ok(())
        } else {
            Err(unknown_member(group, member_id))
        }
    }

    /// Evicts every member of every group that missed its session timeout at `now_ms` (more
    /// than `session_timeout_ms` since its last heartbeat), rebalancing each group that lost
    /// members once.
    ///
    /// Returns `(group, member_id)` for every member evicted since the previous call to
    /// `expire`, including members evicted lazily by [`join`](Self::join),
    /// [`heartbeat`](Self::heartbeat), [`leave`](Self::leave),
    /// [`validate_commit`](Self::validate_commit) and
    /// [`partitions_changed`](Self::partitions_changed), in eviction order.
    pub fn expire(&mut self, now_ms: i64) -> Vec<(String, String)> {
        let names: Vec<String> = self.groups.keys().cloned().collect();
        for name in names {
            self.expire_group(&name, now_ms);
        }
        std::mem::take(&mut self.evicted)
    }

    /// Reacts to a change in the partition count of `topic`: every group subscribed to it
    /// whose assignment was computed with another count than `partitions(topic)` (`None`, a
    /// deleted topic, counts as 0 partitions) rebalances. Expired members of every group are
    /// evicted first, in the same rebalance.
    ///
    /// Returns the groups that rebalanced, sorted.
    pub fn partitions_changed(
        &mut self,
        topic: &str,
        now_ms: i64,
        partitions: &dyn Fn(&str) -> Option<u32>,
    ) -> Vec<String> {
        let count = partitions(topic).unwrap_or(0);
        let mut rebalanced = Vec::new();
        for (name, g) in &mut self.groups {
            let expired = g.remove_expired(now_ms);
            let changed =
                g.is_subscribed(topic) && g.partition_counts.get(topic).copied() != Some(count);
            if changed {
                g.partition_counts.insert(topic.to_owned(), count);
            }
            if changed || !expired.is_empty() {
                g.rebalance();
                rebalanced.push(name.clone());
            }
            self.evicted
                .extend(expired.into_iter().map(|member| (name.clone(), member)));
        }
        rebalanced
    }

    /// Checks that `identity` may commit offsets for `tps` in `group` at `now_ms`.
    ///
    /// Expired members are evicted first. A [`CommitIdentity::Standalone`] commit is allowed
    /// only while the group has no members (or does not exist). A
    /// [`CommitIdentity::Member`] commit needs a current member
    /// ([`GroupError::UnknownMember`]), the current generation
    /// ([`GroupError::IllegalGeneration`]) and every partition in `tps` assigned to that member
    /// ([`GroupError::NotAssigned`], naming the first one that is not). A successful member
    /// commit also counts as a heartbeat, as in Kafka.
    pub fn validate_commit(
        &mut self,
        group: &str,
        identity: &CommitIdentity,
        tps: &[TopicPartition],
        now_ms: i64,
    ) -> Result<(), GroupError> {
        self.expire_group(group, now_ms);
        let g = self.groups.get_mut(group);
        match identity {
            CommitIdentity::Standalone => match g {
                Some(g) if !g.members.is_empty() => Err(GroupError::GroupHasMembers {
                    group: group.to_owned(),
                    members: g.members.len(),
                }),
                _ => Ok(()),
            },
            CommitIdentity::Member {
                member_id,
                generation,
            } => {
                let g = g.ok_or_else(|| unknown_member(group, member_id))?;
                let current = g.generation;
                let owners = &g.owners;
                let member = g
                    .members
                    .get_mut(member_id)
                    .ok_or_else(|| unknown_member(group, member_id))?;
                if *generation != current {
                    return Err(GroupError::IllegalGeneration {
                        group: group.to_owned(),
                        member: member_id.clone(),
                        given: *generation,
                        current,
                    });
                }
                if let Some(tp) = tps.iter().find(|tp| owners.get(*tp) != Some(member_id)) {
                    return Err(GroupError::NotAssigned {
                        group: group.to_owned(),
                        member: member_id.clone(),
                        generation: current,
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    });
                }
                member.touch(now_ms);
                Ok(())
            }
        }
    }

    /// A snapshot of `group`, or `None` if it has no state. Reflects the state as of the last
    /// call that took `now_ms` (members past their timeout stay listed until evicted).
    pub fn describe(&self, group: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group)?;
        Some(GroupDescription {
            group: group.to_owned(),
            generation: g.generation,
            strategy: g.strategy,
            partition_counts: g.partition_counts.clone(),
            members: g
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    client_id: m.client_id.clone(),
                    topics: m.topics.iter().cloned().collect(),
                    assignment: m.assignment.clone(),
                    last_heartbeat_ms: m.last_heartbeat_ms,
                    session_timeout_ms: m.session_timeout_ms,
                })
                .collect(),
        })
    }

    /// The names of all groups that have state, including groups whose members all left,
    /// sorted.
    pub fn groups(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// The member of `group` that owns `tp` in the current generation, if any.
    pub fn owner(&self, group: &str, tp: &TopicPartition) -> Option<&str> {
        self.groups.get(group)?.owners.get(tp).map(String::as_str)
    }

    /// Forgets an empty group entirely; returns whether it existed. A group with members is
    /// not deleted ([`GroupError::NonEmptyGroup`]).
    ///
    /// After deletion a new group of the same name starts again at generation 1 and member
    /// sequence 1, so only delete groups whose old members are known to be gone.
    pub fn delete_group(&mut self, group: &str) -> Result<bool, GroupError> {
        match self.groups.get(group) {
            None => Ok(false),
            Some(g) if !g.members.is_empty() => Err(GroupError::NonEmptyGroup {
                group: group.to_owned(),
                members: g.members.len(),
            }),
            Some(_) => {
                self.groups.remove(group);
                Ok(true)
            }
        }
    }

    /// Evicts the expired members of one group and rebalances it if any were evicted.
    fn expire_group(&mut self, group: &str, now_ms: i64) {
        if self.remove_expired(group, now_ms) {
            if let Some(g) = self.groups.get_mut(group) {
                g.rebalance();
            }
        }
    }

    /// Removes the expired members of one group *without* rebalancing, recording them for
    /// [`expire`](Self::expire); returns whether any were removed (the caller must then
    /// rebalance).
    fn remove_expired(&mut self, group: &str, now_ms: i64) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        let expired = g.remove_expired(now_ms);
        let any = !expired.is_empty();
        self.evicted
            .extend(expired.into_iter().map(|member| (group.to_owned(), member)));
        any
    }
}

fn unknown_member(group: &str, member_id: &str) -> GroupError {
    GroupError::UnknownMember {
        group: group.to_owned(),
        member: member_id.to_owned(),
    }
}

/// Member id → subscribed topics.
type Subscriptions<'a> = BTreeMap<&'a str, &'a BTreeSet<String>>;

/// Computes the assignment of every member (members without partitions map to an empty
/// list; lists are not necessarily sorted). `counts` holds the partition counts of the
/// subscribed topics; `previous` the current owners (used by [`AssignmentStrategy::Sticky`]).
fn assign<'a>(
    strategy: AssignmentStrategy,
    subscriptions: &Subscriptions<'a>,
    counts: &BTreeMap<String, u32>,
    previous: &BTreeMap<TopicPartition, String>,
) -> BTreeMap<&'a str, Vec<TopicPartition>> {
    match strategy {
        AssignmentStrategy::Range => assign_range(subscriptions, counts),
        AssignmentStrategy::RoundRobin => assign_round_robin(subscriptions, counts),
        AssignmentStrategy::Sticky => assign_sticky(subscriptions, counts, previous),
    }
}

fn empty_assignment<'a>(
    subscriptions: &Subscriptions<'a>,
) -> BTreeMap<&'a str, Vec<TopicPartition>> {
    subscriptions.keys().map(|id| (*id, Vec::new())).collect()
}

/// Kafka's `RangeAssignor`.
fn assign_range<'a>(
    subscriptions: &Subscriptions<'a>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<&'a str, Vec<TopicPartition>> {
    let mut result = empty_assignment(subscriptions);
    for (topic, &count) in counts {
        // BTreeMap iteration: sorted by member id.
        let members: Vec<&str> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(id, _)| *id)
            .collect();
        if members.is_empty() {
            continue;
        }
        let count = count as usize;
        let per_member = count / members.len();
        let extra = count % members.len();
        for (i, id) in members.into_iter().enumerate() {
            let start = per_member * i + i.min(extra);
            let len = per_member + usize::from(i < extra);
            let tps = result.entry(id).or_default();
            // start + len <= count <= u32::MAX, so the partition numbers fit.
            tps.extend(
                (start..start + len)
                    .filter_map(|p| u32::try_from(p).ok())
                    .map(|p| TopicPartition::new(topic.clone(), p)),
            );
        }
    }
    result
}

/// Kafka's `RoundRobinAssignor`.
fn assign_round_robin<'a>(
    subscriptions: &Subscriptions<'a>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<&'a str, Vec<TopicPartition>> {
    let mut result = empty_assignment(subscriptions);
    let members: Vec<(&'a str, &BTreeSet<String>)> = subscriptions
        .iter()
        .map(|(id, topics)| (*id, *topics))
        .collect();
    let mut next = 0;
    for (topic, &count) in counts {
        if !members.iter().any(|(_, topics)| topics.contains(topic)) {
            continue;
        }
        for partition in 0..count {
            // Some member subscribes to `topic`, so this finds one within a full turn.
            while !members[next].1.contains(topic) {
                next = (next + 1) % members.len();
            }
            result
                .entry(members[next].0)
                .or_default()
                .push(TopicPartition::new(topic, partition));
            next = (next + 1) % members.len();
        }
    }
    result
}

/// Sticky assignment: keep valid previous owners, give the rest to the least loaded eligible
/// members (most constrained partitions first), then move single partitions from a member to
/// one with at least two fewer partitions that can take it, until no such move exists.
fn assign_sticky<'a>(
    subscriptions: &Subscriptions<'a>,
    counts: &BTreeMap<String, u32>,
    previous: &BTreeMap<TopicPartition, String>,
) -> BTreeMap<&'a str, Vec<TopicPartition>> {
    let mut owned: BTreeMap<&'a str, BTreeSet<TopicPartition>> = subscriptions
        .keys()
        .map(|id| (*id, BTreeSet::new()))
        .collect();
    // Members that can take each topic, sorted by id.
    let mut eligible: BTreeMap<&str, Vec<&'a str>> = BTreeMap::new();
    for topic in counts.keys() {
        let members: Vec<&'a str> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(id, _)| *id)
            .collect();
        if !members.is_empty() {
            eligible.insert(topic.as_str(), members);
        }
    }

    // 1. Keep every partition whose previous owner is still here and subscribed.
    let mut unowned = Vec::new();
    for (topic, &count) in counts {
        if !eligible.contains_key(topic.as_str()) {
            continue;
        }
        for partition in 0..count {
            let tp = TopicPartition::new(topic.clone(), partition);
            let keeper = previous
                .get(&tp)
                .and_then(|owner| subscriptions.get_key_value(owner.as_str()))
                .filter(|(_, topics)| topics.contains(topic))
                .map(|(id, _)| *id);
            match keeper.and_then(|id| owned.get_mut(id)) {
                Some(set) => {
                    set.insert(tp);
                }
                None => unowned.push(tp),
            }
        }
    }

    // 2. Place the rest, partitions with the fewest eligible members first, each on the
    //    eligible member with the fewest partitions (ties: smallest member id).
    unowned.sort_by_cached_key(|tp| {
        (
            eligible.get(tp.topic.as_str()).map_or(0, Vec::len),
            tp.topic.clone(),
            tp.partition,
        )
    });
    for tp in unowned {
        let target = eligible
            .get(tp.topic.as_str())
            .and_then(|members| {
                members
                    .iter()
                    .min_by_key(|id| (owned.get(**id).map_or(0, BTreeSet::len), **id))
            })
            .copied();
        if let Some(set) = target.and_then(|id| owned.get_mut(id)) {
            set.insert(tp);
        }
    }

    // 3. Balance. Each move lowers the sum of squared assignment sizes, so this terminates.
    while let Some((from, to, tp)) = find_sticky_move(subscriptions, &owned, previous) {
        if let Some(set) = owned.get_mut(from) {
            set.remove(&tp);
        }
        if let Some(set) = owned.get_mut(to) {
            set.insert(tp);
        }
    }

    owned
        .into_iter()
        .map(|(id, set)| (id, set.into_iter().collect()))
        .collect()
}

/// Finds a partition to move from a member with the most partitions to one with at least two
/// fewer that subscribes to its topic. Prefers the fullest giver and the emptiest taker, and a
/// partition the giver did not own before this rebalance (moving it costs no stickiness).
fn find_sticky_move<'a>(
    subscriptions: &Subscriptions<'a>,
    owned: &BTreeMap<&'a str, BTreeSet<TopicPartition>>,
    previous: &BTreeMap<TopicPartition, String>,
) -> Option<(&'a str, &'a str, TopicPartition)> {
    let mut by_size: Vec<(&'a str, usize)> = owned.iter().map(|(id, s)| (*id, s.len())).collect();
    by_size.sort_by_key(|&(id, len)| (Reverse(len), id));
    for &(from, from_len) in &by_size {
        for &(to, to_len) in by_size.iter().rev() {
            if to_len + 2 > from_len {
                // Takers are visited from the emptiest up: no later one can take either.
                break;
            }
            let Some(to_topics) = subscriptions.get(to) else {
                continue;
            };
            let candidates = owned
                .get(from)
                .into_iter()
                .flatten()
                .filter(|tp| to_topics.contains(&tp.topic));
            let pick = candidates
                .max_by_key(|tp| (previous.get(*tp).map(String::as_str) != Some(from), *tp));
            if let Some(tp) = pick {
                return Some((from, to, tp.clone()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TIMEOUT: i64 = 10_000;

    fn tp(topic: &str, partition: u32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn tps(topic: &str, partitions: &[u32]) -> Vec<TopicPartition> {
        partitions.iter().map(|p| tp(topic, *p)).collect()
    }

    /// A partition-count lookup over a fixed table.
    fn topics(table: &[(&str, u32)]) -> impl Fn(&str) -> Option<u32> {
        let table: BTreeMap<String, u32> =
            table.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        move |topic| table.get(topic).copied()
    }

    fn join(
        c: &mut GroupCoordinator,
        client: &str,
        subscription: &[&str],
        strategy: AssignmentStrategy,
        now_ms: i64,
        partitions: &dyn Fn(&str) -> Option<u32>,
    ) -> Membership {
        let subscription = subscription.iter().map(|t| (*t).to_owned()).collect();
        c.join(
            "g",
            client,
            subscription,
            TIMEOUT,
            strategy,
            now_ms,
            partitions,
        )
        .unwrap()
    }

    /// Member id → assignment, from `describe`.
    fn assignments(c: &GroupCoordinator, group: &str) -> BTreeMap<String, Vec<TopicPartition>> {
        c.describe(group)
            .unwrap()
            .members
            .into_iter()
            .map(|m| (m.member_id, m.assignment))
            .collect()
    }

    #[test]
    fn strategy_names_round_trip() {
        for strategy in AssignmentStrategy::ALL {
            let name = strategy.to_string();
            assert_eq!(name.parse::<AssignmentStrategy>().unwrap(), strategy);
            assert_eq!(
                name.to_uppercase().parse::<AssignmentStrategy>().unwrap(),
                strategy
            );
            let json = serde_json::to_string(&strategy).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<AssignmentStrategy>(&json).unwrap(),
                strategy
            );
        }
        let err = "fair".parse::<AssignmentStrategy>().unwrap_err();
        assert!(err.to_string().contains("\"fair\""), "{err}");
        assert_eq!(AssignmentStrategy::default(), AssignmentStrategy::Range);
    }

    #[test]
    fn topic_partition_orders_by_topic_then_partition() {
        let mut v = vec![tp("b", 0), tp("a", 10), tp("a", 2)];
        v.sort();
        assert_eq!(v, vec![tp("a", 2), tp("a", 10), tp("b", 0)]);
        assert_eq!(tp("orders", 3).to_string(), "orders-3");
        let json = serde_json::to_string(&tp("t", 1)).unwrap();
        assert_eq!(
            serde_json::from_str::<TopicPartition>(&json).unwrap(),
            tp("t", 1)
        );
    }

    #[test]
    fn first_join_starts_generation_one_with_predictable_ids() {
        let parts = topics(&[("t", 2)]);
        let mut c = GroupCoordinator::new();
        let a = join(&mut c, "app", &["t"], AssignmentStrategy::Range, 0, &parts);
        assert_eq!(a.member_id, "app-1");
        assert_eq!(a.generation, 1);
        assert_eq!(a.assignment, tps("t", &[0, 1]));
        let b = join(
            &mut c,
            "app",
            &["t", "t"],
            AssignmentStrategy::Range,
            1,
            &parts,
        );
        assert_eq!(b.member_id, "app-2");
        assert_eq!(b.generation, 2);
        assert_eq!(b.assignment, tps("t", &[1]));
        // The first member sees the rebalance through its heartbeat.
        let a2 = c.heartbeat("g", "app-1", 2).unwrap();
        assert_eq!(a2.generation, 2);
        assert_eq!(a2.assignment, tps("t", &[0]));
        assert_eq!(c.groups(), vec!["g".to_owned()]);
        assert_eq!(
            c.describe("g").unwrap().members[1].topics,
            vec!["t".to_owned()]
        );
    }

    #[test]
    fn three_partitions_four_members_leave_one_idle() {
        for strategy in AssignmentStrategy::ALL {
            let parts = topics(&[("t", 3)]);
            let mut c = GroupCoordinator::new();
            for (i, client) in ["a", "b", "c", "d"].iter().enumerate() {
                join(&mut c, client, &["t"], strategy, i as i64, &parts);
            }
            let all = assignments(&c, "g");
            assert_eq!(all.len(), 4);
            let idle: Vec<_> = all.iter().filter(|(_, a)| a.is_empty()).collect();
            assert_eq!(idle.len(), 1, "{strategy}: {all:?}");
            assert!(all.values().all(|a| a.len() <= 1), "{strategy}: {all:?}");
            let mut owned: Vec<TopicPartition> = all.values().flatten().cloned().collect();
            owned.sort();
            assert_eq!(owned, tps("t", &[0, 1, 2]), "{strategy}");
            for (member, assignment) in &all {
                for p in assignment {
                    assert_eq!(c.owner("g", p), Some(member.as_str()));
                }
            }
            assert_eq!(c.describe("g").unwrap().generation, 4);
        }
    }

    #[test]
    fn range_splits_seven_partitions_over_three_members() {
        let parts = topics(&[("t", 7)]);
        let mut c = GroupCoordinator::new();
        for client in ["a", "b", "c"] {
            join(&mut c, client, &["t"], AssignmentStrategy::Range, 0, &parts);
        }
        let all = assignments(&c, "g");
        assert_eq!(all["a-1"], tps("t", &[0, 1, 2]));
        assert_eq!(all["b-2"], tps("t", &[3, 4]));
        assert_eq!(all["c-3"], tps("t", &[5, 6]));
    }

    #[test]
    fn range_matches_kafka_documented_example() {
        // RangeAssignor javadoc: C0, C1 subscribed to t0 and t1 with 3 partitions each:
        // C0: [t0p0, t0p1, t1p0, t1p1], C1: [t0p2, t1p2].
        let parts = topics(&[("t0", 3), ("t1", 3)]);
        let mut c = GroupCoordinator::new();
        join(
            &mut c,
            "C0",
            &["t0", "t1"],
            AssignmentStrategy::Range,
            0,
            &parts,
        );
        join(
            &mut c,
            "C1",
            &["t0", "t1"],
            AssignmentStrategy::Range,
            0,
            &parts,
        );
        let all = assignments(&c, "g");
        assert_eq!(
            all["C0-1"],
            vec![tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)]
        );
        assert_eq!(all["C1-2"], vec![tp("t0", 2), tp("t1", 2)]);
    }

    #[test]
    fn round_robin_matches_kafka_documented_examples() {
        // RoundRobinAssignor javadoc, first example: C0, C1 subscribed to t0 and t1 with 3
        // partitions each: C0: [t0p0, t0p2, t1p1], C1: [t0p1, t1p0, t1p2].
        let parts = topics(&[("t0", 3), ("t1", 3)]);
        let mut c = GroupCoordinator::new();
        join(
            &mut c,
            "C0",
            &["t0", "t1"],
            AssignmentStrategy::RoundRobin,
            0,
            &parts,
        );
        join(
            &mut c,
            "C1",
            &["t0", "t1"],
            AssignmentStrategy::RoundRobin,
            0,
            &parts,
        );
        let all = assignments(&c, "g");
        assert_eq!(all["C0-1"], vec![tp("t0", 0), tp("t0", 2), tp("t1", 1)]);
        assert_eq!(all["C1-2"], vec![tp("t0", 1), tp("t1", 0), tp("t1", 2)]);

        // Second example: t0, t1, t2 with 1, 2, 3 partitions; C0 subscribes to t0, C1 to t0
        // and t1, C2 to t0, t1 and t2: C0: [t0p0], C1: [t1p0], C2: [t1p1, t2p0, t2p1, t2p2].
        let parts = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let mut c = GroupCoordinator::new();
        join(
            &mut c,
            "C0",
            &["t0"],
            AssignmentStrategy::RoundRobin,
            0,
            &parts,
        );
        join(
            &mut c,
            "C1",
            &["t0", "t1"],
            AssignmentStrategy::RoundRobin,
            0,
            &parts,
        );
        join(
            &mut c,
            "C2",
            &["t0", "t1", "t2"],
            AssignmentStrategy::RoundRobin,
            0,
            &parts,
        );
        let all = assignments(&c, "g");
        assert_eq!(all["C0-1"], vec![tp("t0", 0)]);
        assert_eq!(all["C1-2"], vec![tp("t1", 0)]);
        assert_eq!(
            all["C2-3"],
            vec![tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)]
        );
    }

    #[test]
    fn partitions_only_go_to_subscribers() {
        for strategy in AssignmentStrategy::ALL {
            let parts = topics(&[("x", 4), ("y", 1)]);
            let mut c = GroupCoordinator::new();
            join(&mut c, "a", &["x"], strategy, 0, &parts);
            join(&mut c, "b", &["y"], strategy, 0, &parts);
            let all = assignments(&c, "g");
            assert_eq!(all["a-1"], tps("x", &[0, 1, 2, 3]), "{strategy}");
            assert_eq!(all["b-2"], tps("y", &[0]), "{strategy}");
        }
    }

    #[test]
    fn session_timeout_boundary_and_eviction() {
        for strategy in AssignmentStrategy::ALL {
            let parts = topics(&[("t", 4)]);
            let mut c = GroupCoordinator::new();
            join(&mut c, "a", &["t"], strategy, 0, &parts);
            join(&mut c, "b", &["t"], strategy, 1_000, &parts);
            assert_eq!(c.describe("g").unwrap().generation, 2);
            // a heartbeats, b goes quiet after joining at 1_000.
            c.heartbeat("g", "a-1", 5_000).unwrap();
            // Exactly at last + timeout the member is still alive.
            assert!(c.expire(1_000 + TIMEOUT).is_empty());
            assert_eq!(c.describe("g").unwrap().members.len(), 2);
            assert_eq!(c.describe("g").unwrap().generation, 2);
            assert_eq!(
                c.heartbeat("g", "a-1", 1_000 + TIMEOUT).unwrap().generation,
                2
            );
            // One millisecond later it is gone and its partitions move to a.
            let evicted = c.expire(1_001 + TIMEOUT);
            assert_eq!(
                evicted,
                vec![("g".to_owned(), "b-2".to_owned())],
                "{strategy}"
            );
            let a = c.heartbeat("g", "a-1", 1_001 + TIMEOUT).unwrap();
            assert_eq!(a.generation, 3);
            assert_eq!(a.assignment, tps("t", &[0, 1, 2, 3]));
            assert_eq!(c.owner("g", &tp("t", 3)), Some("a-1"));
            assert_eq!(
                c.heartbeat("g", "b-2", 1_001 + TIMEOUT).unwrap_err(),
                GroupError::UnknownMember {
                    group: "g".into(),
                    member: "b-2".into()
                }
            );
        }
    }

    #[test]
    fn late_heartbeat_is_rejected_and_the_eviction_is_reported_by_expire() {
        let parts = topics(&[("t", 2)]);
        let mut c = GroupCoordinator::new();
        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        join(&mut c, "b", &["t"], AssignmentStrategy::Range, 0, &parts);
        c.heartbeat("g", "b-2", TIMEOUT).unwrap();
        let err = c.heartbeat("g", "a-1", TIMEOUT + 1).unwrap_err();
        assert!(matches!(err, GroupError::UnknownMember { .. }), "{err}");
        assert_eq!(c.describe("g").unwrap().generation, 3);
        assert_eq!(
            c.heartbeat("g", "b-2", TIMEOUT + 1).unwrap().assignment,
            tps("t", &[0, 1])
        );
        assert_eq!(
            c.expire(TIMEOUT + 1),
            vec![("g".to_owned(), "a-1".to_owned())]
        );
        assert!(c.expire(TIMEOUT + 1).is_empty());
    }

    #[test]
    fn simultaneous_expiries_rebalance_once() {
        let parts = topics(&[("t", 3)]);
        let mut c = GroupCoordinator::new();
        for client in ["a", "b", "c"] {
            join(
                &mut c,
                client,
                &["t"],
                AssignmentStrategy::RoundRobin,
                0,
                &parts,
            );
        }
        c.heartbeat("g", "c-3", 50).unwrap();
        let evicted = c.expire(TIMEOUT + 1);
        assert_eq!(evicted.len(), 2);
        let d = c.describe("g").unwrap();
        assert_eq!(d.generation, 4);
        assert_eq!(d.members[0].assignment, tps("t", &[0, 1, 2]));
    }

    #[test]
    fn leave_moves_partitions_and_bumps_generation() {
        let parts = topics(&[("t", 4)]);
        let mut c = GroupCoordinator::new();
        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        join(&mut c, "b", &["t"], AssignmentStrategy::Range, 0, &parts);
        c.leave("g", "a-1", 10).unwrap();
        let b = c.heartbeat("g", "b-2", 10).unwrap();
        assert_eq!(b.generation, 3);
        assert_eq!(b.assignment, tps("t", &[0, 1, 2, 3]));
        assert!(matches!(
            c.leave("g", "a-1", 10).unwrap_err(),
            GroupError::UnknownMember { .. }
        ));
        assert!(matches!(
            c.leave("nope", "a-1", 10),
            Err(GroupError::UnknownMember { .. })
        ));
        // The last member leaving keeps the group's state and bumps the generation again.
        c.leave("g", "b-2", 11).unwrap();
        let d = c.describe("g").unwrap();
        assert_eq!(d.generation, 4);
        assert!(d.members.is_empty());
        assert_eq!(c.owner("g", &tp("t", 0)), None);
        // Member ids keep counting and generations keep growing after the group empties.
        let again = join(&mut c, "a", &["t"], AssignmentStrategy::Sticky, 12, &parts);
        assert_eq!(again.member_id, "a-3");
        assert_eq!(again.generation, 5);
        assert_eq!(
            c.describe("g").unwrap().strategy,
            AssignmentStrategy::Sticky
        );
    }

    #[test]
    fn commit_validation() {
        let parts = topics(&[("t", 2)]);
        let mut c = GroupCoordinator::new();
        let a = join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        let old = CommitIdentity::Member {
            member_id: a.member_id.clone(),
            generation: 1,
        };
        c.validate_commit("g", &old, &tps("t", &[0, 1]), 1).unwrap();
        join(&mut c, "b", &["t"], AssignmentStrategy::Range, 2, &parts);

        // The old generation is rejected.
        let err = c
            .validate_commit("g", &old, &tps("t", &[0]), 3)
            .unwrap_err();
        assert_eq!(
            err,
            GroupError::IllegalGeneration {
                group: "g".into(),
                member: "a-1".into(),
                given: 1,
                current: 2
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("\"g\"") && msg.contains("\"a-1\""), "{msg}");
        assert!(
            msg.contains("generation 1") && msg.contains("is 2"),
            "{msg}"
        );

        // The current generation is accepted for owned partitions only.
        let cur = CommitIdentity::Member {
            member_id: "a-1".into(),
            generation: 2,
        };
        c.validate_commit("g", &cur, &tps("t", &[0]), 3).unwrap();
        c.validate_commit("g", &cur, &[], 3).unwrap();
        let err = c
            .validate_commit("g", &cur, &tps("t", &[0, 1]), 3)
            .unwrap_err();
        assert_eq!(
            err,
            GroupError::NotAssigned {
                group: "g".into(),
                member: "a-1".into(),
                generation: 2,
                topic: "t".into(),
                partition: 1
            }
        );
        assert!(
            err.to_string().contains("partition 1 of topic \"t\""),
            "{err}"
        );
        let err = c
            .validate_commit("g", &cur, &tps("other", &[0]), 3)
            .unwrap_err();
        assert!(matches!(err, GroupError::NotAssigned { .. }), "{err}");

        // Unknown members, whatever their generation.
        let ghost = CommitIdentity::Member {
            member_id: "ghost-9".into(),
            generation: 2,
        };
        let err = c
            .validate_commit("g", &ghost, &tps("t", &[0]), 3)
            .unwrap_err();
        assert!(matches!(err, GroupError::UnknownMember { .. }), "{err}");
        assert!(err.to_string().contains("\"ghost-9\""), "{err}");
        let err = c.validate_commit("other", &cur, &[], 3).unwrap_err();
        assert!(matches!(err, GroupError::UnknownMember { .. }), "{err}");
    }

    #[test]
    fn commit_counts_as_heartbeat_and_expiry_applies_first() {
        let parts = topics(&[("t", 1)]);
        let mut c = GroupCoordinator::new();
        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        let id = CommitIdentity::Member {
            member_id: "a-1".into(),
            generation: 1,
        };
        c.validate_commit("g", &id, &tps("t", &[0]), TIMEOUT)
            .unwrap();
        // Alive until TIMEOUT + TIMEOUT thanks to the commit.
        assert!(c.expire(2 * TIMEOUT).is_empty());
        let err = c
            .validate_commit("g", &id, &tps("t", &[0]), 2 * TIMEOUT + 1)
            .unwrap_err();
        assert!(matches!(err, GroupError::UnknownMember { .. }), "{err}");
    }

    #[test]
    fn standalone_commits_only_without_members() {
        let parts = topics(&[("t", 1)]);
        let mut c = GroupCoordinator::new();
        let s = CommitIdentity::Standalone;
        // A group that does not exist has no members.
        c.validate_commit("g", &s, &tps("t", &[0]), 0).unwrap();
        assert!(c.groups().is_empty());
        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        let err = c.validate_commit("g", &s, &tps("t", &[0]), 1).unwrap_err();
        assert_eq!(
            err,
            GroupError::GroupHasMembers {
                group: "g".into(),
                members: 1
            }
        );
        assert!(err.to_string().contains("1 active member"), "{err}");
        // Once the member expired, standalone commits are allowed again.
        c.validate_commit("g", &s, &tps("t", &[0]), TIMEOUT + 1)
            .unwrap();
        assert_eq!(c.expire(TIMEOUT + 1).len(), 1);
    }

    #[test]
    fn join_errors() {
        let parts = topics(&[("t", 1)]);
        let mut c = GroupCoordinator::new();
        let err = c
            .join(
                "g",
                "a",
                vec!["nope".into()],
                TIMEOUT,
                AssignmentStrategy::Range,
                0,
                &parts,
            )
            .unwrap_err();
        assert_eq!(
            err,
            GroupError::UnknownTopic {
                group: "g".into(),
                topic: "nope".into()
            }
        );
        assert!(
            c.groups().is_empty(),
            "a failed first join creates no group"
        );
        let err = c
            .join(
                "g",
                "a",
                vec![],
                TIMEOUT,
                AssignmentStrategy::Range,
                0,
                &parts,
            )
            .unwrap_err();
        assert!(matches!(err, GroupError::EmptySubscription { .. }), "{err}");
        let err = c
            .join(
                "g",
                "a",
                vec!["t".into()],
                0,
                AssignmentStrategy::Range,
                0,
                &parts,
            )
            .unwrap_err();
        assert!(
            matches!(err, GroupError::InvalidSessionTimeout { .. }),
            "{err}"
        );

        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 0, &parts);
        let err = c
            .join(
                "g",
                "b",
                vec!["t".into()],
                TIMEOUT,
                AssignmentStrategy::Sticky,
                0,
                &parts,
            )
            .unwrap_err();
        assert_eq!(
            err,
            GroupError::InconsistentStrategy {
                group: "g".into(),
                requested: AssignmentStrategy::Sticky,
                current: AssignmentStrategy::Range
            }
        );
        assert!(err.to_string().contains("range") && err.to_string().contains("sticky"));
        // Failed joins change nothing.
        let d = c.describe("g").unwrap();
        assert_eq!((d.generation, d.members.len()), (1, 1));
        // Other groups are independent.
        let other = c
            .join(
                "h",
                "b",
                vec!["t".into()],
                TIMEOUT,
                AssignmentStrategy::Sticky,
                0,
                &parts,
            )
            .unwrap();
        assert_eq!((other.member_id.as_str(), other.generation), ("b-1", 1));
        assert_eq!(c.groups(), vec!["g".to_owned(), "h".to_owned()]);
    }

    #[test]
    fn partition_count_change_triggers_rebalance() {
        for strategy in AssignmentStrategy::ALL {
            let mut c = GroupCoordinator::new();
            let two = topics(&[("t", 2), ("u", 1)]);
            join(&mut c, "a", &["t"], strategy, 0, &two);
            join(&mut c, "b", &["t"], strategy, 0, &two);
            assert_eq!(c.describe("g").unwrap().generation, 2);
            // Same count: nothing happens.
            assert!(c.partitions_changed("t", 1, &two).is_empty());
            assert_eq!(c.describe("g").unwrap().generation, 2);
            // Unsubscribed topic: nothing happens.
            let u_grew = topics(&[("t", 2), ("u", 5)]);
            assert!(c.partitions_changed("u", 1, &u_grew).is_empty());

            let four = topics(&[("t", 4), ("u", 5)]);
            assert_eq!(c.partitions_changed("t", 2, &four), vec!["g".to_owned()]);
            let d = c.describe("g").unwrap();
            assert_eq!(d.generation, 3, "{strategy}");
            assert_eq!(d.partition_counts["t"], 4);
            let mut owned: Vec<TopicPartition> = d
                .members
                .iter()
                .flat_map(|m| m.assignment.clone())
                .collect();
            owned.sort();
            assert_eq!(owned, tps("t", &[0, 1, 2, 3]), "{strategy}");
            assert!(
                d.members.iter().all(|m| m.assignment.len() == 2),
                "{strategy}"
            );
            assert_eq!(c.heartbeat("g", "a-1", 3).unwrap().generation, 3);

            // A deleted topic counts as no partitions.
            assert_eq!(
                c.partitions_changed("t", 4, &topics(&[])),
                vec!["g".to_owned()]
            );
            let d = c.describe("g").unwrap();
            assert_eq!(d.generation, 4);
            assert!(d.members.iter().all(|m| m.assignment.is_empty()));
        }
    }

    #[test]
    fn sticky_keeps_previous_owners() {
        let parts = topics(&[("t", 6)]);
        let mut c = GroupCoordinator::new();
        join(&mut c, "a", &["t"], AssignmentStrategy::Sticky, 0, &parts);
        join(&mut c, "b", &["t"], AssignmentStrategy::Sticky, 0, &parts);
        let before = assignments(&c, "g");
        assert!(before.values().all(|a| a.len() == 3));
        join(&mut c, "c", &["t"], AssignmentStrategy::Sticky, 0, &parts);
        let after = assignments(&c, "g");
        for id in ["a-1", "b-2"] {
            assert_eq!(after[id].len(), 2);
            assert!(
                after[id].iter().all(|p| before[id].contains(p)),
                "{before:?} {after:?}"
            );
        }
        assert_eq!(after["c-3"].len(), 2);
        // When c leaves, a and b get its partitions back and keep their own.
        c.leave("g", "c-3", 1).unwrap();
        let back = assignments(&c, "g");
        for id in ["a-1", "b-2"] {
            assert_eq!(back[id].len(), 3);
            assert!(after[id].iter().all(|p| back[id].contains(p)));
        }
    }

    #[test]
    fn describe_and_delete_group() {
        let parts = topics(&[("t", 1)]);
        let mut c = GroupCoordinator::new();
        assert!(c.describe("g").is_none());
        assert_eq!(c.delete_group("g"), Ok(false));
        c.join(
            "g",
            "a",
            vec!["t".into()],
            300,
            AssignmentStrategy::RoundRobin,
            7,
            &parts,
        )
        .unwrap();
        c.heartbeat("g", "a-1", 9).unwrap();
        let d = c.describe("g").unwrap();
        assert_eq!(
            d,
            GroupDescription {
                group: "g".into(),
                generation: 1,
                strategy: AssignmentStrategy::RoundRobin,
                partition_counts: BTreeMap::from([("t".to_owned(), 1)]),
                members: vec![MemberDescription {
                    member_id: "a-1".into(),
                    client_id: "a".into(),
                    topics: vec!["t".into()],
                    assignment: tps("t", &[0]),
                    last_heartbeat_ms: 9,
                    session_timeout_ms: 300,
                }],
            }
        );
        assert!(matches!(
            c.delete_group("g"),
            Err(GroupError::NonEmptyGroup { members: 1, .. })
        ));
        c.leave("g", "a-1", 10).unwrap();
        assert_eq!(c.delete_group("g"), Ok(true));
        assert!(c.groups().is_empty());
    }

    #[test]
    fn heartbeat_with_earlier_time_does_not_move_liveness_back() {
        let parts = topics(&[("t", 1)]);
        let mut c = GroupCoordinator::new();
        join(&mut c, "a", &["t"], AssignmentStrategy::Range, 100, &parts);
        c.heartbeat("g", "a-1", 50).unwrap();
        assert_eq!(c.describe("g").unwrap().members[0].last_heartbeat_ms, 100);
        assert!(c.expire(100 + TIMEOUT).is_empty());
    }

    // ----- property tests -------------------------------------------------------------

    const WORLD_TOPICS: [&str; 2] = ["a", "b"];

    #[derive(Debug, Clone)]
    enum Op {
        /// Join with a subscription bitmask over `WORLD_TOPICS` (1..=3).
        Join {
            client: u8,
            mask: u8,
            timeout: i64,
        },
        /// Leave with the n-th member id ever issued (may be gone already).
        Leave(usize),
        /// Heartbeat with the n-th member id ever issued (may be gone already).
        Heartbeat(usize),
        Advance(i64),
        Expire,
        Resize {
            topic: usize,
            count: u32,
        },
    }

    fn op_strategy(homogeneous: bool) -> impl Strategy<Value = Op> {
        let mask = if homogeneous {
            Just(3u8).boxed()
        } else {
            (1u8..=3).boxed()
        };
        prop_oneof![
            4 => (0u8..3, mask, 10i64..100)
                .prop_map(|(client, mask, timeout)| Op::Join { client, mask, timeout }),
            2 => (0usize..32).prop_map(Op::Leave),
            3 => (0usize..32).prop_map(Op::Heartbeat),
            3 => (0i64..60).prop_map(Op::Advance),
            1 => Just(Op::Expire),
            1 => (0usize..2, 0u32..8).prop_map(|(topic, count)| Op::Resize { topic, count }),
        ]
    }

    /// What the test expects the group's membership to be.
    #[derive(Debug, Default)]
    struct Model {
        /// member id → (last heartbeat, timeout)
        live: BTreeMap<String, (i64, i64)>,
        /// Evicted since the last `expire` call.
        evicted: Vec<String>,
    }

    impl Model {
        fn expire(&mut self, now: i64) {
            let gone: Vec<String> = self
                .live
                .iter()
                .filter(|(_, (last, timeout))| now - last > *timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in gone {
                self.live.remove(&id);
                self.evicted.push(id);
            }
        }
    }

    /// Checks ownership and balance invariants against the world's partition counts.
    fn check_invariants(
        c: &GroupCoordinator,
        strategy: AssignmentStrategy,
        world: &BTreeMap<String, u32>,
    ) -> Result<(), TestCaseError> {
        let Some(d) = c.describe("g") else {
            return Ok(());
        };
        let mut owners: BTreeMap<TopicPartition, Vec<&str>> = BTreeMap::new();
        for m in &d.members {
            for p in &m.assignment {
                prop_assert!(
                    m.topics.contains(&p.topic),
                    "{p} given to non-subscriber {m:?}"
                );
                owners.entry(p.clone()).or_default().push(&m.member_id);
                prop_assert_eq!(c.owner("g", p), Some(m.member_id.as_str()));
            }
        }
        for (topic, &count) in world {
            let subscribed = d.members.iter().any(|m| m.topics.contains(topic));
            for partition in 0..count {
                let p = TopicPartition::new(topic.clone(), partition);
                let n = owners.get(&p).map_or(0, Vec::len);
                prop_assert_eq!(
                    n,
                    usize::from(subscribed),
                    "{} owners: {:?}",
                    p,
                    owners.get(&p)
                );
            }
        }
        prop_assert!(
            owners.keys().all(|p| p.partition < world[&p.topic]),
            "{owners:?}"
        );

        let spread = |sizes: Vec<usize>| -> usize {
            sizes.iter().max().copied().unwrap_or(0) - sizes.iter().min().copied().unwrap_or(0)
        };
        let homogeneous = d.members.windows(2).all(|w| w[0].topics == w[1].topics);
        match strategy {
            AssignmentStrategy::Range => {
                for topic in world.keys() {
                    let sizes = d
                        .members
                        .iter()
                        .filter(|m| m.topics.contains(topic))
                        .map(|m| m.assignment.iter().filter(|p| &p.topic == topic).count())
                        .collect();
                    prop_assert!(spread(sizes) <= 1, "range unbalanced on {topic}: {d:?}");
                }
            }
            AssignmentStrategy::RoundRobin | AssignmentStrategy::Sticky => {
                if homogeneous {
                    let sizes = d.members.iter().map(|m| m.assignment.len()).collect();
                    prop_assert!(spread(sizes) <= 1, "{strategy} unbalanced: {d:?}");
                }
            }
        }
        if strategy == AssignmentStrategy::Sticky {
            // No single move from a member to one with two fewer partitions is possible.
            for from in &d.members {
                for to in &d.members {
                    if from.assignment.len() >= to.assignment.len() + 2 {
                        prop_assert!(
                            from.assignment
                                .iter()
                                .all(|p| !to.topics.contains(&p.topic)),
                            "sticky could move a partition from {} to {}: {:?}",
                            from.member_id,
                            to.member_id,
                            d
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// For homogeneous subscriptions: the sticky strategy moves no more previously owned
    /// partitions than the minimum any balanced assignment must move.
    fn check_stickiness(
        before: &GroupDescription,
        after: &GroupDescription,
    ) -> Result<(), TestCaseError> {
        let now: BTreeMap<&str, &Vec<TopicPartition>> = after
            .members
            .iter()
            .map(|m| (m.member_id.as_str(), &m.assignment))
            .collect();
        let total: usize = now.values().map(|a| a.len()).sum();
        if now.is_empty() {
            return Ok(());
        }
        let still_exists = |p: &TopicPartition| {
            after
                .partition_counts
                .get(&p.topic)
                .is_some_and(|n| p.partition < *n)
        };
        let mut previous_counts = Vec::new();
        let mut lost = 0;
        for m in &before.members {
            let Some(current) = now.get(m.member_id.as_str()) else {
                continue;
            };
            let valid: Vec<&TopicPartition> =
                m.assignment.iter().filter(|p| still_exists(p)).collect();
            lost += valid.iter().filter(|p| !current.contains(p)).count();
            previous_counts.push(valid.len());
        }
        previous_counts.sort_unstable_by(|a, b| b.cmp(a));
        let floor = total / now.len();
        let ceil_slots = total % now.len();
        let minimum: usize = previous_counts
            .iter()
            .enumerate()
            .map(|(i, c)| c.saturating_sub(floor + usize::from(i < ceil_slots)))
            .sum();
        prop_assert!(
            lost <= minimum,
            "lost {lost} > minimum {minimum}: {before:?} -> {after:?}"
        );
        Ok(())
    }

    fn run_ops(
        strategy: AssignmentStrategy,
        initial: [u32; 2],
        ops: Vec<Op>,
        homogeneous: bool,
    ) -> Result<(), TestCaseError> {
        let mut world: BTreeMap<String, u32> = WORLD_TOPICS
            .iter()
            .zip(initial)
            .map(|(t, n)| ((*t).to_owned(), n))
            .collect();
        let mut c = GroupCoordinator::new();
        let mut model = Model::default();
        let mut issued: Vec<String> = Vec::new();
        let mut now = 0i64;
        let mut generation = 0u32;
        for op in ops {
            let before = c.describe("g");
            let lookup = |t: &str| world.get(t).copied();
            match op {
                Op::Join {
                    client,
                    mask,
                    timeout,
                } => {
                    let subscription: Vec<String> = WORLD_TOPICS
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, t)| (*t).to_owned())
                        .collect();
                    let m = c
                        .join(
                            "g",
                            &format!("c{client}"),
                            subscription,
                            timeout,
                            strategy,
                            now,
                            &lookup,
                        )
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    model.expire(now);
                    prop_assert!(!model.live.contains_key(&m.member_id));
                    model.live.insert(m.member_id.clone(), (now, timeout));
                    issued.push(m.member_id);
                }
                Op::Leave(i) => {
                    let Some(id) = issued.get(i).cloned() else {
                        continue;
                    };
                    let result = c.leave("g", &id, now);
                    model.expire(now);
                    prop_assert_eq!(result.is_ok(), model.live.remove(&id).is_some());
                }
                Op::Heartbeat(i) => {
                    let Some(id) = issued.get(i).cloned() else {
                        continue;
                    };
                    let result = c.heartbeat("g", &id, now);
                    model.expire(now);
                    match model.live.get_mut(&id) {
                        Some(entry) => {
                            entry.0 = now;
                            let m = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            let d = c.describe("g").unwrap();
                            prop_assert_eq!(m.generation, d.generation);
                            let mine = d.members.iter().find(|x| x.member_id == id).unwrap();
                            prop_assert_eq!(&m.assignment, &mine.assignment);
                        }
                        None => {
                            let is_unknown =
                                matches!(result, Err(GroupError::UnknownMember { .. }));
                            prop_assert!(is_unknown);
                        }
                    }
                }
                Op::Advance(ms) => now += ms,
                Op::Expire => {
                    let evicted = c.expire(now);
                    model.expire(now);
                    let expected: Vec<(String, String)> = std::mem::take(&mut model.evicted)
                        .into_iter()
                        .map(|id| ("g".to_owned(), id))
                        .collect();
                    prop_assert_eq!(evicted, expected);
                }
                Op::Resize { topic, count } => {
                    world.insert(WORLD_TOPICS[topic].to_owned(), count);
                    let lookup = |t: &str| world.get(t).copied();
                    c.partitions_changed(WORLD_TOPICS[topic], now, &lookup);
                    model.expire(now);
                }
            }
            let ids: Vec<String> = model.live.keys().cloned().collect();
            if let Some(d) = c.describe("g") {
                let actual: Vec<String> = d.members.iter().map(|m| m.member_id.clone()).collect();
                prop_assert_eq!(&actual, &ids);
                prop_assert!(d.generation >= generation);
                let membership_changed = before
                    .as_ref()
                    .is_none_or(|b| b.members.iter().map(|m| &m.member_id).ne(actual.iter()));
                if membership_changed {
                    prop_assert!(d.generation > generation, "no new generation: {d:?}");
                }
                if strategy == AssignmentStrategy::Sticky && homogeneous {
                    if let Some(before) = &before {
                        check_stickiness(before, &d)?;
                    }
                }
                generation = d.generation;
            }
            check_invariants(&c, strategy, &world)?;
        }
        Ok(())
    }

    fn any_strategy() -> impl Strategy<Value = AssignmentStrategy> {
        prop_oneof![
            Just(AssignmentStrategy::Range),
            Just(AssignmentStrategy::RoundRobin),
            Just(AssignmentStrategy::Sticky),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_membership_keeps_every_partition_owned_once(
            strategy in any_strategy(),
            initial in [0u32..8, 0u32..8],
            ops in prop::collection::vec(op_strategy(false), 1..60),
        ) {
            run_ops(strategy, initial, ops, false)?;
        }

        #[test]
        fn homogeneous_subscriptions_are_balanced_and_sticky(
            strategy in any_strategy(),
            initial in [0u32..8, 0u32..8],
            ops in prop::collection::vec(op_strategy(true), 1..60),
        ) {
            run_ops(strategy, initial, ops, true)?;
        }
    }
}
