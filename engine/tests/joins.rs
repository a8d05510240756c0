//! Joins through the builder API: two sources, keyed by the same key, joined at
//! parallelism 2; results equal a nested-loop join; late records reach the side
//! outputs. (The join semantics are property-tested in operators/tests/joins.rs.)
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use brook_engine::metrics::JobMetrics;

use brook_core::time::Millis;
use brook_core::watermark::WatermarkStrategy;
use brook_engine::testing::{CollectSink, VecSource};
use brook_engine::{JobConfig, OutputTag, StreamEnvironment};
use brook_operators::window::assigner::TumblingEventTimeWindows;

/// (order id, customer, ts)
type Order = (u32, u32, Millis);
/// (order id, amount, ts)
type Payment = (u32, u32, Millis);
/// (customer, tier, valid from)
type Tier = (u32, String, Millis);

fn orders() -> Vec<(Order, Millis)> {
    (0..300u32)
        .map(|i| {
            let ts = Millis::from(i) * 10;
            ((i, i % 7, ts), ts)
        })
        .collect()
}

/// Payments of two orders in three, `i * 7 mod 20` ms after the order, in time order.
fn payments() -> Vec<(Payment, Millis)> {
    let mut v: Vec<(Payment, Millis)> = (0..300u32)
        .filter(|i| i % 3 != 0)
        .map(|i| {
            let ts = Millis::from(i) * 10 + Millis::from(i * 7 % 20);
            ((i, 100 + i, ts), ts)
        })
        .collect();
    v.sort_by_key(|(_, ts)| *ts);
    v
}

fn env() -> StreamEnvironment {
    StreamEnvironment::new(JobConfig::with_parallelism(2))
}

fn strategy<T: 'static>() -> WatermarkStrategy<T> {
    WatermarkStrategy::for_monotonous_timestamps().with_emit_interval(0)
}

#[test]
fn orders_join_their_payments_within_15_ms_and_unpaid_ones_come_out_alone() {
    let env = env();
    let o = env
        .from_source(VecSource::with_timestamps(orders()), strategy())
        .key_by(|o: &Order| o.0);
    let p = env
        .from_source(VecSource::with_timestamps(payments()), strategy())
        .key_by(|p: &Payment| p.0);
    let out = CollectSink::new();
    o.interval_join(p, 0, 15)
        .unwrap()
        .left_outer()
        .apply(|o: &Order, p: Option<&Payment>| (o.0, p.map(|p| p.1)))
        .sink(out.clone());
    env.execute("orders").unwrap();
    let mut got = out.values();
    got.sort_unstable();
    let mut want: Vec<(u32, Option<u32>)> = orders()
        .iter()
        .map(|((id, _, ts), _)| {
            let paid = payments()
                .into_iter()
                .find(|((pid, _, pts), _)| pid == id && (*ts..=ts + 15).contains(pts));
            (*id, paid.map(|((_, amount, _), _)| amount))
        })
        .collect();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(want.iter().any(|(_, p)| p.is_none()) && want.iter().any(|(_, p)| p.is_some()));
}

#[test]
fn window_and_temporal_joins_through_the_api() {
    let env = env();
    // Left: orders by customer; right: the customer's "tier" changing over time.
    let tiers: Vec<(Tier, Millis)> = (0..7u32)
        .flat_map(|c| {
            let t = 1_000 + Millis::from(c) * 100;
            [((c, "bronze".into(), 0), 0), ((c, "silver".into(), t), t)]
        })
        .collect();
    let mut tiers_sorted = tiers.clone();
    tiers_sorted.sort_by_key(|(_, ts)| *ts);
    let o = env
        .from_source(VecSource::with_timestamps(orders()), strategy())
        .key_by(|o: &Order| o.1);
    let t = env
        .from_source(VecSource::with_timestamps(tiers_sorted), strategy())
        .key_by(|t: &Tier| t.0);
    let temporal = CollectSink::new();
    o.clone()
        .temporal_join(t)
        .apply(|o: &Order, t: Option<&Tier>| (o.0, t.map(|t| t.1.clone())))
        .sink(temporal.clone());
    // Window join: orders with themselves re-keyed, per 100 ms window and customer.
    let o2 = env
        .from_source(VecSource::with_timestamps(orders()), strategy())
        .key_by(|o: &Order| o.1);
    let windowed = CollectSink::new();
    o.window_join(o2, TumblingEventTimeWindows::of(100).unwrap())
        .unwrap()
        .apply(|a: &Order, b: Option<&Order>| (a.0, b.map(|b| b.0)))
        .sink(windowed.clone());
    env.execute("tiers").unwrap();

    let got: BTreeMap<u32, Option<String>> = temporal.values().into_iter().collect();
    assert_eq!(got.len(), 300);
    for ((id, c, ts), _) in orders() {
        let want = if ts >= 1_000 + Millis::from(c) * 100 {
            "silver"
        } else {
            "bronze"
        };
        assert_eq!(got[&id].as_deref(), Some(want), "order {id} at {ts}");
    }
    let mut pairs = windowed.values();
    pairs.sort_unstable();
    let mut want = Vec::new();
    for ((a, ca, ta), _) in orders() {
        for ((b, cb, tb), _) in orders() {
            if ca == cb && ta / 100 == tb / 100 {
                want.push((a, Some(b)));
            }
        }
    }
    want.sort_unstable();
    assert_eq!(pairs, want);
}

