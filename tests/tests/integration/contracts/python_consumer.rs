//! The Python consumer (`proto/consumers/python`), built from events.proto and
//! docs/asyncapi.yaml alone, bootstraps from a real replay and goes on live while the
//! ledger is written to; killed with SIGKILL mid-replay and started again, it ends with every
//! assignment event applied exactly once and the ledger's current assignments.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ra_ledger::domain::Jurisdiction;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::worker::{self, RunningWorker};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

/// The venv's interpreter, which deploy/test prepares (deploy/lib.sh `ensure_python_env`).
fn python() -> anyhow::Result<String> {
    std::env::var("LEDGER_PYTHON").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_PYTHON is not set: run this test through deploy/test, which makes the venv"
        )
    })
}

/// Starts the consumer for replay `replay_id` (it dies with the test's thread).
fn spawn_consumer(
    team: &TestDatabase,
    topics: &TestTopics,
    prefix: &str,
    replay_id: Uuid,
) -> anyhow::Result<Child> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/consumers/python/consumer.py");
    Ok(Command::new("setpriv")
        .args(["--pdeathsig", "SIGKILL", "--"])
        .arg(python()?)
        .arg(script)
        .args([
            "--database-url",
            &team.url,
            "--brokers",
            &topics.brokers,
            "--topic-prefix",
            prefix,
        ])
        .args(["--bootstrap", &replay_id.to_string()])
        .spawn()?)
}

/// `sql`'s single count, or 0 before the consumer made its tables.
async fn count(client: &Client, sql: &str) -> i64 {
    client
        .query_one(sql, &[])
        .await
        .map(|row| row.get(0))
        .unwrap_or(0)
}

/// Assigns a new business and ends an open assignment, through the API, every 100 ms.
async fn write_until(api: Arc<TestApi>, stop: Arc<AtomicBool>) {
    let mut open = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        open.push(api.assign(Uuid::now_v7()).await);
        if open.len() % 3 == 0 {
            let id = open.remove(0);
            let ended = api
                .post(&format!("/v1/assignments/{id}/end"), json!({}))
                .await;
            assert!(ended.status.is_success(), "{:?}", ended.body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `done` holds on the team's database, or fails after `timeout`.
async fn until(
    client: &Client,
    timeout: Duration,
    what: &str,
    sql: &str,
    done: impl Fn(i64) -> bool,
) -> anyhow::Result<i64> {
    let deadline = Instant::now() + timeout;
    loop {
        let value = count(client, sql).await;
        if done(value) {
            return Ok(value);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what}: still {value} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_consumer_applies_a_replay_then_the_live_topic_exactly_once_across_a_kill()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = Arc::new(TestApi::new(&database)?);
    // A past the live topic never holds (written before the relay's slot exists).
    let contact: Uuid = api.contact("TX", "Agent of the past").await.parse()?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    ra_ledger_testing::seed_assignments(api.ledger.pool(), texas, contact, 3_000, 1_000, |_| {})
        .await?;

    let mut topics = TestTopics::new();
    let relay_config = test_config(&database, &mut topics).await?;
    let relay = RunningRelay::start(relay_config.clone());
    let worker = RunningWorker::start(worker::test_config(&database, &topics));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(Arc::clone(&api), Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let reply = api
        .operate(
            "/v1/replays",
            json!({"aggregate_types": ["assignment"], "topic_prefix": relay_config.topic_prefix, "rate": 1_000}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    let replay_id: Uuid = reply.str("replay_id").parse()?;

    let team = TestDatabase::unmigrated().await?;
    let team_client = team.connect().await?;
    let mut consumer = spawn_consumer(&team, &topics, &relay_config.topic_prefix, replay_id)?;
    let applications = "SELECT count(*) FROM py_applications";
    let before_kill = until(
        &team_client,
        Duration::from_secs(120),
        "applied before the kill",
        applications,
        |n| n >= 500,
    )
    .await?;
    consumer.kill()?;
    consumer.wait()?;
    let bootstrapped = "SELECT count(*) FROM py_bootstrap WHERE completed_at IS NOT NULL";
    assert_eq!(
        count(&team_client, bootstrapped).await,
        0,
        "killed mid-replay"
    );
    eprintln!("killed after {before_kill} applications, mid-replay");
    let mut consumer = spawn_consumer(&team, &topics, &relay_config.topic_prefix, replay_id)?;
    until(
        &team_client,
        Duration::from_secs(180),
        "bootstrap",
        bootstrapped,
        |n| n == 1,
    )
    .await?;
    // Writes after the handoff, read live.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await?;

    let ledger = database.connect().await?;
    let expected: HashSet<String> = ledger
        .query(
            "SELECT event_id::text FROM events WHERE stream LIKE 'assignment-%'",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let inbox = "SELECT count(*) FROM py_inbox";
    until(
        &team_client,
        Duration::from_secs(120),
        "inbox",
        inbox,
        |n| n >= expected.len() as i64,
    )
    .await?;
    // SIGTERM: it stops after the event in hand.
    let signalled = Command::new("kill")
        .args(["-TERM", &consumer.id().to_string()])
        .status()?;
    assert!(
        signalled.success(),
        "kill -TERM {}: {signalled}",
        consumer.id()
    );
    let status = consumer.wait()?;
    assert!(status.success(), "the consumer exited with {status}");
    worker.stop().await?;
    relay.stop().await?;

    let applied: HashSet<String> = team_client
        .query("SELECT event_id::text FROM py_inbox", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        applied.difference(&expected).count(),
        0,
        "applied events the ledger lacks"
    );
    assert_eq!(
        expected.difference(&applied).count(),
        0,
        "events never applied"
    );
    let (total, distinct): (i64, i64) = team_client
        .query_one(
            "SELECT count(*), count(DISTINCT event_id) FROM py_applications",
            &[],
        )
        .await
        .map(|row| (row.get(0), row.get(1)))?;
    assert_eq!(
        (total, distinct),
        (expected.len() as i64, expected.len() as i64),
        "each event applied once"
    );

    let current = "SELECT business_id::text, jurisdiction, assignment_id::text, contact_id::text";
    let ours: BTreeSet<(String, String, String, String)> = team_client
        .query(&format!("{current} FROM py_current_assignment"), &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
    let theirs: BTreeSet<(String, String, String, String)> = ledger
        .query(
            &format!("{current} FROM assignments WHERE ended_at IS NULL"),
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
    assert_eq!(ours.len(), theirs.len());
    assert!(
        ours == theirs,
        "the projection differs from the ledger's current assignments"
    );
    eprintln!(
        "{} events applied once each; {} current assignments match the ledger",
        expected.len(),
        ours.len()
    );
    Ok(())
}
