//! `ledger verify --digests` on the real stack: digests sealed by the ledger, published by
//! the relay to the broker, read back from the topic. A superuser who rewrites a stream and
//! recomputes its hashes, deletes a stream, or truncates `events` and re-inserts all but one
//! event passes the hash-chain check, and is caught by the published digests.

use std::time::{Duration, Instant};

use prost::Message as _;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::published::{self, DigestReport};
use ra_ledger::store::{EventRow, event_hash};
use ra_ledger_proto::v1::{self, envelope::Event};
use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

async fn verify_published(
    database: &TestDatabase,
    topics: &TestTopics,
    topic: &str,
    key: &ra_ledger::digest::PublicKey,
) -> anyhow::Result<DigestReport> {
    let client = database.connect().await?;
    Ok(published::verify_topic(
        &client,
        topics.client_config(),
        topic,
        key,
        Duration::from_secs(120),
    )
    .await?)
}

/// Whether the plain hash-chain check (`ledger verify`) passes.
async fn chains_hold(database: &TestDatabase) -> anyhow::Result<bool> {
    let client = database.connect().await?;
    Ok(ra_ledger::verify::verify(&client, |_| {})
        .await?
        .broken
        .is_none())
}

/// Rewrites every event of `stream` to name `contact` instead, recomputing the stream's
/// whole hash chain, with the triggers off: what a superuser can do.
pub(crate) async fn rewrite_contact(
    client: &Client,
    stream: &str,
    contact: Uuid,
) -> anyhow::Result<()> {
    client
        .batch_execute("BEGIN; ALTER TABLE events DISABLE TRIGGER USER")
        .await?;
    let rows = client
        .query(
            "SELECT event_id, stream_version, event_type, schema_version, payload, recorded_at, \
                    effective_at, actor, correlation_id, causation_id \
             FROM events WHERE stream = $1 ORDER BY stream_version",
            &[&stream],
        )
        .await?;
    let mut previous: Option<[u8; 32]> = None;
    for row in &rows {
        let mut envelope = v1::Envelope::decode(row.get::<_, &[u8]>(4))?;
        match &mut envelope.event {
            Some(Event::AssignmentStarted(started)) => started.contact_id = contact.to_string(),
            Some(Event::AssignmentEnded(ended)) => ended.contact_id = contact.to_string(),
            _ => {}
        }
        let payload = envelope.encode_to_vec();
        let event = EventRow {
            event_id: row.get(0),
            stream,
            stream_version: row.get(1),
            event_type: row.get(2),
            schema_version: row.get(3),
            payload: &payload,
            recorded_at: row.get(5),
            effective_at: row.get(6),
            actor: row.get(7),
            correlation_id: row.get(8),
            causation_id: row.get(9),
        };
        let hash = event_hash(previous.as_ref().map(|h| &h[..]), &event);
        client
            .execute(
                "UPDATE events SET payload = $2, prev_hash = $3, hash = $4 WHERE event_id = $1",
                &[
                    &event.event_id,
                    &payload,
                    &previous.map(|h| h.to_vec()),
                    &hash.to_vec(),
                ],
            )
            .await?;
        previous = Some(hash);
    }
    client
        .batch_execute("ALTER TABLE events ENABLE TRIGGER USER; COMMIT")
        .await?;
    Ok(())
}

/// Runs `sql` as a superuser with the triggers of `events` off.
async fn as_superuser(client: &Client, sql: &str) -> anyhow::Result<()> {
    client
        .batch_execute(&format!(
            "BEGIN; ALTER TABLE events DISABLE TRIGGER USER; {sql}; \
             ALTER TABLE events ENABLE TRIGGER USER; COMMIT"
        ))
        .await?;
    Ok(())
}