/// A source of `items` (one split) that, before its `late` records, waits until the
/// join's watermark (read from the job's metrics) has passed `after`: the late records
/// are then late whatever the other input did, so the test is deterministic.
#[derive(Clone)]
struct Gated<T> {
    items: Vec<(T, Millis)>,
    late: Vec<(T, Millis)>,
    metrics: JobMetrics,
    after: Millis,
}

#[derive(Debug, Clone)]
struct One;

impl Split for One {
    fn split_id(&self) -> String {
        "one".into()
    }
}

struct GatedReader<T> {
    src: Gated<T>,
    at: usize,
}

impl<T: Clone + Send + Sync + 'static> Source for Gated<T> {
    type Out = T;
    type Split = One;
    fn enumerate_splits(&self, _p: u32) -> OpResult<Vec<One>> {
        Ok(vec![One])
    }
    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        _splits: Vec<One>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(GatedReader {
            src: self.clone(),
            at: 0,
        }))
    }
    fn is_bounded(&self) -> bool {
        true
    }
}

impl<T: Clone + Send + 'static> SourceReader for GatedReader<T> {
    type Out = T;
    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let n = self.src.items.len();
        if self.at < n {
            let (v, ts) = self.src.items[self.at].clone();
            out.collect(v, Some(ts));
            self.at += 1;
            return Ok(InputStatus::MoreAvailable);
        }
        let join_wm = self
            .src
            .metrics
            .vertices()
            .iter()
            .filter(|v| v.name == "interval-join")
            .flat_map(|v| v.subtasks.iter())
            .map(|m| m.watermark.load(Ordering::Relaxed))
            .min()
            .unwrap_or(Millis::MIN);
        if join_wm <= self.src.after {
            std::thread::sleep(Duration::from_millis(5));
            return Ok(InputStatus::MoreAvailable);
        }
        for (v, ts) in self.src.late.drain(..) {
            out.collect(v, Some(ts));
        }
        Ok(InputStatus::End)
    }
}

#[test]
fn late_records_of_both_sides_reach_their_side_outputs() {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(1));
    let metrics = JobMetrics::default();
    // One order and one payment 2.5 s late, sent once the join's watermark is past
    // 2,500 ms.
    let gated = |items, late| Gated {
        items,
        late,
        metrics: metrics.clone(),
        after: 2_500,
    };
    let o = env
        .from_source(gated(orders(), vec![((1_000, 1, 100), 100)]), strategy())
        .key_by(|o: &Order| o.0);
    let p = env
        .from_source(gated(payments(), vec![((2_000, 5, 200), 200)]), strategy())
        .key_by(|p: &Payment| p.0);
    let (late_o, late_p) = (
        OutputTag::new("late-orders"),
        OutputTag::new("late-payments"),
    );
    let joined = o
        .interval_join(p, 0, 15)
        .unwrap()
        .side_output_late_left(&late_o)
        .side_output_late_right(&late_p)
        .apply(|o: &Order, p: Option<&Payment>| (o.0, p.map(|p| p.0)));
    let (lo, lp, all) = (CollectSink::new(), CollectSink::new(), CollectSink::new());
    joined.get_side_output(&late_o).unwrap().sink(lo.clone());
    joined.get_side_output(&late_p).unwrap().sink(lp.clone());
    joined.sink(all.clone());
    let r = env
        .start_with_metrics("late", metrics.clone())
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(lo.values(), vec![(1_000, 1, 100)]);
    assert_eq!(lp.values(), vec![(2_000, 5, 200)]);
    // Both are counted in the join's `brook_late_records_total`.
    let late: Vec<u64> = r
        .vertices
        .iter()
        .filter(|(_, t)| t.late_records > 0)
        .map(|(_, t)| t.late_records)
        .collect();
    assert_eq!(late, vec![2]);
    let paid_in_time = payments()
        .iter()
        .filter(|((id, _, ts), _)| ts - Millis::from(*id) * 10 <= 15)
        .count();
    assert_eq!(all.values().len(), paid_in_time);
}
