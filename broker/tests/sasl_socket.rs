//! SASL through a real socket, as a client would speak it: SaslHandshake v1 +
//! SaslAuthenticate and SaslHandshake v0 + bare token frames both authenticate and
//! then Metadata is served; a Metadata request before authentication closes that
//! connection unanswered while others are served, as does a frame over 512 KiB; an
//! unsupported mechanism gets the list and a closed connection; a wrong password gets SASL_AUTHENTICATION_FAILED and
//! a closed connection.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use brook_broker::sasl::{Mechanism, ScramCredential, Users};
use brook_broker::{BrokerConfig, Server};
use brook_log::{Log, LogOptions};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn frame(api: ApiKey, version: i16, body: &impl Encodable) -> Bytes {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("sasl-test")))
        .encode(&mut buf, api.request_header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("body");
    sized(&buf)
}

fn sized(bytes: &[u8]) -> Bytes {
    let mut frame = BytesMut::new();
    frame.put_i32(i32::try_from(bytes.len()).expect("small"));
    frame.put_slice(bytes);
    frame.freeze()
}

/// The next frame's bytes, or `None` when the broker closed the connection.
async fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let size = stream.read_i32().await.ok()?;
    let mut buf = vec![0u8; usize::try_from(size).expect("a size")];
    stream.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

async fn call<R: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &impl Encodable,
) -> Option<R> {
    stream.write_all(&frame(api, version, body)).await.ok()?;
    let mut buf = read_frame(stream).await?;
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .expect("response header");
    assert_eq!(header.correlation_id, 7);
    Some(R::decode(&mut buf, version).expect("response"))
}

async fn metadata(stream: &mut TcpStream) -> Option<MetadataResponse> {
    call(stream, ApiKey::Metadata, 9, &MetadataRequest::default()).await
}

/// The client's final message for `password` (RFC 5802 §3).
fn client_final(m: Mechanism, password: &str, first_bare: &str, server_first: &[u8]) -> Vec<u8> {
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

async fn serve() -> (
    tempfile::TempDir,
    tokio::task::JoinHandle<()>,
    std::net::SocketAddr,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    let mut users = Users::default();
    for m in Mechanism::ALL {
        users
            .set(
                "alice",
                m,
                ScramCredential::derive(m, b"pw", vec![5; 16], 4096),
            )
            .expect("name");
    }
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        sasl_users: Some(Arc::new(users)),
        ..BrokerConfig::default()
    };
    let server = Server::bind(&config, log).await.expect("bind");
    let addr = server.local_addr();
    let serving = tokio::spawn(async move {
        let _ = server.run().await;
    });
    (dir, serving, addr)
}

async fn handshake(
    stream: &mut TcpStream,
    mechanism: &'static str,
    version: i16,
) -> SaslHandshakeResponse {
    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    call(stream, ApiKey::SaslHandshake, version, &request)
        .await
        .expect("handshake answer")
}

async fn authenticate(stream: &mut TcpStream, token: Vec<u8>) -> Option<SaslAuthenticateResponse> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
    call(stream, ApiKey::SaslAuthenticate, 2, &request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_v1_and_sasl_authenticate_then_requests_are_served() {
    let (_dir, serving, addr) = serve().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let answer = handshake(&mut stream, "SCRAM-SHA-256", 1).await;
    assert_eq!(answer.error_code, 0);
    let bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
    let first = authenticate(&mut stream, format!("n,,{bare}").into_bytes())
        .await
        .expect("server-first");
    assert_eq!(first.error_code, 0);
    let last = authenticate(
        &mut stream,
        client_final(Mechanism::ScramSha256, "pw", bare, &first.auth_bytes),
    )
    .await
    .expect("server-final");
    assert_eq!(last.error_code, 0);
    assert!(last.auth_bytes.starts_with(b"v="));
    assert!(metadata(&mut stream).await.is_some());
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_v0_takes_bare_tokens() {
    let (_dir, serving, addr) = serve().await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(
        handshake(&mut stream, "SCRAM-SHA-512", 0).await.error_code,
        0
    );
    let bare = "n=alice,r=abc";
    stream
        .write_all(&sized(format!("n,,{bare}").as_bytes()))
        .await
        .expect("send");
    let first = read_frame(&mut stream).await.expect("server-first");
    assert!(first.starts_with(b"r=abc"));
    let last = client_final(Mechanism::ScramSha512, "pw", bare, &first);
    stream.write_all(&sized(&last)).await.expect("send");
    let last = read_frame(&mut stream).await.expect("server-final");
    assert!(last.starts_with(b"v="));
    assert!(metadata(&mut stream).await.is_some());
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_close_only_their_connection() {
    let (_dir, serving, addr) = serve().await;
    let mut bystander = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(
        handshake(&mut bystander, "SCRAM-SHA-256", 1)
            .await
            .error_code,
        0
    );

    // Metadata before authentication: no answer, the connection is closed.
    let mut early = TcpStream::connect(addr).await.expect("connect");
    assert!(metadata(&mut early).await.is_none());

    // A frame over 512 KiB before authentication (Kafka's sasl.server.max.receive.size):
    // closed without reading it.
    let mut big = TcpStream::connect(addr).await.expect("connect");
    big.write_all(&(1i32 << 20).to_be_bytes())
        .await
        .expect("send");
    let closed =
        tokio::time::timeout(std::time::Duration::from_secs(5), read_frame(&mut big)).await;
    assert!(matches!(closed, Ok(None)), "not closed within 5 s");

    // An unsupported mechanism: the list, then closed.
    let mut plain = TcpStream::connect(addr).await.expect("connect");
    let answer = handshake(&mut plain, "PLAIN", 1).await;
    assert_eq!(answer.error_code, 33); // UNSUPPORTED_SASL_MECHANISM
    let names: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(read_frame(&mut plain).await.is_none());

    // A wrong password: SASL_AUTHENTICATION_FAILED, nothing else, closed.
    let mut wrong = TcpStream::connect(addr).await.expect("connect");
    handshake(&mut wrong, "SCRAM-SHA-256", 1).await;
    let bare = "n=alice,r=xyz";
    let first = authenticate(&mut wrong, format!("n,,{bare}").into_bytes())
        .await
        .expect("server-first");
    let failed = authenticate(
        &mut wrong,
        client_final(Mechanism::ScramSha256, "not-pw", bare, &first.auth_bytes),
    )
    .await
    .expect("an answer");
    assert_eq!(failed.error_code, 58); // SASL_AUTHENTICATION_FAILED
    assert_eq!(
        failed.error_message.as_ref().map(|m| m.as_str()),
        Some("Authentication failed: Invalid user credentials")
    );
    assert!(failed.auth_bytes.is_empty());
    assert!(metadata(&mut wrong).await.is_none());

    // The bystander finishes its exchange and is served.
    let bare = "n=alice,r=123";
    let first = authenticate(&mut bystander, format!("n,,{bare}").into_bytes())
        .await
        .expect("server-first");
    let last = authenticate(
        &mut bystander,
        client_final(Mechanism::ScramSha256, "pw", bare, &first.auth_bytes),
    )
    .await
    .expect("server-final");
    assert_eq!(last.error_code, 0);
    assert!(metadata(&mut bystander).await.is_some());
    serving.abort();
}
