//! Window assigners: which windows a record belongs to, as Flink's `WindowAssigner`s.

use brook_core::time::Millis;
use thiserror::Error;

use super::TimeWindow;

/// Above this many windows per record (`ceil(size / slide)`) a sliding window is worth
/// a warning: every record updates that many windows, and each window emits a row per
/// key. A typo such as `size: 1h, slide: 1ms` (3.6 M windows per record) ran for ten
/// minutes at 1.7 GB before this limit existed (issue 15).
pub const WARN_WINDOWS_PER_RECORD: u64 = 1_000;

/// The most windows per record a sliding assigner accepts unless it is given a higher
/// limit ([`SlidingEventTimeWindows::with_max_windows_per_record`]; in a YAML job the
/// window's `max_windows_per_record`).
pub const DEFAULT_MAX_WINDOWS_PER_RECORD: u64 = 100_000;

/// An invalid window parameter, named as in the constructor (all values in ms).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WindowConfigError {
    /// A size, slide or gap that is not positive.
    #[error("window {param} must be > 0 ms, got {value}")]
    NotPositive {
        /// `size`, `slide` or `gap`.
        param: &'static str,
        /// The value given.
        value: Millis,
    },
    /// An offset with `|offset| >= bound` (the size for tumbling windows, the slide for
    /// sliding windows).
    #[error("window offset must satisfy |offset| < {bound_name} ({bound} ms), got {offset}")]
    OffsetOutOfRange {
        /// The offset given.
        offset: Millis,
        /// `size` or `slide`.
        bound_name: &'static str,
        /// Its value.
        bound: Millis,
    },
    /// A sliding window whose slide is larger than its size (records would fall
    /// between windows).
    #[error("window slide ({slide} ms) must be <= size ({size} ms)")]
    SlideLargerThanSize {
        /// The size given.
        size: Millis,
        /// The slide given.
        slide: Millis,
    },
    /// A sliding window putting each record into more windows (`ceil(size / slide)`)
    /// than the limit (default [`DEFAULT_MAX_WINDOWS_PER_RECORD`]).
    #[error(
        "window slide {slide} ms with size {size} ms puts each record into {windows} windows, \
         more than the limit of {limit} windows per record: use a larger slide, or raise the \
         limit (max_windows_per_record)"
    )]
    TooManyWindows {
        /// The size given.
        size: Millis,
        /// The slide given.
        slide: Millis,
        /// Windows per record, `ceil(size / slide)`.
        windows: u64,
        /// The limit.
        limit: u64,
    },
}

/// The shape of an assigner's windows (all values in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowKind {
    /// One window `[start, start + size)` per record, `start = t - ((t - offset) mod size)`.
    Tumbling {
        /// Window length.
        size: Millis,
        /// Shift of the window grid from the epoch, `|offset| < size`.
        offset: Millis,
    },
    /// Overlapping windows of length `size` starting every `slide`.
    Sliding {
        /// Window length.
        size: Millis,
        /// Distance between window starts, `0 < slide <= size`.
        slide: Millis,
        /// Shift of the window grid from the epoch, `|offset| < slide`.
        offset: Millis,
    },
    /// `[t, t + gap)` per record, merged with the key's windows it touches.
    Session {
        /// Inactivity gap.
        gap: Millis,
    },
}

/// Assigns records to time windows by event time (the record's timestamp) or
/// processing time (the clock when the record arrives), as Flink's `WindowAssigner`.
/// Built with [`TumblingEventTimeWindows`], [`SlidingEventTimeWindows`],
/// [`EventTimeSessionWindows`] and their processing-time counterparts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowAssigner {
    kind: WindowKind,
    event_time: bool,
}

