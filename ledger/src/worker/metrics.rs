//! The worker's metrics, served on `/metrics` with the replays' beside them.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use ra_ledger_cdc::infra::prometheus::{Histogram, render_value};

/// Pages processed (committed).
pub const PAGES_PROCESSED: &str = "ra_reassignment_pages_processed_total";
/// Wall time of page transactions.
pub const PAGE_DURATION: &str = "ra_reassignment_page_duration_seconds";
/// Runs in progress (from the database, refreshed every few seconds).
pub const RUNS_ACTIVE: &str = "ra_reassignment_runs_active";
/// Runs whose chain this worker ended.
pub const RUNS_COMPLETED: &str = "ra_reassignment_runs_completed_total";
/// Rows REPLACEd.
pub const ROWS_REPLACED: &str = "ra_reassignment_rows_replaced_total";
/// Rows found already finished.
pub const ROWS_SKIPPED: &str = "ra_reassignment_rows_skipped_total";
/// Rows given up on.
pub const ROWS_FAILED: &str = "ra_reassignment_rows_failed_total";
/// Redelivered or duplicated page requests dropped by the cursor fence.
pub const STALE_REQUESTS: &str = "ra_reassignment_stale_requests_total";
/// Failed page attempts (each is retried).
pub const PAGE_FAILURES: &str = "ra_reassignment_page_failures_total";
/// Page transactions open in this worker right now (0 or 1).
pub const PAGES_IN_FLIGHT: &str = "ra_reassignment_pages_in_flight";
/// Runs found without progress whose page request this worker raised again.
pub const STALLS: &str = "ra_reassignment_stalls_total";
/// Pages run straight after the previous page of their run (`continue_chain`).
pub const PAGES_CONTINUED: &str = "ra_reassignment_pages_continued_total";
/// Page requests from Kafka whose page this worker had already run straight away: dropped
/// without a database round trip.
pub const REQUESTS_ALREADY_RUN: &str = "ra_reassignment_requests_already_run_total";

/// The worker's metrics.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    pub(super) pages: AtomicU64,
    pub(super) page_duration: Histogram,
    pub(super) runs_active: AtomicI64,
    pub(super) runs_completed: AtomicU64,
    pub(super) replaced: AtomicU64,
    pub(super) skipped: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) stale: AtomicU64,
    pub(super) page_failures: AtomicU64,
    pub(super) in_flight: AtomicI64,
    pub(super) stalls: AtomicU64,
    pub(super) continued: AtomicU64,
    pub(super) already_run: AtomicU64,
    /// The replays this worker runs (`crate::replay`).
    pub replays: Arc<crate::replay::run::ReplayMetrics>,
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
        render_value(
            &mut out,
            PAGES_PROCESSED,
            "Reassignment pages processed and committed.",
            "counter",
            load(&self.pages),
        );
        render_value(
            &mut out,
            RUNS_ACTIVE,
            "Reassignment runs in progress.",
            "gauge",
            self.runs_active.load(Ordering::Relaxed),
        );
        render_value(
            &mut out,
            RUNS_COMPLETED,
            "Reassignment runs whose chain ended here.",
            "counter",
            load(&self.runs_completed),
        );
        render_value(
            &mut out,
            ROWS_REPLACED,
            "Assignments REPLACEd onto the new contact.",
            "counter",
            load(&self.replaced),
        );
        render_value(
            &mut out,
            ROWS_SKIPPED,
            "Assignments found already finished when locked.",
            "counter",
            load(&self.skipped),
        );
        render_value(
            &mut out,
            ROWS_FAILED,
            "Assignments given up on after repeated failures.",
            "counter",
            load(&self.failed),
        );
        render_value(
            &mut out,
            STALE_REQUESTS,
            "Redelivered or duplicated page requests dropped by the cursor fence.",
            "counter",
            load(&self.stale),
        );
        render_value(
            &mut out,
            PAGE_FAILURES,
            "Failed page attempts (retried; row by row after the limit).",
            "counter",
            load(&self.page_failures),
        );
        render_value(
            &mut out,
            PAGES_IN_FLIGHT,
            "Page transactions open in this worker.",
            "gauge",
            self.in_flight.load(Ordering::Relaxed),
        );
        render_value(
            &mut out,
            STALLS,
            "Runs found without progress whose page request was raised again.",
            "counter",
            load(&self.stalls),
        );
        render_value(
            &mut out,
            PAGES_CONTINUED,
            "Pages run straight after the previous page of their run, without waiting for Kafka.",
            "counter",
            load(&self.continued),
        );
        render_value(
            &mut out,
            REQUESTS_ALREADY_RUN,
            "Page requests from Kafka whose page this worker had already run; dropped.",
            "counter",
            load(&self.already_run),
        );
        self.page_duration.render(
            &mut out,
            PAGE_DURATION,
            "Wall time of reassignment page transactions, commit included.",
        );
        self.replays.render_into(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_metric() {
        let metrics = WorkerMetrics::default();
        metrics.pages.fetch_add(3, Ordering::Relaxed);
        metrics.stale.fetch_add(2, Ordering::Relaxed);
        metrics.page_duration.observe(0.02);
        let text = metrics.render();
        for name in [
            PAGES_PROCESSED,
            PAGE_DURATION,
            RUNS_ACTIVE,
            RUNS_COMPLETED,
            ROWS_REPLACED,
            ROWS_SKIPPED,
            ROWS_FAILED,
            STALE_REQUESTS,
            PAGE_FAILURES,
            PAGES_IN_FLIGHT,
            STALLS,
            crate::replay::run::names::PUBLISHED,
            crate::replay::run::names::COMPLETED,
            crate::replay::run::names::RESUMED,
            crate::replay::run::names::FAILURES,
            crate::replay::run::names::ACTIVE,
            crate::replay::run::names::BATCH_DURATION,
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
        }
        assert!(text.contains("ra_reassignment_pages_processed_total 3\n"));
        assert!(text.contains("ra_reassignment_stale_requests_total 2\n"));
        assert!(text.contains("ra_reassignment_page_duration_seconds_bucket{le=\"0.025\"} 1\n"));
    }
}
