//! One exactly-once session: whole PostgreSQL transactions committed to Kafka in Kafka
//! transactions, each with the relay's position, and the slot confirmed after the commit.
//!
//! # The safety argument, in layers
//!
//! 1. **Fencing.** The producer's `transactional.id` is `ra-ledger-relay-<slot>`. A session
//!    first takes the slot (PostgreSQL lets one connection stream it), then calls
//!    `init_transactions`: the coordinator aborts whatever transaction an older instance
//!    left open and refuses that instance from then on. Two relays never commit for one
//!    slot at once, and a zombie cannot commit late.
//! 2. **Atomic group.** A Kafka transaction carries whole PostgreSQL transactions (never
//!    part of one: it is committed only between them) and a position record, the commit
//!    LSN of its last PostgreSQL transaction, on the relay's compacted position topic
//!    ([`crate::position`]). Kafka commits all of it or none: a `read_committed` reader
//!    sees each PostgreSQL transaction whole or not at all, and the newest committed
//!    position says exactly which transactions Kafka holds.
//! 3. **Confirm after commit.** The slot is confirmed to the group's end only after
//!    `commit_transaction` returned success. PostgreSQL restarts a slot at its confirmed
//!    position: confirming before the commit would let a crash between the two skip a
//!    transaction that never reached Kafka (a loss). Confirming after means a crash
//!    between the two only makes the slot resend transactions Kafka already holds.
//! 4. **Skip what Kafka holds.** At start, after `init_transactions` (so the previous
//!    instance's transaction is decided), the session reads the newest committed position
//!    with `read_committed` and skips every resent transaction whose commit LSN is at or
//!    below it. What an aborted Kafka transaction carried (crash, fencing, broker fault)
//!    is invisible to `read_committed` readers and is above the position: it is resent.
//! 5. **Any error aborts.** A produce, delivery or commit error aborts the Kafka
//!    transaction (when the producer still can) and ends the session; the reconnect loop
//!    starts a new one, which fences again, reads the position again and resends from the
//!    slot. Nothing is retried inside a session, so no state survives an error.
//!
//! # Parking
//!
//! A message Kafka refuses for good (too large) is parked in `outbox_parked`, durably,
//! before the slot can move past it (the slot moves only after the commit that follows).
//! - Refused by librdkafka before sending (its own `message.max.bytes`): nothing entered
//!   the Kafka transaction; the message is parked and the group goes on without it.
//! - Refused by the broker: the Kafka transaction can no longer commit. The message is
//!   parked, the transaction aborted, and the session ends; the next session loads the
//!   event ids parked above the position and redoes the group without them.
//!
//! Parking itself is idempotent (one row per event id), so a resend parks nothing twice.
//!
//! # Why these choices
//!
//! - The group commits as soon as the relay has read everything the server sent (see
//!   [`group`]) rather than on a timer: a timer adds its wait to every event's
//!   latency, while committing when caught up lets the groups grow with the load (what
//!   arrives during one commit forms the next group).
//! - `commit_transaction` blocks; it runs on a blocking thread, and the session reads
//!   nothing while it runs (a new Kafka transaction cannot begin before it ends anyway).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer as _;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod commit;
mod group;

use group::{Bounds, Group};

use super::RelayError;
use super::in_flight::{self, Answer, InFlight, Producer, Sent};
use super::reader::{Closed, Delivery, Rendered, Settled};
use super::setup::Opened;
use crate::config::RelayConfig;
use crate::history::{self, Identity, Server};
use crate::metrics::RelayMetrics;
use crate::position::{self, LastEvent, Position};
use crate::publish::{self, CommitInfo, DeliveryFailure, OutgoingMessage};

