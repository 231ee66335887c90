//! `ledger reconcile`: whether the live event topics equal the ledger's `events`, as a
//! `read_committed` consumer sees them.
//!
//! # How one run decides
//!
//! 1. **The ledger's side.** In one snapshot: every event of the range (all, or recorded
//!    since a time, or within a window back from the snapshot's time: every time here is
//!    the database's clock, as `recorded_at` is), and `W`, the WAL insert position after
//!    the snapshot: every event the snapshot sees committed before `W`.
//! 2. **The relay's word.** It waits (up to `settle`) until the relay's slot is confirmed
//!    at or past `W`. The relay confirms a transaction only once Kafka acknowledged all of
//!    it (and, exactly once, committed it), so from then on every event of the snapshot
//!    must be readable. Until then a missing event is *unseen*, not lost.
//! 3. **Kafka's side.** Every partition of the event topics, from the range's start to the
//!    end it has once the relay caught up, with `read_committed`. The start is one the
//!    records prove ([`start`]): the records' Kafka timestamps come from the relay's host
//!    clock, which may be minutes off the database's, so they only guess it.
//! 4. **The verdict** ([`verdict`], pure, its rules listed there).
//!    - *lost*: in the snapshot, confirmed, not parked, not on Kafka;
//!    - *phantom*: on Kafka, not in `events` (asked again at the end, so that an event
//!      committed during the run is not one);
//!    - *duplicates*: copies beyond the first of an event id, and the largest number of
//!      copies of one;
//!    - *order*: per key and partition, first copies whose `(commit_lsn, ordinal)`, or whose
//!      stream version, is not after the previous one's;
//!    - *unseen*: in the snapshot, not on Kafka, and the relay had not confirmed past it;
//!    - *parked*: in the snapshot and in `outbox_parked`: Kafka refused them, an operator
//!      decides.
//!
//! # Memory and speed
//!
//! The events of the range are held as 16-byte ids with a copy count (about 40 bytes each
//! with the table's overhead: 40 MB for a million), the keys as their last position: the
//! records themselves are never kept. Records are decoded as they are polled (headers, and
//! the envelope's stream version), so a run goes as fast as the consumer reads.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::infra::entry::Entry;
use ra_ledger_cdc::infra::partition_end::PartitionEndContext;
use ra_ledger_cdc::lsn::parse_lsn;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers as _;
use rdkafka::{Message as _, Offset, TopicPartitionList};
use tokio_postgres::IsolationLevel;

use crate::db::cached;
use crate::domain::{ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE};

mod start;
mod verdict;

use verdict::Kafka;
pub use verdict::{Missing, Report, classify_missing};

/// The aggregate types whose topics carry the ledger's events.
pub const EVENT_AGGREGATES: [&str; 2] = [CONTACT_AGGREGATE, ASSIGNMENT_AGGREGATE];

/// What a run covers.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only events recorded at or after this time, and records from then on (topics whose
    /// retention removed older records can be checked this way).
    pub since: Option<DateTime<Utc>>,
    /// Only events recorded within this long before the run's snapshot, by the database's
    /// clock (`--window`); it wins over `since`.
    pub window: Option<Duration>,
    /// How long to wait for the relay to confirm past the ledger's snapshot.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            since: None,
            window: None,
            settle: Duration::from_secs(60),
        }
    }
}

/// Where the range starts: `window` back from `database_now`, the snapshot's time by the
/// database's clock, else `since`, else nowhere (everything). No host clock is read: a
/// host whose clock is off would move the range, and `recorded_at` is the database's.
/// Pure.
fn range_start(
    since: Option<DateTime<Utc>>,
    window: Option<Duration>,
    database_now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match window.and_then(|window| chrono::TimeDelta::from_std(window).ok()) {
        Some(window) => Some(database_now - window),
        None => since,
    }
}

/// Why a run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The ledger database failed.
    #[error("ledger database: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No connection.
    #[error("cannot connect to the ledger database: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Kafka failed.
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The consumer's settings.
    #[error("{0}")]
    Settings(#[from] ra_ledger_cdc::infra::settings::ConfigError),
    /// A topic has no partitions (missing).
    #[error("topic {0} does not exist; is topic_prefix right?")]
    MissingTopic(String),
}

