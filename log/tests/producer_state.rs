//! The producers' state of a partition survives reopening, as Kafka rebuilds it
//! (`ProducerStateManager`): random appends of plain batches and of producers'
//! batches, rolls, retention, clean closes, crashes (no close snapshot, recovery on
//! open) and crashes that tear the last batch, checked against a simple model — the
//! state is what applying every surviving producer batch in order gives: per producer
//! its last epoch and the last five batches of it.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use brook_core::time::ManualClock;
use brook_log::{
    FsyncPolicy, Log, LogOptions, Partition, ProducerMark, ProducerRecord, ProducerStates,
    TopicConfig,
};
use proptest::prelude::*;

const TOPIC: &str = "pids";
const START_MS: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// A batch of `count` records, of producer `producer` (0..3) when given, with
    /// `bump` starting a new epoch at sequence 0.
    Append {
        producer: Option<u8>,
        bump: bool,
        count: u8,
    },
    Roll,
    /// Retention deleting every closed segment.
    Retention,
    /// `Log::close` and open again.
    Reopen,
    /// A crash: no close snapshot, recovery on open.
    Crash,
    /// A crash that tore the last batch (cut one byte short): recovery drops it.
    TornCrash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (proptest::option::weighted(0.8, 0u8..3), proptest::bool::weighted(0.1), 1u8..6)
            .prop_map(|(producer, bump, count)| Op::Append { producer, bump, count }),
        1 => Just(Op::Roll),
        1 => Just(Op::Retention),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::TornCrash),
    ]
}

/// One batch appended, as the model keeps it.
#[derive(Debug, Clone, Copy)]
struct Appended {
    first_offset: u64,
    count: u32,
    producer: Option<ProducerMark>,
}

fn options(clock: &ManualClock) -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Never,
        clock: clock.shared(),
        maintenance_interval_ms: None,
    }
}

/// The expected state: every surviving producer batch applied in order.
fn model_state(batches: &[Appended]) -> ProducerStates {
    let mut s = ProducerStates::default();
    for b in batches {
        if let Some(p) = &b.producer {
            s.appended(p, b.count, b.first_offset, START_MS);
        }
    }
    s
}

/// Per producer: its epoch and remembered batches (first and last sequence, first
/// offset).
type Comparable = HashMap<u64, (u16, Vec<(i32, i32, u64)>)>;

/// What is compared of a state (the time of the last append is the rebuild's, not
/// compared).
fn comparable(s: &ProducerStates) -> Comparable {
    s.iter()
        .map(|(id, e)| {
            let batches = e
                .batches
                .iter()
                .map(|b| (b.first_sequence, b.last_sequence, b.first_offset))
                .collect();
            (id, (e.epoch, batches))
        })
        .collect()
}

fn partition(log: &Log) -> std::sync::Arc<Partition> {
    log.topic(TOPIC).unwrap().partition(0).unwrap()
}

/// The producer-state snapshot files in `dir`.
fn snapshots(dir: &Path) -> Vec<std::path::PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect()
}

fn active_segment(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let config = TopicConfig {
        segment_bytes: 1024,
        segment_ms: None,
        retention_ms: Some(1_000),
        ..TopicConfig::default()
    };
    let mut log = Some(Log::open(dir.path(), options(&clock)).unwrap());
    log.as_ref()
        .unwrap()
        .create_topic(TOPIC, 1, config)
        .unwrap();
    let pdir = partition(log.as_ref().unwrap()).dir().to_path_buf();
    let mut batches: Vec<Appended> = Vec::new();
    // Per producer: epoch and next sequence.
    let mut next: HashMap<u8, (u16, i32)> = HashMap::new();
    for op in ops {
        match op {
            Op::Append {
                producer,
                bump,
                count,
            } => {
                let p = partition(log.as_ref().unwrap());
                let records: Vec<_> = (0..*count)
                    .map(|i| ProducerRecord::new(vec![i; 40]).with_timestamp(START_MS))
                    .collect();
                let mark = producer.map(|id| {
                    let (epoch, seq) = next.entry(id).or_insert((0, 0));
                    if *bump {
                        *epoch += 1;
                        *seq = 0;
                    }
                    let mark = ProducerMark {
                        producer_id: 1_000 + u64::from(id),
                        epoch: *epoch,
                        base_sequence: *seq,
                    };
                    *seq += i32::from(*count);
                    mark
                });
                let info = match mark {
                    Some(m) => p.append_with_producer(&records, m).unwrap(),
                    None => p.append(&records).unwrap(),
                };
                batches.push(Appended {
                    first_offset: info.base_offset,
                    count: u32::from(*count),
                    producer: mark,
                });
            }
            Op::Roll => partition(log.as_ref().unwrap()).roll().unwrap(),
            Op::Retention => {
                partition(log.as_ref().unwrap())
                    .apply_retention(START_MS + 10_000)
                    .unwrap();
            }
            Op::Reopen | Op::Crash | Op::TornCrash => {
                let before = snapshots(&pdir);
                log.take().unwrap().close().unwrap();
                if !matches!(op, Op::Reopen) {
                    // A crash writes neither the marker nor the close's snapshot.
                    fs::remove_file(dir.path().join(".clean-shutdown")).unwrap();
                    for s in snapshots(&pdir) {
                        if !before.contains(&s) {
                            fs::remove_file(s).unwrap();
                        }
                    }
                }
                if matches!(op, Op::TornCrash) {
                    let active = active_segment(&pdir);
                    let len = fs::metadata(&active).unwrap().len();
                    if len > 0 {
                        let f = fs::OpenOptions::new().write(true).open(&active).unwrap();
                        f.set_len(len - 1).unwrap();
                        // The last batch was in the active segment (it is not empty).
                        batches.pop();
                    }
                }
                log = Some(Log::open(dir.path(), options(&clock)).unwrap());
            }
        }
        let got = partition(log.as_ref().unwrap()).producer_states().unwrap();
        prop_assert_eq!(
            comparable(&got),
            comparable(&model_state(&batches)),
            "after {:?}",
            op
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn the_rebuilt_producer_state_is_the_one_the_appends_left(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops)?;
    }
}

#[test]
fn a_torn_producer_batch_leaves_no_state_and_a_retry_is_known_after_a_crash() {
    let ops = [
        Op::Append {
            producer: Some(0),
            bump: false,
            count: 3,
        },
        Op::Crash,
        Op::Append {
            producer: Some(0),
            bump: false,
            count: 2,
        },
        Op::TornCrash,
        Op::Roll,
        Op::Append {
            producer: Some(1),
            bump: false,
            count: 1,
        },
        Op::Crash,
    ];
    run(&ops).unwrap();
}
