//! Schema migrations: the numbered SQL files in `migrations/`, embedded in the binary.
//!
//! `ledger migrate` and every service start call [`run`]. Applying is idempotent (refinery
//! records what ran in `refinery_schema_history`), and a PostgreSQL advisory lock makes
//! concurrent starters take turns, so two processes never apply the same migration.

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
}

/// What `ledger migrate` and every service start do: apply pending migrations, then create
/// the relay's slot (`LEDGER_RELAY_SLOT`, default [`DEFAULT_RELAY_SLOT`]) when missing.
/// A role that may not create it gets a warning that says what is lost.
pub async fn prepare(database_url: &str) -> Result<MigrationReport, MigrateError> {
    let mut client = crate::db::connect(database_url, "ledger-migrate").await?;
    let report = run(&mut client).await?;
    let slot = std::env::var("LEDGER_RELAY_SLOT").unwrap_or_else(|_| DEFAULT_RELAY_SLOT.to_owned());
    match ensure_relay_slot(&client, &slot).await {
        Ok(true) => tracing::info!(%slot,
            "created the relay's replication slot; the outbox is captured from now on"),
        Ok(false) => {}
        Err(error) => tracing::warn!(
            %slot, %error,
            "cannot create the relay's replication slot (does the role have REPLICATION?); \
             outbox rows committed before the relay first runs will not be published"
        ),
    }
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
pub async fn run(client: &mut Client) -> Result<MigrationReport, MigrateError> {
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

/// Names of all embedded migrations, in order.
pub fn embedded() -> Vec<String> {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|migration| format!("V{}__{}", migration.version(), migration.name()))
        .collect()
}

/// Default name of the relay's logical replication slot.
pub const DEFAULT_RELAY_SLOT: &str = ra_ledger_cdc::config::local::SLOT;

/// Creates the relay's logical replication slot when it is missing, so every outbox row
/// committed from now on is kept for the relay even if it has never run: rows committed
/// before a slot exists are never in it. Returns whether it created the slot.
pub async fn ensure_relay_slot(client: &Client, slot: &str) -> Result<bool, tokio_postgres::Error> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .is_some();
    if exists {
        return Ok(false);
    }
    match client
        .query_one(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
    {
        Ok(_) => Ok(true),
        // Another process created it a moment ago.
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// Grants a relay role exactly what the relay needs in this database: read the outbox,
/// park refused messages. The role itself (LOGIN REPLICATION) is created by the operator;
/// it can read nothing else, and write nothing but `outbox_parked`.
pub async fn grant_relay_role(client: &Client, role: &str) -> Result<(), tokio_postgres::Error> {
    let role = quote_identifier(role);
    client
        .batch_execute(&format!(
            "GRANT SELECT ON outbox TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON outbox_parked TO {role};"
        ))
        .await
}

/// Quotes an SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
