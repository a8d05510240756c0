//! The dashboard's one-time links and browser sessions, as a state machine over
//! injected times (no clock, no randomness inside: the caller passes both).
//!
//! A browser never sees the API token. `brook ui` (or `brook run --ui` at its start)
//! asks for a link token; the browser opens `/ui/login?t=<link token>` once, and the
//! server exchanges it for a session id in an HttpOnly, SameSite=Strict cookie and
//! redirects to a URL without the link token (as Jupyter's token login, which then
//! drops the token from the address bar). A link works once and for
//! [`LINK_TTL_MS`]; a session lasts [`SESSION_TTL_MS`].
//!
//! Each session has a CSRF token (OWASP's synchronizer token pattern): the server
//! writes it into the pages it renders for the session, and a state-changing request
//! must carry it in the `X-CSRF-Token` header ([`check_action`]); another site can
//! make a browser send the cookie but can neither read the page nor set the header.

use crate::runner::guard::same;

/// How long a one-time link can be used (ms): long enough to copy it into a browser.
pub const LINK_TTL_MS: i64 = 5 * 60 * 1_000;

/// How long a session lasts after its login (ms): a working day, then `brook ui`
/// again.
pub const SESSION_TTL_MS: i64 = 12 * 60 * 60 * 1_000;

/// Links not yet used, and sessions, kept at most; the oldest goes first. Lookups
/// compare every entry in constant time, so the lists stay short.
const MAX_LINKS: usize = 16;
const MAX_SESSIONS: usize = 64;

#[derive(Debug, Clone)]
struct Link {
    token: String,
    expires_ms: i64,
    /// The page the login redirects to (a path of the dashboard).
    target: String,
}

#[derive(Debug, Clone)]
struct Session {
    id: String,
    expires_ms: i64,
    csrf: String,
}

/// The links not yet used and the live sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    links: Vec<Link>,
    sessions: Vec<Session>,
}

impl Sessions {
    /// Registers a one-time link `token` leading to `target`, usable until
    /// `now_ms + LINK_TTL_MS`.
    pub fn add_link(&mut self, token: String, target: String, now_ms: i64) {
        self.links.retain(|l| l.expires_ms > now_ms);
        if self.links.len() == MAX_LINKS {
            self.links.remove(0);
        }
        self.links.push(Link {
            token,
            expires_ms: now_ms + LINK_TTL_MS,
            target,
        });
    }

    /// Uses up the link `token`: when it is known and not expired, starts session
    /// `session` with CSRF token `csrf` and answers the link's target; otherwise
    /// `None` (a link works once).
    pub fn redeem(
        &mut self,
        token: &str,
        session: String,
        csrf: String,
        now_ms: i64,
    ) -> Option<String> {
        self.links.retain(|l| l.expires_ms > now_ms);
        let i = self
            .links
            .iter()
            .position(|l| same(l.token.as_bytes(), token.as_bytes()))?;
        let link = self.links.remove(i);
        self.sessions.retain(|s| s.expires_ms > now_ms);
        if self.sessions.len() == MAX_SESSIONS {
            self.sessions.remove(0);
        }
        self.sessions.push(Session {
            id: session,
            expires_ms: now_ms + SESSION_TTL_MS,
            csrf,
        });
        Some(link.target)
    }

    /// Whether `session` is a live session.
    pub fn is_valid(&self, session: &str, now_ms: i64) -> bool {
        self.sessions
            .iter()
            .any(|s| s.expires_ms > now_ms && same(s.id.as_bytes(), session.as_bytes()))
    }

    /// The CSRF token of a live session.
    pub fn csrf(&self, session: &str, now_ms: i64) -> Option<&str> {
        self.sessions
            .iter()
            .find(|s| s.expires_ms > now_ms && same(s.id.as_bytes(), session.as_bytes()))
            .map(|s| s.csrf.as_str())
    }
}

/// What a state-changing dashboard request (cancel, resume) brings.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActionRequest<'a> {
    /// The CSRF token of its session (`None`: no live session cookie).
    pub session_csrf: Option<&'a str>,
    /// Its `X-CSRF-Token` header.
    pub given_csrf: Option<&'a str>,
    /// Whether it has an `Origin` header (already checked to be the server's own).
    pub has_origin: bool,
    /// Whether its body is declared `application/json`.
    pub json: bool,
}

