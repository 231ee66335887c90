//! The relay: streams committed outbox rows from the logical replication slot to Kafka in
//! commit order, and confirms the slot's position only once Kafka acknowledged everything
//! before it. After any crash it resumes from the slot: duplicates are possible, loss is not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use pgwire_replication::{
    Lsn, PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use crate::ack::{AckTracker, TransactionSeq};
use crate::config::RelayConfig;
use crate::metrics::{PG_EPOCH_MICROS, RelayMetrics, now_micros};
use crate::outbox::{OutboxError, OutboxLayout};
use crate::parking;
use crate::pgoutput::{self, DecodeError, LogicalMessage};
use crate::publish::{self, CommitInfo, DeliveryFailure, OutgoingMessage};

/// Prefix of the relay's heartbeat messages in the WAL.
pub const HEARTBEAT_PREFIX: &str = "ra-ledger.heartbeat";

/// Why a session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// PostgreSQL (SQL connection) failed.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The replication connection failed.
    #[error("replication stream: {0}")]
    Replication(#[from] PgWireError),
    /// Another relay holds the slot.
    #[error("slot {0} is held by another relay; waiting to take over")]
    SlotBusy(String),
    /// Kafka failed in a way that may pass.
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The WAL carries bytes we cannot decode.
    #[error(
        "cannot decode the replication stream: {0}. This is a bug or an unsupported server; stopping so nothing is skipped"
    )]
    Decode(#[from] DecodeError),
    /// The outbox does not look like the relay expects.
    #[error("{0}. Fix the schema or the publication, then restart the relay")]
    Outbox(#[from] OutboxError),
    /// The publication carries a table other than the outbox.
    #[error("publication {publication} carries table {table}; it must carry only the outbox")]
    ForeignTable {
        /// The publication.
        publication: String,
        /// The unexpected table.
        table: String,
    },
    /// The database URL is unusable.
    #[error("database URL: {0}")]
    Url(String),
}

/// Whether to reconnect after an error or stop and tell the operator. Pure.
pub fn should_retry(error: &RelayError) -> bool {
    !matches!(
        error,
        RelayError::Decode(_)
            | RelayError::Outbox(_)
            | RelayError::ForeignTable { .. }
            | RelayError::Url(_)
    )
}

/// Runs the relay until `shutdown` is cancelled or a definite error, reconnecting with
/// backoff after transient ones.
pub async fn run(
    config: RelayConfig,
    metrics: Arc<RelayMetrics>,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let span = info_span!("relay", slot = %config.slot);
    async move {
        let mut backoff = Duration::from_millis(100);
        let max_backoff = Duration::from_millis(config.reconnect_backoff_max_ms);
        loop {
            metrics.session_started();
            let started = Instant::now();
            let outcome = session(&config, &metrics, &shutdown).await;
            metrics.set_streaming(false);
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) if !should_retry(&error) => {
                    error!(%error, "relay stopped");
                    return Err(error);
                }
                Err(RelayError::SlotBusy(slot)) => {
                    info!(%slot, "slot busy; another relay is active, waiting")
                }
                Err(error) => {
                    warn!(%error, retry_in = ?backoff, "relay session ended; reconnecting")
                }
            }
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(100);
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(max_backoff);
        }
    }
    .instrument(span)
    .await
}

/// A message handed to librdkafka, and what became of it.
type Delivery = (TransactionSeq, OutgoingMessage, u64, Result<(), KafkaError>);

