//! Which requests the runner admits, decided from their headers alone (no I/O): the
//! runner's API runs programs, so it must not be reachable from a web page.
//!
//! In order, a request is refused
//! 1. with 403 when its `Host` is not the runner's address: a DNS-rebinding page
//!    reaches 127.0.0.1 under its own name (as Jupyter checks `Host`);
//! 2. with 403 when it carries an `Origin` other than the runner's own: a browser sends
//!    one with every cross-origin request, and the runner sends no CORS headers, so no
//!    page may use it;
//! 3. with 401 without `Authorization: Bearer <token>` (the scheme in any case, RFC 7235
//!    §2.1);
//! 4. with 415 when it has a body (any method but GET, HEAD and OPTIONS) that is not
//!    declared `Content-Type: application/json` (parameters such as `charset` allowed):
//!    `text/plain` and form bodies are what a page can send without asking first.

use std::net::{IpAddr, SocketAddr};

use axum::http::uri::Authority;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};

/// Why a request is refused: the status and a message for the JSON error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

fn refuse(status: StatusCode, message: String) -> Result<(), Refusal> {
    Err(Refusal { status, message })
}

/// Whether `host` (a `Host` header: `name[:port]`) names the runner listening on
/// `listen`: its address, `localhost`, or for a loopback address any loopback address;
/// with its port (80 when none is given). On an unspecified address (`0.0.0.0`, `::`)
/// the runner cannot know its names and the token alone guards it (as Jupyter's
/// `allow_remote_access`).
pub(crate) fn host_allowed(host: &str, listen: SocketAddr) -> bool {
    let Ok(authority) = host.parse::<Authority>() else {
        return false;
    };
    if authority.port_u16().unwrap_or(80) != listen.port() {
        return false;
    }
    if listen.ip().is_unspecified() {
        return true;
    }
    let name = authority.host();
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    // `[::1]` in a Host header.
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip == listen.ip() || (listen.ip().is_loopback() && ip.is_loopback()),
        Err(_) => false,
    }
}

/// Whether `origin` is the runner's own origin, `http://` and the request's `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|rest| rest.trim_end_matches('/').eq_ignore_ascii_case(host))
}

/// Whether a `Content-Type` value is JSON (`application/json`, with parameters).
fn is_json(content_type: &str) -> bool {
    content_type
        .parse::<mime::Mime>()
        .is_ok_and(|m| m.type_() == mime::APPLICATION && m.subtype() == mime::JSON)
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(value: &str) -> Option<&str> {
    value
        .trim()
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim_start())
}

/// Compares in time independent of where the texts differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Steps 1 and 2 of the [module docs](self): the `Host` names the runner listening on
/// `listen`, and an `Origin`, if any, is the runner's own. The dashboard (crate::ui)
/// admits its requests by these too.
pub(crate) fn admit_origin(
    uri: &Uri,
    headers: &HeaderMap,
    listen: SocketAddr,
) -> Result<(), Refusal> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    // HTTP/2 carries the host in the URI's authority instead.
    let host = text(header::HOST)
        .map(str::to_string)
        .or_else(|| uri.authority().map(|a| a.as_str().to_string()));
    let Some(host) = host.filter(|h| host_allowed(h, listen)) else {
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "Host {:?} is not this server's address: use http://{listen} (or localhost)",
                text(header::HOST).unwrap_or("")
            ),
        );
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !same_origin(origin, &host) {
            return refuse(
                StatusCode::FORBIDDEN,
                format!("cross-origin requests are refused (Origin {origin:?})"),
            );
        }
    }
    Ok(())
}

/// Whether the request carries `Authorization: Bearer <token>` (step 3).
pub(crate) fn has_token(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .is_some_and(|given| same(given.as_bytes(), token.as_bytes()))
}

