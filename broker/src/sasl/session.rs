//! Authentication of one connection as a state machine: requests in, what to answer
//! and whether to close out. The socket loop ([`crate::server`]) only carries bytes.
//!
//! Kafka's `SaslServerAuthenticator` sequence, on a listener with SASL:
//!
//! ```text
//! AwaitingHandshake --ApiVersions--> AwaitingHandshake
//!                   --SaslHandshake(SCRAM-SHA-256|512)--> AwaitingFirst
//!                   --SaslHandshake(other)--> UNSUPPORTED_SASL_MECHANISM, close
//! AwaitingFirst     --client-first--> server-first, AwaitingFinal
//! AwaitingFinal     --client-final--> server-final, Authenticated
//! any failure       --> SASL_AUTHENTICATION_FAILED (SaslAuthenticate), close
//! any other request before Authenticated --> close, nothing served
//! ```
//!
//! After a SaslHandshake v0 the tokens come as bare frames (a size and the token, no
//! request header) and go back the same way; a failure there can only close the
//! connection. On a listener without SASL every connection is [`Authenticator::open`];
//! SaslHandshake and SaslAuthenticate then get ILLEGAL_SASL_STATE, as they do on an
//! authenticated connection (Kafka's `KafkaApis`: no re-authentication).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use crate::frame;
use crate::sasl::credentials::Mechanism;
use crate::sasl::scram::{self, Exchange, ScramError};
use crate::sasl::users::Users;

/// Kafka's `sasl.server.max.receive.size` default (bytes): the largest frame a
/// client may send before it has authenticated.
pub const MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 512 * 1024;

#[derive(Debug)]
enum State {
    /// A listener without SASL: everything is served.
    Open,
    /// Before SaslHandshake.
    AwaitingHandshake,
    /// After SaslHandshake; `raw`: tokens come as bare frames (handshake v0).
    AwaitingFirst { mechanism: Mechanism, raw: bool },
    /// After the server-first message.
    AwaitingFinal { exchange: Box<Exchange>, raw: bool },
    /// Authenticated as `user`.
    Authenticated { user: String },
    /// Failed: the connection is being closed.
    Failed,
}

/// The authentication state of one connection.
#[derive(Debug)]
pub struct Authenticator {
    users: Arc<Users>,
    server_nonce: String,
    state: State,
}

/// The answer to a SaslHandshake.
#[derive(Debug, PartialEq, Eq)]
pub struct HandshakeAnswer {
    /// 0, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE.
    pub error_code: i16,
    /// The mechanisms served (empty without SASL).
    pub mechanisms: Vec<&'static str>,
    /// Close the connection after sending the answer.
    pub close: bool,
}

/// The answer to a SaslAuthenticate (or a bare token after handshake v0).
#[derive(Debug, PartialEq, Eq)]
pub struct AuthenticateAnswer {
    /// 0, SASL_AUTHENTICATION_FAILED or ILLEGAL_SASL_STATE.
    pub error_code: i16,
    /// What the client is told when it failed.
    pub error_message: Option<String>,
    /// The server's SCRAM message (empty on failure).
    pub auth_bytes: Vec<u8>,
    /// Close the connection after sending the answer (or, for a bare token that
    /// failed, instead of it).
    pub close: bool,
    /// The full reason of a failure, for the broker's log.
    pub failure: Option<ScramError>,
    /// The user, once authenticated by this answer.
    pub authenticated: Option<String>,
}

impl HandshakeAnswer {
    /// The SaslHandshake response.
    pub fn response(self) -> SaslHandshakeResponse {
        SaslHandshakeResponse::default()
            .with_error_code(self.error_code)
            .with_mechanisms(
                self.mechanisms
                    .into_iter()
                    .map(StrBytes::from_static_str)
                    .collect(),
            )
    }
}

impl AuthenticateAnswer {
    /// The SaslAuthenticate response (`session_lifetime_ms` 0: no re-authentication).
    pub fn response(self) -> SaslAuthenticateResponse {
        SaslAuthenticateResponse::default()
            .with_error_code(self.error_code)
            .with_error_message(self.error_message.map(StrBytes::from))
            .with_auth_bytes(self.auth_bytes.into())
    }

    fn illegal(message: &str, close: bool) -> Self {
        AuthenticateAnswer {
            error_code: ResponseError::IllegalSaslState.code(),
            error_message: Some(message.to_owned()),
            auth_bytes: Vec::new(),
            close,
            failure: None,
            authenticated: None,
        }
    }
}

impl Authenticator {
    /// A connection on a listener without SASL.
    pub fn open() -> Self {
        Authenticator {
            users: Arc::new(Users::default()),
            server_nonce: String::new(),
            state: State::Open,
        }
    }

