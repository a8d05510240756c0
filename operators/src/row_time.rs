//! Event time for dynamic rows: reading a record's timestamp (ms since the epoch, UTC)
//! from one field of a [`Row`].
//!
//! [`TimestampFormat`] says how the field is written (epoch milliseconds, epoch seconds,
//! RFC 3339, or a chrono `strftime` pattern with an IANA time zone);
//! [`EventTimeField`] pairs it with the field name and extracts [`Millis`].
//!
//! Sub-millisecond parts are truncated towards the past (floor), so a timestamp maps to
//! the millisecond that contains it, also before 1970.

use std::fmt;

use arrow_array::{Array, Float64Array, Int64Array, LargeStringArray, StringArray};
use brook_core::time::Millis;
use brook_sql::values::value_at;
use chrono::format::{self, Parsed, StrftimeItems};
use chrono::offset::LocalResult;
use chrono::{DateTime, FixedOffset, NaiveDate, TimeZone};
use chrono_tz::Tz;
use serde_json::Value;

use crate::row::Row;

/// How a timestamp field is written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TimestampFormat {
    /// Milliseconds since the epoch: a JSON integer, or a string holding one (`"epoch_ms"`,
    /// the default). A fractional number is floored to the millisecond.
    #[default]
    EpochMillis,
    /// Seconds since the epoch, integer or fractional (`1700000000.25`), as a JSON number
    /// or a string (`"epoch_s"`). Fractions are floored to the millisecond; a fractional
    /// JSON number (an `f64`) is first rounded to the microsecond, so `0.123` is 123 ms.
    EpochSeconds,
    /// RFC 3339 with any offset or `Z` (`2024-03-10T07:30:00.5-05:00`) (`"rfc3339"`).
    Rfc3339,
    /// A chrono `strftime` pattern such as `%Y-%m-%d %H:%M:%S`.
    ///
    /// - Without an offset in the pattern, the value is a local time in `zone`.
    ///   A local time that occurs twice (daylight-saving fall-back) is the *earlier*
    ///   instant; one that does not exist (the spring-forward gap) is an error.
    /// - With an offset in the pattern (`%z`, `%:z`) or a timestamp (`%s`), the value's
    ///   own offset wins and `zone` is not used.
    /// - Without time fields (a date-only pattern such as `%Y-%m-%d`), the time is
    ///   midnight; without minutes (`%Y-%m-%d %H`), minute 0.
    Pattern {
        /// The chrono `strftime` pattern.
        format: String,
        /// The zone of local times (UTC when none is configured).
        zone: Tz,
    },
}

impl TimestampFormat {
    /// Parses a configured format: `"epoch_ms"`, `"epoch_s"`, `"rfc3339"`, or else a
    /// chrono `strftime` pattern; `zone` is an IANA zone name (`America/New_York`) and is
    /// only allowed with a pattern (default: UTC).
    ///
    /// # Errors
    /// A message naming the problem: a pattern chrono cannot parse with, a pattern
    /// without a complete date, an unknown zone, or a zone given with an epoch or RFC 3339
    /// format.
    pub fn parse(name: &str, zone: Option<&str>) -> Result<TimestampFormat, String> {
        let named = match name {
            "epoch_ms" => Some(TimestampFormat::EpochMillis),
            "epoch_s" => Some(TimestampFormat::EpochSeconds),
            "rfc3339" => Some(TimestampFormat::Rfc3339),
            _ => None,
        };
        if let Some(f) = named {
            return match zone {
                None => Ok(f),
                Some(z) => Err(format!(
                    "time zone \"{z}\" is only allowed with a strftime pattern, not with {name}"
                )),
            };
        }
        let zone = match zone {
            None => Tz::UTC,
            Some(z) => z.parse::<Tz>().map_err(|_| {
                format!(
                    "unknown time zone \"{z}\" (expected an IANA name such as America/New_York)"
                )
            })?,
        };
        validate_pattern(name)?;
        Ok(TimestampFormat::Pattern {
            format: name.to_string(),
            zone,
        })
    }

