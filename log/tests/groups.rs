//! Consumer groups through the public `Log` and `Consumer` API (`docs/semantics.md` §1):
//! assignment, liveness by session timeout, generation fencing of commits, separate
//! offsets and lag per group, durability of commits, waking `poll` on new records,
//! spreading keyless records, and rebalancing when partitions are added.
//!
//! Liveness runs on a `ManualClock`: a member "stops heartbeating" simply by not being
//! polled while the clock moves past its session timeout.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use brook_core::time::ManualClock;
use brook_log::{
    AssignmentStrategy, Consumer, ConsumerConfig, ConsumerRecord, FsyncPolicy, GroupError, Log,
    LogError, LogOptions, OffsetReset, Producer, ProducerRecord, ReadLimit, TopicConfig,
    TopicPartition,
};

const T0: i64 = 1_700_000_000_000;
const SESSION: i64 = 10_000;
const HEARTBEAT: i64 = 1_000;

fn open(dir: &Path, clock: &ManualClock) -> Log {
    Log::open(
        dir,
        LogOptions {
            fsync: FsyncPolicy::Never,
            clock: clock.shared(),
            maintenance_interval_ms: None,
        },
    )
    .unwrap()
}

fn member_config(group: &str, client: &str, strategy: AssignmentStrategy) -> ConsumerConfig {
    ConsumerConfig {
        group: Some(group.into()),
        client_id: client.into(),
        session_timeout_ms: SESSION,
        heartbeat_interval_ms: HEARTBEAT,
        auto_offset_reset: OffsetReset::Earliest,
        strategy,
        read_limit: ReadLimit::default(),
        isolation: Default::default(),
    }
}

fn subscribe(log: &Log, group: &str, client: &str) -> Consumer {
    Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        member_config(group, client, AssignmentStrategy::Range),
    )
    .unwrap()
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn value(p: u32, i: u64) -> String {
    format!("p{p}-r{i}")
}

/// Appends `n` records to partition `p`, continuing its numbering.
fn fill(log: &Log, p: u32, n: u64) {
    let part = log.topic("t").unwrap().partition(p).unwrap();
    let start = part.log_end_offset();
    let recs: Vec<ProducerRecord> = (start..start + n)
        .map(|i| ProducerRecord::new(value(p, i)))
        .collect();
    part.append(&recs).unwrap();
}

