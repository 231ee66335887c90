//! The relay's connections to PostgreSQL, one room that every part of the relay uses and
//! that uses none of them (issue 58, item 1: `setup` and `recover` each reached into the
//! other for these): which host of the URL is the primary, the SQL connection to it, whether
//! a replication session's server is in recovery, and the replication stream's settings.
//! supabase/etl's `PgReplicationClient` is the model: it owns connections and uses neither
//! apply nor table sync.

use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig};
use tokio_postgres::Client;
use tracing::warn;

use super::RelayError;
use crate::config::RelayConfig;
use crate::infra::pg::{self, ReplicationTarget, Settings};

/// How long one host of the URL may take to answer before the next is tried.
const HOST_TIMEOUT: Duration = Duration::from_secs(10);

/// The first host of the URL that is not in recovery, its SQL connection, and the other
/// hosts (the standbys).
pub(super) async fn find_primary(
    config: &RelayConfig,
    application_name: &str,
) -> Result<(Settings, Client, Vec<Settings>), RelayError> {
    let settings = pg::config(&config.database_url, application_name)
        .map_err(|error| RelayError::Url(error.to_string()))?;
    let hosts = settings.hosts();
    let mut failures = Vec::new();
    for (index, host) in hosts.iter().enumerate() {
        let connected = tokio::time::timeout(HOST_TIMEOUT, pg::connect(host)).await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(error)) if hosts.len() == 1 => return Err(error.into()),
            Ok(Err(error)) => {
                failures.push(format!("{}: {}", pg::target(host), pg::explain(&error)));
                continue;
            }
            Err(_) => {
                failures.push(format!(
                    "{}: no answer in {HOST_TIMEOUT:?}",
                    pg::target(host)
                ));
                continue;
            }
        };
        let recovering: bool = client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await?
            .get(0);
        if recovering {
            failures.push(format!("{}: a standby (in recovery)", pg::target(host)));
            continue;
        }
        let standbys = hosts
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != index)
            .map(|(_, host)| host.clone())
            .collect();
        return Ok((host.clone(), client, standbys));
    }
    if hosts.len() > 1 {
        warn!(hosts = %failures.join("; "), "no host of the database URL is a read-write primary");
    }
    Err(RelayError::NotPrimary {
        target: failures.join("; "),
    })
}

/// Whether the server of a gated replication session is in recovery (a standby).
pub(super) async fn in_recovery(replication: &mut ReplicationClient) -> Result<bool, RelayError> {
    let rows = replication
        .simple_query("SELECT pg_is_in_recovery()")
        .await?;
    let value = rows
        .first()
        .and_then(|row| row.first())
        .and_then(|value| value.as_deref());
    Ok(value == Some(b"t".as_slice()))
}

/// The relay's SQL connection to the URL's first host (the republisher's, which needs no
/// primary check: it only reads and updates `outbox_parked`).
pub(super) async fn connect_sql(
    config: &RelayConfig,
    application_name: &str,
) -> Result<Client, RelayError> {
    let (_, client, _) = find_primary(config, application_name).await?;
    Ok(client)
}

/// How soon PostgreSQL hears of a position the relay confirmed: the replication worker sends
/// a newer position once this long has passed since its last status update, instead of
/// waiting out `status_interval_ms`, which now paces only the updates that repeat an
/// unchanged position. Waiting out that second was most of what the slot trailed Kafka by,
/// and so most of the duplicates a kill -9 costs (issue 50, item 12; docs/benchmarks.md).
/// While Kafka keeps up the slot moves at each publication check (every 200 ms, see
/// `publication::CHECK_INTERVAL`); at least once raises it at most about 25 times a second
/// (a position record every 50 ms and the checks), exactly once at most once per Kafka
/// transaction. So this bounds the wait more than the rate: at most 100 status updates a
/// second whatever happens.
pub(super) const STATUS_PROMPT: Duration = Duration::from_millis(10);

/// The replication stream's settings, to the same host as the SQL connection.
pub(super) fn replication_config(
    config: &RelayConfig,
    primary: &Settings,
    application_name: &str,
) -> ReplicationConfig {
    ReplicationTarget::of(primary)
        .stream(config.slot.clone(), &config.publication)
        // Zero: start where the slot confirmed, so nothing unacknowledged is skipped.
        .with_start_lsn(Lsn::ZERO)
        .with_status_interval(Duration::from_millis(config.status_interval_ms))
        .with_min_status_interval(STATUS_PROMPT)
        .with_wakeup_interval(Duration::from_secs(1))
        .with_binary(config.pgoutput_binary)
        .with_application_name(application_name)
}
