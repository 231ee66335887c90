//! Running the relay in tests, and reading back what reached Kafka.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::metrics::RelayMetrics;
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers;

use crate::{Background, TestDatabase, TestTopics};

/// Aggregate types the relay tests publish: the ledger's.
pub use ra_ledger::replay::AGGREGATES;

/// A relay configuration for one test: its own slot, its topics (on their broker), fast
/// heartbeats.
pub async fn test_config(
    database: &TestDatabase,
    topics: &mut TestTopics,
) -> anyhow::Result<RelayConfig> {
    for aggregate in AGGREGATES {
        topics.create(&format!("outbox.event.{aggregate}")).await?;
    }
    // The exactly-once relay's position topic: one partition, as `ledger topics create`
    // makes it.
    topics
        .create_with_partitions(&ra_ledger_cdc::config::position_topic("outbox.event."), 1)
        .await?;
    // The slot exists before anything is written, as `ledger migrate` arranges in
    // production: rows committed before a slot exists are never in it.
    let slot = format!("relay_{}", crate::random_suffix());
    database
        .connect()
        .await?
        .query_one(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    Ok(RelayConfig {
        database_url: database.url.as_str().into(),
        slot,
        topic_prefix: format!("{}.outbox.event.", topics.prefix),
        kafka: topics
            .client
            .clone()
            .into_iter()
            .chain([("bootstrap.servers".into(), topics.brokers.clone())])
            .collect(),
        heartbeat_interval_ms: 200,
        status_interval_ms: 100,
        metrics_listen: None,
        shutdown_grace_ms: 10_000,
        reconnect_backoff_max_ms: 1_000,
        ..RelayConfig::default()
    })
}

/// A broker of its own (for tests that kill or freeze it), a fresh database, the test's
/// topics on that broker and a relay configuration between them.
pub async fn on_private_broker() -> anyhow::Result<(
    crate::broker::BrokerServer,
    TestDatabase,
    TestTopics,
    RelayConfig,
)> {
    let broker = crate::stack::private_broker()?;
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::on(broker.brokers());
    let config = test_config(&database, &mut topics).await?;
    Ok((broker, database, topics, config))
}

/// A relay running in this process.
pub type RunningRelay = Background<RelayMetrics, ra_ledger_cdc::relay::RelayError>;

impl RunningRelay {
    /// Starts the relay.
    pub fn start(config: RelayConfig) -> Self {
        Self::spawn(|metrics, shutdown| ra_ledger_cdc::relay::run(config, metrics, shutdown))
    }

    /// The relay's error once it stopped by itself within `timeout` (a refusal); an error
    /// when it went on, stopped cleanly or panicked.
    pub async fn refusal(
        self,
        timeout: Duration,
    ) -> anyhow::Result<ra_ledger_cdc::relay::RelayError> {
        match tokio::time::timeout(timeout, self.task).await {
            Ok(Ok(Err(error))) => Ok(error),
            Ok(Ok(Ok(()))) => anyhow::bail!("the relay stopped without an error"),
            Ok(Err(panic)) => anyhow::bail!("the relay panicked: {panic}"),
            Err(_) => {
                self.shutdown.cancel();
                anyhow::bail!("the relay went on for {timeout:?}: it refused nothing")
            }
        }
    }
}

/// The refusal of a relay started with `config` once the schema registry answered: the
/// relay stops on any registry error and a restart (systemd's) tries again, so a registry
/// that did not answer in time (a cold JVM's first write on a loaded machine can take
/// longer than the client's timeout) is started again as that restart would, up to five
/// times. A refusal that is not transient ends the loop at once, as it ends the relay.
pub async fn refusal_once_the_registry_answers(
    config: &RelayConfig,
    timeout: Duration,
) -> anyhow::Result<ra_ledger_cdc::relay::RelayError> {
    let mut starts = 0;
    loop {
        starts += 1;
        let error = RunningRelay::start(config.clone()).refusal(timeout).await?;
        match &error {
            ra_ledger_cdc::relay::RelayError::Registry(registry)
                if registry.is_transient() && starts < 5 =>
            {
                eprintln!("start {starts}: the registry did not answer ({error}); again");
            }
            _ => return Ok(error),
        }
    }
}

/// One message as a consumer saw it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key.
    pub key: String,
    /// Value.
    pub payload: Vec<u8>,
    /// Headers.
    pub headers: HashMap<String, String>,
    /// When the consumer got it (this machine's clock, as the relay's `commit_timestamp`).
    pub received_at: chrono::DateTime<chrono::Utc>,
}

