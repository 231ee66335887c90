//! The one reader of the slot, for both delivery modes: decodes what the replication stream
//! sends, hands each committed transaction's outbox rows to a [`Delivery`], and confirms the
//! slot to what the delivery says Kafka has durably.
//!
//! The split follows supabase/etl's apply loop and its destinations: the reader knows the
//! WAL (transactions, relations, heartbeats, read-ahead, confirmation) and owns what both
//! deliveries share: the messages in flight on the producer, their bound (at it the reader
//! reads no more WAL: the backpressure) and Kafka's answers, each handed to the delivery.
//! A delivery says only what differs: acknowledgements and a position record of them, or
//! transactions and their position. The reader never asks which one it feeds.
//!
//! # The loop
//!
//! A `biased` select, in this priority order, each with a comment on why:
//! 1. shutdown, between transactions: a clean stop inside one reads it to its end first
//!    (within the shutdown grace), so that nothing it sent is left for the next relay to
//!    send again;
//! 2. Kafka's answer to a send: it frees capacity, moves the slot, and a refusal must end a
//!    group before more joins it;
//! 3. a heartbeat: a transactional message through the slot, so an idle outbox does not pin
//!    WAL, and whose LSN and time let the age gauge see a transaction the server is still
//!    decoding ([`Heartbeats`]);
//! 4. a check of the publication ([`super::publication`]): it must pass before the slot
//!    is confirmed any further, and a failed one ends the session before anything more is
//!    read or confirmed;
//! 5. new WAL, while the delivery has room;
//! 6. last, when nothing else is ready: the reader has read all the server sent, so a
//!    delivery that groups (exactly once) flushes its group now rather than on a timer.
//!
//! The slot is confirmed to what the delivery says Kafka has, and never past what the
//! publication's checks vouch for ([`Coverage`]): a publication that stopped carrying the
//! outbox leaves rows out of the stream, and a confirm past them would let them go.
//!
//! While a delivery flushes, the reader goes on reading what the server sends (up to the
//! byte bound) without handling it, so the server keeps decoding, and handles it in order
//! before anything newer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::coverage::{self, Coverage};
use super::in_flight::{Answer, InFlight};
use super::publication;
use super::published::Published;
use super::{HEARTBEAT_PREFIX, RelayError};
use crate::config::RelayConfig;
use crate::metrics::{PG_EPOCH_MICROS, RelayMetrics, now_micros};
use crate::outbox::OutboxLayout;
use crate::pgoutput::Relation;
use crate::pgoutput::{self, DecodeError, LogicalMessage};
use crate::publish::{CommitHeaders, CommitInfo, OutgoingMessage, Unrenderable};

/// An outbox row's message, or why it has none in its topic's format (to park).
pub(super) type Rendered = Result<OutgoingMessage, Unrenderable>;

/// What a delivery mode does with the committed transactions the reader decoded: only
/// what differs between the two. The reader owns what they share: the producer's messages
/// in flight ([`InFlight`]), the bound on them (`max_in_flight`, the backpressure: the
/// reader reads no more WAL at it) and Kafka's answers, which it hands to
/// [`Delivery::answered`] as they come. A method that sends is given the in-flight window.
pub(super) trait Delivery {
    /// What each message is sent with, to be known again in Kafka's answer.
    type Tag;

    /// A committed transaction starts: whether its rows are wanted (exactly once skips the
    /// transactions Kafka holds already).
    fn begin(&mut self, commit: &CommitInfo) -> bool;

    /// One row of the open, wanted transaction.
    async fn send(
        &mut self,
        kafka: &mut InFlight<Self::Tag>,
        message: Rendered,
        commit: &CommitInfo,
    ) -> Result<(), RelayError>;

    /// The open transaction ended whole.
    fn close(&mut self, closed: Closed);

    /// Books Kafka's answer to a send.
    async fn answered(&mut self, answer: Answer<Self::Tag>) -> Result<(), RelayError>;

    /// Between transactions, whether to flush now: right after one closed, or, when
    /// `caught_up`, with nothing more to read.
    fn due(&self, caught_up: bool) -> bool;

    /// Flushes what was sent: exactly once commits the Kafka transaction; at least once
    /// starts sending at once what the producer lingers on, and returns.
    async fn flush(&mut self, kafka: &mut InFlight<Self::Tag>) -> Result<(), RelayError>;

    /// Where the slot may be confirmed now, when anything settled (at least once sends a
    /// record of its position here, when one is due).
    fn confirmable(&mut self, kafka: &mut InFlight<Self::Tag>) -> Option<Settled>;

