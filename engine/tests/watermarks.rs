//! Event time in sources: per-split watermarks (minimum over active splits), per-record
//! emission, idleness across subtasks and a hash exchange, and timestamp assignment
//! with the bad-record policy (semantics.md §2).
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use brook_core::time::{ManualClock, Millis, Watermark};
use brook_core::watermark::{BadTimestamp, WatermarkStrategy};
use brook_engine::{JobConfig, StreamEnvironment};

/// What an operator saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Record(i64, Option<Millis>),
    Watermark(Millis),
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Passes records on and logs records and watermarks.
struct Recorder(Log);

impl Operator for Recorder {
    type In = i64;
    type Out = i64;
    fn process_batch(
        &mut self,
        batch: Batch<i64>,
        _ctx: &mut OperatorContext,
        out: &mut Output<i64>,
    ) -> OpResult {
        let mut log = self.0.lock().unwrap();
        for r in batch {
            log.push(Seen::Record(r.value, r.timestamp));
            out.push(r);
        }
        Ok(())
    }
    fn on_watermark(
        &mut self,
        wm: Watermark,
        _ctx: &mut OperatorContext,
        _out: &mut Output<i64>,
    ) -> OpResult<Option<Watermark>> {
        self.0.lock().unwrap().push(Seen::Watermark(wm.millis()));
        Ok(Some(wm))
    }
}

/// Records `(split, value)` in arrival order over `splits` splits; the value doubles as
/// the event time unless an assigner says otherwise. Unbounded sources then wait for
/// ever (until the job is cancelled).
#[derive(Clone)]
struct Partitioned {
    splits: u32,
    records: Vec<(u32, i64)>,
    bounded: bool,
    /// Unbounded: a record is read once this clock reaches its value minus 1000 ms.
    clock: Option<ManualClock>,
}

#[derive(Debug, Clone)]
struct PSplit(u32);
impl Split for PSplit {
    fn split_id(&self) -> String {
        format!("p{}", self.0)
    }
}

impl Source for Partitioned {
    type Out = i64;
    type Split = PSplit;
    fn enumerate_splits(&self, _p: u32) -> OpResult<Vec<PSplit>> {
        Ok((0..self.splits).map(PSplit).collect())
    }
    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<PSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = i64>>> {
        // Index of each global split among this reader's splits.
        let local: Vec<(u32, u32)> = splits
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0, i as u32))
            .collect();
        let records = self
            .records
            .iter()
            .filter_map(|(s, v)| local.iter().find(|(g, _)| g == s).map(|(_, l)| (*l, *v)))
            .collect();
        Ok(Box::new(PReader {
            records,
            bounded: self.bounded,
            clock: self.clock.clone(),
        }))
    }
    fn is_bounded(&self) -> bool {
        self.bounded
    }
}

struct PReader {
    records: Vec<(u32, i64)>,
    bounded: bool,
    clock: Option<ManualClock>,
}

impl SourceReader for PReader {
    type Out = i64;
    fn poll_next(&mut self, out: &mut Output<i64>) -> OpResult<InputStatus> {
        use brook_core::time::Clock;
        let now = self.clock.as_ref().map_or(i64::MAX, |c| c.now_ms());
        while let Some(&(s, v)) = self.records.first() {
            if v - 1000 > now {
                break;
            }
            self.records.remove(0);
            out.set_split(s);
            out.collect(v, Some(v));
        }
        Ok(if self.bounded {
            InputStatus::End
        } else {
            InputStatus::NothingAvailable
        })
    }
}

fn run_bounded(records: Vec<(u32, i64)>, strategy: WatermarkStrategy<i64>) -> Vec<Seen> {
    let env = StreamEnvironment::new(JobConfig::default());
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    let src = Partitioned {
        splits: 2,
        records,
        bounded: true,
        clock: None,
    };
    env.from_source(src, strategy)
        .transform("recorder", move |_| Recorder(Arc::clone(&l)))
        .sink(brook_engine::testing::CollectSink::new());
    env.execute("wm").unwrap();
    let v = log.lock().unwrap().clone();
    v
}

#[test]
fn per_record_watermarks_are_the_minimum_over_splits_and_follow_their_record() {
    let seen = run_bounded(
        vec![(0, 100), (1, 50), (0, 300), (1, 400), (1, 200)],
        WatermarkStrategy::for_bounded_out_of_orderness(0).with_emit_interval(0),
    );
    use Seen::*;
    assert_eq!(
        seen,
        vec![
            Record(100, Some(100)),
            // Split 1 has had no record: the watermark waits for it.
            Record(50, Some(50)),
            Watermark(49),
            Record(300, Some(300)),
            Record(400, Some(400)),
            Watermark(299),
            // Out of order within the bound of split 1: no watermark change.
            Record(200, Some(200)),
            Watermark(i64::MAX),
        ]
    );
}

