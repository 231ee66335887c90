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

mod pages;
mod stalls;

use std::sync::Arc;
use std::time::Duration;

use ra_ledger_cdc::infra::entry::Entry;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use crate::config::WorkerConfig;
use crate::db;
use crate::metrics::WorkerMetrics;

/// How often the worker looks for replays to run (requested, or left by a dead runner).
pub const REPLAY_POLL: Duration = Duration::from_secs(2);

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
    Config(#[from] ra_ledger_cdc::infra::settings::ConfigError),
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
    let watcher = tokio::spawn(stalls::watch_runs(
        pool.clone(),
        Arc::clone(&metrics),
        config.stall_after(),
        shutdown.clone(),
    ));
    let replays = host_replays(&config, &metrics, &shutdown)?;
    let mut pages = pages::Pages {
        pool: &pool,
        config: &config,
        metrics: &metrics,
        shutdown: &shutdown,
        ran_here: pages::RanHere::default(),
    };
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
        if let Some(request) = pages::decode(&message)
            && !pages.handle_request(request).await
        {
            // Shutting down mid-retry: the offset stays uncommitted and the request is
            // redelivered to whoever takes the partition.
            break;
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

/// The replay host ([`crate::replay::serve`]), started beside the pages. Replays run on
/// connections of their own: a replay holds one for its whole run (its lock), and never
/// delays a page.
fn host_replays(
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    shutdown: &CancellationToken,
) -> Result<JoinHandle<()>, WorkerError> {
    Ok(tokio::spawn(crate::replay::serve::serve(
        db::pool(&config.database_url, "ledger-replay", 2)?,
        config.kafka_settings(),
        config.schema_registry()?,
        Arc::clone(&metrics.replays),
        REPLAY_POLL,
        shutdown.clone(),
    )))
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
) -> Result<rdkafka::ClientConfig, ra_ledger_cdc::infra::settings::ConfigError> {
    let mut client_config = config.kafka_settings().client_config()?;
    client_config
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

/// Runs the worker as a process: `/metrics`, SIGTERM/Ctrl-C stop it after the current page.
#[inline(never)]
pub fn run_process(config: WorkerConfig) -> Entry<'static, Result<(), WorkerError>> {
    Box::pin(run_process_inner(config))
}

async fn run_process_inner(config: WorkerConfig) -> Result<(), WorkerError> {
    if let Some(weakness) = config.kafka_settings().weakness() {
        tracing::warn!("{weakness}");
    }
    let metrics = Arc::new(WorkerMetrics::default());
    let rendered = Arc::clone(&metrics);
    ra_ledger_cdc::infra::runtime::run_process(
        config.metrics_listen,
        move || rendered.render(),
        |shutdown| run(config, metrics, shutdown),
    )
    .await
}
