//! A replay's `error` is a stable code and a sentence (issue 35, item 6): never the
//! database's text (SQLSTATE, table names), Kafka's, or PIDs, which went to every reader of
//! `GET /v1/replays/{id}` before. The cause is in the runner's log, under the reference the
//! sentence names.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::metrics::ReplayMetrics;
use ra_ledger::replay::run::{Outcome, run};
use ra_ledger_cdc::infra::kafka::KafkaSettings;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Texts of the database, of Kafka and of the host that a replay's error must not carry.
const INTERNAL: [&str; 9] = [
    "SQLSTATE",
    "XX001",
    "refused by the test",
    "table",
    "Local:",
    "Broker",
    "127.0.0.1",
    "pid",
    "xid",
];

/// A ledger with a few assignments, its API, and live topics under a prefix of its own.
async fn ledger_with_topics() -> anyhow::Result<(TestDatabase, TestApi, TestTopics, String)> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let contact: Uuid = api.contact("TX", "Office").await.parse()?;
    let pool = ra_ledger::db::pool(&database.url, "seed", 1)?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 20, 20, |_| {}).await?;
    let mut topics = TestTopics::new();
    let relay = ra_ledger_tests::relay::test_config(&database, &mut topics).await?;
    Ok((database, api, topics, relay.topic_prefix))
}

fn kafka(brokers: &str, topics: &TestTopics) -> KafkaSettings {
    let mut properties: BTreeMap<String, String> = topics.client.clone();
    properties.insert("bootstrap.servers".into(), brokers.into());
    KafkaSettings {
        properties,
        secret_files: BTreeMap::new(),
    }
}

async fn request(api: &TestApi, topic_prefix: &str) -> anyhow::Result<Uuid> {
    let reply = api
        .operate(
            "/v1/replays",
            json!({"aggregate_types": ["assignment"], "topic_prefix": topic_prefix}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    Ok(reply.str("replay_id").parse()?)
}

/// Runs the replay once here, as a worker would.
async fn run_once(
    database: &TestDatabase,
    kafka: &KafkaSettings,
    id: Uuid,
) -> anyhow::Result<Result<Outcome, String>> {
    let pool = ra_ledger::db::pool(&database.url, "replay-errors", 2)?;
    let outcome = run(
        &pool,
        kafka,
        None,
        id,
        &ReplayMetrics::default(),
        &CancellationToken::new(),
        &mut |_| {},
    )
    .await;
    Ok(outcome.map_err(|error| error.to_string()))
}

/// The replay's `error` as the API shows it, checked: `code: sentence` with a reference to
/// the log, and none of [`INTERNAL`].
async fn disclosed_error(api: &TestApi, id: Uuid, code: &str, status: &str) -> String {
    let shown = api.get(&format!("/v1/replays/{id}")).await;
    shown.expect(StatusCode::OK);
    assert_eq!(shown.str("status"), status, "{:?}", shown.body);
    let error = shown.str("error");
    assert!(error.starts_with(&format!("{code}: ")), "{error}");
    assert!(error.contains("under reference "), "{error}");
    for internal in INTERNAL {
        assert!(!error.contains(internal), "{internal:?} disclosed: {error}");
    }
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_errors_are_a_code_and_a_sentence_never_the_database_or_kafka_text()
-> anyhow::Result<()> {
    let (database, api, topics, prefix) = ledger_with_topics().await?;

    // 1. Kafka cannot be reached: its text (and the address) stays in the log.
    let unreachable = request(&api, &prefix).await?;
    let ran = run_once(&database, &kafka("127.0.0.1:9", &topics), unreachable).await?;
    let said = ran.expect_err("no broker");
    assert!(
        said.starts_with("Kafka: "),
        "the log's text keeps the cause: {said}"
    );
    disclosed_error(&api, unreachable, "kafka_unavailable", "requested").await;
    close_by_hand(&database, unreachable).await?;

    // 2. A statement fails (a trigger refuses the replay's checkpoint with a SQLSTATE of
    //    its own): the SQLSTATE, the message and the table stay in the log.
    let client = database.connect().await?;
    client
        .batch_execute(
            "CREATE FUNCTION refuse_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'checkpoint refused by the test' USING ERRCODE = 'XX001'; END $$; \
             CREATE TRIGGER refuse_checkpoint BEFORE UPDATE ON replays FOR EACH ROW \
             WHEN (NEW.checkpoint <> OLD.checkpoint) EXECUTE FUNCTION refuse_checkpoint()",
        )
        .await?;
    let refused_checkpoint = request(&api, &prefix).await?;
    let brokers = kafka(&topics.brokers, &topics);
    let said = run_once(&database, &brokers, refused_checkpoint)
        .await?
        .expect_err("the checkpoint is refused");
    assert!(
        said.contains("SQLSTATE XX001"),
        "the log's text keeps the cause: {said}"
    );
    disclosed_error(&api, refused_checkpoint, "internal", "running").await;
    client
        .batch_execute("DROP TRIGGER refuse_checkpoint ON replays")
        .await?;
    close_by_hand(&database, refused_checkpoint).await?;

    // 3. Kafka refuses the events for good (the replay topic, made beforehand, takes
    //    messages of 64 bytes at most): the replay fails, without Kafka's words.
    let too_small = request(&api, &prefix).await?;
    let live = format!("{prefix}assignment");
    let replay_topic = ra_ledger_cdc::replay::replay_topic(
        ra_ledger_cdc::replay::DEFAULT_TARGET,
        &live,
        &too_small.to_string(),
    );
    let mut spec =
        ra_ledger::topics::replay(&replay_topic, ra_ledger_tests::kafka::TEST_PARTITIONS);
    spec.configs.insert("max.message.bytes".into(), "64".into());
    ra_ledger::topics::create(&topics.client_config(), &[spec]).await?;
    let said = run_once(&database, &brokers, too_small)
        .await?
        .expect_err("the messages are too large");
    assert!(said.contains("for good"), "{said}");
    let error = disclosed_error(&api, too_small, "kafka_refused", "failed").await;
    assert!(error.contains("the replay is stopped"), "{error}");
    Ok(())
}

/// Takes a replay out of the way of the next (at most four may be open at once).
async fn close_by_hand(database: &TestDatabase, id: Uuid) -> anyhow::Result<()> {
    database
        .connect()
        .await?
        .execute("UPDATE replays SET status = 'failed' WHERE id = $1", &[&id])
        .await?;
    Ok(())
}
