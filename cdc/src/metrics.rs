//! The relay's Prometheus metrics: every one declared here once (name, help, type), updated
//! per transaction or per batch (never per row), and rendered from those declarations in
//! the text exposition format on `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::infra::prometheus::{Histogram, Metric};

/// Bytes of WAL between the server's current end and the slot's confirmed position.
pub const REPLICATION_LAG_BYTES: Metric = Metric::gauge(
    "ra_relay_replication_lag_bytes",
    "WAL bytes between the server's end and the slot's confirmed position.",
);
/// Seconds since the commit of the newest transaction confirmed to the slot.
pub const NEWEST_PUBLISHED_COMMIT_AGE: Metric = Metric::gauge(
    "ra_relay_newest_published_commit_age_seconds",
    "Seconds since the commit of the newest transaction confirmed to the slot.",
);
/// Seconds since the commit of the oldest transaction read and not yet confirmed to the
/// slot; 0 when everything read is confirmed. What to alert on (see docs/operators.md,
/// "Lag in time, and what to alert on").
pub const OLDEST_UNCONFIRMED_COMMIT_AGE: Metric = Metric::gauge(
    "ra_relay_oldest_unconfirmed_commit_age_seconds",
    "Seconds since the commit of the oldest transaction read and not yet confirmed to the slot; 0 when caught up.",
);
/// Outbox events acknowledged by Kafka.
pub const EVENTS_PUBLISHED: Metric = Metric::counter(
    "ra_relay_events_published_total",
    "Outbox events acknowledged by Kafka.",
);
/// Seconds from a transaction's commit to Kafka's acknowledgement of its last message.
pub const COMMIT_TO_ACK: Metric = Metric::histogram(
    "ra_relay_commit_to_ack_seconds",
    "Seconds from a transaction's commit to Kafka's acknowledgement of its last message.",
);
/// Messages Kafka refused for good and the relay parked.
pub const PARKED_MESSAGES: Metric = Metric::counter(
    "ra_relay_parked_messages_total",
    "Messages Kafka refused for good, parked in outbox_parked.",
);
/// At least once's flushes when the stream went idle (`flush_when_idle`).
pub const IDLE_FLUSHES: Metric = Metric::counter(
    "ra_relay_idle_flushes_total",
    "Producer flushes because the relay read all the server sent (at least once, flush_when_idle).",
);
/// Messages sent to Kafka and not yet acknowledged.
pub const IN_FLIGHT: Metric = Metric::gauge(
    "ra_relay_in_flight_messages",
    "Messages sent to Kafka and not yet acknowledged.",
);
/// Replication sessions started (1 + reconnects).
pub const SESSIONS: Metric =
    Metric::counter("ra_relay_sessions_total", "Replication sessions started.");
/// 1 while the relay holds the slot and streams, 0 while it waits or reconnects.
pub const STREAMING: Metric = Metric::gauge(
    "ra_relay_streaming",
    "1 while the relay holds the slot and streams.",
);

/// Exactly once: seconds a Kafka `commit_transaction` took (flushing its messages
/// included).
pub const TRANSACTION_COMMIT: Metric = Metric::histogram(
    "ra_relay_kafka_transaction_commit_seconds",
    "Seconds a Kafka commit_transaction took, flushing its messages included (exactly once).",
);
/// Exactly once: outbox messages per committed Kafka transaction.
pub const TRANSACTION_MESSAGES: Metric = Metric::histogram(
    "ra_relay_kafka_transaction_messages",
    "Outbox messages per committed Kafka transaction (exactly once).",
);
/// Exactly once: Kafka transactions aborted (errors, shutdown mid-transaction).
pub const TRANSACTIONS_ABORTED: Metric = Metric::counter(
    "ra_relay_kafka_transactions_aborted_total",
    "Kafka transactions aborted (exactly once).",
);
/// Exactly once: PostgreSQL transactions the slot resent at or below the position in
/// Kafka, skipped.
pub const TRANSACTIONS_SKIPPED: Metric = Metric::counter(
    "ra_relay_transactions_skipped_total",
    "PostgreSQL transactions resent by the slot at or below the Kafka position, skipped (exactly once).",
);

