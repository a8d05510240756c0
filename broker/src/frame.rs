//! Request frames: size checks, header and body decoding, and response encoding, as
//! pure functions the socket loop calls.
//!
//! A frame is a 4-byte big-endian size and that many bytes: the request header (API
//! key, version, correlation id, client id) and the body. The rules are Kafka's
//! broker's: a frame bigger than `socket.request.max.bytes` (100 MiB), an unknown API
//! key, an API or version that is not served, or bytes that do not decode close the
//! connection (there is no way to answer a request that cannot be read); only an
//! ApiVersions request of a too-new version is answered, with UNSUPPORTED_VERSION at
//! version 0 (KIP-511), so clients learn what to use.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AlterConfigsRequest, ApiKey,
    CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, ProduceRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest, SyncGroupRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use thiserror::Error;

use crate::{api_versions, buffers};

/// Kafka's `socket.request.max.bytes` default: the largest request frame read (bytes).
pub const MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Why a frame is not served; the connection is closed after it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// The size prefix is negative or over [`MAX_FRAME_BYTES`].
    #[error("request frame of {size} bytes (the limit is {max} bytes)")]
    BadSize {
        /// The size the frame announced.
        size: i64,
        /// The limit.
        max: usize,
    },
    /// The frame is too short to hold a request header.
    #[error("request frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    /// The API key is not one Kafka defines.
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    /// The API or this version of it is not served (see [`api_versions::SUPPORTED`]).
    #[error("{api:?} version {version} is not served (see ApiVersions)")]
    Unsupported {
        /// The API.
        api: ApiKey,
        /// The version asked for.
        version: i16,
    },
    /// The header or body does not decode.
    #[error("{api:?} v{version} request does not decode: {reason}")]
    Malformed {
        /// The API.
        api: ApiKey,
        /// Its version.
        version: i16,
        /// What the codec said.
        reason: String,
    },
}

/// A decoded request of a served API.
#[derive(Debug)]
pub enum Request {
    /// ApiVersions (the body carries only the client's name).
    ApiVersions,
    /// Metadata.
    Metadata(MetadataRequest),
    /// CreateTopics.
    CreateTopics(CreateTopicsRequest),
    /// Produce.
    Produce(ProduceRequest),
    /// Fetch.
    Fetch(FetchRequest),
    /// ListOffsets.
    ListOffsets(ListOffsetsRequest),
    /// FindCoordinator.
    FindCoordinator(FindCoordinatorRequest),
    /// JoinGroup.
    JoinGroup(JoinGroupRequest),
    /// SyncGroup.
    SyncGroup(SyncGroupRequest),
    /// Heartbeat.
    Heartbeat(HeartbeatRequest),
    /// LeaveGroup.
    LeaveGroup(LeaveGroupRequest),
    /// OffsetCommit.
    OffsetCommit(OffsetCommitRequest),
    /// OffsetFetch.
    OffsetFetch(OffsetFetchRequest),
    /// ListGroups.
    ListGroups(ListGroupsRequest),
    /// DescribeGroups.
    DescribeGroups(DescribeGroupsRequest),
    /// DeleteTopics.
    DeleteTopics(DeleteTopicsRequest),
    /// DeleteGroups.
    DeleteGroups(DeleteGroupsRequest),
    /// CreatePartitions.
    CreatePartitions(CreatePartitionsRequest),
    /// DescribeConfigs.
    DescribeConfigs(DescribeConfigsRequest),
    /// OffsetDelete.
    OffsetDelete(OffsetDeleteRequest),
    /// AlterConfigs (the legacy whole-set form).
    AlterConfigs(AlterConfigsRequest),
    /// IncrementalAlterConfigs.
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    /// InitProducerId.
    InitProducerId(InitProducerIdRequest),
    /// AddPartitionsToTxn.
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    /// AddOffsetsToTxn.
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    /// TxnOffsetCommit.
    TxnOffsetCommit(TxnOffsetCommitRequest),
    /// EndTxn.
    EndTxn(EndTxnRequest),
    /// SaslHandshake (crate::sasl).
    SaslHandshake(SaslHandshakeRequest),
    /// SaslAuthenticate (crate::sasl).
    SaslAuthenticate(SaslAuthenticateRequest),
}

