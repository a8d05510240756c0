//! The broker's users: SCRAM credentials by user name and mechanism, their text
//! format (the users file) and the rule for names.
//!
//! One line per user and mechanism, the four fields Kafka's `kafka-configs` shows for
//! a SCRAM credential, byte strings in base64:
//!
//! ```text
//! # brook broker users (SCRAM credentials; no passwords)
//! alice SCRAM-SHA-256 salt=...,stored_key=...,server_key=...,iterations=4096
//! alice SCRAM-SHA-512 salt=...,stored_key=...,server_key=...,iterations=4096
//! ```
//!
//! Blank lines and lines starting with `#` are ignored.

use std::collections::BTreeMap;
use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use thiserror::Error;

use crate::sasl::credentials::{Mechanism, ScramCredential, MAX_ITERATIONS, MIN_ITERATIONS};

/// The longest user name (bytes), as Kafka's longest topic name: names show up in
/// logs and files, and a client sends them in every authentication.
pub const MAX_NAME_LEN: usize = 249;

/// Why a user name is refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// Empty.
    #[error("user name is empty")]
    Empty,
    /// Longer than [`MAX_NAME_LEN`].
    #[error("user name of {0} bytes is longer than {MAX_NAME_LEN}")]
    TooLong(usize),
    /// A character outside `A-Z a-z 0-9 . _ - @`.
    #[error(
        "user name {name:?} has {ch:?}: only letters, digits, '.', '_', '-' and '@' are allowed"
    )]
    BadChar {
        /// The name.
        name: String,
        /// The first character refused.
        ch: char,
    },
}

/// Checks a user name: 1 to [`MAX_NAME_LEN`] of `A-Z a-z 0-9 . _ - @`. Narrower than
/// SCRAM allows (any UTF-8 with `,` and `=` escaped): such names need no escaping in
/// SCRAM messages, the users file or logs, and read the same everywhere (e-mail-like
/// names included).
///
/// # Errors
/// [`NameError`].
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong(name.len()));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@')))
    {
        Some(ch) => Err(NameError::BadChar {
            name: name.to_owned(),
            ch,
        }),
        None => Ok(()),
    }
}

/// A line of the users file that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, naming the field.
    pub reason: String,
}

/// The users the broker authenticates.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Users {
    credentials: BTreeMap<(String, Mechanism), ScramCredential>,
}

impl Users {
    /// The credential of `name` for `mechanism`.
    pub fn get(&self, name: &str, mechanism: Mechanism) -> Option<&ScramCredential> {
        // One key allocation per authentication, not per request.
        self.credentials.get(&(name.to_owned(), mechanism))
    }

    /// Sets (adds or replaces) the credential of `name` for `mechanism`.
    ///
    /// # Errors
    /// A name [`check_name`] refuses.
    pub fn set(
        &mut self,
        name: &str,
        mechanism: Mechanism,
        credential: ScramCredential,
    ) -> Result<(), NameError> {
        check_name(name)?;
        self.credentials
            .insert((name.to_owned(), mechanism), credential);
        Ok(())
    }

    /// Removes every credential of `name`; whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.credentials.len();
        self.credentials.retain(|(n, _), _| n != name);
        self.credentials.len() != before
    }

    /// The user names, sorted, once each.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.credentials.keys().map(|(n, _)| n.as_str()).collect();
        names.dedup();
        names
    }

    /// Whether there is no user.
    pub fn is_empty(&self) -> bool {
        self.credentials.is_empty()
    }

    /// Parses the users file's text.
    ///
    /// # Errors
    /// The first line that does not parse ([`ParseError`], naming the field).
    pub fn parse(text: &str) -> Result<Users, ParseError> {
        let mut users = Users::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: String| ParseError {
                line: i + 1,
                reason,
            };
            let mut words = line.split_whitespace();
            let (Some(name), Some(mechanism), Some(fields), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(err(
                    "expected `NAME MECHANISM salt=...,stored_key=...,server_key=...,iterations=N`"
                        .to_owned(),
                ));
            };
            let mechanism = Mechanism::from_name(mechanism).ok_or_else(|| {
                err(format!(
                    "mechanism {mechanism:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"
                ))
            })?;
            let credential = parse_credential(fields, mechanism).map_err(err)?;
            users
                .set(name, mechanism, credential)
                .map_err(|e| err(e.to_string()))?;
        }
        Ok(users)
    }

    /// The users file's text ([`Users::parse`] reads it back).
    pub fn format(&self) -> String {
        let mut out = String::from("# brook broker users: SCRAM credentials (no passwords)\n");
        for ((name, mechanism), c) in &self.credentials {
            out.push_str(&format!(
                "{name} {mechanism} salt={},stored_key={},server_key={},iterations={}\n",
                BASE64.encode(&c.salt),
                BASE64.encode(&c.stored_key),
                BASE64.encode(&c.server_key),
                c.iterations
            ));
        }
        out
    }
}

// Names only: keys stay out of logs.
impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Users")
            .field("names", &self.names())
            .finish()
    }
}