/// Polls until nothing more is available now.
fn drain(c: &mut Consumer) -> Vec<ConsumerRecord> {
    let mut all = Vec::new();
    loop {
        let got = c.try_poll().unwrap();
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

/// `(partition, offset)` of records, checking each value.
fn positions(recs: &[ConsumerRecord]) -> Vec<(u32, u64)> {
    recs.iter()
        .map(|r| {
            assert_eq!(&*r.topic, "t");
            assert_eq!(
                &r.record.value[..],
                value(r.partition, r.record.offset).as_bytes()
            );
            (r.partition, r.record.offset)
        })
        .collect()
}

/// Member id → assignment, from the group's description.
fn assignments(log: &Log, group: &str) -> BTreeMap<String, Vec<TopicPartition>> {
    log.describe_group(group)
        .unwrap()
        .members
        .into_iter()
        .map(|m| (m.member_id, m.assignment))
        .collect()
}

fn member_id(c: &Consumer) -> String {
    c.membership().unwrap().member_id.clone()
}

#[tokio::test]
async fn three_partitions_four_members_leave_exactly_one_idle() {
    for strategy in AssignmentStrategy::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let log = open(tmp.path(), &clock);
        log.create_topic("t", 3, TopicConfig::default()).unwrap();
        let mut cs: Vec<Consumer> = (0..4)
            .map(|i| {
                Consumer::subscribe(
                    log.clone(),
                    vec!["t".into()],
                    member_config("g", &format!("c{i}"), strategy),
                )
                .unwrap()
            })
            .collect();
        let d = log.describe_group("g").unwrap();
        assert_eq!(d.members.len(), 4);
        assert_eq!(d.generation, 4, "one rebalance per join");
        let all = assignments(&log, "g");
        let mut owned: Vec<TopicPartition> = all.values().flatten().cloned().collect();
        owned.sort();
        assert_eq!(owned, vec![tp(0), tp(1), tp(2)], "{strategy}: {all:?}");
        assert_eq!(
            all.values().filter(|a| a.is_empty()).count(),
            1,
            "{strategy}: {all:?}"
        );

        for p in 0..3 {
            fill(&log, p, 5);
        }
        // After a heartbeat every consumer holds what the group assigned it, and reads
        // only that.
        clock.advance(HEARTBEAT);
        let mut seen = Vec::new();
        for c in &mut cs {
            let recs = drain(c);
            let mine = &all[&member_id(c)];
            assert_eq!(&c.assignment(), mine, "{strategy}");
            assert_eq!(c.membership().unwrap().generation, 4);
            for (p, o) in positions(&recs) {
                assert!(
                    mine.contains(&tp(p)),
                    "{strategy}: read {p} but owns {mine:?}"
                );
                seen.push((p, o));
            }
        }
        seen.sort_unstable();
        let expected: Vec<(u32, u64)> = (0..3).flat_map(|p| (0..5).map(move |o| (p, o))).collect();
        assert_eq!(seen, expected, "{strategy}: every record exactly once");
    }
}

/// Sets up `a` and `b` in group `g` on a 2-partition topic with 10 records per partition;
/// `a` reads t-0 completely but commits only offset 4, `b` reads and commits t-1.
fn two_members_with_progress(
    log: &Log,
    clock: &ManualClock,
    a_session: i64,
) -> (Consumer, Consumer) {
    log.create_topic("t", 2, TopicConfig::default()).unwrap();
    let mut a = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            session_timeout_ms: a_session,
            ..member_config("g", "a", AssignmentStrategy::Range)
        },
    )
    .unwrap();
    let mut b = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            session_timeout_ms: 60_000,
            ..member_config("g", "b", AssignmentStrategy::Range)
        },
    )
    .unwrap();
    fill(log, 0, 10);
    fill(log, 1, 10);
    clock.advance(HEARTBEAT);
    let got_a = positions(&drain(&mut a));
    let got_b = positions(&drain(&mut b));
    assert_eq!(a.assignment(), vec![tp(0)]);
    assert_eq!(b.assignment(), vec![tp(1)]);
    assert_eq!(got_a, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
    assert_eq!(got_b, (0..10).map(|o| (1, o)).collect::<Vec<_>>());
    a.commit_offsets(&[(tp(0), 4)]).unwrap();
    b.commit().unwrap();
    assert_eq!(log.committed_offset("g", &tp(0)), Some(4));
    assert_eq!(log.committed_offset("g", &tp(1)), Some(10));
    (a, b)
}

