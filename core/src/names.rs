//! Validation of names that users give to things stored on disk.
//!
//! Topic and job names become file and directory names under the data directory, so
//! they follow Kafka's rule for topic names: 1 to 249 characters from
//! `[a-zA-Z0-9._-]`, and not `.` or `..`. That excludes `/`, `\`, NUL and any way to
//! climb out of the data directory.
//!
//! Consumer group ids follow Kafka's rule for groups instead, which allows any
//! characters (`orders:v2`, `team a`): the log's offset store writes each byte outside
//! `[a-zA-Z0-9._-]` of a group's file name as `%XX` ([`group_file_stem`]), so a group
//! id cannot name a path either.

use std::fmt::Write as _;

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

/// The longest file-name stem of a group ([`group_file_stem`]) accepted, in bytes: file
/// names are at most 255 bytes and the offset store adds `.json.tmp` to it.
pub const MAX_GROUP_FILE_STEM: usize = 240;

/// Whether a byte stands for itself in a group's file name.
fn plain_in_file_name(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

/// Checks that `group` can be a consumer group id: any characters, as Kafka (whose
/// coordinator refuses only an empty id, `INVALID_GROUP_ID`), except `.` and `..`,
/// and at most [`MAX_GROUP_FILE_STEM`] bytes as a file name (a plain name of 240
/// characters; each other byte counts 3).
///
/// # Errors
/// [`InvalidName`] (kind `group`) naming the id and the reason.
pub fn validate_group_id(group: &str) -> Result<(), InvalidName> {
    let bad = |reason| {
        Err(InvalidName {
            kind: "group",
            name: group.to_string(),
            reason,
        })
    };
    if group.is_empty() {
        return bad("it is empty");
    }
    if group == "." || group == ".." {
        return bad("'.' and '..' are reserved");
    }
    let stem_len: usize = group
        .bytes()
        .map(|b| if plain_in_file_name(b) { 1 } else { 3 })
        .sum();
    if stem_len > MAX_GROUP_FILE_STEM {
        return bad("it is longer than 240 bytes as a file name (each byte outside [a-zA-Z0-9._-] counts 3)");
    }
    Ok(())
}

/// The file-name stem of a valid group id: the id with each byte outside
/// `[a-zA-Z0-9._-]` written as `%XX` (upper-case hex), so the names the store wrote
/// before group ids could hold other characters keep their files.
pub fn group_file_stem(group: &str) -> String {
    let mut out = String::with_capacity(group.len());
    for b in group.bytes() {
        if plain_in_file_name(b) {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The group id a file-name stem stands for, if it is the stem [`group_file_stem`]
/// writes for a valid id (other names were not written by the store).
pub fn group_from_file_stem(stem: &str) -> Option<String> {
    let bytes = stem.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let group = String::from_utf8(out).ok()?;
    (validate_group_id(&group).is_ok() && group_file_stem(&group) == stem).then_some(group)
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
    fn group_ids_take_any_characters_as_kafka() {
        for ok in ["orders:v2", "team a", "ä/b", "%41", "..x", "a\\b", "x\0"] {
            assert_eq!(validate_group_id(ok), Ok(()), "{ok:?}");
            let stem = group_file_stem(ok);
            assert!(stem.bytes().all(plain_in_file_name_or_percent), "{stem}");
            assert_eq!(group_from_file_stem(&stem).as_deref(), Some(ok), "{stem}");
        }
        assert_eq!(group_file_stem("orders:v2"), "orders%3Av2");
        assert_eq!(group_file_stem("readers-1.x_y"), "readers-1.x_y");
        for bad in ["", ".", ".."] {
            assert!(validate_group_id(bad).is_err(), "{bad:?}");
        }
        assert!(validate_group_id(&"g".repeat(240)).is_ok());
        assert!(validate_group_id(&"g".repeat(241)).is_err());
        assert!(validate_group_id(&":".repeat(80)).is_ok());
        assert!(validate_group_id(&":".repeat(81)).is_err());
        // Not written by the store: lower-case hex, a plain byte written as %XX, a
        // cut escape, bytes that are no UTF-8.
        for stem in ["orders%3av2", "%41", "a%3", "%FF", "."] {
            assert_eq!(group_from_file_stem(stem), None, "{stem}");
        }
    }

    fn plain_in_file_name_or_percent(b: u8) -> bool {
        plain_in_file_name(b) || b == b'%'
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
