//! Running a replay: record the past and the handoff, publish the past in checkpointed
//! batches at the replay's rate, end every partition of each replay topic with a completion
//! marker (see the module above for why this order proves the handoff).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use ra_ledger_cdc::kafka::KafkaSettings;
use ra_ledger_cdc::metrics::{Histogram, render_value};
use ra_ledger_cdc::publish::{DeliveryFailure, Origin, classify, event_headers, kafka_headers};
use ra_ledger_cdc::replay::{CompletionMarker, MARKER_KIND, header, replay_topic};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use tokio_postgres::IsolationLevel;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

/// Positions scanned by one query at most: a selective filter never turns a batch into a
/// scan of the whole ledger.
pub const WINDOW: i64 = 20_000;
/// Events per batch at most. Below 10,000 events/s a batch is a tenth of a second's worth:
/// a replay reaches the broker in small bursts the live relay's messages slip between,
/// not in one burst a second that holds them up (measured by `ledger bench replay`).
pub const MAX_BATCH: u32 = 1_000;
/// How long a replay topic keeps its records: a week to bootstrap from it.
pub const REPLAY_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// How long the start waits for transactions older than it to end.
const OLDER_TRANSACTIONS_WAIT: Duration = Duration::from_secs(60);

/// Replay metrics (served by `ledger worker` on /metrics).
pub mod names {
    /// Events acknowledged on replay topics.
    pub const PUBLISHED: &str = "ra_replay_events_published_total";
    /// Replays this process completed.
    pub const COMPLETED: &str = "ra_replay_completed_total";
    /// Runner starts that resumed a replay another runner had started.
    pub const RESUMED: &str = "ra_replay_resumed_total";
    /// Runs that ended in an error (retried from the checkpoint).
    pub const FAILURES: &str = "ra_replay_failures_total";
    /// Replays running in this process (0 or 1).
    pub const ACTIVE: &str = "ra_replay_active";
    /// Wall time of one batch: read, produce, acknowledge, checkpoint.
    pub const BATCH_DURATION: &str = "ra_replay_batch_duration_seconds";
}

/// Counters of the replays this process ran.
#[derive(Debug, Default)]
pub struct ReplayMetrics {
    published: AtomicU64,
    completed: AtomicU64,
    resumed: AtomicU64,
    failures: AtomicU64,
    active: AtomicI64,
    batch_duration: Histogram,
}

impl ReplayMetrics {
    /// Appends the Prometheus text format.
    pub fn render_into(&self, out: &mut String) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        render_value(
            out,
            names::PUBLISHED,
            "Events acknowledged on replay topics.",
            "counter",
            load(&self.published),
        );
        render_value(
            out,
            names::COMPLETED,
            "Replays completed (markers written).",
            "counter",
            load(&self.completed),
        );
        render_value(
            out,
            names::RESUMED,
            "Runner starts that resumed a started replay from its checkpoint.",
            "counter",
            load(&self.resumed),
        );
        render_value(
            out,
            names::FAILURES,
            "Replay runs that ended in an error.",
            "counter",
            load(&self.failures),
        );
        render_value(
            out,
            names::ACTIVE,
            "Replays running in this process.",
            "gauge",
            self.active.load(Ordering::Relaxed),
        );
        self.batch_duration.render(
            out,
            names::BATCH_DURATION,
            "Wall time of a replay batch: read, produce, acknowledge, checkpoint.",
        );
    }
}

/// Why a run stopped short.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No such replay.
    #[error("no replay {0}")]
    NotFound(Uuid),
    /// The database failed; the replay resumes from its checkpoint.
    #[error("database: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No connection.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Kafka failed; the replay resumes from its checkpoint.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// Older transactions did not end in time; the start is retried.
    #[error(
        "transactions older than the replay are still open after {0:?} ({1}); the start is retried"
    )]
    OlderTransactions(Duration, String),
    /// The replay cannot go on; it is marked failed.
    #[error("{0}")]
    Failed(String),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every event and marker is on the replay topics.
    Complete,
    /// Asked to stop; it resumes from its checkpoint.
    Stopped,
    /// Another process runs it.
    Busy,
    /// It had ended before (complete or failed).
    AlreadyEnded(super::ReplayState),
}