/// Runs one exactly-once session on `opened` until `shutdown` or an error.
pub(super) async fn run(
    config: &RelayConfig,
    metrics: &RelayMetrics,
    shutdown: &CancellationToken,
    opened: Opened,
) -> Result<(), RelayError> {
    // The slot first (`opened` holds it): it is the lock. Fencing before holding it would
    // let two relays waiting for the same slot fence each other in turn.
    let (sql, server, stream) = super::stream::split(config, opened);
    // Check first, fence second: a relay pointed at an old primary or a clone shares the
    // transactional id of the real one, and fencing would abort the real one's transaction.
    // The newest record, committed or not, names the server the slot's relay streams from.
    resume_from(
        &sql,
        &server,
        position::read_in_background(config, position::Read::Newest).await?,
    )
    .await?;
    let producer = in_flight::transactional(config, &server.identity.system_id)?;
    let timeout = config.transaction_timeout();
    blocking(&producer, move |producer| {
        producer.init_transactions(timeout)
    })
    .await?;
    let stored = position::read_in_background(config, position::Read::Committed).await?;
    let resume = resume_from(&sql, &server, stored).await?;
    let parked = parked_above(&sql, resume.commit_lsn).await?;
    info!(
        position = %crate::lsn::format_lsn(resume.commit_lsn),
        transactional_id = %config.transactional_id(&server.identity.system_id),
        parked = parked.len(),
        "streaming from the slot, exactly once"
    );
    let delivery = ExactlyOnce {
        config,
        metrics,
        sql: &sql,
        bounds: Bounds {
            messages: config.transaction_max_messages,
            bytes: config.transaction_max_bytes,
            age: Duration::from_millis(config.transaction_max_ms),
        },
        position_topic: config.position_topic(),
        identity: server.identity,
        position: resume.commit_lsn,
        position_end: resume.end_lsn,
        last_event: resume.last_event,
        heartbeats: resume.heartbeats,
        parked,
        open: None,
        group: Group::default(),
        in_kafka_transaction: false,
        kafka_started: None,
        unusable: false,
        confirm_to: None,
    };
    stream
        .run(config, metrics, shutdown, &sql, delivery, producer)
        .await
}

/// Runs a blocking producer call (`init_transactions`, `commit_transaction`,
/// `abort_transaction`) on a blocking thread.
async fn blocking(
    producer: &Producer,
    call: impl FnOnce(&Producer) -> Result<(), KafkaError> + Send + 'static,
) -> Result<(), KafkaError> {
    let producer = producer.clone();
    tokio::task::spawn_blocking(move || call(&producer))
        .await
        .unwrap_or(Err(KafkaError::Canceled))
}

/// Where a session resumes: what Kafka holds, as far as the stored position can be trusted.
#[derive(Debug, Default)]
struct Resume {
    /// Transactions committed at or below it are in Kafka: skipped when the slot resends.
    commit_lsn: u64,
    /// The end of the last of them.
    end_lsn: u64,
    /// The newest event Kafka holds.
    last_event: Option<LastEvent>,
    /// The heartbeat count the position carries.
    heartbeats: Option<u64>,
}

/// Checks the stored position against the server and the outbox ([`crate::history`], its
/// rules 1 to 6, then rule 7 with the outbox's answer): the position resumes only if it
/// names a point of this server's past. A position
/// without an identity (an older relay's, or anything but the relay's) skips nothing.
async fn resume_from(
    sql: &Client,
    server: &Server,
    stored: Option<Position>,
) -> Result<Resume, RelayError> {
    let Some(position) = stored else {
        return Ok(Resume::default());
    };
    let Some(origin) = position.stored() else {
        warn!(
            position = %position.end_lsn,
            "the position record names no server (written by an older relay, or not by a relay): it is not trusted, and the transactions the slot resends are published again (read_committed consumers may see them twice)"
        );
        return Ok(Resume::default());
    };
    history::resume(&origin, server)?;
    if let Some(event) = history::must_hold(&origin, server) {
        let held = sql
            .query_opt(
                include_str!("../../sql/outbox_holds_event.sql"),
                &[&event.id],
            )
            .await?
            .is_some();
        history::still_held(event, held)?;
    }
    Ok(Resume {
        commit_lsn: position.commit_lsn(),
        end_lsn: position.end_lsn(),
        last_event: position.last_event,
        heartbeats: position.heartbeats,
    })
}

