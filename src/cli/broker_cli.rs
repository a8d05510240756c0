//! `brook broker`: serves the log of a data directory over the Kafka protocol.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use brook::log::{Log, LogError};
use brook_broker::{address_file, read_address, write_address, BrokerConfig, Server};
use clap::Args;

/// Arguments of `brook broker`.
#[derive(Debug, Args)]
pub(crate) struct BrokerArgs {
    /// Where Kafka clients connect (port 0: any free port; the address is written to
    /// `<data-dir>/broker.addr`). Loopback only until SASL authentication is supported.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// Create a topic a client asks for in a Metadata request (Kafka's
    /// `auto.create.topics.enable`; off by default in brook).
    #[arg(long)]
    auto_create_topics: bool,
    /// Partitions of topics created without a count (Kafka's `num.partitions`).
    #[arg(long, default_value_t = 1)]
    default_partitions: u32,
    /// The shortest `session.timeout.ms` a consumer group member may ask for (ms;
    /// Kafka's `group.min.session.timeout.ms`).
    #[arg(long, default_value_t = 6000)]
    group_min_session_timeout_ms: i64,
}

/// Serves until SIGINT or SIGTERM. `open_log` takes the data directory's lock, as
/// `brook run` does: while the broker serves, other brook processes cannot open it.
pub(crate) fn broker(
    args: BrokerArgs,
    data_dir: &Path,
    open_log: impl FnOnce() -> Result<Log>,
) -> Result<()> {
    let config = BrokerConfig {
        listen: args.listen,
        auto_create_topics: args.auto_create_topics,
        default_partitions: args.default_partitions,
        group_min_session_timeout_ms: args.group_min_session_timeout_ms,
    };
    // A bad address is refused before the data directory is touched.
    config.validate().context("brook broker")?;
    let log = open_log()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let address_file = address_file(data_dir);
    let served = rt.block_on(async {
        let server = Server::bind(&config, log.clone()).await?;
        let addr = server.local_addr();
        write_address(data_dir, addr)
            .with_context(|| format!("writing {}", address_file.display()))?;
        eprintln!(
            "brook broker serving {} on {addr} (Kafka protocol)",
            data_dir.display()
        );
        tokio::select! {
            r = server.run() => r.context("brook broker"),
            r = stop_signal() => r,
        }
    });
    // The address is stale once the broker stops serving.
    let _ = std::fs::remove_file(&address_file);
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    log.close().context("closing the log")?;
    served
}

/// `e`, and when it is the data directory's lock held by a live `brook broker` (its
/// address file names a port that accepts connections), the broker's address and what
/// to do: a user who ran `brook run` beside a broker otherwise reads only "in use by
/// another brook process" (the log commands go through the broker: cli::log_access). The [`LogError`] stays in the chain (the runner's
/// children look for [`LogError::Locked`]).
pub(crate) fn name_the_broker(e: LogError, data_dir: &Path) -> anyhow::Error {
    let locked = matches!(e, LogError::Locked { .. });
    let e = anyhow::Error::new(e);
    // A broker killed with SIGKILL leaves its address file behind: only a port that
    // answers is named.
    match read_address(data_dir).filter(|addr| {
        locked && TcpStream::connect_timeout(addr, Duration::from_millis(500)).is_ok()
    }) {
        Some(addr) => e.context(format!(
            "brook broker serves this data directory on {addr}: brook topic, produce, consume \
             and group go through it, as any Kafka client (kcat -b {addr} -L); stop the \
             broker to use it from brook run"
        )),
        None => e,
    }
}

async fn stop_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT"),
        _ = term.recv() => Ok(()),
    }
}