/// Exactly once: indefinite outcomes (a commit, abort or produce that timed out or lost its
/// connection), after each of which the producer was dropped and a new one fenced it.
pub const INDEFINITE_OUTCOMES: Metric = Metric::counter(
    "ra_relay_kafka_indefinite_outcomes_total",
    "Kafka calls whose outcome was unknown (timeouts, lost connections); the producer was replaced and fenced (exactly once).",
);
/// 1 while the standby gate holds the relay: its walsender waits for the standbys of
/// `synchronized_standby_slots` (PostgreSQL's `WaitForStandbyConfirmation`), or the relay
/// holds before it streams because the gate is not set right ([`crate::relay::gate`]).
pub const STANDBY_GATE_WAITING: Metric = Metric::gauge(
    "ra_relay_standby_gate_waiting",
    "1 while the standby gate holds the relay: its walsender waits for the standbys of synchronized_standby_slots, or it holds before streaming.",
);
/// Slots `synchronized_standby_slots` names that the primary does not have: while above 0,
/// PostgreSQL holds decoding of a failover slot for ever.
pub const STANDBY_GATE_MISSING_SLOTS: Metric = Metric::gauge(
    "ra_relay_standby_gate_missing_slots",
    "Slots synchronized_standby_slots names that the primary does not have as physical slots.",
);
/// 1 while the relay streams without the standby gate, its slot's failover off, because
/// the primary has no standby (`without_standby = "stream"`, [`crate::relay::gate`]): a
/// page, since the next failover is not covered until a standby is built.
pub const STREAMING_WITHOUT_STANDBY: Metric = Metric::gauge(
    "ra_relay_streaming_without_standby",
    "1 while the relay streams without the standby gate (its slot's failover off) because the primary has no standby.",
);
/// Ways the outbox guard is switched off that the relay can see: the trigger missing,
/// disabled or not firing for every session, `event_triggers = off`, the override set for a
/// role or a database ([`crate::relay::publication::guard_bypasses`]).
pub const GUARD_BYPASSES: Metric = Metric::gauge(
    "ra_relay_outbox_guard_bypasses",
    "Ways the outbox guard (the event trigger of migration V17) is switched off that the relay sees; each is named in its log.",
);
/// Standbys (the other hosts of a multi-host database URL) the relay checks.
pub const STANDBYS: Metric = Metric::gauge(
    "ra_relay_standbys",
    "Standbys (other hosts of the database URL) the relay checks for its slot.",
);
/// Standbys whose copy of the slot is ready to take over (`synced AND NOT temporary AND
/// invalidation_reason IS NULL`): below `ra_relay_standbys`, a promotion now loses the slot.
pub const STANDBY_SLOTS_READY: Metric = Metric::gauge(
    "ra_relay_standby_slots_ready",
    "Standbys whose synced copy of the slot would survive a promotion.",
);
/// The timeline of the server the relay streams from.
pub const SERVER_TIMELINE: Metric = Metric::gauge(
    "ra_relay_server_timeline",
    "Timeline of the PostgreSQL server the relay streams from.",
);
/// Partitions of each event topic as Kafka's metadata says, read at each session's start
/// and every `health_check_interval_ms` ([`crate::relay::partitions`]): a change means
/// per-key order across it is not kept for consumers.
pub const TOPIC_PARTITIONS: Metric = Metric::gauge(
    "ra_relay_topic_partitions",
    "Partitions of each event topic as Kafka's metadata says; a change breaks per-key order across it for consumers.",
);

/// The relay's metrics; cheap to update from any task.
#[derive(Debug)]
pub struct RelayMetrics {
    wal_end: AtomicU64,
    confirmed_lsn: AtomicU64,
    newest_commit_micros: AtomicI64,
    /// Commit time of the oldest transaction not yet confirmed; 0: none.
    oldest_unconfirmed_micros: AtomicI64,
    events_published: AtomicU64,
    parked: AtomicU64,
    idle_flushes: AtomicU64,
    in_flight: AtomicU64,
    sessions: AtomicU64,
    streaming: AtomicU64,
    commit_to_ack: Histogram,
    transaction_commit: Histogram,
    transaction_messages: Histogram,
    transactions_aborted: AtomicU64,
    transactions_skipped: AtomicU64,
    indefinite_outcomes: AtomicU64,
    gate_waiting: AtomicU64,
    gate_missing: AtomicU64,
    without_standby: AtomicU64,
    guard_bypasses: AtomicU64,
    standbys: AtomicU64,
    standby_slots_ready: AtomicU64,
    timeline: AtomicU64,
    /// Each event topic's partition count last read.
    pub topic_partitions: TopicPartitions,
}

/// The counts the process last read, one series a topic on the gauge
/// `ra_relay_topic_partitions`.
#[derive(Debug, Default)]
pub struct TopicPartitions {
    counts: Mutex<BTreeMap<String, i32>>,
}