/// Flink's `TimeWindow.getWindowStartWithOffset`: the start of the window of length
/// `size` (shifted by `offset`) containing `t`: `t - ((t - offset) mod size)` with a
/// mathematical (never negative) modulo, so negative `t` works. Arithmetic wraps on
/// overflow as in Java.
pub fn window_start_with_offset(t: Millis, offset: Millis, size: Millis) -> Millis {
    let rem = t.wrapping_sub(offset) % size;
    if rem < 0 {
        t.wrapping_sub(rem.wrapping_add(size))
    } else {
        t.wrapping_sub(rem)
    }
}

/// `ceil(size / slide)` for `0 < slide <= size` (ms).
fn sliding_windows_per_record(size: Millis, slide: Millis) -> u64 {
    size.unsigned_abs().div_ceil(slide.unsigned_abs().max(1))
}

fn positive(param: &'static str, value: Millis) -> Result<(), WindowConfigError> {
    if value > 0 {
        Ok(())
    } else {
        Err(WindowConfigError::NotPositive { param, value })
    }
}

fn offset_below(
    offset: Millis,
    bound_name: &'static str,
    bound: Millis,
) -> Result<(), WindowConfigError> {
    if offset.unsigned_abs() < bound.unsigned_abs() {
        Ok(())
    } else {
        Err(WindowConfigError::OffsetOutOfRange {
            offset,
            bound_name,
            bound,
        })
    }
}

impl WindowAssigner {
    fn tumbling(size: Millis, offset: Millis, event_time: bool) -> Result<Self, WindowConfigError> {
        positive("size", size)?;
        offset_below(offset, "size", size)?;
        Ok(WindowAssigner {
            kind: WindowKind::Tumbling { size, offset },
            event_time,
        })
    }

    fn sliding(
        size: Millis,
        slide: Millis,
        offset: Millis,
        event_time: bool,
        max_windows_per_record: u64,
    ) -> Result<Self, WindowConfigError> {
        positive("size", size)?;
        positive("slide", slide)?;
        if slide > size {
            return Err(WindowConfigError::SlideLargerThanSize { size, slide });
        }
        offset_below(offset, "slide", slide)?;
        let windows = sliding_windows_per_record(size, slide);
        if windows > max_windows_per_record {
            return Err(WindowConfigError::TooManyWindows {
                size,
                slide,
                windows,
                limit: max_windows_per_record,
            });
        }
        Ok(WindowAssigner {
            kind: WindowKind::Sliding {
                size,
                slide,
                offset,
            },
            event_time,
        })
    }

    fn session(gap: Millis, event_time: bool) -> Result<Self, WindowConfigError> {
        positive("gap", gap)?;
        Ok(WindowAssigner {
            kind: WindowKind::Session { gap },
            event_time,
        })
    }

    /// The windows' shape.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }

    /// The most windows [`WindowAssigner::assign_windows`] gives one record:
    /// `ceil(size / slide)` for sliding windows, 1 otherwise (before session merging).
    pub fn windows_per_record(&self) -> u64 {
        match self.kind {
            WindowKind::Sliding { size, slide, .. } => sliding_windows_per_record(size, slide),
            WindowKind::Tumbling { .. } | WindowKind::Session { .. } => 1,
        }
    }

    /// Whether windows follow event time (record timestamps and watermarks) rather than
    /// processing time.
    pub fn is_event_time(&self) -> bool {
        self.event_time
    }

    /// Whether windows of a key merge (session windows), as Flink's
    /// `MergingWindowAssigner`.
    pub fn is_merging(&self) -> bool {
        matches!(self.kind, WindowKind::Session { .. })
    }

