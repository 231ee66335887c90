//! Operators cancel replays (issue 35, item 8): four replays that never finish no longer
//! block every new one. A cancelled replay stops publishing within a second, writes no
//! completion marker, frees its place among the replays open at once at once, and shows as
//! cancelled in its status and on the console's operations page.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use ra_ledger::domain::Jurisdiction;
use ra_ledger::replay::ReplayState;
use ra_ledger_tests::api::{AUDITOR, OPERATOR, TestApi, WRITER};
use ra_ledger_tests::worker::{self, RunningWorker};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::json;
use uuid::Uuid;

use crate::console::{http, session_cookie};

/// Asks for a replay as an operator does; its id.
async fn request(api: &TestApi, body: serde_json::Value) -> anyhow::Result<Uuid> {
    let reply = api.operate("/v1/replays", body).await;
    reply.expect(StatusCode::ACCEPTED);
    Ok(reply.str("replay_id").parse()?)
}

async fn cancel(api: &TestApi, id: &str, token: &str) -> ra_ledger_tests::api::Reply {
    api.call(
        Method::POST,
        &format!("/v1/replays/{id}/cancel"),
        Some(token),
        None,
    )
    .await
}

/// Messages on `topic` so far: the sum of its partitions' end offsets.
fn messages_on(topics: &TestTopics, topic: &str) -> anyhow::Result<i64> {
    let consumer: BaseConsumer = topics
        .client_config()
        .set("group.id", format!("count-{}", Uuid::now_v7()))
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let mut total = 0;
    for partition in metadata.topics()[0].partitions() {
        let (_, high) =
            consumer.fetch_watermarks(topic, partition.id(), Duration::from_secs(10))?;
        total += high;
    }
    Ok(total)
}

async fn status(api: &TestApi, id: Uuid) -> serde_json::Value {
    let shown = api.get(&format!("/v1/replays/{id}")).await;
    shown.expect(StatusCode::OK);
    shown.body
}