impl<M: rdkafka::Message> From<&M> for Received {
    fn from(message: &M) -> Self {
        let text =
            |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
        Self {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: text(message.key()),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers: message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| (h.key.to_owned(), text(h.value)))
                        .collect()
                })
                .unwrap_or_default(),
            received_at: chrono::Utc::now(),
        }
    }
}

impl Received {
    /// The `commit_timestamp` header: when its PostgreSQL transaction committed.
    pub fn committed_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let text = self.headers.get("commit_timestamp")?;
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|time| time.with_timezone(&chrono::Utc))
    }

    /// The `id` header: the event id.
    pub fn id(&self) -> &str {
        self.headers
            .get("id")
            .map(String::as_str)
            .unwrap_or_default()
    }
}

/// A member of consumer group `group` on the test's outbox topics, from the earliest offset
/// where the group has none, committing only when told.
pub fn subscribe(
    topics: &TestTopics,
    brokers: &str,
    group: &str,
) -> anyhow::Result<StreamConsumer> {
    subscribe_with(topics, brokers, group, Isolation::ReadCommitted)
}

/// What a test consumer sees of Kafka transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Only committed records (what the ledger's consumers use).
    ReadCommitted,
    /// Every record, aborted and open transactions' included.
    ReadUncommitted,
}

impl Isolation {
    /// librdkafka's `isolation.level`.
    pub fn setting(self) -> &'static str {
        match self {
            Self::ReadCommitted => "read_committed",
            Self::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// [`subscribe`] with an explicit isolation level.
pub fn subscribe_with(
    topics: &TestTopics,
    brokers: &str,
    group: &str,
    isolation: Isolation,
) -> anyhow::Result<StreamConsumer> {
    let consumer: StreamConsumer = topics
        .client_config()
        .set("isolation.level", isolation.setting())
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        // Back within a second of a broker's restart, as the relay is: librdkafka's 10 s
        // ceiling left the tests' readers idle long after a killed broker answered again.
        .set("reconnect.backoff.max.ms", "1000")
        .create()?;
    let names: Vec<String> = AGGREGATES
        .iter()
        .map(|a| format!("{}.outbox.event.{a}", topics.prefix))
        .collect();
    consumer.subscribe(&names.iter().map(String::as_str).collect::<Vec<_>>())?;
    Ok(consumer)
}

/// Reads every message of `topics` from the beginning.
///
/// A record read a second time at the same (topic, partition, offset) is left out: it is
/// the consumer reading again, not the relay publishing again. That happens when a broker
/// killed with -9 comes back: the collector's group rejoins with no committed offset and
/// starts again from the earliest. A record the relay sent twice has two offsets and counts
/// twice.
pub struct Collector {
    consumer: StreamConsumer,
    /// Everything received so far, in arrival order.
    pub received: Vec<Received>,
    /// Where each received record was, to tell a re-read from a second record.
    read: HashSet<(String, i32, i64)>,
    /// Records read again at an offset already received.
    pub rereads: u64,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collector({} received)", self.received.len())
    }
}

impl Collector {
    /// Subscribes to the test's outbox topics.
    pub fn new(topics: &TestTopics) -> anyhow::Result<Self> {
        Self::on(topics, &topics.brokers)
    }

    /// Subscribes to the test's outbox topics on a given broker.
    pub fn on(topics: &TestTopics, brokers: &str) -> anyhow::Result<Self> {
        Self::with_isolation(topics, brokers, Isolation::ReadCommitted)
    }

    /// Subscribes to the test's outbox topics on a given broker, reading at `isolation`.
    pub fn with_isolation(
        topics: &TestTopics,
        brokers: &str,
        isolation: Isolation,
    ) -> anyhow::Result<Self> {
        let group = format!("collector-{}", crate::random_suffix());
        Ok(Self {
            consumer: subscribe_with(topics, brokers, &group, isolation)?,
            received: Vec::new(),
            read: HashSet::new(),
            rereads: 0,
        })
    }

