//! One page request at a time: decoded from its Kafka message, handled with retries, and
//! (with `continue_chain`) its run's next pages straight after it.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use ra_ledger_cdc::consumer;
use rdkafka::Message as _;
use rdkafka::message::BorrowedMessage;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::WorkerConfig;
use crate::metrics::WorkerMetrics;
use crate::reassign::{self, PageOutcome, PageRequest};

/// Request ids of the pages a worker ran straight away that it remembers, to drop their
/// copies from Kafka.
const REMEMBERED_REQUESTS: usize = 10_000;

/// The page request `message` carries; `None` for the other run events that share the
/// topic (row failures, completions) and for an undecodable message, which is logged.
pub(super) fn decode(message: &BorrowedMessage<'_>) -> Option<PageRequest> {
    match consumer::decode(message.payload().unwrap_or_default())
        .map_err(|error| error.to_string())
        .and_then(|envelope| {
            PageRequest::from_envelope(&envelope).map_err(|error| error.to_string())
        }) {
        Ok(request) => request,
        Err(reason) => {
            warn!(topic = message.topic(), partition = message.partition(),
                  offset = message.offset(), %reason, "undecodable page request; skipped");
            None
        }
    }
}

/// What handling a page request takes, beside the request: the pool, the worker's
/// settings and metrics, the shutdown signal, and the requests this worker ran straight
/// away. One per worker, for its whole run.
pub(super) struct Pages<'a> {
    /// The worker's pool.
    pub pool: &'a Pool,
    /// The worker's settings.
    pub config: &'a WorkerConfig,
    /// The worker's metrics.
    pub metrics: &'a WorkerMetrics,
    /// Stops retries and chains.
    pub shutdown: &'a CancellationToken,
    /// The requests this worker ran straight away, whose copies it drops.
    pub ran_here: RanHere,
}

impl Pages<'_> {
    /// Handles `request` unless this worker already ran its page straight away (then its
    /// copy is dropped); `false` when shutdown interrupted it.
    pub(super) async fn handle_request(&mut self, request: PageRequest) -> bool {
        if self.ran_here.contains(request.request_id) {
            self.metrics.already_run.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(run = %request.run_id, page = request.page,
                "page request already run here; dropped");
            return true;
        }
        self.handle_chain(request).await
    }

    /// Handles `request`, then (with `continue_chain`) the next page of its run straight
    /// after each page commits, for up to `continue_chain_ms`; `false` when shutdown
    /// interrupted it.
    async fn handle_chain(&mut self, request: PageRequest) -> bool {
        let began = Instant::now();
        let mut request = request;
        loop {
            let Handled::Done { next } = self.handle_with_retries(&request).await else {
                return false;
            };
            let Some(next) = next.filter(|_| self.config.continue_chain) else {
                return true;
            };
            // Past the budget, or stopping: the published request carries the chain on.
            if began.elapsed() >= self.config.continue_chain_for() || self.shutdown.is_cancelled() {
                return true;
            }
            self.ran_here.insert(next.request_id);
            self.metrics.continued.fetch_add(1, Ordering::Relaxed);
            request = next;
        }
    }
}

/// The ids of the page requests this worker ran straight away, the newest
/// [`REMEMBERED_REQUESTS`] of them.
#[derive(Debug, Default)]
pub(super) struct RanHere {
    ids: HashSet<Uuid>,
    order: VecDeque<Uuid>,
}

impl RanHere {
    fn insert(&mut self, id: Uuid) {
        if self.ids.insert(id) {
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED_REQUESTS {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
    }

    fn contains(&self, id: Uuid) -> bool {
        self.ids.contains(&id)
    }
}

/// How handling a request ended.
enum Handled {
    /// Processed or dropped; the next page's request if the page raised one.
    Done { next: Option<PageRequest> },
    /// Shutdown interrupted the retries.
    Shutdown,
}

impl Pages<'_> {
    /// Handles one request until it is processed or dropped.
    async fn handle_with_retries(&self, request: &PageRequest) -> Handled {
        let Self {
            pool,
            config,
            metrics,
            shutdown,
            ..
        } = *self;
        let mut backoff = Duration::from_millis(100);
        loop {
            metrics.in_flight.fetch_add(1, Ordering::Relaxed);
            let outcome = reassign::handle(pool, request, config.max_attempts).await;
            metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
            match outcome {
                Ok(PageOutcome::Processed(report)) => {
                    metrics.pages.fetch_add(1, Ordering::Relaxed);
                    metrics.page_duration.observe(report.duration.as_secs_f64());
                    metrics
                        .replaced
                        .fetch_add(report.replaced as u64, Ordering::Relaxed);
                    metrics
                        .skipped
                        .fetch_add(report.skipped as u64, Ordering::Relaxed);
                    metrics
                        .failed
                        .fetch_add(report.failed as u64, Ordering::Relaxed);
                    if report.completed {
                        metrics.runs_completed.fetch_add(1, Ordering::Relaxed);
                        info!(run = %report.run_id, pages = report.page, "reassignment run completed");
                    }
                    info!(run = %report.run_id, page = report.page, replaced = report.replaced,
                      skipped = report.skipped, failed = report.failed, isolated = report.isolated,
                      ms = report.duration.as_millis() as u64, "page processed");
                    return Handled::Done { next: report.next };
                }
                Ok(PageOutcome::Stale { reason }) => {
                    metrics.stale.fetch_add(1, Ordering::Relaxed);
                    info!(run = %request.run_id, page = request.page, %reason, "stale page request dropped");
                    return Handled::Done { next: None };
                }
                Ok(PageOutcome::UnknownRun) => {
                    warn!(run = %request.run_id, "page request for an unknown run dropped");
                    return Handled::Done { next: None };
                }
                Err(error) => {
                    metrics.page_failures.fetch_add(1, Ordering::Relaxed);
                    warn!(%error, retry_in_ms = backoff.as_millis() as u64, "page failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Handled::Shutdown,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(config.retry_backoff_max());
                }
            }
        }
    }
}
