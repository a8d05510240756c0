//! Transaction timeouts (Kafka's `transaction.timeout.ms`, `brook_log::txn`): with an
//! injected clock, an undecided transaction past its timeout is aborted by the log's
//! maintenance (markers, last stable offset, fencing of the late writer), one within
//! it stays, a restarted log still expires it, and a restore that needs an expired
//! prepared transaction gets an error naming it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use brook_core::time::ManualClock;
use brook_log::{
    CommitOutcome, FsyncPolicy, IsolationLevel, Log, LogError, LogOptions, ProducerRecord,
    ReadLimit, TopicConfig, MAX_TRANSACTION_TIMEOUT_MS,
};

const T0: i64 = 1_700_000_000_000;

fn options(clock: &ManualClock) -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Never,
        clock: clock.shared(),
        maintenance_interval_ms: None,
    }
}

/// Opens a log at `dir` with one single-partition topic `t`.
fn open(dir: &std::path::Path, clock: &ManualClock) -> Log {
    let log = Log::open(dir, options(clock)).unwrap();
    if log.topic("t").is_err() {
        log.create_topic("t", 1, TopicConfig::default()).unwrap();
    }
    log
}

/// The values a read-committed reader of `t`'s partition 0 sees.
fn committed(log: &Log) -> Vec<String> {
    let p = log.topic("t").unwrap().partition(0).unwrap();
    let end = p.end_offset(IsolationLevel::ReadCommitted);
    let mut recs = Vec::new();
    let mut at = 0;
    while at < end {
        at = p
            .read_into_isolated(
                at,
                ReadLimit::default(),
                IsolationLevel::ReadCommitted,
                &mut recs,
            )
            .unwrap()
            .next_offset;
    }
    recs.iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect()
}

fn lso(log: &Log) -> u64 {
    log.topic("t")
        .unwrap()
        .partition(0)
        .unwrap()
        .last_stable_offset()
}

fn fenced<T: std::fmt::Debug>(r: Result<T, LogError>) -> bool {
    matches!(r, Err(LogError::ProducerFenced { .. }))
}

#[test]
fn an_open_transaction_past_its_timeout_is_aborted_and_its_writer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let topic = log.topic("t").unwrap();
    let mut w = log.init_transactions_with_timeout("w", 1_000).unwrap();
    assert_eq!(w.timeout_ms(), 1_000);
    w.begin().unwrap();
    w.send("t", vec![ProducerRecord::new("open-1")]).unwrap();
    // Another writer's records behind the open transaction are held back.
    topic.append(vec![ProducerRecord::new("plain")]).unwrap();
    assert_eq!(lso(&log), 0);
    assert_eq!(committed(&log), Vec::<String>::new());

    // Exactly at the timeout the transaction is alive.
    clock.advance(1_000);
    log.run_maintenance().unwrap();
    assert_eq!(lso(&log), 0);

    // 1 ms later the maintenance aborts it: marker written, LSO at the end.
    clock.advance(1);
    log.run_maintenance().unwrap();
    let p = topic.partition(0).unwrap();
    assert_eq!(p.log_end_offset(), 3, "two records and the abort marker");
    assert_eq!(lso(&log), 3);
    assert_eq!(committed(&log), vec!["plain".to_string()]);
    // Records after the aborted transaction are visible as they come.
    topic.append(vec![ProducerRecord::new("later")]).unwrap();
    assert_eq!(
        committed(&log),
        vec!["plain".to_string(), "later".to_string()]
    );

    // The late writer is fenced on every call.
    assert!(fenced(w.send("t", vec![ProducerRecord::new("late")])));
    assert!(fenced(w.prepare()));
    assert!(fenced(w.begin()));
    // Nothing of it landed.
    assert_eq!(p.log_end_offset(), 4);
    // Nothing more to expire.
    clock.advance(10_000);
    assert!(log
        .expire_transactions(clock_now(&clock))
        .unwrap()
        .is_empty());
    // A new session of the id works.
    let mut w2 = log.init_transactions("w").unwrap();
    w2.begin().unwrap();
    w2.send("t", vec![ProducerRecord::new("next")]).unwrap();
    w2.commit_transaction().unwrap();
    assert_eq!(
        committed(&log),
        vec!["plain".to_string(), "later".to_string(), "next".to_string()]
    );
}

fn clock_now(clock: &ManualClock) -> i64 {
    use brook_core::time::Clock;
    clock.now_ms()
}

#[test]
fn a_transaction_within_its_timeout_stays_and_commits() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let mut short = log.init_transactions_with_timeout("short", 1_000).unwrap();
    let mut long = log.init_transactions_with_timeout("long", 60_000).unwrap();
    long.begin().unwrap();
    long.send("t", vec![ProducerRecord::new("long")]).unwrap();
    // The clock of a transaction starts at its first record, not at begin.
    short.begin().unwrap();
    clock.advance(5_000);
    short.send("t", vec![ProducerRecord::new("short")]).unwrap();
    clock.advance(900);
    let expired = log.expire_transactions(clock_now(&clock)).unwrap();
    assert!(expired.is_empty(), "{expired:?}");
    let h = short.commit_transaction().unwrap();
    assert_eq!(short.commit(&h).unwrap(), CommitOutcome::AlreadyCommitted);
    long.commit_transaction().unwrap();
    let mut got = committed(&log);
    got.sort();
    assert_eq!(got, vec!["long".to_string(), "short".to_string()]);
}

