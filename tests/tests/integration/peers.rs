//! A consumer written for Debezium's Outbox Event Router output reads the relay's topics
//! with no change (docs/peers.md). Debezium's own output is read with the same reader in
//! `ledger bench peers`, which runs Kafka Connect (a JVM start and a connector start are
//! too slow for this suite on a shared 2-core machine).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ra_ledger_cdc::event_router;
use ra_ledger_tests::relay::{RunningRelay, subscribe, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::consumer::StreamConsumer;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_debeziums_event_router_reads_the_relays_topics() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
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
    let written: HashMap<String, DebeziumRecord> = rows
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
        .collect();
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
