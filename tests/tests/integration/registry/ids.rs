//! Schema ids recorded (issue 57, item 3): the relay records the id it framed a subject
//! with, beside the schema's fingerprint; after the registry is lost (one restarted on
//! empty storage, where another schema was registered first) it answers another id for
//! the same schema, and the relay refuses to start, naming the fix; once the operator
//! applied it, the relay starts and records the new id.

use std::time::{Duration, Instant};

use ra_ledger_cdc::registry::{SchemaRegistry, fingerprint, value_subject};
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::schema_ids::SchemaIdError;
use ra_ledger_proto::EVENTS_PROTO;
use ra_ledger_tests::api::{OPERATOR, TestApi};
use ra_ledger_tests::registry::OwnRegistry;
use ra_ledger_tests::relay::{RunningRelay, refusal_once_the_registry_answers};
use ra_ledger_tests::{TestDatabase, TestTopics};
use reqwest::Method;

use super::{framed_config, write_assignments};

/// The ids recorded for the relay's slot and `subject`: (fingerprint, id).
async fn recorded(
    database: &TestDatabase,
    slot: &str,
    subject: &str,
) -> anyhow::Result<Vec<(String, i32)>> {
    Ok(database
        .connect()
        .await?
        .query(
            "SELECT fingerprint, schema_id FROM relay_schema_ids \
             WHERE slot_name = $1 AND subject = $2",
            &[&slot, &subject],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// Waits (at most a minute) until an id is recorded for `subject`; returns it.
async fn until_recorded(database: &TestDatabase, slot: &str, subject: &str) -> anyhow::Result<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let [(known, id)] = recorded(database, slot, subject).await?.as_slice() {
            assert_eq!(*known, fingerprint(EVENTS_PROTO));
            return Ok(*id);
        }
        anyhow::ensure!(Instant::now() < deadline, "no schema id recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_lost_its_ids_stops_the_relay_until_the_operator_acts() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = framed_config(
        &database,
        &mut topics,
        ra_ledger_cdc::config::DeliveryMode::AtLeastOnce,
        &["assignment"],
    )
    .await?;
    let api = TestApi::with_relay_slot(&database, &config.slot)?;
    write_assignments(&api, 2).await?;
    let subject = value_subject(&config.topic("assignment"));

    // The run's registry: the relay records the id it framed with.
    let relay = RunningRelay::start(config.clone());
    let first = until_recorded(&database, &config.slot, &subject).await?;
    relay.stop().await?;

    // The registry lost: one on empty storage, where another schema came first whenever
    // events.proto would otherwise get the same id again.
    let lost = OwnRegistry::start()?;
    let empty = SchemaRegistry::new(&lost.server.ccompat_url())?;
    if first == 1 {
        empty
            .register(
                "another-value",
                "syntax = \"proto3\";\npackage other;\nmessage Other { string name = 1; }\n",
            )
            .await?;
    }
    config.schema_registry_url = Some(lost.server.ccompat_url());
    let error = refusal_once_the_registry_answers(&config, Duration::from_secs(60)).await?;
    let RelayError::SchemaIds(SchemaIdError::Changed {
        recorded, answered, ..
    }) = &error
    else {
        panic!("not refused for a changed id: {error:?}");
    };
    assert_eq!(*recorded as i32, first);
    assert_ne!(*answered as i32, first);
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "delete that row of relay_schema_ids to accept id {answered}"
        )) && message.contains("docs/operators.md#schema-ids-recorded"),
        "{message}"
    );
    // The operator reads it in the verdict.
    let operator = api.call(Method::GET, "/status", Some(OPERATOR), None).await;
    assert!(
        operator.text.contains("relay_schema_ids"),
        "{}",
        operator.text
    );
    // Nothing was recorded over the old id.
    assert_eq!(
        recorded_ids(&database, &config.slot, &subject).await?,
        vec![first]
    );

    // The fix it names: the row deleted, the relay starts and records the registry's id.
    database
        .connect()
        .await?
        .execute(
            "DELETE FROM relay_schema_ids WHERE slot_name = $1 AND subject = $2",
            &[&config.slot, &subject],
        )
        .await?;
    let relay = RunningRelay::start(config.clone());
    let now = until_recorded(&database, &config.slot, &subject).await?;
    relay.stop().await?;
    assert_eq!(now, *answered as i32);
    Ok(())
}

async fn recorded_ids(
    database: &TestDatabase,
    slot: &str,
    subject: &str,
) -> anyhow::Result<Vec<i32>> {
    Ok(recorded(database, slot, subject)
        .await?
        .into_iter()
        .map(|(_, id)| id)
        .collect())
}

/// Checking the ids needs the database: a framed relay that starts while its database is
/// down waits for it, as a session does, rather than exit; once the server is back it
/// records its id and streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framed_relay_started_before_its_database_waits_for_it() -> anyhow::Result<()> {
    let server = ra_ledger_tests::stack::private_postgres()?;
    let database = TestDatabase::on(&server.admin_url()).await?;
    let mut topics = TestTopics::new();
    let config = framed_config(
        &database,
        &mut topics,
        ra_ledger_cdc::config::DeliveryMode::AtLeastOnce,
        &["assignment"],
    )
    .await?;
    let subject = value_subject(&config.topic("assignment"));
    server.stop_and_wait()?;
    let relay = RunningRelay::start(config.clone());
    // The relay registers, then finds the server refusing connections: it must wait.
    let deadline = Instant::now() + Duration::from_secs(60);
    while SchemaRegistry::new(&config.schema_registry_url.clone().unwrap_or_default())?
        .look_up(&subject, EVENTS_PROTO)
        .await?
        .is_none()
    {
        anyhow::ensure!(Instant::now() < deadline, "the relay never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.start()?;
    let recorded = until_recorded(&database, &config.slot, &subject).await;
    anyhow::ensure!(
        !relay.task.is_finished(),
        "the relay stopped while its database was down: {recorded:?}"
    );
    assert!(recorded? > 0);
    relay.stop().await?;
    Ok(())
}
