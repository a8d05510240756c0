//! Event time and windows in job specs: a source's `event_time` and `watermark`, a
//! step's `window`, `trigger`, `allowed_lateness`, `aggregate` and `late_output`.
//!
//! ```yaml
//! sources:
//!   - name: events
//!     connector: file
//!     path: events.jsonl
//!     event_time: { field: ts, format: epoch_ms }   # or just `event_time: ts`
//!     watermark: { out_of_orderness: 100ms, idle_timeout: 1m, interval: 200ms }
//! steps:
//!   - key_by: [key]
//!   - name: per-second
//!     window: { kind: tumbling, size: 1s }           # hopping: size + slide; session: gap
//!     allowed_lateness: 0
//!     aggregate: { count: count(), sum: sum(value) }
//!     late_output: late                              # a sink receiving late rows
//! ```

use brook_core::config::parse_duration_ms;
use brook_core::time::Millis;
use brook_core::watermark::DEFAULT_EMIT_INTERVAL_MS;
use brook_operators::row_aggregate::AggSpec;
use brook_operators::row_time::{EventTimeField, TimestampFormat};
use brook_operators::window::assigner::{
    EventTimeSessionWindows, ProcessingTimeSessionWindows, SlidingEventTimeWindows,
    SlidingProcessingTimeWindows, TumblingEventTimeWindows, TumblingProcessingTimeWindows,
    WindowAssigner, WindowConfigError, DEFAULT_MAX_WINDOWS_PER_RECORD,
};
use brook_operators::window::trigger::Trigger;
use indexmap::IndexMap;
use serde::Deserialize;

use super::SpecError;

/// A duration: `250ms`, `5s`, `10m`, `1h`, `7d`, or a plain number of milliseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum DurationSpec {
    /// Milliseconds.
    Millis(i64),
    /// Text with a unit.
    Text(String),
}

impl DurationSpec {
    /// A signed duration in ms (`-8h`, `-1000`), for window offsets: Flink allows
    /// negative offsets, such as `-8h` for days in UTC+8.
    pub(crate) fn signed_ms(&self, field: &str) -> Result<Millis, SpecError> {
        match self {
            DurationSpec::Millis(n) => Ok(*n),
            DurationSpec::Text(t) => match t.trim().strip_prefix('-') {
                Some(rest) => DurationSpec::Text(rest.to_string()).ms(field).map(|ms| -ms),
                None => self.ms(field),
            },
        }
    }

    /// The duration in ms; `field` names it in errors. Negative durations are errors.
    pub(crate) fn ms(&self, field: &str) -> Result<Millis, SpecError> {
        let ms = match self {
            DurationSpec::Millis(n) => *n,
            DurationSpec::Text(t) => {
                parse_duration_ms(t).map_err(|e| SpecError::new(field, format!("{t:?}: {e}")))?
            }
        };
        if ms < 0 {
            return Err(SpecError::new(field, "must not be negative"));
        }
        Ok(ms)
    }
}

/// Where a source's event time comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EventTimeSpec {
    /// A field holding epoch milliseconds.
    Field(String),
    /// A field and its format.
    Full(EventTimeFormatSpec),
}

/// A field and its format.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTimeFormatSpec {
    /// The field.
    pub field: String,
    /// `epoch_ms` (default), `epoch_s`, `rfc3339`, or a chrono pattern such as
    /// `%Y-%m-%d %H:%M:%S` (then `timezone` says where that local time is).
    #[serde(default)]
    pub format: Option<String>,
    /// An IANA time zone (`America/New_York`) for a pattern without an offset.
    #[serde(default)]
    pub timezone: Option<String>,
}

impl EventTimeSpec {
    pub(crate) fn resolve(&self, field: &str) -> Result<EventTimeField, SpecError> {
        let (name, format, zone) = match self {
            EventTimeSpec::Field(f) => (f.clone(), None, None),
            EventTimeSpec::Full(f) => (f.field.clone(), f.format.clone(), f.timezone.clone()),
        };
        if name.is_empty() {
            return Err(SpecError::new(
                format!("{field}.field"),
                "must not be empty",
            ));
        }
        let format =
            TimestampFormat::parse(format.as_deref().unwrap_or("epoch_ms"), zone.as_deref())
                .map_err(|e| SpecError::new(format!("{field}.format"), e))?;
        Ok(EventTimeField {
            field: name,
            format,
        })
    }
}

