//! Request heads checked before hyper parses them, so that a request hyper would refuse
//! with a bare status line (a malformed header, a head too large) gets the API's JSON error
//! like every other error.
//!
//! hyper answers a request head it cannot parse by itself, `400` or `431` with an empty
//! body, before any handler runs, and offers no hook to shape that answer. So each
//! connection is wrapped in [`Guarded`]: it follows HTTP/1.1 framing on the bytes hyper
//! reads (each request's head, then its body by `Content-Length` or chunks), holds a head
//! back until it is complete, and parses it with the parser hyper uses (httparse). A head
//! that parses is passed on whole; for one that does not, hyper gets the bytes before it and
//! then the end of the stream, finishes the responses it owes, and shuts the connection
//! down, at which point the wrapper writes the JSON error.
//!
//! The server also bounds what slow clients can hold ([`Limits`]): a head must arrive within
//! 30 s, a body within the body-read timeout (answered 408, see [`deadline`]), and at most
//! so many connections are open at once.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

mod deadline;
mod framing;
mod limits;

use framing::Framing;
pub use framing::MAX_HEAD_BYTES;
use limits::ConnectionSlots;
pub use limits::{ConnectionStats, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits};

/// How long a draining shutdown waits for requests in progress.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a client may take to send a request head, and most a connection may sit idle
/// between requests (hyper starts this clock as soon as it waits for a head).
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `service` on `listener` over HTTP/1.1 until `shutdown`, each connection
/// [`Guarded`] and held to `limits`, then lets requests in progress finish for up to
/// [`SHUTDOWN_GRACE`]. `stats` counts the connections.
///
/// This is `axum::serve` with settings it does not expose: half-closed connections are
/// allowed, so a refused head (which ends the stream hyper reads) still gets the answers
/// owed to the requests before it; request heads must arrive within
/// [`HEADER_READ_TIMEOUT`], and bodies within [`Limits::body_read_timeout`]; and at most
/// [`Limits::max_connections`] are open at once.
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
        .header_read_timeout(HEADER_READ_TIMEOUT);
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
                let io = hyper_util::rt::TokioIo::new(Guarded::new(stream));
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
                    let io = hyper_util::rt::TokioIo::new(Guarded::new(stream));
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

/// A connection whose request heads are checked before hyper reads them.
#[derive(Debug)]
pub struct Guarded<S> {
    io: S,
    framing: Framing,
    /// Bytes checked and ready for hyper.
    ready: Vec<u8>,
    given: usize,
    /// The answer to a refused head, written when hyper shuts the connection down.
    refusal: Option<Vec<u8>>,
    refusal_written: usize,
    closed: bool,
}

impl<S> Guarded<S> {
    /// Wraps a connection.
    pub fn new(io: S) -> Self {
        Self {
            io,
            framing: Framing::Head(Vec::new()),
            ready: Vec::new(),
            given: 0,
            refusal: None,
            refusal_written: 0,
            closed: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.given < this.ready.len() {
                let n = (this.ready.len() - this.given).min(out.remaining());
                out.put_slice(&this.ready[this.given..this.given + n]);
                this.given += n;
                return Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.given = 0;
            if this.closed {
                return Poll::Ready(Ok(()));
            }
            let mut scratch = [0u8; 8192];
            let mut read = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The client is done: a head it left unfinished is dropped.
                this.closed = true;
                continue;
            }
            if let Some(refusal) = this.framing.feed(read.filled(), &mut this.ready) {
                tracing::info!(status = refusal.status.as_u16(), reason = %refusal.message,
                    "request head refused before parsing");
                this.refusal = Some(refusal.response());
                this.closed = true;
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// hyper shuts the connection down once it answered everything before a refused head:
    /// the refusal goes out last.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(refusal) = &this.refusal {
            while this.refusal_written < refusal.len() {
                let n = ready!(
                    Pin::new(&mut this.io).poll_write(cx, &refusal[this.refusal_written..])
                )?;
                if n == 0 {
                    break;
                }
                this.refusal_written += n;
            }
            ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