/// One replication session: from connecting to the first error, or to shutdown.
async fn session(
    config: &RelayConfig,
    metrics: &RelayMetrics,
    shutdown: &CancellationToken,
) -> Result<(), RelayError> {
    let application_name = format!("ledger-relay:{}", config.slot);
    let sql = connect_sql(&config.database_url, &application_name).await?;
    ensure_publication_and_slot(&sql, config).await?;
    let producer = publish::producer(config)?;
    let mut replication =
        ReplicationClient::connect(replication_config(config, &application_name)?).await?;
    if let Err(error) = replication.wait_started().await {
        let text = error.to_string();
        return Err(if text.contains("is active for PID") {
            RelayError::SlotBusy(config.slot.clone())
        } else {
            error.into()
        });
    }
    info!("streaming from the slot");
    metrics.set_streaming(true);

    let mut tracker = AckTracker::new();
    let mut deliveries: FuturesUnordered<BoxFuture<'static, Delivery>> = FuturesUnordered::new();
    let mut layouts: HashMap<u32, OutboxLayout> = HashMap::new();
    // The transaction being streamed: its tracker entry, what its headers need, and how many
    // rows it carried so far (the next row's ordinal).
    let mut transaction: Option<(TransactionSeq, CommitInfo, usize)> = None;
    let mut confirmed = 0u64;
    let mut heartbeat = tokio::time::interval(config.heartbeat_interval());
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        let can_read = tracker.in_flight() < config.max_in_flight;
        tokio::select! {
            // Priority: shutdown first, then acknowledgements (they free capacity and move
            // the slot), then heartbeats, then new WAL.
            biased;
            () = shutdown.cancelled() => break,
            Some((seq, message, commit_lsn, result)) = deliveries.next(), if !deliveries.is_empty() => {
                settle_delivery(&sql, &mut tracker, seq, &message, commit_lsn, result, metrics).await?;
            }
            _ = heartbeat.tick() => {
                sql.execute("SELECT pg_logical_emit_message(true, $1, '')", &[&HEARTBEAT_PREFIX]).await?;
            }
            event = replication.recv(), if can_read => {
                let Some(event) = event? else {
                    return Err(RelayError::Replication(PgWireError::Protocol("the server ended the stream".into())));
                };
                match event {
                    // Protocol v1 sends a transaction only once it committed, whole and in
                    // commit order, so its rows are published as they arrive; the slot is
                    // confirmed past it only after its Commit and every acknowledgement.
                    ReplicationEvent::Begin { final_lsn, xid, commit_time_micros } => {
                        if transaction.is_some() {
                            // An unclosed transaction would hold the slot back forever.
                            return Err(RelayError::Replication(PgWireError::Protocol(
                                "a Begin inside a transaction".into(),
                            )));
                        }
                        let commit = CommitInfo {
                            commit_lsn: final_lsn.as_u64(),
                            xid,
                            commit_time_micros: commit_time_micros + PG_EPOCH_MICROS,
                        };
                        transaction = Some((tracker.open(commit.commit_time_micros), commit, 0));
                    }
                    ReplicationEvent::XLogData { data, wal_end, .. } => {
                        metrics.observe_wal_end(wal_end.as_u64());
                        match pgoutput::decode(&data)? {
                            LogicalMessage::Relation(relation) => {
                                if relation.name != "outbox" {
                                    return Err(RelayError::ForeignTable {
                                        publication: config.publication.clone(),
                                        table: format!("{}.{}", relation.namespace, relation.name),
                                    });
                                }
                                layouts.insert(relation.oid, OutboxLayout::from_relation(&relation)?);
                            }
                            LogicalMessage::Insert { relation_oid, new } => {
                                let layout = layouts.get(&relation_oid).ok_or_else(|| {
                                    RelayError::Decode(DecodeError::UnknownTag(b'I'))
                                })?;
                                let row = layout.row(&new)?;
                                let Some((seq, commit, ordinal)) = transaction.as_mut() else {
                                    return Err(RelayError::Replication(PgWireError::Protocol(
                                        "an insert outside a transaction".into(),
                                    )));
                                };
                                let message = OutgoingMessage::new(config, row, commit, *ordinal);
                                *ordinal += 1;
                                tracker.sent(*seq);
                                match send(&producer, *seq, message, commit.commit_lsn) {
                                    Ok(delivery) => deliveries.push(delivery),
                                    Err(refused) => {
                                        let (message, error) = *refused;
                                        settle_delivery(&sql, &mut tracker, *seq, &message, commit.commit_lsn, Err(error), metrics).await?;
                                    }
                                }
                            }
                            // The publication is insert-only; anything else carries no event.
                            _ => {}
                        }
                    }
                    ReplicationEvent::Commit { end_lsn, .. } => {
                        metrics.observe_wal_end(end_lsn.as_u64());
                        if let Some((seq, _, _)) = transaction.take() {
                            tracker.close(seq, end_lsn.as_u64());
                        }
                    }
                    ReplicationEvent::KeepAlive { wal_end, .. } => metrics.observe_wal_end(wal_end.as_u64()),
                    ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
                }
            }
        }
        confirm(&replication, &mut tracker, &mut confirmed, metrics);
    }

    // Shutdown: stop reading, drain what is in flight within the grace period, confirm.
    info!(in_flight = tracker.in_flight(), "draining before shutdown");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(config.shutdown_grace_ms);
    while !deliveries.is_empty() {
        match tokio::time::timeout_at(deadline, deliveries.next()).await {
            Ok(Some((seq, message, commit_lsn, result))) => {
                settle_delivery(
                    &sql,
                    &mut tracker,
                    seq,
                    &message,
                    commit_lsn,
                    result,
                    metrics,
                )
                .await?;
                confirm(&replication, &mut tracker, &mut confirmed, metrics);
            }
            Ok(None) => break,
            Err(_) => {
                warn!(
                    in_flight = tracker.in_flight(),
                    "grace period over; the rest will be republished by the next relay"
                );
                break;
            }
        }
    }
    wait_for_confirmation(&sql, config, confirmed).await;
    replication.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), replication.shutdown()).await;
    info!(confirmed = %publish::format_lsn(confirmed), "relay stopped cleanly");
    Ok(())
}

