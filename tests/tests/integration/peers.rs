//! A consumer written for Debezium's Outbox Event Router output reads the relay's topics
//! with no change, and reads Debezium's own (Kafka Connect with Debezium 3.6.1, run by
//! `deploy/peers connect`) to the same records (docs/peers.md).

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ra_ledger_cdc::consumer::event_router;
use ra_ledger_cdc::infra::pg::ReplicationTarget;
use ra_ledger_testing::debezium::{self, ConnectSetup};
use ra_ledger_tests::relay::{RunningRelay, subscribe, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics, random_suffix};
use rdkafka::consumer::{Consumer as _, StreamConsumer};

/// What a consumer of Debezium's topics takes from a record: key, `id` header, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DebeziumRecord {
    key: String,
    id: String,
    payload: Vec<u8>,
}

/// The consumer under test, written against Debezium's Event Router output only: it reads
/// `count` records and keeps what such a consumer keeps. Anything it cannot read fails.
async fn read_as_debezium_consumer(
    consumer: &StreamConsumer,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<DebeziumRecord>> {
    let deadline = Instant::now() + timeout;
    let mut records = Vec::with_capacity(count);
    while records.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, consumer.recv())
            .await
            .map_err(|_| {
                anyhow::anyhow!("{} of {count} records within {timeout:?}", records.len())
            })??;
        let event = event_router::read(&message)?;
        records.push(DebeziumRecord {
            key: event.key.to_owned(),
            id: event.id.to_owned(),
            payload: event.payload.to_vec(),
        });
    }
    Ok(records)
}

/// Three outbox rows, as the records a Debezium consumer should read for them, by event id.
async fn write_rows(
    client: &tokio_postgres::Client,
) -> anyhow::Result<HashMap<String, DebeziumRecord>> {
    // Payloads that are not text: a zero byte, bytes above 0x7f, an empty one. Debezium's
    // ByteArrayConverter passes them as they are; so must the relay.
    let rows = client
        .query(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'contact', 'c-1', 'ContactCreated', '\\x00ff0a'::bytea), \
                    (gen_random_uuid(), 'assignment', 'business-42', 'AssignmentStarted', '\\x0a2408011220'::bytea), \
                    (gen_random_uuid(), 'contact', 'c-1', 'ContactRenamed', ''::bytea) \
             RETURNING event_id::text, aggregate_id, payload",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let id: String = row.get(0);
            let record = DebeziumRecord {
                key: row.get(1),
                id: id.clone(),
                payload: row.get(2),
            };
            (id, record)
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_debeziums_event_router_reads_the_relays_topics() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let written = write_rows(&client).await?;
    let relay = RunningRelay::start(config);
    let consumer = subscribe(&topics, &topics.brokers, "debezium-shaped-consumer")?;
    let records =
        read_as_debezium_consumer(&consumer, written.len(), Duration::from_secs(60)).await;
    relay.stop().await?;
    let records = records?;
    let read: HashMap<String, DebeziumRecord> = records
        .into_iter()
        .map(|record| (record.id.clone(), record))
        .collect();
    assert_eq!(read, written);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_consumer_reads_debeziums_own_topics_to_the_same_records() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let names = [
        topics.create("debezium.contact").await?,
        topics.create("debezium.assignment").await?,
    ];
    let client = database.connect().await?;
    let slot = format!("debezium_{}", random_suffix());
    client
        .query_one(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    debezium::create_publication(&client, "debezium_outbox").await?;
    let written = write_rows(&client).await?;
    let dir = ra_ledger_tests::stack::run_dir().join(format!("debezium-{}", random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let target = ReplicationTarget::of(&ra_ledger_cdc::infra::pg::config(&database.url, "test")?);
    let prefix = format!("{}.debezium.", topics.prefix);
    let (worker, connector) = ConnectSetup {
        database: &target,
        brokers: &topics.brokers,
        name: "debezium_test",
        slot: &slot,
        publication: "debezium_outbox",
        topic_prefix: &prefix,
        dir: &dir,
        rest_port: ra_ledger_tests::process::free_port()?,
    }
    .write()?;
    let log = std::fs::File::create(dir.join("connect.log"))?;
    let mut connect = tokio::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/peers"),
    )
    .arg("connect")
    .args([&worker, &connector])
    .stdin(Stdio::null())
    .stdout(log.try_clone()?)
    .stderr(log)
    .kill_on_drop(true)
    .spawn()?;
    let consumer: StreamConsumer = topics
        .client_config()
        .set("group.id", format!("debezium-{}", random_suffix()))
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&names.iter().map(String::as_str).collect::<Vec<_>>())?;
    // A JVM start, the worker's, the connector's: seconds on a busy machine.
    let records =
        read_as_debezium_consumer(&consumer, written.len(), Duration::from_secs(180)).await;
    connect.start_kill()?;
    connect.wait().await?;
    let records = records
        .map_err(|error| anyhow::anyhow!("{error}; see {}", dir.join("connect.log").display()))?;
    let read: HashMap<String, DebeziumRecord> = records
        .into_iter()
        .map(|record| (record.id.clone(), record))
        .collect();
    assert_eq!(read, written);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
