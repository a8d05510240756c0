//! Table tests of the checkpoint coordinator: each test is one sequence of events, each
//! with the actions it must give (savepoint waiters are names here).

use std::path::PathBuf;

use super::{
    Action, CheckpointCoordinator, CoordinatorConfig, Event, ENDING, END_OF_INPUT, FINAL_ATTEMPTS,
};
use crate::checkpoint::control::Ack;
use crate::checkpoint::snapshot::FileEntry;
use brook_core::checkpoint::CheckpointId;
use brook_core::time::Millis;

type E = Event<&'static str>;
type A = Action<&'static str>;

/// Two tasks, a checkpoint every 100 ms, a timeout of 1 s, ids from 7.
fn coordinator() -> CheckpointCoordinator<&'static str> {
    CheckpointCoordinator::new(CoordinatorConfig {
        dir: PathBuf::from("/chk"),
        interval_ms: 100,
        timeout_ms: 1_000,
        tasks: 2,
        first_id: 7,
    })
}

/// Feeds the events in order, checking each one's actions.
fn run(table: Vec<(E, Vec<A>)>) {
    let mut c = coordinator();
    for (step, (event, expected)) in table.into_iter().enumerate() {
        let shown = format!("{event:?}");
        assert_eq!(c.handle(event), expected, "step {step}: {shown}");
    }
}

fn chk(id: CheckpointId) -> PathBuf {
    PathBuf::from(format!("/chk/chk-{id}"))
}

fn savepoint_dir(id: CheckpointId) -> PathBuf {
    PathBuf::from(format!("/sp/savepoint-{id}"))
}

/// Every task file is 10 bytes.
fn file(task: &str) -> FileEntry {
    FileEntry {
        name: format!("{task}.state"),
        size: 10,
        crc32c: 0,
        shared: Vec::new(),
    }
}

fn tick(now_ms: Millis) -> E {
    Event::Tick { now_ms }
}

fn ack(id: CheckpointId, task: &str) -> E {
    Event::Ack(Ack {
        id,
        result: Ok(file(task)),
        alignment: Some((task.to_string(), 7)),
    })
}

fn decline(id: CheckpointId, reason: &str) -> E {
    Event::Ack(Ack {
        id,
        result: Err(reason.into()),
        alignment: None,
    })
}

fn written(now_ms: Millis) -> E {
    Event::MetadataWritten {
        result: Ok(()),
        now_ms,
    }
}

fn savepoint(waiter: &'static str) -> E {
    Event::SavepointRequested {
        parent: Some(PathBuf::from("/sp")),
        waiter,
    }
}

fn trigger(id: CheckpointId) -> A {
    Action::Trigger {
        id,
        dir: chk(id),
        savepoint: false,
        is_final: false,
    }
}

fn trigger_final(id: CheckpointId) -> A {
    Action::Trigger {
        id,
        dir: chk(id),
        savepoint: false,
        is_final: true,
    }
}

fn trigger_savepoint(id: CheckpointId) -> A {
    Action::Trigger {
        id,
        dir: savepoint_dir(id),
        savepoint: true,
        is_final: false,
    }
}

/// The metadata of both tasks' files (`a` and `b`).
fn write(id: CheckpointId, dir: PathBuf, timestamp_ms: Millis) -> A {
    Action::WriteMetadata {
        id,
        dir,
        timestamp_ms,
        files: vec![file("a"), file("b")],
    }
}

/// Completed at `now_ms`, started at `started_ms`, with both 10-byte files.
fn complete(id: CheckpointId, started_ms: Millis, now_ms: Millis) -> A {
    Action::Complete {
        id,
        duration_ms: now_ms - started_ms,
        size_bytes: 20,
        completed_ms: now_ms,
        alignments: vec![("a".into(), 7), ("b".into(), 7)],
    }
}

fn abort(id: CheckpointId, dir: PathBuf, reason: &str) -> A {
    Action::Abort {
        id,
        dir,
        reason: reason.into(),
        ending: false,
    }
}

fn answer_ok(waiter: &'static str, dir: PathBuf) -> A {
    Action::AnswerSavepoint {
        waiter,
        result: Ok(dir),
    }
}

fn answer_err(waiter: &'static str, reason: &str) -> A {
    Action::AnswerSavepoint {
        waiter,
        result: Err(reason.into()),
    }
}

