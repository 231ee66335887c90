//! At-least-once delivery: an idempotent producer, every message sent as its row arrives,
//! and the slot confirmed to the end of the newest transaction whose messages, and every
//! earlier one's, Kafka acknowledged ([`AckTracker`]), once Kafka acknowledged a position
//! record of it too ([`Recorder`]). After any crash the next session resumes from the slot:
//! duplicates are possible, loss is not.
//!
//! The position record is exactly once's (`crate::position`), written outside any
//! transaction: with both modes writing it before they confirm, the slot is never ahead
//! of the newest position whichever mode ran last, so exactly once resumes after at least
//! once without taking the slot for one moved by something else, and at least once refuses,
//! at start, a server of another history or an older timeline than the one it published
//! from, across restarts ([`crate::history::continues`]).
//!
//! A message Kafka refuses for good (or with no rendering in its topic's format) is parked
//! durably, then booked as settled; a passing failure ends the session, and the next one
//! resends from the slot.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::RelayError;
use super::in_flight::{self, Answer, InFlight, Sent};
use super::lacking::lacking;
use super::reader::{Closed, Delivery, Rendered, Settled};
use super::setup::Opened;
use crate::ack::{AckTracker, Acknowledged, TransactionSeq};
use crate::config::{DeliveryMode, RelayConfig};
use crate::history::{self, Identity};
use crate::metrics::{RelayMetrics, now_micros};
use crate::position::{LastEvent, Position, Read};
use crate::publish::{self, CommitInfo, DeliveryFailure, OutgoingMessage};

/// What each message is sent with, to be known again in Kafka's answer.
#[derive(Debug, Clone, Copy)]
struct Tag {
    /// Its transaction's entry in the tracker.
    seq: TransactionSeq,
    /// Its transaction's commit LSN (where it is parked from).
    commit_lsn: u64,
}

/// Runs one at-least-once session on `opened` until `shutdown` or an error.
pub(super) async fn run(
    config: &RelayConfig,
    metrics: &RelayMetrics,
    shutdown: &CancellationToken,
    opened: Opened,
) -> Result<(), RelayError> {
    let (sql, server, stream) = super::stream::split(config, opened);
    if let Some(position) = crate::position::read_in_background(config, Read::Newest).await?
        && let Some(stored) = position.stored()
    {
        history::continues(&stored, &server, position.delivery.is_some())?;
    }
    let producer = in_flight::idempotent(config)?;
    let delivery = AtLeastOnce {
        config,
        metrics,
        sql: &sql,
        tracker: AckTracker::new(),
        recorder: Recorder::new(config, server.identity),
        current: None,
        unflushed: false,
        newest_commit_micros: 0,
    };
    stream
        .run(config, metrics, shutdown, &sql, delivery, producer)
        .await
}

