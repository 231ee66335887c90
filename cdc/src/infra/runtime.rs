//! What the relay and the reassignment worker do alike as processes: serve `/metrics` in the
//! Prometheus text format while they run, and stop cleanly on SIGTERM or Ctrl-C. `ledger
//! serve`'s gauges and `ledger reconcile --every` serve their `/metrics` here too.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::server::{Bounds, ConnectionStats, METRICS_BOUNDS};

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
/// address is taken. Its connections are bounded as the API's are ([`METRICS_BOUNDS`]): a
/// client that sends no request for 30 s, or reads none of its answers for 30 s, is cut
/// off, and at most 64 are open at once (see [`super::server`]).
pub async fn serve(address: SocketAddr, router: axum::Router, shutdown: CancellationToken) {
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => {
            info!(%address, "serving /metrics");
            tokio::spawn(serve_on(
                listener,
                router,
                METRICS_BOUNDS,
                Arc::default(),
                shutdown,
            ));
        }
        Err(error) => warn!(%address, %error, "cannot serve /metrics; continuing without it"),
    }
}

/// [`serve`] on a bound `listener`, with `bounds`, its connections counted in `stats`.
async fn serve_on(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    bounds: Bounds,
    stats: Arc<ConnectionStats>,
    shutdown: CancellationToken,
) {
    super::server::serve(
        listener,
        router,
        None,
        bounds,
        stats,
        shutdown.cancelled_owned(),
    )
    .await;
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
    use std::time::Duration;

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Short bounds, for tests: `header` for the head and idleness, 500 ms for writes.
    fn bounds(header: Duration, max_connections: usize) -> Bounds {
        Bounds {
            header_read_timeout: header,
            write_stall_timeout: Duration::from_millis(500),
            max_connections,
            cap_remedy: "a test's cap",
        }
    }

    /// `/metrics` rendering `answer` on a free loopback port with `bounds`, as the relay and
    /// the worker serve it, until the token is cancelled.
    async fn metrics_on(
        bounds: Bounds,
        answer: String,
    ) -> (SocketAddr, Arc<ConnectionStats>, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let stats = Arc::new(ConnectionStats::default());
        let shutdown = CancellationToken::new();
        tokio::spawn(serve_on(
            listener,
            text_router(move || answer.clone()),
            bounds,
            Arc::clone(&stats),
            shutdown.clone(),
        ));
        (address, stats, shutdown)
    }

    /// Reads `stream` until the server closes it, for at most 10 s; what arrived.
    async fn until_closed(name: &str, stream: &mut TcpStream) -> Vec<u8> {
        let mut received = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
                .await
                .unwrap_or_else(|_| {
                    panic!("{name}: the server still holds the connection after 10 s")
                });
        assert!(
            ended.is_ok()
                || ended
                    .as_ref()
                    .is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset),
            "{name}: {ended:?}"
        );
        received
    }

    /// 40 pipelined `GET /metrics` of 256 KiB each (10 MiB, more than loopback's socket
    /// buffers hold) from a client that reads nothing: once the server's writes have waited
    /// the limit, it closes the connection. Read afterwards, the connection ends (a reset,
    /// or the end of what was sent before the close) short of the 40 answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_metrics_client_that_reads_nothing_is_cut_off_after_the_write_stall_timeout() {
        const ANSWER: usize = 256 * 1024;
        const REQUESTS: usize = 40;
        let bounds = bounds(Duration::from_secs(30), 8);
        let (address, _, shutdown) = metrics_on(bounds, "x".repeat(ANSWER)).await;
        let mut client = TcpStream::connect(address).await.unwrap();
        let request = "GET /metrics HTTP/1.1\r\nHost: relay\r\n\r\n".repeat(REQUESTS);
        client.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(bounds.write_stall_timeout * 4).await;
        let received = until_closed("a client that reads nothing", &mut client).await;
        assert!(
            received.len() < ANSWER * REQUESTS,
            "all {} bytes arrived: nothing was cut off",
            received.len()
        );
        shutdown.cancel();
    }

    /// Issue 50, item 10: `/metrics` (axum::serve) kept for ever a connection that sent
    /// nothing, half a request head, or nothing more after its answer. Each is now closed
    /// once the head's timeout passed, as the API's are; the one that asked first got its
    /// answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_and_slow_metrics_clients_are_cut_off_after_the_head_timeout() {
        let (address, stats, shutdown) =
            metrics_on(bounds(Duration::from_millis(500), 8), "ra_up 1\n".into()).await;
        let mut silent = TcpStream::connect(address).await.unwrap();
        let mut half = TcpStream::connect(address).await.unwrap();
        half.write_all(b"GET /metrics HTTP/1.1\r\nHost: re")
            .await
            .unwrap();
        let mut idle = TcpStream::connect(address).await.unwrap();
        idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: relay\r\n\r\n")
            .await
            .unwrap();
        let received = until_closed("a client idle after its answer", &mut idle).await;
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("ra_up 1\n"), "{text}");
        until_closed("a client that sends nothing", &mut silent).await;
        let received = until_closed("a client that sends half a head", &mut half).await;
        let text = String::from_utf8_lossy(&received);
        assert!(!text.contains("ra_up"), "half a head was answered: {text}");
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while stats.open() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(closed.is_ok(), "{} connections still open", stats.open());
        shutdown.cancel();
    }

    /// Issue 50, item 10: `/metrics` took any number of connections. With the cap at 2 and
    /// two clients that hold their connections, a third client's request waits in the
    /// listen backlog, unanswered, the cap counted as reached and never more than two
    /// open; once one of the two goes, the third is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_third_metrics_client_waits_for_a_place_with_the_cap_at_two() {
        let (address, stats, shutdown) =
            metrics_on(bounds(Duration::from_secs(30), 2), "ra_up 1\n".into()).await;
        let first = TcpStream::connect(address).await.unwrap();
        let _second = TcpStream::connect(address).await.unwrap();
        let full = tokio::time::timeout(Duration::from_secs(10), async {
            while stats.open() < 2 || stats.cap_reached() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            full.is_ok(),
            "open {}, cap reached {}",
            stats.open(),
            stats.cap_reached()
        );
        let mut third = TcpStream::connect(address).await.unwrap();
        third
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut byte = [0; 1];
        let early = tokio::time::timeout(Duration::from_secs(1), third.read(&mut byte)).await;
        assert!(
            early.is_err(),
            "the third client was answered while two held the cap: {early:?}"
        );
        assert_eq!(stats.open(), 2, "the cap holds");
        drop(first);
        let received = until_closed("the third client", &mut third).await;
        let text = String::from_utf8_lossy(&received);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(stats.open() <= 2, "open {}", stats.open());
        shutdown.cancel();
    }
}