/// One run: the ledger's events against the relay's live topics.
#[inline(never)]
pub fn run<'a>(
    pool: &'a Pool,
    relay: &'a RelayConfig,
    options: &'a Options,
) -> Entry<'a, Result<Report, ReconcileError>> {
    Box::pin(run_inner(pool, relay, options))
}

async fn run_inner(
    pool: &Pool,
    relay: &RelayConfig,
    options: &Options,
) -> Result<Report, ReconcileError> {
    let started = Instant::now();
    let (mut expected, wal, since) = snapshot(pool, options).await?;
    let caught_up = wait_for_slot(pool, &relay.slot, &wal, options.settle).await?;
    let topics: Vec<String> = EVENT_AGGREGATES
        .iter()
        .map(|aggregate| relay.topic(aggregate))
        .collect();
    let consumer_config = relay.consumer_settings().client_config()?;
    let read = tokio::task::spawn_blocking(move || {
        read_topics(consumer_config, &topics, since, &mut expected).map(|kafka| (kafka, expected))
    })
    .await
    .map_err(|_| ReconcileError::Kafka(KafkaError::Canceled))??;
    let (kafka, expected) = read;
    let parked = among(pool, &verdict::missing(&expected), PARKED).await?;
    let known = among(pool, &kafka.unexpected, PRESENT).await?;
    let mut report = verdict::verdict(&expected, &kafka, &parked, &known, caught_up);
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The events of the range, as ids with no copy seen yet, the WAL insert position after
/// the snapshot that saw them, and where the range starts ([`range_start`]).
async fn snapshot(
    pool: &Pool,
    options: &Options,
) -> Result<(HashMap<u128, u32>, String, Option<DateTime<Utc>>), ReconcileError> {
    let mut client = pool.get().await?;
    let transaction = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    // The first statement takes the snapshot; the position is read after it, and the
    // transaction's time (now(), the database's clock) from which a window goes back.
    let row = transaction
        .query_one(include_str!("../sql/reconcile/snapshot_position.sql"), &[])
        .await?;
    let wal: String = row.get(0);
    let since = range_start(options.since, options.window, row.get(1));
    let aggregates: Vec<&str> = EVENT_AGGREGATES.to_vec();
    let portal = transaction
        .bind(
            include_str!("../sql/reconcile/events.sql"),
            &[&since, &aggregates],
        )
        .await?;
    let mut expected = HashMap::new();
    loop {
        let rows = transaction.query_portal(&portal, 10_000).await?;
        for row in &rows {
            let id: uuid::Uuid = row.get(0);
            expected.insert(id.as_u128(), 0);
        }
        if rows.len() < 10_000 {
            break;
        }
    }
    transaction.commit().await?;
    Ok((expected, wal, since))
}

/// Waits until `slot` is confirmed at or past `wal`; whether it was within `settle`.
async fn wait_for_slot(
    pool: &Pool,
    slot: &str,
    wal: &str,
    settle: Duration,
) -> Result<bool, ReconcileError> {
    let client = pool.get().await?;
    let deadline = Instant::now() + settle;
    loop {
        let passed: bool = client
            .query_opt(
                include_str!("../sql/reconcile/slot_confirmed_past.sql"),
                &[&slot, &wal],
            )
            .await?
            .and_then(|row| row.get(0))
            .unwrap_or(false);
        if passed {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last first copy of a key on its partition.
#[derive(Debug, Clone, Copy, Default)]
struct Last {
    lsn: Option<(u64, u64)>,
    version: Option<i64>,
}

/// Where each partition is read from, and the end (its last stable offset) it is read to;
/// a partition with nothing in the range has no end.
type Range = (TopicPartitionList, HashMap<(String, i32), i64>);

/// Reads every partition of `topics` from `since` (or the beginning) to its end, with
/// `read_committed`. Blocking.
fn read_topics(
    mut config: rdkafka::ClientConfig,
    topics: &[String],
    since: Option<DateTime<Utc>>,
    expected: &mut HashMap<u128, u32>,
) -> Result<Kafka, ReconcileError> {
    // A partition's end is how the read knows it is done, no error (logged at debug).
    let consumer: BaseConsumer<PartitionEndContext> = config
        .set("group.id", "ra-ledger-reconcile")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create_with_context(PartitionEndContext)?;
    // The probes of the range's start read with a consumer of their own: librdkafka tells
    // a consumer of a partition's end once per offset, and the read below needs to hear it.
    let prober = match since {
        Some(_) => Some(config.create_with_context(PartitionEndContext)?),
        None => None,
    };
    let (start, mut ends) = range(&consumer, prober.as_ref(), topics, since)?;
    let mut counter = Counter {
        expected,
        since,
        kafka: Kafka::default(),
        last: HashMap::new(),
        extra: HashMap::new(),
    };
    if ends.is_empty() {
        return Ok(counter.kafka);
    }
    consumer.assign(&start)?;
    let mut idle_since = Instant::now();
    while !ends.is_empty() {
        let message = match consumer.poll(Duration::from_millis(500)) {
            None => {
                if idle_since.elapsed() > Duration::from_secs(60) {
                    return Err(KafkaError::Canceled.into());
                }
                continue;
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // It names the partition, not the topic; and a transaction's commit marker
                // takes an offset no record shows. So ask where each partition stands.
                drop_finished(&consumer.position()?, &mut ends);
                continue;
            }
            Some(Err(error)) => return Err(error.into()),
            Some(Ok(message)) => message,
        };
        idle_since = Instant::now();
        let key = (message.topic().to_owned(), message.partition());
        if ends
            .get(&key)
            .is_some_and(|end| message.offset() + 1 >= *end)
        {
            ends.remove(&key);
        }
        counter.record(&message);
    }
    let Counter {
        mut kafka, extra, ..
    } = counter;
    kafka.unexpected.extend(extra.keys());
    Ok(kafka)
}

/// The range of every partition of `topics`: from the beginning, or from a start proven
/// before `since` ([`start::start_of`], its first guess `offsets_for_times`, its probes
/// read by `prober`), to the last stable offset now.
fn range(
    consumer: &BaseConsumer<PartitionEndContext>,
    prober: Option<&BaseConsumer<PartitionEndContext>>,
    topics: &[String],
    since: Option<DateTime<Utc>>,
) -> Result<Range, ReconcileError> {
    let timeout = Duration::from_secs(30);
    let mut start = TopicPartitionList::new();
    let mut ends: HashMap<(String, i32), i64> = HashMap::new();
    let mut lows: HashMap<(String, i32), i64> = HashMap::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            return Err(ReconcileError::MissingTopic(topic.clone()));
        }
        for partition in partitions {
            // With read_committed, the end is the last stable offset.
            let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
            if high > low {
                ends.insert((topic.clone(), partition), high);
            }
            lows.insert((topic.clone(), partition), low);
            let offset = match since {
                Some(time) => Offset::Offset(time.timestamp_millis()),
                None => Offset::Beginning,
            };
            start.add_partition_offset(topic, partition, offset)?;
        }
    }
    if let (Some(since), Some(prober)) = (since, prober) {
        let guesses = consumer.offsets_for_times(start, timeout)?;
        start = start::proven(prober, &guesses, &lows, &ends, since)?;
    }
    // A partition whose start is at or past its end (nothing since then) is done.
    for element in start.elements() {
        let key = (element.topic().to_owned(), element.partition());
        match element.offset() {
            Offset::Offset(offset) if ends.get(&key).is_some_and(|end| offset >= *end) => {
                ends.remove(&key);
            }
            Offset::End => {
                ends.remove(&key);
            }
            _ => {}
        }
    }
    Ok((start, ends))
}

/// Forgets the partitions `positions` says were read to their end.
fn drop_finished(positions: &TopicPartitionList, ends: &mut HashMap<(String, i32), i64>) {
    for element in positions.elements() {
        if let Offset::Offset(offset) = element.offset() {
            let key = (element.topic().to_owned(), element.partition());
            if ends.get(&key).is_some_and(|end| offset >= *end) {
                ends.remove(&key);
            }
        }
    }
}

/// Counts records as they are read.
struct Counter<'a> {
    /// The ledger's events, with the copies seen so far.
    expected: &'a mut HashMap<u128, u32>,
    /// Where the range starts: a record of an event not expected counts only from there
    /// ([`start::of_range`]).
    since: Option<DateTime<Utc>>,
    kafka: Kafka,
    /// Per partition and topic-and-key, the last first copy.
    last: HashMap<(i32, Vec<u8>), Last>,
    /// Copies seen of ids the ledger's range does not have.
    extra: HashMap<u128, u32>,
}

impl Counter<'_> {
    fn record(&mut self, message: &rdkafka::message::BorrowedMessage<'_>) {
        let headers = message.headers();
        let header = |name: &str| -> Option<String> {
            headers.and_then(|headers| {
                headers
                    .iter()
                    .find(|header| header.key == name)
                    .and_then(|header| header.value)
                    .map(|value| String::from_utf8_lossy(value).into_owned())
            })
        };
        let id = header("id")
            .and_then(|id| uuid::Uuid::parse_str(&id).ok())
            .map(|id| id.as_u128());
        // The read starts before the range (see `start`): what it meets there of events the
        // range does not expect is not this run's to judge.
        if !id.is_some_and(|id| self.expected.contains_key(&id))
            && !start::of_range(
                self.since,
                header(ra_ledger_cdc::publish::header::COMMIT_TIMESTAMP).as_deref(),
                message.timestamp().to_millis(),
            )
        {
            return;
        }
        self.kafka.records += 1;
        let Some(id) = id else {
            // A record without an event id is no event of the ledger's.
            self.kafka.unexpected.push(0);
            return;
        };
        let copies = match self.expected.get_mut(&id) {
            Some(copies) => copies,
            None => self.extra.entry(id).or_insert(0),
        };
        *copies += 1;
        self.kafka.max_copies = self.kafka.max_copies.max(*copies);
        if *copies > 1 {
            self.kafka.duplicates += 1;
            return;
        }
        // A first copy: in order after the previous first copy of its key?
        let lsn = header("commit_lsn")
            .and_then(|lsn| parse_lsn(&lsn))
            .zip(header("ordinal").and_then(|ordinal| ordinal.parse().ok()));
        let version = message
            .payload()
            .and_then(|payload| ra_ledger_cdc::consumer::decode(payload).ok())
            .map(|envelope| envelope.stream_version);
        let mut topic_key = message.topic().as_bytes().to_vec();
        topic_key.push(0);
        topic_key.extend_from_slice(message.key().unwrap_or_default());
        let entry = self
            .last
            .entry((message.partition(), topic_key))
            .or_default();
        if let (Some(previous), Some(now)) = (entry.lsn, lsn)
            && previous >= now
        {
            self.kafka.lsn_inversions += 1;
        }
        if let (Some(previous), Some(now)) = (entry.version, version)
            && previous >= now
        {
            self.kafka.version_inversions += 1;
        }
        if lsn.is_some() {
            entry.lsn = lsn;
        }
        if version.is_some() {
            entry.version = version;
        }
    }
}

