//! The broker's request frames (broker/src/frame.rs): the size prefix, the request
//! header and the body of every served API at every served version (kafka-protocol's
//! codec, vendored with its pre-allocation capped), and a Produce request's record
//! batches as the broker turns them into the log's records (broker/src/produce.rs).
//!
//! Input: a frame as a client sends it, size prefix first.
//!
//! What must hold: a frame is refused with a `FrameError` (the connection is closed)
//! or decoded, without a panic or an allocation the frame does not pay for.
#![no_main]

use brook_broker::frame::{self, Decoded, Request};
use brook_broker::produce;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let Ok(size) = frame::check_size([data[0], data[1], data[2], data[3]]) else {
        return;
    };
    let body = &data[4..];
    let body = &body[..size.min(body.len())];
    let _ = frame::api_key(body);
    let Ok(Decoded::Request { request, .. }) = frame::parse(Bytes::copy_from_slice(body)) else {
        return;
    };
    if let Request::Produce(p) = request {
        for topic in &p.topic_data {
            for part in &topic.partition_data {
                let _ = produce::decode(part.records.as_ref());
            }
        }
    }
});