    /// The commit time of the oldest transaction read and not yet confirmable, for the age
    /// gauge; a delivery that does not track it (exactly once) leaves the gauge to the
    /// heartbeats.
    fn oldest_unconfirmed(&self) -> Option<i64> {
        None
    }

    /// Shutdown, reading no more: settles within the grace period, or commits the open
    /// group (aborts it when a PostgreSQL transaction is half read).
    async fn finish(&mut self, kafka: &mut InFlight<Self::Tag>) -> Result<(), RelayError>;

    /// After an error: aborts what is open, if anything.
    async fn abort(&mut self, _kafka: &mut InFlight<Self::Tag>) {}
}

/// Where the slot may be confirmed: the end LSN of a transaction Kafka has durably, with
/// its commit time (for the confirmed commit's age). Ordered by the end LSN first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Settled {
    /// The end LSN.
    pub end_lsn: u64,
    /// The commit time, microseconds since the Unix epoch.
    pub commit_micros: i64,
}

/// How a transaction ended, for [`Delivery::close`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Closed {
    /// Its end LSN.
    pub end_lsn: u64,
    /// The slot's heartbeat count, when it was a heartbeat of this relay's: what the
    /// position written past it carries ([`crate::history`], rule 6).
    pub heartbeats: Option<u64>,
}

/// The transaction being streamed.
struct Open {
    commit: CommitInfo,
    /// Its headers, when its rows are wanted ([`Delivery::begin`]).
    headers: Option<Arc<CommitHeaders>>,
    /// The next row's place in the transaction.
    ordinal: usize,
    /// The heartbeat count it carries, if it is a heartbeat.
    heartbeats: Option<u64>,
}

/// Heartbeats emitted and not yet confirmed, with their emit times: while one waits, the
/// oldest unconfirmed commit is at least as old as it. That covers what the relay cannot see
/// otherwise: a transaction the server is still decoding (protocol v1 sends a transaction
/// only once it is decoded whole), or a server that sends nothing at all.
#[derive(Debug, Default)]
struct Heartbeats {
    waiting: VecDeque<(u64, i64)>,
}

impl Heartbeats {
    fn emitted(&mut self, lsn: u64, micros: i64) {
        self.waiting.push_back((lsn, micros));
    }

    /// Forgets those the slot confirmed past; the oldest left's emit time.
    fn confirmed(&mut self, confirmed: u64) -> Option<i64> {
        while self
            .waiting
            .front()
            .is_some_and(|(lsn, _)| *lsn < confirmed)
        {
            self.waiting.pop_front();
        }
        self.oldest()
    }

    fn oldest(&self) -> Option<i64> {
        self.waiting.front().map(|(_, micros)| *micros)
    }
}

/// The reader's state between events.
pub(super) struct Reader<'a, D: Delivery> {
    config: &'a RelayConfig,
    metrics: &'a RelayMetrics,
    sql: &'a Client,
    delivery: D,
    /// What the delivery sent and Kafka has not answered yet.
    kafka: InFlight<D::Tag>,
    layouts: HashMap<u32, OutboxLayout>,
    open: Option<Open>,
    /// What the server sent while the delivery flushed, handled first.
    read_ahead: VecDeque<ReplicationEvent>,
    read_ahead_bytes: usize,
    heartbeats: Heartbeats,
    /// What the publication's checks vouch for.
    coverage: Coverage,
    /// The newest position the delivery said Kafka has; confirmed as far as the coverage
    /// allows.
    settled: Option<Settled>,
    confirmed: u64,
    /// The relay's record of what Kafka holds, for retention ([`super::published`]).
    published: Published,
    /// The ways the outbox guard is switched off that the last check saw.
    guard_bypasses: Vec<String>,
}

impl<'a, D: Delivery> Reader<'a, D> {
    /// A reader feeding `delivery`, which sends on `kafka`.
    pub(super) fn new(
        config: &'a RelayConfig,
        metrics: &'a RelayMetrics,
        sql: &'a Client,
        delivery: D,
        kafka: InFlight<D::Tag>,
        coverage: Coverage,
        published: Published,
    ) -> Self {
        Self {
            config,
            metrics,
            sql,
            delivery,
            kafka,
            layouts: HashMap::new(),
            open: None,
            read_ahead: VecDeque::new(),
            read_ahead_bytes: 0,
            heartbeats: Heartbeats::default(),
            coverage,
            settled: None,
            confirmed: 0,
            published,
            guard_bypasses: Vec::new(),
        }
    }

