//! The classic group protocol's state machine, event by event (no sockets, no clock):
//! joins, syncs, heartbeats, leaves, session and rebalance timeouts, commit fencing,
//! group deletion.

use brook_broker::group::machine::{
    ClassicGroups, Join, JoinReply, Limits, Reply, State, SyncReply, Ticket,
};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;

const SESSION: i64 = 1_000;
const REBALANCE: i64 = 3_000;

fn groups() -> ClassicGroups {
    ClassicGroups::new(Limits {
        min_session_timeout_ms: 1,
        member_id_nonce: "n".to_owned(),
        ..Limits::default()
    })
}

fn join(member_id: &str, client: &str, v4: bool) -> Join {
    Join {
        group: "billing".to_owned(),
        member_id: member_id.to_owned(),
        client_id: client.to_owned(),
        client_host: "127.0.0.1".to_owned(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".to_owned(),
        protocols: vec![
            ("range".to_owned(), Bytes::from(format!("{client}-range"))),
            ("roundrobin".to_owned(), Bytes::from(format!("{client}-rr"))),
        ],
        require_known_member_id: v4,
        group_instance_id: None,
    }
}

/// A JoinGroup v5+ of a static member (`group.instance.id` = `instance`).
fn static_join(member_id: &str, client: &str, instance: &str) -> Join {
    Join {
        group_instance_id: Some(instance.to_owned()),
        ..join(member_id, client, true)
    }
}

/// Static members `a` (instance `ia`, the leader) and `b` (instance `ib`), stable
/// with a: "0,1", b: "2,3": (a's id, b's id, generation).
fn stable_static_two(g: &mut ClassicGroups) -> (String, String, i32) {
    // No MEMBER_ID_REQUIRED round trip for static members, even at v4+.
    let r = g.join(static_join("", "a", "ia"), 0, 1);
    let a = joined(&r, 1);
    assert_eq!((a.error, a.generation), (None, 1));
    assert!(a.member_id.starts_with("ia-"), "{}", a.member_id);
    let a = a.member_id;
    g.sync("billing", 1, &a, Some("ia"), vec![], 0, 2);
    assert!(g.join(static_join("", "b", "ib"), 0, 10).is_empty());
    let r = g.join(static_join(&a, "a", "ia"), 0, 11);
    let (ja, jb) = (joined(&r, 11), joined(&r, 10));
    let b = jb.member_id;
    assert!(g
        .sync("billing", 2, &b, Some("ib"), vec![], 0, 12)
        .is_empty());
    let r = g.sync(
        "billing",
        2,
        &a,
        Some("ia"),
        vec![
            (a.clone(), Bytes::from_static(b"0,1")),
            (b.clone(), Bytes::from_static(b"2,3")),
        ],
        0,
        13,
    );
    assert_eq!(synced(&r, 12).assignment, Bytes::from_static(b"2,3"));
    (a, b, ja.generation)
}

fn joined(replies: &[Reply], ticket: Ticket) -> JoinReply {
    replies
        .iter()
        .find_map(|r| match r {
            Reply::Join(t, j) if *t == ticket => Some(j.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no join answer for ticket {ticket} in {replies:?}"))
}

fn synced(replies: &[Reply], ticket: Ticket) -> SyncReply {
    replies
        .iter()
        .find_map(|r| match r {
            Reply::Sync(t, s) if *t == ticket => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no sync answer for ticket {ticket} in {replies:?}"))
}

/// Joins `client` alone into an empty group and syncs: (member id, generation).
fn stable_one(g: &mut ClassicGroups, client: &str, now: i64) -> (String, i32) {
    let r = g.join(join("", client, false), now, 1);
    let j = joined(&r, 1);
    assert_eq!(j.error, None);
    let s = g.sync(
        "billing",
        j.generation,
        &j.member_id,
        None,
        vec![(j.member_id.clone(), Bytes::from_static(b"all"))],
        now,
        2,
    );
    assert_eq!(synced(&s, 2).assignment, Bytes::from_static(b"all"));
    (j.member_id, j.generation)
}

/// Two members `a` and `b`, stable: (a's id, b's id, generation).
fn stable_two(g: &mut ClassicGroups, now: i64) -> (String, String, i32) {
    let (a, _) = stable_one(g, "a", now);
    let r = g.join(join("", "b", false), now, 10);
    assert!(r.is_empty(), "b's join is held until a rejoins: {r:?}");
    let r = g.join(join(&a, "a", false), now, 11);
    let (ja, jb) = (joined(&r, 11), joined(&r, 10));
    let mut r = g.sync(
        "billing",
        jb.generation,
        &jb.member_id,
        None,
        vec![],
        now,
        12,
    );
    r.extend(g.sync(
        "billing",
        ja.generation,
        &a,
        None,
        vec![
            (a.clone(), Bytes::from_static(b"0,1")),
            (jb.member_id.clone(), Bytes::from_static(b"2,3")),
        ],
        now,
        13,
    ));
    assert_eq!(synced(&r, 12).assignment, Bytes::from_static(b"2,3"));
    (a, jb.member_id, ja.generation)
}

#[test]
fn a_first_join_of_v4_needs_the_member_id_it_is_given() {
    let mut g = groups();
    let r = g.join(join("", "a", true), 0, 1);
    let first = joined(&r, 1);
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    assert_eq!(first.member_id, "a-n-1");
    let r = g.join(join("a-n-1", "a", true), 5, 2);
    let j = joined(&r, 2);
    assert_eq!(j.error, None);
    assert_eq!((j.generation, j.leader.as_str()), (1, "a-n-1"));
    assert_eq!(j.protocol_name, "range");
    assert_eq!(
        j.members,
        vec![("a-n-1".to_owned(), Bytes::from_static(b"a-range"))]
    );
    // An id that was never handed out is refused.
    let r = g.join(join("forged", "x", true), 6, 3);
    assert_eq!(joined(&r, 3).error, Some(ResponseError::UnknownMemberId));
    // A handed-out id not used within the session timeout expires.
    let r = g.join(join("", "c", true), 10, 4);
    let id = joined(&r, 4).member_id;
    g.tick(10 + SESSION + 1);
    let r = g.join(join(&id, "c", true), 10 + SESSION + 2, 5);
    assert_eq!(joined(&r, 5).error, Some(ResponseError::UnknownMemberId));
}

#[test]
fn a_second_member_joining_holds_its_answer_until_the_first_rejoins() {
    let mut g = groups();
    let (a, generation) = stable_one(&mut g, "a", 0);
    assert_eq!(generation, 1);
    let r = g.join(join("", "b", false), 100, 10);
    assert!(r.is_empty(), "held: {r:?}");
    assert_eq!(
        g.describe("billing").map(|d| d.state),
        Some(State::PreparingRebalance)
    );
    // a learns of the rebalance from its heartbeat ...
    let (hb, _) = g.heartbeat("billing", 1, &a, None, 200);
    assert_eq!(hb, Err(ResponseError::RebalanceInProgress));
    // ... and a commit of its generation is still allowed while it rejoins (Kafka).
    assert_eq!(g.validate_commit("billing", 1, &a, None, 200).0, Ok(()));
    let r = g.join(join(&a, "a", false), 300, 11);
    let (ja, jb) = (joined(&r, 11), joined(&r, 10));
    assert_eq!((ja.generation, jb.generation), (2, 2));
    assert_eq!(
        (ja.leader.as_str(), jb.leader.as_str()),
        (a.as_str(), a.as_str())
    );
    assert_eq!(
        ja.members.len(),
        2,
        "the leader gets every member's metadata"
    );
    assert!(jb.members.is_empty(), "followers get none");
}

#[test]
fn followers_sync_answers_wait_for_the_leaders_assignment() {
    let mut g = groups();
    let (a, _) = stable_one(&mut g, "a", 0);
    g.join(join("", "b", false), 0, 10);
    let r = g.join(join(&a, "a", false), 0, 11);
    let b = joined(&r, 10).member_id;
    // Between the JoinGroup answer and the SyncGroup, heartbeats are fine.
    assert_eq!(g.heartbeat("billing", 2, &b, None, 1).0, Ok(()));
    let r = g.sync("billing", 2, &b, None, vec![], 1, 12);
    assert!(r.is_empty(), "b waits for the leader: {r:?}");
    // A commit while the assignment is pending is refused.
    assert_eq!(
        g.validate_commit("billing", 2, &b, None, 1).0,
        Err(ResponseError::RebalanceInProgress)
    );
    let r = g.sync(
        "billing",
        2,
        &a,
        None,
        vec![
            (a.clone(), Bytes::from_static(b"A")),
            (b.clone(), Bytes::from_static(b"B")),
        ],
        2,
        13,
    );
    assert_eq!(synced(&r, 12).assignment, Bytes::from_static(b"B"));
    assert_eq!(synced(&r, 13).assignment, Bytes::from_static(b"A"));
    assert_eq!(g.describe("billing").map(|d| d.state), Some(State::Stable));
    // A stale generation is fenced everywhere.
    let r = g.sync("billing", 1, &b, None, vec![], 3, 14);
    assert_eq!(synced(&r, 14).error, Some(ResponseError::IllegalGeneration));
    assert_eq!(
        g.heartbeat("billing", 1, &b, None, 3).0,
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(g.heartbeat("billing", 2, &b, None, 3).0, Ok(()));
}

#[test]
fn a_member_whose_session_times_out_is_removed_and_the_group_rebalances() {
    let mut g = groups();
    let (a, b, generation) = stable_two(&mut g, 0);
    // a keeps heartbeating, b (SIGKILLed) does not.
    assert_eq!(
        g.heartbeat("billing", generation, &a, None, SESSION).0,
        Ok(())
    );
    // Exactly at the session timeout b is still alive; 1 ms later it is gone.
    assert!(g.tick(SESSION).is_empty());
    assert_eq!(g.describe("billing").map(|d| d.members.len()), Some(2));
    g.tick(SESSION + 1);
    let d = g.describe("billing").expect("group");
    assert_eq!(d.state, State::PreparingRebalance);
    assert_eq!(d.members.len(), 1);
    assert_eq!(
        g.heartbeat("billing", generation, &a, None, SESSION + 2).0,
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &b, None, SESSION + 2).0,
        Err(ResponseError::UnknownMemberId)
    );
    let r = g.join(join(&a, "a", false), SESSION + 3, 20);
    let j = joined(&r, 20);
    assert_eq!((j.generation, j.members.len()), (generation + 1, 1));
}

#[test]
fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() {
    let mut g = groups();
    let (a, b, generation) = stable_two(&mut g, 0);
    // b keeps its session alive by heartbeating but never rejoins.
    let r = g.join(join(&a, "a", false), 10, 20);
    assert!(
        r.is_empty(),
        "the leader's rejoin starts a rebalance: {r:?}"
    );
    for at in [500, 1_400, 2_300, 2_900] {
        assert_eq!(
            g.heartbeat("billing", generation, &b, None, at).0,
            Err(ResponseError::RebalanceInProgress)
        );
    }
    assert!(g.tick(10 + REBALANCE - 1).is_empty());
    let r = g.tick(10 + REBALANCE);
    let j = joined(&r, 20);
    assert_eq!((j.generation, j.members.len()), (generation + 1, 1));
    assert_eq!(
        g.heartbeat("billing", generation + 1, &b, None, 10 + REBALANCE)
            .0,
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_leave_starts_a_rebalance_and_the_last_leave_empties_the_group() {
    let mut g = groups();
    let (a, b, generation) = stable_two(&mut g, 0);
    assert_eq!(g.leave("billing", &b, None, 5).0, Ok(()));
    assert_eq!(
        g.leave("billing", &b, None, 5).0,
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &a, None, 6).0,
        Err(ResponseError::RebalanceInProgress)
    );
    let r = g.join(join(&a, "a", false), 7, 20);
    assert_eq!(joined(&r, 20).generation, generation + 1);
    assert_eq!(g.leave("billing", &a, None, 8).0, Ok(()));
    // With nobody left to wait for, the rebalance ends at once: the next
    // generation, Empty.
    let d = g.describe("billing").expect("group");
    assert_eq!(d.members.len(), 0);
    assert_eq!((d.state, d.generation), (State::Empty, generation + 2));
}

#[test]
fn the_leader_dying_before_its_sync_sends_the_waiting_followers_back_to_join() {
    let mut g = groups();
    let (a, _) = stable_one(&mut g, "a", 0);
    g.join(join("", "b", false), 0, 10);
    let r = g.join(join(&a, "a", false), 0, 11);
    let b = joined(&r, 10).member_id;
    assert!(g.sync("billing", 2, &b, None, vec![], 1, 12).is_empty());
    // a never syncs nor heartbeats; b waits in its SyncGroup (kept alive).
    let r = g.tick(SESSION + 1);
    assert_eq!(
        synced(&r, 12).error,
        Some(ResponseError::RebalanceInProgress)
    );
    let r = g.join(join(&b, "b", false), SESSION + 2, 13);
    let j = joined(&r, 13);
    assert_eq!((j.generation, j.leader.as_str()), (3, b.as_str()));
}

#[test]
fn commits_are_fenced_by_member_and_generation() {
    let mut g = groups();
    // No group yet: a consumer assigning itself (generation -1) may commit.
    assert_eq!(g.validate_commit("billing", -1, "", None, 0).0, Ok(()));
    let (a, b, generation) = stable_two(&mut g, 0);
    assert_eq!(
        g.validate_commit("billing", generation, &a, None, 1).0,
        Ok(())
    );
    assert_eq!(
        g.validate_commit("billing", generation - 1, &a, None, 1).0,
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.validate_commit("billing", generation, "nobody", None, 1)
            .0,
        Err(ResponseError::UnknownMemberId)
    );
    // While the group has members, a standalone commit is refused.
    assert_eq!(
        g.validate_commit("billing", -1, "", None, 1).0,
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(g.leave("billing", &b, None, 2).0, Ok(()));
    assert_eq!(g.leave("billing", &a, None, 2).0, Ok(()));
    g.tick(3);
    assert_eq!(g.validate_commit("billing", -1, "", None, 4).0, Ok(()));
}

#[test]
fn only_a_group_without_members_is_deleted() {
    let mut g = groups();
    assert_eq!(g.delete("billing", 0).0, Ok(false));
    let (a, _) = stable_one(&mut g, "a", 0);
    assert_eq!(g.delete("billing", 1).0, Err(ResponseError::NonEmptyGroup));
    assert_eq!(g.describe("billing").map(|d| d.members.len()), Some(1));
    assert_eq!(g.leave("billing", &a, None, 2).0, Ok(()));
    assert_eq!(g.delete("billing", 3).0, Ok(true));
    assert!(g.describe("billing").is_none());
    // A member past its session counts as gone.
    stable_one(&mut g, "b", 10);
    assert_eq!(g.delete("billing", 10 + SESSION + 1).0, Ok(true));
}

#[test]
fn a_member_without_a_common_assignor_or_with_a_bad_session_is_refused() {
    let mut g = groups();
    stable_one(&mut g, "a", 0);
    let mut other = join("", "x", false);
    other.protocols = vec![("sticky".to_owned(), Bytes::new())];
    let r = g.join(other, 1, 5);
    assert_eq!(
        joined(&r, 5).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    let mut short = join("", "y", false);
    short.session_timeout_ms = 0;
    let r = g.join(short, 1, 6);
    assert_eq!(
        joined(&r, 6).error,
        Some(ResponseError::InvalidSessionTimeout)
    );
    assert_eq!(g.describe("billing").map(|d| d.state), Some(State::Stable));
}

#[test]
fn a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() {
    let mut g = groups();
    let (a, old_b, generation) = stable_static_two(&mut g);
    // b's process restarts: it joins again with no member id and the same instance.
    let r = g.join(static_join("", "b", "ib"), 100, 20);
    assert_eq!(r.len(), 1, "only b is answered: {r:?}");
    let j = joined(&r, 20);
    assert_eq!(j.error, None);
    assert_eq!(j.generation, generation, "no new generation");
    assert_eq!(j.leader, a);
    assert_ne!(j.member_id, old_b, "a new member id replaces the old one");
    let b = j.member_id;
    assert_eq!(g.describe("billing").map(|d| d.state), Some(State::Stable));
    let r = g.sync("billing", generation, &b, Some("ib"), vec![], 101, 21);
    assert_eq!(synced(&r, 21).assignment, Bytes::from_static(b"2,3"));
    // a notices nothing: its heartbeats and commits go on in the same generation.
    assert_eq!(
        g.heartbeat("billing", generation, &a, Some("ia"), 102).0,
        Ok(())
    );
    assert_eq!(
        g.validate_commit("billing", generation, &a, Some("ia"), 102)
            .0,
        Ok(())
    );
    // The old incarnation (a zombie) is fenced.
    assert_eq!(
        g.heartbeat("billing", generation, &old_b, Some("ib"), 103)
            .0,
        Err(ResponseError::FencedInstanceId)
    );
    assert_eq!(
        g.validate_commit("billing", generation, &old_b, Some("ib"), 103)
            .0,
        Err(ResponseError::FencedInstanceId)
    );
    let r = g.join(static_join(&old_b, "b", "ib"), 103, 22);
    assert_eq!(joined(&r, 22).error, Some(ResponseError::FencedInstanceId));
    let d = g.describe("billing").expect("group");
    let instances: Vec<Option<String>> = d
        .members
        .iter()
        .map(|m| m.group_instance_id.clone())
        .collect();
    assert_eq!(instances.len(), 2);
    assert!(instances.contains(&Some("ib".to_owned())));
    assert!(d.members.iter().any(|m| m.member_id == b));
}

#[test]
fn a_restarted_static_leader_is_not_told_to_assign_again() {
    let mut g = groups();
    let (old_a, b, generation) = stable_static_two(&mut g);
    let r = g.join(static_join("", "a", "ia"), 100, 20);
    let j = joined(&r, 20);
    assert_eq!((j.error, j.generation), (None, generation));
    // The leader named is the old id: the new incarnation acts as a follower and
    // takes its assignment from SyncGroup (Kafka's rule).
    assert_eq!(j.leader, old_a);
    assert!(j.members.is_empty());
    let r = g.sync(
        "billing",
        generation,
        &j.member_id,
        Some("ia"),
        vec![],
        101,
        21,
    );
    assert_eq!(synced(&r, 21).assignment, Bytes::from_static(b"0,1"));
    assert_eq!(
        g.heartbeat("billing", generation, &b, Some("ib"), 102).0,
        Ok(())
    );
    // The group's leader is now the new id: its rejoin starts a rebalance as any
    // leader's does.
    assert!(g
        .join(static_join(&j.member_id, "a", "ia"), 103, 22)
        .is_empty());
    assert_eq!(
        g.describe("billing").map(|d| d.state),
        Some(State::PreparingRebalance)
    );
}

#[test]
fn a_static_member_joining_while_the_group_rebalances_replaces_its_old_self() {
    let mut g = groups();
    let (a, old_b, generation) = stable_static_two(&mut g);
    // a rejoins (the leader's rejoin starts a rebalance); old b is gone without a
    // LeaveGroup and its new incarnation joins.
    assert!(g.join(static_join(&a, "a", "ia"), 10, 20).is_empty());
    let r = g.join(static_join("", "b", "ib"), 11, 21);
    let (ja, jb) = (joined(&r, 20), joined(&r, 21));
    assert_eq!(
        (ja.generation, jb.generation),
        (generation + 1, generation + 1)
    );
    assert_eq!(ja.members.len(), 2, "two members, not three");
    assert!(ja.members.iter().all(|(id, _)| *id != old_b));
}

#[test]
fn a_static_member_leaves_by_instance_id_and_stale_incarnations_are_fenced() {
    let mut g = groups();
    let (a, old_b, generation) = stable_static_two(&mut g);
    let r = g.join(static_join("", "b", "ib"), 10, 20);
    let b = joined(&r, 20).member_id;
    // The old incarnation cannot make the new one leave.
    assert_eq!(
        g.leave("billing", &old_b, Some("ib"), 11).0,
        Err(ResponseError::FencedInstanceId)
    );
    assert_eq!(
        g.leave("billing", "", Some("nobody"), 11).0,
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &a, Some("ia"), 11).0,
        Ok(())
    );
    // By instance id alone (an administrative removal): whatever its member id.
    assert_eq!(g.leave("billing", "", Some("ib"), 12).0, Ok(()));
    assert_eq!(
        g.heartbeat("billing", generation, &a, Some("ia"), 13).0,
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &b, Some("ib"), 13).0,
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_leader_that_never_sends_its_sync_is_removed_after_the_rebalance_timeout() {
    let mut g = groups();
    let (a, _) = stable_one(&mut g, "a", 0);
    g.join(join("", "b", false), 0, 10);
    let r = g.join(join(&a, "a", false), 0, 11);
    let b = joined(&r, 10).member_id;
    assert!(g.sync("billing", 2, &b, None, vec![], 1, 12).is_empty());
    // a is stuck (max.poll.interval.ms): its heartbeat thread keeps its session
    // alive but it never sends the assignment.
    for at in [500, 1_400, 2_300, REBALANCE - 1] {
        assert_eq!(g.heartbeat("billing", 2, &a, None, at).0, Ok(()));
        assert!(g.tick(at).is_empty(), "b still waits at {at} ms");
    }
    let r = g.tick(REBALANCE);
    assert_eq!(
        synced(&r, 12).error,
        Some(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.heartbeat("billing", 2, &a, None, REBALANCE + 1).0,
        Err(ResponseError::UnknownMemberId)
    );
    let r = g.join(join(&b, "b", false), REBALANCE + 2, 13);
    let j = joined(&r, 13);
    assert_eq!((j.generation, j.leader.as_str()), (3, b.as_str()));
}

#[test]
fn a_follower_that_never_sends_its_sync_is_removed_after_the_rebalance_timeout() {
    let mut g = groups();
    let (a, _) = stable_one(&mut g, "a", 0);
    g.join(join("", "b", false), 0, 10);
    let r = g.join(join(&a, "a", false), 0, 11);
    let b = joined(&r, 10).member_id;
    let r = g.sync(
        "billing",
        2,
        &a,
        None,
        vec![(a.clone(), Bytes::from_static(b"A"))],
        1,
        12,
    );
    assert_eq!(synced(&r, 12).error, None);
    // b heartbeats (its session stays alive) but never asks for its assignment.
    for at in [500, 1_400, 2_300, REBALANCE - 1] {
        assert_eq!(g.heartbeat("billing", 2, &b, None, at).0, Ok(()));
        assert_eq!(g.heartbeat("billing", 2, &a, None, at).0, Ok(()));
        g.tick(at);
    }
    g.tick(REBALANCE);
    let d = g.describe("billing").expect("group");
    assert_eq!(d.state, State::PreparingRebalance);
    assert_eq!(d.members.len(), 1);
    assert_eq!(
        g.heartbeat("billing", 2, &b, None, REBALANCE + 1).0,
        Err(ResponseError::UnknownMemberId)
    );
}
