//! A Prometheus text endpoint for a running job (`--metrics-addr`).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use axum::routing::get;
use axum::Router;
use brook::engine::metrics::JobMetrics;

/// A running metrics server; it stops when dropped.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Serves `GET /metrics` on `addr` from a background thread.
pub(crate) fn serve(addr: SocketAddr, metrics: JobMetrics) -> Result<MetricsServer> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the metrics server")?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .with_context(|| format!("binding --metrics-addr {addr}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [("content-type", "text/plain; version=0.0.4")],
                    m.prometheus(),
                )
            }
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
    Ok(MetricsServer { _shutdown: tx })
}
