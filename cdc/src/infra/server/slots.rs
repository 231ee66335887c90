//! The cap on open connections: one place per connection, taken before the accept it waits
//! for, so that while every place is taken new connections wait in the kernel's listen
//! backlog instead of being accepted only to be refused (see [`super::Bounds::max_connections`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Fewest seconds between two log lines saying the cap is reached.
const CAP_REPORT_EVERY: Duration = Duration::from_secs(10);

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
    /// What the log line saying the cap is reached tells the operator to do.
    remedy: &'static str,
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
    pub(super) fn new(max: usize, remedy: &'static str, stats: Arc<ConnectionStats>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            remedy,
            stats,
            last_report: None,
            unreported: 0,
        }
    }

    /// A place for the next connection, waiting (and saying so) while all are taken.
    pub(super) async fn next(&mut self) -> Place {
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.report_full();
                match Arc::clone(&self.permits).acquire_owned().await {
                    Ok(permit) => permit,
                    // Never closed: it lives as long as `self`.
                    Err(_) => return std::future::pending().await,
                }
            }
        };
        Place {
            permit,
            stats: Arc::clone(&self.stats),
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
             closes. Many slow or idle clients? {}",
            self.remedy
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
        let mut slots = ConnectionSlots::new(2, "raise it", Arc::clone(&stats));
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