/// Hands one message to librdkafka; the future resolves when Kafka acknowledged or refused it.
fn send(
    producer: &FutureProducer,
    seq: TransactionSeq,
    message: OutgoingMessage,
    commit_lsn: u64,
) -> Result<BoxFuture<'static, Delivery>, Box<(OutgoingMessage, KafkaError)>> {
    let record = FutureRecord::to(&message.topic)
        .key(message.row.aggregate_id.as_bytes())
        .payload(message.row.payload.as_ref())
        .headers(message.kafka_headers());
    match producer.send_result(record) {
        Ok(future) => Ok(Box::pin(async move {
            let result = match future.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((error, _))) => Err(error),
                Err(_canceled) => Err(KafkaError::Canceled),
            };
            (seq, message, commit_lsn, result)
        })),
        Err((error, _record)) => Err(Box::new((message, error))),
    }
}

/// Books one delivery outcome: success, or a permanent refusal parked durably first. A
/// transient failure ends the session; the replay republishes from the slot.
async fn settle_delivery(
    sql: &Client,
    tracker: &mut AckTracker,
    seq: TransactionSeq,
    message: &OutgoingMessage,
    commit_lsn: u64,
    result: Result<(), KafkaError>,
    metrics: &RelayMetrics,
) -> Result<(), RelayError> {
    match result {
        Ok(()) => tracker.delivered(seq),
        Err(error) if publish::classify(&error) == DeliveryFailure::Permanent => {
            error!(
                event_id = %message.row.event_id,
                topic = %message.topic,
                payload_bytes = message.row.payload.len(),
                %error,
                "Kafka refused a message for good; parking it in outbox_parked (see `ledger relay parked list`)"
            );
            parking::park(sql, message, commit_lsn, &error.to_string()).await?;
            metrics.parked();
            tracker.delivered(seq);
        }
        Err(error) => {
            if matches!(
                error.rdkafka_error_code(),
                Some(RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownTopicOrPartition)
            ) {
                error!(
                    topic = %message.topic,
                    "topic does not exist; create it (the relay never auto-creates) — the relay retries from the slot meanwhile"
                );
            }
            return Err(error.into());
        }
    }
    metrics.set_in_flight(tracker.in_flight());
    Ok(())
}

/// Moves the slot to everything acknowledged so far, and books what settled.
fn confirm(
    replication: &ReplicationClient,
    tracker: &mut AckTracker,
    confirmed: &mut u64,
    metrics: &RelayMetrics,
) {
    let settled = tracker.take_settled();
    if settled.is_empty() {
        return;
    }
    let now = now_micros();
    let mut events = 0u64;
    for transaction in &settled {
        if transaction.messages > 0 {
            events += transaction.messages as u64;
            metrics.commit_to_ack((now - transaction.commit_time_micros).max(0) as f64 / 1e6);
        }
    }
    metrics.published(events);
    metrics.set_in_flight(tracker.in_flight());
    if let Some((lsn, commit_time)) = tracker.confirmable()
        && lsn > *confirmed
    {
        replication.update_applied_lsn(Lsn::from_u64(lsn));
        metrics.confirmed(lsn, commit_time);
        *confirmed = lsn;
    }
}

