//! The HTTP/1.1 server of every process of the project: `ledger serve`'s API and console,
//! and the `/metrics` of the relay, the worker, `ledger serve`'s gauges and `ledger
//! reconcile --every`. One accept loop, so that every listener bounds what slow, idle and
//! silent clients can hold the same way ([`Bounds`]).
//!
//! It is `axum::serve` with the settings axum does not expose. Each bound covers a way a
//! client could hold a connection without end:
//! - a request head must arrive within [`Bounds::header_read_timeout`], which is also the
//!   most a connection may sit idle between requests (hyper starts this clock as soon as it
//!   waits for a head): a client that connects and says nothing is closed then;
//! - an answer the client reads none of for [`Bounds::write_stall_timeout`] closes the
//!   connection ([`super::write_stall`]; hyper has no write timeout);
//! - a TLS handshake must finish within [`TLS_HANDSHAKE`];
//! - and at most [`Bounds::max_connections`] are open at once ([`slots`]), so the file
//!   descriptors and memory a crowd of such clients takes are bounded too.
//!
//! A head over [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`] lines is refused by hyper with a bare
//! `431`, and a head it cannot parse with a bare `400`. Half-closed connections are allowed,
//! so a client that shuts its side down after its request still gets the answer. Bounds on
//! a request body are the router's to set (`ledger serve` answers 408, see its `deadline`);
//! `/metrics` reads none.

mod slots;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

pub use slots::ConnectionStats;
use slots::{ConnectionSlots, Slot};

use super::write_stall::{DEFAULT_WRITE_STALL_TIMEOUT, WriteStall};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header lines accepted (hyper's default, written out so the docs can name it).
pub const MAX_HEADERS: usize = 100;
/// Default of [`Bounds::header_read_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a client may take over its TLS handshake.
pub const TLS_HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a draining shutdown waits for requests in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What one client may hold of a server (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Longest a request head may take to arrive, and most a connection may sit idle
    /// between requests.
    pub header_read_timeout: Duration,
    /// Longest the connection's writes may wait for the client to read, without a byte
    /// taken, before the connection is closed. An idle bound, not a total one: a large
    /// answer over a slow link takes as long as it takes while the client reads.
    pub write_stall_timeout: Duration,
    /// Most connections open at once (TLS handshakes included). When all are taken, the
    /// server stops accepting; new connections wait in the kernel's listen backlog and are
    /// taken in order as connections close.
    ///
    /// Why wait rather than answer 503: accepting a connection only to refuse it spends the
    /// descriptor and a write that the cap is there to save, and a client that is refused has
    /// to retry on its own. A waiting client is served as soon as a place frees. A place
    /// frees within the head, body and write-stall timeouts, however slow the clients holding
    /// it (unless a client reads its answer just fast enough, and then it is served). A full
    /// backlog makes the kernel drop new SYNs, and clients retry them.
    pub max_connections: usize,
    /// What the log line saying the cap is reached tells the operator to do.
    pub cap_remedy: &'static str,
}

/// The bounds of every `/metrics`: the API's timeouts, and room for the few clients
/// `/metrics` has (a Prometheus or two, an agent, an operator's `curl`) with plenty to spare,
/// far below the units' `LimitNOFILE=65536`.
pub const METRICS_BOUNDS: Bounds = Bounds {
    header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
    write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
    max_connections: 64,
    cap_remedy: "/metrics takes at most 64 connections, for its scrapers: keep it where only \
                 they reach it (loopback, or behind a firewall)",
};

/// Serves `router` on `listener` over HTTP/1.1, and over TLS with `tls`, until `shutdown`,
/// each connection held to `bounds` and counted in `stats`, then lets requests in progress
/// finish for up to [`SHUTDOWN_GRACE`].
///
/// Under TLS the write bound wraps the socket, under rustls, so it counts what the client
/// reads, not what rustls buffers.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    bounds: Bounds,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections {
        builder: http1_builder(&bounds),
        graceful: hyper_util::server::graceful::GracefulShutdown::new(),
        tls,
        router,
    };
    let mut slots = ConnectionSlots::new(bounds.max_connections, bounds.cap_remedy, stats);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Shutdown first; then a place for the connection before accepting it: while none
        // is free, connections wait in the listen backlog (see `Bounds::max_connections`).
        let place = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            place = slots.next() => place,
        };
        let (stream, _) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait, as axum does, not spin.
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let slot = place.occupy();
        // Small answers: send them now rather than wait for more.
        let _ = stream.set_nodelay(true);
        connections.spawn(
            WriteStall::over_tcp(stream, bounds.write_stall_timeout),
            slot,
        );
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in progress after {SHUTDOWN_GRACE:?}; stopping anyway");
    }
}

/// HTTP/1.1 as every connection is served: half-closed connections allowed, the head held
/// to `bounds` and to [`MAX_HEAD_BYTES`] and [`MAX_HEADERS`].
fn http1_builder(bounds: &Bounds) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .half_close(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    builder
}

/// How an accepted connection is served: over TLS with `tls`, each watched by `graceful`
/// for the draining shutdown.
struct Connections {
    builder: http1::Builder,
    graceful: GracefulShutdown,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: axum::Router,
}

impl Connections {
    /// Serves `stream` on a task of its own, which frees `slot` when the connection ends.
    fn spawn(&self, stream: WriteStall<TcpStream>, slot: Slot) {
        let service = hyper_util::service::TowerToHyperService::new(self.router.clone());
        let Some(config) = &self.tls else {
            let io = hyper_util::rt::TokioIo::new(stream);
            let connection = self
                .graceful
                .watch(self.builder.serve_connection(io, service));
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "HTTP connection ended with an error");
                }
                drop(slot);
            });
            return;
        };
        // The handshake runs on the connection's task: a slow client holds up nobody, and
        // one that never finishes is dropped after TLS_HANDSHAKE.
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
        let builder = self.builder.clone();
        let watcher = self.graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => return tracing::debug!("TLS handshake timed out"),
            };
            let io = hyper_util::rt::TokioIo::new(stream);
            let connection = watcher.watch(builder.serve_connection(io, service));
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTPS connection ended with an error");
            }
            drop(slot);
        });
    }
}