    /// Appends the windows of a record to `out` (which the caller clears and reuses: no
    /// allocation per record once it has grown). `timestamp` is the record's event time
    /// (ms), `now_ms` the processing time; processing-time assigners use `now_ms`.
    ///
    /// Tumbling: one window. Sliding: from the last window starting at or before `t`
    /// down to the first containing `t` (`start > t - size`), as Flink's
    /// `SlidingEventTimeWindows`: `ceil(size / slide)` windows when `slide` divides
    /// `size`. Session: `[t, t + gap)`, before merging.
    pub fn assign_windows(&self, timestamp: Millis, now_ms: Millis, out: &mut Vec<TimeWindow>) {
        let t = if self.event_time { timestamp } else { now_ms };
        match self.kind {
            WindowKind::Tumbling { size, offset } => {
                let start = window_start_with_offset(t, offset, size);
                out.push(TimeWindow::new(start, start.wrapping_add(size)));
            }
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } => {
                let last_start = window_start_with_offset(t, offset, slide);
                let first_excluded = t.saturating_sub(size);
                let mut start = last_start;
                while start > first_excluded {
                    out.push(TimeWindow::new(start, start.wrapping_add(size)));
                    match start.checked_sub(slide) {
                        Some(s) => start = s,
                        None => break,
                    }
                }
            }
            WindowKind::Session { gap } => {
                out.push(TimeWindow::new(t, t.wrapping_add(gap)));
            }
        }
    }
}

/// Tumbling windows by event time, as Flink's `TumblingEventTimeWindows`.
#[derive(Debug, Clone, Copy)]
pub struct TumblingEventTimeWindows;

impl TumblingEventTimeWindows {
    /// Windows of `size_ms`, aligned to the epoch.
    ///
    /// # Errors
    /// [`WindowConfigError::NotPositive`] when `size_ms <= 0`.
    pub fn of(size_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::tumbling(size_ms, 0, true)
    }

    /// Windows of `size_ms` starting at `offset_ms` past the epoch grid (for example
    /// `-8h` for days in UTC+8).
    ///
    /// # Errors
    /// [`WindowConfigError`] when `size_ms <= 0` or `|offset_ms| >= size_ms`.
    pub fn with_offset(
        size_ms: Millis,
        offset_ms: Millis,
    ) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::tumbling(size_ms, offset_ms, true)
    }
}

/// Tumbling windows by processing time, as Flink's `TumblingProcessingTimeWindows`.
#[derive(Debug, Clone, Copy)]
pub struct TumblingProcessingTimeWindows;

impl TumblingProcessingTimeWindows {
    /// Windows of `size_ms` of processing time, aligned to the epoch.
    ///
    /// # Errors
    /// [`WindowConfigError::NotPositive`] when `size_ms <= 0`.
    pub fn of(size_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::tumbling(size_ms, 0, false)
    }

    /// Windows of `size_ms` shifted by `offset_ms`.
    ///
    /// # Errors
    /// [`WindowConfigError`] when `size_ms <= 0` or `|offset_ms| >= size_ms`.
    pub fn with_offset(
        size_ms: Millis,
        offset_ms: Millis,
    ) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::tumbling(size_ms, offset_ms, false)
    }
}

/// Sliding (hopping) windows by event time, as Flink's `SlidingEventTimeWindows`.
#[derive(Debug, Clone, Copy)]
pub struct SlidingEventTimeWindows;

impl SlidingEventTimeWindows {
    /// Windows of `size_ms` starting every `slide_ms`.
    ///
    /// # Errors
    /// [`WindowConfigError`] unless `size_ms > 0`, `slide_ms > 0`,
    /// `slide_ms <= size_ms` and `ceil(size_ms / slide_ms)` is at most
    /// [`DEFAULT_MAX_WINDOWS_PER_RECORD`] ([`WindowConfigError::TooManyWindows`]).
    pub fn of(size_ms: Millis, slide_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        Self::with_offset(size_ms, slide_ms, 0)
    }

    /// As [`SlidingEventTimeWindows::of`], the grid shifted by `offset_ms`.
    ///
    /// # Errors
    /// As [`SlidingEventTimeWindows::of`], and when `|offset_ms| >= slide_ms`.
    pub fn with_offset(
        size_ms: Millis,
        slide_ms: Millis,
        offset_ms: Millis,
    ) -> Result<WindowAssigner, WindowConfigError> {
        Self::with_max_windows_per_record(
            size_ms,
            slide_ms,
            offset_ms,
            DEFAULT_MAX_WINDOWS_PER_RECORD,
        )
    }