    /// Receives until `done(received)` holds or `timeout` passes; returns whether it held.
    pub async fn until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&[Received]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while !done(&self.received) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match tokio::time::timeout(left.min(Duration::from_millis(500)), self.consumer.recv())
                .await
            {
                Ok(Ok(message)) => {
                    let at = (
                        message.topic().to_owned(),
                        message.partition(),
                        message.offset(),
                    );
                    if self.read.insert(at) {
                        self.received.push(Received::from(&message));
                    } else {
                        self.rereads += 1;
                    }
                }
                Ok(Err(error)) => eprintln!("consumer error (continuing): {error}"),
                Err(_) => {}
            }
        }
        true
    }

    /// Receives until every id of `expected` arrived or `timeout` passes; returns whether
    /// all did. Checks each message once, so it stays cheap for large sets.
    pub async fn until_all(&mut self, timeout: Duration, expected: &HashSet<String>) -> bool {
        let mut missing: HashSet<String> = expected.clone();
        let mut checked = 0;
        self.until(timeout, |received| {
            for message in &received[checked..] {
                missing.remove(message.id());
            }
            checked = received.len();
            missing.is_empty()
        })
        .await
    }

    /// Distinct event ids received.
    pub fn distinct_ids(&self) -> HashSet<String> {
        self.received.iter().map(|r| r.id().to_owned()).collect()
    }
}

/// A relay whose Kafka refuses anything above 100,000 bytes for good, on a backlog of one
/// event of 300,000 bytes (which it parks) followed by `after.0` transactions of `after.1`
/// small events. Returns the relay's config, the big event's id and the small ones'.
pub async fn oversized_backlog(
    database: &TestDatabase,
    topics: &mut TestTopics,
    client: &tokio_postgres::Client,
    after: (usize, usize),
) -> anyhow::Result<(RelayConfig, String, Vec<String>)> {
    let mut config = test_config(database, topics).await?;
    config
        .kafka
        .insert("message.max.bytes".into(), "100000".into());
    let big = insert_backlog(client, 1, 1, 300_000).await?;
    let after = insert_backlog(client, after.0, after.1, 100).await?;
    Ok((config, big[0].clone(), after))
}

/// Inserts `transactions` transactions of `per_transaction` outbox rows each, alternating
/// aggregate types, in one server-side statement per transaction. Returns the event ids.
pub async fn insert_backlog(
    client: &tokio_postgres::Client,
    transactions: usize,
    per_transaction: usize,
    payload_bytes: usize,
) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::with_capacity(transactions * per_transaction);
    for _ in 0..transactions {
        let rows = client
            .query(
                "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                 SELECT gen_random_uuid(), CASE WHEN n % 2 = 0 THEN 'contact' ELSE 'assignment' END, \
                        'agg-' || (n % 17), 'TestEvent', convert_to(repeat('x', $2), 'UTF8') \
                 FROM generate_series(1, $1) n RETURNING event_id::text",
                &[&(per_transaction as i32), &(payload_bytes as i32)],
            )
            .await?;
        ids.extend(rows.iter().map(|row| row.get::<_, String>(0)));
    }
    Ok(ids)
}