/// The at-least-once delivery's state.
struct AtLeastOnce<'a> {
    config: &'a RelayConfig,
    metrics: &'a RelayMetrics,
    sql: &'a Client,
    tracker: AckTracker,
    recorder: Recorder,
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
    type Tag = Tag;

    fn begin(&mut self, commit: &CommitInfo) -> bool {
        self.newest_commit_micros = commit.commit_time_micros;
        self.current = Some(
            self.tracker
                .open(commit.commit_lsn, commit.commit_time_micros),
        );
        true
    }

    async fn send(
        &mut self,
        kafka: &mut InFlight<Tag>,
        message: Rendered,
        commit: &CommitInfo,
    ) -> Result<(), RelayError> {
        let Some(seq) = self.current else {
            return Err(RelayError::protocol("an insert outside a transaction"));
        };
        let event_id = match &message {
            Ok(message) => &message.row.event_id,
            Err(unrenderable) => &unrenderable.message.row.event_id,
        };
        self.tracker.sent(seq, event_id);
        let message = match message {
            Ok(message) => message,
            Err(unrenderable) => {
                let error = unrenderable.error.to_string();
                return self
                    .park(seq, &unrenderable.message, commit.commit_lsn, &error)
                    .await;
            }
        };
        let tag = Tag {
            seq,
            commit_lsn: commit.commit_lsn,
        };
        match kafka.send(message, tag) {
            Ok(()) => self.unflushed = true,
            Err(refused) => {
                let refused = *refused;
                self.answered(Answer {
                    sent: Sent::Message {
                        tag,
                        message: refused.message,
                    },
                    result: Err(refused.error),
                })
                .await?;
            }
        }
        Ok(())
    }

    fn close(&mut self, closed: Closed) {
        if let Some(seq) = self.current.take() {
            self.tracker.close(seq, closed.end_lsn, closed.heartbeats);
        }
    }

    /// Books one answer: success, or a permanent refusal parked durably first. A passing
    /// failure ends the session; the next one republishes from the slot.
    async fn answered(&mut self, answer: Answer<Tag>) -> Result<(), RelayError> {
        let (Tag { seq, commit_lsn }, message) = match answer.sent {
            Sent::Message { tag, message } => (tag, message),
            Sent::Record { mark } => return self.recorder.answered(mark, answer.result),
        };
        match answer.result {
            Ok(()) => self.tracker.delivered(seq),
            Err(error) if publish::classify(&error) == DeliveryFailure::Permanent => {
                return self
                    .park(seq, &message, commit_lsn, &error.to_string())
                    .await;
            }
            Err(error) => {
                if let Some(lacking) = lacking(&error, &message.topic, self.config) {
                    error!(topic = %message.topic, %error, "{lacking}");
                }
                return Err(error.into());
            }
        }
        self.metrics.set_in_flight(self.tracker.in_flight());
        Ok(())
    }

    /// Never at a transaction's end: the producer batches across them. With
    /// `flush_when_idle`, when caught up: the stream went idle with messages lingering in the
    /// producer, and the relay is not behind ([`BEHIND`]).
    fn due(&self, caught_up: bool) -> bool {
        caught_up
            && self.config.flush_when_idle
            && self.unflushed
            && !behind(self.newest_commit_micros, now_micros())
    }

    /// Starts librdkafka's flush on a thread of its own and returns at once: while it runs,
    /// what the producer holds is sent without waiting out `linger.ms`, and what is sent
    /// meanwhile too. The outcomes arrive as usual; a busy stream never goes idle, and a relay
    /// behind never flushes, so their batches stay as large as linger makes them.
    async fn flush(&mut self, kafka: &mut InFlight<Tag>) -> Result<(), RelayError> {
        self.metrics.idle_flushed();
        self.unflushed = false;
        let producer = kafka.producer().clone();
        let linger = Duration::from_millis(self.config.linger_ms());
        tokio::task::spawn_blocking(move || {
            // A timeout (what is in flight outlasts the linger) is fine: it only ends the
            // no-linger window.
            let _ = in_flight::kafka_flush(&producer, linger);
        });
        Ok(())
    }

    /// What Kafka holds a position record of, with the metrics of what settled; a record
    /// of what every acknowledged transaction allows is sent when due.
    fn confirmable(&mut self, kafka: &mut InFlight<Tag>) -> Option<Settled> {
        let settled = self.tracker.take_settled();
        if !settled.is_empty() {
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
        }
        if let Some(acknowledged) = self.tracker.confirmable() {
            self.recorder.record(acknowledged, kafka, Instant::now());
        }
        self.recorder.recorded
    }

    fn oldest_unconfirmed(&self) -> Option<i64> {
        self.tracker.oldest_pending_commit_micros()
    }

    /// Shutdown: settles what is in flight within the grace period, then records the
    /// position of what settled, so that the slot is confirmed to all of it.
    async fn finish(&mut self, kafka: &mut InFlight<Tag>) -> Result<(), RelayError> {
        info!(
            in_flight = self.tracker.in_flight(),
            "draining before shutdown"
        );
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        let deadline = tokio::time::Instant::now() + grace;
        self.settle_until(kafka, deadline).await?;
        if let Some(acknowledged) = self.tracker.confirmable() {
            // Due now: the last one, whatever the interval.
            self.recorder
                .record(acknowledged, kafka, Instant::now() + RECORD_INTERVAL);
        }
        self.settle_until(kafka, deadline).await
    }
}

