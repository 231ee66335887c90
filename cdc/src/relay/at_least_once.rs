//! At-least-once delivery: an idempotent producer, every message sent as its row arrives,
//! and the slot confirmed to the end of the newest transaction whose messages, and every
//! earlier one's, Kafka acknowledged ([`AckTracker`]). After any crash the next session
//! resumes from the slot: duplicates are possible, loss is not.
//!
//! A message Kafka refuses for good (or with no rendering in its topic's format) is parked
//! durably, then booked as settled; a passing failure ends the session, and the next one
//! resends from the slot.

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::RelayError;
use super::in_flight::{self, InFlight};
use super::reader::{Delivery, Reader, Rendered};
use super::setup::Opened;
use crate::ack::{AckTracker, TransactionSeq};
use crate::config::RelayConfig;
use crate::metrics::{RelayMetrics, now_micros};
use crate::publish::{self, CommitInfo, DeliveryFailure, OutgoingMessage};

/// A message handed to librdkafka, and what became of it.
type Outcome = in_flight::Delivered<(TransactionSeq, u64)>;

/// Runs one at-least-once session on `opened` until `shutdown` or an error.
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
    let producer = in_flight::idempotent(config)?;
    metrics.set_streaming(true);
    let delivery = AtLeastOnce {
        config,
        metrics,
        sql: &sql,
        tracker: AckTracker::new(),
        in_flight: InFlight::new(producer),
        current: None,
        unflushed: false,
        newest_commit_micros: 0,
    };
    let confirmed = Reader::new(config, metrics, &sql, delivery)
        .run(&mut replication, shutdown)
        .await?;
    replication.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), replication.shutdown()).await;
    info!(confirmed = %crate::lsn::format_lsn(confirmed), "relay stopped cleanly");
    Ok(())
}

/// The at-least-once delivery's state.
struct AtLeastOnce<'a> {
    config: &'a RelayConfig,
    metrics: &'a RelayMetrics,
    sql: &'a Client,
    tracker: AckTracker,
    in_flight: InFlight<(TransactionSeq, u64)>,
    /// The open transaction's entry in the tracker.
    current: Option<TransactionSeq>,
    /// Messages were sent since the stream last went idle (`flush_when_idle`).
    unflushed: bool,
    /// The commit time of the newest transaction read, microseconds since the Unix epoch.
    newest_commit_micros: i64,
}

/// How long ago the newest transaction read may have committed for the relay to flush when
/// the stream goes idle. Further behind, the relay is draining a backlog: it reads faster
/// than the server decodes, so it catches up with what the server sent every few rows, and
/// a flush each time (about 70 a second in a 1,000,000-row drain) kept the producer from
/// lingering most of the time. A millisecond saved on a message a second late is worth
/// nothing, while batches are less work for both ends (issue 34's fifth round in
/// docs/benchmarks.md). A relay that keeps up reads each transaction within milliseconds of
/// its commit. The comparison crosses the database's clock and the relay's: a database
/// clock a second behind turns the flush off (latency back to `linger.ms`), never anything
/// worse.
const BEHIND: Duration = Duration::from_secs(1);

/// Whether a relay whose newest transaction read committed at `commit_micros` is behind at
/// `now_micros` ([`BEHIND`]).
fn behind(commit_micros: i64, now_micros: i64) -> bool {
    now_micros.saturating_sub(commit_micros) >= BEHIND.as_micros() as i64
}