    /// Converts one string value to ms since the epoch.
    fn parse_str(&self, s: &str) -> Result<Millis, Option<String>> {
        match self {
            TimestampFormat::EpochMillis => {
                if let Ok(i) = s.parse::<i64>() {
                    return Ok(i);
                }
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() => float_to_millis(f, 1.0),
                    _ => Err(None),
                }
            }
            TimestampFormat::EpochSeconds => decimal_seconds_to_millis(s),
            TimestampFormat::Rfc3339 => DateTime::parse_from_rfc3339(s)
                .map(|t| t.timestamp_millis())
                .map_err(|e| Some(e.to_string())),
            TimestampFormat::Pattern { format, zone } => parse_pattern(s, format, *zone),
        }
    }
}

impl fmt::Display for TimestampFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimestampFormat::EpochMillis => f.write_str("epoch_ms"),
            TimestampFormat::EpochSeconds => f.write_str("epoch_s"),
            TimestampFormat::Rfc3339 => f.write_str("rfc3339"),
            TimestampFormat::Pattern { format, zone } => {
                write!(f, "pattern \"{format}\" ({})", zone.name())
            }
        }
    }
}

/// The event time of a row: a field and how it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTimeField {
    /// The top-level field holding the timestamp.
    pub field: String,
    /// How the field is written.
    pub format: TimestampFormat,
}

impl EventTimeField {
    /// The timestamp field `field` written in `format`.
    pub fn new(field: impl Into<String>, format: TimestampFormat) -> Self {
        EventTimeField {
            field: field.into(),
            format,
        }
    }

    /// The row's event time in ms since the epoch (UTC).
    ///
    /// Epoch formats accept JSON numbers and numeric strings; RFC 3339 and patterns accept
    /// strings. Allocates nothing on success for `epoch_ms` and `epoch_s`.
    ///
    /// # Errors
    /// A message naming the field and the value, e.g.
    /// `field "ts": "abc" is not a timestamp in epoch_ms`, for a missing field, `null`,
    /// a value of the wrong type, an unparsable or out-of-range value, or a local time
    /// that does not exist in the pattern's zone.
    pub fn extract(&self, row: &Row) -> Result<Millis, String> {
        let Some(obj) = row.as_object() else {
            return Err(format!(
                "field \"{}\": the row is not a JSON object: {}",
                self.field,
                shorten(row)
            ));
        };
        let Some(v) = obj.get(&self.field) else {
            return Err(format!("field \"{}\" is missing", self.field));
        };
        let value = match v {
            Value::String(s) => TimeValue::Str(s),
            Value::Number(n) => match n.as_i64() {
                Some(i) => TimeValue::Int(i),
                None => TimeValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            _ => TimeValue::Other,
        };
        self.format
            .millis_of(value)
            .map_err(|reason| self.not_a_timestamp(v, reason))
    }

    /// Row `row`'s event time from `column`, this field's column of a batch: the same
    /// time [`EventTimeField::extract`] reads from the row brook-sql's `value_at`
    /// makes of it (a column of another type than string, int64 or float64 is not a
    /// timestamp as written). Allocates nothing on success for `epoch_ms` and
    /// `epoch_s`.
    ///
    /// # Errors
    /// As [`EventTimeField::extract`]'s; a null (or a field missing from the record) is `field "ts" is missing or null`.
    pub fn extract_at(&self, column: &dyn Array, row: usize) -> Result<Millis, String> {
        if column.is_null(row) {
            return Err(format!("field \"{}\" is missing or null", self.field));
        }
        let any = column.as_any();
        let value = if let Some(a) = any.downcast_ref::<Int64Array>() {
            TimeValue::Int(a.value(row))
        } else if let Some(a) = any.downcast_ref::<Float64Array>() {
            TimeValue::Float(a.value(row))
        } else if let Some(a) = any.downcast_ref::<StringArray>() {
            TimeValue::Str(a.value(row))
        } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
            TimeValue::Str(a.value(row))
        } else {
            TimeValue::Other
        };
        self.format
            .millis_of(value)
            .map_err(|reason| self.not_a_timestamp(&value_at(column, row), reason))
    }

