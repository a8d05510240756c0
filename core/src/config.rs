//! Parsing of configuration values: durations and byte sizes.
//!
//! Durations accept `250ms`, `5s`, `10m`, `1h`, `7d` (any unit `humantime` knows, and
//! combinations such as `1h 30m`) or a plain integer of milliseconds, as semantics.md
//! says. Sizes accept `1048576`, `512KiB`, `1GiB`, `10MB` (decimal and binary units).

use thiserror::Error;

/// A configuration value that could not be parsed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration that is neither an integer of ms nor a value with a unit.
    #[error("invalid duration {value:?}: expected an integer of milliseconds or a value with a unit such as 250ms, 5s, 10m, 1h, 7d")]
    InvalidDuration {
        /// The text as given.
        value: String,
    },
    /// A size that is neither an integer of bytes nor a value with a unit.
    #[error(
        "invalid size {value:?}: expected bytes or a value with a unit such as 512KiB, 1GiB, 10MB"
    )]
    InvalidSize {
        /// The text as given.
        value: String,
    },
}

/// Parses a duration into milliseconds.
///
/// # Errors
/// [`ConfigError::InvalidDuration`] for anything else, including negative values and
/// durations over `i64::MAX` ms.
pub fn parse_duration_ms(text: &str) -> Result<i64, ConfigError> {
    let t = text.trim();
    let err = || ConfigError::InvalidDuration {
        value: text.to_string(),
    };
    if let Ok(ms) = t.parse::<u64>() {
        return i64::try_from(ms).map_err(|_| err());
    }
    let d = humantime::parse_duration(t).map_err(|_| err())?;
    i64::try_from(d.as_millis()).map_err(|_| err())
}

/// Parses a size into bytes.
///
/// # Errors
/// [`ConfigError::InvalidSize`] for anything that is not a non-negative size.
pub fn parse_size_bytes(text: &str) -> Result<u64, ConfigError> {
    parse_size::parse_size(text.trim()).map_err(|_| ConfigError::InvalidSize {
        value: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("5s"), Ok(5_000));
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("1500"), Ok(1_500));
        assert!(parse_duration_ms("-5s").is_err());
        assert!(parse_duration_ms("soon").is_err());
        assert!(parse_duration_ms("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size_bytes("10MB"), Ok(10_000_000));
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert!(parse_size_bytes("-1").is_err());
        assert!(parse_size_bytes("lots").is_err());
    }
}