impl Delivery for AtLeastOnce<'_> {
    type Outcome = Outcome;

    fn begin(&mut self, commit: &CommitInfo) -> bool {
        self.newest_commit_micros = commit.commit_time_micros;
        self.current = Some(self.tracker.open(commit.commit_time_micros));
        true
    }

    async fn send(&mut self, message: Rendered, commit: &CommitInfo) -> Result<(), RelayError> {
        let Some(seq) = self.current else {
            return Err(super::reader::protocol("an insert outside a transaction"));
        };
        self.tracker.sent(seq);
        let message = match message {
            Ok(message) => message,
            Err(unrenderable) => {
                let error = unrenderable.error.to_string();
                return self
                    .park(seq, &unrenderable.message, commit.commit_lsn, &error)
                    .await;
            }
        };
        match self.in_flight.send(message, (seq, commit.commit_lsn)) {
            Ok(()) => self.unflushed = true,
            Err(refused) => {
                let (message, error) = *refused;
                self.on_outcome(((seq, commit.commit_lsn), message, Err(error)))
                    .await?;
            }
        }
        Ok(())
    }

    fn close(&mut self, end_lsn: u64, _wanted: bool) -> bool {
        if let Some(seq) = self.current.take() {
            self.tracker.close(seq, end_lsn);
        }
        false
    }

    fn can_read(&self) -> bool {
        self.in_flight.len() < self.config.max_in_flight
    }

    fn has_pending(&self) -> bool {
        !self.in_flight.is_empty()
    }

    async fn next_outcome(&mut self) -> Option<Outcome> {
        self.in_flight.next().await
    }

    /// Books one outcome: success, or a permanent refusal parked durably first. A passing
    /// failure ends the session; the next one republishes from the slot.
    async fn on_outcome(&mut self, outcome: Outcome) -> Result<(), RelayError> {
        let ((seq, commit_lsn), message, result) = outcome;
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

    /// With `flush_when_idle`: the stream went idle with messages lingering in the
    /// producer, and the relay is not behind ([`BEHIND`]).
    fn due_when_caught_up(&self) -> bool {
        self.config.flush_when_idle
            && self.unflushed
            && !behind(self.newest_commit_micros, now_micros())
    }

    /// Starts librdkafka's flush on a thread of its own and returns at once: while it runs,
    /// what the producer holds is sent without waiting out `linger.ms`, and what is sent
    /// meanwhile too. The outcomes arrive as usual; a busy stream never goes idle, and a relay
    /// behind never flushes, so their batches stay as large as linger makes them.
    async fn flush(&mut self) -> Result<(), RelayError> {
        self.metrics.idle_flushed();
        self.unflushed = false;
        let producer = self.in_flight.producer().clone();
        let linger = Duration::from_millis(self.config.linger_ms());
        tokio::task::spawn_blocking(move || {
            // A timeout (what is in flight outlasts the linger) is fine: it only ends the
            // no-linger window.
            let _ = super::kafka_flush(&producer, linger);
        });
        Ok(())
    }

    /// What every acknowledged transaction allows, with the metrics of what settled.
    fn confirmable(&mut self) -> Option<(u64, i64)> {
        let settled = self.tracker.take_settled();
        if settled.is_empty() {
            return None;
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
        self.tracker.confirmable()
    }

    fn oldest_unconfirmed(&self) -> Option<i64> {
        self.tracker.oldest_pending_commit_micros()
    }

    /// Shutdown: settles what is in flight within the grace period.
    async fn finish(&mut self, _in_transaction: bool) -> Result<(), RelayError> {
        info!(
            in_flight = self.tracker.in_flight(),
            "draining before shutdown"
        );
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        let deadline = tokio::time::Instant::now() + grace;
        while !self.in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, self.in_flight.next()).await {
                Ok(Some(outcome)) => self.on_outcome(outcome).await?,
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
        Ok(())
    }

    async fn abort(&mut self) {}
}

impl AtLeastOnce<'_> {
    /// Parks a message Kafka would never take as it is durably, then books it as settled.
    async fn park(
        &mut self,
        seq: TransactionSeq,
        message: &OutgoingMessage,
        commit_lsn: u64,
        error: &str,
    ) -> Result<(), RelayError> {
        super::park(self.sql, self.metrics, message, commit_lsn, error).await?;
        self.tracker.delivered(seq);
        self.metrics.set_in_flight(self.tracker.in_flight());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_a_second_behind_the_commits_it_reads_does_not_flush_when_idle() {
        let now = 1_000_000_000_000;
        assert!(!behind(now, now), "reading a transaction as it commits");
        assert!(!behind(now - 999_999, now));
        assert!(behind(now - 1_000_000, now), "a second behind");
        assert!(behind(0, now), "before any transaction");
        assert!(
            !behind(now + 5_000, now),
            "a database clock ahead: flush as before"
        );
    }
}