/// A request frame as decoded.
// One per frame, moved once into the handler: boxing the common variant would only add
// an allocation per request for the sake of the rare small one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Decoded {
    /// A request to serve.
    Request {
        /// Its header.
        header: RequestHeader,
        /// The API.
        api: ApiKey,
        /// The request.
        request: Request,
    },
    /// An ApiVersions request of a version newer than served: answer
    /// [`api_versions::handle`] at version 0.
    ApiVersionsTooNew {
        /// The correlation id to answer with.
        correlation_id: i32,
        /// The version asked for.
        version: i16,
    },
}

/// The body size announced by a frame's 4-byte prefix, if acceptable.
///
/// # Errors
/// [`FrameError::BadSize`].
pub fn check_size(prefix: [u8; 4]) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes(prefix);
    match usize::try_from(size) {
        Ok(n) if n <= MAX_FRAME_BYTES => Ok(n),
        _ => Err(FrameError::BadSize {
            size: i64::from(size),
            max: MAX_FRAME_BYTES,
        }),
    }
}

/// The API a frame's header names, read without decoding anything else; `None` for a
/// frame too short or an unknown key (which [`parse`] refuses).
pub fn api_key(frame: &[u8]) -> Option<ApiKey> {
    let key = i16::from_be_bytes([*frame.first()?, *frame.get(1)?]);
    ApiKey::try_from(key).ok()
}

