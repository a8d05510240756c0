//! DeleteGroups: removes groups with their committed offsets, by Kafka's rules
//! (`GroupCoordinator.handleDeleteGroups`): only a group without members (Empty) is
//! deleted, NON_EMPTY_GROUP otherwise; a group with neither members nor committed
//! offsets is GROUP_ID_NOT_FOUND; a name that is not a valid group id
//! INVALID_GROUP_ID. The membership check and the delete happen under the
//! coordinator's lock ([`Coordinator::delete`]), so no member joins in between.

use brook_log::{GroupError, Log, LogError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::coordinator::Coordinator;
use crate::error_code;

/// The error code of deleting `group` (0: deleted).
pub fn delete_group(coordinator: &Coordinator, group: &str, log: &Log) -> i16 {
    match coordinator.delete(group, || log.delete_group(group)) {
        Err(e) => e.code(),
        Ok((false, Ok(false))) => ResponseError::GroupIdNotFound.code(),
        Ok((_, Ok(_))) => 0,
        Ok((_, Err(LogError::InvalidName(_)))) => ResponseError::InvalidGroupId.code(),
        // Members of the log's own groups (consumers inside the serving process).
        Ok((_, Err(LogError::Group(GroupError::NonEmptyGroup { .. })))) => {
            ResponseError::NonEmptyGroup.code()
        }
        Ok((_, Err(e))) => error_code(&e),
    }
}

/// The DeleteGroups response.
pub fn delete_groups(
    coordinator: &Coordinator,
    request: &DeleteGroupsRequest,
    log: &Log,
) -> DeleteGroupsResponse {
    let results = request
        .groups_names
        .iter()
        .map(|g| {
            DeletableGroupResult::default()
                .with_group_id(g.clone())
                .with_error_code(delete_group(coordinator, g.0.as_str(), log))
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
