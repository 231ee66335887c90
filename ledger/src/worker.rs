//! `ledger worker`: the reassignment page handler. A Kafka consumer group on the
//! reassignment topic; each `ReassignmentPageRequested` message is one page, handled in one
//! database transaction (see [`crate::reassign`]), and its offset is committed only after
//! that transaction committed. A crash before the offset commit redelivers the request,
//! which the run's cursor fence then drops or processes exactly once.
//!
//! Messages are handled one at a time per worker. Pages of one run share a key (the run id),
//! hence a partition, and the next request exists only once the previous page committed, so
//! however many workers and partitions there are, a run has one page in flight.
//!
//! With `continue_chain` (the default) a worker that commits a page runs the next one
//! straight away, for up to `continue_chain_ms` (20 s by default), instead of waiting for the request to come back
//! through the relay, the broker and its consumer (most of a chain's time on the stack:
//! about 190 ms a page against 90 ms in the page's transaction). The request is still
//! published, so a crash at any point leaves the chain to Kafka as before; its copy, when it
//! arrives, is dropped here without a database round trip (or by the cursor fence
//! elsewhere). Pages still run one at a time per run, in one transaction each.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use ra_ledger_cdc::consumer;
use ra_ledger_cdc::metrics::{Histogram, render_value};
use rdkafka::Message as _;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

pub use crate::config::WorkerConfig;
use crate::db;
use crate::reassign::{self, PageOutcome, PageRequest};

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

/// Request ids of the pages a worker ran straight away that it remembers, to drop their
/// copies from Kafka.
const REMEMBERED_REQUESTS: usize = 10_000;

/// How often the worker looks for replays to run (requested, or left by a dead runner).
pub const REPLAY_POLL: Duration = Duration::from_secs(2);

