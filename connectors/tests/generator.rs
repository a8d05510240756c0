#![allow(clippy::unwrap_used)]
//! The generator through the engine: the formula, at any parallelism, and the rate.

use brook_connectors::{GeneratorEvent, GeneratorSource};
use brook_core::element::StreamRecord;
use brook_core::time::Stopwatch;
use brook_engine::testing::CollectSink;
use brook_engine::{JobConfig, StreamEnvironment};

const N: u64 = 10_007;
const K: u64 = 97;
const START: i64 = 1_700_000_000_000;
const STEP: i64 = 5;

fn source() -> GeneratorSource {
    GeneratorSource::builder()
        .events(N)
        .keys(K)
        .start_ms(START)
        .step_ms(STEP)
        .build()
        .unwrap()
}

fn run(source: GeneratorSource, parallelism: u32) -> Vec<StreamRecord<GeneratorEvent>> {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let out = CollectSink::new();
    env.source(source).sink(out.clone());
    env.execute("generate").unwrap();
    let mut got = out.records();
    got.sort_by_key(|r| r.value.ts);
    got
}

/// The formula of the brief, written out independently.
fn expected() -> Vec<StreamRecord<GeneratorEvent>> {
    (0..N)
        .map(|i| {
            let e = GeneratorEvent {
                key: (i * 2_654_435_761) % K,
                ts: START + i as i64 * STEP,
                value: (i % 100) as i64,
            };
            StreamRecord::with_timestamp(e, e.ts)
        })
        .collect()
}

#[test]
fn output_matches_the_formula_at_parallelism_1_and_3() {
    let want = expected();
    let one = run(source(), 1);
    assert_eq!(one, want);
    let three = run(source(), 3);
    assert_eq!(three, want);
    assert!(want.iter().all(|r| r.value.key < K));
    // The keys are spread: every key shows up.
    let mut keys: Vec<u64> = want.iter().map(|r| r.value.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len() as u64, K);
}

#[test]
fn large_indices_do_not_overflow() {
    let s = GeneratorSource::builder().keys(1_000_003).build().unwrap();
    let i = u64::MAX / 3;
    let want = ((u128::from(i) * 2_654_435_761) % 1_000_003) as u64;
    assert_eq!(s.event(i).key, want);
}

#[test]
fn the_rate_paces_the_output() {
    // 300 events at 2000/s over 2 subtasks: about 150 ms.
    let s = GeneratorSource::builder()
        .events(300)
        .keys(10)
        .rate(2_000.0)
        .build()
        .unwrap();
    let watch = Stopwatch::start();
    let got = run(s, 2);
    let ms = watch.elapsed_nanos() / 1_000_000;
    assert_eq!(got.len(), 300);
    assert!(ms >= 130, "300 events at 2000/s took only {ms} ms");
    assert!(ms < 5_000, "300 events at 2000/s took {ms} ms");
}

#[test]
fn invalid_settings_name_the_field() {
    let e = GeneratorSource::builder().keys(0).build().unwrap_err();
    assert!(e.to_string().contains("keys"), "{e}");
    let e = GeneratorSource::builder().rate(0.0).build().unwrap_err();
    assert!(e.to_string().contains("rate"), "{e}");
    let e = GeneratorSource::builder()
        .rate(f64::NAN)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("rate"), "{e}");
    let e = GeneratorSource::builder()
        .events(u64::MAX)
        .step_ms(2)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("step_ms"), "{e}");
}

#[test]
fn more_subtasks_than_events() {
    let s = GeneratorSource::builder()
        .events(2)
        .keys(5)
        .build()
        .unwrap();
    let got: Vec<i64> = run(s, 3).into_iter().map(|r| r.value.ts).collect();
    assert_eq!(got, vec![0, 1]);
    let empty = GeneratorSource::builder().events(0).build().unwrap();
    assert!(empty.is_empty());
    assert!(run(empty, 2).is_empty());
}
