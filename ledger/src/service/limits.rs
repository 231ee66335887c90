//! What one client may hold of the service: how long a request body may take to arrive,
//! how long an answer may wait for the client to read it, and how many connections are
//! open at once.
//!
//! Each bound covers a way a slow client could hold resources without end. A head has its
//! own 30 s limit in hyper, which also closes a connection idle between requests. A body
//! gets [`Limits::body_read_timeout`] (see [`super::deadline`]). Those two bound how long any
//! one connection can be held without sending a complete request. An answer the client
//! does not read gets [`Limits::write_stall_timeout`] (see
//! [`ra_ledger_cdc::infra::write_stall`]): without it, a client that asks and never reads
//! holds its connection for good, since hyper has no write timeout. The connection cap
//! bounds how many connections exist at once, so the file descriptors and memory a crowd
//! of slow clients can take are bounded too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default of [`Limits::body_read_timeout`].
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`Limits::write_stall_timeout`].
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration =
    ra_ledger_cdc::infra::write_stall::DEFAULT_WRITE_STALL_TIMEOUT;
/// Default of [`Limits::max_connections`]: far below the serve unit's `LimitNOFILE=65536`,
/// far above what the pool of 16 database connections can keep busy.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_024;
/// Fewest seconds between two log lines saying the cap is reached.
const CAP_REPORT_EVERY: Duration = Duration::from_secs(10);

/// The bounds [`super::serve`] holds every connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest a request body may take to arrive in full, from the end of its head. The
    /// request is then answered 408 and its connection closed. A total bound, not an idle
    /// one: a client that sends a byte now and then is cut off as well.
    pub body_read_timeout: Duration,
    /// Longest the connection's writes may wait for the client to read, without a byte
    /// taken, before the connection is closed. An idle bound, not a total one: a large
    /// answer over a slow link takes as long as it takes while the client reads.
    pub write_stall_timeout: Duration,
    /// Most connections open at once (TLS handshakes included). When all are taken, the
    /// service stops accepting; new connections wait in the kernel's listen backlog and are
    /// taken in order as connections close.
    ///
    /// Why wait rather than answer 503: accepting a connection only to refuse it spends the
    /// descriptor and a write that the cap is there to save, and a client that is refused has
    /// to retry on its own. A waiting client is served as soon as a place frees. A place
    /// frees within the head, body and write-stall timeouts, however slow the clients holding
    /// it (unless a client reads its answer just fast enough, and then it is served). A full
    /// backlog makes the kernel drop new SYNs, and clients retry them.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Counts of the connection cap, cheap to read from any task.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    open: AtomicU64,
    cap_reached: AtomicU64,
}

impl ConnectionStats {
    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// How many times the service, ready to accept the next connection, found every place
    /// taken and had to wait for one.
    pub fn cap_reached(&self) -> u64 {
        self.cap_reached.load(Ordering::Relaxed)
    }
}

/// The places for open connections: one permit per connection, held by its task.
#[derive(Debug)]
pub(super) struct ConnectionSlots {
    permits: Arc<Semaphore>,
    max: usize,
    stats: Arc<ConnectionStats>,
    last_report: Option<Instant>,
    unreported: u64,
}

/// A place taken for the next connection, before the accept it waits for: given back when
/// dropped, and counted as open only once [`Place::occupy`] made it a [`Slot`] (an idle
/// service has no connection open, though one place waits).
#[derive(Debug)]
pub(super) struct Place {
    permit: OwnedSemaphorePermit,
    stats: Arc<ConnectionStats>,
}

impl Place {
    /// A connection was accepted into this place: it counts as open until the slot drops.
    pub(super) fn occupy(self) -> Slot {
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        Slot {
            _permit: self.permit,
            stats: self.stats,
        }
    }
}

/// An accepted connection's place, given back when it is dropped.
#[derive(Debug)]
pub(super) struct Slot {
    _permit: OwnedSemaphorePermit,
    stats: Arc<ConnectionStats>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionSlots {
    pub(super) fn new(max: usize, stats: Arc<ConnectionStats>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            stats,
            last_report: None,
            unreported: 0,
        }
    }

    /// A place for the next connection, waiting (and saying so) while all are taken.
    pub(super) async fn next(&mut self) -> Place {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.report_full();
                match self.permits.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    // Never closed: it lives as long as `self`.
                    Err(_) => return std::future::pending().await,
                }
            }
        };
        Place {
            permit,
            stats: self.stats.clone(),
        }
    }

    /// Counts a wait for a place, and logs it at most every [`CAP_REPORT_EVERY`]: a crowd of
    /// clients hitting the cap gives one line per interval, not one per connection.
    fn report_full(&mut self) {
        self.stats.cap_reached.fetch_add(1, Ordering::Relaxed);
        self.unreported += 1;
        let now = Instant::now();
        if self
            .last_report
            .is_some_and(|last| now.duration_since(last) < CAP_REPORT_EVERY)
        {
            return;
        }
        tracing::warn!(
            max_connections = self.max,
            times = self.unreported,
            "connection cap reached: new connections wait in the listen backlog until one \
             closes. Many slow or idle clients? Raise max_connections (LEDGER_MAX_CONNECTIONS) \
             only within the process's file descriptor limit"
        );
        self.last_report = Some(now);
        self.unreported = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_cap_waits_until_a_connection_closes_and_counts_the_wait() {
        let stats = Arc::new(ConnectionStats::default());
        let mut slots = ConnectionSlots::new(2, stats.clone());
        let first = slots.next().await;
        let second = slots.next().await;
        assert_eq!(
            stats.open(),
            0,
            "a place waiting for its accept is not open"
        );
        let first = first.occupy();
        let _second = second.occupy();
        assert_eq!((stats.open(), stats.cap_reached()), (2, 0));
        let third = tokio::time::timeout(Duration::from_millis(50), slots.next()).await;
        assert!(third.is_err(), "no third place while two are taken");
        assert_eq!(stats.cap_reached(), 1);
        drop(first);
        assert_eq!(stats.open(), 1);
        let third = slots.next().await.occupy();
        assert_eq!((stats.open(), stats.cap_reached()), (2, 1));
        drop(third);
        drop(slots.next().await);
        assert_eq!(
            stats.open(),
            1,
            "a place dropped unoccupied leaves the count alone"
        );
    }
}