/// How a source emits watermarks (semantics.md §2).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkSpec {
    /// Bounded out-of-orderness B: `W = max timestamp − B − 1` (default 0).
    #[serde(default)]
    pub out_of_orderness: Option<DurationSpec>,
    /// A partition silent this long is left out of the minimum (default: never).
    #[serde(default)]
    pub idle_timeout: Option<DurationSpec>,
    /// Emission interval (default 200ms); `0` = after every record.
    #[serde(default)]
    pub interval: Option<DurationSpec>,
}

/// A watermark setting in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watermarks {
    pub(crate) out_of_orderness_ms: Millis,
    pub(crate) idle_timeout_ms: Option<Millis>,
    pub(crate) interval_ms: Millis,
}

impl WatermarkSpec {
    pub(crate) fn resolve(&self, field: &str) -> Result<Watermarks, SpecError> {
        let opt = |d: &Option<DurationSpec>, name: &str| {
            d.as_ref()
                .map(|d| d.ms(&format!("{field}.{name}")))
                .transpose()
        };
        Ok(Watermarks {
            out_of_orderness_ms: opt(&self.out_of_orderness, "out_of_orderness")?.unwrap_or(0),
            idle_timeout_ms: opt(&self.idle_timeout, "idle_timeout")?,
            interval_ms: opt(&self.interval, "interval")?.unwrap_or(DEFAULT_EMIT_INTERVAL_MS),
        })
    }
}

/// Event time or processing time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeKind {
    /// The records' event time (default).
    #[default]
    Event,
    /// The wall clock when the record is processed.
    Processing,
}

/// A window.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum WindowSpec {
    /// Fixed, non-overlapping windows of `size`.
    Tumbling {
        /// Window length.
        size: DurationSpec,
        /// Shift of the window starts from the epoch (default 0).
        #[serde(default)]
        offset: Option<DurationSpec>,
        /// `event` (default) or `processing`.
        #[serde(default)]
        time: TimeKind,
    },
    /// Windows of `size` starting every `slide` (Flink's sliding windows).
    #[serde(alias = "sliding")]
    Hopping {
        /// Window length.
        size: DurationSpec,
        /// Distance between window starts.
        slide: DurationSpec,
        /// Shift of the window starts from the epoch (default 0).
        #[serde(default)]
        offset: Option<DurationSpec>,
        /// `event` (default) or `processing`.
        #[serde(default)]
        time: TimeKind,
        /// The most windows one record may fall into, `ceil(size / slide)` (default
        /// 100,000; above 1,000 the job warns): a small slide by mistake (`size: 1h,
        /// slide: 1ms`) is refused instead of running for hours.
        #[serde(default)]
        max_windows_per_record: Option<u64>,
    },
    /// Sessions of a key that end after `gap` without records.
    Session {
        /// Inactivity gap.
        gap: DurationSpec,
        /// `event` (default) or `processing`.
        #[serde(default)]
        time: TimeKind,
    },
}

