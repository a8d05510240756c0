//! Kafka's classic group membership protocol as a pure state machine.
//!
//! Events go in (a JoinGroup, a SyncGroup, a Heartbeat, a LeaveGroup, an offset
//! commit to validate, a time tick) with the time in ms; replies come out. JoinGroup
//! and SyncGroup answers may be held: such a request carries a [`Ticket`] and its
//! answer comes out later, from the event that completes the rebalance phase (the last
//! member rejoining, the leader's SyncGroup, a leave, a session expiry, or the tick at
//! the rebalance timeout). This module never reads a clock or touches a socket; the
//! server ([`super::coordinator`]) maps tickets to the waiting connections.
//!
//! The rules are those of Kafka's `GroupCoordinator` (classic protocol, KIP-345's
//! member-id handshake of KIP-394), with client-side assignment: the leader receives
//! every member's metadata for the chosen protocol in its JoinGroup response and sends
//! the assignment of every member in its SyncGroup; what the assignment says (range,
//! roundrobin, cooperative-sticky) is the clients' business and is passed through as
//! bytes.
//!
//! States: `Empty` (no members) → `PreparingRebalance` (a join, leave or expiry; JoinGroup
//! answers held until every known member rejoined or the rebalance timeout passed, then
//! the members that did not rejoin are removed) → `CompletingRebalance` (a new
//! generation; SyncGroup answers held until the leader's SyncGroup brings the
//! assignment) → `Stable`. Members that sent no SyncGroup within the rebalance
//! timeout after the join phase ended are removed (Kafka's pending-sync expiry), as
//! are members that did not rejoin within it: a consumer stuck past its
//! `max.poll.interval.ms` cannot hold the group.
//!
//! Static members (KIP-345, `group.instance.id`) keep their place across restarts:
//! the instance id maps to the current member id; a join without member id of a
//! known instance replaces the old incarnation (its requests get FENCED_INSTANCE_ID)
//! and, in a stable group, gets its old assignment without a rebalance.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// Identifies a held JoinGroup or SyncGroup request until its answer comes out.
pub type Ticket = u64;

/// Bounds on what members may ask for (Kafka's broker settings).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Kafka's `group.min.session.timeout.ms` (default 6000 ms).
    pub min_session_timeout_ms: i64,
    /// Kafka's `group.max.session.timeout.ms` (default 1800000 ms).
    pub max_session_timeout_ms: i64,
    /// Put into every member id (`{client_id}-{nonce}-{n}`) so ids issued by an
    /// earlier broker process are never issued again (the counter restarts at 1).
    pub member_id_nonce: String,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            member_id_nonce: "0".to_owned(),
        }
    }
}

/// A JoinGroup request.
#[derive(Debug, Clone)]
pub struct Join {
    /// The group.
    pub group: String,
    /// The member id, empty on a first join.
    pub member_id: String,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address, for DescribeGroups.
    pub client_host: String,
    /// ms without a heartbeat after which the member is removed.
    pub session_timeout_ms: i64,
    /// ms the group waits for members to rejoin in a rebalance (v0: the session
    /// timeout, as Kafka).
    pub rebalance_timeout_ms: i64,
    /// `"consumer"` for consumers.
    pub protocol_type: String,
    /// The assignors the member supports, preferred first, with its metadata for each.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a first join gets MEMBER_ID_REQUIRED and a member id to join
    /// with (KIP-394); not for static members, as Kafka.
    pub require_known_member_id: bool,
    /// JoinGroup v5+: the client's `group.instance.id`, making it a static member
    /// (KIP-345).
    pub group_instance_id: Option<String>,
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinReply {
    /// The error, if any.
    pub error: Option<ResponseError>,
    /// The new generation (-1 with an error).
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The assignor chosen.
    pub protocol_name: String,
    /// The leader's member id.
    pub leader: String,
    /// The member's id.
    pub member_id: String,
    /// For the leader: every member's id and metadata for the chosen assignor; empty
    /// for the others.
    pub members: Vec<(String, Bytes)>,
}

/// A SyncGroup answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncReply {
    /// The error, if any.
    pub error: Option<ResponseError>,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The assignor chosen.
    pub protocol_name: String,
    /// The member's assignment, as the leader sent it.
    pub assignment: Bytes,
}

