//! The socket shell: accepts connections, reads frames, runs the per-API handlers and
//! writes their responses.
//!
//! Each connection is served in order, one request at a time, as Kafka's broker does
//! per connection. Handlers that may fsync run on tokio's blocking pool; a Produce
//! that will not (the log's fsync policy is not `always`, no transaction) runs on the
//! connection's task, as Kafka's request handler threads append to the page cache
//! directly: the hand-off to the pool cost every request a thread switch. A frame that cannot be served ([`crate::frame::FrameError`])
//! is logged with the peer's address and closes that connection only.
//!
//! With SASL users configured ([`BrokerConfig::sasl_users`]) every connection first
//! authenticates ([`crate::sasl::session`]); until then only ApiVersions,
//! SaslHandshake and SaslAuthenticate are served, and anything else closes it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use brook_core::time::SystemClock;
use brook_log::Log;
use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::describe_configs::ConfigEntry;
use crate::frame::{self, Decoded, Request};
use crate::group::{
    coordinator, delete_groups, membership, offset_delete, offsets, Coordinator, Limits,
};
use crate::metadata::Advertised;
use crate::producers::Producers;
use crate::sasl::{Authenticator, Users};
use crate::transactions::Transactions;
use crate::{
    alter_configs, api_versions, create_partitions, create_topics, delete_topics, describe_configs,
    fetch, incremental_alter_configs, list_offsets, metadata, produce, resume_txn,
};

/// How `brook broker` serves.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Address to listen on (port 0: any free port). Default `127.0.0.1:9092`, Kafka's
    /// port. Any address but loopback needs [`BrokerConfig::sasl_users`].
    pub listen: SocketAddr,
    /// The host clients are told to connect to in Metadata and FindCoordinator
    /// answers (Kafka's `advertised.listeners`); default: the listen address's IP.
    /// Required when listening on the wildcard address (0.0.0.0 or ::), which is
    /// no address a client can connect back to (Kafka refuses to advertise it too).
    pub advertised_host: Option<String>,
    /// The users of SASL SCRAM authentication. `Some`: the listener is Kafka's
    /// `SASL_PLAINTEXT`, every client must authenticate, loopback ones too (Kafka
    /// decides per listener, not per client address). `None`: `PLAINTEXT`, loopback
    /// only.
    pub sasl_users: Option<Arc<Users>>,
    /// Kafka's `auto.create.topics.enable`; brook's default is off
    /// (see [`Advertised::auto_create_topics`]).
    pub auto_create_topics: bool,
    /// Kafka's `num.partitions` (default 1).
    pub default_partitions: u32,
    /// Kafka's `group.min.session.timeout.ms` (default 6000 ms): a JoinGroup with a
    /// shorter session timeout gets INVALID_SESSION_TIMEOUT.
    pub group_min_session_timeout_ms: i64,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            advertised_host: None,
            sasl_users: None,
            auto_create_topics: false,
            default_partitions: 1,
            group_min_session_timeout_ms: Limits::default().min_session_timeout_ms,
        }
    }
}

/// Why the broker cannot serve.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// `listen` is not a loopback address and no SASL users are configured: anyone
    /// who can reach the port could read and write every topic.
    #[error("listen address {0} is not loopback and SASL is not configured: anyone reaching the port could read and write every topic. Add a user with `brook broker user add NAME` (the password from standard input; stored in <data-dir>/users.scram) or pass --sasl-users FILE, or listen on 127.0.0.1")]
    NotLoopback(SocketAddr),
    /// `listen` is the wildcard address and no advertised host is given.
    #[error("listen address {0} is the wildcard address, which clients cannot connect back to: pass --advertised-host (Kafka's advertised.listeners) with the name or address clients reach this machine by")]
    WildcardNotAdvertised(SocketAddr),
    /// `default_partitions` is 0.
    #[error("invalid default_partitions: must be at least 1")]
    NoPartitions,
    /// Binding or accepting failed.
    #[error("listen on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl BrokerConfig {
    /// Checks the configuration.
    ///
    /// # Errors
    /// [`BrokerError::NotLoopback`], [`BrokerError::WildcardNotAdvertised`],
    /// [`BrokerError::NoPartitions`].
    pub fn validate(&self) -> Result<(), BrokerError> {
        if !self.listen.ip().is_loopback() && self.sasl_users.is_none() {
            return Err(BrokerError::NotLoopback(self.listen));
        }
        if self.listen.ip().is_unspecified() && self.advertised_host.is_none() {
            return Err(BrokerError::WildcardNotAdvertised(self.listen));
        }
        if self.default_partitions == 0 {
            return Err(BrokerError::NoPartitions);
        }
        Ok(())
    }
}

