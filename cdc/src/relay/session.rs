//! One replication session: from connecting to the first error, or to shutdown.
//!
//! A [`Session`] reacts to four things, each in a method of its own: a transaction begins
//! ([`Session::on_begin`]), one of its outbox rows arrives ([`Session::on_row`]), it commits
//! ([`Session::on_commit`]), and Kafka settles a message ([`Session::on_delivery`]). After each,
//! [`Session::confirm`] moves the slot to everything acknowledged so far.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use pgwire_replication::{Lsn, PgWireError, ReplicationClient, ReplicationEvent};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureProducer;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::setup::Opened;
use super::{HEARTBEAT_PREFIX, RelayError};
use crate::ack::{AckTracker, TransactionSeq};
use crate::config::RelayConfig;
use crate::metrics::{PG_EPOCH_MICROS, RelayMetrics, now_micros};
use crate::outbox::OutboxLayout;
use crate::parking;
use crate::pgoutput::{self, DecodeError, LogicalMessage};
use crate::publish::{self, CommitInfo, DeliveryFailure, OutgoingMessage};

/// A message handed to librdkafka, and what became of it.
type Delivery = super::Delivered<(TransactionSeq, u64)>;

/// The transaction being streamed: its tracker entry, what its headers need, and how many
/// rows it carried so far (the next row's ordinal).
struct OpenTransaction {
    seq: TransactionSeq,
    commit: CommitInfo,
    ordinal: usize,
}

/// A session's state between events.
pub(super) struct Session<'a> {
    config: &'a RelayConfig,
    metrics: &'a RelayMetrics,
    sql: Client,
    producer: FutureProducer,
    tracker: AckTracker,
    deliveries: FuturesUnordered<BoxFuture<'static, Delivery>>,
    layouts: HashMap<u32, OutboxLayout>,
    transaction: Option<OpenTransaction>,
    confirmed: u64,
}

/// Runs one session on `opened` until `shutdown` or an error.
pub(super) async fn run(
    config: &RelayConfig,
    metrics: &RelayMetrics,
    shutdown: &CancellationToken,
    opened: Opened,
) -> Result<(), RelayError> {
    let Opened {
        sql,
        mut replication,
        ..
    } = opened;
    let producer = publish::producer(config)?;
    metrics.set_streaming(true);
    let mut session = Session {
        config,
        metrics,
        sql,
        producer,
        tracker: AckTracker::new(),
        deliveries: FuturesUnordered::new(),
        layouts: HashMap::new(),
        transaction: None,
        confirmed: 0,
    };
    session.stream(&mut replication, shutdown).await?;
    session.drain(&replication).await?;
    replication.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), replication.shutdown()).await;
    info!(confirmed = %publish::format_lsn(session.confirmed), "relay stopped cleanly");
    Ok(())
}

