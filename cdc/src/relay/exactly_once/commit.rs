//! A group's end: the Kafka transaction committed (its messages flushed first), the slot
//! confirmable only after, or the transaction aborted; and the librdkafka calls they need.

use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer as _;
use tracing::warn;

use super::group::Group;
use super::{ExactlyOnce, blocking};
use crate::config::DeliveryMode;
use crate::metrics::now_micros;
use crate::position::Position;
use crate::publish::OutgoingMessage;
use crate::relay::RelayError;
use crate::relay::in_flight::{self, Answer, InFlight, Sent};
use crate::relay::reader::Settled;

impl ExactlyOnce<'_> {
    /// Commits the group: the position record, then `commit_transaction`, then (only on
    /// success) the slot becomes confirmable to the group's end.
    ///
    /// A group without messages (heartbeats, transactions of other tables) still commits a
    /// Kafka transaction of its position record alone before the slot passes it: the slot
    /// is never confirmed past the newest committed position, so at start a slot ahead of
    /// the position can only mean something else moved it ([`crate::history`]'s gap).
    pub(super) async fn commit(&mut self, kafka: &mut InFlight<u64>) -> Result<(), RelayError> {
        if !self.group.has_closed_transactions() {
            return Ok(());
        }
        if !self.in_kafka_transaction {
            if self.group.last_end_lsn <= self.position_end {
                let group = std::mem::take(&mut self.group);
                self.confirm_to = Some(Settled {
                    end_lsn: group.last_end_lsn,
                    commit_micros: group.last_commit_micros,
                });
                return Ok(());
            }
            self.begin_kafka_transaction(kafka)?;
        }
        if self
            .kafka_started
            .is_some_and(|started| started.elapsed() >= self.config.transaction_timeout())
        {
            // Past its timeout the broker may abort the transaction at any moment (it looks
            // every few seconds), so a commit now would race that abort: an unknown outcome
            // by construction. Never commit it; the next session fences this producer.
            let error =
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::OperationTimedOut);
            self.failed(&error);
            return Err(self.too_large(error.into()));
        }
        self.send_position(kafka)?;
        let started = Instant::now();
        let timeout = self.config.transaction_timeout();
        match settle(kafka, timeout).await {
            Ok(()) => {}
            Err(Unsettled::Refused {
                message,
                commit_lsn,
                error,
            }) => {
                self.failed(&error);
                let error = self.refused(&message, commit_lsn, error).await;
                return Err(self.too_large(error));
            }
            Err(Unsettled::Kafka(error)) => {
                self.failed(&error);
                return Err(self.too_large(error.into()));
            }
        }
        self.committed(started.elapsed());
        Ok(())
    }

    /// The group's position record, sent in its Kafka transaction.
    fn send_position(&self, kafka: &mut InFlight<u64>) -> Result<(), KafkaError> {
        let record = Position::new(
            &self.config.slot,
            &self.identity,
            self.group.last_commit_lsn,
            self.group.last_end_lsn,
            self.last_event.clone(),
            self.heartbeats,
            DeliveryMode::ExactlyOnce,
        );
        kafka.send_record(
            &self.position_topic,
            0,
            self.config.slot.as_bytes(),
            &record.encode(),
            self.group.last_end_lsn,
        )
    }

    /// Books a group Kafka committed (in `took`): the metrics, the new position, and the
    /// slot confirmable to the group's end.
    fn committed(&mut self, took: Duration) {
        self.in_kafka_transaction = false;
        self.kafka_started = None;
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
        self.confirm_to = Some(Settled {
            end_lsn: group.last_end_lsn,
            commit_micros: group.last_commit_micros,
        });
    }

    /// Aborts the open Kafka transaction, if the producer still can; the next session's
    /// `init_transactions` aborts it otherwise.
    pub(super) async fn abort_transaction(&mut self, kafka: &mut InFlight<u64>) {
        self.group = Group::default();
        self.open = None;
        self.kafka_started = None;
        if !std::mem::take(&mut self.in_kafka_transaction) {
            return;
        }
        self.metrics.transaction_aborted();
        kafka.clear();
        if self.unusable {
            // Not even an abort on an instance whose last call may still land: the next
            // session's init_transactions aborts the transaction and fences this producer.
            return;
        }
        let timeout = self.config.transaction_timeout();
        if let Err(error) = blocking(kafka.producer(), move |producer| {
            producer.abort_transaction(timeout)
        })
        .await
        {
            warn!(%error, "cannot abort the Kafka transaction; the next relay session fences and aborts it");
        }
    }
}

/// Why a group could not be committed.
pub(super) enum Unsettled {
    /// A message's delivery failed.
    Refused {
        /// The message.
        message: Box<OutgoingMessage>,
        /// Its transaction's commit LSN.
        commit_lsn: u64,
        /// Kafka's answer.
        error: KafkaError,
    },
    /// The position record or the commit itself failed.
    Kafka(KafkaError),
}

/// Sends at once what the producer still holds (its linger ignored) and waits until
/// Kafka acknowledged every message of the group and its position record, then commits
/// the Kafka transaction.
///
/// The flush and the commit run in one blocking call, which commits only when every
/// report the flush waited for is a success: a thread's hand-off less on each group's way
/// to its commit marker (on a busy machine each waits for a core). After a failure it
/// returns without committing, and the failed answer is found below.
pub(super) async fn settle(
    in_flight: &mut InFlight<u64>,
    timeout: std::time::Duration,
) -> Result<(), Unsettled> {
    let producer = in_flight.producer().clone();
    let failed_before = in_flight.holds_failure();
    let committed = tokio::task::spawn_blocking(move || {
        in_flight::kafka_flush(&producer, timeout)?;
        if failed_before || producer.context().any_failed() {
            return Ok(false);
        }
        producer.commit_transaction(timeout).map(|()| true)
    })
    .await
    .unwrap_or(Err(KafkaError::Canceled))
    .map_err(Unsettled::Kafka)?;
    while let Some(Answer { sent, result }) = in_flight.next().await {
        let Err(error) = result else {
            continue;
        };
        return Err(match sent {
            Sent::Message {
                tag: commit_lsn,
                message,
            } => Unsettled::Refused {
                message: Box::new(message),
                commit_lsn,
                error,
            },
            Sent::Record { .. } => Unsettled::Kafka(error),
        });
    }
    if committed {
        return Ok(());
    }
    // Not reached: a failure kept the commit from happening, and the answers above
    // returned it. Were it reached, the group is not committed all the same.
    Err(Unsettled::Kafka(KafkaError::Canceled))
}