// Longer than our usual function on purpose: one scenario read top to bottom.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_replay_stops_publishing_frees_its_place_and_shows_cancelled()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let contact: Uuid = api.contact("TX", "Agent of the past").await.parse()?;
    let pool = ra_ledger::db::pool(&database.url, "seed", 1)?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 20_000, 1_000, |_| {}).await?;
    let mut topics = TestTopics::new();
    let relay = ra_ledger_tests::relay::test_config(&database, &mut topics).await?;
    let prefix = relay.topic_prefix.clone();

    // A slow replay, which a worker runs.
    let slow = request(
        &api,
        json!({"aggregate_types": ["assignment"], "topic_prefix": prefix, "rate": 1_000}),
    )
    .await?;
    let running = RunningWorker::start(worker::test_config(&database, &topics));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(&api, slow).await["published"].as_i64().unwrap_or(0) < 1_000 {
        anyhow::ensure!(Instant::now() < deadline, "the replay did not get going");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three more wait behind it: every place is taken, and a fifth is refused.
    for _ in 0..3 {
        request(
            &api,
            json!({"aggregate_types": ["contact"], "topic_prefix": prefix}),
        )
        .await?;
    }
    let refused = api.operate("/v1/replays", json!({})).await;
    refused.expect(StatusCode::TOO_MANY_REQUESTS);

    // Neither a writer nor an auditor may cancel it.
    for token in [WRITER, AUDITOR] {
        let forbidden = cancel(&api, &slow.to_string(), token).await;
        forbidden.expect(StatusCode::FORBIDDEN);
    }
    assert_eq!(status(&api, slow).await["status"], "running");

    // The operator cancels it: its place is free at once.
    let cancelled = cancel(&api, &slow.to_string(), OPERATOR).await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.str("status"), "cancelled");
    assert_eq!(cancelled.str("cancelled_by"), "test-operator");
    assert!(
        cancelled.body["cancelled_at"].is_string(),
        "{:?}",
        cancelled.body
    );
    let fifth = api
        .operate("/v1/replays", json!({"stream_prefix": "none-"}))
        .await;
    fifth.expect(StatusCode::ACCEPTED);

    // It stops publishing within a second, and never writes its markers.
    let replay_topic = ra_ledger_cdc::replay::replay_topic(
        ra_ledger_cdc::replay::DEFAULT_TARGET,
        &format!("{prefix}assignment"),
        &slow.to_string(),
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after_cancel = messages_on(&topics, &replay_topic)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        messages_on(&topics, &replay_topic)?,
        after_cancel,
        "the cancelled replay went on publishing"
    );
    assert!(
        after_cancel < 20_000,
        "{after_cancel} messages: it ran to its end"
    );
    let shown = status(&api, slow).await;
    assert_eq!(shown["status"], "cancelled", "{shown:?}");
    assert!(shown["completed_at"].is_null(), "{shown:?}");
    let messages = tokio::task::spawn_blocking({
        let config = topics.client_config();
        let topic = replay_topic.clone();
        move || ra_ledger::digest::topic::read_blocking(config, &topic, Duration::from_secs(60))
    })
    .await??;
    let markers = messages
        .iter()
        .filter(|(_, payload)| {
            serde_json::from_slice::<serde_json::Value>(payload)
                .is_ok_and(|value| value.get("handoff").is_some())
        })
        .count();
    assert_eq!(markers, 0, "a cancelled replay wrote completion markers");
    let metrics = running.metrics.render();
    assert_eq!(
        ra_ledger_tests::metric(&metrics, ra_ledger::metrics::REPLAYS_CANCELLED.name),
        1,
        "{metrics}"
    );

    // The console's operations page lists it as cancelled.
    let base = format!("http://{}", api.serve().await?);
    let cookie = session_cookie(&base, OPERATOR).await;
    let page = http()
        .get(format!("{base}/operations"))
        .header(reqwest::header::COOKIE, &cookie)
        .send()
        .await?
        .text()
        .await?;
    // The table's rows: the picture above the table names the replay too.
    let row = page
        .split("<tr>")
        .skip(1)
        .find(|row| row.contains(&slow.to_string()))
        .unwrap_or_else(|| panic!("replay {slow} on the operations page: {page}"));
    assert!(row.contains("<td>cancelled</td>"), "{row}");
    running.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_answers_for_each_state_and_refuses_what_it_cannot_cancel() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let client = database.connect().await?;
    // Requested, never run: cancelled, and a runner then leaves it alone.
    let waiting = request(&api, json!({})).await?;
    let reply = cancel(&api, &waiting.to_string(), OPERATOR).await;
    reply.expect(StatusCode::OK);
    assert_eq!(reply.str("status"), "cancelled");
    // Again: the same answer, nothing changed.
    let again = cancel(&api, &waiting.to_string(), OPERATOR).await;
    again.expect(StatusCode::OK);
    assert_eq!(again.body["cancelled_at"], reply.body["cancelled_at"]);
    let pool = ra_ledger::db::pool(&database.url, "replay-cancel", 2)?;
    let kafka = ra_ledger_cdc::infra::kafka::KafkaSettings::from_env("127.0.0.1:9")?;
    let outcome = ra_ledger::replay::run::run(
        &pool,
        &kafka,
        None,
        waiting,
        &Default::default(),
        &Default::default(),
        &mut |_| {},
    )
    .await?;
    assert_eq!(
        outcome,
        ra_ledger::replay::run::Outcome::AlreadyEnded(ReplayState::Cancelled)
    );

    // Complete or failed: 409, and it stays as it was.
    for ended in ["complete", "failed"] {
        let id = request(&api, json!({})).await?;
        client
            .execute(
                "UPDATE replays SET status = $2, snapshot = '1:1:'::pg_snapshot WHERE id = $1",
                &[&id, &ended],
            )
            .await?;
        let refused = cancel(&api, &id.to_string(), OPERATOR).await;
        refused.expect_error(StatusCode::CONFLICT, "conflict");
        let message = refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains(&format!("is {ended} already")),
            "{message}"
        );
        assert_eq!(status(&api, id).await["status"], ended);
    }
    // No such replay, or no id.
    let missing = cancel(&api, &Uuid::now_v7().to_string(), OPERATOR).await;
    missing.expect(StatusCode::NOT_FOUND);
    let bad = cancel(&api, "not-a-uuid", OPERATOR).await;
    bad.expect(StatusCode::BAD_REQUEST);
    // A writer's attempt changes nothing.
    let other = request(&api, json!({})).await?;
    let forbidden = cancel(&api, &other.to_string(), WRITER).await;
    forbidden.expect(StatusCode::FORBIDDEN);
    assert_eq!(status(&api, other).await["status"], "requested");
    Ok(())
}