/// Waits (briefly) until PostgreSQL reports the final position, so a clean stop leaves no
/// work to redo.
async fn wait_for_confirmation(sql: &Client, config: &RelayConfig, lsn: u64) {
    if lsn == 0 {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(config.status_interval_ms * 3 + 1_000);
    while Instant::now() < deadline {
        let done = sql
            .query_one(
                "SELECT coalesce(confirmed_flush_lsn >= $2::text::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1",
                &[&config.slot, &publish::format_lsn(lsn)],
            )
            .await
            .map(|row| row.get::<_, bool>(0))
            .unwrap_or(true);
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    warn!(
        "PostgreSQL did not report the final position in time; the next relay may republish a little"
    );
}

async fn connect_sql(url: &str, application_name: &str) -> Result<Client, RelayError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|error: tokio_postgres::Error| RelayError::Url(error.to_string()))?;
    config.application_name(application_name);
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            warn!(%error, "relay SQL connection closed");
        }
    });
    Ok(client)
}

/// Creates the insert-only publication and the pgoutput slot when missing.
async fn ensure_publication_and_slot(sql: &Client, config: &RelayConfig) -> Result<(), RelayError> {
    let publication_exists = sql
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&config.publication],
        )
        .await?
        .is_some();
    if !publication_exists {
        info!(publication = %config.publication, "creating the outbox publication");
        let created = sql
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
                config.publication
            ))
            .await;
        ignore_duplicate(created)?;
    }
    let slot_exists = sql
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .is_some();
    if !slot_exists {
        warn!(
            slot = %config.slot,
            "the replication slot is missing; creating it. Outbox rows committed before now are not in it: \
             `ledger migrate` creates the slot up front so this does not happen"
        );
        let created = sql
            .query_opt(
                "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&config.slot],
            )
            .await
            .map(|_| ());
        ignore_duplicate(created)?;
    }
    Ok(())
}

/// Another relay creating the same object at the same moment is fine.
fn ignore_duplicate(
    result: Result<(), tokio_postgres::Error>,
) -> Result<(), tokio_postgres::Error> {
    match result {
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {
            Ok(())
        }
        other => other,
    }
}

fn replication_config(
    config: &RelayConfig,
    application_name: &str,
) -> Result<ReplicationConfig, RelayError> {
    let parsed: tokio_postgres::Config = config
        .database_url
        .parse()
        .map_err(|error: tokio_postgres::Error| RelayError::Url(error.to_string()))?;
    let host = match parsed.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "127.0.0.1".into(),
    };
    let password = parsed
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    Ok(ReplicationConfig::new(
        host,
        parsed.get_user().unwrap_or("postgres"),
        password,
        parsed.get_dbname().unwrap_or("postgres"),
        config.slot.clone(),
        config.publication.clone(),
    )
    .with_port(parsed.get_ports().first().copied().unwrap_or(5432))
    // Zero: start where the slot confirmed, so nothing unacknowledged is skipped.
    .with_start_lsn(Lsn::ZERO)
    .with_status_interval(Duration::from_millis(config.status_interval_ms))
    .with_wakeup_interval(Duration::from_secs(1))
    .with_application_name(application_name))
}

/// Runs the relay as a process does: `/metrics` on the configured address, SIGTERM or
/// Ctrl-C starts a clean shutdown. `ledger relay` is this.
pub async fn run_process(config: RelayConfig) -> Result<(), RelayError> {
    let metrics = Arc::new(RelayMetrics::default());
    let shutdown = CancellationToken::new();
    if let Some(address) = config.metrics_listen {
        crate::metrics::serve(
            address,
            crate::metrics::router(metrics.clone()),
            shutdown.clone(),
        )
        .await;
    }
    crate::signal::cancel_on_signal(shutdown.clone());
    let outcome = run(config, metrics, shutdown.clone()).await;
    shutdown.cancel();
    outcome
}