    /// A connection on a SASL listener with `users`; `server_nonce` is this
    /// connection's part of the SCRAM nonce (random, printable ASCII without `,`).
    pub fn sasl(users: Arc<Users>, server_nonce: String) -> Self {
        Authenticator {
            users,
            server_nonce,
            state: State::AwaitingHandshake,
        }
    }

    /// Whether a request of `api` may be served now. ApiVersions always may (clients
    /// ask before the handshake); SaslHandshake and SaslAuthenticate are answered by
    /// [`Authenticator::handshake`] and [`Authenticator::authenticate`]; every other
    /// API only on an open or authenticated connection (otherwise the connection is
    /// closed, as Kafka's "Unexpected Kafka request during SASL handshake").
    pub fn admits(&self, api: ApiKey) -> bool {
        match self.state {
            State::Open | State::Authenticated { .. } => true,
            State::Failed => false,
            State::AwaitingHandshake => matches!(
                api,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            ),
            State::AwaitingFirst { raw, .. } | State::AwaitingFinal { raw, .. } => {
                !raw && api == ApiKey::SaslAuthenticate
            }
        }
    }

    /// The largest frame read from this connection (bytes): before authentication
    /// [`MAX_UNAUTHENTICATED_FRAME_BYTES`] (a client nobody knows yet cannot make the
    /// broker allocate 100 MiB), after it [`frame::MAX_FRAME_BYTES`].
    pub fn max_frame_bytes(&self) -> usize {
        match self.state {
            State::Open | State::Authenticated { .. } => frame::MAX_FRAME_BYTES,
            _ => MAX_UNAUTHENTICATED_FRAME_BYTES,
        }
    }

    /// Whether the next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_bare_token(&self) -> bool {
        matches!(
            self.state,
            State::AwaitingFirst { raw: true, .. } | State::AwaitingFinal { raw: true, .. }
        )
    }

    /// The authenticated user, if any.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::Authenticated { user } => Some(user),
            _ => None,
        }
    }

    /// Answers SaslHandshake `version` for `mechanism`.
    pub fn handshake(&mut self, mechanism: &str, version: i16) -> HandshakeAnswer {
        let served = Mechanism::ALL.iter().map(|m| m.name()).collect();
        match self.state {
            State::AwaitingHandshake => match Mechanism::from_name(mechanism) {
                Some(mechanism) => {
                    self.state = State::AwaitingFirst {
                        mechanism,
                        raw: version == 0,
                    };
                    HandshakeAnswer {
                        error_code: 0,
                        mechanisms: served,
                        close: false,
                    }
                }
                None => {
                    self.state = State::Failed;
                    HandshakeAnswer {
                        error_code: ResponseError::UnsupportedSaslMechanism.code(),
                        mechanisms: served,
                        close: true,
                    }
                }
            },
            State::Open => HandshakeAnswer {
                error_code: ResponseError::IllegalSaslState.code(),
                mechanisms: Vec::new(),
                close: false,
            },
            State::Authenticated { .. } => HandshakeAnswer {
                error_code: ResponseError::IllegalSaslState.code(),
                mechanisms: served,
                close: false,
            },
            // A second handshake in the middle of an exchange (admits() lets none
            // through): close.
            State::AwaitingFirst { .. } | State::AwaitingFinal { .. } | State::Failed => {
                self.state = State::Failed;
                HandshakeAnswer {
                    error_code: ResponseError::IllegalSaslState.code(),
                    mechanisms: served,
                    close: true,
                }
            }
        }
    }

    /// Answers a SaslAuthenticate's (or bare frame's) `token`.
    pub fn authenticate(&mut self, token: &[u8]) -> AuthenticateAnswer {
        match std::mem::replace(&mut self.state, State::Failed) {
            State::AwaitingFirst { mechanism, raw } => {
                match scram::client_first(mechanism, &self.users, &self.server_nonce, token) {
                    Ok((exchange, reply)) => {
                        self.state = State::AwaitingFinal {
                            exchange: Box::new(exchange),
                            raw,
                        };
                        success(reply, None)
                    }
                    Err(e) => failure(e),
                }
            }
            State::AwaitingFinal { exchange, .. } => match scram::client_final(&exchange, token) {
                Ok((user, reply)) => {
                    self.state = State::Authenticated { user: user.clone() };
                    success(reply, Some(user))
                }
                Err(e) => failure(e),
            },
            State::Open => {
                self.state = State::Open;
                AuthenticateAnswer::illegal("SASL is not enabled on this listener", false)
            }
            State::Authenticated { user } => {
                self.state = State::Authenticated { user };
                AuthenticateAnswer::illegal(
                    "SaslAuthenticate request received after successful authentication",
                    false,
                )
            }
            State::AwaitingHandshake | State::Failed => AuthenticateAnswer::illegal(
                "SaslAuthenticate request received before SaslHandshake",
                true,
            ),
        }
    }
}