/// A member that stops heartbeating is evicted when another member heartbeats after its
/// session timeout; its partition goes on from the committed offset.
#[tokio::test]
async fn silent_member_is_evicted_and_its_partition_resumes_from_the_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let (mut a, mut b) = two_members_with_progress(&log, &clock, SESSION);
    let a_id = member_id(&a);
    let generation = log.describe_group("g").unwrap().generation;

    // `a` is silent from now on; `b` polls every heartbeat interval. `a` committed at
    // T0 + HEARTBEAT (a commit counts as a heartbeat), so it is alive until
    // T0 + HEARTBEAT + SESSION and gone one interval later.
    let mut after = Vec::new();
    for step in 1..=SESSION / HEARTBEAT {
        clock.advance(HEARTBEAT);
        let got = b.try_poll().unwrap();
        assert!(got.is_empty(), "step {step}: {got:?}");
        assert_eq!(b.assignment(), vec![tp(1)], "step {step}: a is still alive");
    }
    assert_eq!(log.describe_group("g").unwrap().members.len(), 2);
    clock.advance(HEARTBEAT);
    after.extend(drain(&mut b));
    assert_eq!(b.assignment(), vec![tp(0), tp(1)]);
    let d = log.describe_group("g").unwrap();
    assert_eq!(d.members.len(), 1);
    assert!(d.generation > generation);
    // Records 0..4 of t-0 were committed by `a`: not again. 4..10 were not: delivered.
    assert_eq!(
        positions(&after),
        (4..10).map(|o| (0, o)).collect::<Vec<_>>()
    );
    fill(&log, 0, 2);
    fill(&log, 1, 1);
    let mut more = positions(&drain(&mut b));
    more.sort_unstable();
    assert_eq!(more, vec![(0, 10), (0, 11), (1, 10)]);
    b.commit().unwrap();
    assert_eq!(log.committed_offset("g", &tp(0)), Some(12));

    // The evicted member cannot commit any more.
    let err = a.commit_offsets(&[(tp(0), 10)]).unwrap_err();
    assert!(
        matches!(&err, LogError::Group(GroupError::UnknownMember { member, .. }) if *member == a_id),
        "{err}"
    );
    assert_eq!(log.committed_offset("g", &tp(0)), Some(12));
    // Polling again makes it rejoin as a new member, starting from the group's commits.
    clock.advance(HEARTBEAT);
    let got = positions(&drain(&mut a));
    assert_ne!(member_id(&a), a_id);
    assert_eq!(log.describe_group("g").unwrap().members.len(), 2);
    assert!(got.is_empty(), "everything was committed: {got:?}");
}

/// The same eviction done by `Log::run_maintenance` alone.
#[tokio::test]
async fn maintenance_evicts_a_silent_member() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let (_a, mut b) = two_members_with_progress(&log, &clock, 5_000);
    let generation = log.describe_group("g").unwrap().generation;
    clock.advance(5_000);
    log.run_maintenance().unwrap();
    assert_eq!(
        log.describe_group("g").unwrap().members.len(),
        2,
        "exactly at the timeout a member is still alive"
    );
    clock.advance(1);
    log.run_maintenance().unwrap();
    let d = log.describe_group("g").unwrap();
    assert_eq!(d.generation, generation + 1);
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id, member_id(&b));
    assert_eq!(d.members[0].assignment, vec![tp(0), tp(1)]);
    // `b` learns it on its next heartbeat and resumes t-0 at the commit.
    let got = positions(&drain(&mut b));
    assert_eq!(got, (4..10).map(|o| (0, o)).collect::<Vec<_>>());
    assert_eq!(b.membership().unwrap().generation, generation + 1);
}

#[tokio::test]
async fn commit_from_an_older_generation_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    log.create_topic("t", 2, TopicConfig::default()).unwrap();
    let mut a = subscribe(&log, "g", "a");
    fill(&log, 0, 3);
    fill(&log, 1, 3);
    assert_eq!(drain(&mut a).len(), 6);
    assert_eq!(a.membership().unwrap().generation, 1);
    let _b = subscribe(&log, "g", "b");
    assert_eq!(log.describe_group("g").unwrap().generation, 2);

    // `a` has not heartbeated since `b` joined: its commit is fenced.
    let err = a.commit().unwrap_err();
    match &err {
        LogError::Group(GroupError::IllegalGeneration {
            group,
            member,
            given,
            current,
        }) => {
            assert_eq!(group, "g");
            assert_eq!(member, &member_id(&a));
            assert_eq!((*given, *current), (1, 2));
        }
        other => panic!("expected IllegalGeneration, got {other}"),
    }
    assert!(err.to_string().contains("generation 1"), "{err}");
    assert_eq!(log.committed_offset("g", &tp(0)), None);
    assert_eq!(log.committed_offset("g", &tp(1)), None);

    // After a heartbeat it is in generation 2, owns t-0 only and may commit it.
    clock.advance(HEARTBEAT);
    assert!(drain(&mut a).is_empty());
    assert_eq!(a.membership().unwrap().generation, 2);
    assert_eq!(a.assignment(), vec![tp(0)]);
    a.commit().unwrap();
    assert_eq!(log.committed_offset("g", &tp(0)), Some(3));
    assert_eq!(log.committed_offset("g", &tp(1)), None);
    // A partition it no longer owns is refused.
    let err = a.commit_offsets(&[(tp(1), 3)]).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::Group(GroupError::NotAssigned { partition: 1, .. })
        ),
        "{err}"
    );
}