/// Event ids parked above `position`: their transactions are not in Kafka yet, and a
/// resend must leave them out.
async fn parked_above(sql: &Client, position: u64) -> Result<HashSet<String>, RelayError> {
    let rows = sql
        .query(
            include_str!("../../sql/parked_above.sql"),
            &[&crate::lsn::format_lsn(position)],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The PostgreSQL transaction being streamed, as the delivery counts it.
struct OpenTransaction {
    commit: CommitInfo,
    messages: usize,
    /// At or below the position: Kafka holds it already.
    skipped: bool,
}

/// The exactly-once delivery's state.
struct ExactlyOnce<'a> {
    config: &'a RelayConfig,
    metrics: &'a RelayMetrics,
    sql: &'a Client,
    bounds: Bounds,
    position_topic: String,
    /// The server streamed from: what every position record names.
    identity: Identity,
    /// Commit LSN of the newest transaction Kafka holds (read at start, then committed).
    position: u64,
    /// Its end LSN: the slot is never confirmed past it (a group without messages commits
    /// a position of its own before the slot passes it).
    position_end: u64,
    /// The newest event Kafka holds, carried into every position.
    last_event: Option<LastEvent>,
    /// The newest heartbeat count read, carried into every position.
    heartbeats: Option<u64>,
    /// Event ids parked above the position: not sent again.
    parked: HashSet<String>,
    open: Option<OpenTransaction>,
    group: Group,
    /// Whether a Kafka transaction is open (begun at the group's first message).
    in_kafka_transaction: bool,
    /// When it began.
    kafka_started: Option<Instant>,
    /// An indefinite outcome happened ([`publish::indefinite`]): the producer is never used
    /// again, not even to abort.
    unusable: bool,
    /// Where the slot may be confirmed, once known (after a commit, or past a skipped
    /// transaction).
    confirm_to: Option<Settled>,
}

impl Delivery for ExactlyOnce<'_> {
    /// Each message's commit LSN. The group's messages and its position record are sent on
    /// the transactional producer.
    type Tag = u64;

    fn begin(&mut self, commit: &CommitInfo) -> bool {
        let skipped = commit.commit_lsn <= self.position;
        self.open = Some(OpenTransaction {
            commit: *commit,
            messages: 0,
            skipped,
        });
        !skipped
    }

    /// One message: sent in the open Kafka transaction (begun at the group's first).
    async fn send(
        &mut self,
        kafka: &mut InFlight<u64>,
        message: Rendered,
        commit: &CommitInfo,
    ) -> Result<(), RelayError> {
        let message = match message {
            Ok(message) => message,
            Err(unrenderable) if self.parked.contains(&unrenderable.message.row.event_id) => {
                return Ok(());
            }
            Err(unrenderable) => {
                // Never sent: the Kafka transaction is untouched.
                let error = unrenderable.error.to_string();
                return self
                    .park(&unrenderable.message, commit.commit_lsn, &error)
                    .await;
            }
        };
        if self.parked.contains(&message.row.event_id) {
            return Ok(());
        }
        if let Some(open) = self.open.as_mut() {
            open.messages += 1;
        }
        if !self.in_kafka_transaction {
            self.begin_kafka_transaction(kafka)?;
            self.send_held_position(kafka)?;
        }
        self.group.sent(message.value.len(), Instant::now());
        self.last_event = Some(LastEvent::new(&message.row.event_id, commit.commit_lsn));
        match kafka.send(message, commit.commit_lsn) {
            Ok(()) => {}
            Err(refused) => {
                let error = refused.error;
                if publish::classify(&error) != DeliveryFailure::Permanent {
                    self.failed(&error);
                    return Err(self.too_large(error.into()));
                }
                // Refused before it was sent: the Kafka transaction is untouched.
                self.park(&refused.message, commit.commit_lsn, &error.to_string())
                    .await?;
            }
        }
        Ok(())
    }

    /// A PostgreSQL transaction ends whole: it joins the group, which is flushed when due.
    fn close(&mut self, closed: Closed) {
        let Some(transaction) = self.open.take() else {
            return;
        };
        let end_lsn = closed.end_lsn;
        if closed.heartbeats.is_some() {
            self.heartbeats = closed.heartbeats;
        }
        if transaction.skipped {
            // Kafka holds it (it is at or below the position): the slot may pass it.
            self.metrics.transaction_skipped();
            self.confirm_to = Some(Settled {
                end_lsn,
                commit_micros: 0,
            });
            return;
        }
        self.group.closed(
            transaction.commit.commit_lsn,
            end_lsn,
            transaction.commit.commit_time_micros,
            transaction.messages > 0,
        );
    }

    /// Books an answer. Any failure ends the session (the reader aborts); a refusal for
    /// good is parked first, so the next session leaves it out.
    async fn answered(&mut self, answer: Answer<u64>) -> Result<(), RelayError> {
        let Err(error) = answer.result else {
            return Ok(());
        };
        self.failed(&error);
        match answer.sent {
            Sent::Message {
                tag: commit_lsn,
                message,
            } => {
                let error = self.refused(&message, commit_lsn, error).await;
                Err(self.too_large(error))
            }
            Sent::Record { .. } => Err(self.too_large(error.into())),
        }
    }

    /// The group, when it holds whole transactions: at once when caught up, otherwise past
    /// a bound ([`group`]). A skipped transaction never joins one: the skipped ones come
    /// first in a session, all at or below the position the first group starts above.
    fn due(&self, caught_up: bool) -> bool {
        self.group.due(&self.bounds, caught_up, Instant::now())
    }

    async fn flush(&mut self, kafka: &mut InFlight<u64>) -> Result<(), RelayError> {
        self.commit(kafka).await
    }

    fn confirmable(&mut self, _kafka: &mut InFlight<u64>) -> Option<Settled> {
        self.confirm_to.take()
    }

    /// Shutdown: commits the group when it holds whole transactions only, aborts it when a
    /// PostgreSQL transaction is half read (begun, not yet closed).
    async fn finish(&mut self, kafka: &mut InFlight<u64>) -> Result<(), RelayError> {
        if self.open.is_some() {
            info!(
                "stopping inside a PostgreSQL transaction: its Kafka transaction is aborted and resent by the next relay"
            );
            self.abort_transaction(kafka).await;
            return Ok(());
        }
        self.commit(kafka).await
    }

    async fn abort(&mut self, kafka: &mut InFlight<u64>) {
        self.abort_transaction(kafka).await;
    }
}

