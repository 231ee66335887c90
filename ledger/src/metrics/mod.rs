//! The ledger's Prometheus metrics, each declared here once (name, help, type) and rendered
//! from that declaration: the reassignment worker's, served by `ledger worker` on
//! `/metrics` with those of the replays it runs beside them; `ledger reconcile --every`'s;
//! and `ledger serve`'s gauges of the slot, the outbox and the digests.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use ra_ledger_cdc::infra::prometheus::{Histogram, Metric};

use crate::lag::slot_wal::WalStatus;

pub mod witnesses;

pub use witnesses::{
    CHECKPOINT_COSIGNATURES, CHECKPOINT_DIGEST, CHECKPOINT_QUORUM, CHECKPOINT_SIZE,
    WITNESS_COSIGNER, WITNESS_ROUND_FAILED, WITNESS_ROUND_INTERVAL, WITNESS_ROUND_TIME,
    WITNESSES_LOST_STATE, WITNESSES_REFUSING, WITNESSES_UNAVAILABLE,
};

/// Pages processed (committed).
pub const PAGES_PROCESSED: Metric = Metric::counter(
    "ra_reassignment_pages_processed_total",
    "Reassignment pages processed and committed.",
);
/// Wall time of page transactions.
pub const PAGE_DURATION: Metric = Metric::histogram(
    "ra_reassignment_page_duration_seconds",
    "Wall time of reassignment page transactions, commit included.",
);
/// Runs in progress (from the database, refreshed every few seconds).
pub const RUNS_ACTIVE: Metric = Metric::gauge(
    "ra_reassignment_runs_active",
    "Reassignment runs in progress.",
);
/// The longest a run in progress has gone without processing a page (from the database).
pub const RUN_IDLE: Metric = Metric::gauge(
    "ra_reassignment_run_idle_seconds",
    "Longest a reassignment run in progress has gone without processing a page; 0 when none runs.",
);
/// Runs whose chain this worker ended.
pub const RUNS_COMPLETED: Metric = Metric::counter(
    "ra_reassignment_runs_completed_total",
    "Reassignment runs whose chain ended here.",
);
/// Rows REPLACEd.
pub const ROWS_REPLACED: Metric = Metric::counter(
    "ra_reassignment_rows_replaced_total",
    "Assignments REPLACEd onto the new contact.",
);
/// Rows found already finished.
pub const ROWS_SKIPPED: Metric = Metric::counter(
    "ra_reassignment_rows_skipped_total",
    "Assignments found already finished when locked.",
);
/// Rows given up on.
pub const ROWS_FAILED: Metric = Metric::counter(
    "ra_reassignment_rows_failed_total",
    "Assignments given up on after repeated failures.",
);
/// Redelivered or duplicated page requests dropped by the cursor fence.
pub const STALE_REQUESTS: Metric = Metric::counter(
    "ra_reassignment_stale_requests_total",
    "Redelivered or duplicated page requests dropped by the cursor fence.",
);
/// Failed page attempts (each is retried).
pub const PAGE_FAILURES: Metric = Metric::counter(
    "ra_reassignment_page_failures_total",
    "Failed page attempts (retried; row by row after the limit).",
);
/// Page transactions open in this worker right now (0 or 1).
pub const PAGES_IN_FLIGHT: Metric = Metric::gauge(
    "ra_reassignment_pages_in_flight",
    "Page transactions open in this worker.",
);
/// Runs found without progress whose page request this worker raised again.
pub const STALLS: Metric = Metric::counter(
    "ra_reassignment_stalls_total",
    "Runs found without progress whose page request was raised again.",
);
/// Pages run straight after the previous page of their run (`continue_chain`).
pub const PAGES_CONTINUED: Metric = Metric::counter(
    "ra_reassignment_pages_continued_total",
    "Pages run straight after the previous page of their run, without waiting for Kafka.",
);
/// Page requests from Kafka whose page this worker had already run straight away: dropped
/// without a database round trip.
pub const REQUESTS_ALREADY_RUN: Metric = Metric::counter(
    "ra_reassignment_requests_already_run_total",
    "Page requests from Kafka whose page this worker had already run; dropped.",
);