/// Two groups on one topic keep their own committed offsets and lag, and both survive a
/// close and reopen of the log.
#[tokio::test]
async fn groups_keep_separate_offsets_and_lag_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    log.create_topic("t", 2, TopicConfig::default()).unwrap();
    fill(&log, 0, 10);
    fill(&log, 1, 6);

    let mut all = subscribe(&log, "everything", "x");
    assert_eq!(drain(&mut all).len(), 16);
    all.commit().unwrap();
    let mut some = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            read_limit: ReadLimit::records(3),
            ..member_config("some", "y", AssignmentStrategy::Range)
        },
    )
    .unwrap();
    let got = positions(&some.try_poll().unwrap());
    assert_eq!(got, vec![(0, 0), (0, 1), (0, 2)]);
    some.commit().unwrap();
    fill(&log, 0, 5);

    let lag = |log: &Log, g: &str| -> Vec<(u32, Option<u64>, u64, Option<u64>)> {
        log.group_lag(g)
            .unwrap()
            .into_iter()
            .map(|r| {
                assert_eq!(r.topic, "t");
                (r.partition, r.committed, r.log_end_offset, r.lag)
            })
            .collect()
    };
    let everything = vec![(0, Some(10), 15, Some(5)), (1, Some(6), 6, Some(0))];
    let partial = vec![(0, Some(3), 15, Some(12)), (1, Some(0), 6, Some(6))];
    assert_eq!(lag(&log, "everything"), everything);
    assert_eq!(lag(&log, "some"), partial);
    let rows = log.group_lag("everything").unwrap();
    assert!(rows
        .iter()
        .all(|r| r.member.as_deref() == Some(&*member_id(&all))));
    assert_eq!(
        log.groups(),
        vec!["everything".to_string(), "some".to_string()]
    );

    drop((all, some));
    log.close().unwrap();
    drop(log);
    let log = open(tmp.path(), &clock);
    assert_eq!(log.committed_offset("everything", &tp(0)), Some(10));
    assert_eq!(log.committed_offset("some", &tp(0)), Some(3));
    assert_eq!(lag(&log, "everything"), everything);
    assert_eq!(lag(&log, "some"), partial);
    assert!(log
        .group_lag("some")
        .unwrap()
        .iter()
        .all(|r| r.member.is_none()));
    assert_eq!(
        log.groups(),
        vec!["everything".to_string(), "some".to_string()]
    );
    // A new member of each group continues where the group stopped.
    let mut all = subscribe(&log, "everything", "x");
    assert_eq!(
        positions(&drain(&mut all)),
        (10..15).map(|o| (0, o)).collect::<Vec<_>>()
    );
    let mut some = subscribe(&log, "some", "y");
    let mut got = positions(&drain(&mut some));
    got.sort_unstable();
    let mut expected: Vec<(u32, u64)> = (3..15).map(|o| (0, o)).collect();
    expected.extend((0..6).map(|o| (1, o)));
    assert_eq!(got, expected);
}