impl TopicPartitions {
    /// Records `read` over what was known and returns the counts known before
    /// ([`crate::relay::partitions::changes`] tells what changed).
    pub fn record(&self, read: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let before = counts.clone();
        counts.extend(read.iter().map(|(topic, &count)| (topic.clone(), count)));
        before
    }

    /// Appends the gauge: its head always, a series for each topic read.
    pub fn render(&self, out: &mut String, metric: &Metric) {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        metric.render_labelled(out, "topic", counts.iter().map(|(t, &n)| (t.as_str(), n)));
    }
}

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as i64)
}

/// PostgreSQL timestamps count from 2000-01-01; this many microseconds after the Unix epoch.
pub const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl Default for RelayMetrics {
    fn default() -> Self {
        Self {
            wal_end: AtomicU64::new(0),
            confirmed_lsn: AtomicU64::new(0),
            newest_commit_micros: AtomicI64::new(0),
            oldest_unconfirmed_micros: AtomicI64::new(0),
            events_published: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            idle_flushes: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            streaming: AtomicU64::new(0),
            commit_to_ack: Histogram::default(),
            transaction_commit: Histogram::default(),
            transaction_messages: Histogram::of_counts(),
            transactions_aborted: AtomicU64::new(0),
            transactions_skipped: AtomicU64::new(0),
            indefinite_outcomes: AtomicU64::new(0),
            gate_waiting: AtomicU64::new(0),
            gate_missing: AtomicU64::new(0),
            without_standby: AtomicU64::new(0),
            guard_bypasses: AtomicU64::new(0),
            standbys: AtomicU64::new(0),
            standby_slots_ready: AtomicU64::new(0),
            timeline: AtomicU64::new(0),
            topic_partitions: Default::default(),
        }
    }
}

impl RelayMetrics {
    /// Exactly once: a Kafka transaction of `messages` messages committed in `seconds`.
    pub fn transaction_committed(&self, messages: usize, seconds: f64) {
        self.transaction_commit.observe(seconds);
        self.transaction_messages.observe(messages as f64);
    }

    /// Exactly once: a Kafka transaction was aborted.
    pub fn transaction_aborted(&self) {
        self.transactions_aborted.fetch_add(1, Ordering::Relaxed);
    }

    /// Exactly once: a Kafka call's outcome was unknown; its producer is being replaced.
    pub fn indefinite_outcome(&self) {
        self.indefinite_outcomes.fetch_add(1, Ordering::Relaxed);
    }