    fn not_a_timestamp(&self, v: &Value, reason: Option<String>) -> String {
        let mut msg = format!(
            "field \"{}\": {} is not a timestamp in {}",
            self.field,
            shorten(v),
            self.format
        );
        if let Some(r) = reason {
            msg.push_str(": ");
            msg.push_str(&r);
        }
        msg
    }
}

/// A timestamp field's value, as written.
#[derive(Debug, Clone, Copy)]
enum TimeValue<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    /// Not a string or a number.
    Other,
}

impl TimestampFormat {
    /// The value in ms since the epoch; `Err(Some(why))` or `Err(None)` (not in this
    /// format).
    fn millis_of(&self, v: TimeValue<'_>) -> Result<Millis, Option<String>> {
        match (v, self) {
            (TimeValue::Str(s), f) => f.parse_str(s),
            (TimeValue::Int(i), TimestampFormat::EpochMillis) => Ok(i),
            (TimeValue::Float(f), TimestampFormat::EpochMillis) => float_to_millis(f, 1.0),
            (TimeValue::Int(i), TimestampFormat::EpochSeconds) => {
                i.checked_mul(1000).ok_or(Some(OUT_OF_RANGE.to_string()))
            }
            (TimeValue::Float(f), TimestampFormat::EpochSeconds) => float_to_millis(f, 1000.0),
            _ => Err(None),
        }
    }
}

const OUT_OF_RANGE: &str = "out of range";

/// The value as JSON text, cut to a readable length for error messages.
fn shorten(v: &Value) -> String {
    const MAX: usize = 80;
    let s = v.to_string();
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// `value * scale` ms, rounded to the microsecond (removing binary noise of decimal
/// fractions such as `0.123`), then floored to the ms.
fn float_to_millis(value: f64, scale: f64) -> Result<Millis, Option<String>> {
    let micros = (value * scale * 1000.0).round();
    // 2^63: i64::MAX as f64 rounds up to it, so the range excludes it (and NaN).
    const LIMIT: f64 = 9.223_372_036_854_776e18;
    if !(-LIMIT..LIMIT).contains(&micros) {
        return Err(Some(OUT_OF_RANGE.to_string()));
    }
    Ok((micros as i64).div_euclid(1000))
}

/// Exact decimal seconds (`-12.3456`, `+7`, `1e3` via the float fallback) to ms, floored.
fn decimal_seconds_to_millis(s: &str) -> Result<Millis, Option<String>> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int_part, frac_part) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty())
        || !all_digits(int_part)
        || !all_digits(frac_part)
    {
        // Exponents and the like: through f64.
        return match s.parse::<f64>() {
            Ok(f) if f.is_finite() => float_to_millis(f, 1000.0),
            _ => Err(None),
        };
    }
    let secs: i64 = if int_part.is_empty() {
        0
    } else {
        int_part
            .parse()
            .map_err(|_| Some(OUT_OF_RANGE.to_string()))?
    };
    let mut millis: i64 = 0;
    let mut rest_nonzero = false;
    for (i, b) in frac_part.bytes().enumerate() {
        if i < 3 {
            millis = millis * 10 + i64::from(b - b'0');
        } else if b != b'0' {
            rest_nonzero = true;
        }
    }
    for _ in frac_part.len()..3 {
        millis *= 10;
    }
    let magnitude = secs
        .checked_mul(1000)
        .and_then(|m| m.checked_add(millis))
        .ok_or(Some(OUT_OF_RANGE.to_string()))?;
    if neg {
        // Floor: -1.0005 s is -1000.5 ms, which floors to -1001 ms.
        let m = -magnitude;
        Ok(if rest_nonzero { m - 1 } else { m })
    } else {
        Ok(magnitude)
    }
}