/// Admits a request to the runner listening on `listen` with `token`, or says why not
/// (see the [module docs](self)).
pub(crate) fn admit(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    listen: SocketAddr,
    token: &str,
) -> Result<(), Refusal> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    admit_origin(uri, headers, listen)?;
    if !has_token(headers, token) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            super::RunnerError::Unauthorized.to_string(),
        );
    }
    let has_body = ![Method::GET, Method::HEAD, Method::OPTIONS].contains(method);
    if has_body && !text(header::CONTENT_TYPE).is_some_and(is_json) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "{method} needs a JSON body: send Content-Type: application/json (got {:?})",
                text(header::CONTENT_TYPE).unwrap_or("none")
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    #[test]
    fn the_host_must_name_the_runner() {
        let lo = addr("127.0.0.1:7070");
        for ok in [
            "127.0.0.1:7070",
            "localhost:7070",
            "LocalHost:7070",
            "[::1]:7070",
            "127.0.0.2:7070",
        ] {
            assert!(host_allowed(ok, lo), "{ok}");
        }
        for bad in [
            "evil.example:7070",
            "127.0.0.1:7071",
            "127.0.0.1",
            "",
            "localhost.evil.example:7070",
            "10.0.0.1:7070",
        ] {
            assert!(!host_allowed(bad, lo), "{bad}");
        }
        let lan = addr("10.0.0.5:80");
        assert!(host_allowed("10.0.0.5", lan));
        assert!(host_allowed("localhost:80", lan));
        assert!(!host_allowed("127.0.0.1:80", lan));
        assert!(!host_allowed("evil.example", lan));
        let any = addr("0.0.0.0:7070");
        assert!(host_allowed("myhost.lan:7070", any));
        assert!(!host_allowed("myhost.lan:80", any));
    }

    #[test]
    fn only_json_bodies_same_origins_and_the_token_are_admitted() {
        let listen = addr("127.0.0.1:7070");
        let uri: Uri = "/jobs".parse().expect("uri");
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k.clone(), v.parse().expect("header value"));
            }
            h
        };
        let status = |m: Method, pairs: &[(header::HeaderName, &str)]| {
            admit(&m, &uri, &headers(pairs), listen, "t0k").map_err(|r| r.status.as_u16())
        };
        let host = (header::HOST, "127.0.0.1:7070");
        let auth = (header::AUTHORIZATION, "Bearer t0k");
        let json = (header::CONTENT_TYPE, "application/json; charset=utf-8");
        assert_eq!(status(Method::GET, &[host.clone(), auth.clone()]), Ok(()));
        assert_eq!(
            status(Method::POST, &[host.clone(), auth.clone(), json.clone()]),
            Ok(())
        );
        assert_eq!(status(Method::GET, std::slice::from_ref(&host)), Err(401));
        assert_eq!(
            status(
                Method::GET,
                &[host.clone(), (header::AUTHORIZATION, "Bearer t0")]
            ),
            Err(401)
        );
        assert_eq!(
            status(Method::GET, std::slice::from_ref(&auth)),
            Err(403),
            "no Host"
        );
        let plain = (header::CONTENT_TYPE, "text/plain");
        assert_eq!(
            status(Method::POST, &[host.clone(), auth.clone(), plain]),
            Err(415)
        );
        assert_eq!(
            status(Method::POST, &[host.clone(), auth.clone()]),
            Err(415)
        );
        let evil = (header::ORIGIN, "http://evil.example");
        assert_eq!(
            status(
                Method::POST,
                &[host.clone(), auth.clone(), json.clone(), evil.clone()]
            ),
            Err(403)
        );
        assert_eq!(status(Method::OPTIONS, &[host.clone(), evil]), Err(403));
        assert_eq!(
            status(
                Method::GET,
                &[host.clone(), auth.clone(), (header::ORIGIN, "null")]
            ),
            Err(403)
        );
        let own = (header::ORIGIN, "http://127.0.0.1:7070");
        assert_eq!(status(Method::POST, &[host, auth, json, own]), Ok(()));
    }
}
