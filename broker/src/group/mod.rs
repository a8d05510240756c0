//! Consumer groups over Kafka's classic protocol (issue 17, step 2): separate
//! processes form a group through this broker, with client-side assignors.
//!
//! - [`assignment`]: a member's assignment decoded (for describing groups);
//! - [`machine`]: the membership protocol as a pure state machine (joins, syncs,
//!   heartbeats, leaves and time in; answers out);
//! - [`coordinator`]: the machine behind a lock, with the clock and the connections
//!   waiting on held JoinGroup and SyncGroup answers;
//! - [`membership`]: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//!   ListGroups, DescribeGroups as request → response mappings;
//! - [`offsets`]: OffsetCommit and OffsetFetch on the log's committed-offset store;
//! - [`offset_delete`]: OffsetDelete, refused for topics the group is subscribed to;
//! - [`delete_groups`]: DeleteGroups, of groups without members.
//!
//! These groups are separate from the server-side-assigned groups of the log's own
//! consumers (`brook_log::GroupCoordinator`, `brook consume --group`): Kafka's
//! classic protocol leaves the assignment to the clients. Both share the committed
//! offsets.

pub mod assignment;
pub mod coordinator;
pub mod delete_groups;
pub mod machine;
pub mod membership;
pub mod offset_delete;
pub mod offsets;

pub use assignment::assigned_partitions;
pub use coordinator::Coordinator;
pub use machine::Limits;