/// The worker's metrics.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    pub(crate) pages: AtomicU64,
    pub(crate) page_duration: Histogram,
    pub(crate) runs_active: AtomicI64,
    /// [`RUN_IDLE`], in milliseconds.
    pub(crate) run_idle_millis: AtomicI64,
    pub(crate) runs_completed: AtomicU64,
    pub(crate) replaced: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) page_failures: AtomicU64,
    pub(crate) in_flight: AtomicI64,
    pub(crate) stalls: AtomicU64,
    pub(crate) continued: AtomicU64,
    pub(crate) already_run: AtomicU64,
    /// The replays this worker runs (`crate::replay`).
    pub replays: Arc<ReplayMetrics>,
}

impl WorkerMetrics {
    /// Stale requests dropped so far.
    pub fn stale(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Requests from Kafka dropped because this worker had already run their page.
    pub fn already_run(&self) -> u64 {
        self.already_run.load(Ordering::Relaxed)
    }

    /// Pages run straight after the previous page of their run.
    pub fn continued(&self) -> u64 {
        self.continued.load(Ordering::Relaxed)
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PAGES_PROCESSED.render(&mut out, load(&self.pages));
        RUNS_ACTIVE.render(&mut out, self.runs_active.load(Ordering::Relaxed));
        let idle = self.run_idle_millis.load(Ordering::Relaxed) as f64 / 1000.0;
        RUN_IDLE.render(&mut out, format!("{idle:.3}"));
        RUNS_COMPLETED.render(&mut out, load(&self.runs_completed));
        ROWS_REPLACED.render(&mut out, load(&self.replaced));
        ROWS_SKIPPED.render(&mut out, load(&self.skipped));
        ROWS_FAILED.render(&mut out, load(&self.failed));
        STALE_REQUESTS.render(&mut out, load(&self.stale));
        PAGE_FAILURES.render(&mut out, load(&self.page_failures));
        PAGES_IN_FLIGHT.render(&mut out, self.in_flight.load(Ordering::Relaxed));
        STALLS.render(&mut out, load(&self.stalls));
        PAGES_CONTINUED.render(&mut out, load(&self.continued));
        REQUESTS_ALREADY_RUN.render(&mut out, load(&self.already_run));
        self.page_duration.render(&mut out, &PAGE_DURATION);
        self.replays.render_into(&mut out);
        out
    }
}

/// Events acknowledged on replay topics.
pub const REPLAY_PUBLISHED: Metric = Metric::counter(
    "ra_replay_events_published_total",
    "Events acknowledged on replay topics.",
);
/// Replays this process completed.
pub const REPLAYS_COMPLETED: Metric = Metric::counter(
    "ra_replay_completed_total",
    "Replays completed (markers written).",
);
/// Runner starts that resumed a replay another runner had started.
pub const REPLAYS_RESUMED: Metric = Metric::counter(
    "ra_replay_resumed_total",
    "Runner starts that resumed a started replay from its checkpoint.",
);
/// Runs this process stopped because an operator cancelled their replay.
pub const REPLAYS_CANCELLED: Metric = Metric::counter(
    "ra_replay_cancelled_total",
    "Replay runs stopped because an operator cancelled the replay.",
);
/// Runs that ended in an error (retried from the checkpoint).
pub const REPLAY_FAILURES: Metric = Metric::counter(
    "ra_replay_failures_total",
    "Replay runs that ended in an error.",
);
/// Replays running in this process (0 or 1).
pub const REPLAYS_ACTIVE: Metric =
    Metric::gauge("ra_replay_active", "Replays running in this process.");
/// Wall time of one batch: read, produce, acknowledge, checkpoint.
pub const REPLAY_BATCH_DURATION: Metric = Metric::histogram(
    "ra_replay_batch_duration_seconds",
    "Wall time of a replay batch: read, produce, acknowledge, checkpoint.",
);

/// Counters of the replays this process ran (`crate::replay::run`).
#[derive(Debug, Default)]
pub struct ReplayMetrics {
    pub(crate) published: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) resumed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) active: AtomicI64,
    pub(crate) batch_duration: Histogram,
}

