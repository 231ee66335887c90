//! The HTTP/1.1 serve loop: `axum::serve` with the bounds it does not expose.
//!
//! The server bounds what slow clients can hold ([`Limits`]): a head must arrive within
//! 30 s, a body within the body-read timeout (answered 408, see [`deadline`]), and at most
//! so many connections are open at once. A head over [`MAX_HEAD_BYTES`] or
//! [`MAX_HEADERS`] lines is refused by hyper with a bare `431`, and a head it cannot parse
//! with a bare `400`; both close the connection before any handler runs. They are the one
//! exception to the API's JSON error shape: hyper offers no hook to shape them, and no
//! conforming client sends such a head.

use std::io;
use std::sync::Arc;

use tokio::net::TcpListener;

mod deadline;
mod limits;

use limits::ConnectionSlots;
pub use limits::{ConnectionStats, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header lines accepted (hyper's default, written out so the docs can name it).
pub const MAX_HEADERS: usize = 100;

/// How long a draining shutdown waits for requests in progress.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a client may take to send a request head, and most a connection may sit idle
/// between requests (hyper starts this clock as soon as it waits for a head).
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `service` on `listener` over HTTP/1.1 until `shutdown`, each connection held to
/// `limits`, then lets requests in progress finish for up to [`SHUTDOWN_GRACE`]. `stats`
/// counts the connections.
///
/// This is `axum::serve` with settings it does not expose: half-closed connections are
/// allowed, so a client that shuts its side down after its request still gets the answer;
/// request heads must arrive within [`HEADER_READ_TIMEOUT`] and fit in [`MAX_HEAD_BYTES`]
/// and [`MAX_HEADERS`]; bodies must arrive within [`Limits::body_read_timeout`]; and at
/// most [`Limits::max_connections`] are open at once.
pub async fn serve(
    listener: TcpListener,
    service: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    let service = service.layer(axum::middleware::from_fn_with_state(
        limits.body_read_timeout,
        deadline::body_deadline,
    ));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .half_close(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut slots = ConnectionSlots::new(limits.max_connections, stats);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Shutdown first; then a place for the connection before accepting it: while none
        // is free, connections wait in the listen backlog (see `Limits::max_connections`).
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            slot = slots.next() => slot,
        };
        let (stream, _) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait, as axum does, not spin.
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection; retrying in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        // Small JSON answers: send them now rather than wait for more.
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        match &tls {
            None => {
                let io = hyper_util::rt::TokioIo::new(stream);
                let connection = graceful.watch(builder.serve_connection(io, service));
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                    drop(slot);
                });
            }
            Some(config) => {
                // The handshake runs on the connection's task: a slow client holds up
                // nobody, and one that never finishes is dropped after TLS_HANDSHAKE.
                let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                let builder = builder.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream =
                        match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(error)) => {
                                return tracing::debug!(%error, "TLS handshake failed");
                            }
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
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in progress after {SHUTDOWN_GRACE:?}; stopping anyway");
    }
    Ok(())
}