/// Decodes a frame's bytes (without the size prefix).
///
/// # Errors
/// See [`FrameError`]; the connection is then closed.
pub fn parse(mut frame: Bytes) -> Result<Decoded, FrameError> {
    // api_key (i16), api_version (i16), correlation_id (i32): the same in every
    // header version.
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).map_err(|()| FrameError::UnknownApiKey(key))?;
    if !api_versions::is_supported(api, version) {
        if api == ApiKey::ApiVersions && version >= 0 {
            let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            return Ok(Decoded::ApiVersionsTooNew {
                correlation_id,
                version,
            });
        }
        return Err(FrameError::Unsupported { api, version });
    }
    let malformed = |e: anyhow::Error| FrameError::Malformed {
        api,
        version,
        reason: e.to_string(),
    };
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(malformed)?;
    let request = match api {
        ApiKey::ApiVersions => Request::ApiVersions,
        ApiKey::Metadata => Request::Metadata(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::CreateTopics => {
            Request::CreateTopics(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::Produce => Request::Produce(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::Fetch => Request::Fetch(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::ListOffsets => {
            Request::ListOffsets(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::FindCoordinator => {
            Request::FindCoordinator(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::JoinGroup => Request::JoinGroup(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::SyncGroup => Request::SyncGroup(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::Heartbeat => Request::Heartbeat(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::LeaveGroup => Request::LeaveGroup(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::OffsetCommit => {
            Request::OffsetCommit(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::OffsetFetch => {
            Request::OffsetFetch(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::ListGroups => Request::ListGroups(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::DescribeGroups => {
            Request::DescribeGroups(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::DeleteTopics => {
            Request::DeleteTopics(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::DeleteGroups => {
            Request::DeleteGroups(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::CreatePartitions => {
            Request::CreatePartitions(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::DescribeConfigs => {
            Request::DescribeConfigs(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::OffsetDelete => {
            Request::OffsetDelete(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::AlterConfigs => {
            Request::AlterConfigs(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::IncrementalAlterConfigs => {
            Request::IncrementalAlterConfigs(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::InitProducerId => {
            Request::InitProducerId(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::AddPartitionsToTxn => {
            Request::AddPartitionsToTxn(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::AddOffsetsToTxn => {
            Request::AddOffsetsToTxn(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::TxnOffsetCommit => {
            Request::TxnOffsetCommit(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::EndTxn => Request::EndTxn(decode(&mut frame, version).map_err(malformed)?),
        ApiKey::SaslHandshake => {
            Request::SaslHandshake(decode(&mut frame, version).map_err(malformed)?)
        }
        ApiKey::SaslAuthenticate => {
            Request::SaslAuthenticate(decode(&mut frame, version).map_err(malformed)?)
        }
        // is_supported admitted only the APIs above.
        _ => return Err(FrameError::Unsupported { api, version }),
    };
    Ok(Decoded::Request {
        header,
        api,
        request,
    })
}

fn decode<T: Decodable>(buf: &mut Bytes, version: i16) -> anyhow::Result<T> {
    T::decode(buf, version)
}

/// A bare SASL token frame (the size prefix and the token), the answer to a token
/// sent after SaslHandshake v0.
pub fn encode_bare_token(token: &[u8]) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(4 + token.len());
    buf.put_i32(i32::try_from(token.len())?);
    buf.put_slice(token);
    Ok(buf.freeze())
}

/// A response frame: the size prefix, the response header for `api` at `version`,
/// and `body` encoded at `version`.
///
/// The frame is written into one buffer of its exact size (a fetch response carries
/// megabytes of record batches, which a growing buffer copied again at every
/// doubling), this thread's reused one ([`buffers`]).
///
/// # Errors
/// The codec's, for a body that does not fit the version (a bug, logged by the caller).
pub fn encode_response<B: Encodable>(
    correlation_id: i32,
    api: ApiKey,
    version: i16,
    body: &B,
) -> anyhow::Result<Bytes> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api.response_header_version(version);
    let size = header.compute_size(header_version)? + body.compute_size(version)?;
    let mut buf = buffers::take(4 + size);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let size = i32::try_from(buf.len() - 4)?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    let frame = buf.split().freeze();
    buffers::give_back(buf);
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn frame(api: ApiKey, version: i16, body: &impl Encodable) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, api.request_header_version(version))
            .expect("header");
        body.encode(&mut buf, version).expect("body");
        buf.freeze()
    }

    #[test]
    fn decodes_a_served_request() {
        let f = frame(ApiKey::Metadata, 9, &MetadataRequest::default());
        match parse(f) {
            Ok(Decoded::Request { header, api, .. }) => {
                assert_eq!((header.correlation_id, api), (42, ApiKey::Metadata));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_what_is_not_served_or_does_not_decode() {
        let mut unknown = BytesMut::new();
        unknown.put_i16(999);
        unknown.put_slice(&[0; 10]);
        assert_eq!(
            parse(unknown.freeze()).err(),
            Some(FrameError::UnknownApiKey(999))
        );
        let f = frame(ApiKey::Metadata, 11, &MetadataRequest::default());
        assert!(matches!(
            parse(f),
            Err(FrameError::Unsupported { version: 11, .. })
        ));
        let f = frame(ApiKey::DescribeAcls, 1, &MetadataRequest::default());
        assert!(matches!(parse(f), Err(FrameError::Unsupported { .. })));
        assert_eq!(
            parse(Bytes::from_static(&[0, 3])).err(),
            Some(FrameError::TooShort(2))
        );
        // A Metadata v9 header followed by a truncated body.
        let mut f = frame(
            ApiKey::Metadata,
            9,
            &MetadataRequest::default().with_topics(None),
        )
        .to_vec();
        f.truncate(f.len() - 2);
        f.extend_from_slice(&[0x7f]);
        assert!(matches!(
            parse(Bytes::from(f)),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn the_api_key_is_read_from_the_first_two_bytes() {
        let f = frame(ApiKey::Metadata, 9, &MetadataRequest::default());
        assert_eq!(api_key(&f), Some(ApiKey::Metadata));
        assert_eq!(api_key(&[0]), None);
        assert_eq!(api_key(&999i16.to_be_bytes()), None);
    }

    #[test]
    fn sizes_over_the_limit_or_negative_are_refused() {
        assert_eq!(check_size(12i32.to_be_bytes()), Ok(12));
        assert!(check_size(((MAX_FRAME_BYTES + 1) as i32).to_be_bytes()).is_err());
        assert!(check_size((-1i32).to_be_bytes()).is_err());
    }

    #[test]
    fn a_too_new_api_versions_request_is_answered() {
        let f = frame(
            ApiKey::ApiVersions,
            3,
            &kafka_protocol::messages::ApiVersionsRequest::default(),
        );
        let mut f = f.to_vec();
        f[2..4].copy_from_slice(&7i16.to_be_bytes());
        match parse(Bytes::from(f)) {
            Ok(Decoded::ApiVersionsTooNew {
                correlation_id,
                version,
            }) => {
                assert_eq!((correlation_id, version), (42, 7));
            }
            other => panic!("{other:?}"),
        }
        let encoded =
            encode_response(42, ApiKey::ApiVersions, 0, &api_versions::handle(7)).expect("encode");
        let mut body = encoded.slice(8..);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).expect("decode");
        assert_eq!(decoded.api_keys.len(), api_versions::SUPPORTED.len());
    }
}
