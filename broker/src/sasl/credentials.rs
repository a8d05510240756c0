//! SCRAM credentials: what the broker stores per user and mechanism, and the
//! primitives of RFC 5802 §3 over RustCrypto's SHA-2, HMAC and PBKDF2.
//!
//! A credential is Kafka's (`kafka-configs --describe --entity-type users` shows the
//! same four fields): the salt, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))`,
//! `ServerKey = HMAC(SaltedPassword, "Server Key")` and the iteration count of
//! `SaltedPassword = PBKDF2-HMAC(password, salt, iterations)`. The password itself is
//! never kept: the stored key verifies a client's proof, the server key signs the
//! server's answer. As Kafka, the password's UTF-8 bytes are used as they are (no
//! SASLprep).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Kafka's smallest SCRAM iteration count (`ScramMechanism.minIterations`), also the
/// count `brook broker user add` uses (kafka-configs' default).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's largest SCRAM iteration count (`ScramMechanism.maxIterations`).
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism the broker serves (RFC 7677 and Kafka's SCRAM-SHA-512).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl Mechanism {
    /// Every served mechanism, in the order SaslHandshake lists them.
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL name (`sasl.mechanism` of clients).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (SASL names are upper case; matched exactly, as
    /// Kafka's broker does).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// `H(data)`.
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)`.
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length (longer ones are hashed first), so
        // `new_from_slice` cannot fail.
        const ANY_KEY: &str = "HMAC accepts keys of any length";
        match self {
            Mechanism::ScramSha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect(ANY_KEY);
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Mechanism::ScramSha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect(ANY_KEY);
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this mechanism's HMAC, one
    /// digest long.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::ScramSha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }

    /// The digest length in bytes (of keys, proofs and signatures).
    pub fn digest_len(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A user's stored SCRAM credential for one mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt of `SaltedPassword`.
    pub salt: Vec<u8>,
    /// `H(ClientKey)`: verifies a client's proof.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`: signs the server-final message.
    pub server_key: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
}

impl ScramCredential {
    /// The credential of `password` with `salt` (RFC 5802 §3).
    pub fn derive(
        mechanism: Mechanism,
        password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        ScramCredential {
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, b"Server Key"),
            salt,
            iterations,
        }
    }
}

// Keys stay out of logs and panic messages.
impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PBKDF2-HMAC-SHA256 of password "password", salt "salt", 1 iteration (the
    /// published vector; RFC 7677's whole exchange is checked in `scram.rs`).
    #[test]
    fn pbkdf2_matches_the_published_vector() {
        let out = Mechanism::ScramSha256.salted_password(b"password", b"salt", 1);
        assert_eq!(
            hex(&out),
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b"
        );
    }

    #[test]
    fn names_round_trip_and_are_exact() {
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
            assert_eq!(m.hash(b"").len(), m.digest_len());
        }
        assert_eq!(Mechanism::from_name("scram-sha-256"), None);
        assert_eq!(Mechanism::from_name("PLAIN"), None);
    }

    #[test]
    fn debug_shows_no_keys() {
        let c = ScramCredential::derive(Mechanism::ScramSha256, b"pw", vec![1; 16], 4096);
        assert_eq!(format!("{c:?}"), "ScramCredential { iterations: 4096, .. }");
    }

    pub(crate) fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
