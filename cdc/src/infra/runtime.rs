//! What the relay and the reassignment worker do alike as processes: serve `/metrics` in the
//! Prometheus text format while they run, and stop cleanly on SIGTERM or Ctrl-C.

use std::future::Future;
use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Runs `work` as a process does: `/metrics` (rendered by `render`) on `metrics_listen`
/// when set, and SIGTERM or Ctrl-C cancelling the token `work` is given, which must then
/// finish what it does and return.
pub async fn run_process<E, Work>(
    metrics_listen: Option<SocketAddr>,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    work: impl FnOnce(CancellationToken) -> Work,
) -> Result<(), E>
where
    Work: Future<Output = Result<(), E>>,
{
    let shutdown = CancellationToken::new();
    if let Some(address) = metrics_listen {
        serve(address, text_router(render), shutdown.clone()).await;
    }
    cancel_on_signal(shutdown.clone());
    let outcome = work(shutdown.clone()).await;
    // Stops the metrics server and the signal listener.
    shutdown.cancel();
    outcome
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(terminate) => terminate,
                Err(error) => {
                    warn!(%error, "cannot listen for SIGTERM");
                    return;
                }
            };
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => info!("Ctrl-C: stopping"),
            _ = token.cancelled() => {}
        }
        token.cancel();
    });
}

/// Serves `router` on `address` until `shutdown`; logs and carries on without it when the
/// address is taken.
pub async fn serve(address: SocketAddr, router: axum::Router, shutdown: CancellationToken) {
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => {
            info!(%address, "serving /metrics");
            tokio::spawn(async move {
                let _ = axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await;
            });
        }
        Err(error) => warn!(%address, %error, "cannot serve /metrics; continuing without it"),
    }
}

/// `/metrics` serving whatever `render` returns, and `/healthz`.
pub fn text_router(render: impl Fn() -> String + Clone + Send + Sync + 'static) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let render = render.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4",
                        )],
                        render(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
}

/// The ticks of a background task that runs every `interval` (the first at once) until
/// `shutdown`; a late tick is not made up.
#[derive(Debug)]
pub struct Every {
    ticks: tokio::time::Interval,
    shutdown: CancellationToken,
}

impl Every {
    /// Ticks every `interval` until `shutdown`.
    pub fn new(interval: std::time::Duration, shutdown: CancellationToken) -> Self {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticks, shutdown }
    }

    /// Waits for the next tick: `false` once shut down.
    pub async fn tick(&mut self) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => false,
            _ = self.ticks.tick() => true,
        }
    }
}
