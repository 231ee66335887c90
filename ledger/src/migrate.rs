//! Schema migrations: the numbered SQL files in `migrations/`, embedded in the binary.
//!
//! `ledger migrate` and every service start call [`run`]. Applying is idempotent (refinery
//! records what ran in `refinery_schema_history`), and a PostgreSQL advisory lock makes
//! concurrent starters take turns, so two processes never apply the same migration.

use ra_ledger_cdc::infra::entry::Entry;
use tokio_postgres::Client;

refinery::embed_migrations!("../migrations");

/// Advisory lock key held while migrating ("RALEDGER" in ASCII). Advisory locks are scoped
/// to the current database, so each database migrates independently.
pub const MIGRATION_LOCK_KEY: i64 = 0x5241_4c45_4447_4552;

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Migrations applied by this run, as `V<version>__<name>`.
    pub applied: Vec<String>,
}

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Taking or releasing the advisory lock failed.
    #[error("could not take the migration lock: {0}")]
    Lock(#[source] tokio_postgres::Error),
    /// A migration failed; refinery rolled it back.
    #[error("migration failed: {}", cause(.0))]
    Apply(#[source] refinery::Error),
    /// The database cannot be reached.
    #[error(transparent)]
    Connect(#[from] crate::db::DbError),
    /// Migrations are pending and this role may not apply them.
    #[error(
        "the schema needs migrations {0:?}, and this role may not apply them: run `ledger migrate` as the owner role, then start again"
    )]
    NotOwner(Vec<String>),
}

/// What `ledger migrate` does: apply pending migrations.
///
/// It no longer creates the relay's slot (it did until issue 50): a slot created while
/// writers commit misses the transaction that commits during its creation. The relay
/// creates its first slot itself, with a snapshot whose outbox rows it publishes first
/// (`ra_ledger_cdc::relay::slot`), so no row committed before the relay first runs is
/// missed either way.
pub async fn prepare(database_url: &str) -> Result<MigrationReport, MigrateError> {
    let mut client = crate::db::connect(database_url, "ledger-migrate").await?;
    let report = run(&mut client).await?;
    if report.applied.is_empty() {
        tracing::info!("schema is up to date");
    }
    for name in &report.applied {
        tracing::info!(migration = %name, "applied");
    }
    Ok(report)
}

/// The migration that failed and PostgreSQL's reason (refinery alone says "db error").
fn cause(error: &refinery::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        match inner.downcast_ref::<tokio_postgres::Error>() {
            Some(database) => text.push_str(&format!(": {}", crate::db::describe(database))),
            None => text.push_str(&format!(": {inner}")),
        }
        source = inner.source();
    }
    text
}

/// Applies every pending migration, waiting for any other process migrating the same
/// database to finish first.
#[inline(never)]
pub fn run<'a>(client: &'a mut Client) -> Entry<'a, Result<MigrationReport, MigrateError>> {
    Box::pin(run_inner(client))
}

async fn run_inner(client: &mut Client) -> Result<MigrationReport, MigrateError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(MigrateError::Lock)?;
    let outcome = migrations::runner().run_async(client).await;
    // Release even when applying failed; the lock also dies with the session.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    let report = outcome.map_err(MigrateError::Apply)?;
    unlocked.map_err(MigrateError::Lock)?;
    Ok(MigrationReport {
        applied: report
            .applied_migrations()
            .iter()
            .map(|migration| format!("V{}__{}", migration.version(), migration.name()))
            .collect(),
    })
}

/// What a service does at start: nothing when the schema is current (no DDL, so a role
/// without CREATE, as `ledger grant app` sets up, can start), else apply the pending
/// migrations, which needs the owner role.
pub async fn prepare_service(database_url: &str) -> Result<MigrationReport, MigrateError> {
    let client = crate::db::connect(database_url, "ledger-migrate").await?;
    let pending = pending(&client).await.map_err(MigrateError::Lock)?;
    if pending.is_empty() {
        tracing::info!("schema is up to date");
        return Ok(MigrationReport {
            applied: Vec::new(),
        });
    }
    drop(client);
    tracing::info!(pending = ?pending, "applying pending migrations");
    prepare(database_url).await.map_err(|error| match error {
        MigrateError::Apply(_) if privilege_refused(&error) => MigrateError::NotOwner(pending),
        other => other,
    })
}

