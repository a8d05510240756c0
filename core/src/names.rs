//! Validation of names that users give to things stored on disk.
//!
//! Topic, group and job names become file and directory names under the data
//! directory, so they follow Kafka's rule for topic names: 1 to 249 characters from
//! `[a-zA-Z0-9._-]`, and not `.` or `..`. That excludes `/`, `\`, NUL and any way to
//! climb out of the data directory.

use thiserror::Error;

/// The longest name accepted (Kafka's limit for topic names).
pub const MAX_NAME_LEN: usize = 249;

/// A name that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid {kind} name {name:?}: {reason}")]
pub struct InvalidName {
    /// What the name is for: `topic`, `group`, `job`.
    pub kind: &'static str,
    /// The name as given.
    pub name: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

/// Checks that `name` is a valid `kind` name (see the module docs for the rule).
///
/// # Errors
/// [`InvalidName`] naming the kind, the name and the reason.
pub fn validate_name(kind: &'static str, name: &str) -> Result<(), InvalidName> {
    let bad = |reason| {
        Err(InvalidName {
            kind,
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("it is longer than 249 characters");
    }
    if name.contains('/') || name.contains('\\') {
        return bad("it contains a path separator");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kafka_style_names() {
        for ok in ["snacks", "snack-sales.v2", "A_b-9", "..x", "x..y"] {
            assert_eq!(validate_name("topic", ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_escapes_and_odd_characters() {
        for bad in ["", ".", "..", "a/b", "../etc", "a\\b", "a b", "ä", "x\0"] {
            assert!(validate_name("topic", bad).is_err(), "{bad:?}");
        }
        assert!(validate_name("topic", &"x".repeat(250)).is_err());
        let e = validate_name("group", "a/b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid group name \"a/b\": it contains a path separator"
        );
    }
}