/// `poll` sleeps until a record arrives on an assigned partition, then returns it at
/// once; with nothing arriving it returns empty after its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_wakes_up_when_a_record_is_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    log.create_topic("t", 3, TopicConfig::default()).unwrap();
    // Heartbeats would cut the wait short: make them rare.
    let mut c = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            heartbeat_interval_ms: 600_000,
            session_timeout_ms: 600_000,
            auto_offset_reset: OffsetReset::Latest,
            ..member_config("g", "c", AssignmentStrategy::Range)
        },
    )
    .unwrap();

    let started = tokio::time::Instant::now();
    let got = c.poll(Duration::from_millis(300)).await.unwrap();
    assert!(got.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(300));

    for (p, text) in [(2u32, "late"), (0, "later")] {
        let producer = Producer::new(log.clone());
        let send = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            producer
                .send_to("t", p, vec![ProducerRecord::new(text)])
                .await
                .unwrap()
        });
        let started = tokio::time::Instant::now();
        let got = c.poll(Duration::from_secs(30)).await.unwrap();
        let waited = started.elapsed();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].partition, p);
        assert_eq!(&got[0].record.value[..], text.as_bytes());
        assert!(
            waited < Duration::from_secs(10),
            "woke only after {waited:?}"
        );
        send.await.unwrap();
    }
}

#[tokio::test]
async fn keyless_records_are_spread_over_all_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let topic = log.create_topic("t", 4, TopicConfig::default()).unwrap();
    let producer = Producer::new(log.clone());
    for i in 0..40 {
        producer
            .send("t", vec![ProducerRecord::new(format!("n{i}"))])
            .await
            .unwrap();
    }
    let counts: Vec<u64> = topic
        .partitions()
        .iter()
        .map(|p| p.log_end_offset())
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 40);
    assert!(
        counts.iter().all(|&n| (1..=20).contains(&n)),
        "keyless records not spread: {counts:?}"
    );
    // Keyed records stay with their key's partition.
    let infos = producer
        .send(
            "t",
            (0..8).map(|_| ProducerRecord::keyed("same", "v")).collect(),
        )
        .await
        .unwrap();
    assert_eq!(infos.len(), 1);
    assert_eq!(
        infos[0].partition,
        brook_log::partitioner::partition_for_key(b"same", 4)
    );
    // One member reads all of them.
    let mut c = subscribe(&log, "g", "c");
    let got = drain(&mut c);
    assert_eq!(got.len(), 48);
    let partitions: BTreeSet<u32> = got.iter().map(|r| r.partition).collect();
    assert_eq!(partitions.len(), 4);
}

#[tokio::test]
async fn adding_partitions_rebalances_and_assigns_the_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    log.create_topic("t", 2, TopicConfig::default()).unwrap();
    let mut a = subscribe(&log, "g", "a");
    let mut b = subscribe(&log, "g", "b");
    clock.advance(HEARTBEAT);
    drain(&mut a);
    drain(&mut b);
    let generation = log.describe_group("g").unwrap().generation;

    log.add_partitions("t", 3).unwrap();
    let d = log.describe_group("g").unwrap();
    assert_eq!(d.generation, generation + 1);
    assert_eq!(d.partition_counts["t"], 3);
    let all = assignments(&log, "g");
    let mut owned: Vec<TopicPartition> = all.values().flatten().cloned().collect();
    owned.sort();
    assert_eq!(owned, vec![tp(0), tp(1), tp(2)], "{all:?}");
    let owner = all
        .iter()
        .find(|(_, a)| a.contains(&tp(2)))
        .unwrap()
        .0
        .clone();

    fill(&log, 2, 3);
    clock.advance(HEARTBEAT);
    let got_a = positions(&drain(&mut a));
    let got_b = positions(&drain(&mut b));
    let (mine, other) = if owner == member_id(&a) {
        (got_a, got_b)
    } else {
        (got_b, got_a)
    };
    assert_eq!(mine, vec![(2, 0), (2, 1), (2, 2)]);
    assert!(other.is_empty());
    assert_eq!(a.membership().unwrap().generation, generation + 1);
    assert_eq!(b.membership().unwrap().generation, generation + 1);
    let mut held = a.assignment();
    held.extend(b.assignment());
    held.sort();
    assert_eq!(held, vec![tp(0), tp(1), tp(2)]);
}