/// The missing events that are parked: [`among`] them, those in `outbox_parked`.
const PARKED: &str = include_str!("../sql/reconcile/parked_among.sql");

/// The unexpected ids that the ledger has: [`among`] them, those in `events`.
const PRESENT: &str = include_str!("../sql/reconcile/present_among.sql");

/// Which of `ids` `query` (one of [`PARKED`], [`PRESENT`]) finds, asked 10,000 at a time.
async fn among(pool: &Pool, ids: &[u128], query: &str) -> Result<HashSet<u128>, ReconcileError> {
    let client = pool.get().await?;
    let mut found = HashSet::new();
    for chunk in ids.chunks(10_000) {
        let uuids: Vec<uuid::Uuid> = chunk.iter().map(|id| uuid::Uuid::from_u128(*id)).collect();
        for row in cached::query(&client, query, &[&uuids]).await? {
            let id: uuid::Uuid = row.get(0);
            found.insert(id.as_u128());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_goes_back_from_the_databases_time_and_wins_over_since() {
        let database_now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let since = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let hour = Some(Duration::from_secs(3_600));
        assert_eq!(
            range_start(Some(since), hour, database_now),
            Some(database_now - chrono::TimeDelta::hours(1))
        );
        assert_eq!(
            range_start(None, hour, database_now),
            range_start(Some(since), hour, database_now)
        );
        assert_eq!(range_start(Some(since), None, database_now), Some(since));
        assert_eq!(range_start(None, None, database_now), None);
    }
}