/// Whether `format` is a pattern chrono can parse with that yields a full date.
///
/// Checked by formatting a sample instant with the pattern and parsing it back: the
/// parse must succeed and give back the sample's date.
fn validate_pattern(format: &str) -> Result<(), String> {
    if format.is_empty() {
        return Err(
            "empty timestamp format (expected epoch_ms, epoch_s, rfc3339 or a strftime pattern)"
                .to_string(),
        );
    }
    if StrftimeItems::new(format).parse().is_err() {
        return Err(format!(
            "invalid timestamp pattern \"{format}\" (expected epoch_ms, epoch_s, rfc3339 or a chrono strftime pattern such as %Y-%m-%d %H:%M:%S)"
        ));
    }
    let offset = FixedOffset::east_opt(2 * 3600).ok_or("offset")?;
    let sample_date = NaiveDate::from_ymd_opt(2001, 2, 3).ok_or("date")?;
    let sample = sample_date
        .and_hms_milli_opt(4, 5, 6, 789)
        .ok_or("time")?
        .and_local_timezone(offset)
        .single()
        .ok_or("sample")?;
    if format.contains("%Z") {
        // chrono skips a zone name when parsing: it would be silently ignored.
        return Err(format!(
            "timestamp pattern \"{format}\": %Z (a zone name) cannot be parsed; use %z (an offset) or configure a zone"
        ));
    }
    let text = sample.format(format).to_string();
    let mut parsed = Parsed::new();
    let full_date = format::parse(&mut parsed, &text, StrftimeItems::new(format)).is_ok()
        && (parsed.timestamp().is_some() || parsed.to_naive_date() == Ok(sample_date));
    if full_date {
        Ok(())
    } else {
        Err(format!(
            "timestamp pattern \"{format}\" does not give a full date (it needs a year and a month and day, a day of the year, or %s)"
        ))
    }
}

