//! The window operator's hot path (tumbling and sliding aggregates with the heap state
//! table) does not allocate per record once a key's windows exist.
#![allow(clippy::unwrap_used)]

use brook_core::element::StreamRecord;
use brook_operators::window::{
    Count, Max, SlidingEventTimeWindows, Sum, TumblingEventTimeWindows, WindowAssigner,
    WindowOperator,
};
use brook_testkit::operator::{HarnessSetup, TestBackend};

/// Counts allocations per thread. Test-only; the one `unsafe` delegates to the system
/// allocator.
#[allow(unsafe_code)]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    struct Counting;

    // SAFETY: forwards to `System` unchanged; only counts.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Allocations made by this thread so far.
    pub(crate) fn allocations() -> u64 {
        ALLOCATIONS.with(Cell::get)
    }
}

/// Records `(key, value)` at times `0..1000`, 100 keys; returns allocations made while
/// the second round of batches is processed (all windows exist by then).
fn allocations_in_second_round(assigner: WindowAssigner) -> u64 {
    let mut h = HarnessSetup::new("window")
        .keyed(TestBackend::Heap, |b| {
            WindowOperator::aggregate(
                assigner,
                |e: &(u64, i64)| e.0,
                (
                    Count,
                    Sum::of(|e: &(u64, i64)| e.1),
                    Max::of(|e: &(u64, i64)| e.1),
                ),
                b,
            )
        })
        .unwrap();
    h.open().unwrap();
    // Records at 0.. are not late.
    h.process_watermark(-1).unwrap();
    let batches = |round: i64| -> Vec<Vec<StreamRecord<(u64, i64)>>> {
        (0..10)
            .map(|b| {
                (0..100)
                    .map(|i| {
                        let ts = (b * 100 + i + round) % 1000;
                        StreamRecord::with_timestamp(((i % 100) as u64, ts), ts)
                    })
                    .collect()
            })
            .collect()
    };
    for batch in batches(0) {
        h.process_batch(batch).unwrap();
    }
    let second = batches(7);
    let before = counting::allocations();
    for batch in second {
        h.process_batch(batch).unwrap();
    }
    let n = counting::allocations() - before;
    assert!(h.output().is_empty(), "nothing fires before the watermark");
    n
}

#[test]
fn tumbling_aggregate_does_not_allocate_per_record() {
    assert_eq!(
        allocations_in_second_round(TumblingEventTimeWindows::of(1000).unwrap()),
        0
    );
}

#[test]
fn sliding_aggregate_does_not_allocate_per_record() {
    assert_eq!(
        allocations_in_second_round(SlidingEventTimeWindows::of(1000, 250).unwrap()),
        0
    );
}

#[test]
fn the_counter_counts() {
    let before = counting::allocations();
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(counting::allocations() > before);
    drop(v);
}
