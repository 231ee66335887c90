//! A bound on how long a connection's writes may make no progress: the write timeout of
//! every HTTP server in the project (`ledger serve`, and `/metrics` of the relay and the
//! worker).
//!
//! hyper bounds how long a request head may take, and `ledger serve` bounds its bodies, but
//! nothing bounds the answer's way out. A client that sends requests and never reads the
//! responses fills the kernel's send queue; hyper's write then waits, and the connection is
//! held for good. [`WriteStall`] wraps the socket and fails a write, a flush or a shutdown
//! that has been waiting for [`WriteStall::new`]'s `limit` without the socket taking a
//! single byte. hyper then closes the connection.
//!
//! What counts as a byte taken is what the kernel reports: a socket becomes writable again
//! only once enough of its queue drained. On its own, Linux lets a socket queue up to
//! `tcp_wmem`'s maximum (4 MiB) of unsent answers and wakes the writer when about half of
//! that is free. So a client reading a steady megabyte a second could look stalled for two
//! seconds, and a client that reads nothing pins 4 MiB of kernel memory.
//! [`WriteStall::over_tcp`] therefore sets `TCP_NOTSENT_LOWAT` to [`UNSENT_LOW_WATER`]: at
//! most that much waits unsent (bytes in flight to a client that reads are not limited, so
//! a fast link is as fast), and the writer wakes each time half of it went out. A client
//! then counts as reading if it takes 64 KiB within the timeout.
//!
//! Why no progress, not a total: a large answer (a proof, the OpenAPI document) over a slow
//! link may take minutes and is fine as long as the client reads. Every write the socket
//! accepts starts the clock again, as nginx's `send_timeout` does ("between two successive
//! write operations, not for the transmission of the whole response"). A client that reads
//! a little now and then, just often enough, still holds its connection; the connection cap
//! (`ledger serve`'s `max_connections`) bounds how many can.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Default write-stall timeout of the project's servers.
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Most unsent bytes a served connection queues in the kernel (`TCP_NOTSENT_LOWAT`).
pub const UNSENT_LOW_WATER: u32 = 128 * 1024;

/// What a write that waited past its limit fails with.
#[derive(Debug, thiserror::Error)]
#[error("the client read nothing for {} ms; connection closed", .0.as_millis())]
pub struct WriteStalled(pub Duration);

/// A connection whose writes fail once they made no progress for `limit`.
#[derive(Debug)]
pub struct WriteStall<Io> {
    inner: Io,
    limit: Duration,
    /// Armed by the first write that waits, disarmed by the next that takes bytes. Made
    /// on the first wait only: a client that reads costs no timer.
    stall: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl WriteStall<tokio::net::TcpStream> {
    /// Wraps an accepted TCP connection, its unsent queue bounded to [`UNSENT_LOW_WATER`]
    /// so that the writer sees a reading client's progress (see the module's doc).
    pub fn over_tcp(stream: tokio::net::TcpStream, limit: Duration) -> Self {
        if let Err(error) = socket2::SockRef::from(&stream).set_tcp_notsent_lowat(UNSENT_LOW_WATER)
        {
            // Still bounded, only more coarsely: the kernel's own wake-ups.
            tracing::debug!(%error, "cannot set TCP_NOTSENT_LOWAT on a connection");
        }
        Self::new(stream, limit)
    }
}

impl<Io> WriteStall<Io> {
    /// Wraps `inner`: its writes may wait at most `limit` without progress.
    pub fn new(inner: Io, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stall: None,
            waiting: false,
        }
    }

    /// A write that took bytes: the clock stops.
    fn progressed(&mut self) {
        self.waiting = false;
    }

    /// A write that waits: the clock starts if it was stopped; past the limit, the error.
    fn waits<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let deadline = Instant::now() + self.limit;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.waiting {
            stall.as_mut().reset(deadline);
            self.waiting = true;
        }
        ready!(stall.as_mut().poll(cx));
        tracing::info!(
            limit_ms = self.limit.as_millis() as u64,
            "a client read none of its answer within the write-stall timeout; closed its connection"
        );
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            WriteStalled(self.limit),
        )))
    }

    /// `polled`, a write's outcome, with the clock kept: bytes taken stop it, a wait starts it.
    fn watch(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    self.progressed();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => self.waits(cx),
        }
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for WriteStall<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for WriteStall<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    // A flush or a shutdown that waits is a write that waits; one that completes says
    // nothing of the client (a socket's flush is always done), so it leaves the clock be.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.waits(cx),
            done => done,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Pending => self.waits(cx),
            done => done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMIT: Duration = Duration::from_millis(200);

    /// A writer whose peer reads nothing: the pipe fills, the next write waits, and fails
    /// with the stall once the limit passed.
    #[tokio::test]
    async fn a_write_the_peer_never_reads_fails_after_the_limit() {
        let (near, _far) = tokio::io::duplex(1024);
        let mut writer = WriteStall::new(near, LIMIT);
        let started = std::time::Instant::now();
        let error = loop {
            if let Err(error) = writer.write_all(&[0; 4096]).await {
                break error;
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(error.get_ref().unwrap().is::<WriteStalled>(), "{error}");
        assert!(started.elapsed() >= LIMIT, "{:?}", started.elapsed());
    }

    /// A peer that reads 1 KiB every quarter of the limit takes 16 KiB through a 1 KiB pipe
    /// in about 4 times the limit: each read restarts the clock, so nothing is cut off.
    #[tokio::test]
    async fn a_slow_peer_that_keeps_reading_gets_everything() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut writer = WriteStall::new(near, LIMIT);
        let reader = tokio::spawn(async move {
            let mut received = 0;
            let mut chunk = [0; 1024];
            loop {
                tokio::time::sleep(LIMIT / 4).await;
                match far.read(&mut chunk).await {
                    Ok(0) | Err(_) => return received,
                    Ok(read) => received += read,
                }
            }
        });
        writer.write_all(&[7; 16 * 1024]).await.unwrap();
        writer.shutdown().await.unwrap();
        drop(writer);
        assert_eq!(reader.await.unwrap(), 16 * 1024);
    }
}