/// Why a state-changing request is refused: an HTTP status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRefusal {
    /// 401, 403 or 415.
    pub status: u16,
    /// Why.
    pub message: &'static str,
}

/// Admits a state-changing request: a session (the API token alone is for the
/// API's own routes), an `Origin` (browsers send one on every POST), the session's
/// CSRF token in `X-CSRF-Token` and a JSON body (a cross-site form cannot send
/// one without a CORS preflight, which is never answered).
///
/// # Errors
/// The first check that fails, as an [`ActionRefusal`].
pub fn check_action(r: ActionRequest<'_>) -> Result<(), ActionRefusal> {
    let refuse = |status, message| Err(ActionRefusal { status, message });
    let Some(expected) = r.session_csrf else {
        return refuse(401, "no session: open the link `brook ui` prints");
    };
    if !r.has_origin {
        return refuse(403, "a dashboard action needs an Origin header");
    }
    match r.given_csrf {
        Some(given) if same(given.as_bytes(), expected.as_bytes()) => {}
        _ => return refuse(403, "missing or wrong X-CSRF-Token: reload the page"),
    }
    if !r.json {
        return refuse(
            415,
            "a dashboard action's body is JSON (Content-Type: application/json)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_until_it_expires() {
        let mut s = Sessions::default();
        s.add_link("L1".into(), "/ui/jobs/a".into(), 1_000);
        assert!(!s.is_valid("S1", 1_000));
        assert_eq!(
            s.redeem("L1", "S1".into(), "C1".into(), 2_000).as_deref(),
            Some("/ui/jobs/a")
        );
        assert!(s.is_valid("S1", 2_000));
        assert_eq!(
            s.redeem("L1", "S2".into(), "C2".into(), 2_001),
            None,
            "used"
        );
        assert!(!s.is_valid("S2", 2_001));
        assert!(!s.is_valid("S", 2_001), "no prefix match");

        s.add_link("L2".into(), "/".into(), 10_000);
        assert_eq!(
            s.redeem("L2", "S3".into(), "C3".into(), 10_000 + LINK_TTL_MS),
            None,
            "expired"
        );
        assert!(!s.is_valid("S1", 2_000 + SESSION_TTL_MS), "session expired");
    }

    #[test]
    fn the_oldest_links_and_sessions_go_first() {
        let mut s = Sessions::default();
        for i in 0..=MAX_LINKS {
            s.add_link(format!("L{i}"), "/".into(), 0);
        }
        assert_eq!(s.redeem("L0", "S".into(), "C".into(), 0), None);
        for i in 1..=MAX_SESSIONS {
            s.add_link(format!("M{i}"), "/".into(), 0);
            assert!(s
                .redeem(&format!("M{i}"), format!("S{i}"), format!("C{i}"), 0)
                .is_some());
        }
        assert!(
            !s.is_valid("S", 0),
            "the first session was dropped for the 65th"
        );
        assert!(s.is_valid(&format!("S{MAX_SESSIONS}"), 0));
    }

    #[test]
    fn an_action_needs_the_session_origin_csrf_token_and_json() {
        let mut s = Sessions::default();
        s.add_link("L".into(), "/".into(), 0);
        s.redeem("L", "S".into(), "C".into(), 0);
        assert_eq!(s.csrf("S", 1), Some("C"));
        assert_eq!(s.csrf("X", 1), None);
        let ok = ActionRequest {
            session_csrf: s.csrf("S", 1),
            given_csrf: Some("C"),
            has_origin: true,
            json: true,
        };
        assert_eq!(check_action(ok), Ok(()));
        let status = |r| check_action(r).map_err(|e| e.status);
        assert_eq!(
            status(ActionRequest {
                session_csrf: None,
                ..ok
            }),
            Err(401)
        );
        assert_eq!(
            status(ActionRequest {
                has_origin: false,
                ..ok
            }),
            Err(403)
        );
        assert_eq!(
            status(ActionRequest {
                given_csrf: None,
                ..ok
            }),
            Err(403)
        );
        assert_eq!(
            status(ActionRequest {
                given_csrf: Some("c"),
                ..ok
            }),
            Err(403)
        );
        assert_eq!(
            status(ActionRequest {
                given_csrf: Some(""),
                ..ok
            }),
            Err(403)
        );
        assert_eq!(status(ActionRequest { json: false, ..ok }), Err(415));
    }
}
