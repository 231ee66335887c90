//! A group's end: the Kafka transaction committed (its messages flushed first), the slot
//! confirmed only after, or the transaction aborted; and the librdkafka calls they need.

use std::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use pgwire_replication::{Lsn, ReplicationClient};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _};
use tracing::{info, warn};

use super::{Delivery, Session, blocking, event_bytes, protocol};
use crate::config::TRANSACTION_TIMEOUT;
use crate::metrics::now_micros;
use crate::position::Position;
use crate::publish::OutgoingMessage;
use crate::relay::RelayError;
use crate::relay::group::Group;

impl Session<'_> {
    /// Commits the group: the position record, then `commit_transaction`, then (only on
    /// success) the slot.
    ///
    /// A group without messages (heartbeats, transactions of other tables) still commits a
    /// Kafka transaction of its position record alone before the slot passes it: the slot
    /// is never confirmed past the newest committed position, so at start a slot ahead of
    /// the position can only mean something else moved it ([`crate::history`]'s gap).
    ///
    /// While Kafka acknowledges and commits, the session goes on reading what the server
    /// sends (up to the group's byte bound) without handling it: the server keeps decoding
    /// instead of waiting for the relay, and the next group starts from what was read.
    pub(super) async fn commit(
        &mut self,
        replication: &mut ReplicationClient,
    ) -> Result<(), RelayError> {
        if !self.in_kafka_transaction {
            if self.group.last_end_lsn <= self.position_end {
                let group = std::mem::take(&mut self.group);
                self.confirm(replication, group.last_end_lsn, group.last_commit_micros);
                return Ok(());
            }
            self.producer.begin_transaction()?;
            self.in_kafka_transaction = true;
        }
        let record = Position::new(
            &self.config.slot,
            &self.identity,
            self.group.last_commit_lsn,
            self.group.last_end_lsn,
            self.last_event.clone(),
        );
        let value = record.encode();
        let position = self
            .producer
            .send_result(
                FutureRecord::to(&self.position_topic)
                    .partition(0)
                    .key(self.config.slot.as_bytes())
                    .payload(&value),
            )
            .map_err(|(error, _)| error)?;
        let started = Instant::now();
        let mut read_error = None;
        let outcome = {
            let settled = settle(&mut self.deliveries, &self.producer, position);
            tokio::pin!(settled);
            loop {
                let room = read_error.is_none() && self.read_ahead_bytes < self.bounds.bytes;
                tokio::select! {
                    biased;
                    outcome = &mut settled => break outcome,
                    event = replication.recv(), if room => match event {
                        Ok(Some(event)) => {
                            self.read_ahead_bytes += event_bytes(&event);
                            self.read_ahead.push_back(event);
                        }
                        Ok(None) => read_error = Some(protocol("the server ended the stream")),
                        Err(error) => read_error = Some(RelayError::from(error)),
                    },
                }
            }
        };
        match outcome {
            Ok(()) => {}
            Err(Unsettled::Refused(message, commit_lsn, error)) => {
                return Err(self.refused(&message, commit_lsn, error).await);
            }
            Err(Unsettled::Kafka(error)) => return Err(error.into()),
        }
        let took = started.elapsed();
        self.in_kafka_transaction = false;
        let group = std::mem::take(&mut self.group);
        self.metrics.set_in_flight(0);
        self.metrics
            .transaction_committed(group.messages, took.as_secs_f64());
        self.metrics.published(group.messages as u64);
        let now = now_micros();
        for committed in &group.commit_times_micros {
            self.metrics
                .commit_to_ack((now - committed).max(0) as f64 / 1e6);
        }
        self.position = group.last_commit_lsn;
        self.position_end = group.last_end_lsn;
        self.confirm(replication, group.last_end_lsn, group.last_commit_micros);
        // The group is committed and confirmed; a read that failed meanwhile ends the
        // session now (what was read before it is resent by the next one).
        read_error.map_or(Ok(()), Err)
    }

    /// Moves the slot to `end_lsn`: everything before it is in Kafka, committed.
    pub(super) fn confirm(
        &mut self,
        replication: &ReplicationClient,
        end_lsn: u64,
        commit_micros: i64,
    ) {
        if end_lsn <= self.confirmed {
            return;
        }
        replication.update_applied_lsn(Lsn::from_u64(end_lsn));
        self.metrics.confirmed(end_lsn, commit_micros);
        self.confirmed = end_lsn;
        self.metrics.still_unconfirmed(None);
    }

    /// Shutdown: commits the group when it holds whole transactions only, aborts it when a
    /// PostgreSQL transaction is half read, then waits until PostgreSQL recorded the slot.
    pub(super) async fn finish(
        &mut self,
        replication: &mut ReplicationClient,
    ) -> Result<(), RelayError> {
        if self.transaction.is_none() {
            self.commit(replication).await?;
        } else {
            info!(
                "stopping inside a PostgreSQL transaction: its Kafka transaction is aborted and resent by the next relay"
            );
            self.abort().await;
        }
        crate::relay::session::wait_for_confirmation(&self.sql, self.config, self.confirmed).await;
        Ok(())
    }

    /// Aborts the open Kafka transaction, if the producer still can; the next session's
    /// `init_transactions` aborts it otherwise.
    pub(super) async fn abort(&mut self) {
        self.group = Group::default();
        self.transaction = None;
        if !std::mem::take(&mut self.in_kafka_transaction) {
            return;
        }
        self.metrics.transaction_aborted();
        self.deliveries.clear();
        if let Err(error) = blocking(&self.producer, |producer| {
            producer.abort_transaction(TRANSACTION_TIMEOUT)
        })
        .await
        {
            warn!(%error, "cannot abort the Kafka transaction; the next relay session fences and aborts it");
        }
    }
}