/// An answer to a held (or immediate) JoinGroup or SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To a JoinGroup.
    Join(Ticket, JoinReply),
    /// To a SyncGroup.
    Sync(Ticket, SyncReply),
}

/// A group's state, as DescribeGroups and ListGroups name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl State {
    /// Kafka's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// A member, for DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSummary {
    /// Its id.
    pub member_id: String,
    /// Its `group.instance.id` if it is a static member.
    pub group_instance_id: Option<String>,
    /// Its `client.id`.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// Its metadata for the chosen assignor.
    pub metadata: Bytes,
    /// Its assignment.
    pub assignment: Bytes,
}

/// A group, for DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// Its state.
    pub state: State,
    /// Its protocol type (empty when empty).
    pub protocol_type: String,
    /// The chosen assignor (empty unless stable or completing).
    pub protocol_name: String,
    /// The current generation.
    pub generation: i32,
    /// The members, by id.
    pub members: Vec<MemberSummary>,
}

#[derive(Debug, Clone)]
struct Member {
    client_id: String,
    client_host: String,
    session_timeout_ms: i64,
    rebalance_timeout_ms: i64,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    last_seen_ms: i64,
    join: Option<Ticket>,
    sync: Option<Ticket>,
    assignment: Bytes,
    /// KIP-345's `group.instance.id`.
    instance: Option<String>,
    /// Sent its SyncGroup in this generation (Kafka's pending-sync members are the
    /// others).
    synced: bool,
}

#[derive(Debug, Clone)]
struct Group {
    state: State,
    generation: i32,
    protocol_type: String,
    protocol: String,
    leader: String,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until when they may join.
    pending: BTreeMap<String, i64>,
    rebalance_deadline_ms: i64,
    /// Until when members of the current generation may send their SyncGroup
    /// (Kafka's pending-sync timeout: the rebalance timeout from the join phase's end).
    sync_deadline_ms: i64,
    seq: u64,
}