#[test]
fn a_checkpoint_every_interval_after_the_previous_one_ended() {
    run(vec![
        // The wait for the first checkpoint begins at the first tick.
        (tick(1_000), vec![]),
        (tick(1_099), vec![]),
        (tick(1_100), vec![trigger(7)]),
        (ack(7, "a"), vec![]),
        (tick(1_150), vec![]),
        (ack(7, "b"), vec![write(7, chk(7), 1_100)]),
        (
            written(1_160),
            vec![complete(7, 1_100, 1_160), Action::CleanUp { newest: 7 }],
        ),
        // The interval counts from the first tick after the checkpoint ended.
        (tick(1_170), vec![]),
        (tick(1_269), vec![]),
        (tick(1_270), vec![trigger(8)]),
    ]);
}

#[test]
fn a_declined_checkpoint_is_aborted_and_the_next_one_gets_a_new_id() {
    run(vec![
        (tick(0), vec![]),
        (tick(100), vec![trigger(7)]),
        (ack(7, "a"), vec![]),
        (
            decline(7, "sink s declined"),
            vec![abort(7, chk(7), "sink s declined")],
        ),
        // Acknowledgements of the aborted checkpoint change nothing.
        (ack(7, "b"), vec![]),
        (tick(150), vec![]),
        (tick(250), vec![trigger(8)]),
    ]);
}

#[test]
fn a_timed_out_checkpoint_is_aborted_and_its_late_acks_are_ignored_by_the_next() {
    run(vec![
        (tick(0), vec![]),
        (tick(100), vec![trigger(7)]),
        (ack(7, "a"), vec![]),
        // Exactly at the timeout it still runs, one millisecond later it is aborted.
        (tick(1_100), vec![]),
        (
            tick(1_101),
            vec![abort(7, chk(7), "not complete after 1000 ms")],
        ),
        (tick(1_150), vec![]),
        (tick(1_250), vec![trigger(8)]),
        (ack(8, "a"), vec![]),
        // Late: task b's answer to the aborted checkpoint 7 does not count for 8.
        (ack(7, "b"), vec![]),
        (ack(8, "b"), vec![write(8, chk(8), 1_250)]),
    ]);
}

#[test]
fn a_savepoint_requested_during_a_checkpoint_is_the_next_checkpoint() {
    run(vec![
        (tick(0), vec![]),
        (tick(100), vec![trigger(7)]),
        (ack(7, "a"), vec![]),
        // Not merged into checkpoint 7, whose barriers are out.
        (savepoint("w1"), vec![]),
        (ack(7, "b"), vec![write(7, chk(7), 100)]),
        (
            written(130),
            vec![complete(7, 100, 130), Action::CleanUp { newest: 7 }],
        ),
        // At once, not after the interval.
        (tick(140), vec![trigger_savepoint(8)]),
        (ack(8, "a"), vec![]),
        (ack(8, "b"), vec![write(8, savepoint_dir(8), 140)]),
        (
            written(150),
            vec![
                complete(8, 140, 150),
                answer_ok("w1", savepoint_dir(8)),
                Action::CleanUp { newest: 8 },
            ],
        ),
    ]);
}

#[test]
fn a_failed_savepoint_or_requested_checkpoint_tells_its_waiter_why() {
    run(vec![
        (savepoint("w1"), vec![]),
        (tick(0), vec![trigger_savepoint(7)]),
        (
            decline(7, "source s declined"),
            vec![
                answer_err("w1", "source s declined"),
                abort(7, savepoint_dir(7), "source s declined"),
            ],
        ),
        // Stop with checkpoint: a checkpoint in the checkpoints directory.
        (
            Event::SavepointRequested {
                parent: None,
                waiter: "w2",
            },
            vec![],
        ),
        (tick(10), vec![trigger(8)]),
        (ack(8, "a"), vec![]),
        (ack(8, "b"), vec![write(8, chk(8), 10)]),
        (
            Event::MetadataWritten {
                result: Err("disk full".into()),
                now_ms: 20,
            },
            vec![answer_err("w2", "disk full"), abort(8, chk(8), "disk full")],
        ),
        (savepoint("w3"), vec![]),
        (tick(30), vec![trigger_savepoint(9)]),
        (
            Event::TriggerFailed {
                error: "/sp/savepoint-9: permission denied".into(),
            },
            vec![
                answer_err("w3", "/sp/savepoint-9: permission denied"),
                Action::Exit,
            ],
        ),
    ]);
}

#[test]
fn stop_while_collecting_aborts_as_the_job_ending_and_answers_every_savepoint() {
    run(vec![
        (savepoint("w1"), vec![]),
        (tick(0), vec![trigger_savepoint(7)]),
        (ack(7, "a"), vec![]),
        (savepoint("w2"), vec![]),
        (
            Event::Stop,
            vec![
                answer_err("w1", ENDING),
                Action::Abort {
                    id: 7,
                    dir: savepoint_dir(7),
                    reason: ENDING.into(),
                    ending: true,
                },
                answer_err("w2", ENDING),
                Action::Exit,
            ],
        ),
        (ack(7, "b"), vec![]),
        (tick(10), vec![]),
        (Event::Stop, vec![]),
    ]);
}

