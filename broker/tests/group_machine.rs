//! The classic group protocol's state machine, event by event (no sockets, no clock):
//! joins, syncs, heartbeats, leaves, session and rebalance timeouts, commit fencing.

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
    }
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
    let mut r = g.sync("billing", jb.generation, &jb.member_id, vec![], now, 12);
    r.extend(g.sync(
        "billing",
        ja.generation,
        &a,
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
    let (hb, _) = g.heartbeat("billing", 1, &a, 200);
    assert_eq!(hb, Err(ResponseError::RebalanceInProgress));
    // ... and a commit of its generation is still allowed while it rejoins (Kafka).
    assert_eq!(g.validate_commit("billing", 1, &a, 200).0, Ok(()));
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
    assert_eq!(g.heartbeat("billing", 2, &b, 1).0, Ok(()));
    let r = g.sync("billing", 2, &b, vec![], 1, 12);
    assert!(r.is_empty(), "b waits for the leader: {r:?}");
    // A commit while the assignment is pending is refused.
    assert_eq!(
        g.validate_commit("billing", 2, &b, 1).0,
        Err(ResponseError::RebalanceInProgress)
    );
    let r = g.sync(
        "billing",
        2,
        &a,
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
    let r = g.sync("billing", 1, &b, vec![], 3, 14);
    assert_eq!(synced(&r, 14).error, Some(ResponseError::IllegalGeneration));
    assert_eq!(
        g.heartbeat("billing", 1, &b, 3).0,
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(g.heartbeat("billing", 2, &b, 3).0, Ok(()));
}

#[test]
fn a_member_whose_session_times_out_is_removed_and_the_group_rebalances() {
    let mut g = groups();
    let (a, b, generation) = stable_two(&mut g, 0);
    // a keeps heartbeating, b (SIGKILLed) does not.
    assert_eq!(g.heartbeat("billing", generation, &a, SESSION).0, Ok(()));
    // Exactly at the session timeout b is still alive; 1 ms later it is gone.
    assert!(g.tick(SESSION).is_empty());
    assert_eq!(g.describe("billing").map(|d| d.members.len()), Some(2));
    g.tick(SESSION + 1);
    let d = g.describe("billing").expect("group");
    assert_eq!(d.state, State::PreparingRebalance);
    assert_eq!(d.members.len(), 1);
    assert_eq!(
        g.heartbeat("billing", generation, &a, SESSION + 2).0,
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &b, SESSION + 2).0,
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
            g.heartbeat("billing", generation, &b, at).0,
            Err(ResponseError::RebalanceInProgress)
        );
    }
    assert!(g.tick(10 + REBALANCE - 1).is_empty());
    let r = g.tick(10 + REBALANCE);
    let j = joined(&r, 20);
    assert_eq!((j.generation, j.members.len()), (generation + 1, 1));
    assert_eq!(
        g.heartbeat("billing", generation + 1, &b, 10 + REBALANCE).0,
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_leave_starts_a_rebalance_and_the_last_leave_empties_the_group() {
    let mut g = groups();
    let (a, b, generation) = stable_two(&mut g, 0);
    assert_eq!(g.leave("billing", &b, 5).0, Ok(()));
    assert_eq!(
        g.leave("billing", &b, 5).0,
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.heartbeat("billing", generation, &a, 6).0,
        Err(ResponseError::RebalanceInProgress)
    );
    let r = g.join(join(&a, "a", false), 7, 20);
    assert_eq!(joined(&r, 20).generation, generation + 1);
    assert_eq!(g.leave("billing", &a, 8).0, Ok(()));
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
    assert!(g.sync("billing", 2, &b, vec![], 1, 12).is_empty());
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
    assert_eq!(g.validate_commit("billing", -1, "", 0).0, Ok(()));
    let (a, b, generation) = stable_two(&mut g, 0);
    assert_eq!(g.validate_commit("billing", generation, &a, 1).0, Ok(()));
    assert_eq!(
        g.validate_commit("billing", generation - 1, &a, 1).0,
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.validate_commit("billing", generation, "nobody", 1).0,
        Err(ResponseError::UnknownMemberId)
    );
    // While the group has members, a standalone commit is refused.
    assert_eq!(
        g.validate_commit("billing", -1, "", 1).0,
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(g.leave("billing", &b, 2).0, Ok(()));
    assert_eq!(g.leave("billing", &a, 2).0, Ok(()));
    g.tick(3);
    assert_eq!(g.validate_commit("billing", -1, "", 4).0, Ok(()));
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
