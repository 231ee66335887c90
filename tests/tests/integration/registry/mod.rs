//! Topics framed for schema registries (`value_formats` set to `confluent_protobuf`), against
//! the run's real Apicurio Registry ([`ra_ledger_tests::registry`]) and real broker: what the
//! relay publishes and registers in each delivery mode, beside a topic left in the old format
//! that a Debezium-style consumer reads unchanged ([`framing`]); the relay refusing a registry
//! that is down or refuses its schema, and publishing on when the registry goes away after
//! the start ([`framing`]); consumers no one here wrote reading every record through the
//! registry: confluent-kafka's `ProtobufDeserializer` in Python ([`python`]), Apicurio's own
//! Kafka deserializer on the JVM ([`jvm`]) and franz-go's `sr.Serde` in Go
//! ([`go_consumer`]); a replay framed as its live topic ([`replay`]); the schema gate run by
//! the registry ([`gate`]); a registry behind basic auth and TLS, registered from CI and read
//! by a relay with read-only credentials ([`secured`]); and the ids the relay recorded,
//! refused when a lost registry answers others ([`ids`]).

mod framing;
mod gate;
mod go_consumer;
mod ids;
mod jvm;
mod python;
mod replay;
mod secured;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::registry::SchemaRegistry;
use ra_ledger_cdc::value_format::ValueFormat;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::registry::registry;
use ra_ledger_tests::relay::{Collector, RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::OwnedMessage;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;
use uuid::Uuid;

/// A relay config for one test, in `delivery`, with the topics of `framed` framed for the
/// run's registry (the others left as they are, protobuf).
async fn framed_config(
    database: &TestDatabase,
    topics: &mut TestTopics,
    delivery: DeliveryMode,
    framed: &[&str],
) -> anyhow::Result<RelayConfig> {
    let mut config = test_config(database, topics).await?;
    config.delivery = delivery;
    config.schema_registry_url = Some(registry().ccompat_url());
    config.value_formats = framed
        .iter()
        .map(|aggregate| {
            (
                (*aggregate).to_owned(),
                ValueFormat::ConfluentProtobuf { schema_id: None },
            )
        })
        .collect();
    Ok(config)
}

/// Runs `command` (a consumer, or a step of its build), failing with its output when it fails.
fn run(command: &mut std::process::Command) -> anyhow::Result<Vec<u8>> {
    let output = command
        .output()
        .map_err(|error| anyhow::anyhow!("{command:?} could not start: {error}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output.stdout)
}

/// A client of the run's registry.
fn registry_client() -> SchemaRegistry {
    SchemaRegistry::new(&registry().ccompat_url()).expect("the registry's URL")
}

/// Writes through the API: a primary contact in Texas, `businesses` businesses assigned to
/// it, every third assignment ended.
async fn write_assignments(api: &TestApi, businesses: usize) -> anyhow::Result<()> {
    api.contact("TX", "Lone Star Agents").await;
    assign_businesses(api, businesses).await
}

/// `businesses` businesses assigned to Texas's primary contact, every third ended.
async fn assign_businesses(api: &TestApi, businesses: usize) -> anyhow::Result<()> {
    for number in 0..businesses {
        let assignment = api.assign(Uuid::now_v7()).await;
        if number % 3 == 2 {
            let ended = api
                .post(&format!("/v1/assignments/{assignment}/end"), json!({}))
                .await;
            anyhow::ensure!(ended.status.is_success(), "{:?}", ended.body);
        }
    }
    Ok(())
}

/// A framed assignment topic, published by a relay in one delivery mode and stopped, each
/// of its events seen on Kafka: what a consumer no one here wrote is then pointed at.
struct Published {
    _database: TestDatabase,
    topics: TestTopics,
    /// The topic's name.
    topic: String,
    /// To ask the ledger.
    client: tokio_postgres::Client,
    /// The ids of the assignment events the ledger stored.
    event_ids: BTreeSet<String>,
}

/// Runs a relay in `delivery` with the assignment topic framed, writes `businesses`
/// assignments through the API, waits until each event is on Kafka and stops the relay.
async fn published_assignments(
    delivery: DeliveryMode,
    businesses: usize,
) -> anyhow::Result<Published> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let config = framed_config(&database, &mut topics, delivery, &["assignment"]).await?;
    let relay = RunningRelay::start(config.clone());
    write_assignments(&api, businesses).await?;
    let client = database.connect().await?;
    let expected: HashSet<String> = stored_payloads(&client, "assignment")
        .await?
        .into_keys()
        .collect();
    let mut collector = Collector::new(&topics)?;
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "not every assignment event reached Kafka"
    );
    relay.stop().await?;
    Ok(Published {
        topic: config.topic("assignment"),
        _database: database,
        topics,
        client,
        event_ids: expected.into_iter().collect(),
    })
}

/// What a consumer of [`Published`] reported: the records it decoded, their event ids and
/// the fold of their events, (business, jurisdiction, assignment, contact) of every open
/// assignment.
#[derive(Debug, serde::Deserialize)]
struct Folded {
    records: usize,
    event_ids: BTreeSet<String>,
    current: BTreeSet<[String; 4]>,
}

/// What the consumers that read the framing themselves print (registry_consumer.py, the Go
/// consumer): the fold of what they decoded, and what the framing of each record said.
#[derive(Debug, serde::Deserialize)]
struct FramedRead {
    #[serde(flatten)]
    folded: Folded,
    schema_ids: Vec<u32>,
    index_bytes: Vec<u8>,
}

impl Published {
    /// Checks that `consumer` decoded every event and that its fold is the ledger's answer.
    async fn check(&self, consumer: &str, folded: &Folded) -> anyhow::Result<()> {
        assert!(
            folded.records >= self.event_ids.len(),
            "{consumer}: {} records",
            folded.records
        );
        assert_eq!(folded.event_ids, self.event_ids, "{consumer}");
        let ledger = ledger_current(&self.client).await?;
        assert!(!ledger.is_empty());
        assert_eq!(
            folded.current, ledger,
            "{consumer}: the fold differs from the ledger's current assignments"
        );
        eprintln!(
            "{consumer}: {} records, {} events, {} current assignments, as the ledger has them",
            folded.records,
            folded.event_ids.len(),
            folded.current.len()
        );
        Ok(())
    }
}

/// Each event's stored payload, by event id, of the streams of `aggregate`.
async fn stored_payloads(
    client: &tokio_postgres::Client,
    aggregate: &str,
) -> anyhow::Result<HashMap<String, Vec<u8>>> {
    Ok(client
        .query(
            "SELECT event_id::text, payload FROM events WHERE split_part(stream, '-', 1) = $1",
            &[&aggregate],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// The ledger's answer to "who serves each business where": (business, jurisdiction,
/// assignment, contact) of every open assignment.
async fn ledger_current(client: &tokio_postgres::Client) -> anyhow::Result<BTreeSet<[String; 4]>> {
    Ok(client
        .query(
            "SELECT business_id::text, jurisdiction, assignment_id::text, contact_id::text \
             FROM assignments WHERE ended_at IS NULL",
            &[],
        )
        .await?
        .iter()
        .map(|row| [row.get(0), row.get(1), row.get(2), row.get(3)])
        .collect())
}

/// Every record of `topic`, each partition read from the beginning to the end offset it had
/// when the read began, committed records only.
fn read_topic(topics: &TestTopics, topic: &str) -> anyhow::Result<Vec<OwnedMessage>> {
    let consumer: BaseConsumer = topics
        .client_config()
        .set("group.id", format!("registry-{}", Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let mut assignment = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
        let (low, high) = consumer.fetch_watermarks(topic, partition.id(), timeout)?;
        if high > low {
            assignment.add_partition_offset(topic, partition.id(), Offset::Beginning)?;
            ends.insert(partition.id(), high);
        }
    }
    consumer.assign(&assignment)?;
    let mut messages = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{topic}: partitions {ends:?} not read to their end"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            messages.push(message?.detach());
        }
        // The position, not the last offset seen: under exactly once a partition ends on a
        // transaction marker, which is never delivered.
        let positions = consumer.position()?;
        ends.retain(|&partition, &mut end| {
            !matches!(
                positions.find_partition(topic, partition).map(|p| p.offset()),
                Some(Offset::Offset(at)) if at >= end
            )
        });
    }
    Ok(messages)
}