impl AtLeastOnce<'_> {
    /// Books the outcomes of what is in flight until none is left or `deadline`.
    async fn settle_until(
        &mut self,
        kafka: &mut InFlight<Tag>,
        deadline: tokio::time::Instant,
    ) -> Result<(), RelayError> {
        while !kafka.is_empty() {
            match tokio::time::timeout_at(deadline, kafka.next()).await {
                Ok(Some(answer)) => self.answered(answer).await?,
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

    /// Parks a message Kafka would never take as it is durably, then books it as settled.
    async fn park(
        &mut self,
        seq: TransactionSeq,
        message: &OutgoingMessage,
        commit_lsn: u64,
        error: &str,
    ) -> Result<(), RelayError> {
        crate::parking::park_refused(self.sql, self.metrics, message, commit_lsn, error).await?;
        self.tracker.delivered(seq);
        self.metrics.set_in_flight(self.tracker.in_flight());
        Ok(())
    }
}

/// How often at most a position record is sent: the slot's status goes to PostgreSQL every
/// `status_interval_ms` anyway, and a busy stream would otherwise write one a round trip.
const RECORD_INTERVAL: Duration = Duration::from_millis(50);

/// At least once's position records ([`crate::position`]): the slot may be confirmed to a
/// position once Kafka acknowledged a record of it, and no further. One record in flight
/// at a time, at most one every [`RECORD_INTERVAL`].
struct Recorder {
    slot: String,
    topic: String,
    identity: Identity,
    /// What Kafka acknowledged a record of.
    recorded: Option<Settled>,
    /// The record in flight.
    sending: Option<Settled>,
    sent_at: Option<Instant>,
}

impl Recorder {
    fn new(config: &RelayConfig, identity: Identity) -> Self {
        Self {
            slot: config.slot.clone(),
            topic: config.position_topic(),
            identity,
            recorded: None,
            sending: None,
            sent_at: None,
        }
    }

    /// Whether a record of `acknowledged` is due at `now`: none in flight, something newer
    /// than what is recorded, and the interval passed. Pure.
    fn due(&self, acknowledged: &Acknowledged, now: Instant) -> bool {
        self.sending.is_none()
            && self
                .recorded
                .is_none_or(|recorded| acknowledged.end_lsn > recorded.end_lsn)
            && self
                .sent_at
                .is_none_or(|at| now.saturating_duration_since(at) >= RECORD_INTERVAL)
    }

    /// Sends a record of `acknowledged` when due. A record librdkafka would not queue (its
    /// queue full) is tried again at the next call.
    fn record<T>(&mut self, acknowledged: &Acknowledged, kafka: &mut InFlight<T>, now: Instant) {
        if !self.due(acknowledged, now) {
            return;
        }
        let record = Position::new(
            &self.slot,
            &self.identity,
            acknowledged.commit_lsn,
            acknowledged.end_lsn,
            acknowledged
                .last_event
                .as_ref()
                .map(|(id, commit_lsn)| LastEvent::new(id, *commit_lsn)),
            acknowledged.heartbeats,
            DeliveryMode::AtLeastOnce,
        );
        match kafka.send_record(
            &self.topic,
            0,
            self.slot.as_bytes(),
            &record.encode(),
            acknowledged.end_lsn,
        ) {
            Ok(()) => {
                self.sending = Some(Settled {
                    end_lsn: acknowledged.end_lsn,
                    commit_micros: acknowledged.commit_time_micros,
                });
                self.sent_at = Some(now);
            }
            Err(error) => warn!(%error, "the position record was not queued; trying again"),
        }
    }

    /// Kafka answered the record of `mark`: recorded, or the session ends (the next one
    /// resends from the slot, which was not confirmed past the last record).
    fn answered(
        &mut self,
        mark: u64,
        result: Result<(), rdkafka::error::KafkaError>,
    ) -> Result<(), RelayError> {
        let sending = self.sending.take();
        match result {
            Ok(()) => {
                if let Some(sent) = sending.filter(|sent| sent.end_lsn == mark) {
                    self.recorded = Some(sent);
                }
                Ok(())
            }
            Err(error) => {
                error!(
                    topic = %self.topic,
                    %error,
                    "cannot write the relay's position: the slot is not confirmed past it. Check that the topic exists (`ledger topics create`) and that the relay may write it"
                );
                Err(error.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_record_is_due_one_at_a_time_and_not_too_often() {
        let config = RelayConfig::default();
        let identity = Identity {
            system_id: "1".into(),
            timeline: 1,
            database: "ledger".into(),
        };
        let mut recorder = Recorder::new(&config, identity);
        let at = |end_lsn| Acknowledged {
            end_lsn,
            ..Acknowledged::default()
        };
        let start = Instant::now();
        assert!(recorder.due(&at(100), start), "nothing recorded yet");
        let settled = |end_lsn| Settled {
            end_lsn,
            commit_micros: 0,
        };
        recorder.sending = Some(settled(100));
        recorder.sent_at = Some(start);
        assert!(
            !recorder.due(&at(200), start + RECORD_INTERVAL),
            "one in flight"
        );
        recorder.answered(100, Ok(())).unwrap();
        assert_eq!(recorder.recorded, Some(settled(100)));
        assert!(
            !recorder.due(&at(100), start + RECORD_INTERVAL),
            "nothing newer"
        );
        assert!(!recorder.due(&at(200), start), "too soon");
        assert!(recorder.due(&at(200), start + RECORD_INTERVAL));
        recorder.sending = Some(settled(200));
        assert!(
            recorder
                .answered(
                    200,
                    Err(rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition
                    ))
                )
                .is_err()
        );
        assert_eq!(
            recorder.recorded,
            Some(settled(100)),
            "a failed record confirms nothing"
        );
    }

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