/// Parses `s` with `format`, local times in `zone`.
fn parse_pattern(s: &str, format: &str, zone: Tz) -> Result<Millis, Option<String>> {
    let mut p = Parsed::new();
    format::parse(&mut p, s, StrftimeItems::new(format)).map_err(|e| Some(e.to_string()))?;
    if p.timestamp().is_none() {
        // Date-only patterns mean midnight; an hour without minutes means minute 0.
        let e = |e: format::ParseError| Some(e.to_string());
        if p.hour_div_12().is_none() && p.hour_mod_12().is_none() && p.minute().is_none() {
            p.set_hour(0).map_err(e)?;
        }
        if p.minute().is_none() {
            p.set_minute(0).map_err(e)?;
        }
    }
    if p.offset().is_some() || p.timestamp().is_some() {
        return p
            .to_datetime()
            .map(|t| t.timestamp_millis())
            .map_err(|e| Some(e.to_string()));
    }
    let local = p
        .to_naive_datetime_with_offset(0)
        .map_err(|e| Some(e.to_string()))?;
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => Ok(t.timestamp_millis()),
        // Daylight-saving fall-back: the local time occurs twice; take the earlier instant.
        LocalResult::Ambiguous(earlier, _) => Ok(earlier.timestamp_millis()),
        LocalResult::None => Err(Some(format!(
            "local time {local} does not exist in {} (skipped by a daylight-saving change)",
            zone.name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A batch column gives the time its row's JSON value gives.
    #[test]
    fn a_column_cell_gives_the_time_of_the_same_value_in_a_row() {
        use std::sync::Arc;
        let ints: Arc<dyn Array> = Arc::new(Int64Array::from(vec![Some(1_500), None]));
        let floats: Arc<dyn Array> = Arc::new(Float64Array::from(vec![1.2345, -0.5]));
        let strings: Arc<dyn Array> = Arc::new(StringArray::from(vec![
            "2024-03-10T07:30:00.5-05:00",
            "soon",
        ]));
        let formats = [
            TimestampFormat::EpochMillis,
            TimestampFormat::EpochSeconds,
            TimestampFormat::Rfc3339,
        ];
        for format in formats {
            let f = field(format);
            for column in [&ints, &floats, &strings] {
                for row in 0..2 {
                    let value = value_at(column.as_ref(), row);
                    let from_row = f.extract(&json!({"ts": value}));
                    let from_column = f.extract_at(column.as_ref(), row);
                    if value.is_null() {
                        assert_eq!(
                            from_column,
                            Err("field \"ts\" is missing or null".to_string())
                        );
                    } else {
                        assert_eq!(from_column, from_row, "{} {value}", f.format);
                    }
                }
            }
        }
    }

    fn field(format: TimestampFormat) -> EventTimeField {
        EventTimeField::new("ts", format)
    }

    fn pattern(fmt: &str, zone: Option<&str>) -> EventTimeField {
        field(TimestampFormat::parse(fmt, zone).unwrap())
    }

    #[test]
    fn parse_names_and_errors() {
        assert_eq!(
            TimestampFormat::parse("epoch_ms", None).unwrap(),
            TimestampFormat::EpochMillis
        );
        assert_eq!(TimestampFormat::default(), TimestampFormat::EpochMillis);
        assert_eq!(
            TimestampFormat::parse("epoch_s", None).unwrap(),
            TimestampFormat::EpochSeconds
        );
        assert_eq!(
            TimestampFormat::parse("rfc3339", None).unwrap(),
            TimestampFormat::Rfc3339
        );
        assert_eq!(
            TimestampFormat::parse("%Y-%m-%d", Some("America/New_York")).unwrap(),
            TimestampFormat::Pattern {
                format: "%Y-%m-%d".into(),
                zone: chrono_tz::America::New_York
            }
        );
        let e = TimestampFormat::parse("epoch_s", Some("Europe/Paris")).unwrap_err();
        assert!(
            e.contains("Europe/Paris") && e.contains("only allowed"),
            "{e}"
        );
        let e = TimestampFormat::parse("%Y-%m-%d", Some("Mars/Olympus")).unwrap_err();
        assert!(e.contains("unknown time zone \"Mars/Olympus\""), "{e}");
        let e = TimestampFormat::parse("%Y-%m-%d %Q", None).unwrap_err();
        assert!(e.contains("invalid timestamp pattern"), "{e}");
        let e = TimestampFormat::parse("%H:%M:%S", None).unwrap_err();
        assert!(e.contains("does not give a full date"), "{e}");
        let e = TimestampFormat::parse("%Y-%m", None).unwrap_err();
        assert!(e.contains("does not give a full date"), "{e}");
        let e = TimestampFormat::parse("%Y-%m-%d %H:%M %Z", None).unwrap_err();
        assert!(e.contains("%Z"), "{e}");
        assert!(TimestampFormat::parse("", None).is_err());
        for ok in ["%Y-%m-%dT%H:%M:%S%.f%z", "%d/%m/%Y", "%Y-%j", "%s", "%F %T"] {
            TimestampFormat::parse(ok, None).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn epoch_millis() {
        let f = field(TimestampFormat::EpochMillis);
        assert_eq!(
            f.extract(&json!({"ts": 1_700_000_000_123_i64})).unwrap(),
            1_700_000_000_123
        );
        assert_eq!(
            f.extract(&json!({"ts": "1700000000123"})).unwrap(),
            1_700_000_000_123
        );
        assert_eq!(f.extract(&json!({"ts": -1})).unwrap(), -1);
        assert_eq!(f.extract(&json!({"ts": "-86400000"})).unwrap(), -86_400_000);
        assert_eq!(f.extract(&json!({"ts": 12.7})).unwrap(), 12);
        assert_eq!(f.extract(&json!({"ts": -0.5})).unwrap(), -1, "floored");
        assert_eq!(f.extract(&json!({"ts": i64::MIN})).unwrap(), i64::MIN);
    }

    #[test]
    fn epoch_seconds_integer_fractional_negative() {
        let f = field(TimestampFormat::EpochSeconds);
        assert_eq!(
            f.extract(&json!({"ts": 1_700_000_000})).unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            f.extract(&json!({"ts": 1_700_000_000.123})).unwrap(),
            1_700_000_000_123
        );
        assert_eq!(f.extract(&json!({"ts": 0.001})).unwrap(), 1);
        assert_eq!(f.extract(&json!({"ts": -1.5})).unwrap(), -1500);
        assert_eq!(f.extract(&json!({"ts": -0.0001})).unwrap(), -1, "floored");
        assert_eq!(
            f.extract(&json!({"ts": "1700000000.123456"})).unwrap(),
            1_700_000_000_123
        );
        assert_eq!(f.extract(&json!({"ts": "-1.0005"})).unwrap(), -1001);
        assert_eq!(f.extract(&json!({"ts": "-1.5"})).unwrap(), -1500);
        assert_eq!(f.extract(&json!({"ts": "-12"})).unwrap(), -12_000);
        assert_eq!(f.extract(&json!({"ts": ".5"})).unwrap(), 500);
        assert_eq!(f.extract(&json!({"ts": "1e3"})).unwrap(), 1_000_000);
        let e = f.extract(&json!({"ts": i64::MAX})).unwrap_err();
        assert!(e.contains("out of range") && e.contains("epoch_s"), "{e}");
        let e = f
            .extract(&json!({"ts": "99999999999999999999"}))
            .unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        assert!(f.extract(&json!({"ts": "."})).is_err());
        assert!(f.extract(&json!({"ts": "1.2.3"})).is_err());
    }

    #[test]
    fn errors_name_field_and_value() {
        let f = field(TimestampFormat::EpochMillis);
        assert_eq!(
            f.extract(&json!({"ts": "abc"})).unwrap_err(),
            "field \"ts\": \"abc\" is not a timestamp in epoch_ms"
        );
        assert_eq!(
            f.extract(&json!({"x": 1})).unwrap_err(),
            "field \"ts\" is missing"
        );
        assert_eq!(
            f.extract(&json!({"ts": null})).unwrap_err(),
            "field \"ts\": null is not a timestamp in epoch_ms"
        );
        assert_eq!(
            f.extract(&json!({"ts": true})).unwrap_err(),
            "field \"ts\": true is not a timestamp in epoch_ms"
        );
        assert!(f
            .extract(&json!({"ts": 1e300}))
            .unwrap_err()
            .contains("out of range"));
        assert!(f
            .extract(&json!({"ts": u64::MAX}))
            .unwrap_err()
            .contains("out of range"));
        assert!(f
            .extract(&json!([1]))
            .unwrap_err()
            .contains("not a JSON object"));
        let long = "x".repeat(500);
        let e = f.extract(&json!({ "ts": long })).unwrap_err();
        assert!(e.len() < 200 && e.contains("..."), "{e}");
        let r = field(TimestampFormat::Rfc3339);
        let e = r.extract(&json!({"ts": 5})).unwrap_err();
        assert_eq!(e, "field \"ts\": 5 is not a timestamp in rfc3339");
        let e = r
            .extract(&json!({"ts": "2024-13-01T00:00:00Z"}))
            .unwrap_err();
        assert!(
            e.starts_with("field \"ts\": \"2024-13-01T00:00:00Z\" is not a timestamp in rfc3339: "),
            "{e}"
        );
    }

    #[test]
    fn rfc3339_any_offset() {
        let f = field(TimestampFormat::Rfc3339);
        assert_eq!(
            f.extract(&json!({"ts": "1970-01-01T00:00:00Z"})).unwrap(),
            0
        );
        assert_eq!(
            f.extract(&json!({"ts": "2024-03-10T02:30:00.250-05:00"}))
                .unwrap(),
            f.extract(&json!({"ts": "2024-03-10T07:30:00.25Z"}))
                .unwrap()
        );
        assert_eq!(
            f.extract(&json!({"ts": "1969-12-31T23:59:59.9995Z"}))
                .unwrap(),
            -1
        );
        assert_eq!(
            f.extract(&json!({"ts": "2024-01-01T05:30:00+05:30"}))
                .unwrap(),
            1_704_067_200_000
        );
    }

    #[test]
    fn new_york_dst_transitions() {
        let f = pattern("%Y-%m-%d %H:%M:%S", Some("America/New_York"));
        let at = |s: &str| f.extract(&json!({ "ts": s }));
        let utc = field(TimestampFormat::Rfc3339);
        let z = |s: &str| utc.extract(&json!({ "ts": s })).unwrap();
        // Winter: UTC-5; summer: UTC-4.
        assert_eq!(
            at("2024-01-15 12:00:00").unwrap(),
            z("2024-01-15T17:00:00Z")
        );
        assert_eq!(
            at("2024-07-15 12:00:00").unwrap(),
            z("2024-07-15T16:00:00Z")
        );
        // Spring forward, 2024-03-10: 02:00 EST becomes 03:00 EDT.
        assert_eq!(
            at("2024-03-10 01:59:59").unwrap(),
            z("2024-03-10T06:59:59Z")
        );
        assert_eq!(
            at("2024-03-10 03:00:00").unwrap(),
            z("2024-03-10T07:00:00Z")
        );
        let e = at("2024-03-10 02:30:00").unwrap_err();
        assert!(
            e.starts_with("field \"ts\": \"2024-03-10 02:30:00\" is not a timestamp in pattern \"%Y-%m-%d %H:%M:%S\" (America/New_York)")
                && e.contains("does not exist"),
            "{e}"
        );
        // Fall back, 2024-11-03: 01:00-02:00 happens twice; the earlier (EDT) instant wins.
        assert_eq!(
            at("2024-11-03 01:30:00").unwrap(),
            z("2024-11-03T05:30:00Z")
        );
        assert_eq!(
            at("2024-11-03 00:59:59").unwrap(),
            z("2024-11-03T04:59:59Z")
        );
        assert_eq!(
            at("2024-11-03 02:00:00").unwrap(),
            z("2024-11-03T07:00:00Z")
        );
    }

    #[test]
    fn pattern_variants() {
        let utc = field(TimestampFormat::Rfc3339);
        let z = |s: &str| utc.extract(&json!({ "ts": s })).unwrap();
        // Date only: midnight in the zone.
        let d = pattern("%Y-%m-%d", Some("America/New_York"));
        assert_eq!(
            d.extract(&json!({"ts": "2024-07-04"})).unwrap(),
            z("2024-07-04T04:00:00Z")
        );
        let d = pattern("%d/%m/%Y", None);
        assert_eq!(
            d.extract(&json!({"ts": "04/07/2024"})).unwrap(),
            z("2024-07-04T00:00:00Z")
        );
        // Own offset wins over the zone.
        let o = pattern("%Y-%m-%d %H:%M:%S%.f %z", Some("Asia/Tokyo"));
        assert_eq!(
            o.extract(&json!({"ts": "2024-07-04 10:00:00.5 +0200"}))
                .unwrap(),
            z("2024-07-04T08:00:00.5Z")
        );
        // Fractional seconds, before 1970.
        let f = pattern("%Y-%m-%d %H:%M:%S%.f", None);
        assert_eq!(
            f.extract(&json!({"ts": "1969-12-31 23:59:59.999"}))
                .unwrap(),
            -1
        );
        // An hour without minutes.
        let h = pattern("%Y-%m-%d %H", None);
        assert_eq!(
            h.extract(&json!({"ts": "2024-07-04 05"})).unwrap(),
            z("2024-07-04T05:00:00Z")
        );
        let s = pattern("%s", Some("America/New_York"));
        assert_eq!(s.extract(&json!({"ts": "86400"})).unwrap(), 86_400_000);
        let e = f
            .extract(&json!({"ts": "2024-02-30 00:00:00"}))
            .unwrap_err();
        assert!(e.contains("\"2024-02-30 00:00:00\""), "{e}");
        assert!(
            f.extract(&json!({"ts": 1})).is_err(),
            "patterns need strings"
        );
    }
}