/// A committed offset that retention has since deleted: the reset policy decides, as
/// Kafka's `auto.offset.reset` (`earliest` goes on at the log start, `latest` at the end,
/// `none` fails naming the start offset).
#[tokio::test]
async fn committed_offset_below_the_log_start_follows_the_reset_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let config = TopicConfig {
        segment_bytes: 1024,
        retention_ms: Some(10_000),
        ..TopicConfig::default()
    };
    log.create_topic("t", 1, config).unwrap();
    for _ in 0..10 {
        fill(&log, 0, 10);
    }
    let part = log.topic("t").unwrap().partition(0).unwrap();
    assert!(part.info().segments > 2, "{:?}", part.info());
    for g in ["early", "late", "strict"] {
        log.commit_offsets(g, &brook_log::CommitIdentity::Standalone, &[(tp(0), 5)])
            .unwrap();
    }
    clock.advance(10_001);
    assert!(log.run_maintenance().unwrap() > 0);
    let start = part.log_start_offset();
    assert!(start > 5 && start < 100, "start {start}");

    let mut early = subscribe(&log, "early", "c");
    let got = positions(&drain(&mut early));
    assert_eq!(got, (start..100).map(|o| (0, o)).collect::<Vec<_>>());

    let mut late = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Latest,
            ..member_config("late", "c", AssignmentStrategy::Range)
        },
    )
    .unwrap();
    assert!(drain(&mut late).is_empty());
    fill(&log, 0, 1);
    assert_eq!(positions(&drain(&mut late)), vec![(0, 100)]);

    let mut strict = Consumer::subscribe(
        log.clone(),
        vec!["t".into()],
        ConsumerConfig {
            auto_offset_reset: OffsetReset::None,
            ..member_config("strict", "c", AssignmentStrategy::Range)
        },
    )
    .unwrap();
    // The error of a group's consumer names the group.
    match strict.try_poll() {
        Err(LogError::GroupOffsetOutOfRange {
            group,
            offset,
            log_start,
            ..
        }) => {
            assert_eq!(group, "strict");
            assert_eq!(offset, 5);
            assert_eq!(log_start, start);
        }
        other => panic!("expected GroupOffsetOutOfRange, got {other:?}"),
    }
    assert_eq!(log.committed_offset("strict", &tp(0)), Some(5));
}

/// Kafka's sticky partitioner (KIP-480): the keyless records of one append (a batch)
/// all go to one partition, and the next batch to the next partition, in plain and
/// transactional appends alike.
#[test]
fn a_batch_of_keyless_records_goes_to_one_partition_and_the_next_batch_to_another() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let topic = log.create_topic("t", 3, TopicConfig::default()).unwrap();
    let batch = |tag: &str| {
        (0..5)
            .map(|i| ProducerRecord::new(format!("{tag}{i}")))
            .collect()
    };
    let first = topic.append(batch("a")).unwrap();
    assert_eq!(first.len(), 1, "one batch, one partition: {first:?}");
    assert_eq!(first[0].last_offset - first[0].base_offset, 4);
    let p0 = first[0].partition;
    let second = topic.append(batch("b")).unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].partition, (p0 + 1) % 3);
    // A keyed record does not move the keyless batch's partition.
    let mut mixed: Vec<ProducerRecord> = batch("c");
    mixed.push(ProducerRecord::keyed("k", "v"));
    let third = topic.append(mixed).unwrap();
    let keyed_p = brook_log::partitioner::partition_for_key(b"k", 3);
    let keyless: Vec<_> = third
        .iter()
        .filter(|i| i.partition == (p0 + 2) % 3)
        .collect();
    assert_eq!(keyless.len(), 1, "{third:?} (keyed to {keyed_p})");
    let mut txp = log.init_transactions("tx").unwrap();
    txp.begin().unwrap();
    let fourth = txp.send("t", batch("d")).unwrap();
    assert_eq!(fourth.len(), 1);
    assert_eq!(fourth[0].partition, p0);
    txp.commit_transaction().unwrap();
}