    /// As [`SlidingEventTimeWindows::with_offset`], accepting up to `limit` windows
    /// per record instead of [`DEFAULT_MAX_WINDOWS_PER_RECORD`].
    ///
    /// # Errors
    /// As [`SlidingEventTimeWindows::with_offset`], with `limit`.
    pub fn with_max_windows_per_record(
        size_ms: Millis,
        slide_ms: Millis,
        offset_ms: Millis,
        limit: u64,
    ) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::sliding(size_ms, slide_ms, offset_ms, true, limit)
    }
}

/// Sliding windows by processing time, as Flink's `SlidingProcessingTimeWindows`.
#[derive(Debug, Clone, Copy)]
pub struct SlidingProcessingTimeWindows;

impl SlidingProcessingTimeWindows {
    /// Windows of `size_ms` of processing time starting every `slide_ms`.
    ///
    /// # Errors
    /// As [`SlidingEventTimeWindows::of`].
    pub fn of(size_ms: Millis, slide_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        Self::with_offset(size_ms, slide_ms, 0)
    }

    /// As [`SlidingProcessingTimeWindows::of`], the grid shifted by `offset_ms`.
    ///
    /// # Errors
    /// As [`SlidingEventTimeWindows::with_offset`].
    pub fn with_offset(
        size_ms: Millis,
        slide_ms: Millis,
        offset_ms: Millis,
    ) -> Result<WindowAssigner, WindowConfigError> {
        Self::with_max_windows_per_record(
            size_ms,
            slide_ms,
            offset_ms,
            DEFAULT_MAX_WINDOWS_PER_RECORD,
        )
    }

    /// As [`SlidingProcessingTimeWindows::with_offset`], accepting up to `limit`
    /// windows per record instead of [`DEFAULT_MAX_WINDOWS_PER_RECORD`].
    ///
    /// # Errors
    /// As [`SlidingEventTimeWindows::with_max_windows_per_record`].
    pub fn with_max_windows_per_record(
        size_ms: Millis,
        slide_ms: Millis,
        offset_ms: Millis,
        limit: u64,
    ) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::sliding(size_ms, slide_ms, offset_ms, false, limit)
    }
}

/// Session windows by event time, as Flink's `EventTimeSessionWindows`: a key's records
/// less than `gap` apart (windows touching) form one session.
#[derive(Debug, Clone, Copy)]
pub struct EventTimeSessionWindows;

impl EventTimeSessionWindows {
    /// Sessions closed by `gap_ms` of inactivity.
    ///
    /// # Errors
    /// [`WindowConfigError::NotPositive`] when `gap_ms <= 0`.
    pub fn with_gap(gap_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::session(gap_ms, true)
    }
}

/// Session windows by processing time, as Flink's `ProcessingTimeSessionWindows`.
#[derive(Debug, Clone, Copy)]
pub struct ProcessingTimeSessionWindows;