/// Writes `bursts` bursts of [`insert_backlog`] on its own connection, `pause` apart, in a
/// task of its own; the task returns every event id it wrote.
pub async fn spawn_paced_writer(
    database: &crate::TestDatabase,
    bursts: usize,
    transactions: usize,
    per_transaction: usize,
    pause: std::time::Duration,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Vec<String>>>> {
    let client = database.connect().await?;
    Ok(tokio::spawn(async move {
        let mut ids = Vec::new();
        for _ in 0..bursts {
            ids.extend(insert_backlog(&client, transactions, per_transaction, 64).await?);
            tokio::time::sleep(pause).await;
        }
        Ok(ids)
    }))
}

/// Writes bursts of [`insert_backlog`] on its own connection, `pause` apart, in a task of
/// its own, until [`OpenEndedWriter::finish`]: for a test whose faults must all land while
/// events are still being written, however long each recovery takes (a writer of a fixed
/// number of bursts can finish before the last fault, which then proves nothing).
#[derive(Debug)]
pub struct OpenEndedWriter {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<Vec<String>>>,
}

impl OpenEndedWriter {
    /// Starts writing bursts of `transactions` transactions of `per_transaction` rows.
    pub async fn spawn(
        database: &crate::TestDatabase,
        transactions: usize,
        per_transaction: usize,
        pause: Duration,
    ) -> anyhow::Result<Self> {
        let client = database.connect().await?;
        let stop = tokio_util::sync::CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut ids = Vec::new();
            while !token.is_cancelled() {
                ids.extend(insert_backlog(&client, transactions, per_transaction, 64).await?);
                tokio::time::sleep(pause).await;
            }
            Ok(ids)
        });
        Ok(Self { stop, task })
    }

    /// Stops after the burst under way; every event id it wrote.
    pub async fn finish(self) -> anyhow::Result<Vec<String>> {
        self.stop.cancel();
        self.task.await?
    }
}

/// Drops `slot` once no walsender holds it: a relay that stopped has closed its replication
/// connection, but the server's walsender lets the slot go a moment later, and a drop before
/// then fails with "is active for PID".
pub async fn drop_slot_once_released(
    client: &tokio_postgres::Client,
    slot: &str,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let active: bool = client
            .query_one(
                "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots \
                  WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .get(0);
        if !active {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "slot {slot} still held 30 s after its relay stopped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// An LSN header (`X/Y`) as a number.
///
/// # Panics
/// When `text` is not an LSN.
pub fn parse_lsn(text: &str) -> u64 {
    let (high, low) = text.split_once('/').expect("an LSN is X/Y");
    (u64::from_str_radix(high, 16).expect("hex") << 32) | u64::from_str_radix(low, 16).expect("hex")
}

/// Messages that reached a partition out of the ledger's order for their key.
///
/// Reads each partition in offset order, keeps the first copy of every event id (the relay
/// sends again what the slot had not confirmed, so later copies are expected), and counts
/// each first copy whose (commit LSN, ordinal) is not after the previous one of its key.
/// A record without a commit LSN (published by `ledger relay recover`, from a snapshot that
/// does not know it) is left out: it orders nothing.
pub fn order_violations(received: &[Received]) -> usize {
    let mut in_log_order: Vec<&Received> = received.iter().collect();
    in_log_order
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    let mut seen = HashSet::new();
    let mut last: HashMap<(&str, &str), (u64, u64)> = HashMap::new();
    let mut violations = 0;
    for message in in_log_order {
        if !message.headers.contains_key("commit_lsn") || !seen.insert(message.id()) {
            continue;
        }
        let position = (
            parse_lsn(&message.headers["commit_lsn"]),
            message.headers["ordinal"]
                .parse()
                .expect("a numeric ordinal"),
        );
        let key = (message.topic.as_str(), message.key.as_str());
        if let Some(previous) = last.insert(key, position)
            && previous >= position
        {
            violations += 1;
        }
    }
    violations
}

/// What a consumer got, against what the outbox holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Expected event ids that never arrived.
    pub lost: usize,
    /// Copies received beyond the first of each event id.
    pub duplicates: usize,
    /// First copies out of the ledger's order for their key ([`order_violations`]).
    pub order_violations: usize,
}

impl Tally {
    /// Counts `received` against `expected` and prints the counts under `name`, so that a
    /// test's output shows them even when its assertions pass.
    pub fn of(name: &str, expected: &HashSet<String>, received: &[Received]) -> Self {
        let distinct: HashSet<&str> = received.iter().map(Received::id).collect();
        let tally = Self {
            lost: expected
                .iter()
                .filter(|id| !distinct.contains(id.as_str()))
                .count(),
            duplicates: received.len() - distinct.len(),
            order_violations: order_violations(received),
        };
        println!(
            "{name}: {} events expected, {} received, {} lost, {} duplicates, {} order violations",
            expected.len(),
            received.len(),
            tally.lost,
            tally.duplicates,
            tally.order_violations
        );
        tally
    }
}
