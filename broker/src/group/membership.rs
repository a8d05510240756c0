//! FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups and
//! DescribeGroups: Kafka requests mapped onto the [`Coordinator`] and its answers
//! mapped back, each field at the versions that carry it.

use brook_log::Log;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as Found;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::coordinator::Coordinator;
use super::machine::{Join, State};
use crate::metadata::{Advertised, NODE_ID};

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// This broker coordinates every group (key type 0) and every transactional id
/// (key type 1); other key types (share groups) get COORDINATOR_NOT_AVAILABLE.
pub fn find_coordinator(
    request: &FindCoordinatorRequest,
    version: i16,
    advertised: &Advertised,
) -> FindCoordinatorResponse {
    let error =
        (!matches!(request.key_type, 0 | 1)).then_some(ResponseError::CoordinatorNotAvailable);
    let host = text(&advertised.host);
    let port = i32::from(advertised.port);
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                Found::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(NODE_ID))
                    .with_host(host.clone())
                    .with_port(port)
                    .with_error_code(code(error))
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    FindCoordinatorResponse::default()
        .with_error_code(code(error))
        .with_node_id(BrokerId(NODE_ID))
        .with_host(host)
        .with_port(port)
}

/// A JoinGroup (held until the group answers it).
pub async fn join_group(
    coordinator: &Coordinator,
    request: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> JoinGroupResponse {
    let join = Join {
        group: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        client_id: client_id.to_owned(),
        client_host: client_host.to_owned(),
        session_timeout_ms: i64::from(request.session_timeout_ms),
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout_ms: i64::from(if version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        }),
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
        // v5+; an empty one counts as none, as Kafka.
        group_instance_id: request
            .group_instance_id
            .as_deref()
            .filter(|i| !i.is_empty())
            .map(str::to_owned),
    };
    let reply = coordinator.join(join).await;
    let mut response = JoinGroupResponse::default()
        .with_error_code(code(reply.error))
        .with_generation_id(reply.generation)
        .with_protocol_name(Some(text(&reply.protocol_name)))
        .with_leader(text(&reply.leader))
        .with_member_id(text(&reply.member_id))
        .with_members(
            reply
                .members
                .into_iter()
                .map(|(id, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(text(&id))
                        .with_metadata(metadata)
                })
                .collect(),
        );
    if version >= 7 {
        response = response.with_protocol_type(Some(text(&reply.protocol_type)));
    }
    response
}

/// A SyncGroup (held until the leader's assignment arrives).
pub async fn sync_group(
    coordinator: &Coordinator,
    request: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let assignments: Vec<(String, Bytes)> = request
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment))
        .collect();
    let reply = coordinator
        .sync(
            &request.group_id.0,
            request.generation_id,
            &request.member_id,
            request.group_instance_id.as_deref(),
            assignments,
        )
        .await;
    let mut response = SyncGroupResponse::default()
        .with_error_code(code(reply.error))
        .with_assignment(reply.assignment);
    if version >= 5 {
        response = response
            .with_protocol_type(Some(text(&reply.protocol_type)))
            .with_protocol_name(Some(text(&reply.protocol_name)));
    }
    response
}

/// A Heartbeat.
pub fn heartbeat(coordinator: &Coordinator, request: &HeartbeatRequest) -> HeartbeatResponse {
    let result = coordinator.heartbeat(
        &request.group_id.0,
        request.generation_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
    );
    HeartbeatResponse::default().with_error_code(code(result.err()))
}

/// A LeaveGroup: one member (v0-v2) or a batch (v3+, KIP-345).
pub fn leave_group(
    coordinator: &Coordinator,
    request: &LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group = &request.group_id.0;
    if version < 3 {
        let result = coordinator.leave(group, &request.member_id, None);
        return LeaveGroupResponse::default().with_error_code(code(result.err()));
    }
    let members = request
        .members
        .iter()
        .map(|m| {
            let result = coordinator.leave(group, &m.member_id, m.group_instance_id.as_deref());
            MemberResponse::default()
                .with_member_id(m.member_id.clone())
                .with_group_instance_id(m.group_instance_id.clone())
                .with_error_code(code(result.err()))
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}

/// ListGroups: every group with its state (v4+ filters by state): the groups with
/// members, and those with only committed offsets in the log (`Empty`, no protocol
/// type, as Kafka lists a group of consumers that assign partitions themselves; also
/// the groups of an earlier broker process).
pub fn list_groups(
    coordinator: &Coordinator,
    request: &ListGroupsRequest,
    version: i16,
    log: &Log,
) -> ListGroupsResponse {
    let mut all = coordinator.list();
    for name in log.groups() {
        if !all.iter().any(|(g, _, _)| *g == name) {
            all.push((name, String::new(), State::Empty));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let groups = all
        .into_iter()
        .filter(|(_, _, state)| {
            request.states_filter.is_empty()
                || request
                    .states_filter
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(state.as_str()))
        })
        .map(|(name, protocol_type, state)| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(text(&name)))
                .with_protocol_type(text(&protocol_type));
            if version >= 4 {
                listed.with_group_state(text(state.as_str()))
            } else {
                listed
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// DescribeGroups: state, assignor and members (with their metadata and
/// assignment) of each group; a group with only committed offsets is `Empty`, one
/// without either `Dead`, as Kafka reports them.
pub fn describe_groups(
    coordinator: &Coordinator,
    request: &DescribeGroupsRequest,
    log: &Log,
) -> DescribeGroupsResponse {
    let committed = log.groups();
    let groups = request
        .groups
        .iter()
        .map(|group| {
            let described = DescribedGroup::default().with_group_id(group.clone());
            match coordinator.describe(group) {
                None if committed.iter().any(|g| g.as_str() == group.0.as_str()) => {
                    described.with_group_state(StrBytes::from_static_str("Empty"))
                }
                None => described.with_group_state(StrBytes::from_static_str("Dead")),
                Some(s) => described
                    .with_group_state(text(s.state.as_str()))
                    .with_protocol_type(text(&s.protocol_type))
                    .with_protocol_data(text(&s.protocol_name))
                    .with_members(
                        s.members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(text(&m.member_id))
                                    .with_group_instance_id(
                                        m.group_instance_id.as_deref().map(text),
                                    )
                                    .with_client_id(text(&m.client_id))
                                    .with_client_host(text(&m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
