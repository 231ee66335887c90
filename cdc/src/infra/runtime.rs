//! What the relay and the reassignment worker do alike as processes: serve `/metrics` in the
//! Prometheus text format while they run, and stop cleanly on SIGTERM or Ctrl-C.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::write_stall::{DEFAULT_WRITE_STALL_TIMEOUT, WriteStall};

/// The exit status of a process that refused to go on because only an operator can mend
/// what it found: a lost or invalidated slot, a position from another history, a
/// configuration that cannot work. Restarting it would only repeat the refusal, so the
/// systemd units do not (`RestartPreventExitStatus=78` in `deploy/systemd/`), and the unit
/// shows failed; every other exit is restarted.
///
/// 78 is `EX_CONFIG` of sysexits(3), "something was found in an unconfigured or
/// misconfigured state", which systemd shows as `status=78/CONFIG`. It is apart from what
/// a transient failure exits with: 1 (any other error), 101 (a panic), a signal (a crash,
/// a kill), and from clap's 2 (a usage error).
pub const EXIT_REFUSED: u8 = 78;

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
/// address is taken. A client's connection is closed once the answers it asked for have
/// waited [`DEFAULT_WRITE_STALL_TIMEOUT`] without it reading a byte (see
/// [`super::write_stall`]).
pub async fn serve(address: SocketAddr, router: axum::Router, shutdown: CancellationToken) {
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => {
            info!(%address, "serving /metrics");
            tokio::spawn(serve_on(
                listener,
                router,
                DEFAULT_WRITE_STALL_TIMEOUT,
                shutdown,
            ));
        }
        Err(error) => warn!(%address, %error, "cannot serve /metrics; continuing without it"),
    }
}

/// `axum::serve` on `listener`, each connection's writes bounded by `write_stall`.
async fn serve_on(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    write_stall: Duration,
    shutdown: CancellationToken,
) {
    let listener = WriteStallListener {
        listener,
        limit: write_stall,
    };
    let _ = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
}

/// A TCP listener whose connections are [`WriteStall`]s.
struct WriteStallListener {
    listener: tokio::net::TcpListener,
    limit: Duration,
}

impl axum::serve::Listener for WriteStallListener {
    type Io = WriteStall<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, address) = axum::serve::Listener::accept(&mut self.listener).await;
        (WriteStall::over_tcp(stream, self.limit), address)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// 40 pipelined `GET /metrics` of 256 KiB each (10 MiB, more than loopback's socket
    /// buffers hold) from a client that reads nothing: once the server's writes have waited
    /// the limit, it closes the connection. Read afterwards, the connection ends (a reset,
    /// or the end of what was sent before the close) short of the 40 answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_metrics_client_that_reads_nothing_is_cut_off_after_the_write_stall_timeout() {
        const ANSWER: usize = 256 * 1024;
        const REQUESTS: usize = 40;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let limit = Duration::from_millis(500);
        tokio::spawn(serve_on(
            listener,
            text_router(|| "x".repeat(ANSWER)),
            limit,
            shutdown.clone(),
        ));
        let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = "GET /metrics HTTP/1.1\r\nHost: relay\r\n\r\n".repeat(REQUESTS);
        client.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(limit * 4).await;
        let mut received = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut received))
                .await
                .expect("the server still holds the connection 10 s after the write-stall timeout");
        assert!(
            ended.is_ok()
                || ended
                    .as_ref()
                    .is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset),
            "{ended:?}"
        );
        assert!(
            received.len() < ANSWER * REQUESTS,
            "all {} bytes arrived: nothing was cut off",
            received.len()
        );
        shutdown.cancel();
    }
}
