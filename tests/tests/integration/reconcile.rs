//! `ledger reconcile` against a real relay, broker and ledger: clean when the topics equal
//! the ledger, and each kind of disagreement found and counted when one is made on purpose
//! (an event the relay never saw, a record the ledger never had, a second copy, a record
//! out of its stream's order). A relay that is stopped makes new events unseen, not lost.
//! Run as an operator runs it, `ledger reconcile` logs no error for the partitions' ends.
//! A relay whose clock is minutes behind the database's makes no event look lost.

use std::collections::HashSet;
use std::time::Duration;

use prost::Message as _;
use ra_ledger::commands::Ledger;
use ra_ledger::reconcile::{self, Options, Report};
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_proto::v1::Envelope;
use ra_ledger_tests::cli;
use ra_ledger_tests::relay::{AGGREGATES, Collector, RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

fn metadata() -> ra_ledger::store::Metadata {
    ra_ledger::store::Metadata {
        actor: "reconcile-test".into(),
        correlation_id: uuid::Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_is_clean_on_equal_topics_and_counts_each_disagreement() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let pool = ra_ledger::db::pool(&database.url, "reconcile-test", 4)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 300, 30, |_| {}).await?;
    let relay = RunningRelay::start(config.clone());
    let options = Options {
        settle: Duration::from_secs(60),
        ..Options::default()
    };
    let clean = reconcile::run(&pool, &config, &options).await?;
    println!("reconcile, equal: {clean:?}");
    assert_eq!(
        (
            clean.events,
            clean.lost,
            clean.phantom,
            clean.duplicates,
            clean.inversions(),
            clean.unseen
        ),
        (301, 0, 0, 0, 0, 0),
        "{clean:?}"
    );
    assert!(clean.clean() && clean.caught_up, "{clean:?}");

    // A record read back from Kafka, to copy and to bend.
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(30), |r| r
                .iter()
                .any(|m| m.topic.ends_with("assignment")))
            .await
    );
    let original = collector
        .received
        .iter()
        .find(|m| m.topic.ends_with("assignment"))
        .cloned()
        .expect("an assignment record");
    let producer: FutureProducer = topics.client_config().create()?;
    let send = async |id: &str, payload: &[u8]| -> anyhow::Result<()> {
        let mut headers = OwnedHeaders::new();
        for (key, value) in &original.headers {
            let value = if key == "id" { id } else { value.as_str() };
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        producer
            .send(
                FutureRecord::to(&original.topic)
                    .key(&original.key)
                    .payload(payload)
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)?;
        Ok(())
    };
    // A second copy of an event.
    send(original.id(), &original.payload).await?;
    // A record of an event the ledger never had, behind its key's later version: a phantom
    // and an inversion by stream version.
    let mut envelope = Envelope::decode(original.payload.as_slice())?;
    let phantom_id = uuid::Uuid::now_v7().to_string();
    envelope.event_id = phantom_id.clone();
    envelope.stream_version = 0;
    send(&phantom_id, &envelope.encode_to_vec()).await?;
    // An event in the ledger that never went through the outbox: the relay confirms past
    // it (its heartbeats move the slot) and it never reaches Kafka.
    let lost_id = uuid::Uuid::now_v7();
    database
        .connect()
        .await?
        .execute(
            "INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, \
             payload, recorded_at, effective_at, actor, correlation_id, hash) \
             VALUES ($1, 'assignment-' || gen_random_uuid() || '-TX', 1, 'AssignmentStarted', 1, \
                     '\\x00', now(), now(), 'test', gen_random_uuid(), '\\x00')",
            &[&lost_id],
        )
        .await?;
    let found = reconcile::run(&pool, &config, &options).await?;
    println!("reconcile, bent: {found:?}");
    assert_eq!(found.lost, 1, "{found:?}");
    assert_eq!(found.lost_sample, vec![lost_id.to_string()]);
    assert_eq!(found.phantom, 1, "{found:?}");
    assert_eq!(found.phantom_sample, vec![phantom_id]);
    assert_eq!((found.duplicates, found.max_copies), (1, 2), "{found:?}");
    assert_eq!(found.version_inversions, 1, "{found:?}");
    assert!(!found.clean());

    // A stopped relay: new events are unseen, not lost; since a time, only they count.
    relay.stop().await?;
    let since = chrono::Utc::now();
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 5, 5, |_| {}).await?;
    let stuck = reconcile::run(
        &pool,
        &config,
        &Options {
            since: Some(since),
            settle: Duration::from_secs(2),
            ..Options::default()
        },
    )
    .await?;
    println!("reconcile, relay stopped: {stuck:?}");
    assert_eq!(
        (
            stuck.events,
            stuck.unseen,
            stuck.lost,
            stuck.phantom,
            stuck.caught_up
        ),
        (5, 5, 0, 0, false),
        "{stuck:?}"
    );
    let _: &Report = &stuck;
    Ok(())
}

