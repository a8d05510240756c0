//! A Prometheus text endpoint (`--metrics-addr`): a running job's metrics (`brook
//! run`), and the log's per-partition gauges where this process holds the log (`brook
//! run` in-process, `brook broker`; brook::log_metrics).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use axum::routing::get;
use axum::Router;

/// A running metrics server; it stops when dropped.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    /// Where it listens (with the port it got for port 0).
    pub(crate) addr: SocketAddr,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Serves `GET /metrics` on `addr` from a background thread, answering with what
/// `text` returns at each request (Prometheus text format 0.0.4).
pub(crate) fn serve(
    addr: SocketAddr,
    text: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> Result<MetricsServer> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the metrics server")?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .with_context(|| format!("binding --metrics-addr {addr}"))?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("binding --metrics-addr {addr}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let text = text.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], text()) }
        }),
    );
    std::thread::Builder::new()
        .name("brook-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                let server = axum::serve(listener, app).with_graceful_shutdown(async move {
                    let _ = rx.await;
                });
                if let Err(e) = server.await {
                    tracing::warn!(error = %e, "metrics server failed");
                }
            })
        })
        .context("starting the metrics server thread")?;
    Ok(MetricsServer {
        addr,
        _shutdown: tx,
    })
}
