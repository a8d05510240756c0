//! The operator harness drives an operator as the engine's task does: lifecycle order,
//! watermarks only forward, one processing-time callback, barriers, the end of input,
//! and a snapshot restored at another parallelism.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use brook_core::checkpoint::{CheckpointBarrier, CheckpointId, StateSnapshot};
use brook_core::element::{Batch, StreamElement, StreamRecord};
use brook_core::keys::key_group_for_key;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};
use brook_core::time::{ManualClock, Millis, Watermark};
use brook_core::watermark::BoundedOutOfOrderness;
use brook_testkit::operator::{HarnessSetup, OperatorHarness, TestBackend};

/// Sums values per key; a watermark emits and clears the sums (timestamp: the
/// watermark); a record at or behind the watermark goes out as late (`Err`). Asks for
/// a processing-time callback 10 ms after each batch, which emits the number of
/// callbacks so far as key 0. Snapshots the sums per key group (`key | sum`, 12 bytes).
#[derive(Debug, Default)]
struct SumPerKey {
    sums: BTreeMap<u32, i64>,
    ticks: i64,
    finished: bool,
    pre_barrier: Vec<CheckpointId>,
    completed: Vec<CheckpointId>,
}

type Out = Result<(u32, i64), (u32, i64)>;

impl Operator for SumPerKey {
    type In = (u32, i64);
    type Out = Out;