/// A committed offset past the log end (set beyond it) is detected as Kafka's consumer
/// does on `OFFSET_OUT_OF_RANGE`: `earliest` starts at the log start, `latest` at the
/// end (and reads what comes next), `none` fails naming group, topic, partition and
/// offset. Before, the consumer waited at the bad offset forever.
#[test]
fn a_committed_offset_past_the_end_is_reset_by_the_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let topic = log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let p = topic.partition(0).unwrap();
    p.append(&[ProducerRecord::new("a"), ProducerRecord::new("b")])
        .unwrap();
    for g in ["early", "late", "strict"] {
        log.commit_offsets(g, &brook_log::CommitIdentity::Standalone, &[(tp(0), 100)])
            .unwrap();
    }
    let consumer = |g: &str, reset: OffsetReset| {
        let config = ConsumerConfig {
            auto_offset_reset: reset,
            ..member_config(g, "c", AssignmentStrategy::Range)
        };
        Consumer::subscribe(log.clone(), vec!["t".into()], config)
    };

    let mut early = consumer("early", OffsetReset::Earliest).unwrap();
    assert_eq!(early.position(&tp(0)).unwrap(), 0);
    assert_eq!(early.try_poll().unwrap().len(), 2);
    early.close().unwrap();

    let mut late = consumer("late", OffsetReset::Latest).unwrap();
    assert_eq!(late.position(&tp(0)).unwrap(), 2);
    assert!(late.try_poll().unwrap().is_empty());
    p.append(&[ProducerRecord::new("c")]).unwrap();
    let got = late.try_poll().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].record.value[..], b"c");
    late.close().unwrap();

    let mut strict = consumer("strict", OffsetReset::None).unwrap();
    let err = strict.try_poll().unwrap_err();
    assert!(
        matches!(
            &err,
            LogError::GroupOffsetOutOfRange { group, topic, partition: 0, offset: 100, log_start: 0, log_end: 3 }
                if group == "strict" && topic == "t"
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("\"strict\"") && text.contains("t-0") && text.contains("100"),
        "{text}"
    );
    strict.close().unwrap();

    // A position sought past the end resets too (here: to the end).
    let mut c = consumer("seeker", OffsetReset::Latest).unwrap();
    c.seek(&tp(0), 50).unwrap();
    assert!(c.try_poll().unwrap().is_empty());
    assert_eq!(c.position(&tp(0)).unwrap(), 3);
}

/// Resetting a group's offsets is refused while it has members (as Kafka's
/// kafka-consumer-groups refuses a group that is not inactive), dry run or not; once
/// the member left it is done, and a dry run commits nothing.
#[test]
fn reset_offsets_is_refused_while_the_group_has_members() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), &clock);
    let topic = log.create_topic("t", 2, TopicConfig::default()).unwrap();
    topic
        .partition(1)
        .unwrap()
        .append(&[ProducerRecord::new("a"), ProducerRecord::new("b")])
        .unwrap();
    let c = subscribe(&log, "g", "c");
    for dry_run in [true, false] {
        let err = log
            .reset_offsets("g", "t", brook_log::ResetTo::Latest, dry_run)
            .unwrap_err();
        assert!(
            matches!(
                err,
                LogError::Group(GroupError::GroupHasMembers { members: 1, .. })
            ),
            "{err:?}"
        );
    }
    c.close().unwrap();
    let plan = log
        .reset_offsets("g", "t", brook_log::ResetTo::Latest, true)
        .unwrap();
    assert_eq!(
        plan.iter()
            .map(|r| (r.partition, r.new_offset))
            .collect::<Vec<_>>(),
        [(0, 0), (1, 2)]
    );
    assert_eq!(log.committed_offset("g", &tp(1)), None, "dry run");
    log.reset_offsets("g", "t", brook_log::ResetTo::Latest, false)
        .unwrap();
    assert_eq!(log.committed_offset("g", &tp(1)), Some(2));
}