/// Waits until the relay published `count` digests and the report holds.
async fn published_and_holding(
    database: &TestDatabase,
    topics: &TestTopics,
    topic: &str,
    key: &ra_ledger::digest::PublicKey,
    count: usize,
) -> anyhow::Result<DigestReport> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = verify_published(database, topics, topic, key).await?;
        if report.checked == count && report.unpublished.is_empty() {
            anyhow::ensure!(report.holds(), "an untouched ledger disagrees: {report:?}");
            return Ok(report);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the relay did not publish {count} digests: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_on_kafka_catch_a_rewritten_a_deleted_and_a_truncated_history() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let topic = topics.create("outbox.event.digest").await?;
    let relay = RunningRelay::start(config);
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    api.contact("TX", "Office").await;
    let other_contact = api.contact("NY", "Elsewhere").await;
    let assign = async || {
        let business = Uuid::now_v7();
        let assignment_id = api.assign(business).await;
        (format!("assignment-{business}-TX"), assignment_id)
    };
    let mut first = Vec::new();
    for _ in 0..10 {
        first.push(assign().await);
    }
    let key = DigestKey::from_seed(&[21; 32]);
    assert!(matches!(
        build(api.ledger.pool(), &key).await?,
        Built::Sealed { seq: 1, .. }
    ));
    let ended = api
        .post(&format!("/v1/assignments/{}/end", first[0].1), json!({}))
        .await;
    assert!(ended.status.is_success(), "{:?}", ended.body);
    let mut second = Vec::new();
    for _ in 0..5 {
        second.push(assign().await);
    }
    assert!(matches!(
        build(api.ledger.pool(), &key).await?,
        Built::Sealed { seq: 2, .. }
    ));
    published_and_holding(&database, &topics, &topic, &key.public(), 2).await?;
    // Another key: every signature fails.
    let other = DigestKey::from_seed(&[22; 32]).public();
    let forged = verify_published(&database, &topics, &topic, &other).await?;
    assert_eq!(forged.problems.len(), 2, "{forged:?}");
    assert!(
        forged
            .problems
            .iter()
            .all(|p| p.contains("signature does not verify"))
    );

    let client = database.connect().await?;
    client
        .batch_execute("CREATE TEMP TABLE saved AS SELECT * FROM events")
        .await?;
    let restore =
        "DELETE FROM events; INSERT INTO events OVERRIDING SYSTEM VALUE SELECT * FROM saved";

    // 1. One stream's contact rewritten, every hash of it recomputed.
    let rewritten = &first[3].0;
    rewrite_contact(&client, rewritten, other_contact.parse()?).await?;
    assert!(
        chains_hold(&database).await?,
        "the chains are consistent again"
    );
    let report = verify_published(&database, &topics, &topic, &key.public()).await?;
    let disagreement = report.disagreement.clone().expect("a disagreement");
    assert_eq!(
        disagreement.seq, 1,
        "the first digest that sealed it: {disagreement}"
    );
    let named: Vec<&str> = disagreement
        .streams
        .iter()
        .map(|s| s.stream.as_str())
        .collect();
    assert_eq!(named, [rewritten.as_str()], "{disagreement}");
    assert_eq!(disagreement.later, 1, "digest 2 sealed it too");
    assert!(report.problems.is_empty(), "{report:?}");
    as_superuser(&client, restore).await?;
    published_and_holding(&database, &topics, &topic, &key.public(), 2).await?;

    // 2. One stream deleted: the one first sealed by digest 2.
    let deleted = &second[2].0;
    as_superuser(
        &client,
        &format!("DELETE FROM events WHERE stream = '{deleted}'"),
    )
    .await?;
    let report = verify_published(&database, &topics, &topic, &key.public()).await?;
    let disagreement = report.disagreement.clone().expect("a disagreement");
    assert_eq!(disagreement.seq, 2, "{disagreement}");
    assert_eq!(disagreement.streams.len(), 1, "{disagreement}");
    assert_eq!(disagreement.streams[0].stream, *deleted);
    assert!(
        disagreement.to_string().contains("no such event"),
        "{disagreement}"
    );
    as_superuser(&client, restore).await?;
    published_and_holding(&database, &topics, &topic, &key.public(), 2).await?;

    // 3. events truncated and every event re-inserted but one: the head of a stream, so
    //    no version is missing and the chains still hold.
    let cut = &first[0].0;
    as_superuser(
        &client,
        &format!(
            "TRUNCATE events; INSERT INTO events OVERRIDING SYSTEM VALUE SELECT * FROM saved \
             WHERE NOT (stream = '{cut}' AND stream_version = 2)"
        ),
    )
    .await?;
    assert!(
        chains_hold(&database).await?,
        "a cut-off head leaves no gap"
    );
    let report = verify_published(&database, &topics, &topic, &key.public()).await?;
    let disagreement = report.disagreement.clone().expect("a disagreement");
    assert_eq!(
        disagreement.seq, 2,
        "version 2 was first sealed by digest 2: {disagreement}"
    );
    let named: Vec<&str> = disagreement
        .streams
        .iter()
        .map(|s| s.stream.as_str())
        .collect();
    assert_eq!(named, [cut.as_str()], "{disagreement}");
    as_superuser(&client, restore).await?;
    published_and_holding(&database, &topics, &topic, &key.public(), 2).await?;
    relay.stop().await?;
    Ok(())
}

/// Issue 35, item 10: reading the digest topic to its end logged librdkafka's
/// `Partition EOF` as an ERROR line on every run. Reaching the end is how the read knows it
/// is done: two messages on two partitions are read, and nothing is logged as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_topic_to_its_end_logs_no_error() -> anyhow::Result<()> {
    use rdkafka::producer::{FutureProducer, FutureRecord};

    use crate::ledger::CapturedLog;

    let mut topics = TestTopics::new();
    let topic = topics.create_with_partitions("digests", 2).await?;
    let producer: FutureProducer = topics.client_config().create()?;
    for partition in 0..2 {
        producer
            .send(
                FutureRecord::<(), _>::to(&topic)
                    .partition(partition)
                    .payload("digest"),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(error, _)| error)?;
    }
    // A capture that comes back without the debug line caught nothing (tracing's per-callsite
    // interest, raced by other tests' subscribers, came back empty once in a full run even
    // after the rebuild in `while_running`): read again, at most three times, so that the
    // test proves something without failing on the harness's own race.
    let mut logs = Vec::new();
    for _ in 0..3 {
        let config = topics.client_config();
        let read_topic = topic.clone();
        let (messages, log) = tokio::task::spawn_blocking(move || {
            CapturedLog::while_running(|| {
                ra_ledger::digest::topic::read_blocking(
                    config,
                    &read_topic,
                    Duration::from_secs(60),
                )
            })
        })
        .await?;
        assert_eq!(messages?.len(), 2, "{log}");
        assert!(!log.contains("ERROR"), "{log}");
        if log.contains("reached the end of a partition") {
            return Ok(());
        }
        logs.push(log);
    }
    panic!("three reads captured no debug line: {logs:?}")
}