    /// Streams until `shutdown`, then finishes (settles, confirms) and waits until
    /// PostgreSQL recorded the final position; on an error, aborts the delivery.
    pub(super) async fn run(
        mut self,
        replication: &mut ReplicationClient,
        shutdown: &CancellationToken,
    ) -> Result<u64, RelayError> {
        let outcome = match self.stream(replication, shutdown).await {
            Ok(()) => self.finish(replication).await,
            Err(error) => Err(error),
        };
        if let Err(error) = outcome {
            self.delivery.abort(&mut self.kafka).await;
            return Err(error);
        }
        Ok(self.confirmed)
    }

    async fn stream(
        &mut self,
        replication: &mut ReplicationClient,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let mut heartbeat = tokio::time::interval(self.config.heartbeat_interval());
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(publication::CHECK_INTERVAL);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A clean stop ends between transactions. Inside one, the rows already sent would
        // stay unconfirmed (the slot moves past whole transactions only), and the next relay
        // would send them again: duplicates after a clean stop, seen in a mode switch under
        // load. The rest of an open transaction is already on its way (the server sends a
        // transaction whole, after its commit), so the reader reads on to its end, for at
        // most the shutdown grace.
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        let mut stopping: Option<tokio::time::Instant> = None;
        loop {
            if shutdown.is_cancelled() {
                let since = *stopping.get_or_insert_with(tokio::time::Instant::now);
                if self.open.is_none() || since.elapsed() >= grace {
                    return Ok(());
                }
            }
            // The in-flight bound: one message waiting long (its partition's leader gone)
            // stops the reading before the memory behind it grows without end.
            let can_read = self.kafka.len() < self.config.max_in_flight;
            if can_read && let Some(event) = self.read_ahead.pop_front() {
                self.read_ahead_bytes -= event_bytes(&event);
                self.on_event(event, replication).await?;
                self.confirm(replication);
                continue;
            }
            // Caught up means the server has sent nothing more, not that the reader stopped
            // for want of room: then it waits for outcomes instead.
            let due = self.open.is_none() && can_read && self.delivery.due(true);
            tokio::select! {
                // The priority order and its reasons: the module doc.
                biased;
                // Back to the loop's top, which stops now or once the open transaction ends.
                () = shutdown.cancelled(), if stopping.is_none() => continue,
                () = tokio::time::sleep(grace), if stopping.is_some() => continue,
                Some(answer) = self.kafka.next(), if !self.kafka.is_empty() => {
                    self.delivery.answered(answer).await?;
                }
                _ = heartbeat.tick() => self.heartbeat().await?,
                _ = check.tick() => {
                    self.check_publication().await?;
                    self.published.record(self.sql, self.confirmed, false).await?;
                }
                event = replication.recv(), if can_read => {
                    let Some(event) = event? else {
                        return Err(RelayError::protocol("the server ended the stream"));
                    };
                    self.on_event(event, replication).await?;
                }
                () = std::future::ready(()), if due => self.flush(replication).await?,
            }
            self.confirm(replication);
        }
    }

    async fn heartbeat(&mut self) -> Result<(), RelayError> {
        let lsn: String = self
            .sql
            .query_one(
                include_str!("../sql/heartbeat.sql"),
                &[&HEARTBEAT_PREFIX, &self.config.slot],
            )
            .await?
            .get(0);
        if let Some(lsn) = crate::lsn::parse_lsn(&lsn) {
            self.heartbeats.emitted(lsn, now_micros());
            self.publish_oldest();
        }
        Ok(())
    }

    /// Checks the publication; what it vouches for lets the slot be confirmed further.
    async fn check_publication(&mut self) -> Result<(), RelayError> {
        let catalog = coverage::recheck(self.sql, self.config, &mut self.coverage).await?;
        let bypasses = publication::guard_bypasses(&catalog);
        if bypasses != self.guard_bypasses {
            for bypass in bypasses.iter().filter(|b| !self.guard_bypasses.contains(b)) {
                tracing::warn!(%bypass, "the outbox guard is switched off this way, so nothing refuses a command that takes the outbox out of the publication (the relay still stops on it)");
            }
            self.metrics.set_guard_bypasses(bypasses.len());
            self.guard_bypasses = bypasses;
        }
        Ok(())
    }