impl ProcessingTimeSessionWindows {
    /// Sessions closed by `gap_ms` of processing time without records.
    ///
    /// # Errors
    /// [`WindowConfigError::NotPositive`] when `gap_ms <= 0`.
    pub fn with_gap(gap_ms: Millis) -> Result<WindowAssigner, WindowConfigError> {
        WindowAssigner::session(gap_ms, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn windows(a: &WindowAssigner, t: Millis) -> Vec<TimeWindow> {
        let mut v = Vec::new();
        a.assign_windows(t, 0, &mut v);
        v
    }

    fn w(s: Millis, e: Millis) -> TimeWindow {
        TimeWindow::new(s, e)
    }

    #[test]
    fn tumbling_with_negative_times_and_offsets() {
        let a = TumblingEventTimeWindows::of(1000).unwrap();
        assert_eq!(windows(&a, 0), vec![w(0, 1000)]);
        assert_eq!(windows(&a, 999), vec![w(0, 1000)]);
        assert_eq!(windows(&a, 1000), vec![w(1000, 2000)]);
        assert_eq!(windows(&a, -1), vec![w(-1000, 0)]);
        assert_eq!(windows(&a, -1000), vec![w(-1000, 0)]);
        assert_eq!(windows(&a, -1001), vec![w(-2000, -1000)]);
        let o = TumblingEventTimeWindows::with_offset(1000, 200).unwrap();
        assert_eq!(windows(&o, 100), vec![w(-800, 200)]);
        assert_eq!(windows(&o, 200), vec![w(200, 1200)]);
        let n = TumblingEventTimeWindows::with_offset(1000, -200).unwrap();
        assert_eq!(windows(&n, 900), vec![w(800, 1800)]);
        assert_eq!(windows(&n, -250), vec![w(-1200, -200)]);
        assert!(a.is_event_time() && !a.is_merging());
    }

    #[test]
    fn sliding_windows_newest_first() {
        let a = SlidingEventTimeWindows::of(1000, 250).unwrap();
        assert_eq!(
            windows(&a, 600),
            vec![w(500, 1500), w(250, 1250), w(0, 1000), w(-250, 750)]
        );
        assert_eq!(
            windows(&a, -1),
            vec![w(-250, 750), w(-500, 500), w(-750, 250), w(-1000, 0)]
        );
        // A slide that does not divide the size: 2 or 3 windows.
        let b = SlidingEventTimeWindows::of(1000, 400).unwrap();
        assert_eq!(windows(&b, 0), vec![w(0, 1000), w(-400, 600), w(-800, 200)]);
        assert_eq!(windows(&b, 300), vec![w(0, 1000), w(-400, 600)]);
        let o = SlidingEventTimeWindows::with_offset(100, 50, 10).unwrap();
        assert_eq!(windows(&o, 60), vec![w(60, 160), w(10, 110)]);
    }

    #[test]
    fn sessions_and_processing_time() {
        let s = EventTimeSessionWindows::with_gap(30).unwrap();
        assert_eq!(windows(&s, -10), vec![w(-10, 20)]);
        assert!(s.is_merging());
        let p = TumblingProcessingTimeWindows::of(10).unwrap();
        let mut v = Vec::new();
        p.assign_windows(1_000_000, 25, &mut v);
        assert_eq!(v, vec![w(20, 30)]);
        assert!(!p.is_event_time());
        let ps = ProcessingTimeSessionWindows::with_gap(5).unwrap();
        v.clear();
        ps.assign_windows(0, 7, &mut v);
        assert_eq!(v, vec![w(7, 12)]);
        let sp = SlidingProcessingTimeWindows::of(10, 5).unwrap();
        v.clear();
        sp.assign_windows(0, 7, &mut v);
        assert_eq!(v, vec![w(5, 15), w(0, 10)]);
    }

    #[test]
    fn invalid_parameters_name_the_parameter() {
        use WindowConfigError::*;
        assert_eq!(
            TumblingEventTimeWindows::of(0),
            Err(NotPositive {
                param: "size",
                value: 0
            })
        );
        assert_eq!(
            TumblingEventTimeWindows::with_offset(10, -10),
            Err(OffsetOutOfRange {
                offset: -10,
                bound_name: "size",
                bound: 10
            })
        );
        assert_eq!(
            SlidingEventTimeWindows::of(10, 0),
            Err(NotPositive {
                param: "slide",
                value: 0
            })
        );
        assert_eq!(
            SlidingEventTimeWindows::of(10, 11),
            Err(SlideLargerThanSize {
                size: 10,
                slide: 11
            })
        );
        assert_eq!(
            SlidingEventTimeWindows::with_offset(10, 5, 5),
            Err(OffsetOutOfRange {
                offset: 5,
                bound_name: "slide",
                bound: 5
            })
        );
        assert_eq!(
            EventTimeSessionWindows::with_gap(-1),
            Err(NotPositive {
                param: "gap",
                value: -1
            })
        );
        assert_eq!(
            TumblingEventTimeWindows::with_offset(10, i64::MIN).map(|_| ()),
            Err(OffsetOutOfRange {
                offset: i64::MIN,
                bound_name: "size",
                bound: 10
            })
        );
        let msg = SlidingEventTimeWindows::of(10, 11).unwrap_err().to_string();
        assert!(msg.contains("slide") && msg.contains("size"), "{msg}");
    }

    #[test]
    fn windows_per_record_are_limited() {
        use WindowConfigError::TooManyWindows;
        // The limit itself is allowed; one window more is not.
        let at = SlidingEventTimeWindows::of(DEFAULT_MAX_WINDOWS_PER_RECORD as i64, 1).unwrap();
        assert_eq!(at.windows_per_record(), DEFAULT_MAX_WINDOWS_PER_RECORD);
        assert_eq!(
            SlidingEventTimeWindows::of(DEFAULT_MAX_WINDOWS_PER_RECORD as i64 + 1, 1),
            Err(TooManyWindows {
                size: DEFAULT_MAX_WINDOWS_PER_RECORD as i64 + 1,
                slide: 1,
                windows: DEFAULT_MAX_WINDOWS_PER_RECORD + 1,
                limit: DEFAULT_MAX_WINDOWS_PER_RECORD
            })
        );
        // The typo: 1 h windows every 1 ms.
        let typo = SlidingProcessingTimeWindows::of(3_600_000, 1).unwrap_err();
        assert!(typo.to_string().contains("3600000 windows"), "{typo}");
        // Raised by hand.
        let raised =
            SlidingEventTimeWindows::with_max_windows_per_record(3_600_000, 1, 0, 5_000_000)
                .unwrap();
        assert_eq!(raised.windows_per_record(), 3_600_000);
        // ceil: a slide that does not divide the size.
        assert_eq!(
            SlidingEventTimeWindows::of(1000, 400)
                .unwrap()
                .windows_per_record(),
            3
        );
        assert_eq!(
            TumblingEventTimeWindows::of(10)
                .unwrap()
                .windows_per_record(),
            1
        );
    }

    proptest! {
        #[test]
        fn one_tumbling_window_contains_each_time(t in -1_000_000_000i64..1_000_000_000, size in 1i64..100_000, off_seed in any::<i64>()) {
            let offset = off_seed % size;
            let a = TumblingEventTimeWindows::with_offset(size, offset).unwrap();
            let v = windows(&a, t);
            prop_assert_eq!(v.len(), 1);
            prop_assert!(v[0].start <= t && t < v[0].end);
            prop_assert_eq!(v[0].end - v[0].start, size);
            prop_assert_eq!((v[0].start - offset).rem_euclid(size), 0);
        }

        #[test]
        fn sliding_windows_are_all_windows_containing_the_time(t in -1_000_000_000i64..1_000_000_000, slide in 1i64..1000, n in 1i64..20, off_seed in any::<i64>()) {
            let size = slide * n;
            let offset = off_seed % slide;
            let a = SlidingEventTimeWindows::with_offset(size, slide, offset).unwrap();
            let v = windows(&a, t);
            prop_assert_eq!(v.len() as i64, (size + slide - 1) / slide);
            for win in &v {
                prop_assert!(win.start <= t && t < win.end);
                prop_assert_eq!((win.start - offset).rem_euclid(slide), 0);
            }
            let mut starts: Vec<_> = v.iter().map(|w| w.start).collect();
            starts.dedup();
            prop_assert_eq!(starts.len(), v.len());
        }
    }
}
