//! SASL authentication of Kafka clients: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
//! RFC 7677), as Kafka's `SASL_PLAINTEXT` listeners serve them.
//!
//! - [`credentials`]: mechanisms, the stored credential and its derivation (SHA-2,
//!   HMAC and PBKDF2 from RustCrypto);
//! - [`users`]: the users and their text format, and the rule for names;
//! - [`store`]: the users file on disk (`<data-dir>/users.scram`, mode 0600);
//! - [`scram`]: the server side of the SCRAM exchange, pure;
//! - [`session`]: one connection's authentication as a state machine
//!   (SaslHandshake, SaslAuthenticate, what is admitted before and after).

pub mod credentials;
pub mod scram;
pub mod session;
pub mod store;
pub mod users;

pub use crate::sasl::credentials::{Mechanism, ScramCredential};
pub use crate::sasl::session::Authenticator;
pub use crate::sasl::store::{users_file, USERS_FILE};
pub use crate::sasl::users::Users;