    async fn on_event(
        &mut self,
        event: ReplicationEvent,
        replication: &mut ReplicationClient,
    ) -> Result<(), RelayError> {
        match event {
            // Protocol v1 sends a transaction only once it committed, whole and in commit
            // order, so its rows are handed on as they arrive; the slot is confirmed past
            // it only once the delivery says Kafka has it.
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => {
                if self.open.is_some() {
                    // An unclosed transaction would hold the slot back forever.
                    return Err(RelayError::protocol("a Begin inside a transaction"));
                }
                let commit = CommitInfo {
                    commit_lsn: final_lsn.as_u64(),
                    xid,
                    commit_time_micros: commit_time_micros + PG_EPOCH_MICROS,
                };
                let wanted = self.delivery.begin(&commit);
                if wanted {
                    self.metrics.began(commit.commit_time_micros);
                }
                self.open = Some(Open {
                    commit,
                    headers: wanted.then(|| Arc::new(CommitHeaders::of(&commit))),
                    ordinal: 0,
                    heartbeats: None,
                });
            }
            ReplicationEvent::XLogData { data, wal_end, .. } => {
                self.metrics.observe_wal_end(wal_end.as_u64());
                match pgoutput::decode(&data)? {
                    LogicalMessage::Relation(relation) => {
                        learn_relation(&self.coverage, &mut self.layouts, &relation)?;
                    }
                    LogicalMessage::Insert { relation_oid, new } => {
                        self.on_row(relation_oid, &new).await?;
                    }
                    // The publication is insert-only; anything else carries no event.
                    _ => {}
                }
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                self.metrics.observe_wal_end(end_lsn.as_u64());
                if let Some(open) = self.open.take() {
                    self.delivery.close(Closed {
                        end_lsn: end_lsn.as_u64(),
                        heartbeats: open.heartbeats,
                    });
                    if self.delivery.due(false) {
                        self.flush(replication).await?;
                    }
                }
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                self.metrics.observe_wal_end(wal_end.as_u64())
            }
            ReplicationEvent::Message {
                prefix, content, ..
            } if prefix == HEARTBEAT_PREFIX => {
                if let Some(open) = self.open.as_mut() {
                    open.heartbeats = heartbeat_count(&content, &self.config.slot);
                }
            }
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
        }
        Ok(())
    }

    /// One outbox row of the open transaction.
    async fn on_row(
        &mut self,
        relation_oid: u32,
        new: &pgoutput::TupleData,
    ) -> Result<(), RelayError> {
        let layout = self
            .layouts
            .get(&relation_oid)
            .ok_or(RelayError::Decode(DecodeError::UnknownTag(b'I')))?;
        let Some(open) = self.open.as_mut() else {
            return Err(RelayError::protocol("an insert outside a transaction"));
        };
        let Some(headers) = &open.headers else {
            return Ok(());
        };
        let row = layout.row(new)?;
        let message = OutgoingMessage::new(self.config, row, headers, open.ordinal);
        if let Err(unrenderable) = &message
            && unrenderable.error.holds_the_stream()
        {
            return Err(RelayError::NewerSchema(unrenderable.error.clone()));
        }
        open.ordinal += 1;
        let commit = open.commit;
        self.delivery.send(&mut self.kafka, message, &commit).await
    }

    /// Flushes the delivery, reading ahead meanwhile (see the module doc).
    async fn flush(&mut self, replication: &mut ReplicationClient) -> Result<(), RelayError> {
        let bound = self.config.transaction_max_bytes;
        let mut read_error = None;
        let outcome = {
            let flushed = self.delivery.flush(&mut self.kafka);
            tokio::pin!(flushed);
            loop {
                let room = read_error.is_none() && self.read_ahead_bytes < bound;
                tokio::select! {
                    biased;
                    outcome = &mut flushed => break outcome,
                    event = replication.recv(), if room => match event {
                        Ok(Some(event)) => {
                            self.read_ahead_bytes += event_bytes(&event);
                            self.read_ahead.push_back(event);
                        }
                        Ok(None) => read_error = Some(RelayError::protocol("the server ended the stream")),
                        Err(error) => read_error = Some(RelayError::from(error)),
                    },
                }
            }
        };
        outcome?;
        self.confirm(replication);
        // The flush is confirmed; a read that failed meanwhile ends the session now (what was
        // read before it is resent by the next one).
        read_error.map_or(Ok(()), Err)
    }