#[test]
fn a_restarted_log_still_expires_a_transaction_of_a_crashed_writer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    {
        let log = open(dir.path(), &clock);
        let mut w = log.init_transactions_with_timeout("w", 2_000).unwrap();
        w.begin().unwrap();
        w.send("t", vec![ProducerRecord::new("lost")]).unwrap();
        // The writer goes away without a decision (dropping a session decides
        // nothing, as a crash), then the log restarts.
        drop(w);
    }
    clock.advance(1_500);
    let log = open(dir.path(), &clock);
    assert_eq!(lso(&log), 0);
    log.run_maintenance().unwrap();
    assert_eq!(lso(&log), 0, "1500 ms of 2000: not yet");
    clock.advance(501);
    log.run_maintenance().unwrap();
    assert_eq!(lso(&log), 2);
    assert_eq!(committed(&log), Vec::<String>::new());
    let read_uncommitted = log
        .topic("t")
        .unwrap()
        .partition(0)
        .unwrap()
        .end_offset(IsolationLevel::ReadUncommitted);
    assert_eq!(read_uncommitted, 2);
}

#[test]
fn an_expired_prepared_transaction_fails_the_restore_that_commits_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let mut w = log
        .init_transactions_with_timeout("sink.0", 10_000)
        .unwrap();
    w.begin().unwrap();
    w.send("t", vec![ProducerRecord::new("checkpointed")])
        .unwrap();
    let handle = w.prepare().unwrap();
    // The job dies before the checkpoint's commit and is not restored in time.
    drop(w);
    clock.advance(10_001);
    let expired = log.expire_transactions(clock_now(&clock)).unwrap();
    assert_eq!(expired, vec![handle.clone()]);
    assert_eq!(lso(&log), 2);
    assert_eq!(committed(&log), Vec::<String>::new());
    // The restore's commit names the transaction and the timeout; nothing is lost
    // silently.
    let mut restored = log
        .init_transactions_with_timeout("sink.0", 10_000)
        .unwrap();
    let err = restored.commit(&handle).unwrap_err();
    match &err {
        LogError::TransactionTimedOut {
            transactional_id,
            sequence,
            timeout_ms,
        } => {
            assert_eq!(transactional_id, "sink.0");
            assert_eq!(*sequence, handle.sequence);
            assert_eq!(*timeout_ms, 10_000);
        }
        other => panic!("want TransactionTimedOut, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("sink.0") && msg.contains("transaction.timeout.ms"),
        "{msg}"
    );
    // Aborting it (a restore that drops it) is idempotent.
    restored.abort(&handle).unwrap();
}

#[test]
fn a_prepared_transaction_of_an_older_session_expires_without_fencing_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    let mut old = log.init_transactions_with_timeout("w", 1_000).unwrap();
    old.begin().unwrap();
    old.send("t", vec![ProducerRecord::new("old")]).unwrap();
    let old_handle = old.prepare().unwrap();
    // A new session keeps the prepared transaction (for a commit by handle) and
    // writes its own with a longer timeout.
    let mut cur = log.init_transactions_with_timeout("w", 60_000).unwrap();
    cur.begin().unwrap();
    cur.send("t", vec![ProducerRecord::new("new")]).unwrap();
    clock.advance(1_001);
    let expired = log.expire_transactions(clock_now(&clock)).unwrap();
    assert_eq!(expired, vec![old_handle]);
    // The current session goes on.
    cur.commit_transaction().unwrap();
    assert_eq!(committed(&log), vec!["new".to_string()]);
}

#[test]
fn a_timeout_above_the_maximum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), &clock);
    for bad in [0, MAX_TRANSACTION_TIMEOUT_MS + 1] {
        let err = log.init_transactions_with_timeout("w", bad).unwrap_err();
        assert!(
            matches!(err, LogError::InvalidTransactionTimeout { timeout_ms, max_ms, .. }
                if timeout_ms == bad && max_ms == MAX_TRANSACTION_TIMEOUT_MS),
            "{err:?}"
        );
        assert!(err.to_string().contains("transaction.timeout.ms"), "{err}");
    }
    log.init_transactions_with_timeout("w", MAX_TRANSACTION_TIMEOUT_MS)
        .unwrap();
}

#[test]
fn the_background_maintenance_expires_transactions_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let log = Log::open(
        dir.path(),
        LogOptions {
            maintenance_interval_ms: Some(10),
            ..options(&clock)
        },
    )
    .unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let mut w = log.init_transactions_with_timeout("w", 1_000).unwrap();
    w.begin().unwrap();
    w.send("t", vec![ProducerRecord::new("x")]).unwrap();
    clock.advance(1_001);
    // Bounded by a count of polls (10 s at most), not a clock read.
    let expired = (0..2_000).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        lso(&log) != 0
    });
    assert!(expired, "the transaction was never expired");
    assert!(fenced(w.prepare()));
}