/// Issue 50, item 9: `ledger reconcile` reads every partition of the event topics to its end
/// (`enable.partition.eof`), and logged librdkafka's `PartitionEOF` as an ERROR line for
/// each. The `ledger` binary against an exactly-once relay's topics (where a partition ends
/// in a commit marker, which only the end's report passes): clean, exit 0, the ends logged
/// at debug and nothing as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_reconcile_logs_no_error_for_the_ends_it_reads_to() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = RelayConfig {
        delivery: DeliveryMode::ExactlyOnce,
        ..test_config(&database, &mut topics).await?
    };
    let pool = ra_ledger::db::pool(&database.url, "reconcile-test", 4)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 20, 10, |_| {}).await?;
    let relay = RunningRelay::start(config.clone());
    let outcome = cli::ledger(
        &["reconcile"],
        &[
            ("LEDGER_DATABASE_URL", database.url.as_str()),
            ("LEDGER_RELAY_SLOT", config.slot.as_str()),
            (
                "LEDGER_KAFKA_BROKERS",
                config.kafka["bootstrap.servers"].as_str(),
            ),
            ("LEDGER_TOPIC_PREFIX", config.topic_prefix.as_str()),
            ("RUST_LOG", "info,ra_ledger_cdc::infra::partition_end=debug"),
        ],
    )
    .await;
    relay.stop().await?;
    let (code, log) = outcome?;
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("ERROR"), "{log}");
    assert!(log.contains("reached the end of a partition"), "{log}");
    Ok(())
}

/// Issue 50, item 8: a relay whose host clock is 10 minutes behind the database's stamps its
/// records (Kafka's timestamps, which `offsets_for_times` searches) 10 minutes before their
/// commits. Reconcile since a time of the database's clock (as `recorded_at` is) started
/// reading where the stamps reach that time, past every record of the range, and reported
/// each event of it lost. The relay's records, copied to topics of their own (same
/// partitions, keys, headers and values) stamped 10 minutes before their
/// `commit_timestamp`, as that relay's producer would have: since a time between 300 older
/// events and 60 newer ones, and over a window back from the database's now, every event is
/// found and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_clock_ten_minutes_behind_the_databases_loses_nothing() -> anyhow::Result<()> {
    const BEHIND_MS: i64 = 10 * 60 * 1_000;
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let pool = ra_ledger::db::pool(&database.url, "reconcile-test", 4)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    let relay = RunningRelay::start(config.clone());
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 300, 30, |_| {}).await?;
    // Past the slack within which commit times may be out of order: the older records can
    // prove where the range starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let client = database.connect().await?;
    let since: chrono::DateTime<chrono::Utc> = client.query_one("SELECT now()", &[]).await?.get(0);
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 60, 10, |_| {}).await?;
    let expected: HashSet<String> = client
        .query("SELECT event_id::text FROM events", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "the relay did not publish all {} events",
        expected.len()
    );

    let mut behind = TestTopics::new();
    for aggregate in AGGREGATES {
        behind.create(&format!("outbox.event.{aggregate}")).await?;
    }
    let producer: FutureProducer = behind.client_config().create()?;
    let mut records = collector.received.clone();
    records
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    for record in &records {
        let committed = chrono::DateTime::parse_from_rfc3339(&record.headers["commit_timestamp"])?;
        let mut headers = OwnedHeaders::new();
        for (key, value) in &record.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let topic = record.topic.replacen(&topics.prefix, &behind.prefix, 1);
        producer
            .send(
                FutureRecord::to(&topic)
                    .partition(record.partition)
                    .key(&record.key)
                    .payload(&record.payload)
                    .headers(headers)
                    .timestamp(committed.timestamp_millis() - BEHIND_MS),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)?;
    }
    let skewed = RelayConfig {
        topic_prefix: format!("{}.outbox.event.", behind.prefix),
        ..config.clone()
    };
    let since_then = reconcile::run(
        &pool,
        &skewed,
        &Options {
            since: Some(since),
            ..Options::default()
        },
    )
    .await?;
    println!("reconcile since {since}, relay 10 min behind: {since_then:?}");
    assert_eq!(
        (
            since_then.events,
            since_then.records,
            since_then.lost,
            since_then.phantom,
            since_then.unseen
        ),
        (60, 60, 0, 0, 0),
        "{since_then:?}"
    );
    assert!(since_then.caught_up, "{since_then:?}");
    let window = reconcile::run(
        &pool,
        &skewed,
        &Options {
            window: Some(Duration::from_secs(3_600)),
            ..Options::default()
        },
    )
    .await?;
    println!("reconcile over the last hour, relay 10 min behind: {window:?}");
    assert_eq!(
        (
            window.events,
            window.records,
            window.lost,
            window.phantom,
            window.unseen
        ),
        (361, 361, 0, 0, 0),
        "{window:?}"
    );
    relay.stop().await?;
    Ok(())
}
