//! Least privilege in PostgreSQL: the role `ledger grant app` sets up runs the whole flow
//! (API, worker, outbox retention) and cannot rewrite history, whatever it tries.

use std::time::Duration;

use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics, random_suffix};
use tokio_postgres::error::SqlState;

use crate::reassignment::{assert_all_moved, completed, seeded, supersede};

/// `url` as `role` with `password`.
fn as_role(url: &str, role: &str, password: &str) -> anyhow::Result<String> {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, hosts) = rest.split_once('@').expect("a URL with credentials");
    Ok(ra_ledger_cdc::infra::pg::with_password(
        &format!("{scheme}://{role}@{hosts}"),
        password,
    )?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_role_runs_the_flow_but_cannot_alter_drop_or_rewrite_events() -> anyhow::Result<()>
{
    let mut database = TestDatabase::new().await?;
    let admin = database.connect().await?;
    let (app, relay_role) = (
        format!("app_{}", random_suffix()),
        format!("relay_{}", random_suffix()),
    );
    admin
        .batch_execute(&format!(
            "CREATE ROLE {app} LOGIN PASSWORD 'app-password'; \
             CREATE ROLE {relay_role} LOGIN REPLICATION PASSWORD 'relay-password'"
        ))
        .await?;
    ra_ledger::migrate::grant_app_role(&admin, &app).await?;
    ra_ledger::migrate::grant_relay_role(&admin, &relay_role).await?;
    let admin_url = database.url.clone();
    let app_url = as_role(&admin_url, &app, "app-password")?;

    // The flow, every part as its own role: API and worker as the app role, the relay as
    // the relay role.
    let mut topics = TestTopics::new();
    let mut relay_config = test_config(&database, &mut topics).await?;
    relay_config.database_url = as_role(&admin_url, &relay_role, "relay-password")?.into();
    let slot = relay_config.slot.clone();
    let relay = RunningRelay::start(relay_config);
    database.url = app_url.clone();
    let worker = RunningWorker::start(worker::test_config(&database, &topics));
    let seeded = seeded(&database, 200).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!(status.replaced, 200, "{status:#?}");
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    worker.stop().await?;
    // Outbox retention as the app role: it takes a mark, reads the slot's position, and
    // removes the rows the relay confirmed (its heartbeats carry the slot past the mark).
    let pool = ra_ledger::db::pool(&app_url, "roles-test", 1)?;
    ra_ledger::retention::prune(&pool, &slot, 10_000).await?;
    let mut removed = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        removed += ra_ledger::retention::prune(&pool, &slot, 10_000)
            .await?
            .removed;
        if removed > 0 {
            break;
        }
    }
    assert!(removed > 0, "retention removed nothing as the app role");
    // Digests as the app role: the appends it made marked their streams (through the
    // trigger's SECURITY DEFINER function), and it may seal them.
    let key = ra_ledger::digest::DigestKey::from_seed(&[3; 32]);
    let built = ra_ledger::digest::build::build(&pool, &key).await?;
    assert!(
        matches!(
            built,
            ra_ledger::digest::build::Built::Sealed { seq: 1, .. }
        ),
        "{built:?}"
    );
    // With digests off it clears the marks appends leave, so they never pile up.
    let assigned = seeded
        .api
        .post(
            "/v1/assignments",
            serde_json::json!({"business_id": uuid::Uuid::now_v7(), "jurisdiction": "TX"}),
        )
        .await;
    assert!(assigned.status.is_success(), "{:?}", assigned.body);
    assert_eq!(ra_ledger::digest::build::clear_marks(&pool).await?, 1);
    relay.stop().await?;

    // What it must not do.
    let client = ra_ledger_tests::database::connect(&app_url).await?;
    let refused = [
        "UPDATE events SET payload = payload",
        "DELETE FROM events",
        "TRUNCATE events",
        "ALTER TABLE events DISABLE TRIGGER USER",
        "ALTER TABLE events DISABLE TRIGGER ALL",
        "DROP TABLE events",
        "DROP TABLE contacts",
        "ALTER TABLE contacts ADD COLUMN note text",
        "CREATE TABLE shadow (id int)",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "SET session_replication_role = replica",
        "UPDATE outbox SET payload = payload",
        "DELETE FROM contacts",
        "DELETE FROM assignments",
        "UPDATE outbox_parked SET error = error",
        "DELETE FROM refinery_schema_history",
        "UPDATE digests SET changed = 0",
        "DELETE FROM digests",
        "DELETE FROM digest_leaf_changes",
        "DELETE FROM checkpoints",
        "UPDATE checkpoints SET note = note",
        "DELETE FROM cosignatures",
        "DELETE FROM checkpoint_publications",
    ];
    for statement in refused {
        let error = client.batch_execute(statement).await.expect_err(statement);
        assert_eq!(
            error.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {}",
            ra_ledger_cdc::infra::pg::explain(&error)
        );
    }
    // Even with the triggers disabled by the owner, it still may not touch an event.
    admin
        .batch_execute("ALTER TABLE events DISABLE TRIGGER USER")
        .await?;
    for statement in ["UPDATE events SET payload = payload", "DELETE FROM events"] {
        let error = client.batch_execute(statement).await.expect_err(statement);
        assert_eq!(
            error.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}"
        );
    }
    admin
        .batch_execute("ALTER TABLE events ENABLE TRIGGER USER")
        .await?;

    // A service started as the app role does not migrate (no DDL) when the schema is
    // current, and says who must when it is not.
    ra_ledger::migrate::prepare_service(&app_url).await?;
    admin
        .batch_execute("DELETE FROM refinery_schema_history WHERE version = (SELECT max(version) FROM refinery_schema_history)")
        .await?;
    let error = ra_ledger::migrate::prepare_service(&app_url)
        .await
        .expect_err("a pending migration as the app role")
        .to_string();
    assert!(
        error.contains("run `ledger migrate` as the owner role"),
        "{error}"
    );
    Ok(())
}