/// Where a run is, after each batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Events acknowledged so far, all attempts.
    pub published: i64,
    /// Selected events in the past.
    pub total: i64,
    /// Events per second in this attempt.
    pub rate: f64,
}

/// The stored replay, as a runner needs it.
struct Replay {
    id: Uuid,
    status: super::ReplayState,
    aggregate_types: Vec<String>,
    event_types: Option<Vec<String>>,
    stream_prefix: Option<String>,
    recorded_from: Option<DateTime<Utc>>,
    recorded_to: Option<DateTime<Utc>>,
    topic_prefix: String,
    template: String,
    rate: u32,
    handoff: BTreeMap<String, BTreeMap<i32, i64>>,
    topic_events: BTreeMap<String, u64>,
    snapshot: Option<String>,
    past_end: i64,
    total: i64,
    checkpoint: i64,
}

impl Replay {
    async fn load(client: &Object, id: Uuid) -> Result<Self, RunError> {
        let row = client
            .query_opt(include_str!("../sql/replay/replay_row.sql"), &[&id])
            .await?
            .ok_or(RunError::NotFound(id))?;
        let json = |column: &str| -> Option<serde_json::Value> { row.get(column) };
        Ok(Self {
            id,
            status: super::ReplayState::parse(row.get("status")),
            aggregate_types: row.get("aggregate_types"),
            event_types: row.get("event_types"),
            stream_prefix: row.get("stream_prefix"),
            recorded_from: row.get("recorded_from"),
            recorded_to: row.get("recorded_to"),
            topic_prefix: row.get("topic_prefix"),
            template: row.get("target_template"),
            rate: row.get::<_, i32>("rate").max(1) as u32,
            handoff: json("handoff")
                .and_then(|value| serde_json::from_value(value).ok())
                .unwrap_or_default(),
            topic_events: json("topic_events")
                .and_then(|value| serde_json::from_value(value).ok())
                .unwrap_or_default(),
            snapshot: row.get("snapshot"),
            past_end: row.get::<_, Option<i64>>("past_end_position").unwrap_or(0),
            total: row.get::<_, Option<i64>>("total_events").unwrap_or(0),
            checkpoint: row.get("checkpoint"),
        })
    }

    fn live_topic(&self, aggregate: &str) -> String {
        format!("{}{aggregate}", self.topic_prefix)
    }

    fn replay_topic(&self, live_topic: &str) -> String {
        replay_topic(&self.template, live_topic, &self.id.to_string())
    }
}

