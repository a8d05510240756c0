//! A running `brook`'s Prometheus endpoint (`--metrics-addr`): a free address to give
//! it, its `/metrics` body over a real HTTP request, and samples read from that body.

use std::io::{Read, Write};
use std::net::TcpStream;

/// An address on a free local port, for `--metrics-addr`.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    l.local_addr().expect("its address").to_string()
}

/// The body of `GET /metrics` at `addr`; `None` while nothing answers there.
pub fn scrape_metrics(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the Prometheus sample whose name and labels start with `series` (e.g.
/// `brook_late_records_total{operator="paid"`), summed over the subtasks.
pub fn metric(body: &str, series: &str) -> Option<f64> {
    let values: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The smallest value of the Prometheus samples whose name and labels start with
/// `series` (e.g. `brook_watermark_ms{operator="counts"`), over the subtasks: a
/// watermark every subtask has reached.
pub fn metric_min(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .reduce(f64::min)
}