impl ReplayMetrics {
    /// Appends the Prometheus text format.
    pub fn render_into(&self, out: &mut String) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        REPLAY_PUBLISHED.render(out, load(&self.published));
        REPLAYS_COMPLETED.render(out, load(&self.completed));
        REPLAYS_RESUMED.render(out, load(&self.resumed));
        REPLAYS_CANCELLED.render(out, load(&self.cancelled));
        REPLAY_FAILURES.render(out, load(&self.failures));
        REPLAYS_ACTIVE.render(out, self.active.load(Ordering::Relaxed));
        self.batch_duration.render(out, &REPLAY_BATCH_DURATION);
    }
}

/// `ledger reconcile --every`: events confirmed by the relay and missing from Kafka, in the
/// last run.
pub const RECONCILE_LOST: Metric = Metric::gauge(
    "ra_reconcile_lost_events",
    "Events the relay confirmed that the last reconcile run did not find on Kafka.",
);
/// Records whose event id the ledger does not have, in the last run.
pub const RECONCILE_PHANTOM: Metric = Metric::gauge(
    "ra_reconcile_phantom_records",
    "Records on Kafka whose event id is not in the ledger, in the last reconcile run.",
);
/// Copies beyond the first of an event id, in the last run.
pub const RECONCILE_DUPLICATES: Metric = Metric::gauge(
    "ra_reconcile_duplicate_records",
    "Copies beyond the first of an event id on Kafka, in the last reconcile run.",
);
/// Per-key order inversions, in the last run.
pub const RECONCILE_INVERSIONS: Metric = Metric::gauge(
    "ra_reconcile_order_inversions",
    "First copies out of their key's order (commit position or stream version), in the last reconcile run.",
);
/// Events not readable yet (the relay had not confirmed past them), in the last run.
pub const RECONCILE_UNSEEN: Metric = Metric::gauge(
    "ra_reconcile_unseen_events",
    "Events committed but not readable on Kafka yet, in the last reconcile run.",
);
/// Events of the last run's range.
pub const RECONCILE_EVENTS: Metric = Metric::gauge(
    "ra_reconcile_events",
    "Events of the ledger in the last reconcile run's range.",
);
/// When the last run ended.
pub const RECONCILE_LAST_RUN: Metric = Metric::gauge(
    "ra_reconcile_last_run_timestamp_seconds",
    "Unix time at which the last reconcile run ended.",
);
/// Runs that could not finish.
pub const RECONCILE_FAILURES: Metric = Metric::counter(
    "ra_reconcile_failures_total",
    "Reconcile runs that could not finish (database or Kafka errors).",
);

/// `ledger reconcile --every`'s metrics: the last run's findings.
#[derive(Debug, Default)]
pub struct ReconcileMetrics {
    last: std::sync::Mutex<Option<(crate::reconcile::Report, i64)>>,
    failures: AtomicU64,
}

impl ReconcileMetrics {
    /// A run ended with `report`.
    pub fn finished(&self, report: &crate::reconcile::Report) {
        let now = chrono::Utc::now().timestamp();
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some((report.clone(), now));
    }

    /// A run failed.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text format; the gauges only once a run ended.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        if let Some((report, at)) = last {
            RECONCILE_LOST.render(&mut out, report.lost);
            RECONCILE_PHANTOM.render(&mut out, report.phantom);
            RECONCILE_DUPLICATES.render(&mut out, report.duplicates);
            RECONCILE_INVERSIONS.render(&mut out, report.inversions());
            RECONCILE_UNSEEN.render(&mut out, report.unseen);
            RECONCILE_EVENTS.render(&mut out, report.events);
            RECONCILE_LAST_RUN.render(&mut out, at);
        }
        RECONCILE_FAILURES.render(&mut out, self.failures.load(Ordering::Relaxed));
        out
    }
}

