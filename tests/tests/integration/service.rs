//! `ledger serve` as the CLI assembles it ([`ra_ledger::service::run`]): from a validated
//! config to a served API on a real port, and back to a clean stop on its token.

use std::time::Duration;

use ra_ledger::api::{Role, token_entry};
use ra_ledger::config::ServeConfig;
use ra_ledger::service::{self, ServeError};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{WRITER, contact_body};
use ra_ledger_tests::process::free_port;
use tokio_util::sync::CancellationToken;

fn config(database: &TestDatabase, port: u16) -> ServeConfig {
    ServeConfig {
        database_url: database.url.as_str().into(),
        listen: format!("127.0.0.1:{port}"),
        tokens: token_entry(Role::Writer, "service-test", WRITER),
        ..ServeConfig::default()
    }
}

/// The service migrates, serves the health endpoint and a write on its port, refuses a
/// second one on the same address naming it, and stops when its token is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_assembled_service_serves_a_write_and_stops_on_its_token() -> anyhow::Result<()> {
    // Unmigrated: the service brings the schema up itself.
    let database = TestDatabase::unmigrated().await?;
    let port = free_port()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service::run(
        config(&database, port).validate()?,
        shutdown.clone(),
    ));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..200 {
        if let Ok(reply) = client.get(format!("{base}/healthz")).send().await {
            ready = reply.status().is_success();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the service never answered /healthz on {base}");
    let created = client
        .post(format!("{base}/v1/contacts"))
        .bearer_auth(WRITER)
        .json(&contact_body("TX", "Austin RA office"))
        .send()
        .await?;
    assert_eq!(created.status().as_u16(), 201, "{}", created.text().await?);
    let events: i64 = database
        .connect()
        .await?
        .query_one("SELECT count(*) FROM events", &[])
        .await?
        .get(0);
    assert_eq!(events, 1);

    let second = service::run(
        config(&database, port).validate()?,
        CancellationToken::new(),
    )
    .await;
    match second {
        Err(error @ ServeError::Listen { .. }) => {
            assert!(
                error.to_string().contains(&format!("127.0.0.1:{port}")),
                "{error}"
            );
        }
        other => panic!("a second service on a taken port: {other:?}"),
    }

    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(30), running).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    assert!(
        client.get(format!("{base}/healthz")).send().await.is_err(),
        "still answering after the stop"
    );
    Ok(())
}