/// Runs replay `id` to its end (or until `shutdown`), if no other process runs it.
/// `progress` is called after every batch.
pub async fn run(
    pool: &Pool,
    kafka: &KafkaSettings,
    id: Uuid,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Outcome, RunError> {
    let mut client = pool.get().await?;
    let locked: bool = client
        .query_one(include_str!("../sql/replay/lock.sql"), &[&id])
        .await?
        .get(0);
    if !locked {
        return Ok(Outcome::Busy);
    }
    metrics.active.fetch_add(1, Ordering::Relaxed);
    let result = run_locked(&mut client, kafka, id, metrics, shutdown, progress).await;
    metrics.active.fetch_sub(1, Ordering::Relaxed);
    match &result {
        Err(RunError::Failed(reason)) => {
            client
                .execute(include_str!("../sql/replay/fail.sql"), &[&id, reason])
                .await?;
        }
        Err(error) => {
            metrics.failures.fetch_add(1, Ordering::Relaxed);
            let _ = client
                .execute(
                    include_str!("../sql/replay/note_error.sql"),
                    &[&id, &error.to_string()],
                )
                .await;
        }
        Ok(_) => {}
    }
    let unlocked = client
        .query_one(include_str!("../sql/replay/unlock.sql"), &[&id])
        .await;
    if unlocked.is_err() {
        // Never hand a connection that may still hold the lock back to the pool.
        drop(Object::take(client));
    }
    result
}

async fn run_locked(
    client: &mut Object,
    kafka: &KafkaSettings,
    id: Uuid,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Outcome, RunError> {
    let mut replay = Replay::load(client, id).await?;
    if matches!(
        replay.status,
        super::ReplayState::Complete | super::ReplayState::Failed
    ) {
        return Ok(Outcome::AlreadyEnded(replay.status));
    }
    let attempts: i32 = client
        .query_one(include_str!("../sql/replay/begin_attempt.sql"), &[&id])
        .await?
        .get(0);
    let config = kafka
        .client_config()
        .map_err(|error| RunError::Failed(format!("Kafka settings: {error}")))?;
    let mut partitions = BTreeMap::new();
    for aggregate in &replay.aggregate_types {
        let live = replay.live_topic(aggregate);
        let count = topic_partitions(&config, &live).await?;
        ensure_replay_topic(&config, &replay.replay_topic(&live), count).await?;
        partitions.insert(live, count);
    }
    if replay.status == super::ReplayState::Requested {
        record_past(client, &config, &replay, &partitions).await?;
        replay = Replay::load(client, id).await?;
        info!(replay = %id, total = replay.total, snapshot = ?replay.snapshot,
              handoff = ?replay.handoff, "replay started: past and handoff recorded");
    } else {
        metrics.resumed.fetch_add(1, Ordering::Relaxed);
        info!(replay = %id, attempt = attempts, checkpoint = replay.checkpoint,
              "replay resumed from its checkpoint");
    }
    let snapshot = replay
        .snapshot
        .clone()
        .ok_or_else(|| RunError::Failed("a running replay without a snapshot".into()))?;
    let producer: FutureProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .create()
        .map_err(|error| RunError::Kafka(error.to_string()))?;
    let published = publish_past(
        client,
        &producer,
        &mut replay,
        &snapshot,
        id,
        metrics,
        shutdown,
        progress,
    )
    .await?;
    if shutdown.is_cancelled() && replay.checkpoint < replay.past_end {
        return Ok(Outcome::Stopped);
    }
    write_markers(&producer, &replay, &partitions).await?;
    client
        .execute(include_str!("../sql/replay/complete.sql"), &[&id])
        .await?;
    metrics.completed.fetch_add(1, Ordering::Relaxed);
    info!(replay = %id, published, "replay complete: markers written");
    Ok(Outcome::Complete)
}

/// One batch of the past: its events in position order, and the checkpoint after it.
struct Batch {
    rows: Vec<tokio_postgres::Row>,
    next_checkpoint: i64,
}

/// Publishes the past from the replay's checkpoint to its end, one batch at a time, each
/// acknowledged by Kafka before its checkpoint is recorded. The next batch is read from
/// PostgreSQL while Kafka acknowledges the one before, so neither waits for the other.
/// Returns early, checkpointed, when `shutdown` fires; returns how many events the replay
/// has published in all its attempts.
#[allow(clippy::too_many_arguments)]
async fn publish_past(
    client: &Object,
    producer: &FutureProducer,
    replay: &mut Replay,
    snapshot: &str,
    id: Uuid,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<i64, RunError> {
    let batch_size = (replay.rate / 10).clamp(1, MAX_BATCH) as i64;
    let id_text = id.to_string();
    let attempt_started = Instant::now();
    let mut sent_this_attempt = 0u64;
    let mut published = current_published(client, id).await?;
    if replay.checkpoint >= replay.past_end {
        return Ok(published);
    }
    let mut batch = fetch_batch(client, replay, snapshot, batch_size, replay.checkpoint).await?;
    loop {
        if shutdown.is_cancelled() {
            return Ok(published);
        }
        let started = Instant::now();
        let deliveries = produce_batch(producer, replay, &id_text, &batch.rows)?;
        let more = batch.next_checkpoint < replay.past_end;
        let (acknowledged, next) = tokio::join!(await_deliveries(deliveries), async {
            if more {
                Some(fetch_batch(client, replay, snapshot, batch_size, batch.next_checkpoint).await)
            } else {
                None
            }
        });
        acknowledged?;
        let count = batch.rows.len() as i64;
        client
            .execute(
                include_str!("../sql/replay/checkpoint.sql"),
                &[&id, &batch.next_checkpoint, &count],
            )
            .await?;
        replay.checkpoint = batch.next_checkpoint;
        published += count;
        sent_this_attempt += count as u64;
        metrics.published.fetch_add(count as u64, Ordering::Relaxed);
        metrics
            .batch_duration
            .observe(started.elapsed().as_secs_f64());
        progress(Progress {
            published,
            total: replay.total,
            rate: sent_this_attempt as f64 / attempt_started.elapsed().as_secs_f64().max(1e-3),
        });
        let Some(next) = next else {
            return Ok(published);
        };
        batch = next?;
        // The pace: this attempt's events never run ahead of `rate` per second.
        let due = Duration::from_secs_f64(sent_this_attempt as f64 / replay.rate as f64);
        if let Some(wait) = due.checked_sub(attempt_started.elapsed()) {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return Ok(published),
            }
        }
    }
}

/// The next selected events after position `from`, at most `batch_size` of them within a
/// window of [`WINDOW`] positions.
async fn fetch_batch(
    client: &Object,
    replay: &Replay,
    snapshot: &str,
    batch_size: i64,
    from: i64,
) -> Result<Batch, RunError> {
    let window_end = (from + WINDOW).min(replay.past_end);
    let rows = client
        .query(
            include_str!("../sql/replay/batch.sql"),
            &[
                &from,
                &window_end,
                &snapshot,
                &replay.aggregate_types,
                &replay.event_types,
                &replay.stream_prefix,
                &replay.recorded_from,
                &replay.recorded_to,
                &batch_size,
            ],
        )
        .await?;
    let next_checkpoint = match rows.last() {
        Some(last) if rows.len() as i64 == batch_size => last.get::<_, i64>("position"),
        _ => window_end,
    };
    Ok(Batch {
        rows,
        next_checkpoint,
    })
}

/// A delivery in flight, with the event it carries (to name it if Kafka refuses it).
type Delivery = (String, rdkafka::producer::DeliveryFuture);

/// Hands every event of a batch to the producer, with the live message's headers.
fn produce_batch(
    producer: &FutureProducer,
    replay: &Replay,
    id_text: &str,
    rows: &[tokio_postgres::Row],
) -> Result<Vec<Delivery>, RunError> {
    let mut deliveries = Vec::with_capacity(rows.len());
    for row in rows {
        let stream: &str = row.get("stream");
        let (aggregate, key) = stream.split_once('-').unwrap_or((stream, ""));
        let topic = replay.replay_topic(&replay.live_topic(aggregate));
        let event_id: &str = row.get("event_id");
        // The live message's headers, as far as the events table holds their facts
        // (`Origin::Events` says which it cannot), plus the replay's id.
        let xid = row
            .get::<_, Option<i64>>("xid")
            .and_then(|xid| u32::try_from(xid).ok());
        let mut headers = event_headers(
            event_id,
            row.get("event_type"),
            row.get("traceparent"),
            Origin::Events { xid },
        );
        headers.push((header::REPLAY_ID, id_text.to_owned()));
        let payload: &[u8] = row.get("payload");
        let record = FutureRecord::to(&topic)
            .key(key.as_bytes())
            .payload(payload)
            .headers(kafka_headers(&headers));
        match producer.send_result(record) {
            Ok(delivery) => deliveries.push((event_id.to_owned(), delivery)),
            Err((error, _)) => return Err(kafka_failure(&error, event_id)),
        }
    }
    Ok(deliveries)
}

/// Waits until Kafka acknowledged every delivery; the first refusal is the batch's error.
async fn await_deliveries(deliveries: Vec<Delivery>) -> Result<(), RunError> {
    for (event_id, delivery) in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => return Err(kafka_failure(&error, &event_id)),
            Err(_canceled) => return Err(RunError::Kafka("producer closed".into())),
        }
    }
    Ok(())
}