/// `ledger serve`: how long the oldest outbox commit not yet published has waited
/// ([`crate::lag::exact`]).
pub const OLDEST_UNPUBLISHED_COMMIT_AGE: Metric = Metric::gauge(
    "ra_outbox_oldest_unpublished_commit_age_seconds",
    "How long the oldest outbox commit not yet acknowledged by Kafka has waited: the relay's own figure while it streams and reports, else at most this (from the slot and the retention marks; see ra_outbox_oldest_unpublished_commit_age_is_bound); 0 when everything committed is published.",
);
/// `ledger serve`: whether [`OLDEST_UNPUBLISHED_COMMIT_AGE`] is only a bound from the
/// database (1) or the relay's own figure (0) ([`crate::lag::exact`]).
pub const OLDEST_UNPUBLISHED_COMMIT_AGE_BOUND: Metric = Metric::gauge(
    "ra_outbox_oldest_unpublished_commit_age_is_bound",
    "1 when ra_outbox_oldest_unpublished_commit_age_seconds is an upper bound from the slot and the retention marks (no relay streams, or its report is missing or stale), 0 when it is the relay's own exact figure.",
);
/// `ledger serve`: WAL the relay's slot keeps from being recycled, or once lost, needed
/// ([`crate::lag::SlotProgress::needed_wal_bytes`]).
pub const SLOT_RETAINED_WAL: Metric = Metric::gauge(
    "ra_slot_retained_wal_bytes",
    "WAL bytes the relay's slot keeps from being recycled (from its restart_lsn); once PostgreSQL removed WAL it needed (restart_lsn NULL), the WAL since its confirmed position.",
);
/// `ledger serve`: the relay slot's `wal_status`, as a set of states
/// ([`crate::lag::slot_wal::WalStatus`]).
pub const SLOT_WAL_STATUS: Metric = Metric::gauge(
    "ra_slot_wal_status",
    "1 for the relay slot's wal_status in pg_replication_slots, 0 for the others: reserved, extended (beyond max_wal_size), unreserved (the next checkpoint removes WAL it needs), lost (removed: the slot is invalidated).",
);
/// The label of [`SLOT_WAL_STATUS`]'s series, whose values are [`WalStatus::as_str`]'s.
pub const SLOT_WAL_STATUS_LABEL: &str = "status";
/// `ledger serve`: WAL that can still be written before the relay's slot is past the limit.
pub const SLOT_SAFE_WAL: Metric = Metric::gauge(
    "ra_slot_safe_wal_bytes",
    "WAL bytes the server can still write before the relay's slot is past max_slot_wal_keep_size (pg_replication_slots.safe_wal_size); negative past it; absent when the slot is lost or there is no limit.",
);
/// `ledger serve`: the limit past which a checkpoint invalidates the relay's slot.
pub const SLOT_WAL_KEEP_LIMIT: Metric = Metric::gauge(
    "ra_slot_wal_keep_limit_bytes",
    "WAL bytes the server keeps for a replication slot before a checkpoint invalidates it (max_slot_wal_keep_size, or wal_keep_size when larger, in whole segments); absent when there is no limit (-1).",
);
/// `ledger serve`: WAL the relay's slot has not confirmed.
pub const SLOT_LAG: Metric = Metric::gauge(
    "ra_slot_lag_bytes",
    "WAL bytes between the server's end and the relay slot's confirmed position.",
);
/// `ledger serve`: whether the relay's slot exists.
pub const SLOT_PRESENT: Metric = Metric::gauge(
    "ra_slot_present",
    "1 when the relay's replication slot exists.",
);
/// `ledger serve`: whether a process streams from the relay's slot.
pub const SLOT_ACTIVE: Metric = Metric::gauge(
    "ra_slot_active",
    "1 while a process streams from the relay's replication slot.",
);
/// `ledger serve`: parked messages not republished yet.
pub const PARKED_WAITING: Metric = Metric::gauge(
    "ra_outbox_parked_waiting",
    "Parked messages (outbox_parked) not republished yet.",
);
/// `ledger serve` with digests on: at most how long changes have waited for a digest.
pub const DIGEST_UNSEALED_AGE: Metric = Metric::gauge(
    "ra_digest_unsealed_seconds",
    "At most how long appended events have waited for a signed digest; 0 when the newest digest holds every change.",
);
/// `ledger serve`: when the gauges were last read from the database.
pub const GAUGES_READ: Metric = Metric::gauge(
    "ra_serve_gauges_read_timestamp_seconds",
    "Unix time at which ledger serve last read its gauges from the database.",
);