#[test]
fn bounded_out_of_orderness_subtracts_the_bound_and_one() {
    let seen = run_bounded(
        vec![(0, 1000), (1, 1000), (0, 1500)],
        WatermarkStrategy::for_bounded_out_of_orderness(100).with_emit_interval(0),
    );
    let wms: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Watermark(w) => Some(*w),
            _ => None,
        })
        .collect();
    assert_eq!(wms, vec![899, i64::MAX]);
}

#[test]
fn the_timestamp_assigner_sets_event_time_and_bad_timestamps_follow_the_policy() {
    let strategy = WatermarkStrategy::for_monotonous_timestamps()
        .with_emit_interval(0)
        .with_fallible_timestamp_assigner(|v: &i64, _| {
            if *v < 0 {
                Err(BadTimestamp {
                    raw: v.to_string(),
                    reason: "negative".into(),
                })
            } else {
                Ok(v * 10)
            }
        });
    let skip = BadRecords::skip();
    let counts = Arc::clone(skip.counts());
    let seen = run_bounded(
        vec![(0, 1), (0, -5), (0, 2)],
        strategy.clone().on_bad_record(skip),
    );
    use Seen::*;
    assert_eq!(
        seen,
        vec![
            Record(1, Some(10)),
            Record(2, Some(20)),
            Watermark(i64::MAX)
        ]
    );
    assert_eq!(counts.skipped(), 1);

    // The default policy fails the job, naming the source, the split and the record.
    let env = StreamEnvironment::new(JobConfig::default());
    let src = Partitioned {
        splits: 1,
        records: vec![(0, 1), (0, -5)],
        bounded: true,
        clock: None,
    };
    env.from_source(src, strategy)
        .sink(brook_engine::testing::CollectSink::new());
    let err = env.execute("bad").unwrap_err().to_string();
    assert!(
        err.contains("split p0, record 2") && err.contains("negative"),
        "{err}"
    );
}

/// Runs an unbounded source of three splits on two subtasks (subtask 0 reads splits 0
/// and 2, subtask 1 reads split 1), with records in split 0 only (event time 1000 read
/// at processing time 0, 7000 read at 6000), behind a rebalance; returns the watermarks
/// seen downstream after the clock moved to 6000.
fn silent_splits(idle_timeout: Option<Millis>) -> Vec<Millis> {
    let clock = ManualClock::new(0);
    let config = JobConfig {
        clock: clock.shared(),
        ..JobConfig::with_parallelism(2)
    };
    let env = StreamEnvironment::new(config);
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    let src = Partitioned {
        splits: 3,
        records: vec![(0, 1000), (0, 7000)],
        bounded: false,
        clock: Some(clock.clone()),
    };
    let mut strategy = WatermarkStrategy::for_bounded_out_of_orderness(0);
    if let Some(t) = idle_timeout {
        strategy = strategy.with_idleness(t);
    }
    env.from_source(src, strategy)
        .rebalance()
        .transform("recorder", move |_| Recorder(Arc::clone(&l)))
        .set_parallelism(1)
        .sink(brook_engine::testing::CollectSink::new());
    let job = env.start("idle").unwrap();
    let watermarks = || -> Vec<Millis> {
        log.lock()
            .unwrap()
            .iter()
            .filter_map(|s| match s {
                Seen::Watermark(w) => Some(*w),
                _ => None,
            })
            .collect()
    };
    // Let the records through, then move processing time past any idle timeout.
    std::thread::sleep(Duration::from_millis(200));
    assert!(watermarks().is_empty(), "{:?}", watermarks());
    clock.advance(6_000);
    let mut waited = 0;
    while watermarks().is_empty() && waited < 1_500 {
        std::thread::sleep(Duration::from_millis(20));
        waited += 20;
    }
    job.cancel();
    let _ = job.join();
    watermarks()
}

#[test]
fn silent_splits_hold_the_watermark_without_idleness() {
    assert_eq!(silent_splits(None), Vec::<Millis>::new());
}

#[test]
fn idle_splits_and_subtasks_are_left_out_after_the_idle_timeout() {
    // At 6000 split 2 (same subtask) and subtask 1 (split 1) have been silent for
    // 6 s > 5 s: the watermark is split 0's alone.
    let wms = silent_splits(Some(5_000));
    assert_eq!(wms, vec![6999]);
}
