//! Event time over the embedded log: each partition has its own watermark, so a
//! partition read ahead of another does not make the other's records late.
#![allow(clippy::unwrap_used)]

use brook::connectors::LogSource;
use brook::engine::testing::CollectSink;
use brook::log::{Log, LogOptions, ProducerRecord, TopicConfig};
use brook::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ev {
    p: u32,
    seq: i64,
}

/// Passes records on; checks each watermark against the newest event time seen per
/// partition (a watermark may not pass a partition that is behind) and counts them.
struct CheckWatermarks {
    newest: [Option<i64>; 2],
    watermarks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Operator for CheckWatermarks {
    type In = Ev;
    type Out = Ev;
    fn process_batch(
        &mut self,
        batch: Vec<StreamRecord<Ev>>,
        _ctx: &mut OperatorContext,
        out: &mut Output<Ev>,
    ) -> OpResult {
        for r in batch {
            let n = &mut self.newest[r.value.p as usize];
            *n = Some(n.map_or(r.value.seq * 10, |m: i64| m.max(r.value.seq * 10)));
            out.push(r);
        }
        Ok(())
    }
    fn on_watermark(
        &mut self,
        wm: Watermark,
        _ctx: &mut OperatorContext,
        _out: &mut Output<Ev>,
    ) -> OpResult<Option<Watermark>> {
        if wm != Watermark::MAX {
            let min = self
                .newest
                .iter()
                .map(|n| n.unwrap_or(i64::MIN))
                .min()
                .unwrap();
            assert!(wm.0 < min, "watermark {wm:?} passed a partition at {min}");
            self.watermarks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(Some(wm))
    }
}

fn window_counts(log: &Log, per_split_emit_interval: i64) -> (Vec<(i64, u64)>, u64) {
    let env = StreamEnvironment::new(JobConfig::default());
    let out = CollectSink::new();
    let late = OutputTag::<Ev>::new("late");
    let late_out = CollectSink::new();
    let strategy =
        WatermarkStrategy::for_monotonous_timestamps().with_emit_interval(per_split_emit_interval);
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s2 = std::sync::Arc::clone(&seen);
    let w = env
        .from_source(LogSource::json::<Ev>(log, "events").bounded(true), strategy)
        .transform("check", move |_| CheckWatermarks {
            newest: [None; 2],
            watermarks: std::sync::Arc::clone(&s2),
        })
        .key_by(|_: &Ev| 0u8)
        .window(TumblingEventTimeWindows::of(1_000).unwrap())
        .side_output_late_data(&late)
        .aggregate(Count);
    w.get_side_output(&late).unwrap().sink(late_out.clone());
    w.map(|r| (r.window.start, r.value)).sink(out.clone());
    env.execute("per-partition").unwrap();
    // Watermarks advanced while reading, not only at the end.
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) > 100);
    let mut got = out.values();
    got.sort();
    (got, late_out.values().len() as u64)
}

#[test]
fn a_partition_read_ahead_does_not_make_another_late() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("events", 2, TopicConfig::default())
        .unwrap();
    let t = log.topic("events").unwrap();
    // Both partitions: event times 0, 10, ..., 29990. The reader takes thousands of
    // records of partition 0 before it turns to partition 1.
    for p in 0..2 {
        let recs: Vec<ProducerRecord> = (0..3000)
            .map(|seq| {
                ProducerRecord::new(serde_json::to_vec(&Ev { p, seq }).unwrap())
                    .with_timestamp(seq * 10)
            })
            .collect();
        t.partition(p).unwrap().append(&recs).unwrap();
    }
    let (got, late) = window_counts(&log, 0);
    assert_eq!(late, 0, "records of the partition read second were late");
    assert_eq!(got, (0..30).map(|w| (w * 1000, 200)).collect::<Vec<_>>());
}
