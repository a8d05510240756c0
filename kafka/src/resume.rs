//! Committing a transaction that brook's log sink prepared in-process, through a
//! brook broker: the Kafka sink's restore of a checkpoint taken with the log
//! in-process (docs/semantics.md §1a, "Jobs on a served log").
//!
//! librdkafka cannot end another session's transaction, so this sends the one request
//! that does, as Flink's `KafkaSink` resumes a transaction (`resumeTransaction`):
//! EndTxn(commit) with the prepared transaction's producer id and epoch, and its
//! sequence in the tagged field
//! [`RESUME_SEQUENCE_TAG`](brook_core::txn_committable::RESUME_SEQUENCE_TAG), over
//! one plain connection to the broker (the `kafka-protocol` crate encodes and
//! decodes; a brook broker is the coordinator of every transactional id). A Kafka
//! cluster does not know the tag: restoring such a checkpoint needs the brook broker
//! that serves the log it was taken on.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use brook_core::txn_committable::{PreparedTxn, RESUME_SEQUENCE_TAG};
use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, EndTxnRequest, EndTxnResponse, ProducerId, RequestHeader, ResponseHeader,
    TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// The EndTxn version sent: the first with tagged fields (KIP-482).
const END_TXN_VERSION: i16 = 3;

/// The largest answer read (bytes): an EndTxn response is a few bytes.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Why a prepared transaction could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// No broker at `bootstrap` answered.
    #[error("connect to the broker at {bootstrap:?}: {source}")]
    Connect {
        /// The address tried.
        bootstrap: String,
        /// Why.
        source: std::io::Error,
    },
    /// The request or its answer did not travel.
    #[error("EndTxn to {bootstrap:?}: {reason}")]
    Exchange {
        /// The broker's address.
        bootstrap: String,
        /// What went wrong.
        reason: String,
    },
    /// The broker refused to commit it.
    #[error(
        "the broker did not commit the prepared transaction {sequence} of transactional id \
         {id:?} (producer id {producer_id}, epoch {epoch}): {error} (the broker's log says why; \
         a prepared transaction is committed only through the brook broker of its log)"
    )]
    Refused {
        /// The transactional id.
        id: String,
        /// Its producer id.
        producer_id: u64,
        /// Its epoch.
        epoch: u16,
        /// Its sequence.
        sequence: u64,
        /// The broker's error.
        error: String,
    },
}

/// The EndTxn(commit) request that resumes `txn`.
pub fn end_txn_request(txn: &PreparedTxn) -> Result<EndTxnRequest, String> {
    let producer_id = i64::try_from(txn.producer_id)
        .map_err(|_| format!("producer id {} out of Kafka's range", txn.producer_id))?;
    let epoch = i16::try_from(txn.epoch)
        .map_err(|_| format!("epoch {} out of Kafka's range", txn.epoch))?;
    let mut r = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(
            txn.transactional_id.clone(),
        )))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(true);
    r.unknown_tagged_fields.insert(
        RESUME_SEQUENCE_TAG,
        Bytes::copy_from_slice(&txn.sequence.to_be_bytes()),
    );
    Ok(r)
}

/// Commits `txn` through the broker at `bootstrap` (the first address of the list
/// that connects), waiting at most `timeout` for each step. Committing a transaction
/// committed before succeeds.
///
/// # Errors
/// [`ResumeError`]: no broker, a broken exchange, or the broker's refusal.
pub fn commit_prepared(
    bootstrap: &str,
    txn: &PreparedTxn,
    timeout: Duration,
) -> Result<(), ResumeError> {
    let exchange = |reason: String| ResumeError::Exchange {
        bootstrap: bootstrap.to_string(),
        reason,
    };
    let request = end_txn_request(txn).map_err(exchange)?;
    let mut stream = connect(bootstrap, timeout)?;
    let io = |e: std::io::Error| exchange(e.to_string());
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let frame = encode(&request).map_err(exchange)?;
    stream.write_all(&frame).map_err(io)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).map_err(io)?;
    let size = usize::try_from(i32::from_be_bytes(size))
        .ok()
        .filter(|&n| n <= MAX_RESPONSE_BYTES)
        .ok_or_else(|| exchange("the answer's size is out of range".into()))?;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).map_err(io)?;
    let response = decode(body).map_err(exchange)?;
    match response.error_code {
        0 => Ok(()),
        code => Err(ResumeError::Refused {
            id: txn.transactional_id.clone(),
            producer_id: txn.producer_id,
            epoch: txn.epoch,
            sequence: txn.sequence,
            error: ResponseError::try_from_code(code)
                .map_or_else(|| format!("error code {code}"), |e| format!("{e:?}")),
        }),
    }
}

fn connect(bootstrap: &str, timeout: Duration) -> Result<TcpStream, ResumeError> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for host in bootstrap.split(',').map(str::trim) {
        let addrs = match host.to_socket_addrs() {
            Ok(a) => a,
            Err(e) => {
                last = e;
                continue;
            }
        };
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
    }
    Err(ResumeError::Connect {
        bootstrap: bootstrap.to_string(),
        source: last,
    })
}

/// The request's frame: size, header, body.
fn encode(request: &EndTxnRequest) -> Result<Vec<u8>, String> {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::EndTxn as i16)
        .with_request_api_version(END_TXN_VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("brook-resume-txn")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, EndTxnRequest::header_version(END_TXN_VERSION))
        .and_then(|()| request.encode(&mut buf, END_TXN_VERSION))
        .map_err(|e| format!("encode: {e}"))?;
    let size = i32::try_from(buf.len()).map_err(|_| "request too large".to_string())?;
    let mut frame = size.to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    Ok(frame)
}

fn decode(body: Vec<u8>) -> Result<EndTxnResponse, String> {
    let mut buf = Bytes::from(body);
    ResponseHeader::decode(&mut buf, EndTxnResponse::header_version(END_TXN_VERSION))
        .and_then(|_| EndTxnResponse::decode(&mut buf, END_TXN_VERSION))
        .map_err(|e| format!("the answer does not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_transaction_and_decodes_as_the_broker_reads_it() {
        let txn = PreparedTxn {
            transactional_id: "copy.out.1".into(),
            producer_id: 7,
            epoch: 3,
            sequence: 42,
        };
        let frame = encode(&end_txn_request(&txn).unwrap()).unwrap();
        let mut body = Bytes::from(frame[4..].to_vec());
        let header =
            RequestHeader::decode(&mut body, EndTxnRequest::header_version(END_TXN_VERSION))
                .unwrap();
        assert_eq!(header.request_api_key, ApiKey::EndTxn as i16);
        let r = EndTxnRequest::decode(&mut body, END_TXN_VERSION).unwrap();
        assert_eq!(r.transactional_id.0.as_str(), "copy.out.1");
        assert_eq!(
            (r.producer_id.0, r.producer_epoch, r.committed),
            (7, 3, true)
        );
        assert_eq!(
            r.unknown_tagged_fields.get(&RESUME_SEQUENCE_TAG).unwrap()[..],
            42u64.to_be_bytes()
        );
    }
}