impl WindowSpec {
    pub(crate) fn resolve(&self, field: &str) -> Result<WindowAssigner, SpecError> {
        let d = |v: &DurationSpec, name: &str| v.ms(&format!("{field}.{name}"));
        let off = |v: &Option<DurationSpec>| {
            v.as_ref()
                .map(|o| o.signed_ms(&format!("{field}.offset")))
                .transpose()
                .map(|o| o.unwrap_or(0))
        };
        let r = match self {
            WindowSpec::Tumbling { size, offset, time } => {
                let (size, offset) = (d(size, "size")?, off(offset)?);
                match time {
                    TimeKind::Event => TumblingEventTimeWindows::with_offset(size, offset),
                    TimeKind::Processing => {
                        TumblingProcessingTimeWindows::with_offset(size, offset)
                    }
                }
            }
            WindowSpec::Hopping {
                size,
                slide,
                offset,
                time,
                max_windows_per_record,
            } => {
                let (size, slide, offset) = (d(size, "size")?, d(slide, "slide")?, off(offset)?);
                let limit = max_windows_per_record.unwrap_or(DEFAULT_MAX_WINDOWS_PER_RECORD);
                if limit == 0 {
                    return Err(SpecError::new(
                        format!("{field}.max_windows_per_record"),
                        "must be at least 1",
                    ));
                }
                let r = match time {
                    TimeKind::Event => SlidingEventTimeWindows::with_max_windows_per_record(
                        size, slide, offset, limit,
                    ),
                    TimeKind::Processing => {
                        SlidingProcessingTimeWindows::with_max_windows_per_record(
                            size, slide, offset, limit,
                        )
                    }
                };
                if let Err(WindowConfigError::TooManyWindows { windows, .. }) = r {
                    return Err(SpecError::new(
                        format!("{field}.slide"),
                        format!(
                            "{slide} ms with size {size} ms puts each record into {windows} \
                             windows, more than max_windows_per_record ({limit}): use a larger \
                             slide, or raise {field}.max_windows_per_record"
                        ),
                    ));
                }
                r
            }
            WindowSpec::Session { gap, time } => {
                let gap = d(gap, "gap")?;
                match time {
                    TimeKind::Event => EventTimeSessionWindows::with_gap(gap),
                    TimeKind::Processing => ProcessingTimeSessionWindows::with_gap(gap),
                }
            }
        };
        r.map_err(|e| SpecError::new(field, e.to_string()))
    }
}

/// A trigger other than the window's default: exactly one of `count` and `continuous`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// Fire every `count` records.
    #[serde(default)]
    pub count: Option<u64>,
    /// Fire early every `continuous` of event time, and at the window's end.
    #[serde(default)]
    pub continuous: Option<DurationSpec>,
}

impl TriggerSpec {
    pub(crate) fn resolve(&self, field: &str) -> Result<Trigger, SpecError> {
        match (self.count, &self.continuous) {
            (Some(0), None) => Err(SpecError::new(
                format!("{field}.count"),
                "must be at least 1",
            )),
            (Some(n), None) => Ok(Trigger::Count(n)),
            (None, Some(d)) => {
                let ms = d.ms(&format!("{field}.continuous"))?;
                if ms == 0 {
                    return Err(SpecError::new(
                        format!("{field}.continuous"),
                        "must be positive",
                    ));
                }
                Ok(Trigger::ContinuousEventTime(ms))
            }
            _ => Err(SpecError::new(
                field,
                "needs exactly one of count, continuous",
            )),
        }
    }
}

/// A validated window step.
#[derive(Debug, Clone)]
pub(crate) struct WindowStep {
    pub(crate) assigner: WindowAssigner,
    pub(crate) trigger: Option<Trigger>,
    pub(crate) allowed_lateness_ms: Millis,
    pub(crate) aggregates: Vec<(String, AggSpec)>,
    pub(crate) late_output: Option<String>,
    /// The step planned on typed state, when its input schema is known at plan time and
    /// it can be (issue 18 step 4); on JSON rows otherwise.
    pub(crate) columns: Option<std::sync::Arc<brook_operators::batch_window::WindowColumns>>,
}

/// Reads a map in its order, refusing a key given twice (YAML would keep the last one
/// silently, and an aggregate would vanish).
pub(crate) fn unique_keys<'de, D>(d: D) -> Result<Option<IndexMap<String, String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = IndexMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of output names to expressions")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = IndexMap::new();
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format!("{k:?} is given twice")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Unique).map(Some)
}

/// Parses `aggregate:` (output name -> function of a field), keeping the order.
pub(crate) fn aggregates(
    field: &str,
    m: &IndexMap<String, String>,
) -> Result<Vec<(String, AggSpec)>, SpecError> {
    if m.is_empty() {
        return Err(SpecError::new(field, "needs at least one aggregate"));
    }
    m.iter()
        .map(|(name, text)| {
            if matches!(name.as_str(), "window_start" | "window_end") {
                return Err(SpecError::new(
                    format!("{field}.{name}"),
                    "is the name of a window field",
                ));
            }
            AggSpec::parse(text)
                .map(|a| (name.clone(), a))
                .map_err(|e| SpecError::new(format!("{field}.{name}"), e))
        })
        .collect()
}
