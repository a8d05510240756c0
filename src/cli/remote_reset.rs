//! `brook group reset-offsets` through a running broker, as Kafka's
//! `kafka-consumer-groups --reset-offsets` does it: the group must be inactive
//! (DescribeGroups: no members), the targets come from ListOffsets (earliest,
//! latest, by timestamp) and the same pure rule as in-process
//! ([`brook::log::reset::target`]), and the plan is committed with an OffsetCommit
//! without member id or generation (Kafka's AdminClient `alterConsumerGroupOffsets`),
//! which the broker accepts only while the group has no members, so a member joining
//! after the check still wins. `brook group delete` (DeleteGroups) is here too.

use anyhow::Result;
use brook::kafka::rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use brook::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use brook::kafka::rdkafka::{Offset, TopicPartitionList};
use brook::log::reset::target;
use brook::log::{GroupError, LogError, OffsetResetRow, ResetTo};

use super::remote_log::{config, kafka, RemoteLog, TIMEOUT};

impl RemoteLog {
    /// See [`super::log_access::LogAccess::reset_offsets`].
    pub(crate) fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
        dry_run: bool,
    ) -> Result<Vec<OffsetResetRow>> {
        brook::core::names::validate_group_id(group).map_err(LogError::from)?;
        let n = self.partition_count(topic)?;
        // A client of the group that never joins it: its commits carry no member id
        // and generation -1.
        let client: BaseConsumer = config(self.addr)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(kafka(format!("client of group {group:?}")))?;
        self.check_inactive(&client, group)?;

        let mut partitions = TopicPartitionList::new();
        for p in 0..n {
            partitions.add_partition(topic, p as i32);
        }
        let committed = client
            .committed_offsets(partitions, TIMEOUT)
            .map_err(kafka(format!("committed offsets of group {group:?}")))?;
        let at_time = match to {
            ResetTo::Timestamp(ts) => {
                let mut times = TopicPartitionList::new();
                for p in 0..n {
                    times
                        .add_partition_offset(topic, p as i32, Offset::Offset(ts))
                        .map_err(kafka("ListOffsets by timestamp"))?;
                }
                Some(
                    client
                        .offsets_for_times(times, TIMEOUT)
                        .map_err(kafka(format!("offsets of {topic} at {ts} ms")))?,
                )
            }
            _ => None,
        };
        let offset_of = |list: &TopicPartitionList, p: u32| match list
            .find_partition(topic, p as i32)
            .map(|e| e.offset())
        {
            Some(Offset::Offset(o)) if o >= 0 => Some(o as u64),
            _ => None,
        };
        let mut rows = Vec::with_capacity(n as usize);
        for p in 0..n {
            let (start, end, _) = self.offsets(topic, p)?;
            let at = at_time.as_ref().and_then(|l| offset_of(l, p));
            let (new_offset, clamped_from) = target(to, start, end, at);
            rows.push(OffsetResetRow {
                topic: topic.to_owned(),
                partition: p,
                current: offset_of(&committed, p),
                new_offset,
                clamped_from,
            });
        }
        if !dry_run {
            let mut plan = TopicPartitionList::new();
            for r in &rows {
                plan.add_partition_offset(
                    topic,
                    r.partition as i32,
                    Offset::Offset(r.new_offset as i64),
                )
                .map_err(kafka("the reset plan"))?;
            }
            client
                .commit(&plan, CommitMode::Sync)
                .map_err(|e| refused(group, e))?;
            tracing::info!(
                group,
                topic,
                partitions = rows.len(),
                "reset committed offsets"
            );
        }
        Ok(rows)
    }

    /// DeleteGroups of one group (Kafka's `kafka-consumer-groups --delete`): whether
    /// it existed; refused while it has members, with the in-process error.
    pub(crate) fn delete_group(&self, group: &str) -> Result<bool> {
        brook::core::names::validate_group_id(group).map_err(LogError::from)?;
        let results = futures::executor::block_on(
            self.admin().delete_groups(&[group], &Self::admin_options()),
        )
        .map_err(kafka(format!("deleting group {group:?}")))?;
        match results.into_iter().next() {
            Some(Err((_, RDKafkaErrorCode::GroupIdNotFound))) => Ok(false),
            Some(Err((_, RDKafkaErrorCode::NonEmptyGroup))) => {
                let client: BaseConsumer = config(self.addr)
                    .create()
                    .map_err(kafka(format!("client of group {group:?}")))?;
                let members = self.members(&client, group)?;
                Err(GroupError::NonEmptyGroup {
                    group: group.to_owned(),
                    members,
                }
                .into())
            }
            Some(Err((_, code))) => Err(anyhow::Error::new(KafkaError::AdminOp(code))
                .context(format!("deleting group {group:?}"))),
            _ => Ok(true),
        }
    }

    /// How many members `group` has (DescribeGroups).
    fn members(&self, client: &BaseConsumer, group: &str) -> Result<usize> {
        let list = client
            .fetch_group_list(Some(group), TIMEOUT)
            .map_err(kafka(format!("describing group {group:?}")))?;
        Ok(list
            .groups()
            .iter()
            .filter(|g| g.name() == group)
            .map(|g| g.members().len())
            .sum())
    }

    /// Refuses a group with members ([`GroupError::GroupHasMembers`], the in-process
    /// error), as Kafka's tool refuses a group that is not inactive.
    fn check_inactive(&self, client: &BaseConsumer, group: &str) -> Result<()> {
        let members = self.members(client, group)?;
        if members > 0 {
            return Err(GroupError::GroupHasMembers {
                group: group.to_owned(),
                members,
            }
            .into());
        }
        Ok(())
    }
}

/// A refused commit: a member joined after the check (the broker's UNKNOWN_MEMBER_ID
/// or REBALANCE_IN_PROGRESS for a commit without member id) reads as the in-process
/// error.
fn refused(group: &str, e: KafkaError) -> anyhow::Error {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::UnknownMemberId | RDKafkaErrorCode::RebalanceInProgress) => {
            anyhow::Error::new(e).context(format!(
                "group {group:?} has active members; a standalone commit (without member id and generation) is only allowed while the group has no members"
            ))
        }
        _ => anyhow::Error::new(e).context(format!("committing the offsets of group {group:?}")),
    }
}