/// Why a group could not be committed.
pub(super) enum Unsettled {
    /// A message's delivery failed: the message, its commit LSN and the error.
    Refused(Box<OutgoingMessage>, u64, KafkaError),
    /// The position record or the commit itself failed.
    Kafka(KafkaError),
}

/// Sends at once what the producer still holds (its linger ignored) and waits until
/// Kafka acknowledged every message of the group and its position record, then commits
/// the Kafka transaction.
pub(super) async fn settle(
    deliveries: &mut FuturesUnordered<BoxFuture<'static, Delivery>>,
    producer: &FutureProducer,
    position: DeliveryFuture,
) -> Result<(), Unsettled> {
    blocking(producer, flush).await.map_err(Unsettled::Kafka)?;
    while let Some((commit_lsn, message, result)) = deliveries.next().await {
        if let Err(error) = result {
            return Err(Unsettled::Refused(Box::new(message), commit_lsn, error));
        }
    }
    match position.await {
        Ok(Ok(_)) => {}
        Ok(Err((error, _))) => return Err(Unsettled::Kafka(error)),
        Err(_canceled) => return Err(Unsettled::Kafka(KafkaError::Canceled)),
    }
    blocking(producer, |producer| {
        producer.commit_transaction(TRANSACTION_TIMEOUT)
    })
    .await
    .map_err(Unsettled::Kafka)
}

/// librdkafka's own `rd_kafka_flush`: while it runs, the producer sends without lingering,
/// and it returns once every message's delivery report was served (by rdkafka's polling
/// thread: the producer hands reports out as events).
///
/// Not rdkafka's `Producer::flush`, which `commit_transaction` also calls: it polls in
/// 100 ms steps, so it made every commit take at least 100 ms. After this flush the one in
/// `commit_transaction` finds nothing left and returns at once.
#[allow(unsafe_code)]
fn flush(producer: &FutureProducer) -> Result<(), KafkaError> {
    let timeout_ms = i32::try_from(TRANSACTION_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the pointer is the producer's live librdkafka handle (`producer` holds it for
    // the whole call), and rd_kafka_flush may be called from any thread.
    let code =
        unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), timeout_ms) };
    match code {
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
        code => Err(KafkaError::Flush(code.into())),
    }
}