#[test]
fn a_savepoint_when_the_job_is_ending_is_refused() {
    // Waiting for its checkpoint when the job stops.
    run(vec![
        (tick(0), vec![]),
        (savepoint("w1"), vec![]),
        (Event::Stop, vec![answer_err("w1", ENDING), Action::Exit]),
    ]);
    // Asked for while the last checkpoint's metadata is written: that one completes,
    // no other starts.
    run(vec![
        (tick(0), vec![]),
        (tick(100), vec![trigger(7)]),
        (ack(7, "a"), vec![]),
        (ack(7, "b"), vec![write(7, chk(7), 100)]),
        (Event::Stop, vec![]),
        (savepoint("w2"), vec![answer_err("w2", ENDING)]),
        (
            written(110),
            vec![
                complete(7, 100, 110),
                Action::CleanUp { newest: 7 },
                Action::Exit,
            ],
        ),
    ]);
}

#[test]
fn the_final_checkpoint_is_taken_at_once_and_is_the_last() {
    run(vec![
        (tick(0), vec![]),
        (Event::AllSourcesEnded, vec![]),
        (tick(10), vec![trigger_final(7)]),
        (ack(7, "a"), vec![]),
        (ack(7, "b"), vec![write(7, chk(7), 10)]),
        (
            written(20),
            vec![complete(7, 10, 20), Action::CleanUp { newest: 7 }],
        ),
        (tick(30), vec![]),
        (tick(5_000), vec![]),
        (savepoint("w1"), vec![answer_err("w1", END_OF_INPUT)]),
        (Event::Stop, vec![Action::Exit]),
    ]);
}

#[test]
fn a_savepoint_waiting_when_the_final_checkpoint_completes_is_refused() {
    run(vec![
        (Event::AllSourcesEnded, vec![]),
        (tick(0), vec![trigger_final(7)]),
        (savepoint("w1"), vec![]),
        (ack(7, "a"), vec![]),
        (ack(7, "b"), vec![write(7, chk(7), 0)]),
        (
            written(5),
            vec![
                complete(7, 0, 5),
                Action::CleanUp { newest: 7 },
                answer_err("w1", END_OF_INPUT),
            ],
        ),
    ]);
}

#[test]
fn the_final_checkpoint_is_retried_at_once_and_abandoned_after_its_attempts() {
    assert_eq!(FINAL_ATTEMPTS, 3, "the table below has three attempts");
    run(vec![
        (Event::AllSourcesEnded, vec![]),
        (tick(0), vec![trigger_final(7)]),
        (decline(7, "declined"), vec![abort(7, chk(7), "declined")]),
        (tick(5), vec![trigger_final(8)]),
        (
            tick(1_006),
            vec![abort(8, chk(8), "not complete after 1000 ms")],
        ),
        (tick(1_010), vec![trigger_final(9)]),
        (savepoint("w1"), vec![]),
        (ack(9, "a"), vec![]),
        (ack(9, "b"), vec![write(9, chk(9), 1_010)]),
        (
            Event::MetadataWritten {
                result: Err("disk full".into()),
                now_ms: 1_020,
            },
            vec![
                abort(9, chk(9), "disk full"),
                Action::AbandonFinal { attempts: 3 },
                answer_err("w1", ENDING),
                Action::Exit,
            ],
        ),
        (tick(2_000), vec![]),
    ]);
}

#[test]
fn the_deadline_is_the_end_of_the_interval_or_just_past_the_timeout() {
    let mut c = coordinator();
    let table: Vec<(E, Option<Millis>)> = vec![
        (tick(1_000), Some(1_100)),
        (tick(1_100), Some(2_101)),
        (ack(7, "a"), Some(2_101)),
        (ack(7, "b"), None),
        // The next wait begins at the next tick.
        (written(1_150), None),
        (tick(1_160), Some(1_260)),
        (Event::AllSourcesEnded, Some(1_260)),
        (tick(1_170), Some(2_171)),
        (ack(8, "a"), Some(2_171)),
        (ack(8, "b"), None),
        (written(1_180), None),
        (tick(1_190), None),
    ];
    for (step, (event, expected)) in table.into_iter().enumerate() {
        let shown = format!("{event:?}");
        c.handle(event);
        assert_eq!(c.deadline_ms(), expected, "step {step}: {shown}");
    }
}
