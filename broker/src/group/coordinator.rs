//! The group coordinator's shell: the [`ClassicGroups`] state machine behind a lock,
//! the clock, and the connections waiting on held JoinGroup and SyncGroup answers.
//!
//! A held request waits on a oneshot channel, so its connection task sleeps without
//! holding a thread, and other connections (the other members' heartbeats and
//! joins, producers, fetches) are served meanwhile. Answers on one connection stay
//! in request order, as Kafka's broker keeps them (kafka-python requires it).

use brook_core::time::SharedClock;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

use super::machine::{
    ClassicGroups, GroupSummary, Join, JoinReply, Limits, Reply, State, SyncReply, Ticket,
};

/// How often members' sessions and rebalance timeouts are checked (ms).
pub const TICK_MS: u64 = 100;

/// The broker's group coordinator.
#[derive(Debug)]
pub struct Coordinator {
    inner: Mutex<Inner>,
    clock: SharedClock,
}

#[derive(Debug)]
struct Inner {
    groups: ClassicGroups,
    waiting: HashMap<Ticket, oneshot::Sender<Reply>>,
    next: Ticket,
}

impl Inner {
    fn ticket(&mut self) -> (Ticket, oneshot::Receiver<Reply>) {
        self.next += 1;
        let (tx, rx) = oneshot::channel();
        self.waiting.insert(self.next, tx);
        (self.next, rx)
    }

    fn deliver(&mut self, replies: Vec<Reply>) {
        for reply in replies {
            let ticket = match &reply {
                Reply::Join(t, _) | Reply::Sync(t, _) => *t,
            };
            if let Some(tx) = self.waiting.remove(&ticket) {
                // The connection may have closed meanwhile: nobody to answer.
                let _ = tx.send(reply);
            }
        }
    }
}

impl Coordinator {
    /// A coordinator without groups, reading time (ms) from `clock`.
    pub fn new(limits: Limits, clock: SharedClock) -> Self {
        Coordinator {
            inner: Mutex::new(Inner {
                groups: ClassicGroups::new(limits),
                waiting: HashMap::new(),
                next: 0,
            }),
            clock,
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state machine's methods do not panic halfway; a poisoned lock only
        // means another connection's task panicked elsewhere.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A JoinGroup; resolves when the group answers it.
    pub async fn join(&self, join: Join) -> JoinReply {
        let member_id = join.member_id.clone();
        let rx = {
            let now = self.now_ms();
            let mut inner = self.lock();
            let (ticket, rx) = inner.ticket();
            let replies = inner.groups.join(join, now, ticket);
            inner.deliver(replies);
            rx
        };
        match rx.await {
            Ok(Reply::Join(_, r)) => r,
            _ => JoinReply {
                error: Some(ResponseError::UnknownServerError),
                generation: -1,
                member_id,
                ..JoinReply::default()
            },
        }
    }

    /// A SyncGroup; resolves when the group answers it.
    pub async fn sync(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncReply {
        let rx = {
            let now = self.now_ms();
            let mut inner = self.lock();
            let (ticket, rx) = inner.ticket();
            let replies = inner.groups.sync(
                group,
                generation,
                member_id,
                instance,
                assignments,
                now,
                ticket,
            );
            inner.deliver(replies);
            rx
        };
        match rx.await {
            Ok(Reply::Sync(_, r)) => r,
            _ => SyncReply {
                error: Some(ResponseError::UnknownServerError),
                ..SyncReply::default()
            },
        }
    }

    /// A Heartbeat.
    pub fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), ResponseError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let (result, replies) = inner
            .groups
            .heartbeat(group, generation, member_id, instance, now);
        inner.deliver(replies);
        result
    }

    /// A LeaveGroup of one member (by member id, or by a static member's instance id).
    pub fn leave(
        &self,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), ResponseError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let (result, replies) = inner.groups.leave(group, member_id, instance, now);
        inner.deliver(replies);
        result
    }

    /// Validates an OffsetCommit and, if allowed, runs `write` (the log's commit)
    /// under the same lock, so no rebalance slips in between.
    pub fn commit<T>(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        write: impl FnOnce() -> T,
    ) -> Result<T, ResponseError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let (result, replies) = inner
            .groups
            .validate_commit(group, generation, member_id, instance, now);
        inner.deliver(replies);
        result.map(|()| write())
    }

    /// DeleteGroups of one group: when it has no members, forgets it and runs
    /// `delete` (the log's, of its committed offsets) under the same lock, so no
    /// member joins in between. Returns whether the group existed here and
    /// `delete`'s result.
    ///
    /// # Errors
    /// NON_EMPTY_GROUP.
    pub fn delete<T>(
        &self,
        group: &str,
        delete: impl FnOnce() -> T,
    ) -> Result<(bool, T), ResponseError> {
        let now = self.now_ms();
        let mut inner = self.lock();
        let (result, replies) = inner.groups.delete(group, now);
        inner.deliver(replies);
        result.map(|existed| (existed, delete()))
    }

    /// Expires sessions and rebalance timeouts; the server calls it every
    /// [`TICK_MS`].
    pub fn tick(&self) {
        let now = self.now_ms();
        let mut inner = self.lock();
        let replies = inner.groups.tick(now);
        inner.deliver(replies);
    }

    /// The groups with their protocol type and state.
    pub fn list(&self) -> Vec<(String, String, State)> {
        self.lock().groups.list()
    }

    /// A group's state and members.
    pub fn describe(&self, group: &str) -> Option<GroupSummary> {
        self.lock().groups.describe(group)
    }

    /// Runs `f` on the group's state and members (`None`: no member ever joined)
    /// under the lock, so no member joins between `f`'s check and its write
    /// (OffsetDelete).
    pub fn with_group<T>(&self, group: &str, f: impl FnOnce(Option<&GroupSummary>) -> T) -> T {
        let inner = self.lock();
        f(inner.groups.describe(group).as_ref())
    }
}
