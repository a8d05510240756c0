//! Raw HTTP/1.1 requests, for tests that must send what a client library would not
//! (a foreign `Host`, any `Origin`, a cookie by hand) and read every answer header.

use std::io::{Read, Write};
use std::net::TcpStream;

/// Sends `request` (the whole HTTP/1.1 text; it should say `Connection: close`) to
/// `url` (`http://host:port`) and answers its status and the whole answer text.
pub fn raw_request(url: &str, request: &str) -> (u16, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(addr).expect("connect to the server");
    s.write_all(request.as_bytes()).expect("send the request");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read the answer");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// The value of header `name` (any case) in an answer's text.
pub fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// An answer's body.
pub fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}