    /// Exactly once: a resent PostgreSQL transaction at or below the position was skipped.
    pub fn transaction_skipped(&self) {
        self.transactions_skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// The server's WAL end, from a keepalive or data message.
    pub fn observe_wal_end(&self, lsn: u64) {
        self.wal_end.fetch_max(lsn, Ordering::Relaxed);
    }

    /// A position was confirmed to the slot; `commit_micros` is its commit time (Unix).
    pub fn confirmed(&self, lsn: u64, commit_micros: i64) {
        self.confirmed_lsn.fetch_max(lsn, Ordering::Relaxed);
        self.newest_commit_micros
            .fetch_max(commit_micros, Ordering::Relaxed);
    }

    /// A transaction committed at `commit_micros` (Unix) was read: unless an older one
    /// still waits, it is now the oldest not yet confirmed.
    pub fn began(&self, commit_micros: i64) {
        let _ = self.oldest_unconfirmed_micros.compare_exchange(
            0,
            commit_micros,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// After a confirmation: the commit time of the oldest transaction still waiting, or
    /// `None` when the relay is caught up with what it read.
    ///
    /// Not reset when a session ends: what it had not confirmed is read again by the next
    /// session, and still waits meanwhile, so the age goes on growing while the relay
    /// reconnects.
    pub fn still_unconfirmed(&self, commit_micros: Option<i64>) {
        self.oldest_unconfirmed_micros
            .store(commit_micros.unwrap_or(0), Ordering::Relaxed);
    }

    /// The commit time (Unix microseconds) of the oldest transaction read and not yet
    /// confirmed; `None` when everything read is confirmed. What the relay reports to the
    /// database for the service and the console (`relay::lag_report`).
    pub fn oldest_unconfirmed(&self) -> Option<i64> {
        Some(self.oldest_unconfirmed_micros.load(Ordering::Relaxed)).filter(|micros| *micros != 0)
    }

    /// `count` events acknowledged by Kafka.
    pub fn published(&self, count: u64) {
        self.events_published.fetch_add(count, Ordering::Relaxed);
    }

    /// A transaction fully acknowledged `seconds` after its commit.
    pub fn commit_to_ack(&self, seconds: f64) {
        self.commit_to_ack.observe(seconds);
    }

    /// A message was parked.
    pub fn parked(&self) {
        self.parked.fetch_add(1, Ordering::Relaxed);
    }

    /// The producer was flushed because the stream went idle.
    pub fn idle_flushed(&self) {
        self.idle_flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages currently in flight.
    pub fn set_in_flight(&self, count: usize) {
        self.in_flight.store(count as u64, Ordering::Relaxed);
    }

    /// A replication session started.
    pub fn session_started(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the relay is streaming.
    pub fn set_streaming(&self, streaming: bool) {
        self.streaming
            .store(u64::from(streaming), Ordering::Relaxed);
    }

    /// What the standby gate looks like: whether the walsender waits on it, and how many of
    /// the slots it names the primary lacks.
    pub fn set_gate(&self, waiting: bool, missing: usize) {
        self.gate_waiting
            .store(u64::from(waiting), Ordering::Relaxed);
        self.gate_missing.store(missing as u64, Ordering::Relaxed);
    }

    /// Whether the relay streams without the standby gate, the primary having no standby.
    pub fn set_without_standby(&self, without: bool) {
        self.without_standby
            .store(u64::from(without), Ordering::Relaxed);
    }

    /// How many ways the outbox guard is switched off, as the last check saw.
    pub fn set_guard_bypasses(&self, bypasses: usize) {
        self.guard_bypasses
            .store(bypasses as u64, Ordering::Relaxed);
    }

    /// Of `standbys` checked, `ready` have the slot ready to take over.
    pub fn set_standbys(&self, standbys: usize, ready: usize) {
        self.standbys.store(standbys as u64, Ordering::Relaxed);
        self.standby_slots_ready
            .store(ready as u64, Ordering::Relaxed);
    }

    /// The timeline of the server streamed from.
    pub fn set_timeline(&self, timeline: u32) {
        self.timeline.store(u64::from(timeline), Ordering::Relaxed);
    }

    /// Events acknowledged so far.
    pub fn events_published(&self) -> u64 {
        self.events_published.load(Ordering::Relaxed)
    }

    /// Idle flushes so far.
    pub fn idle_flushes_total(&self) -> u64 {
        self.idle_flushes.load(Ordering::Relaxed)
    }

    /// Messages parked so far.
    pub fn parked_total(&self) -> u64 {
        self.parked.load(Ordering::Relaxed)
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let wal_end = self.wal_end.load(Ordering::Relaxed);
        let confirmed = self.confirmed_lsn.load(Ordering::Relaxed);
        let lag = wal_end.saturating_sub(confirmed);
        let newest = self.newest_commit_micros.load(Ordering::Relaxed);
        let age = if newest == 0 {
            0.0
        } else {
            (now_micros() - newest).max(0) as f64 / 1e6
        };
        let oldest = self.oldest_unconfirmed_micros.load(Ordering::Relaxed);
        let waiting = if oldest == 0 {
            0.0
        } else {
            (now_micros() - oldest).max(0) as f64 / 1e6
        };
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        REPLICATION_LAG_BYTES.render(&mut out, lag);
        NEWEST_PUBLISHED_COMMIT_AGE.render(&mut out, format!("{age:.3}"));
        OLDEST_UNCONFIRMED_COMMIT_AGE.render(&mut out, format!("{waiting:.3}"));
        EVENTS_PUBLISHED.render(&mut out, load(&self.events_published));
        PARKED_MESSAGES.render(&mut out, load(&self.parked));
        IDLE_FLUSHES.render(&mut out, load(&self.idle_flushes));
        IN_FLIGHT.render(&mut out, load(&self.in_flight));
        SESSIONS.render(&mut out, load(&self.sessions));
        STREAMING.render(&mut out, load(&self.streaming));
        TRANSACTIONS_ABORTED.render(&mut out, load(&self.transactions_aborted));
        TRANSACTIONS_SKIPPED.render(&mut out, load(&self.transactions_skipped));
        INDEFINITE_OUTCOMES.render(&mut out, load(&self.indefinite_outcomes));
        STANDBY_GATE_WAITING.render(&mut out, load(&self.gate_waiting));
        STANDBY_GATE_MISSING_SLOTS.render(&mut out, load(&self.gate_missing));
        STREAMING_WITHOUT_STANDBY.render(&mut out, load(&self.without_standby));
        GUARD_BYPASSES.render(&mut out, load(&self.guard_bypasses));
        STANDBYS.render(&mut out, load(&self.standbys));
        STANDBY_SLOTS_READY.render(&mut out, load(&self.standby_slots_ready));
        SERVER_TIMELINE.render(&mut out, load(&self.timeline));
        self.topic_partitions.render(&mut out, &TOPIC_PARTITIONS);
        self.commit_to_ack.render(&mut out, &COMMIT_TO_ACK);
        self.transaction_commit
            .render(&mut out, &TRANSACTION_COMMIT);
        self.transaction_messages
            .render(&mut out, &TRANSACTION_MESSAGES);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every declaration above.
    const ALL: [Metric; 23] = [
        REPLICATION_LAG_BYTES,
        NEWEST_PUBLISHED_COMMIT_AGE,
        OLDEST_UNCONFIRMED_COMMIT_AGE,
        EVENTS_PUBLISHED,
        COMMIT_TO_ACK,
        PARKED_MESSAGES,
        IDLE_FLUSHES,
        IN_FLIGHT,
        SESSIONS,
        STREAMING,
        TRANSACTION_COMMIT,
        TRANSACTION_MESSAGES,
        TRANSACTIONS_ABORTED,
        TRANSACTIONS_SKIPPED,
        INDEFINITE_OUTCOMES,
        STANDBY_GATE_WAITING,
        STANDBY_GATE_MISSING_SLOTS,
        STREAMING_WITHOUT_STANDBY,
        GUARD_BYPASSES,
        STANDBYS,
        STANDBY_SLOTS_READY,
        SERVER_TIMELINE,
        TOPIC_PARTITIONS,
    ];

    /// Each declaration shows once under its own help and type, and nothing else shows.
    #[test]
    fn every_declared_metric_is_rendered_once_as_declared() {
        let text = RelayMetrics::default().render();
        for metric in ALL {
            let (name, help, kind) = (metric.name, metric.help, metric.kind.as_str());
            let head = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
            assert_eq!(text.matches(&head).count(), 1, "{name} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), ALL.len(), "{text}");
    }

    #[test]
    fn renders_every_metric_with_its_value() {
        let metrics = RelayMetrics::default();
        metrics.observe_wal_end(1_000);
        metrics.confirmed(400, now_micros());
        metrics.published(7);
        metrics.commit_to_ack(0.003);
        metrics.commit_to_ack(12.0);
        metrics.parked();
        metrics.set_in_flight(3);
        let text = metrics.render();
        assert!(
            text.contains("ra_relay_replication_lag_bytes 600\n"),
            "{text}"
        );
        assert!(text.contains("ra_relay_events_published_total 7\n"));
        assert!(text.contains("ra_relay_parked_messages_total 1\n"));
        assert!(text.contains("ra_relay_in_flight_messages 3\n"));
        assert!(text.contains("ra_relay_commit_to_ack_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("ra_relay_commit_to_ack_seconds_bucket{le=\"30\"} 2\n"));
        assert!(text.contains("ra_relay_commit_to_ack_seconds_count 2\n"));
        assert!(text.contains("# TYPE ra_relay_newest_published_commit_age_seconds gauge"));
        metrics.transaction_committed(150, 0.004);
        let text = metrics.render();
        assert!(
            text.contains("ra_relay_kafka_transaction_messages_bucket{le=\"100\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("ra_relay_kafka_transaction_messages_bucket{le=\"200\"} 1\n"));
        assert!(
            text.contains("ra_relay_kafka_transaction_commit_seconds_bucket{le=\"0.005\"} 1\n")
        );
    }

    /// The age of the oldest unconfirmed commit: 0 when caught up, the oldest waiting one's
    /// age otherwise, however many newer ones come and go.
    #[test]
    fn the_oldest_unconfirmed_commit_age_is_zero_when_caught_up_and_grows_while_one_waits() {
        let age = |metrics: &RelayMetrics| -> f64 {
            let text = metrics.render();
            let line = text
                .lines()
                .find(|line| line.starts_with("ra_relay_oldest_unconfirmed_commit_age_seconds "))
                .unwrap_or_else(|| panic!("no gauge in {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let metrics = RelayMetrics::default();
        assert_eq!(age(&metrics), 0.0, "nothing read yet");
        let now = now_micros();
        metrics.began(now - 90_000_000);
        metrics.began(now - 1_000_000);
        assert!((89.0..120.0).contains(&age(&metrics)), "{}", age(&metrics));
        // The older one confirmed, the newer still waits.
        metrics.still_unconfirmed(Some(now - 1_000_000));
        assert!((0.9..30.0).contains(&age(&metrics)), "{}", age(&metrics));
        metrics.still_unconfirmed(None);
        assert_eq!(age(&metrics), 0.0, "caught up");
    }
}