fn parse_credential(fields: &str, mechanism: Mechanism) -> Result<ScramCredential, String> {
    let mut salt = None;
    let mut stored_key = None;
    let mut server_key = None;
    let mut iterations = None;
    for field in fields.split(',') {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| format!("field {field:?} is not key=value"))?;
        let bytes = || {
            BASE64
                .decode(value)
                .map_err(|e| format!("{key} is not base64: {e}"))
        };
        match key {
            "salt" => salt = Some(bytes()?),
            "stored_key" => stored_key = Some(bytes()?),
            "server_key" => server_key = Some(bytes()?),
            "iterations" => {
                let n: u32 = value
                    .parse()
                    .map_err(|_| format!("iterations {value:?} is not a number"))?;
                if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&n) {
                    return Err(format!(
                        "iterations {n} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS} (Kafka's limits)"
                    ));
                }
                iterations = Some(n);
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    let missing = |name: &str| format!("field {name} is missing");
    let credential = ScramCredential {
        salt: salt.ok_or_else(|| missing("salt"))?,
        stored_key: stored_key.ok_or_else(|| missing("stored_key"))?,
        server_key: server_key.ok_or_else(|| missing("server_key"))?,
        iterations: iterations.ok_or_else(|| missing("iterations"))?,
    };
    let len = mechanism.digest_len();
    for (name, key) in [
        ("stored_key", &credential.stored_key),
        ("server_key", &credential.server_key),
    ] {
        if key.len() != len {
            return Err(format!(
                "{name} is {} bytes, {mechanism} keys are {len}",
                key.len()
            ));
        }
    }
    if credential.salt.is_empty() {
        return Err("salt is empty".to_owned());
    }
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(m: Mechanism) -> ScramCredential {
        ScramCredential::derive(m, b"secret", vec![7; 16], MIN_ITERATIONS)
    }

    #[test]
    fn the_file_format_round_trips() {
        let mut users = Users::default();
        for m in Mechanism::ALL {
            users.set("alice", m, credential(m)).expect("name");
        }
        users
            .set(
                "bob@example.com",
                Mechanism::ScramSha512,
                credential(Mechanism::ScramSha512),
            )
            .expect("name");
        let text = users.format();
        assert!(!text.contains("secret"));
        let back = Users::parse(&text).expect("parse");
        assert_eq!(back, users);
        assert_eq!(back.names(), vec!["alice", "bob@example.com"]);
        assert!(back.get("alice", Mechanism::ScramSha512).is_some());
        assert!(back
            .get("bob@example.com", Mechanism::ScramSha256)
            .is_none());
        assert!(back.get("carol", Mechanism::ScramSha256).is_none());
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert!(matches!(
            check_name(&"a".repeat(250)),
            Err(NameError::TooLong(250))
        ));
        assert!(matches!(
            check_name("al ice"),
            Err(NameError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            check_name("a,b"),
            Err(NameError::BadChar { ch: ',', .. })
        ));
        assert!(matches!(
            check_name("a=b"),
            Err(NameError::BadChar { ch: '=', .. })
        ));
        assert!(check_name("svc.billing_2-eu@corp").is_ok());
    }

    #[test]
    fn bad_lines_name_the_line_and_field() {
        let good = Users::default();
        let mut one = good.clone();
        one.set(
            "alice",
            Mechanism::ScramSha256,
            credential(Mechanism::ScramSha256),
        )
        .expect("name");
        let line = one.format().lines().nth(1).expect("a line").to_owned();
        let cases = [
            ("alice", "expected `NAME MECHANISM"),
            (
                &line.replace("SCRAM-SHA-256", "PLAIN"),
                "mechanism \"PLAIN\"",
            ),
            (&line.replace("alice", "al/ice"), "has '/'"),
            (
                &line.replace("iterations=4096", "iterations=10"),
                "iterations 10 is outside",
            ),
            (
                &line.replace(",iterations=4096", ""),
                "field iterations is missing",
            ),
            (
                &line.replace("SCRAM-SHA-256", "SCRAM-SHA-512"),
                "stored_key is 32 bytes, SCRAM-SHA-512 keys are 64",
            ),
            (&line.replace("salt=", "salt=!"), "salt is not base64"),
            (&format!("{line},color=red"), "unknown field \"color\""),
        ];
        for (text, expected) in cases {
            let e = Users::parse(&format!("# users\n\n{text}\n")).expect_err(text);
            assert_eq!(e.line, 3, "{text}");
            assert!(e.reason.contains(expected), "{text}: {}", e.reason);
        }
    }

    #[test]
    fn debug_shows_names_only() {
        let mut users = Users::default();
        users
            .set(
                "alice",
                Mechanism::ScramSha256,
                credential(Mechanism::ScramSha256),
            )
            .expect("name");
        assert_eq!(format!("{users:?}"), r#"Users { names: ["alice"] }"#);
        assert!(users.remove("alice"));
        assert!(users.is_empty());
    }
}