    /// Moves the slot to what the delivery has durably, as far as the publication's checks
    /// vouch for, and books the oldest waiting.
    fn confirm(&mut self, replication: &ReplicationClient) {
        if let Some(settled) = self.delivery.confirmable(&mut self.kafka) {
            self.settled = Some(self.settled.map_or(settled, |before| before.max(settled)));
        }
        if let Some(settled) = self.settled {
            let lsn = settled.end_lsn.min(self.coverage.covered());
            if lsn > self.confirmed {
                replication.update_applied_lsn(Lsn::from_u64(lsn));
                self.metrics.confirmed(lsn, settled.commit_micros);
                self.confirmed = lsn;
                self.heartbeats.confirmed(lsn);
            }
        }
        self.publish_oldest();
    }

    /// The age gauge: the oldest of what the delivery waits for and the oldest heartbeat not
    /// confirmed.
    fn publish_oldest(&self) {
        let oldest = match (self.delivery.oldest_unconfirmed(), self.heartbeats.oldest()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.metrics.still_unconfirmed(oldest);
    }

    /// Shutdown: the delivery finishes, the slot is confirmed, and PostgreSQL is given a
    /// moment to record it.
    async fn finish(&mut self, replication: &mut ReplicationClient) -> Result<(), RelayError> {
        self.delivery.finish(&mut self.kafka).await?;
        // Two checks: the second vouches for the WAL the first read, which is past all that
        // was read, so a clean stop confirms everything Kafka has.
        self.check_publication().await?;
        self.check_publication().await?;
        self.confirm(replication);
        wait_for_confirmation(self.sql, self.config, self.confirmed).await;
        // Once PostgreSQL has the final position: the record is never ahead of the slot.
        self.published
            .record(self.sql, self.confirmed, true)
            .await?;
        Ok(())
    }
}

/// Keeps the column layout of the outbox relation a session was told about; any table but
/// the outbox the publication check found (by OID) is an error (the relay publishes the
/// outbox only), and so is a column of another type than the relay reads.
fn learn_relation(
    coverage: &Coverage,
    layouts: &mut HashMap<u32, OutboxLayout>,
    relation: &Relation,
) -> Result<(), RelayError> {
    coverage.relation(
        relation.oid,
        &format!("{}.{}", relation.namespace, relation.name),
    )?;
    layouts.insert(relation.oid, OutboxLayout::from_relation(relation)?);
    Ok(())
}

/// The heartbeat count of `slot` a heartbeat's content (`<slot> <count>`) carries; `None`
/// for another slot's heartbeat or anything else.
fn heartbeat_count(content: &[u8], slot: &str) -> Option<u64> {
    let (of, count) = std::str::from_utf8(content).ok()?.split_once(' ')?;
    (of == slot).then(|| count.parse().ok()).flatten()
}

/// What a read-ahead event counts against the byte bound.
fn event_bytes(event: &ReplicationEvent) -> usize {
    match event {
        ReplicationEvent::XLogData { data, .. } => data.len() + 64,
        _ => 64,
    }
}

/// Waits (briefly) until PostgreSQL reports `confirmed` as the slot's position, so a clean
/// stop leaves no work to redo.
async fn wait_for_confirmation(sql: &Client, config: &RelayConfig, confirmed: u64) {
    if confirmed == 0 {
        return;
    }
    let wait = Duration::from_millis(config.status_interval_ms * 3 + 1_000);
    let deadline = std::time::Instant::now() + wait;
    let lsn = crate::lsn::format_lsn(confirmed);
    while std::time::Instant::now() < deadline {
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
    tracing::warn!(
        "PostgreSQL did not report the final position in time; the next relay may republish a little"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_counts_for_its_own_slot_only() {
        assert_eq!(heartbeat_count(b"relay_a 42", "relay_a"), Some(42));
        assert_eq!(heartbeat_count(b"relay_b 42", "relay_a"), None);
        assert_eq!(heartbeat_count(b"", "relay_a"), None);
        assert_eq!(heartbeat_count(b"relay_a x", "relay_a"), None);
        assert_eq!(heartbeat_count(&[0xff, b' ', b'1'], "relay_a"), None);
    }

    #[test]
    fn a_heartbeat_waits_until_the_slot_passes_it() {
        let mut heartbeats = Heartbeats::default();
        assert_eq!(heartbeats.oldest(), None);
        heartbeats.emitted(100, 1);
        heartbeats.emitted(200, 2);
        assert_eq!(heartbeats.confirmed(100), Some(1), "not past 100 yet");
        assert_eq!(heartbeats.confirmed(150), Some(2));
        assert_eq!(heartbeats.confirmed(201), None);
    }
}
