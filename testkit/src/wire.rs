//! Raw Kafka requests over a blocking socket, for tests that must send exactly the
//! bytes they mean (the same request twice, a request to a restarted broker) rather
//! than what a client library decides to send.

use std::io::{Read, Write};
use std::net::TcpStream;

use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

/// One request frame: size prefix, request header of `api` v`version`, and `body`.
///
/// # Panics
/// If the body does not encode at `version` (a test bug).
pub fn frame(api: ApiKey, version: i16, correlation_id: i32, body: &impl Encodable) -> Vec<u8> {
    let mut buf = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api.request_header_version(version))
        .expect("request header");
    body.encode(&mut buf, version).expect("request body");
    let size = i32::try_from(buf.len()).expect("a small frame");
    let mut frame = size.to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    frame
}

/// Sends `frame` (of `api` v`version`) and reads the response to it.
///
/// # Panics
/// If the connection fails or the response does not decode (a test failure).
pub fn round_trip<T: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    frame: &[u8],
) -> T {
    stream.write_all(frame).expect("send the request");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("response size");
    let mut buf = vec![0u8; usize::try_from(i32::from_be_bytes(size)).expect("a size")];
    stream.read_exact(&mut buf).expect("response");
    let mut buf = bytes::Bytes::from(buf);
    ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .expect("response header");
    T::decode(&mut buf, version).expect("response body")
}

/// Sends `body` as request `api` v`version` and reads the response.
///
/// # Panics
/// As [`round_trip`].
pub fn request<T: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &impl Encodable,
) -> T {
    round_trip(stream, api, version, &frame(api, version, 1, body))
}
