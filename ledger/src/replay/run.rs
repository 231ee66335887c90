//! Running a replay: record the past and the handoff, publish the past in checkpointed
//! batches at the replay's rate, end every partition of each replay topic with a completion
//! marker (see the module above for why this order proves the handoff).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};
use ra_ledger_cdc::infra::entry::Entry;
use ra_ledger_cdc::infra::kafka::KafkaSettings;
use ra_ledger_cdc::registry::SchemaRegistry;
use rdkafka::ClientConfig;
use rdkafka::producer::FutureProducer;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

use super::ReplayState;
use super::framing::Framing;
use super::kafka::{self, await_deliveries, produce_batch};
use super::stored::Replay;
pub use super::stored::RunError;
use crate::metrics::ReplayMetrics;

/// Positions scanned by one query at most: a selective filter never turns a batch into a
/// scan of the whole ledger.
pub const WINDOW: i64 = 20_000;
/// Events per batch at most. Below 10,000 events/s a batch is a tenth of a second's worth:
/// a replay reaches the broker in small bursts the live relay's messages slip between,
/// not in one burst a second that holds them up (measured by `ledger-bench replay`).
pub const MAX_BATCH: u32 = 1_000;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every event and marker is on the replay topics.
    Complete,
    /// Asked to stop; it resumes from its checkpoint.
    Stopped,
    /// Another process runs it.
    Busy,
    /// It had ended before (complete, failed or cancelled).
    AlreadyEnded(ReplayState),
    /// An operator cancelled it while it ran: it stopped, for good.
    Cancelled,
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

/// Runs replay `id` to its end (or until `shutdown`, or until an operator cancels it), if no
/// other process runs it. `progress` is called after every batch. With a `registry`, the
/// events of live topics framed for it are framed on their replay topics too
/// ([`super::framing`]).
#[inline(never)]
pub fn run<'a>(
    pool: &'a Pool,
    kafka: &'a KafkaSettings,
    registry: Option<&'a SchemaRegistry>,
    id: Uuid,
    metrics: &'a ReplayMetrics,
    shutdown: &'a CancellationToken,
    progress: &'a mut (dyn FnMut(Progress) + Send),
) -> Entry<'a, Result<Outcome, RunError>> {
    Box::pin(run_inner(
        pool, kafka, registry, id, metrics, shutdown, progress,
    ))
}

