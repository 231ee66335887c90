//! What a session needs before it streams: the SQL connection, the publication and the
//! slot (created when missing), the producer and the replication stream's settings.

use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationConfig};
use tokio_postgres::Client;
use tracing::{info, warn};

use super::RelayError;
use crate::config::RelayConfig;
use crate::infra::pg::{self, ReplicationTarget};

/// The relay's SQL connection (parking, heartbeats, checks), named for `pg_stat_activity`.
pub(super) async fn connect_sql(
    config: &RelayConfig,
    application_name: &str,
) -> Result<Client, RelayError> {
    let settings = pg::config(&config.database_url, application_name)
        .map_err(|error| RelayError::Url(error.to_string()))?;
    Ok(pg::connect(&settings).await?)
}

/// Creates the insert-only publication and the pgoutput slot when missing.
pub(super) async fn ensure_publication_and_slot(
    sql: &Client,
    config: &RelayConfig,
) -> Result<(), RelayError> {
    let publication_exists = sql
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&config.publication],
        )
        .await?
        .is_some();
    if !publication_exists {
        info!(publication = %config.publication, "creating the outbox publication");
        let created = sql
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
                config.publication
            ))
            .await;
        ignore_duplicate(created)?;
    }
    let slot_exists = sql
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .is_some();
    if !slot_exists {
        warn!(
            slot = %config.slot,
            "the replication slot is missing; creating it. Outbox rows committed before now are not in it: \
             `ledger migrate` creates the slot up front so this does not happen"
        );
        let created = sql
            .query_opt(
                "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&config.slot],
            )
            .await
            .map(|_| ());
        ignore_duplicate(created)?;
    }
    Ok(())
}

/// Another relay creating the same object at the same moment is fine.
fn ignore_duplicate(
    result: Result<(), tokio_postgres::Error>,
) -> Result<(), tokio_postgres::Error> {
    match result {
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {
            Ok(())
        }
        other => other,
    }
}

/// The replication stream's settings, from the same URL as the SQL connection.
pub(super) fn replication_config(
    config: &RelayConfig,
    application_name: &str,
) -> Result<ReplicationConfig, RelayError> {
    let settings = pg::config(&config.database_url, application_name)
        .map_err(|error| RelayError::Url(error.to_string()))?;
    Ok(ReplicationTarget::of(&settings)
        .stream(config.slot.clone(), &config.publication)
        // Zero: start where the slot confirmed, so nothing unacknowledged is skipped.
        .with_start_lsn(Lsn::ZERO)
        .with_status_interval(Duration::from_millis(config.status_interval_ms))
        .with_wakeup_interval(Duration::from_secs(1))
        .with_application_name(application_name))
}