fn privilege_refused(error: &MigrateError) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        if inner
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
            == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
        {
            return true;
        }
        source = inner.source();
    }
    false
}

/// Embedded migrations the database has not applied yet.
pub async fn pending(client: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let history = client
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )
        .await?
        .get::<_, bool>(0);
    let applied: Vec<i32> = if history {
        client
            .query("SELECT version FROM refinery_schema_history", &[])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect()
    } else {
        Vec::new()
    };
    Ok(migrations::runner()
        .get_migrations()
        .iter()
        .filter(|migration| !applied.contains(&migration.version()))
        .map(|migration| format!("V{}__{}", migration.version(), migration.name()))
        .collect())
}

/// Grants a role what `ledger serve` and `ledger worker` need, and nothing more: read the
/// ledger; append events and outbox rows; maintain the projections, the runs and the outbox
/// retention marks; remove published outbox rows; keep the end-to-end watcher's state
/// (V21). It gets no UPDATE, DELETE or TRUNCATE on
/// `events`, and owns nothing, so it cannot alter, drop or disable the triggers of any table,
/// nor create one. The role itself (LOGIN) is created by the operator.
pub async fn grant_app_role(client: &Client, role: &str) -> Result<(), tokio_postgres::Error> {
    let role = quote_identifier(role);
    let database: String = client
        .query_one("SELECT current_database()", &[])
        .await?
        .get(0);
    let database = quote_identifier(&database);
    client
        .batch_execute(&format!(
            "GRANT CONNECT ON DATABASE {database} TO {role}; \
             GRANT USAGE ON SCHEMA public TO {role}; \
             REVOKE CREATE ON SCHEMA public FROM {role}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT INSERT ON events, outbox, contacts, assignments, reassignment_runs, \
                   reassignment_pages, reassignment_failures, outbox_retention_marks, replays, \
                   lag_samples TO {role}; \
             GRANT UPDATE ON contacts, assignments, reassignment_runs, replays TO {role}; \
             GRANT DELETE ON outbox, outbox_retention_marks, lag_samples TO {role}; \
             GRANT INSERT ON digests, digest_leaf_changes, checkpoints, cosignatures, checkpoint_publications TO {role}; \
             GRANT INSERT, UPDATE ON witness_state TO {role}; \
             GRANT INSERT, UPDATE ON digest_leaves TO {role}; \
             GRANT INSERT, DELETE ON digest_dirty TO {role}; \
             GRANT INSERT, UPDATE, DELETE ON watcher_progress, watcher_partitions, \
                   watcher_missing TO {role}; \
             GRANT UPDATE (republish_requested_at, republish_requested_by) ON outbox_parked TO {role}; \
             REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON events FROM {role}; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .await
}

/// Names of all embedded migrations, in order.
pub fn embedded() -> Vec<String> {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|migration| format!("V{}__{}", migration.version(), migration.name()))
        .collect()
}

/// Grants a relay role exactly what the relay needs in this database: read the outbox,
/// park refused messages, keep its slot's registration and its record of what Kafka holds
/// (migrations V12, V17 and V20), report its lag (V18), record its schema ids (V22). The
/// role itself (LOGIN REPLICATION) is created by the operator; it can read nothing else, and
/// write nothing but `outbox_parked`, `relay_slots`, `relay_lag_reports` and
/// `relay_schema_ids`.
pub async fn grant_relay_role(client: &Client, role: &str) -> Result<(), tokio_postgres::Error> {
    let role = quote_identifier(role);
    client
        .batch_execute(&format!(
            "GRANT SELECT ON outbox TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON outbox_parked TO {role}; \
             GRANT SELECT, INSERT ON relay_slots TO {role}; \
             GRANT UPDATE (publication, publication_identity, heartbeats, ready, \
                           generation, published_lsn, published_system_id, published_at) \
                   ON relay_slots TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON relay_lag_reports TO {role}; \
             GRANT SELECT, INSERT ON relay_schema_ids TO {role};"
        ))
        .await
}

/// Quotes an SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