/// The worker's metrics.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    pages: AtomicU64,
    page_duration: Histogram,
    runs_active: AtomicI64,
    runs_completed: AtomicU64,
    replaced: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    stale: AtomicU64,
    page_failures: AtomicU64,
    in_flight: AtomicI64,
    stalls: AtomicU64,
    continued: AtomicU64,
    already_run: AtomicU64,
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

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The database settings are unusable.
    #[error(transparent)]
    Database(#[from] crate::db::DbError),
    /// The Kafka consumer could not be created or subscribed.
    #[error("Kafka consumer: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A Kafka setting cannot be used (a secret file went missing since start).
    #[error(transparent)]
    Config(#[from] ra_ledger_cdc::config::ConfigError),
}

/// Runs the worker until `shutdown`; the page in progress finishes first.
pub async fn run(
    config: WorkerConfig,
    metrics: Arc<WorkerMetrics>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let pool = db::pool(&config.database_url, "ledger-worker", 3)?;
    let consumer: StreamConsumer = consumer_config(&config)?.create()?;
    consumer.subscribe(&[&config.topic])?;
    info!(topic = %config.topic, group = %config.group_id,
          instance = config.instance_id.as_deref().unwrap_or("(dynamic)"),
          "reassignment worker started");
    let watcher = tokio::spawn(watch_runs(
        pool.clone(),
        metrics.clone(),
        config.stall_after(),
        shutdown.clone(),
    ));
    // Replays run beside the pages, on connections of their own: a replay holds one for
    // its whole run (its lock), and never delays a page.
    let mut kafka = config.kafka_settings();
    kafka
        .properties
        .insert("bootstrap.servers".into(), config.brokers.clone());
    let replays = tokio::spawn(crate::replay::run::serve(
        db::pool(&config.database_url, "ledger-replay", 2)?,
        kafka,
        metrics.replays.clone(),
        REPLAY_POLL,
        shutdown.clone(),
    ));
    let mut ran_here = RanHere::default();
    loop {
        let message = tokio::select! {
            // Shutdown first: the page in progress has finished (it is not in this select).
            biased;
            _ = shutdown.cancelled() => break,
            message = consumer.recv() => message,
        };
        let message = match message {
            Ok(message) => message,
            Err(error) => {
                warn!(%error, "Kafka consumer error; continuing");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let request = match consumer::decode(message.payload().unwrap_or_default())
            .map_err(|error| error.to_string())
            .and_then(|envelope| PageRequest::from_envelope(&envelope))
        {
            Ok(Some(request)) => Some(request),
            // Other run events (row failures, completions) share the topic.
            Ok(None) => None,
            Err(reason) => {
                warn!(topic = message.topic(), partition = message.partition(),
                      offset = message.offset(), %reason, "undecodable page request; skipped");
                None
            }
        };
        if let Some(request) = request {
            if ran_here.contains(request.request_id) {
                metrics.already_run.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(run = %request.run_id, page = request.page,
                    "page request already run here; dropped");
            } else if !handle_chain(&pool, request, &config, &metrics, &shutdown, &mut ran_here)
                .await
            {
                // Shutting down mid-retry: the offset stays uncommitted and the request is
                // redelivered to whoever takes the partition.
                break;
            }
        }
        // Asynchronous: the page's transaction has committed, so the offset only spares a
        // redelivery. A synchronous commit blocks the runtime thread until the group
        // coordinator answers, which takes seconds while the coordinator moves or its
        // broker restarts, and holds up the next page for nothing. A commit that fails, or
        // that a rebalance overtakes, leaves the offset behind: the request is redelivered
        // and the fence drops it.
        if let Err(error) = consumer.commit_message(&message, CommitMode::Async) {
            warn!(%error, "cannot commit the Kafka offset; the request may be redelivered");
        }
    }
    watcher.abort();
    // A replay stops after its batch in flight, checkpointed.
    if tokio::time::timeout(Duration::from_secs(10), replays)
        .await
        .is_err()
    {
        warn!("a replay did not stop within 10 s; it resumes from its checkpoint");
    }
    info!("reassignment worker stopped");
    Ok(())
}

/// The consumer's settings: the worker's own, then the operator's (`kafka`).
///
/// A dead member's partitions wait for its session to time out before anyone else gets
/// them, so the session is as short as Kafka allows by default (6 s, the broker's
/// `group.min.session.timeout.ms`; heartbeats every second). A worker that stops cleanly
/// leaves the group, and its partitions move at once. With a stable `instance_id` (static
/// membership, `group.instance.id`) a worker restarted within its session takes its
/// partitions back at once, without a rebalance; a static member does not leave the group
/// when it stops, so the partitions of one that does not come back move when its session
/// times out.
///
/// Metadata is refreshed every 10 s: a group that formed while its topic was missing
/// (deleted, not yet created) assigned nothing, and only noticing the topic's return makes
/// it rebalance. `fetch.wait.max.ms` stays at librdkafka's default: Kafka answers a fetch
/// as soon as a message arrives and waits that long only while there is none, so a
/// shorter wait would cost requests and gain no latency.
fn consumer_config(
    config: &WorkerConfig,
) -> Result<rdkafka::ClientConfig, ra_ledger_cdc::config::ConfigError> {
    let mut client_config = config.kafka_settings().client_config()?;
    client_config
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .set("topic.metadata.refresh.interval.ms", "10000");
    // Page requests of an exactly-once relay's aborted transactions are never seen.
    ra_ledger_cdc::consumer::read_committed(&mut client_config);
    if let Some(instance) = &config.instance_id {
        client_config.set("group.instance.id", instance);
    }
    for (key, value) in &config.kafka {
        client_config.set(key, value);
    }
    Ok(client_config)
}

/// The ids of the page requests this worker ran straight away, the newest
/// [`REMEMBERED_REQUESTS`] of them.
#[derive(Debug, Default)]
struct RanHere {
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

/// Handles `request`, then (with `continue_chain`) the next page of its run straight after
/// each page commits, for up to `continue_chain_ms`; `false` when shutdown interrupted it.
async fn handle_chain(
    pool: &Pool,
    request: PageRequest,
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    shutdown: &CancellationToken,
    ran_here: &mut RanHere,
) -> bool {
    let began = Instant::now();
    let mut request = request;
    loop {
        let Handled::Done { next } =
            handle_with_retries(pool, &request, config, metrics, shutdown).await
        else {
            return false;
        };
        let Some(next) = next.filter(|_| config.continue_chain) else {
            return true;
        };
        // Past the budget, or stopping: the published request carries the chain on.
        if began.elapsed() >= config.continue_chain_for() || shutdown.is_cancelled() {
            return true;
        }
        ran_here.insert(next.request_id);
        metrics.continued.fetch_add(1, Ordering::Relaxed);
        request = next;
    }
}

/// How handling a request ended.
enum Handled {
    /// Processed or dropped; the next page's request if the page raised one.
    Done { next: Option<PageRequest> },
    /// Shutdown interrupted the retries.
    Shutdown,
}

/// Handles one request until it is processed or dropped.
async fn handle_with_retries(
    pool: &Pool,
    request: &PageRequest,
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    shutdown: &CancellationToken,
) -> Handled {
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

/// Every few seconds: refreshes the runs-active gauge, and raises again the page request of
/// every run that made no progress for `stall_after` (`None`: never). A chain whose request
/// was lost (a topic deleted, a partition nobody consumed) heals itself this way; the
/// cursor fence drops the request that was not lost, if it turns up.
async fn watch_runs(
    pool: Pool,
    metrics: Arc<WorkerMetrics>,
    stall_after: Option<Duration>,
    shutdown: CancellationToken,
) {
    let every = stall_after.map_or(Duration::from_secs(5), |stall| {
        (stall / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    });
    loop {
        if let Ok(client) = pool.get().await {
            if let Ok(count) = reassign::running(&client).await {
                metrics.runs_active.store(count, Ordering::Relaxed);
            }
            if let Some(stall_after) = stall_after {
                heal_stalled(&pool, &client, &metrics, stall_after).await;
            }
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Raises the page requests of stalled runs again (one worker per run does).
async fn heal_stalled(
    pool: &Pool,
    client: &deadpool_postgres::Object,
    metrics: &WorkerMetrics,
    stall_after: Duration,
) {
    let stalled = match reassign::stalled(client, stall_after).await {
        Ok(stalled) => stalled,
        Err(error) => {
            warn!(%error, "cannot look for stalled runs");
            return;
        }
    };
    for run_id in stalled {
        match reassign::reraise_stalled(pool, run_id, stall_after).await {
            Ok(Some(request)) => {
                metrics.stalls.fetch_add(1, Ordering::Relaxed);
                warn!(run = %run_id, page = request.page, stalled_for_s = stall_after.as_secs(),
                      "run made no progress; raised its page request again");
            }
            Ok(None) => {}
            Err(error) => warn!(run = %run_id, %error, "cannot raise a stalled run's page again"),
        }
    }
}

/// Runs the worker as a process: `/metrics`, SIGTERM/Ctrl-C stop it after the current page.
pub async fn run_process(config: WorkerConfig) -> Result<(), WorkerError> {
    let mut kafka = config.kafka_settings();
    kafka
        .properties
        .insert("bootstrap.servers".into(), config.brokers.clone());
    if let Some(weakness) = kafka.weakness() {
        tracing::warn!("{weakness}");
    }
    let metrics = Arc::new(WorkerMetrics::default());
    let rendered = metrics.clone();
    ra_ledger_cdc::runtime::run_process(
        config.metrics_listen,
        move || rendered.render(),
        |shutdown| run(config, metrics, shutdown),
    )
    .await
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
