//! Smoke tests of the stack: outbox row → logical replication slot (pgwire-replication,
//! our pgoutput decoder) → Kafka (idempotent rdkafka producer) → rdkafka consumer.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use prost::Message as _;
use ra_ledger_cdc::outbox::{OutboxLayout, OutboxRow};
use ra_ledger_cdc::pgoutput::{self, LogicalMessage};
use ra_ledger_proto::v1;
use ra_ledger_tests::{TestDatabase, TestTopics, kafka};
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_postgres::{Client, GenericClient};
use uuid::Uuid;

const PUBLICATION: &str = "ra_ledger_outbox";

/// A committed outbox row and the commit that carried it.
#[derive(Debug)]
struct Replicated {
    row: OutboxRow,
    xid: u32,
}

async fn create_slot(client: &Client) -> anyhow::Result<String> {
    let slot = format!("smoke_{}", ra_ledger_tests::random_suffix());
    client
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    Ok(slot)
}

async fn insert_outbox_row(
    client: &impl GenericClient,
    event_id: Uuid,
    aggregate_id: &str,
    payload: &[u8],
) -> anyhow::Result<()> {
    client
        .execute(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1, 'contact', $2, 'ContactCreated', $3)",
            &[&event_id, &aggregate_id, &payload],
        )
        .await?;
    Ok(())
}

/// Streams the slot until `count` outbox rows arrived, decoding pgoutput ourselves.
async fn read_outbox(
    database: &TestDatabase,
    slot: &str,
    count: usize,
) -> anyhow::Result<Vec<Replicated>> {
    let target = database.replication_target()?;
    let config = target
        .stream(slot, PUBLICATION)
        .with_start_lsn(Lsn::ZERO)
        .with_application_name("ledger-smoke-test");
    let mut client = ReplicationClient::connect(config).await?;
    let mut layouts: HashMap<u32, OutboxLayout> = HashMap::new();
    let mut rows = Vec::new();
    let mut xid = None;
    let reading = async {
        while rows.len() < count {
            let Some(event) = client.recv().await? else {
                bail!("replication stream ended early");
            };
            match event {
                ReplicationEvent::Begin { xid: begin, .. } => xid = Some(begin),
                ReplicationEvent::XLogData { data, .. } => match pgoutput::decode(&data)? {
                    LogicalMessage::Relation(relation) => {
                        layouts.insert(relation.oid, OutboxLayout::from_relation(&relation)?);
                    }
                    LogicalMessage::Insert { relation_oid, new } => {
                        let layout = layouts
                            .get(&relation_oid)
                            .context("Insert before its Relation")?;
                        rows.push(Replicated {
                            row: layout.row(&new)?,
                            xid: xid.context("Insert outside a transaction")?,
                        });
                    }
                    other => bail!("unexpected message on the outbox slot: {other:?}"),
                },
                ReplicationEvent::Commit { end_lsn, .. } => client.update_applied_lsn(end_lsn),
                _ => {}
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .context("timed out reading the slot")??;
    client.shutdown().await?;
    Ok(rows)
}

fn idempotent_producer() -> anyhow::Result<FutureProducer> {
    Ok(kafka::client_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .create()?)
}

fn consumer(topic: &str) -> anyhow::Result<StreamConsumer> {
    let consumer: StreamConsumer = kafka::client_config()
        .set(
            "group.id",
            format!("smoke-{}", ra_ledger_tests::random_suffix()),
        )
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    Ok(consumer)
}

fn envelope(event_id: Uuid, contact_id: &str) -> Vec<u8> {
    v1::Envelope {
        event_id: event_id.to_string(),
        stream: format!("contact-{contact_id}"),
        stream_version: 1,
        event_type: "ContactCreated".into(),
        schema_version: 1,
        actor: "smoke-test".into(),
        event: Some(v1::envelope::Event::ContactCreated(v1::ContactCreated {
            contact_id: contact_id.into(),
            jurisdiction: "TX".into(),
            name: "Lone Star Agents".into(),
            status: v1::ContactStatus::Primary.into(),
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_row_travels_from_the_wal_through_kafka_intact() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let topic = topics.create("outbox.event.contact").await?;
    let mut client = database.connect().await?;
    let slot = create_slot(&client).await?;

    let event_id = Uuid::now_v7();
    let contact_id = Uuid::now_v7().to_string();
    let payload = envelope(event_id, &contact_id);
    let transaction = client.transaction().await?;
    insert_outbox_row(&transaction, event_id, &contact_id, &payload).await?;
    transaction.commit().await?;

    let replicated = read_outbox(&database, &slot, 1).await?;
    let Replicated { row, xid } = &replicated[0];
    assert_eq!(row.event_id, event_id.to_string());
    assert_eq!(row.aggregate_type, "contact");
    assert_eq!(row.aggregate_id, contact_id);
    assert_eq!(row.event_type, "ContactCreated");
    assert_eq!(row.payload, Bytes::from(payload.clone()));

    let producer = idempotent_producer()?;
    let xid_text = xid.to_string();
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "id",
            value: Some(row.event_id.as_str()),
        })
        .insert(Header {
            key: "event_type",
            value: Some(row.event_type.as_str()),
        })
        .insert(Header {
            key: "txid",
            value: Some(xid_text.as_str()),
        });
    producer
        .send(
            FutureRecord::to(&topic)
                .key(row.aggregate_id.as_bytes())
                .payload(row.payload.as_ref())
                .headers(headers),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(error, _)| error)
        .context("producing to the broker")?;

    let consumer = consumer(&topic)?;
    let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .context("nothing arrived on the topic within 60 s")??;
    assert_eq!(message.key(), Some(contact_id.as_bytes()));
    assert_eq!(message.payload(), Some(payload.as_slice()));
    let received: HashMap<String, String> = message
        .headers()
        .context("message has no headers")?
        .iter()
        .map(|header| {
            (
                header.key.to_owned(),
                String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned(),
            )
        })
        .collect();
    assert_eq!(
        received,
        HashMap::from([
            ("id".to_owned(), event_id.to_string()),
            ("event_type".to_owned(), "ContactCreated".to_owned()),
            ("txid".to_owned(), xid_text),
        ])
    );
    let decoded = v1::Envelope::decode(message.payload().unwrap_or_default())?;
    assert_eq!(decoded.event_id, event_id.to_string());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_transaction_yields_nothing_on_the_slot() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut client = database.connect().await?;
    let slot = create_slot(&client).await?;

    let rolled_back = Uuid::now_v7();
    let transaction = client.transaction().await?;
    insert_outbox_row(&transaction, rolled_back, "agg-1", b"never").await?;
    transaction.rollback().await?;

    // A committed row after the rollback: reaching it proves the stream went past the
    // rolled-back transaction rather than stopping short of it.
    let committed = Uuid::now_v7();
    insert_outbox_row(&client, committed, "agg-2", b"kept").await?;

    // The slot holds exactly one Insert: the committed row. Peeking does not consume.
    let pending: Vec<Vec<u8>> = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', $2)",
            &[&slot, &PUBLICATION],
        )
        .await?
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    let tags: Vec<char> = pending.iter().map(|data| data[0] as char).collect();
    assert_eq!(
        tags,
        vec!['B', 'R', 'I', 'C'],
        "one transaction with one insert"
    );

    // And streaming it yields only the committed row.
    let replicated = read_outbox(&database, &slot, 1).await?;
    let ids: Vec<&str> = replicated.iter().map(|r| r.row.event_id.as_str()).collect();
    assert_eq!(ids, vec![committed.to_string().as_str()]);
    Ok(())
}