async fn run_inner(
    pool: &Pool,
    kafka: &KafkaSettings,
    registry: Option<&SchemaRegistry>,
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
    // Fired by `shutdown`, or by the watcher when an operator cancels the replay.
    let stop = shutdown.child_token();
    let watcher = tokio::spawn(super::cancel::watch(pool.clone(), id, stop.clone()));
    let result = run_locked(&mut client, kafka, registry, id, metrics, &stop, progress).await;
    stop.cancel();
    let _ = watcher.await;
    metrics.active.fetch_sub(1, Ordering::Relaxed);
    // A run that stopped short of its end, or failed, because the replay was cancelled
    // (a failed read leaves the outcome as it was: the lock is released below either way).
    let short = matches!(result, Ok(Outcome::Stopped) | Err(_));
    let result = if short
        && matches!(
            super::cancel::state(&client, id).await,
            Ok(Some(ReplayState::Cancelled))
        ) {
        Ok(Outcome::Cancelled)
    } else {
        result
    };
    if result
        .as_ref()
        .is_ok_and(|outcome| *outcome == Outcome::Cancelled)
    {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        info!(replay = %id, "replay cancelled: its run stopped");
    }
    match &result {
        Err(error) if error.ends_the_replay() => {
            client
                .execute(
                    include_str!("../sql/replay/fail.sql"),
                    &[&id, &error.disclosed().to_string()],
                )
                .await?;
        }
        Err(error) => {
            metrics.failures.fetch_add(1, Ordering::Relaxed);
            let _ = client
                .execute(
                    include_str!("../sql/replay/note_error.sql"),
                    &[&id, &error.disclosed().to_string()],
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

/// The run, once this process holds the replay's lock: its topics, then its past (recorded
/// now, or as a previous attempt recorded it), published from the checkpoint, then the
/// markers.
async fn run_locked(
    client: &mut Object,
    kafka: &KafkaSettings,
    registry: Option<&SchemaRegistry>,
    id: Uuid,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Outcome, RunError> {
    let replay = Replay::load(client, id).await?;
    if replay.status.ended() {
        return Ok(Outcome::AlreadyEnded(replay.status));
    }
    let attempts = begin_attempt(client, id).await?;
    let config = kafka
        .client_config()
        .map_err(|error| RunError::Settings(error.to_string()))?;
    let partitions = kafka::prepare_topics(&config, &replay).await?;
    let framing = Framing::of(registry, partitions.keys()).await?;
    let mut replay =
        start_or_resume(client, &config, replay, &partitions, attempts, metrics).await?;
    if replay.status == ReplayState::Cancelled {
        // Cancelled while its past was being recorded: it never started.
        return Ok(Outcome::Cancelled);
    }
    let snapshot = replay
        .snapshot
        .clone()
        .ok_or_else(|| RunError::Inconsistent("a running replay without a snapshot".into()))?;
    let producer = kafka::producer(&config)?;
    let published = publish_past(
        client,
        &producer,
        &framing,
        &mut replay,
        &snapshot,
        id,
        metrics,
        shutdown,
        progress,
    )
    .await?;
    if shutdown.is_cancelled() {
        // No markers now, even after the last batch: a run stopped for a restart writes
        // them when it resumes, and a cancelled replay never gets them.
        return Ok(Outcome::Stopped);
    }
    complete(client, &producer, &replay, &partitions, metrics, published).await
}

/// Counts this runner start; returns the replay's attempts so far.
async fn begin_attempt(client: &Object, id: Uuid) -> Result<i32, RunError> {
    Ok(client
        .query_one(include_str!("../sql/replay/begin_attempt.sql"), &[&id])
        .await?
        .get(0))
}

/// A requested replay gets its past and handoff recorded (and is loaded again with them);
/// a started one goes on from its checkpoint.
async fn start_or_resume(
    client: &mut Object,
    config: &ClientConfig,
    replay: Replay,
    partitions: &BTreeMap<String, i32>,
    attempts: i32,
    metrics: &ReplayMetrics,
) -> Result<Replay, RunError> {
    let id = replay.id;
    if replay.status == ReplayState::Requested {
        super::handoff::record_past(client, config, &replay, partitions).await?;
        let replay = Replay::load(client, id).await?;
        info!(replay = %id, total = replay.total, snapshot = ?replay.snapshot,
              handoff = ?replay.handoff, "replay started: past and handoff recorded");
        Ok(replay)
    } else {
        metrics.resumed.fetch_add(1, Ordering::Relaxed);
        info!(replay = %id, attempt = attempts, checkpoint = replay.checkpoint,
              "replay resumed from its checkpoint");
        Ok(replay)
    }
}

/// Writes the completion markers and records the replay complete.
async fn complete(
    client: &Object,
    producer: &FutureProducer,
    replay: &Replay,
    partitions: &BTreeMap<String, i32>,
    metrics: &ReplayMetrics,
    published: i64,
) -> Result<Outcome, RunError> {
    kafka::write_markers(producer, replay, partitions).await?;
    let completed = client
        .execute(include_str!("../sql/replay/complete.sql"), &[&replay.id])
        .await?;
    if completed == 0 {
        info!(replay = %replay.id, "replay cancelled while its markers were written");
        return Ok(Outcome::Cancelled);
    }
    metrics.completed.fetch_add(1, Ordering::Relaxed);
    info!(replay = %replay.id, published, "replay complete: markers written");
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
    framing: &Framing,
    replay: &mut Replay,
    snapshot: &str,
    id: Uuid,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<i64, RunError> {
    let batch_size = (replay.rate / 10).clamp(1, MAX_BATCH) as i64;
    let id_text = id.to_string();
    let mut attempt = Attempt::new();
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
        let deliveries = produce_batch(producer, replay, &id_text, &batch.rows, framing)?;
        let more = batch.next_checkpoint < replay.past_end;
        let both = async {
            tokio::join!(await_deliveries(deliveries), async {
                if more {
                    Some(
                        fetch_batch(client, replay, snapshot, batch_size, batch.next_checkpoint)
                            .await,
                    )
                } else {
                    None
                }
            })
        };
        let (acknowledged, next) = tokio::select! {
            // Stopping first: a broker that does not answer holds no shutdown or cancel up
            // (the batch is not checkpointed, and a resumed run sends it again).
            biased;
            () = shutdown.cancelled() => return Ok(published),
            both = both => both,
        };
        acknowledged?;
        let count = batch.rows.len() as i64;
        if !checkpoint(client, id, batch.next_checkpoint, count).await? {
            // No longer running, so cancelled (only this runner ends it otherwise): stop
            // before the next batch.
            shutdown.cancel();
            return Ok(published);
        }
        replay.checkpoint = batch.next_checkpoint;
        published += count;
        attempt.sent += count as u64;
        metrics.published.fetch_add(count as u64, Ordering::Relaxed);
        metrics
            .batch_duration
            .observe(started.elapsed().as_secs_f64());
        progress(Progress {
            published,
            total: replay.total,
            rate: attempt.rate(),
        });
        let Some(next) = next else {
            return Ok(published);
        };
        batch = next?;
        if let Some(wait) = ahead_by(attempt.sent, replay.rate, attempt.started.elapsed()) {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return Ok(published),
            }
        }
    }
}

/// What one attempt of a run has sent since it started: the pace and the rate it reports.
struct Attempt {
    started: Instant,
    sent: u64,
}

impl Attempt {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            sent: 0,
        }
    }

    /// Events a second since the attempt started.
    fn rate(&self) -> f64 {
        self.sent as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }
}

/// How long an attempt that sent `sent` events in `elapsed` waits before its next batch, so
/// that its events never run ahead of `rate` per second; `None` when it is behind. Pure.
fn ahead_by(sent: u64, rate: u32, elapsed: Duration) -> Option<Duration> {
    let due = Duration::from_secs_f64(sent as f64 / rate as f64);
    due.checked_sub(elapsed)
}

/// Records that the replay `id` published `count` more events, up to `next_checkpoint`.
/// `false` when the replay is no longer running (cancelled).
async fn checkpoint(
    client: &Object,
    id: Uuid,
    next_checkpoint: i64,
    count: i64,
) -> Result<bool, RunError> {
    let checkpointed = client
        .execute(
            include_str!("../sql/replay/checkpoint.sql"),
            &[&id, &next_checkpoint, &count],
        )
        .await?;
    Ok(checkpointed != 0)
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

async fn current_published(client: &Object, id: Uuid) -> Result<i64, RunError> {
    Ok(client
        .query_one("SELECT published FROM replays WHERE id = $1", &[&id])
        .await?
        .get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_waits_only_while_it_is_ahead_of_its_rate() {
        let second = Duration::from_secs(1);
        assert_eq!(
            ahead_by(0, 100, Duration::ZERO),
            Some(Duration::ZERO),
            "exactly on time: a wait of nothing"
        );
        assert_eq!(
            ahead_by(100, 100, Duration::from_millis(250)),
            Some(Duration::from_millis(750)),
            "a second's events sent in a quarter of it"
        );
        assert_eq!(ahead_by(100, 100, second), Some(Duration::ZERO), "on time");
        assert_eq!(ahead_by(100, 100, 2 * second), None, "behind");
        assert_eq!(ahead_by(0, 100, Duration::from_millis(1)), None, "behind");
        assert_eq!(
            ahead_by(1_000, 10_000, Duration::ZERO),
            Some(Duration::from_millis(100))
        );
    }
}