impl Group {
    fn new() -> Self {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            rebalance_deadline_ms: 0,
            sync_deadline_ms: 0,
            seq: 0,
        }
    }

    /// Whether a member with `protocol_type` and `protocols` fits with the members
    /// other than `except`: the same protocol type and an assignor every member
    /// supports (Kafka's INCONSISTENT_GROUP_PROTOCOL otherwise).
    fn accepts(&self, except: &str, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        let others: Vec<&Member> = self
            .members
            .iter()
            .filter(|(id, _)| id.as_str() != except)
            .map(|(_, m)| m)
            .collect();
        if others.is_empty() {
            return true;
        }
        others.iter().all(|m| m.protocol_type == protocol_type)
            && protocols.iter().any(|(name, _)| {
                others
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// The member id a static member's instance id maps to.
    fn static_member(&self, instance: &str) -> Option<String> {
        self.members
            .iter()
            .find(|(_, m)| m.instance.as_deref() == Some(instance))
            .map(|(id, _)| id.clone())
    }

    /// Kafka's `validateCurrentMember`: with an instance id, the instance must be a
    /// member and its current member id `member_id` (FENCED_INSTANCE_ID when it is
    /// another: a restarted static member took its place); without one, `member_id`
    /// must be a member.
    fn validate_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), ResponseError> {
        match instance {
            Some(i) => match self.static_member(i) {
                Some(current) if current != member_id => Err(ResponseError::FencedInstanceId),
                Some(_) => Ok(()),
                None => Err(ResponseError::UnknownMemberId),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    /// KIP-345: a static member joins again (a restart) without a member id. It takes
    /// the place of its earlier incarnation under `new_id`, whose held requests get
    /// FENCED_INSTANCE_ID. In a stable group whose assignor stays the same, it gets the
    /// current generation at once and its old assignment from its SyncGroup: no
    /// rebalance, the other members notice nothing. The leader named in its answer is
    /// the one before the replacement, so a restarted leader does not assign again
    /// (Kafka's rule). In any other state the group rebalances (while completing, the
    /// leader may already be assigning to the old member id).
    fn replace_static(
        &mut self,
        old_id: &str,
        new_id: String,
        r: Join,
        now_ms: i64,
        ticket: Ticket,
        replies: &mut Vec<Reply>,
    ) {
        let Some(old) = self.members.remove(old_id) else {
            return;
        };
        if let Some(t) = old.join {
            replies.push(Reply::Join(
                t,
                join_error(ResponseError::FencedInstanceId, old_id),
            ));
        }
        if let Some(t) = old.sync {
            replies.push(Reply::Sync(t, sync_error(ResponseError::FencedInstanceId)));
        }
        let previous_leader = self.leader.clone();
        if self.leader == old_id {
            self.leader = new_id.clone();
        }
        self.members.insert(
            new_id.clone(),
            Member {
                client_id: r.client_id,
                client_host: r.client_host,
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                protocol_type: r.protocol_type,
                protocols: r.protocols,
                last_seen_ms: now_ms,
                join: None,
                sync: None,
                assignment: old.assignment,
                instance: r.group_instance_id,
                synced: old.synced,
            },
        );
        if self.state == State::Stable && self.choose_protocol() == self.protocol {
            replies.push(Reply::Join(
                ticket,
                JoinReply {
                    error: None,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    leader: previous_leader,
                    member_id: new_id,
                    members: Vec::new(),
                },
            ));
            return;
        }
        if let Some(m) = self.members.get_mut(&new_id) {
            m.join = Some(ticket);
        }
        if self.state != State::PreparingRebalance {
            self.prepare_rebalance(now_ms, replies);
        }
        self.try_complete_join(now_ms, false, replies);
    }

    /// Kafka's vote: among the assignors every member supports, each member votes for
    /// the first it lists; most votes wins, ties to the name first in order.
    fn choose_protocol(&self) -> String {
        let supported_by_all = |name: &str| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        };
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| supported_by_all(n)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, n) in votes {
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((name, n));
            }
        }
        best.map(|(name, _)| name.to_owned()).unwrap_or_default()
    }

    fn prepare_rebalance(&mut self, now_ms: i64, replies: &mut Vec<Reply>) {
        if self.state == State::CompletingRebalance {
            // Members waiting for an assignment that will not come rejoin.
            for m in self.members.values_mut() {
                if let Some(t) = m.sync.take() {
                    // Its session starts again from the answer, as after a heartbeat.
                    m.last_seen_ms = now_ms;
                    replies.push(Reply::Sync(
                        t,
                        sync_error(ResponseError::RebalanceInProgress),
                    ));
                }
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.state = State::PreparingRebalance;
        self.rebalance_deadline_ms = now_ms.saturating_add(timeout);
    }

    /// Ends the join phase once every member rejoined, or (`force`, at the rebalance
    /// timeout) removes those that did not and ends it anyway.
    fn try_complete_join(&mut self, now_ms: i64, force: bool, replies: &mut Vec<Reply>) {
        if self.state != State::PreparingRebalance {
            return;
        }
        if force {
            self.members.retain(|_, m| m.join.is_some());
        }
        if self.members.values().any(|m| m.join.is_none()) {
            return;
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol_type.clear();
            self.protocol.clear();
            self.leader.clear();
            return;
        }
        self.state = State::CompletingRebalance;
        self.protocol = self.choose_protocol();
        if let Some(first) = self.members.values().next() {
            self.protocol_type = first.protocol_type.clone();
        }
        if !self.members.contains_key(&self.leader) {
            // Kafka keeps the leader across rebalances while it stays; otherwise the
            // first member (here: by id) leads.
            self.leader = self.members.keys().next().cloned().unwrap_or_default();
        }
        let all: Vec<(String, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), metadata_for(m, &self.protocol)))
            .collect();
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.sync_deadline_ms = now_ms.saturating_add(timeout);
        for (id, m) in &mut self.members {
            // The session restarts with the new generation.
            m.last_seen_ms = now_ms;
            m.assignment = Bytes::new();
            m.synced = false;
            if let Some(t) = m.join.take() {
                let reply = JoinReply {
                    error: None,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    leader: self.leader.clone(),
                    member_id: id.clone(),
                    members: if *id == self.leader {
                        all.clone()
                    } else {
                        Vec::new()
                    },
                };
                replies.push(Reply::Join(t, reply));
            }
        }
    }

    /// Removes members that missed their session (not those held in a join or sync:
    /// they are waiting on the group, as in Kafka) and rebalances if any left.
    fn expire(&mut self, now_ms: i64, replies: &mut Vec<Reply>) {
        self.pending.retain(|_, until| *until >= now_ms);
        let before = self.members.len();
        // Alive exactly at last_seen + session_timeout, expired 1 ms later.
        self.members.retain(|_, m| {
            m.join.is_some() || m.sync.is_some() || now_ms <= m.last_seen_ms + m.session_timeout_ms
        });
        if self.members.len() != before
            && matches!(self.state, State::Stable | State::CompletingRebalance)
        {
            self.prepare_rebalance(now_ms, replies);
        }
        // Kafka's pending-sync expiry (max.poll.interval.ms as the rebalance timeout):
        // members that got their JoinGroup answer but sent no SyncGroup within the
        // rebalance timeout are removed, so a stuck member (or a leader that never
        // assigns) cannot hold the others in their SyncGroup forever.
        if matches!(self.state, State::Stable | State::CompletingRebalance)
            && now_ms >= self.sync_deadline_ms
            && self.members.values().any(|m| !m.synced)
        {
            self.members.retain(|_, m| m.synced);
            self.prepare_rebalance(now_ms, replies);
        }
        let force = self.state == State::PreparingRebalance && now_ms >= self.rebalance_deadline_ms;
        self.try_complete_join(now_ms, force, replies);
    }
}

fn metadata_for(m: &Member, protocol: &str) -> Bytes {
    m.protocols
        .iter()
        .find(|(n, _)| n == protocol)
        .map(|(_, b)| b.clone())
        .unwrap_or_default()
}

fn join_error(error: ResponseError, member_id: &str) -> JoinReply {
    JoinReply {
        error: Some(error),
        generation: -1,
        member_id: member_id.to_owned(),
        ..JoinReply::default()
    }
}

fn sync_error(error: ResponseError) -> SyncReply {
    SyncReply {
        error: Some(error),
        ..SyncReply::default()
    }
}

/// Every classic group of the broker.
#[derive(Debug, Clone, Default)]
pub struct ClassicGroups {
    limits: Limits,
    groups: BTreeMap<String, Group>,
}

impl ClassicGroups {
    /// No groups yet.
    pub fn new(limits: Limits) -> Self {
        ClassicGroups {
            limits,
            groups: BTreeMap::new(),
        }
    }

    /// A JoinGroup. Its answer (under `ticket`) is among the replies, now or from a
    /// later event.
    pub fn join(&mut self, r: Join, now_ms: i64, ticket: Ticket) -> Vec<Reply> {
        let mut replies = Vec::new();
        let fail = |e| vec![Reply::Join(ticket, join_error(e, &r.member_id))];
        if r.session_timeout_ms < self.limits.min_session_timeout_ms
            || r.session_timeout_ms > self.limits.max_session_timeout_ms
        {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        if r.protocol_type.is_empty() || r.protocols.is_empty() {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        self.expire_group(&r.group, now_ms, &mut replies);
        let g = self
            .groups
            .entry(r.group.clone())
            .or_insert_with(Group::new);
        // A restarting static member (no member id, a known instance id) replaces
        // its earlier incarnation.
        let known_static = match (&r.group_instance_id, r.member_id.is_empty()) {
            (Some(instance), true) => g.static_member(instance),
            _ => None,
        };
        let except = known_static.as_deref().unwrap_or(&r.member_id);
        if !g.accepts(except, &r.protocol_type, &r.protocols) {
            replies.extend(fail(ResponseError::InconsistentGroupProtocol));
            return replies;
        }
        let member_id = if r.member_id.is_empty() {
            g.seq += 1;
            // Kafka names a static member after its instance id.
            let prefix = r.group_instance_id.as_deref().unwrap_or(&r.client_id);
            let id = format!("{prefix}-{}-{}", self.limits.member_id_nonce, g.seq);
            if let Some(old) = known_static {
                g.replace_static(&old, id, r, now_ms, ticket, &mut replies);
                return replies;
            }
            // Static members skip the KIP-394 handshake: their instance id already
            // identifies them (Kafka's rule).
            if r.require_known_member_id && r.group_instance_id.is_none() {
                // KIP-394: the client joins again with this id; it is valid for a
                // session timeout.
                g.pending
                    .insert(id.clone(), now_ms.saturating_add(r.session_timeout_ms));
                replies.push(Reply::Join(
                    ticket,
                    join_error(ResponseError::MemberIdRequired, &id),
                ));
                return replies;
            }
            id
        } else if r.group_instance_id.is_some() {
            // A known member id must be the instance's current one.
            if let Err(e) = g.validate_member(&r.member_id, r.group_instance_id.as_deref()) {
                replies.extend(fail(e));
                return replies;
            }
            r.member_id.clone()
        } else if g.pending.remove(&r.member_id).is_some() || g.members.contains_key(&r.member_id) {
            r.member_id.clone()
        } else {
            replies.extend(fail(ResponseError::UnknownMemberId));
            return replies;
        };
        let known = g.members.get(&member_id);
        let unchanged = known.is_some_and(|m| m.protocols == r.protocols);
        // A known member rejoining with the same metadata while the group is stable
        // or completing gets the current generation back (Kafka: no new rebalance
        // unless the leader rejoins or the metadata changed).
        if unchanged
            && (g.state == State::CompletingRebalance
                || (g.state == State::Stable && g.leader != member_id))
        {
            let all: Vec<(String, Bytes)> = g
                .members
                .iter()
                .map(|(id, m)| (id.clone(), metadata_for(m, &g.protocol)))
                .collect();
            if let Some(m) = g.members.get_mut(&member_id) {
                m.last_seen_ms = now_ms;
            }
            replies.push(Reply::Join(
                ticket,
                JoinReply {
                    error: None,
                    generation: g.generation,
                    protocol_type: g.protocol_type.clone(),
                    protocol_name: g.protocol.clone(),
                    leader: g.leader.clone(),
                    members: if g.leader == member_id {
                        all
                    } else {
                        Vec::new()
                    },
                    member_id,
                },
            ));
            return replies;
        }
        let previous = g.members.insert(
            member_id.clone(),
            Member {
                client_id: r.client_id,
                client_host: r.client_host,
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                protocol_type: r.protocol_type,
                protocols: r.protocols,
                last_seen_ms: now_ms,
                join: Some(ticket),
                sync: None,
                assignment: Bytes::new(),
                instance: r.group_instance_id,
                synced: false,
            },
        );
        if let Some(p) = previous {
            // A repeated join (the client timed out waiting): the older request gets
            // an answer too, so its connection is not held forever.
            if let Some(t) = p.join {
                replies.push(Reply::Join(
                    t,
                    join_error(ResponseError::RebalanceInProgress, &member_id),
                ));
            }
            if let Some(t) = p.sync {
                replies.push(Reply::Sync(
                    t,
                    sync_error(ResponseError::RebalanceInProgress),
                ));
            }
        }
        if g.state != State::PreparingRebalance {
            g.prepare_rebalance(now_ms, &mut replies);
        }
        g.try_complete_join(now_ms, false, &mut replies);
        replies
    }

    /// A SyncGroup: `assignments` (member id, assignment) from the leader, empty from
    /// the others; `instance` is the static member's instance id (v3+).
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        now_ms: i64,
        ticket: Ticket,
    ) -> Vec<Reply> {
        let mut replies = Vec::new();
        self.expire_group(group, now_ms, &mut replies);
        let fail = |e| Reply::Sync(ticket, sync_error(e));
        let Some(g) = self.groups.get_mut(group) else {
            replies.push(fail(ResponseError::UnknownMemberId));
            return replies;
        };
        if let Err(e) = g.validate_member(member_id, instance) {
            replies.push(fail(e));
            return replies;
        }
        if generation != g.generation {
            replies.push(fail(ResponseError::IllegalGeneration));
            return replies;
        }
        let (protocol_type, protocol_name) = (g.protocol_type.clone(), g.protocol.clone());
        let reply = |assignment: Bytes| SyncReply {
            error: None,
            protocol_type: protocol_type.clone(),
            protocol_name: protocol_name.clone(),
            assignment,
        };
        match g.state {
            State::Empty => replies.push(fail(ResponseError::UnknownMemberId)),
            State::PreparingRebalance => replies.push(fail(ResponseError::RebalanceInProgress)),
            State::Stable => {
                let m = g.members.get_mut(member_id);
                let assignment = m
                    .map(|m| {
                        m.last_seen_ms = now_ms;
                        m.synced = true;
                        m.assignment.clone()
                    })
                    .unwrap_or_default();
                replies.push(Reply::Sync(ticket, reply(assignment)));
            }
            State::CompletingRebalance => {
                if let Some(m) = g.members.get_mut(member_id) {
                    m.last_seen_ms = now_ms;
                    m.synced = true;
                    if let Some(old) = m.sync.replace(ticket) {
                        replies.push(Reply::Sync(
                            old,
                            sync_error(ResponseError::RebalanceInProgress),
                        ));
                    }
                }
                if g.leader == member_id {
                    let mut given: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                    for (id, m) in &mut g.members {
                        m.assignment = given.remove(id).unwrap_or_default();
                        if let Some(t) = m.sync.take() {
                            m.last_seen_ms = now_ms;
                            replies.push(Reply::Sync(t, reply(m.assignment.clone())));
                        }
                    }
                    g.state = State::Stable;
                }
            }
        }
        replies
    }

    /// A Heartbeat (`instance`: a static member's instance id, v3+): `Ok` or the
    /// error Kafka answers, with the replies of any expiry it triggered.
    pub fn heartbeat(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        now_ms: i64,
    ) -> (Result<(), ResponseError>, Vec<Reply>) {
        let mut replies = Vec::new();
        self.expire_group(group, now_ms, &mut replies);
        let result = match self.groups.get_mut(group) {
            None => Err(ResponseError::UnknownMemberId),
            Some(g) => match g
                .validate_member(member_id, instance)
                .map(|()| g.members.get_mut(member_id))
            {
                Err(e) => Err(e),
                Ok(None) => Err(ResponseError::UnknownMemberId),
                Ok(Some(m)) => {
                    m.last_seen_ms = now_ms;
                    if generation != g.generation {
                        Err(ResponseError::IllegalGeneration)
                    } else if g.state == State::PreparingRebalance {
                        Err(ResponseError::RebalanceInProgress)
                    } else {
                        // Stable, or completing: members heartbeat between their
                        // JoinGroup answer and their SyncGroup (Kafka answers NONE).
                        Ok(())
                    }
                }
            },
        };
        (result, replies)
    }

    /// A LeaveGroup of one member: its partitions go to the others in a rebalance.
    ///
    /// Kafka's rules (KIP-345): an empty `member_id` with an `instance` removes that
    /// static member whatever its current member id (the administrative removal,
    /// `kafka-consumer-groups --delete`-style); a member id handed out by
    /// MEMBER_ID_REQUIRED and not used yet is forgotten; otherwise the member must be
    /// current (FENCED_INSTANCE_ID for a stale incarnation of a static member). A
    /// static member that stops without a LeaveGroup (librdkafka and the Java client
    /// send none for static members) keeps its place until its session times out.
    pub fn leave(
        &mut self,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        now_ms: i64,
    ) -> (Result<(), ResponseError>, Vec<Reply>) {
        let mut replies = Vec::new();
        self.expire_group(group, now_ms, &mut replies);
        let Some(g) = self.groups.get_mut(group) else {
            return (Err(ResponseError::UnknownMemberId), replies);
        };
        let target = if member_id.is_empty() {
            match instance.and_then(|i| g.static_member(i)) {
                Some(id) => id,
                None => return (Err(ResponseError::UnknownMemberId), replies),
            }
        } else if g.pending.remove(member_id).is_some() {
            return (Ok(()), replies);
        } else if let Err(e) = g.validate_member(member_id, instance) {
            return (Err(e), replies);
        } else {
            member_id.to_owned()
        };
        let member_id = target.as_str();
        let Some(m) = g.members.remove(member_id) else {
            return (Err(ResponseError::UnknownMemberId), replies);
        };
        if let Some(t) = m.join {
            replies.push(Reply::Join(
                t,
                join_error(ResponseError::UnknownMemberId, member_id),
            ));
        }
        if let Some(t) = m.sync {
            replies.push(Reply::Sync(t, sync_error(ResponseError::UnknownMemberId)));
        }
        if matches!(g.state, State::Stable | State::CompletingRebalance) {
            g.prepare_rebalance(now_ms, &mut replies);
        }
        g.try_complete_join(now_ms, false, &mut replies);
        (Ok(()), replies)
    }

    /// Whether an OffsetCommit of `member_id` at `generation` may be written
    /// (Kafka's order of checks): a commit with generation -1 (a consumer that
    /// assigns itself) only while the group has no members; none while the group
    /// waits for its assignment; otherwise a current member of the current
    /// generation (and, with `instance` (v7+), the static member's current
    /// incarnation). A commit counts as a heartbeat.
    pub fn validate_commit(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        now_ms: i64,
    ) -> (Result<(), ResponseError>, Vec<Reply>) {
        let mut replies = Vec::new();
        self.expire_group(group, now_ms, &mut replies);
        let result = match self.groups.get_mut(group) {
            None if generation < 0 => Ok(()),
            None => Err(ResponseError::IllegalGeneration),
            Some(g) if generation < 0 && g.state == State::Empty => Ok(()),
            Some(g) if g.state == State::CompletingRebalance => {
                Err(ResponseError::RebalanceInProgress)
            }
            Some(g) => match g
                .validate_member(member_id, instance)
                .map(|()| g.members.get_mut(member_id))
            {
                Err(e) => Err(e),
                Ok(None) => Err(ResponseError::UnknownMemberId),
                Ok(Some(_)) if generation != g.generation => Err(ResponseError::IllegalGeneration),
                Ok(Some(m)) => {
                    m.last_seen_ms = now_ms;
                    Ok(())
                }
            },
        };
        (result, replies)
    }

    /// DeleteGroups of one group: removed if it has no members (after expiring the
    /// ones past their session), so a group of that name starts again at generation
    /// 0; NON_EMPTY_GROUP otherwise (Kafka's rule: only an Empty group is deleted).
    /// Returns whether the group existed here.
    pub fn delete(
        &mut self,
        group: &str,
        now_ms: i64,
    ) -> (Result<bool, ResponseError>, Vec<Reply>) {
        let mut replies = Vec::new();
        self.expire_group(group, now_ms, &mut replies);
        let result = match self.groups.get(group) {
            None => Ok(false),
            Some(g) if g.state != State::Empty || !g.members.is_empty() => {
                Err(ResponseError::NonEmptyGroup)
            }
            Some(_) => {
                self.groups.remove(group);
                Ok(true)
            }
        };
        (result, replies)
    }

    /// Time passing: removes members past their session timeout and ends join
    /// phases past their rebalance timeout.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Reply> {
        let mut replies = Vec::new();
        for g in self.groups.values_mut() {
            g.expire(now_ms, &mut replies);
        }
        replies
    }

    fn expire_group(&mut self, group: &str, now_ms: i64, replies: &mut Vec<Reply>) {
        if let Some(g) = self.groups.get_mut(group) {
            g.expire(now_ms, replies);
        }
    }

    /// The groups with their protocol type and state, by name.
    pub fn list(&self) -> Vec<(String, String, State)> {
        self.groups
            .iter()
            .map(|(name, g)| (name.clone(), g.protocol_type.clone(), g.state))
            .collect()
    }

    /// A group's state and members, `None` if it never had members.
    pub fn describe(&self, group: &str) -> Option<GroupSummary> {
        let g = self.groups.get(group)?;
        Some(GroupSummary {
            state: g.state,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol.clone(),
            generation: g.generation,
            members: g
                .members
                .iter()
                .map(|(id, m)| MemberSummary {
                    member_id: id.clone(),
                    group_instance_id: m.instance.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: metadata_for(m, &g.protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }
}