impl Session<'_> {
    /// Streams until `shutdown`.
    async fn stream(
        &mut self,
        replication: &mut ReplicationClient,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let mut heartbeat = tokio::time::interval(self.config.heartbeat_interval());
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let can_read = self.tracker.in_flight() < self.config.max_in_flight;
            tokio::select! {
                // Priority: shutdown first, then acknowledgements (they free capacity and
                // move the slot), then heartbeats, then new WAL.
                biased;
                () = shutdown.cancelled() => return Ok(()),
                Some(delivery) = self.deliveries.next(), if !self.deliveries.is_empty() => {
                    self.on_delivery(delivery).await?;
                }
                _ = heartbeat.tick() => {
                    self.sql
                        .execute("SELECT pg_logical_emit_message(true, $1, '')", &[&HEARTBEAT_PREFIX])
                        .await?;
                }
                event = replication.recv(), if can_read => {
                    let Some(event) = event? else {
                        return Err(protocol("the server ended the stream"));
                    };
                    self.on_event(event).await?;
                }
            }
            self.confirm(replication);
        }
    }

    async fn on_event(&mut self, event: ReplicationEvent) -> Result<(), RelayError> {
        match event {
            // Protocol v1 sends a transaction only once it committed, whole and in commit
            // order, so its rows are published as they arrive; the slot is confirmed past it
            // only after its Commit and every acknowledgement.
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => self.on_begin(final_lsn, xid, commit_time_micros)?,
            ReplicationEvent::XLogData { data, wal_end, .. } => {
                self.metrics.observe_wal_end(wal_end.as_u64());
                match pgoutput::decode(&data)? {
                    LogicalMessage::Relation(relation) => {
                        super::learn_relation(self.config, &mut self.layouts, &relation)?;
                    }
                    LogicalMessage::Insert { relation_oid, new } => {
                        self.on_row(relation_oid, &new).await?;
                    }
                    // The publication is insert-only; anything else carries no event.
                    _ => {}
                }
            }
            ReplicationEvent::Commit { end_lsn, .. } => self.on_commit(end_lsn),
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                self.metrics.observe_wal_end(wal_end.as_u64())
            }
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
        }
        Ok(())
    }

    /// A committed transaction starts streaming.
    fn on_begin(&mut self, final_lsn: Lsn, xid: u32, commit_time: i64) -> Result<(), RelayError> {
        if self.transaction.is_some() {
            // An unclosed transaction would hold the slot back forever.
            return Err(protocol("a Begin inside a transaction"));
        }
        let commit = CommitInfo {
            commit_lsn: final_lsn.as_u64(),
            xid,
            commit_time_micros: commit_time + PG_EPOCH_MICROS,
        };
        self.metrics.began(commit.commit_time_micros);
        self.transaction = Some(OpenTransaction {
            seq: self.tracker.open(commit.commit_time_micros),
            commit,
            ordinal: 0,
        });
        Ok(())
    }

    /// One outbox row of the open transaction: published at once.
    async fn on_row(
        &mut self,
        relation_oid: u32,
        new: &pgoutput::TupleData,
    ) -> Result<(), RelayError> {
        let layout = self
            .layouts
            .get(&relation_oid)
            .ok_or(RelayError::Decode(DecodeError::UnknownTag(b'I')))?;
        let row = layout.row(new)?;
        let Some(transaction) = self.transaction.as_mut() else {
            return Err(protocol("an insert outside a transaction"));
        };
        let message =
            OutgoingMessage::new(self.config, row, &transaction.commit, transaction.ordinal);
        transaction.ordinal += 1;
        let (seq, commit_lsn) = (transaction.seq, transaction.commit.commit_lsn);
        self.tracker.sent(seq);
        let message = match message {
            Ok(message) => message,
            Err(unrenderable) => {
                return self
                    .park(
                        seq,
                        &unrenderable.message,
                        commit_lsn,
                        &unrenderable.error.to_string(),
                    )
                    .await;
            }
        };
        match super::produce(&self.producer, message, (seq, commit_lsn)) {
            Ok(delivery) => self.deliveries.push(delivery),
            Err(refused) => {
                let (message, error) = *refused;
                self.on_delivery(((seq, commit_lsn), message, Err(error)))
                    .await?;
            }
        }
        Ok(())
    }

    /// The open transaction ends: it can be confirmed once all its messages are settled.
    fn on_commit(&mut self, end_lsn: Lsn) {
        self.metrics.observe_wal_end(end_lsn.as_u64());
        if let Some(transaction) = self.transaction.take() {
            self.tracker.close(transaction.seq, end_lsn.as_u64());
        }
    }

    /// Books one delivery outcome: success, or a permanent refusal parked durably first. A
    /// transient failure ends the session; the next one republishes from the slot.
    async fn on_delivery(&mut self, delivery: Delivery) -> Result<(), RelayError> {
        let ((seq, commit_lsn), message, result) = delivery;
        match result {
            Ok(()) => self.tracker.delivered(seq),
            Err(error) if publish::classify(&error) == DeliveryFailure::Permanent => {
                return self
                    .park(seq, &message, commit_lsn, &error.to_string())
                    .await;
            }
            Err(error) => {
                if matches!(
                    error.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownTopicOrPartition
                    )
                ) {
                    error!(
                        topic = %message.topic,
                        "topic does not exist; create it (the relay never auto-creates) — the relay retries from the slot meanwhile"
                    );
                }
                return Err(error.into());
            }
        }
        self.metrics.set_in_flight(self.tracker.in_flight());
        Ok(())
    }

    /// Parks a message Kafka would never take as it is (refused for good, or with no
    /// rendering in its topic's format) durably, then books it as settled.
    async fn park(
        &mut self,
        seq: TransactionSeq,
        message: &OutgoingMessage,
        commit_lsn: u64,
        error: &str,
    ) -> Result<(), RelayError> {
        error!(
            event_id = %message.row.event_id,
            topic = %message.topic,
            value_bytes = message.value.len(),
            %error,
            "a message Kafka will never take as it is; parking it in outbox_parked (see `ledger relay parked list`)"
        );
        parking::park(&self.sql, message, commit_lsn, error).await?;
        self.metrics.parked();
        self.tracker.delivered(seq);
        self.metrics.set_in_flight(self.tracker.in_flight());
        Ok(())
    }

    /// Moves the slot to everything acknowledged so far, and books what settled.
    fn confirm(&mut self, replication: &ReplicationClient) {
        let settled = self.tracker.take_settled();
        if settled.is_empty() {
            return;
        }
        let now = now_micros();
        let mut events = 0u64;
        for transaction in &settled {
            if transaction.messages > 0 {
                events += transaction.messages as u64;
                self.metrics
                    .commit_to_ack((now - transaction.commit_time_micros).max(0) as f64 / 1e6);
            }
        }
        self.metrics.published(events);
        self.metrics.set_in_flight(self.tracker.in_flight());
        if let Some((lsn, commit_time)) = self.tracker.confirmable()
            && lsn > self.confirmed
        {
            replication.update_applied_lsn(Lsn::from_u64(lsn));
            self.metrics.confirmed(lsn, commit_time);
            self.confirmed = lsn;
            self.metrics
                .still_unconfirmed(self.tracker.oldest_pending_commit_micros());
        }
    }

    /// Shutdown: reads nothing more, settles what is in flight within the grace period,
    /// confirms, and waits until PostgreSQL recorded the final position.
    async fn drain(&mut self, replication: &ReplicationClient) -> Result<(), RelayError> {
        info!(
            in_flight = self.tracker.in_flight(),
            "draining before shutdown"
        );
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        let deadline = tokio::time::Instant::now() + grace;
        while !self.deliveries.is_empty() {
            match tokio::time::timeout_at(deadline, self.deliveries.next()).await {
                Ok(Some(delivery)) => {
                    self.on_delivery(delivery).await?;
                    self.confirm(replication);
                }
                Ok(None) => break,
                Err(_) => {
                    warn!(
                        in_flight = self.tracker.in_flight(),
                        "grace period over; the rest will be republished by the next relay"
                    );
                    break;
                }
            }
        }
        self.wait_for_confirmation().await;
        Ok(())
    }

    /// Waits (briefly) until PostgreSQL reports the final position, so a clean stop leaves
    /// no work to redo.
    async fn wait_for_confirmation(&mut self) {
        wait_for_confirmation(&self.sql, self.config, self.confirmed).await;
    }
}

/// Waits (briefly) until PostgreSQL reports `confirmed` as the slot's position.
pub(super) async fn wait_for_confirmation(sql: &Client, config: &RelayConfig, confirmed: u64) {
    if confirmed == 0 {
        return;
    }
    let wait = Duration::from_millis(config.status_interval_ms * 3 + 1_000);
    let deadline = Instant::now() + wait;
    let lsn = publish::format_lsn(confirmed);
    while Instant::now() < deadline {
        let done = sql
            .query_one(
                include_str!("../sql/slot_confirmed.sql"),
                &[&config.slot, &lsn],
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

fn protocol(what: &str) -> RelayError {
    RelayError::Replication(PgWireError::Protocol(what.into()))
}
