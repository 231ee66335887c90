//! The watcher's gauges on the service's `/metrics`. Every replica shows them: the one that
//! holds the watcher's lock sets them from its rounds, the others read the watcher's tables
//! at the same pace ([`super::run`]), so an alert on any replica says the same.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ra_ledger_cdc::infra::prometheus::Metric;

/// Committed events older than the lag bound that no event topic holds.
pub const MISSING: Metric = Metric::gauge(
    "ra_watcher_missing_events",
    "Committed events older than the watcher's lag bound that Kafka's event topics do not hold (and the relay did not park): each is a loss until a record of it is read.",
);
/// The watermark.
pub const WATERMARK: Metric = Metric::gauge(
    "ra_watcher_watermark_position",
    "The watcher's watermark: every event at or below this position of events is on Kafka, parked, or counted in ra_watcher_missing_events.",
);
/// Events above the watermark held in memory, and ids read ahead of them.
pub const PENDING: Metric = Metric::gauge(
    "ra_watcher_pending_events",
    "Committed events above the watermark the watcher holds (this replica, while it runs the watcher).",
);
/// When the last round ended.
pub const LAST_ROUND: Metric = Metric::gauge(
    "ra_watcher_last_round_timestamp_seconds",
    "When the watcher's last round ended (Unix seconds, the database's clock).",
);
/// Rescans.
pub const RESCANS: Metric = Metric::counter(
    "ra_watcher_rescans_total",
    "Times the watcher read the event topics again from their start because Kafka lost records it had counted (a topic deleted or re-created, records deleted).",
);
/// Whether this replica runs the watcher.
pub const ACTIVE: Metric = Metric::gauge(
    "ra_watcher_active",
    "1 while this replica holds the watcher's lock and runs its rounds, 0 while another does.",
);
/// Failed rounds.
pub const FAILED: Metric = Metric::counter(
    "ra_watcher_rounds_failed_total",
    "Watcher rounds that failed (Kafka or the database did not answer); the next round tries again.",
);

/// What a round (or a standby's reading) found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WatcherGauges {
    /// Events missing.
    pub missing: i64,
    /// The watermark.
    pub watermark: i64,
    /// Events pending in memory (0 on a standby).
    pub pending: usize,
    /// When the last round ended, Unix seconds.
    pub round_at: f64,
    /// Rescans so far.
    pub rescans: i64,
    /// Whether this replica runs the rounds.
    pub active: bool,
}

/// The watcher's metrics.
#[derive(Debug, Default)]
pub struct WatcherMetrics {
    last: Mutex<Option<WatcherGauges>>,
    failed: AtomicU64,
}

impl WatcherMetrics {
    /// A round, or a standby's reading, found `gauges`.
    pub fn read(&self, gauges: WatcherGauges) {
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(gauges);
    }

    /// A round failed.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The last reading.
    pub fn last(&self) -> Option<WatcherGauges> {
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Appends the Prometheus text; the gauges only once something was read.
    pub fn render(&self, out: &mut String) {
        if let Some(gauges) = self.last() {
            MISSING.render(out, gauges.missing);
            WATERMARK.render(out, gauges.watermark);
            PENDING.render(out, gauges.pending);
            LAST_ROUND.render(out, format!("{:.3}", gauges.round_at));
            RESCANS.render(out, gauges.rescans);
            ACTIVE.render(out, u8::from(gauges.active));
            FAILED.render(out, self.failed.load(Ordering::Relaxed));
        }
    }
}