async fn current_published(client: &Object, id: Uuid) -> Result<i64, RunError> {
    Ok(client
        .query_one("SELECT published FROM replays WHERE id = $1", &[&id])
        .await?
        .get(0))
}

fn text_header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a [u8]> {
    Header {
        key,
        value: Some(value.as_bytes()),
    }
}

fn kafka_failure(error: &KafkaError, event_id: &str) -> RunError {
    match classify(error) {
        DeliveryFailure::Permanent => {
            RunError::Failed(format!("Kafka refuses event {event_id} for good: {error}"))
        }
        DeliveryFailure::Transient => RunError::Kafka(format!("event {event_id}: {error}")),
    }
}

/// Steps 1 to 3 of the handoff (module docs): the live end offsets, then a wait for the
/// transactions older than a fresh transaction id, then the snapshot.
async fn record_past(
    client: &mut Object,
    config: &ClientConfig,
    replay: &Replay,
    partitions: &BTreeMap<String, i32>,
) -> Result<(), RunError> {
    let mut handoff = BTreeMap::new();
    for (live, &count) in partitions {
        handoff.insert(live.clone(), end_offsets(config, live, count).await?);
    }
    let fence: String = client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await?
        .get(0);
    let waiting_since = Instant::now();
    loop {
        let older = client
            .query(
                include_str!("../sql/replay/older_in_progress.sql"),
                &[&fence],
            )
            .await?;
        if older.is_empty() {
            break;
        }
        if waiting_since.elapsed() > OLDER_TRANSACTIONS_WAIT {
            let named: Vec<String> = older
                .iter()
                .map(|row| {
                    let xid: String = row.get("xid");
                    let pids: Option<String> = row.get("pids");
                    format!("xid {xid} (pid {})", pids.as_deref().unwrap_or("?"))
                })
                .collect();
            return Err(RunError::OlderTransactions(
                OLDER_TRANSACTIONS_WAIT,
                named.join(", "),
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let row = tx
        .query_one(
            include_str!("../sql/replay/take_past.sql"),
            &[
                &replay.aggregate_types,
                &replay.event_types,
                &replay.stream_prefix,
                &replay.recorded_from,
                &replay.recorded_to,
            ],
        )
        .await?;
    let snapshot: String = row.get("snapshot");
    let past_end: i64 = row.get("past_end");
    let counts: serde_json::Value = row.get("topic_events");
    let counts: BTreeMap<String, i64> = serde_json::from_value(counts).unwrap_or_default();
    let topic_events: BTreeMap<String, i64> = replay
        .aggregate_types
        .iter()
        .map(|aggregate| {
            (
                replay.live_topic(aggregate),
                counts.get(aggregate).copied().unwrap_or(0),
            )
        })
        .collect();
    let total: i64 = topic_events.values().sum();
    let handoff = serde_json::to_value(&handoff).expect("offsets serialize");
    let topic_events = serde_json::to_value(&topic_events).expect("counts serialize");
    tx.execute(
        include_str!("../sql/replay/record_past.sql"),
        &[
            &replay.id,
            &handoff,
            &snapshot,
            &past_end,
            &total,
            &topic_events,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A completion marker on every partition of each replay topic, carrying its live topic's
/// handoff offsets.
async fn write_markers(
    producer: &FutureProducer,
    replay: &Replay,
    partitions: &BTreeMap<String, i32>,
) -> Result<(), RunError> {
    for (live, &count) in partitions {
        let replay_topic = replay.replay_topic(live);
        let marker = CompletionMarker {
            replay_id: replay.id.to_string(),
            replay_topic: replay_topic.clone(),
            live_topic: live.clone(),
            handoff: replay.handoff.get(live).cloned().ok_or_else(|| {
                RunError::Failed(format!("no handoff offsets recorded for {live}"))
            })?,
            events: replay.topic_events.get(live).copied().unwrap_or(0),
            snapshot: replay.snapshot.clone().unwrap_or_default(),
        };
        let value = serde_json::to_vec(&marker).expect("marker serializes");
        let id = replay.id.to_string();
        for partition in 0..count {
            let headers = OwnedHeaders::new_with_capacity(2)
                .insert(text_header(header::REPLAY_ID, &id))
                .insert(text_header(header::MARKER, MARKER_KIND));
            let record = FutureRecord::<(), _>::to(&replay_topic)
                .partition(partition)
                .payload(&value)
                .headers(headers);
            match producer.send(record, Duration::from_secs(120)).await {
                Ok(_) => {}
                Err((error, _)) => {
                    return Err(RunError::Kafka(format!(
                        "completion marker on {replay_topic}/{partition}: {error}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Runs `query` with a metadata client of `config` on a blocking thread (librdkafka's
/// metadata calls block). Its end offsets are read under `read_committed` whatever the
/// operator's settings: the last stable offset is never above the high watermark, so it is
/// the safe handoff however a team reads the live topic (the two are equal while no
/// transaction is open, and the relay writes none).
async fn with_metadata_client<T: Send + 'static>(
    config: &ClientConfig,
    query: impl FnOnce(&BaseConsumer) -> Result<T, RunError> + Send + 'static,
) -> Result<T, RunError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", "ra-ledger-replay-metadata")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|error| RunError::Kafka(error.to_string()))?;
        query(&consumer)
    })
    .await
    .map_err(|error| RunError::Kafka(error.to_string()))?
}

/// The partition count of `topic`; an error names a missing topic.
async fn topic_partitions(config: &ClientConfig, topic: &str) -> Result<i32, RunError> {
    let topic = topic.to_owned();
    with_metadata_client(config, move |consumer| {
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(|error| RunError::Kafka(format!("metadata of {topic}: {error}")))?;
        let count = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len())
            .sum::<usize>();
        if count == 0 {
            return Err(RunError::Kafka(format!(
                "live topic {topic} does not exist (ledger topics create)"
            )));
        }
        Ok(count as i32)
    })
    .await
}

/// Each partition's end offset of `topic`, as the broker reports it: one past its last
/// message (see the module docs).
async fn end_offsets(
    config: &ClientConfig,
    topic: &str,
    count: i32,
) -> Result<BTreeMap<i32, i64>, RunError> {
    let topic = topic.to_owned();
    with_metadata_client(config, move |consumer| {
        (0..count)
            .map(|partition| {
                consumer
                    .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                    .map(|(_, high)| (partition, high))
                    .map_err(|error| {
                        RunError::Kafka(format!("end offset of {topic}/{partition}: {error}"))
                    })
            })
            .collect()
    })
    .await
}

/// Creates the replay topic with as many partitions as its live topic, or checks the one
/// a previous attempt created.
async fn ensure_replay_topic(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> Result<(), RunError> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|error| RunError::Kafka(error.to_string()))?;
    let retention = REPLAY_RETENTION_MS.to_string();
    // Replicated as the cluster's default, as the live topics are by default.
    let new_topic = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(crate::topics::BROKER_DEFAULT_REPLICATION),
    )
    .set("cleanup.policy", "delete")
    .set("retention.ms", &retention);
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(|error| RunError::Kafka(format!("creating {topic}: {error}")))?;
    for result in results {
        match result {
            Ok(_) => info!(%topic, partitions, "replay topic created"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                let existing = topic_partitions(config, topic).await?;
                if existing != partitions {
                    return Err(RunError::Failed(format!(
                        "replay topic {topic} exists with {existing} partitions, its live topic has {partitions}"
                    )));
                }
            }
            Err((_, code)) => {
                return Err(RunError::Kafka(format!("creating {topic}: {code}")));
            }
        }
    }
    Ok(())
}

/// Runs requested and unfinished replays, one at a time, until `shutdown` (in `ledger
/// worker`). A replay another process runs is left to it; one whose runner died is resumed
/// from its checkpoint.
pub async fn serve(
    pool: Pool,
    kafka: KafkaSettings,
    metrics: std::sync::Arc<ReplayMetrics>,
    poll: Duration,
    shutdown: CancellationToken,
) {
    loop {
        match next_round(&pool, &kafka, &metrics, &shutdown).await {
            Ok(()) => {}
            Err(error) => warn!(%error, "replays: will retry"),
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn next_round(
    pool: &Pool,
    kafka: &KafkaSettings,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
) -> Result<(), RunError> {
    let ids: Vec<Uuid> = pool
        .get()
        .await?
        .query(include_str!("../sql/replay/unfinished.sql"), &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for id in ids {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        match run(pool, kafka, id, metrics, shutdown, &mut |_| {}).await {
            Ok(Outcome::Busy | Outcome::AlreadyEnded(_)) => {}
            Ok(outcome) => info!(replay = %id, ?outcome, "replay run ended"),
            Err(error) => {
                warn!(replay = %id, %error, "replay run failed; resumes from its checkpoint")
            }
        }
    }
    Ok(())
}
