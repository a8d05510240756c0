//! The server side of a SCRAM exchange (RFC 5802, RFC 7677) as pure functions:
//! the client's messages in, the server's messages or the reason for failure out.
//!
//! ```text
//! client-first  n,,n=alice,r=<client nonce>
//! server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
//! client-final  c=biws,r=<client nonce><server nonce>,p=<proof>
//! server-final  v=<server signature>
//! ```
//!
//! The server nonce is an argument (the caller draws it from the OS's random source),
//! so tests are deterministic. Rules, Kafka's `ScramSaslServer` unless said otherwise:
//! no channel binding (`p=` refused; `n` and `y` accepted, as a server without
//! channel binding must), an authorization id only if it equals the user name, no
//! mandatory extensions (`m=`), delegation tokens (`tokenauth=true`) refused, other
//! extensions ignored; an unknown user fails at the first message, a wrong proof or a
//! nonce that does not end with this exchange's (a replayed final message) at the
//! second.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::sasl::credentials::{Mechanism, ScramCredential};
use crate::sasl::users::Users;

/// Why an exchange fails. The client is told only [`ScramError::client_message`];
/// the broker's log gets the whole error.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ScramError {
    /// The message is not UTF-8 or does not follow RFC 5802's grammar.
    #[error("malformed SCRAM {message} message: {reason}")]
    Malformed {
        /// `client-first` or `client-final`.
        message: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The client asked for channel binding (`p=`), which a plaintext listener cannot
    /// offer.
    #[error("channel binding {0:?} is not supported")]
    ChannelBinding(String),
    /// An authorization id other than the user name.
    #[error("authorization id {authzid:?} differs from user name {user:?}")]
    Authzid {
        /// The user.
        user: String,
        /// The id asked for.
        authzid: String,
    },
    /// `tokenauth=true`: delegation tokens are not served.
    #[error("delegation token authentication is not supported")]
    TokenAuth,
    /// No credential for this user and mechanism.
    #[error("unknown user {user:?} for {mechanism}")]
    UnknownUser {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: Mechanism,
    },
    /// The final message's nonce does not end with this exchange's.
    #[error("nonce of user {0:?} does not match this exchange (a replayed message?)")]
    Nonce(String),
    /// The final message's channel binding differs from the first message's header.
    #[error("channel binding data of user {0:?} differs from the first message")]
    ChannelBindingMismatch(String),
    /// The proof does not verify: a wrong password.
    #[error("invalid proof for user {0:?} (wrong password)")]
    Proof(String),
}

impl ScramError {
    /// What the client is told: Kafka's words, the same for an unknown user and a
    /// wrong password.
    pub fn client_message(&self) -> String {
        match self {
            ScramError::UnknownUser { .. } | ScramError::Proof(_) => {
                "Authentication failed: Invalid user credentials".to_owned()
            }
            ScramError::Nonce(_) => "Authentication failed: Invalid client nonce".to_owned(),
            other => format!("Authentication failed: {other}"),
        }
    }
}