/// `ledger serve`'s gauges, set by [`crate::gauges`] every round; the ages are rendered
/// from instants, so they go on growing between rounds.
#[derive(Debug, Default)]
pub struct ServiceMetrics {
    /// The rounds' findings; `None` before the first.
    last: std::sync::Mutex<Option<ServiceGauges>>,
    /// The relay's report, read five times a second between rounds.
    relay: std::sync::Mutex<Option<RelayRead>>,
    /// The cosigning rounds, with a witness policy.
    witnessed: std::sync::Mutex<witnesses::Witnessed>,
    /// The end-to-end watcher's findings, when it is on ([`crate::watcher`]).
    pub watcher: std::sync::Arc<crate::watcher::metrics::WatcherMetrics>,
}

/// The relay's report of its lag and whether a relay streams, as read by
/// [`crate::gauges::follow_relay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayRead {
    /// When it was read (this process's clock).
    pub read_at: chrono::DateTime<chrono::Utc>,
    /// Whether a relay streams from the slot.
    pub streaming: bool,
    /// The relay's report, if it wrote one.
    pub report: Option<crate::lag::exact::RelayReport>,
}

/// What one round of [`crate::gauges`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceGauges {
    /// When it read them (Unix seconds).
    pub read_at: i64,
    /// The slot, when it exists.
    pub slot: Option<crate::lag::SlotProgress>,
    /// Parked messages waiting.
    pub parked_waiting: i64,
    /// With digests on: since when changes wait for a digest (`None`: none wait).
    pub unsealed_since: Option<Option<chrono::DateTime<chrono::Utc>>>,
}

impl ServiceMetrics {
    /// A round read `gauges`.
    pub fn read(&self, gauges: ServiceGauges) {
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(gauges);
    }

    /// A newer reading of the relay's report.
    pub fn relay_read(&self, read: RelayRead) {
        *self
            .relay
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(read);
    }