impl ExactlyOnce<'_> {
    /// Begins the Kafka transaction of a group.
    fn begin_kafka_transaction(&mut self, kafka: &InFlight<u64>) -> Result<(), RelayError> {
        kafka.producer().begin_transaction()?;
        self.in_kafka_transaction = true;
        self.kafka_started = Some(Instant::now());
        Ok(())
    }

    /// Sends the position Kafka holds already as the first record of a Kafka transaction
    /// that carries messages. It adds the position topic's partition to the transaction
    /// together with the first messages' partitions, in one AddPartitionsToTxn, rather
    /// than at the commit, where the group's own position record would wait for a
    /// registration of its own: one round trip more before `commit_transaction` on every
    /// group. A reader never takes it for the newest: the group's record follows it in the
    /// same Kafka transaction, and an aborted one shows neither. Not before the first
    /// commit of a position (nothing is held yet to repeat).
    fn send_held_position(&mut self, kafka: &mut InFlight<u64>) -> Result<(), RelayError> {
        if self.position_end == 0 {
            return Ok(());
        }
        let held = Position::new(
            &self.config.slot,
            &self.identity,
            self.position,
            self.position_end,
            self.last_event.clone(),
            self.heartbeats,
            crate::config::DeliveryMode::ExactlyOnce,
        );
        kafka.send_record(
            &self.position_topic,
            0,
            self.config.slot.as_bytes(),
            &held.encode(),
            self.position_end,
        )?;
        Ok(())
    }

    /// Books a Kafka error of the group: an indefinite one makes the producer unusable.
    fn failed(&mut self, error: &KafkaError) {
        if publish::indefinite(error) {
            warn!(%error, "an indefinite outcome: this producer is dropped without another call (not even an abort); the next session fences it with a new one");
            self.metrics.indefinite_outcome();
            self.unusable = true;
        }
    }

    /// A Kafka transaction that failed once the transaction timeout had passed, holding one
    /// PostgreSQL transaction (the group's only one, or one still being read): the next
    /// attempt would fail the same way, so the relay stops and says what to do. With more
    /// PostgreSQL transactions in it, the group's bounds would have ended it long before,
    /// so the broker was slow, and the session is retried.
    fn too_large(&self, error: RelayError) -> RelayError {
        let timeout = self.config.transaction_timeout();
        let Some(started) = self.kafka_started else {
            return error;
        };
        if started.elapsed() < timeout {
            return error;
        }
        // Transactions without messages (heartbeats) do not count: they cost nothing.
        let carried = self.group.commit_times_micros.len();
        let (commit_lsn, messages) = match &self.open {
            Some(open) if open.messages > 0 && carried == 0 => {
                (open.commit.commit_lsn, open.messages)
            }
            None if carried == 1 => (self.group.last_carried_lsn, self.group.messages),
            _ => return error,
        };
        RelayError::TransactionTooLarge {
            commit_lsn,
            messages,
            timeout_ms: self.config.transaction_timeout_ms,
        }
    }

    /// A failed delivery: parked first when Kafka refused it for good. Returns the error
    /// that ends the session (its Kafka transaction is aborted).
    async fn refused(
        &mut self,
        message: &OutgoingMessage,
        commit_lsn: u64,
        error: KafkaError,
    ) -> RelayError {
        if publish::classify(&error) == DeliveryFailure::Permanent {
            if let Err(parking) = self.park(message, commit_lsn, &error.to_string()).await {
                return parking;
            }
            warn!(
                "the Kafka transaction holding the refused message is aborted; the next session redoes it without the message"
            );
        }
        error.into()
    }

    /// Parks a message Kafka would never take as it is: refused for good, or with no
    /// rendering in its topic's format.
    async fn park(
        &mut self,
        message: &OutgoingMessage,
        commit_lsn: u64,
        error: &str,
    ) -> Result<(), RelayError> {
        crate::parking::park_refused(self.sql, self.metrics, message, commit_lsn, error).await?;
        self.parked.insert(message.row.event_id.clone());
        Ok(())
    }
}