/// The exchange after the server-first message: what the final message is checked
/// against.
#[derive(Debug, Clone)]
pub struct Exchange {
    mechanism: Mechanism,
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

impl Exchange {
    /// The user this exchange authenticates.
    pub fn user(&self) -> &str {
        &self.user
    }
}

/// Handles the client-first message: the exchange so far and the server-first message.
///
/// # Errors
/// [`ScramError`]: malformed, channel binding, authorization id, token auth, unknown
/// user.
pub fn client_first(
    mechanism: Mechanism,
    users: &Users,
    server_nonce: &str,
    message: &[u8],
) -> Result<(Exchange, Vec<u8>), ScramError> {
    let bad = |reason: &str| ScramError::Malformed {
        message: "client-first",
        reason: reason.to_owned(),
    };
    let text = std::str::from_utf8(message).map_err(|_| bad("not UTF-8"))?;
    // gs2-header = cbind-flag "," [authzid] ","
    let (flag, rest) = text.split_once(',').ok_or_else(|| bad("no gs2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(ScramError::ChannelBinding(f[2..].to_owned())),
        _ => return Err(bad("gs2 channel binding flag is not n, y or p=")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(|| bad("no gs2 header"))?;
    let gs2_header = &text[..flag.len() + authzid.len() + 2];
    let mut attributes = bare.split(',');
    let user = match attributes.next() {
        Some(a) if a.starts_with("m=") => {
            return Err(bad("mandatory extensions are not supported"))
        }
        Some(a) if a.starts_with("n=") => sasl_name(&a[2..]).ok_or_else(|| bad("bad user name"))?,
        _ => return Err(bad("no user name (n=)")),
    };
    let client_nonce = match attributes.next() {
        Some(a) if a.starts_with("r=") && a.len() > 2 => &a[2..],
        _ => return Err(bad("no nonce (r=)")),
    };
    if !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(bad("nonce has characters outside printable ASCII"));
    }
    // Kafka's extensions are key=value pairs after the nonce.
    for extension in attributes {
        if extension == "tokenauth=true" {
            return Err(ScramError::TokenAuth);
        }
    }
    if !authzid.is_empty() {
        let id = authzid
            .strip_prefix("a=")
            .and_then(sasl_name)
            .ok_or_else(|| bad("bad authorization id"))?;
        if id != user {
            return Err(ScramError::Authzid { user, authzid: id });
        }
    }
    let credential = users
        .get(&user, mechanism)
        .ok_or_else(|| ScramError::UnknownUser {
            user: user.clone(),
            mechanism,
        })?
        .clone();
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&credential.salt),
        credential.iterations
    );
    let reply = server_first.clone().into_bytes();
    Ok((
        Exchange {
            mechanism,
            user,
            credential,
            gs2_header: gs2_header.to_owned(),
            nonce,
            client_first_bare: bare.to_owned(),
            server_first,
        },
        reply,
    ))
}

/// Handles the client-final message: the user authenticated and the server-final
/// message.
///
/// # Errors
/// [`ScramError`]: malformed, nonce, channel binding mismatch, wrong proof.
pub fn client_final(exchange: &Exchange, message: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
    let bad = |reason: &str| ScramError::Malformed {
        message: "client-final",
        reason: reason.to_owned(),
    };
    let user = &exchange.user;
    let text = std::str::from_utf8(message).map_err(|_| bad("not UTF-8"))?;
    // The proof is the last attribute; what comes before it is signed.
    let (without_proof, proof) = text
        .rsplit_once(",p=")
        .ok_or_else(|| bad("no proof (p=)"))?;
    let mut attributes = without_proof.split(',');
    let binding = match attributes.next() {
        Some(a) if a.starts_with("c=") => BASE64
            .decode(&a[2..])
            .map_err(|_| bad("channel binding (c=) is not base64"))?,
        _ => return Err(bad("no channel binding (c=)")),
    };
    let nonce = match attributes.next() {
        Some(a) if a.starts_with("r=") => &a[2..],
        _ => return Err(bad("no nonce (r=)")),
    };
    // Kafka checks that the nonce *ends with* this exchange's (client + server) nonce
    // rather than equals it, and librdkafka before 2.1 (Debian 12's, in kcat) sends
    // the client nonce twice. Freshness holds either way: this connection's server
    // nonce must end the nonce, and the proof signs the message as sent.
    if !nonce.ends_with(&exchange.nonce) {
        return Err(ScramError::Nonce(user.clone()));
    }
    if binding != exchange.gs2_header.as_bytes() {
        return Err(ScramError::ChannelBindingMismatch(user.clone()));
    }
    let proof = BASE64
        .decode(proof)
        .map_err(|_| bad("proof (p=) is not base64"))?;
    let m = exchange.mechanism;
    if proof.len() != m.digest_len() {
        return Err(ScramError::Proof(user.clone()));
    }
    let auth_message = format!(
        "{},{},{without_proof}",
        exchange.client_first_bare, exchange.server_first
    );
    let c = &exchange.credential;
    let signature = m.hmac(&c.stored_key, auth_message.as_bytes());
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    if !bool::from(m.hash(&client_key).ct_eq(&c.stored_key)) {
        return Err(ScramError::Proof(user.clone()));
    }
    let server_signature = m.hmac(&c.server_key, auth_message.as_bytes());
    let reply = format!("v={}", BASE64.encode(server_signature)).into_bytes();
    Ok((user.clone(), reply))
}

/// A saslname with `=2C` and `=3D` decoded (RFC 5802 §5.1); `None` for any other `=`
/// escape or an empty name.
fn sasl_name(raw: &str) -> Option<String> {
    if raw.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl::credentials::MIN_ITERATIONS;

    /// RFC 7677 §3: SCRAM-SHA-256 with user "user", password "pencil".
    const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_users() -> Users {
        let mut users = Users::default();
        let salt = BASE64.decode(RFC_SALT).expect("salt");
        let m = Mechanism::ScramSha256;
        users
            .set("user", m, ScramCredential::derive(m, b"pencil", salt, 4096))
            .expect("name");
        users
    }

    /// A client's final message for `password` (RFC 5802 §3), to drive the server.
    fn client_final_for(
        m: Mechanism,
        password: &str,
        client_first: &str,
        server_first: &str,
    ) -> String {
        let nonce = server_first
            .split(',')
            .next()
            .expect("r=")
            .trim_start_matches("r=");
        client_final_with_nonce(m, password, client_first, server_first, nonce)
    }

    /// As [`client_final_for`], sending `nonce`.
    fn client_final_with_nonce(
        m: Mechanism,
        password: &str,
        client_first: &str,
        server_first: &str,
        nonce: &str,
    ) -> String {
        let text = server_first;
        let salt = BASE64
            .decode(
                text.split(",s=")
                    .nth(1)
                    .expect("s=")
                    .split(',')
                    .next()
                    .expect("salt"),
            )
            .expect("salt b64");
        let iterations: u32 = text.rsplit("i=").next().expect("i=").parse().expect("i");
        let salted = m.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored = m.hash(&client_key);
        let gs2_end = client_first.match_indices(',').nth(1).expect("gs2").0 + 1;
        let without_proof = format!(
            "c={},r={nonce}",
            BASE64.encode(&client_first.as_bytes()[..gs2_end])
        );
        let auth = format!(
            "{},{server_first},{without_proof}",
            &client_first[gs2_end..]
        );
        let sig = m.hmac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", BASE64.encode(proof))
    }

    #[test]
    fn the_rfc_7677_exchange() {
        let users = rfc_users();
        let (exchange, first) = client_first(
            Mechanism::ScramSha256,
            &users,
            RFC_SERVER_NONCE,
            RFC_CLIENT_FIRST.as_bytes(),
        )
        .expect("first");
        assert_eq!(String::from_utf8(first).expect("utf8"), RFC_SERVER_FIRST);
        let (user, last) = client_final(&exchange, RFC_CLIENT_FINAL.as_bytes()).expect("final");
        assert_eq!(user, "user");
        assert_eq!(String::from_utf8(last).expect("utf8"), RFC_SERVER_FINAL);
    }

    #[test]
    fn sha_512_round_trip_and_authzid_equal_to_the_user() {
        let m = Mechanism::ScramSha512;
        let mut users = Users::default();
        users
            .set(
                "alice",
                m,
                ScramCredential::derive(m, b"s3cret", vec![9; 32], MIN_ITERATIONS),
            )
            .expect("name");
        let first = "n,a=alice,n=alice,r=abc";
        let (exchange, server_first) =
            client_first(m, &users, "XYZ", first.as_bytes()).expect("first");
        let server_first = String::from_utf8(server_first).expect("utf8");
        let last = client_final_for(m, "s3cret", first, &server_first);
        let (user, reply) = client_final(&exchange, last.as_bytes()).expect("final");
        assert_eq!(user, "alice");
        assert!(reply.starts_with(b"v="));
    }

    /// Table: each bad exchange and the error it gets.
    #[test]
    fn failures() {
        let users = rfc_users();
        let m = Mechanism::ScramSha256;
        let first =
            |msg: &str| client_first(m, &users, RFC_SERVER_NONCE, msg.as_bytes()).map(|_| ());
        let unknown = ScramError::UnknownUser {
            user: "mallory".into(),
            mechanism: m,
        };
        assert_eq!(first("n,,n=mallory,r=abc"), Err(unknown.clone()));
        assert_eq!(
            unknown.client_message(),
            "Authentication failed: Invalid user credentials"
        );
        // The user has no SCRAM-SHA-512 credential.
        assert!(matches!(
            client_first(
                Mechanism::ScramSha512,
                &users,
                "x",
                RFC_CLIENT_FIRST.as_bytes()
            ),
            Err(ScramError::UnknownUser { .. })
        ));
        assert_eq!(
            first("p=tls-unique,,n=user,r=abc"),
            Err(ScramError::ChannelBinding("tls-unique".into()))
        );
        assert!(matches!(
            first("n,a=admin,n=user,r=abc"),
            Err(ScramError::Authzid { .. })
        ));
        assert_eq!(
            first("n,,n=user,r=abc,tokenauth=true"),
            Err(ScramError::TokenAuth)
        );
        for malformed in [
            "",
            "n=user,r=abc",
            "x,,n=user,r=abc",
            "n,,m=ext,n=user,r=abc",
            "n,,r=abc",
            "n,,n=user",
            "n,,n=user,r=",
            "n,,n=us=41er,r=abc",
            "n,,n=user,r=a\u{1}c",
        ] {
            assert!(
                matches!(first(malformed), Err(ScramError::Malformed { .. })),
                "{malformed:?}"
            );
        }
        assert!(matches!(
            client_first(m, &users, "x", &[0xff, 0xfe]),
            Err(ScramError::Malformed { .. })
        ));

        let (exchange, _) =
            client_first(m, &users, RFC_SERVER_NONCE, RFC_CLIENT_FIRST.as_bytes()).expect("first");
        let last = |msg: &str| client_final(&exchange, msg.as_bytes()).map(|_| ());
        // Wrong password: a well-formed proof of another password.
        let wrong = client_final_for(m, "pencil2", RFC_CLIENT_FIRST, RFC_SERVER_FIRST);
        assert_eq!(last(&wrong), Err(ScramError::Proof("user".into())));
        // A proof flipped in one bit, or of the wrong length.
        let flipped = RFC_CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
        assert_eq!(last(&flipped), Err(ScramError::Proof("user".into())));
        assert_eq!(
            last(&RFC_CLIENT_FINAL.replace("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "AAAA")),
            Err(ScramError::Proof("user".into()))
        );
        // Channel binding data other than the first message's header.
        assert_eq!(
            last(&RFC_CLIENT_FINAL.replace("c=biws", "c=eSws")),
            Err(ScramError::ChannelBindingMismatch("user".into()))
        );
        for malformed in ["", "c=biws,r=x", "r=x,p=AAAA", "c=!!,r=x,p=AAAA"] {
            assert!(
                matches!(last(malformed), Err(ScramError::Malformed { .. })),
                "{malformed:?}"
            );
        }
    }

    /// A final message recorded from one exchange does not authenticate another: the
    /// server's nonce differs.
    #[test]
    fn a_replayed_final_message_is_refused() {
        let users = rfc_users();
        let (second, _) = client_first(
            Mechanism::ScramSha256,
            &users,
            "another-server-nonce",
            RFC_CLIENT_FIRST.as_bytes(),
        )
        .expect("first");
        let e = client_final(&second, RFC_CLIENT_FINAL.as_bytes()).expect_err("replay");
        assert_eq!(e, ScramError::Nonce("user".into()));
        assert_eq!(
            e.client_message(),
            "Authentication failed: Invalid client nonce"
        );
    }

    /// librdkafka before 2.1 repeats the client nonce in front of the whole nonce;
    /// Kafka accepts that (it checks the end), and so does brook.
    #[test]
    fn a_nonce_ending_with_this_exchanges_is_accepted() {
        let users = rfc_users();
        let m = Mechanism::ScramSha256;
        let (exchange, first) =
            client_first(m, &users, RFC_SERVER_NONCE, RFC_CLIENT_FIRST.as_bytes()).expect("first");
        let server_first = String::from_utf8(first).expect("utf8");
        let whole = server_first
            .split(',')
            .next()
            .expect("r=")
            .trim_start_matches("r=");
        let doubled = format!("rOprNGfwEbeRWgbNEkqO{whole}");
        let last = client_final_with_nonce(m, "pencil", RFC_CLIENT_FIRST, &server_first, &doubled);
        assert!(client_final(&exchange, last.as_bytes()).is_ok());
        // Still refused: this exchange's nonce followed by anything.
        let appended = format!("{whole}x");
        let last = client_final_with_nonce(m, "pencil", RFC_CLIENT_FIRST, &server_first, &appended);
        assert_eq!(
            client_final(&exchange, last.as_bytes()),
            Err(ScramError::Nonce("user".into()))
        );
    }

    #[test]
    fn sasl_names_decode_escapes() {
        assert_eq!(sasl_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(sasl_name("a=41"), None);
        assert_eq!(sasl_name("a="), None);
        assert_eq!(sasl_name(""), None);
    }
}