    /// The slot as of the newest reading at `now`: the last round's, with the relay's
    /// report and the streaming flag of a newer reading between rounds, the report aged by
    /// the time since it was read. Pure.
    pub fn slot_now(
        round: Option<crate::lag::SlotProgress>,
        round_read_at: chrono::DateTime<chrono::Utc>,
        relay: Option<RelayRead>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<crate::lag::SlotProgress> {
        let mut slot = round?;
        let mut read_at = round_read_at;
        if let Some(relay) = relay.filter(|relay| relay.read_at > round_read_at) {
            slot.streaming = relay.streaming;
            slot.relay = relay.report;
            read_at = relay.read_at;
        }
        if let Some(report) = slot.relay.as_mut() {
            report.age += (now - read_at).max(chrono::Duration::zero());
        }
        Some(slot)
    }

    /// A cosigning round ended (an error too) at `now`; rounds run every `interval`.
    pub fn witnessed(
        &self,
        ended: &Result<Option<crate::digest::cosign::Round>, crate::digest::cosign::CosignError>,
        interval: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        self.witnessed
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .record(ended.as_ref().map_err(|_| ()), interval, now);
    }

    /// The Prometheus text format; nothing before the first round.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.watcher.render(&mut out);
        self.witnessed
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .render(&mut out);
        let last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        let Some(mut gauges) = last else {
            return out;
        };
        let now = chrono::Utc::now();
        let relay = *self
            .relay
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let round_read_at = chrono::DateTime::from_timestamp(gauges.read_at, 0).unwrap_or(now);
        gauges.slot = Self::slot_now(gauges.slot, round_read_at, relay, now);
        SLOT_PRESENT.render(&mut out, u8::from(gauges.slot.is_some()));
        if let Some(slot) = &gauges.slot {
            SLOT_ACTIVE.render(&mut out, u8::from(slot.streaming));
            if let Some(bytes) = slot.lag_bytes {
                SLOT_LAG.render(&mut out, bytes);
            }
            if let Some(bytes) = slot.needed_wal_bytes() {
                SLOT_RETAINED_WAL.render(&mut out, bytes);
            }
            SLOT_WAL_STATUS.render_states(
                &mut out,
                SLOT_WAL_STATUS_LABEL,
                &WalStatus::ALL.map(WalStatus::as_str),
                slot.wal.status.map(WalStatus::as_str),
            );
            if let Some(bytes) = slot.wal.safe_bytes {
                SLOT_SAFE_WAL.render(&mut out, bytes);
            }
            if let Some(bytes) = slot.wal.limit_bytes {
                SLOT_WAL_KEEP_LIMIT.render(&mut out, bytes);
            }
            let lag = slot.lag();
            OLDEST_UNPUBLISHED_COMMIT_AGE.render(&mut out, format!("{:.3}", lag.seconds(now)));
            OLDEST_UNPUBLISHED_COMMIT_AGE_BOUND.render(&mut out, u8::from(lag.is_bound()));
        }
        PARKED_WAITING.render(&mut out, gauges.parked_waiting);
        if let Some(since) = gauges.unsealed_since {
            let age = since.map_or(0.0, |since| (now - since).as_seconds_f64().max(0.0));
            DIGEST_UNSEALED_AGE.render(&mut out, format!("{age:.3}"));
        }
        GAUGES_READ.render(&mut out, gauges.read_at);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lag::slot_wal::SlotWal;

    /// Every declaration above.
    const ALL: [Metric; 21] = [
        PAGES_PROCESSED,
        PAGE_DURATION,
        RUNS_ACTIVE,
        RUN_IDLE,
        RUNS_COMPLETED,
        ROWS_REPLACED,
        ROWS_SKIPPED,
        ROWS_FAILED,
        STALE_REQUESTS,
        PAGE_FAILURES,
        PAGES_IN_FLIGHT,
        STALLS,
        PAGES_CONTINUED,
        REQUESTS_ALREADY_RUN,
        REPLAY_PUBLISHED,
        REPLAYS_COMPLETED,
        REPLAYS_RESUMED,
        REPLAYS_CANCELLED,
        REPLAY_FAILURES,
        REPLAYS_ACTIVE,
        REPLAY_BATCH_DURATION,
    ];

    /// Each declaration shows once under its own help and type, nothing else shows, and the
    /// values are the counters'.
    #[test]
    fn renders_every_declared_metric_once_with_its_value() {
        let metrics = WorkerMetrics::default();
        metrics.pages.fetch_add(3, Ordering::Relaxed);
        metrics.stale.fetch_add(2, Ordering::Relaxed);
        metrics.page_duration.observe(0.02);
        let text = metrics.render();
        for metric in ALL {
            let (name, help, kind) = (metric.name, metric.help, metric.kind.as_str());
            let head = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
            assert_eq!(text.matches(&head).count(), 1, "{name} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), ALL.len(), "{text}");
        assert!(text.contains("ra_reassignment_pages_processed_total 3\n"));
        assert!(text.contains("ra_reassignment_stale_requests_total 2\n"));
        assert!(text.contains("ra_reassignment_page_duration_seconds_bucket{le=\"0.025\"} 1\n"));
    }

    /// `ledger serve`'s gauges: nothing before the first round; then each once under its
    /// help and type, the digest's only with digests on, and the ages from their instants.
    #[test]
    fn the_service_gauges_render_once_each_after_the_first_round() {
        let metrics = ServiceMetrics::default();
        assert_eq!(metrics.render(), "", "nothing read yet");
        let now = chrono::Utc::now();
        let slot = crate::lag::SlotProgress {
            streaming: true,
            lag_bytes: Some(100),
            retained_bytes: Some(4_096),
            wal: SlotWal {
                status: Some(WalStatus::Reserved),
                safe_bytes: Some(1 << 30),
                limit_bytes: Some(1 << 30),
            },
            published_before: Some(now - chrono::Duration::seconds(600)),
            first_uncovered_row: Some(now - chrono::Duration::seconds(90)),
            relay: None,
        };
        let gauges = ServiceGauges {
            read_at: now.timestamp(),
            slot: Some(slot),
            parked_waiting: 2,
            unsealed_since: Some(Some(now - chrono::Duration::seconds(30))),
        };
        metrics.read(gauges.clone());
        let text = metrics.render();
        let all = [
            SLOT_PRESENT,
            SLOT_ACTIVE,
            SLOT_LAG,
            SLOT_RETAINED_WAL,
            SLOT_WAL_STATUS,
            SLOT_SAFE_WAL,
            SLOT_WAL_KEEP_LIMIT,
            OLDEST_UNPUBLISHED_COMMIT_AGE,
            OLDEST_UNPUBLISHED_COMMIT_AGE_BOUND,
            PARKED_WAITING,
            DIGEST_UNSEALED_AGE,
            GAUGES_READ,
        ];
        for metric in all {
            let (name, help, kind) = (metric.name, metric.help, metric.kind.as_str());
            let head = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
            assert_eq!(text.matches(&head).count(), 1, "{name} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), all.len(), "{text}");
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {text}"))
        };
        assert!((90.0..100.0).contains(&value("ra_outbox_oldest_unpublished_commit_age_seconds")));
        assert_eq!(
            value("ra_outbox_oldest_unpublished_commit_age_is_bound"),
            1.0,
            "no report"
        );
        // The relay reports, between rounds, that nothing it read waits: its figure, exact.
        metrics.relay_read(RelayRead {
            read_at: now + chrono::Duration::seconds(1),
            streaming: true,
            report: Some(crate::lag::exact::RelayReport {
                oldest_unconfirmed: None,
                age: chrono::Duration::milliseconds(100),
            }),
        });
        let relayed = metrics.render();
        assert!(
            relayed.contains("ra_outbox_oldest_unpublished_commit_age_seconds 0.000\n"),
            "{relayed}"
        );
        assert!(
            relayed.contains("ra_outbox_oldest_unpublished_commit_age_is_bound 0\n"),
            "{relayed}"
        );
        // The relay stops: the slot no longer streams, and the bound is back.
        metrics.relay_read(RelayRead {
            read_at: now + chrono::Duration::seconds(2),
            streaming: false,
            report: None,
        });
        let stopped = metrics.render();
        assert!(stopped.contains("ra_slot_active 0\n"), "{stopped}");
        assert!(
            stopped.contains("ra_outbox_oldest_unpublished_commit_age_is_bound 1\n"),
            "{stopped}"
        );
        assert!((30.0..40.0).contains(&value("ra_digest_unsealed_seconds")));
        assert_eq!(value("ra_slot_retained_wal_bytes"), 4_096.0);
        assert_eq!(value("ra_slot_safe_wal_bytes"), 1_073_741_824.0);
        assert_eq!(value("ra_slot_wal_keep_limit_bytes"), 1_073_741_824.0);
        assert!(
            text.contains(
                "ra_slot_wal_status{status=\"reserved\"} 1\n\
                 ra_slot_wal_status{status=\"extended\"} 0\n\
                 ra_slot_wal_status{status=\"unreserved\"} 0\n\
                 ra_slot_wal_status{status=\"lost\"} 0\n"
            ),
            "{text}"
        );
        assert_eq!(value("ra_outbox_parked_waiting"), 2.0);
        // Digests off: no digest gauge; no slot: only that it is missing.
        metrics.read(ServiceGauges {
            slot: None,
            unsealed_since: None,
            ..gauges
        });
        let text = metrics.render();
        assert!(text.contains("ra_slot_present 0\n"), "{text}");
        assert!(!text.contains("ra_digest_unsealed_seconds"), "{text}");
        assert!(!text.contains("ra_slot_retained_wal_bytes"), "{text}");
        assert!(!text.contains("ra_slot_wal_status"), "{text}");
    }

    /// A slot PostgreSQL invalidated: its `restart_lsn` is NULL and so is `safe_wal_size`.
    /// The kept WAL goes on as the WAL since the confirmed position (an alert on it does not
    /// resolve at the loss), the status says lost, and the headroom is gone.
    #[test]
    fn a_lost_slot_keeps_its_wal_series_and_says_lost() {
        let metrics = ServiceMetrics::default();
        metrics.read(ServiceGauges {
            read_at: 0,
            slot: Some(crate::lag::SlotProgress {
                streaming: false,
                lag_bytes: Some(70_000_000),
                retained_bytes: None,
                wal: SlotWal {
                    status: Some(WalStatus::Lost),
                    safe_bytes: None,
                    limit_bytes: Some(64 << 20),
                },
                published_before: None,
                first_uncovered_row: None,
                relay: None,
            }),
            parked_waiting: 0,
            unsealed_since: None,
        });
        let text = metrics.render();
        for line in [
            "ra_slot_retained_wal_bytes 70000000\n",
            "ra_slot_wal_status{status=\"unreserved\"} 0\n",
            "ra_slot_wal_status{status=\"lost\"} 1\n",
            "ra_slot_wal_keep_limit_bytes 67108864\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("ra_slot_safe_wal_bytes"), "{text}");
    }
}