/// Issue 56, item 2: the service's role used to write any `recorded_at`, and two events
/// backdated before a digest's time changed a proven "as known at" answer. The database
/// now writes its own clock reading, whatever the writer sent, and the honest path (which
/// hashes that reading) still leaves every chain intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_not_the_app_role_sets_recorded_at() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let admin = database.connect().await?;
    let app = format!("app_{}", random_suffix());
    admin
        .batch_execute(&format!("CREATE ROLE {app} LOGIN PASSWORD 'app-password'"))
        .await?;
    ra_ledger::migrate::grant_app_role(&admin, &app).await?;
    let client =
        ra_ledger_tests::database::connect(&as_role(&database.url, &app, "app-password")?).await?;

    let before: chrono::DateTime<chrono::Utc> = admin
        .query_one("SELECT clock_timestamp()", &[])
        .await?
        .get(0);
    let backdated: chrono::DateTime<chrono::Utc> = "2020-01-01T00:00:00Z".parse()?;
    let stream = format!("assignment-{}-TX", uuid::Uuid::now_v7());
    let recorded: chrono::DateTime<chrono::Utc> = client
        .query_one(
            "INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, \
             payload, recorded_at, effective_at, actor, correlation_id, hash) \
             VALUES (gen_random_uuid(), $1, 1, 'AssignmentStarted', 1, '\\x00', $2, $2, 'test', \
                     gen_random_uuid(), '\\x00') RETURNING recorded_at",
            &[&stream, &backdated],
        )
        .await?
        .get(0);
    let after: chrono::DateTime<chrono::Utc> = admin
        .query_one("SELECT clock_timestamp()", &[])
        .await?
        .get(0);
    assert!(
        before <= recorded && recorded <= after,
        "the app role sent recorded_at {backdated}; the row holds {recorded}, not the server's \
         time between {before} and {after}"
    );
    let stored: chrono::DateTime<chrono::Utc> = admin
        .query_one(
            "SELECT recorded_at FROM events WHERE stream = $1",
            &[&stream],
        )
        .await?
        .get(0);
    assert_eq!(stored, recorded);

    // Nobody changes it afterwards, not even the owner with the append-only trigger off.
    admin
        .batch_execute("ALTER TABLE events DISABLE TRIGGER events_append_only_rows")
        .await?;
    let refused = admin
        .execute(
            "UPDATE events SET recorded_at = $2 WHERE stream = $1",
            &[&stream, &backdated],
        )
        .await
        .expect_err("an UPDATE of recorded_at");
    admin
        .batch_execute("ALTER TABLE events ENABLE TRIGGER events_append_only_rows")
        .await?;
    assert_eq!(refused.code().map(|code| code.code()), Some("RAL01"));
    assert!(
        ra_ledger_cdc::infra::pg::explain(&refused).contains("recorded_at is set by the database"),
        "{}",
        ra_ledger_cdc::infra::pg::explain(&refused)
    );
    Ok(())
}
