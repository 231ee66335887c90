//! What a session needs before it streams, the same for both delivery modes:
//!
//! 1. **The primary.** Of the URL's hosts, the first that is not in recovery (as libpq's
//!    `target_session_attrs=read-write`); the others are the standbys [`super::health`]
//!    watches. The SQL connection and the replication stream go to that one host.
//! 2. **Its identity.** A replication session held before `START_REPLICATION` (gated)
//!    answers `IDENTIFY_SYSTEM` (system identifier, timeline, WAL position) and, past
//!    timeline 1, `TIMELINE_HISTORY`: what [`crate::history`] checks a stored position
//!    against. It asks `pg_is_in_recovery()` on the same session, so a server promoted or
//!    demoted between the two connections is seen.
//! 3. **The slot and the publication** ([`super::slot`], [`super::publication`]): the
//!    first slot created with a snapshot whose rows are published first, a lost one
//!    refused; the publication carrying exactly the outbox, with the identity the slot's
//!    registration knows; with `slot_failover`, the standby gate decides first
//!    ([`super::gate`]): a failover slot behind a set gate, a slot whose failover is off
//!    while the primary has no standby (`without_standby = "stream"`), or a hold.
//! 4. **The stream**, started on the same session: the slot is held from then on. Who else
//!    holds it is read from `pg_replication_slots.active_pid`.

use pgwire_replication::ReplicationClient;
use tokio_postgres::Client;
use tracing::{info, warn};

use super::connect::{find_primary, in_recovery, replication_config};
use super::coverage::{self, Coverage};
use super::gate::{self, Gate, GateState};
use super::{RelayError, slot};
use crate::config::RelayConfig;
use crate::history::{self, Identity, Server};
use crate::infra::pg::{self, Settings};

/// A session's connections, on the primary, with the slot held.
pub(super) struct Opened {
    /// The SQL connection (parking, heartbeats, checks).
    pub sql: Client,
    /// The replication stream, started.
    pub replication: ReplicationClient,
    /// The server: identity, WAL position, history, and the slot's confirmed position
    /// once the stream started.
    pub server: Server,
    /// The primary's settings, for the health checks.
    pub primary: Settings,
    /// The other hosts of the URL, for the health checks.
    pub standbys: Vec<Settings>,
    /// What the publication's checks vouch for: how far the slot may be confirmed.
    pub coverage: Coverage,
    /// With `slot_failover`: how the session streams with respect to the standby gate.
    pub gate: Option<Gate>,
    /// The slot registration's generation: the session records what Kafka holds under it
    /// ([`super::published`]).
    pub generation: i64,
}

/// Connects to the primary, checks its identity and the slot, and starts the stream.
pub(super) async fn open(
    config: &RelayConfig,
    application_name: &str,
) -> Result<Opened, RelayError> {
    let (primary, sql, standbys) = find_primary(config, application_name).await?;
    let registration = registered_slot(config, &primary, &sql).await?;
    let (coverage, checked) = coverage::at_start(&sql, config, registration.as_ref()).await?;
    let (database, version) = database_and_version(&sql).await?;
    let mut replication =
        ReplicationClient::connect_gated(replication_config(config, &primary, application_name))
            .await?;
    let identity = replication.identify_system().await?;
    if in_recovery(&mut replication).await? {
        return Err(RelayError::NotPrimary {
            target: pg::target(&primary),
        });
    }
    let history = timeline_history(&mut replication, identity.timeline).await?;
    let gate = standby_gate(config, &sql, version).await?;
    slot::prepare(
        &sql,
        &mut replication,
        config,
        &database,
        &checked.identity,
        gate.map(Gate::failover),
    )
    .await?;
    replication.start().await?;
    if let Err(error) = replication.wait_started().await {
        // Another session took the slot between the check and the start.
        if let Some(pid) = slot::holder(&sql, &config.slot).await? {
            return Err(RelayError::SlotBusy {
                slot: config.slot.clone(),
                pid,
            });
        }
        return Err(error.into());
    }
    // Read once the slot is held: nothing else can move it now.
    let confirmed = slot::inspect(&sql, &config.slot)
        .await?
        .map_or(0, |state| state.confirmed());
    info!(
        server = %pg::target(&primary),
        system_id = %identity.system_id,
        timeline = identity.timeline,
        slot_confirmed = %crate::lsn::format_lsn(confirmed),
        standbys = standbys.len(),
        "streaming from the slot"
    );
    Ok(Opened {
        sql,
        replication,
        server: Server {
            identity: Identity {
                system_id: identity.system_id,
                timeline: identity.timeline,
                database,
            },
            wal_flush: identity.xlogpos.as_u64(),
            history,
            slot_confirmed: confirmed,
            heartbeats: registration
                .as_ref()
                .map_or(0, |registration| registration.heartbeats),
        },
        generation: registration.map_or(0, |registration| registration.generation),
        primary,
        standbys,
        coverage,
        gate,
    })
}

/// The slot's registration once the slot may be streamed from: a slot to create from a
/// snapshot ([`slot::decide`]: the first, or one whose snapshot a crash interrupted) is
/// created on `primary` and its snapshot published first.
async fn registered_slot(
    config: &RelayConfig,
    primary: &Settings,
    sql: &Client,
) -> Result<Option<slot::Registration>, RelayError> {
    let registration = slot::registration(sql, &config.slot).await?;
    let state = slot::inspect(sql, &config.slot).await?;
    let slot::Start::FromSnapshot { first } =
        slot::decide(&config.slot, state.as_ref(), registration.as_ref())?
    else {
        return Ok(registration);
    };
    if first {
        info!(slot = %config.slot, "creating the relay's first slot, with a snapshot: the outbox rows committed before it are published from the snapshot");
    } else {
        warn!(slot = %config.slot, "the slot's snapshot was not all published when its creation last stopped (a crash?): creating it again with a new snapshot, publishing what that holds");
    }
    let by = if first { "relay" } else { "recover" };
    super::recover::from_snapshot(
        config,
        &super::recover::RecoverOptions::default(),
        by,
        primary,
    )
    .await?;
    slot::registration(sql, &config.slot).await
}

/// The server's timeline history past timeline 1, as `TIMELINE_HISTORY` gives it.
async fn timeline_history(
    replication: &mut ReplicationClient,
    timeline: u32,
) -> Result<Vec<history::TimelineSwitch>, RelayError> {
    if timeline <= 1 {
        return Ok(Vec::new());
    }
    let file = replication.timeline_history(timeline).await?;
    history::parse_history(&String::from_utf8_lossy(&file.content)).ok_or_else(|| {
        RelayError::Catalog(format!("timeline history {} does not parse", file.filename))
    })
}

/// With `slot_failover`, how the session streams with respect to the standby gate
/// ([`super::gate`]); `None` without it.
async fn standby_gate(
    config: &RelayConfig,
    sql: &Client,
    version: i32,
) -> Result<Option<Gate>, RelayError> {
    if !config.slot_failover {
        return Ok(None);
    }
    slot::failover_supported(version)?;
    let state = GateState::read(sql).await?;
    let gate = state.decide(config.without_standby)?;
    if gate == Gate::WithoutStandby {
        warn!(slot = %config.slot, "{}", gate::streaming_without_standby(&state.named));
    }
    Ok(Some(gate))
}

/// The database's name and the server's `server_version_num`.
async fn database_and_version(sql: &Client) -> Result<(String, i32), RelayError> {
    let row = sql
        .query_one(
            "SELECT current_database(), current_setting('server_version_num')::int",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