    fn restore_state(
        &mut self,
        _ctx: &mut OperatorContext,
        state: &brook_core::checkpoint::RestoredState,
    ) -> OpResult {
        for (_, bytes) in state.keyed() {
            for e in bytes.chunks_exact(12) {
                let key = u32::from_le_bytes(e[..4].try_into().unwrap());
                let sum = i64::from_le_bytes(e[4..].try_into().unwrap());
                self.sums.insert(key, sum);
            }
        }
        Ok(())
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint: CheckpointId,
        _ctx: &mut OperatorContext,
        _out: &mut Output<Out>,
    ) -> OpResult {
        self.pre_barrier.push(checkpoint);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        ctx: &mut OperatorContext,
        snapshot: &mut StateSnapshot,
    ) -> OpResult {
        for (k, s) in &self.sums {
            let mut e = k.to_le_bytes().to_vec();
            e.extend_from_slice(&s.to_le_bytes());
            snapshot.put_keyed(key_group_for_key(k, ctx.info().max_parallelism), &e);
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> OpResult {
        self.completed.push(checkpoint);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Batch<(u32, i64)>,
        ctx: &mut OperatorContext,
        out: &mut Output<Out>,
    ) -> OpResult {
        for r in batch {
            if r.timestamp
                .is_some_and(|t| t <= ctx.current_watermark().millis())
            {
                out.collect(Err(r.value), r.timestamp);
            } else {
                *self.sums.entry(r.value.0).or_default() += r.value.1;
            }
        }
        ctx.request_processing_time_callback(ctx.processing_time() + 10);
        Ok(())
    }

    fn on_watermark(
        &mut self,
        wm: Watermark,
        _ctx: &mut OperatorContext,
        out: &mut Output<Out>,
    ) -> OpResult<Option<Watermark>> {
        for (k, s) in std::mem::take(&mut self.sums) {
            out.collect(Ok((k, s)), Some(wm.millis()));
        }
        // Holds back odd watermarks, to show what is forwarded.
        Ok((wm.millis() % 2 == 0).then_some(wm))
    }

    fn on_processing_time(
        &mut self,
        _now_ms: Millis,
        _ctx: &mut OperatorContext,
        out: &mut Output<Out>,
    ) -> OpResult {
        self.ticks += 1;
        out.collect(Ok((0, self.ticks)), None);
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut OperatorContext, out: &mut Output<Out>) -> OpResult {
        self.finished = true;
        out.collect(Ok((u32::MAX, 0)), None);
        Ok(())
    }
}

fn opened() -> OperatorHarness<SumPerKey> {
    let mut h = OperatorHarness::new(SumPerKey::default());
    h.open().unwrap();
    h
}

#[test]
fn records_watermarks_and_outputs_with_their_watermark() {
    let mut h = opened();
    h.process_element((1, 5), 10).unwrap();
    h.process_record(StreamRecord::with_timestamp((1, 2), 11))
        .unwrap();
    h.process_watermark(20).unwrap();
    h.process_element((2, 7), 15).unwrap(); // behind the watermark: late
    h.process_watermark(20).unwrap(); // not ahead: dropped
    h.process_watermark(19).unwrap(); // behind: dropped
    h.process_watermark(21).unwrap(); // held back by the operator
    let out = h.take_output();
    let got: Vec<_> = out
        .iter()
        .map(|e| (e.value, e.timestamp, e.watermark.millis()))
        .collect();
    assert_eq!(
        got,
        vec![(Ok((1, 7)), Some(20), 20), (Err((2, 7)), Some(15), 20)]
    );
    assert_eq!(h.forwarded_watermarks(), &[Watermark(20)]);
    assert_eq!(h.current_watermark(), Watermark(21));
    assert!(h.output().is_empty());
}

#[test]
fn side_outputs_split_from_the_main_output() {
    let mut h = opened();
    h.process_element((1, 5), 10).unwrap();
    h.process_watermark(20).unwrap();
    h.process_element((2, 7), 15).unwrap();
    let (main, late) = h.take_output_split(|o| o);
    assert_eq!(
        main.iter().map(|e| e.value).collect::<Vec<_>>(),
        vec![(1, 5)]
    );
    assert_eq!(
        late.iter()
            .map(|e| (e.value, e.timestamp))
            .collect::<Vec<_>>(),
        vec![((2, 7), Some(15))]
    );
}

#[test]
fn the_processing_time_callback_fires_once_when_due() {
    let clock = ManualClock::new(100);
    let mut h = HarnessSetup::new("sum")
        .clock(&clock)
        .harness(SumPerKey::default())
        .unwrap();
    h.open().unwrap();
    h.process_element((1, 1), 0).unwrap();
    assert_eq!(h.pending_processing_time(), Some(110));
    h.set_processing_time(109).unwrap();
    assert!(h.take_values().is_empty(), "not due at 109");
    h.advance_processing_time(5).unwrap();
    assert_eq!(h.take_values(), vec![Ok((0, 1))]);
    assert_eq!(h.pending_processing_time(), None);
    h.advance_processing_time(100).unwrap();
    assert!(h.take_values().is_empty(), "fired once");
    // The setup's clock is the harness's.
    assert_eq!(clock.shared().now_ms(), 214);
    assert_eq!(h.processing_time(), 214);
}

#[test]
fn elements_of_a_channel_drive_the_same_calls() {
    let mut h = opened();
    let barrier = CheckpointBarrier {
        id: 7,
        timestamp: 0,
    };
    h.push(StreamElement::Records(vec![StreamRecord::with_timestamp(
        (3, 4),
        1,
    )]))
    .unwrap();
    h.push(StreamElement::Idle(true)).unwrap();
    assert!(h.is_idle());
    let snap = h.push(StreamElement::Barrier(barrier)).unwrap().unwrap();
    assert_eq!(snap.keyed().len(), 1);
    assert_eq!(h.operator().pre_barrier, vec![7]);
    h.notify_checkpoint_complete(7).unwrap();
    assert_eq!(h.operator().completed, vec![7]);
    assert_eq!(h.push(StreamElement::EndOfInput).unwrap(), None);
    // The final watermark, then finish.
    assert_eq!(h.take_values(), vec![Ok((3, 4)), Ok((u32::MAX, 0))]);
    assert_eq!(h.current_watermark(), Watermark::MAX);
    assert!(h.operator().finished);
}

#[test]
fn a_watermark_generator_makes_the_watermarks_of_a_source() {
    let mut h = OperatorHarness::new(SumPerKey::default())
        .with_watermark_generator(BoundedOutOfOrderness::new(3));
    h.open().unwrap();
    h.process_element((1, 1), 10).unwrap();
    assert_eq!(
        h.current_watermark(),
        Watermark::MIN,
        "records move nothing"
    );
    h.process_generated_watermark().unwrap();
    assert_eq!(h.current_watermark(), Watermark(6));
    h.process_element((1, 1), 8).unwrap();
    h.process_generated_watermark().unwrap();
    assert_eq!(h.current_watermark(), Watermark(6));
}

#[test]
fn calls_out_of_lifecycle_order_are_errors_not_panics() {
    let mut h = OperatorHarness::new(SumPerKey::default());
    let err = h.process_element((1, 1), 0).unwrap_err().to_string();
    assert!(
        err.contains("a record when the operator is Created"),
        "{err}"
    );
    h.open().unwrap();
    let err = h.restore(&[]).unwrap_err().to_string();
    assert!(err.contains("restore when the operator is Open"), "{err}");
    assert!(h.open().is_err());
    h.close();
    assert!(h.process_watermark(5).is_err());
    let err = HarnessSetup::new("x")
        .subtask(2, 2)
        .harness(SumPerKey::default());
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("subtask 2 of parallelism 2"),
        "index beyond the parallelism"
    );
}

/// Two subtasks snapshot their key groups; restored at parallelism 3 each new subtask
/// gets exactly the keys of its key groups, and all of them together the whole state.
#[test]
fn a_snapshot_restores_at_another_parallelism() {
    const MAX: u32 = 8;
    let route = |key: u32, p: u32| {
        brook_core::keys::subtask_for_key_group(MAX, p, key_group_for_key(&key, MAX))
    };
    let mut old: Vec<_> = (0..2)
        .map(|i| {
            let mut h = HarnessSetup::new("sum")
                .subtask(i, 2)
                .max_parallelism(MAX)
                .harness(SumPerKey::default())
                .unwrap();
            h.open().unwrap();
            h
        })
        .collect();
    for key in 0..20u32 {
        let h = &mut old[route(key, 2) as usize];
        h.process_element((key, i64::from(key) * 10), 1).unwrap();
    }
    let snaps: Vec<_> = old.iter_mut().map(|h| h.snapshot(1).unwrap()).collect();
    let mut all = BTreeMap::new();
    for i in 0..3 {
        let mut h = HarnessSetup::new("sum")
            .subtask(i, 3)
            .max_parallelism(MAX)
            .harness(SumPerKey::default())
            .unwrap();
        h.restore(&snaps).unwrap();
        h.open().unwrap();
        h.end_input().unwrap();
        for v in h.take_values() {
            let (k, s) = v.unwrap();
            if k != u32::MAX {
                assert_eq!(route(k, 3), i, "key {k} restored on subtask {i}");
                all.insert(k, s);
            }
        }
    }
    let want: BTreeMap<_, _> = (0..20u32).map(|k| (k, i64::from(k) * 10)).collect();
    assert_eq!(all, want);
}

#[test]
fn keyed_harnesses_get_a_fresh_backend_of_each_kind() {
    for backend in TestBackend::ALL {
        let h = HarnessSetup::new("keyed")
            .keyed(backend, |state| {
                assert!(state.is_empty(), "{}", backend.name());
                SumPerKey::default()
            })
            .unwrap();
        assert_eq!(h.info().name, "keyed");
    }
}

#[test]
fn one_batch_runs_through_an_opened_operator() {
    let out = OperatorHarness::run_batch(
        SumPerKey::default(),
        vec![StreamRecord::with_timestamp((1, 2), 3)],
    )
    .unwrap();
    assert!(out.is_empty(), "sums wait for a watermark");
}