fn success(reply: Vec<u8>, authenticated: Option<String>) -> AuthenticateAnswer {
    AuthenticateAnswer {
        error_code: 0,
        error_message: None,
        auth_bytes: reply,
        close: false,
        failure: None,
        authenticated,
    }
}

fn failure(e: ScramError) -> AuthenticateAnswer {
    AuthenticateAnswer {
        error_code: ResponseError::SaslAuthenticationFailed.code(),
        error_message: Some(e.client_message()),
        auth_bytes: Vec::new(),
        close: true,
        failure: Some(e),
        authenticated: None,
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine as _;

    use super::*;
    use crate::sasl::credentials::ScramCredential;

    const FAILED: i16 = 58; // SASL_AUTHENTICATION_FAILED
    const ILLEGAL: i16 = 34; // ILLEGAL_SASL_STATE
    const UNSUPPORTED: i16 = 33; // UNSUPPORTED_SASL_MECHANISM

    fn users() -> Arc<Users> {
        let mut users = Users::default();
        for m in Mechanism::ALL {
            users
                .set(
                    "alice",
                    m,
                    ScramCredential::derive(m, b"pw", vec![3; 16], 4096),
                )
                .expect("name");
        }
        Arc::new(users)
    }

    /// The client's final message for `password` after `server_first`.
    fn client_final(
        m: Mechanism,
        password: &str,
        first_bare: &str,
        server_first: &[u8],
    ) -> Vec<u8> {
        let server_first = std::str::from_utf8(server_first).expect("utf8");
        let mut fields = server_first.split(',');
        let nonce = &fields.next().expect("r")[2..];
        let salt = BASE64
            .decode(&fields.next().expect("s")[2..])
            .expect("salt");
        let iterations: u32 = fields.next().expect("i")[2..].parse().expect("i");
        let salted = m.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes()
    }

    /// Handshake, both SCRAM messages; the last answer.
    fn exchange(
        a: &mut Authenticator,
        m: Mechanism,
        user: &str,
        password: &str,
    ) -> AuthenticateAnswer {
        assert_eq!(a.handshake(m.name(), 1).error_code, 0);
        let bare = format!("n={user},r=client-nonce");
        let first = a.authenticate(format!("n,,{bare}").as_bytes());
        if first.error_code != 0 {
            return first;
        }
        a.authenticate(&client_final(m, password, &bare, &first.auth_bytes))
    }

    #[test]
    fn the_right_password_authenticates_with_either_mechanism() {
        for m in Mechanism::ALL {
            let mut a = Authenticator::sasl(users(), "server-nonce".into());
            assert!(a.admits(ApiKey::ApiVersions));
            assert!(!a.admits(ApiKey::Metadata));
            let last = exchange(&mut a, m, "alice", "pw");
            assert_eq!((last.error_code, last.close), (0, false), "{m}");
            assert!(last.auth_bytes.starts_with(b"v="));
            assert_eq!(last.authenticated.as_deref(), Some("alice"));
            assert_eq!(a.user(), Some("alice"));
            assert!(a.admits(ApiKey::Metadata) && a.admits(ApiKey::Produce));
        }
    }

    /// Table: what goes wrong, what the client gets, and that nothing is served after.
    #[test]
    fn failures_answer_authentication_failed_and_close() {
        let cases: [(&str, &str, &str); 3] = [
            ("wrong password", "alice", "not-pw"),
            ("unknown user", "mallory", "pw"),
            ("empty password", "alice", ""),
        ];
        for (case, user, password) in cases {
            let mut a = Authenticator::sasl(users(), "server-nonce".into());
            let last = exchange(&mut a, Mechanism::ScramSha256, user, password);
            assert_eq!(last.error_code, FAILED, "{case}");
            assert!(last.close, "{case}");
            assert!(last.auth_bytes.is_empty(), "{case}");
            assert_eq!(
                last.error_message.as_deref(),
                Some("Authentication failed: Invalid user credentials"),
                "{case}"
            );
            assert!(!a.admits(ApiKey::Metadata), "{case}");
            assert!(!a.admits(ApiKey::ApiVersions), "{case}");
            assert_eq!(a.user(), None);
        }
    }

    #[test]
    fn a_final_message_replayed_on_another_connection_fails() {
        let mut first = Authenticator::sasl(users(), "nonce-one".into());
        let m = Mechanism::ScramSha256;
        first.handshake(m.name(), 1);
        let bare = "n=alice,r=client-nonce";
        let server_first = first
            .authenticate(format!("n,,{bare}").as_bytes())
            .auth_bytes;
        let recorded = client_final(m, "pw", bare, &server_first);
        assert_eq!(first.authenticate(&recorded).error_code, 0);

        let mut second = Authenticator::sasl(users(), "nonce-two".into());
        second.handshake(m.name(), 1);
        second.authenticate(format!("n,,{bare}").as_bytes());
        let replay = second.authenticate(&recorded);
        assert_eq!((replay.error_code, replay.close), (FAILED, true));
        assert!(matches!(replay.failure, Some(ScramError::Nonce(_))));
    }

    #[test]
    fn requests_before_authentication_are_not_admitted() {
        let mut a = Authenticator::sasl(users(), "n".into());
        for api in [
            ApiKey::Metadata,
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::FindCoordinator,
        ] {
            assert!(!a.admits(api), "{api:?}");
        }
        // SaslAuthenticate before the handshake: ILLEGAL_SASL_STATE and close.
        let early = a.authenticate(b"n,,n=alice,r=x");
        assert_eq!((early.error_code, early.close), (ILLEGAL, true));

        // Between the handshake and the end of the exchange only SaslAuthenticate.
        let mut a = Authenticator::sasl(users(), "n".into());
        a.handshake("SCRAM-SHA-512", 1);
        assert!(a.admits(ApiKey::SaslAuthenticate));
        assert!(!a.admits(ApiKey::ApiVersions) && !a.admits(ApiKey::Metadata));
        let again = a.handshake("SCRAM-SHA-512", 1);
        assert_eq!((again.error_code, again.close), (ILLEGAL, true));
    }

    #[test]
    fn frames_before_authentication_are_limited_to_512_kib() {
        let mut a = Authenticator::sasl(users(), "n".into());
        assert_eq!(a.max_frame_bytes(), 512 * 1024);
        a.handshake("SCRAM-SHA-256", 1);
        assert_eq!(a.max_frame_bytes(), 512 * 1024);
        let mut b = Authenticator::sasl(users(), "n".into());
        assert_eq!(
            exchange(&mut b, Mechanism::ScramSha256, "alice", "pw").error_code,
            0
        );
        assert_eq!(b.max_frame_bytes(), frame::MAX_FRAME_BYTES);
        assert_eq!(
            Authenticator::open().max_frame_bytes(),
            frame::MAX_FRAME_BYTES
        );
    }

    #[test]
    fn an_unsupported_mechanism_gets_the_list_and_closes() {
        let mut a = Authenticator::sasl(users(), "n".into());
        let answer = a.handshake("PLAIN", 1);
        assert_eq!(
            answer,
            HandshakeAnswer {
                error_code: UNSUPPORTED,
                mechanisms: vec!["SCRAM-SHA-256", "SCRAM-SHA-512"],
                close: true,
            }
        );
        assert!(!a.admits(ApiKey::SaslAuthenticate));
    }

    #[test]
    fn handshake_v0_takes_bare_tokens() {
        let mut a = Authenticator::sasl(users(), "n".into());
        let m = Mechanism::ScramSha512;
        assert_eq!(a.handshake(m.name(), 0).error_code, 0);
        assert!(a.expects_bare_token());
        assert!(!a.admits(ApiKey::SaslAuthenticate));
        let bare = "n=alice,r=c";
        let first = a.authenticate(format!("n,,{bare}").as_bytes());
        assert!(a.expects_bare_token());
        let last = a.authenticate(&client_final(m, "pw", bare, &first.auth_bytes));
        assert_eq!(last.error_code, 0);
        assert!(!a.expects_bare_token());
        assert!(a.admits(ApiKey::Fetch));
    }

    #[test]
    fn without_sasl_everything_is_served_and_sasl_requests_are_illegal() {
        let mut a = Authenticator::open();
        assert!(a.admits(ApiKey::Produce));
        let h = a.handshake("SCRAM-SHA-256", 1);
        assert_eq!((h.error_code, h.close), (ILLEGAL, false));
        let t = a.authenticate(b"n,,n=alice,r=x");
        assert_eq!((t.error_code, t.close), (ILLEGAL, false));
        assert!(a.admits(ApiKey::Produce));
    }

    #[test]
    fn no_second_authentication() {
        let mut a = Authenticator::sasl(users(), "n".into());
        exchange(&mut a, Mechanism::ScramSha256, "alice", "pw");
        let h = a.handshake("SCRAM-SHA-256", 1);
        assert_eq!((h.error_code, h.close), (ILLEGAL, false));
        let t = a.authenticate(b"n,,n=alice,r=x");
        assert_eq!((t.error_code, t.close), (ILLEGAL, false));
        assert_eq!(a.user(), Some("alice"));
    }
}