/// A bound broker, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    log: Log,
    advertised: Advertised,
    addr: SocketAddr,
    groups: Arc<Coordinator>,
    /// The settings DescribeConfigs reports for this broker.
    settings: Arc<Vec<ConfigEntry>>,
    producers: Arc<ProducerState>,
    sasl_users: Option<Arc<Users>>,
}

/// What every connection shares about producers: idempotent producers' sequences
/// and transactional sessions.
#[derive(Debug)]
struct ProducerState {
    producers: Producers,
    txns: Transactions,
}

impl Server {
    /// Checks `config` and binds its address.
    ///
    /// # Errors
    /// As [`BrokerConfig::validate`], [`BrokerError::Io`].
    pub async fn bind(config: &BrokerConfig, log: Log) -> Result<Self, BrokerError> {
        config.validate()?;
        let io = |source| BrokerError::Io {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let advertised = Advertised {
            host: config
                .advertised_host
                .clone()
                .unwrap_or_else(|| addr.ip().to_string()),
            port: addr.port(),
            auto_create_topics: config.auto_create_topics,
            default_partitions: config.default_partitions,
        };
        // Member ids carry the start time, so a member id of an earlier broker
        // process is never issued again.
        let clock = SystemClock::shared();
        let nonce = clock.now_ms();
        let producers = Arc::new(ProducerState {
            producers: Producers::new(Arc::clone(&clock))
                .above(crate::producers::highest_in_log(&log)),
            txns: Transactions::default(),
        });
        let groups = Arc::new(Coordinator::new(
            Limits {
                min_session_timeout_ms: config.group_min_session_timeout_ms,
                member_id_nonce: format!("{nonce:x}"),
                ..Limits::default()
            },
            clock,
        ));
        Ok(Server {
            listener,
            log,
            advertised,
            addr,
            groups,
            settings: Arc::new(describe_configs::broker_entries(config)),
            producers,
            sasl_users: config.sasl_users.clone(),
        })
    }

    /// The address bound (with the port chosen for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The consumer groups of Kafka's classic protocol this server coordinates: their
    /// members live here, not in the log (the dashboard shows them).
    pub fn groups(&self) -> Arc<Coordinator> {
        Arc::clone(&self.groups)
    }

    /// Serves until the task is dropped.
    ///
    /// # Errors
    /// Never returns on its own; accept errors (out of file descriptors) are logged
    /// and retried after a pause.
    pub async fn run(self) -> Result<(), BrokerError> {
        info!(addr = %self.addr, sasl = self.sasl_users.is_some(), "brook broker serving");
        let ticker = Arc::clone(&self.groups);
        let _ticks = AbortOnDrop(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(coordinator::TICK_MS));
            loop {
                every.tick().await;
                ticker.tick();
            }
        }));
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    let log = self.log.clone();
                    let advertised = self.advertised.clone();
                    let groups = Arc::clone(&self.groups);
                    let settings = Arc::clone(&self.settings);
                    let producers = Arc::clone(&self.producers);
                    let auth = match &self.sasl_users {
                        Some(users) => Authenticator::sasl(Arc::clone(users), server_nonce()),
                        None => Authenticator::open(),
                    };
                    tokio::spawn(async move {
                        let shared = Shared {
                            log,
                            advertised,
                            groups,
                            settings,
                            producers,
                        };
                        if let Err(e) = connection(stream, peer, shared, auth).await {
                            debug!(%peer, "connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// What a connection serves from.
struct Shared {
    log: Log,
    advertised: Advertised,
    groups: Arc<Coordinator>,
    /// The settings DescribeConfigs reports for this broker.
    settings: Arc<Vec<ConfigEntry>>,
    producers: Arc<ProducerState>,
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Shared,
    mut auth: Authenticator,
) -> std::io::Result<()> {
    let Shared {
        log,
        advertised,
        groups,
        settings,
        producers,
    } = shared;
    stream.set_nodelay(true)?;
    loop {
        let mut prefix = [0u8; 4];
        if let Err(e) = stream.read_exact(&mut prefix).await {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return Ok(());
            }
            return Err(e);
        }
        let size = match frame::check_size(prefix) {
            Ok(size) => size,
            Err(e) => {
                warn!(%peer, "{e}; closing the connection");
                return Ok(());
            }
        };
        if size > auth.max_frame_bytes() {
            warn!(
                %peer,
                "SASL authentication failed: a frame of {size} bytes before authentication (the limit is {} bytes); closing the connection",
                auth.max_frame_bytes()
            );
            return Ok(());
        }
        let mut body = vec![0u8; size];
        stream.read_exact(&mut body).await?;
        if auth.expects_bare_token() {
            // After SaslHandshake v0 the frame is the token itself.
            let answer = auth.authenticate(&body);
            if let Some(e) = &answer.failure {
                // A bare token has no error field: closing is the only answer.
                warn!(%peer, "SASL authentication failed: {e}; closing the connection");
                return Ok(());
            }
            log_authenticated(peer, answer.authenticated.as_deref());
            match frame::encode_bare_token(&answer.auth_bytes) {
                Ok(bytes) => stream.write_all(&bytes).await?,
                Err(e) => error!("encoding a SASL token: {e}"),
            }
            continue;
        }
        // Before authentication only the SASL requests are even decoded (the codec
        // trusts array counts: a crafted request could exhaust memory).
        if let Some(api) = frame::api_key(&body).filter(|&api| !auth.admits(api)) {
            warn!(
                %peer,
                "SASL authentication failed: unexpected {api:?} request before authentication; closing the connection"
            );
            return Ok(());
        }
        // Set when the answer is the last thing this connection gets.
        let mut close = false;
        let response = match frame::parse(Bytes::from(body)) {
            Ok(Decoded::ApiVersionsTooNew {
                correlation_id,
                version,
            }) => encode(
                correlation_id,
                ApiKey::ApiVersions,
                0,
                &api_versions::handle(version),
            ),
            Ok(Decoded::Request {
                header,
                api,
                request,
            }) => {
                let version = header.request_api_version;
                let id = header.correlation_id;
                match request {
                    Request::ApiVersions => {
                        encode(id, api, version, &api_versions::handle(version))
                    }
                    Request::Metadata(r) => {
                        let (log, adv) = (log.clone(), advertised.clone());
                        let resp =
                            blocking(move || metadata::handle(&r, version, &log, &adv)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::CreateTopics(r) => {
                        let (log, n) = (log.clone(), advertised.default_partitions);
                        let resp = blocking(move || create_topics::handle(&r, &log, n)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::Produce(r) => {
                        let acks = r.acks;
                        let resp = if produce::may_fsync(&r, log.options().fsync) {
                            let (log, p) = (log.clone(), Arc::clone(&producers));
                            blocking(move || produce::handle(&r, &log, &p.producers, &p.txns))
                                .await?
                        } else {
                            produce::handle(&r, &log, &producers.producers, &producers.txns)
                        };
                        // acks=0: the client waits for no answer (Kafka's rule).
                        if acks == 0 {
                            None
                        } else {
                            encode(id, api, version, &resp)
                        }
                    }
                    Request::ListOffsets(r) => {
                        let log = log.clone();
                        let resp =
                            blocking(move || list_offsets::handle(&r, version, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::Fetch(r) => {
                        let resp = long_poll(r, &log).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::FindCoordinator(r) => {
                        let resp = membership::find_coordinator(&r, version, &advertised);
                        encode(id, api, version, &resp)
                    }
                    // Held until the group answers: this task waits, the others go on.
                    Request::JoinGroup(r) => {
                        let client = header.client_id.as_deref().unwrap_or("");
                        let host = peer.ip().to_string();
                        let resp = membership::join_group(&groups, r, version, client, &host).await;
                        encode(id, api, version, &resp)
                    }
                    Request::SyncGroup(r) => {
                        let resp = membership::sync_group(&groups, r, version).await;
                        encode(id, api, version, &resp)
                    }
                    Request::Heartbeat(r) => {
                        encode(id, api, version, &membership::heartbeat(&groups, &r))
                    }
                    Request::LeaveGroup(r) => {
                        let resp = membership::leave_group(&groups, &r, version);
                        encode(id, api, version, &resp)
                    }
                    Request::ListGroups(r) => {
                        let resp = membership::list_groups(&groups, &r, version, &log);
                        encode(id, api, version, &resp)
                    }
                    Request::DescribeGroups(r) => {
                        let resp = membership::describe_groups(&groups, &r, &log);
                        encode(id, api, version, &resp)
                    }
                    Request::OffsetCommit(r) => {
                        // The write may fsync.
                        let (log, groups) = (log.clone(), Arc::clone(&groups));
                        let resp =
                            blocking(move || offsets::offset_commit(&groups, &r, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::DeleteGroups(r) => {
                        // Deleting offsets removes files (fsync of the directory).
                        let (log, groups) = (log.clone(), Arc::clone(&groups));
                        let resp =
                            blocking(move || delete_groups::delete_groups(&groups, &r, &log))
                                .await?;
                        encode(id, api, version, &resp)
                    }
                    Request::DeleteTopics(r) => {
                        let log = log.clone();
                        let resp = blocking(move || delete_topics::handle(&r, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::CreatePartitions(r) => {
                        let log = log.clone();
                        let resp = blocking(move || create_partitions::handle(&r, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::DescribeConfigs(r) => {
                        let resp = describe_configs::handle(&r, &log, &settings);
                        encode(id, api, version, &resp)
                    }
                    // An alter writes the topic's config file (fsync).
                    Request::IncrementalAlterConfigs(r) => {
                        let (log, s) = (log.clone(), Arc::clone(&settings));
                        let resp =
                            blocking(move || incremental_alter_configs::handle(&r, &log, &s))
                                .await?;
                        encode(id, api, version, &resp)
                    }
                    Request::AlterConfigs(r) => {
                        let (log, s) = (log.clone(), Arc::clone(&settings));
                        let resp = blocking(move || alter_configs::handle(&r, &log, &s)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::OffsetDelete(r) => {
                        // The write may fsync.
                        let (log, groups) = (log.clone(), Arc::clone(&groups));
                        let resp =
                            blocking(move || offset_delete::offset_delete(&groups, &r, &log))
                                .await?;
                        encode(id, api, version, &resp)
                    }
                    // The transaction APIs append and fsync (markers, state files).
                    Request::InitProducerId(r) => {
                        let (log, p) = (log.clone(), Arc::clone(&producers));
                        let resp =
                            blocking(move || p.txns.init_producer_id(&r, &log, &p.producers))
                                .await?;
                        encode(id, api, version, &resp)
                    }
                    Request::AddPartitionsToTxn(r) => {
                        let (log, p) = (log.clone(), Arc::clone(&producers));
                        let resp =
                            blocking(move || p.txns.add_partitions(&r, version, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::AddOffsetsToTxn(r) => {
                        let p = Arc::clone(&producers);
                        let resp = blocking(move || p.txns.add_offsets(&r, version)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::TxnOffsetCommit(r) => {
                        let (log, p, g) =
                            (log.clone(), Arc::clone(&producers), Arc::clone(&groups));
                        let resp =
                            blocking(move || p.txns.txn_offset_commit(&r, version, &log, &g))
                                .await?;
                        encode(id, api, version, &resp)
                    }
                    Request::EndTxn(r) => {
                        let (log, p) = (log.clone(), Arc::clone(&producers));
                        // One naming a prepared transaction of the log resumes it.
                        let resp = blocking(move || {
                            resume_txn::end_txn(&r, &log)
                                .unwrap_or_else(|| p.txns.end_txn(&r, version))
                        })
                        .await?;
                        encode(id, api, version, &resp)
                    }
                    Request::OffsetFetch(r) => {
                        let log = log.clone();
                        let resp =
                            blocking(move || offsets::offset_fetch(&r, version, &log)).await?;
                        encode(id, api, version, &resp)
                    }
                    Request::SaslHandshake(r) => {
                        let answer = auth.handshake(&r.mechanism, version);
                        if answer.close {
                            warn!(%peer, mechanism = %r.mechanism.as_str(), "SASL handshake refused (error {}); closing the connection", answer.error_code);
                        }
                        close = answer.close;
                        encode(id, api, version, &answer.response())
                    }
                    Request::SaslAuthenticate(r) => {
                        let answer = auth.authenticate(&r.auth_bytes);
                        if let Some(e) = &answer.failure {
                            warn!(%peer, "SASL authentication failed: {e}; closing the connection");
                        } else if answer.close {
                            warn!(%peer, "SaslAuthenticate before SaslHandshake; closing the connection");
                        }
                        log_authenticated(peer, answer.authenticated.as_deref());
                        close = answer.close;
                        encode(id, api, version, &answer.response())
                    }
                }
            }
            Err(e) => {
                warn!(%peer, "{e}; closing the connection");
                return Ok(());
            }
        };
        if let Some(bytes) = response {
            stream.write_all(&bytes).await?;
        }
        if close {
            linger_close(stream).await;
            return Ok(());
        }
    }
}

/// How long a connection refused after its last answer stays open (ms): Kafka's
/// `connection.failed.authentication.delay.ms` default (KIP-306).
const FAILED_AUTHENTICATION_DELAY_MS: u64 = 100;

/// Closes a connection after its last answer (an authentication failure) the way
/// Kafka does: open for [`FAILED_AUTHENTICATION_DELAY_MS`] or until the client closes,
/// reading (and dropping) what it still sends, then closed. Closing at once made
/// kafka-python report only "socket disconnected", not the authentication error it
/// had been sent; dropping unread input would send a reset.
async fn linger_close(mut stream: TcpStream) {
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ =
        tokio::time::timeout(Duration::from_millis(FAILED_AUTHENTICATION_DELAY_MS), drain).await;
    let _ = stream.shutdown().await;
}

/// This connection's part of the SCRAM nonce: 18 bytes from the OS's random source
/// as 24 characters of URL-safe base64 (printable, no `,`, as RFC 5802 requires).
fn server_nonce() -> String {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut bytes = [0u8; 18];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn log_authenticated(peer: SocketAddr, user: Option<&str>) {
    if let Some(user) = user {
        debug!(%peer, user, "SASL authenticated");
    }
}

/// Stops the group ticker when the server stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A response frame, or `None` after logging a body the codec refused (a bug: the
/// client then times out on this request rather than reading garbage).
fn encode<B: Encodable>(id: i32, api: ApiKey, version: i16, body: &B) -> Option<Bytes> {
    match frame::encode_response(id, api, version, body) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            error!("encoding a {api:?} v{version} response: {e}");
            None
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| std::io::Error::other(format!("request handler failed: {e}")))
}

/// Answers a fetch once it has `min_bytes` of records, a partition has an error, or
/// `max_wait_ms` has passed (Kafka's long polling), waiting on the partitions' end
/// offsets in between rather than polling.
async fn long_poll(
    request: kafka_protocol::messages::FetchRequest,
    log: &Log,
) -> std::io::Result<kafka_protocol::messages::FetchResponse> {
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
    let deadline = Instant::now() + wait;
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let mut watchers = fetch::watch(&request, log);
    let request = std::sync::Arc::new(request);
    let mut expired = false;
    loop {
        let (r, l) = (request.clone(), log.clone());
        let fetched = blocking(move || fetch::handle(&r, &l)).await?;
        if expired || fetched.has_error || fetched.bytes >= min_bytes.max(1) || watchers.is_empty()
        {
            return Ok(fetched.response);
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        match tokio::time::timeout_at(deadline, changed).await {
            Ok((Ok(()), _, _)) => {}
            // A partition closed (topic deleted, broker stopping): answer at the
            // deadline with what there is.
            Ok((Err(_), _, _)) => {
                tokio::time::sleep_until(deadline).await;
                expired = true;
            }
            Err(_) => expired = true,
        }
    }
}
