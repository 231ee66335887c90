//! `ledger serve`'s gauges: every round, one task reads the relay's slot (how far behind,
//! and whether the server still keeps its WAL) and the outbox ([`crate::lag`]), the parked
//! messages and, with digests on, whether changes wait for a digest; it sets
//! [`ServiceMetrics`] (served on the service's `/metrics`) and records a sample of the lag
//! history ([`crate::lag::history`]).
//!
//! From the database: these gauges go on telling the truth while the relay is down or
//! frozen, when its own vanish or stand still. Between rounds, [`follow_relay`] reads the
//! relay's own report of its lag five times a second, so the age of the oldest unpublished
//! commit is the relay's figure while it streams ([`crate::lag::exact`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use crate::lag;
use crate::metrics::{RelayRead, ServiceGauges, ServiceMetrics};

/// How often the gauges are read when outbox retention is off (else at its interval,
/// whose marks they read).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// What the task needs.
#[derive(Debug, Clone)]
pub struct Gauges {
    /// The relay's slot.
    pub slot: String,
    /// Time between rounds, and the lag history's bucket.
    pub interval: Duration,
    /// Whether this service seals digests (else their gauge is left out).
    pub digests: bool,
}

/// Reads the gauges every `gauges.interval` until `shutdown`; a failed round is logged and
/// the next one tries again.
pub async fn run(
    pool: Pool,
    gauges: Gauges,
    metrics: Arc<ServiceMetrics>,
    shutdown: CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(gauges.interval, shutdown);
    while every.tick().await {
        match round(&pool, &gauges).await {
            Ok(read) => metrics.read(read),
            Err(error) => {
                tracing::warn!(%error, "cannot read the lag gauges; trying again next round")
            }
        }
    }
}

/// How often [`follow_relay`] reads the relay's report: the relay writes it as often, so
/// the service's gauge trails the relay's own by well under a second.
pub const RELAY_READ_EVERY: Duration = Duration::from_millis(200);

/// Reads the relay's report of its lag and whether a relay streams, every
/// [`RELAY_READ_EVERY`] until `shutdown`, for the gauge between rounds
/// ([`crate::lag::exact`]). A failed read is logged once in a while; the gauge falls back
/// to the bound once the last reading is stale.
pub async fn follow_relay(
    pool: Pool,
    slot: String,
    metrics: Arc<ServiceMetrics>,
    shutdown: CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(RELAY_READ_EVERY, shutdown);
    let mut failures = 0u64;
    while every.tick().await {
        let read = match pool.get().await {
            Ok(client) => lag::relay_report(&client, &slot)
                .await
                .map_err(GaugeError::from),
            Err(error) => Err(GaugeError::from(error)),
        };
        match read {
            Ok(Some((streaming, report))) => metrics.relay_read(RelayRead {
                read_at: Utc::now(),
                streaming,
                report,
            }),
            Ok(None) => {}
            Err(error) => {
                // Five reads a second: one line in fifty is plenty.
                if failures.is_multiple_of(50) {
                    tracing::warn!(%error, "cannot read the relay's lag report; trying again");
                }
                failures += 1;
            }
        }
    }
}

/// One round: the gauges read, and the lag sample recorded.
pub async fn round(pool: &Pool, gauges: &Gauges) -> Result<ServiceGauges, GaugeError> {
    let client = pool.get().await?;
    let slot = lag::slot_progress(&client, &gauges.slot).await?;
    lag::history::record(&client, slot.as_ref(), gauges.interval).await?;
    let row = client
        .query_one(include_str!("sql/lag/gauges.sql"), &[])
        .await?;
    let dirty: bool = row.get(1);
    let last_sealed: Option<DateTime<Utc>> = row.get(2);
    Ok(ServiceGauges {
        read_at: Utc::now().timestamp(),
        slot,
        parked_waiting: row.get(0),
        unsealed_since: gauges.digests.then(|| last_sealed.filter(|_| dirty)),
    })
}

/// The gauges could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GaugeError {
    /// No connection.
    #[error("cannot connect to the ledger database: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("reading the lag gauges failed: {}", crate::db::describe(.0))]
    Query(#[from] tokio_postgres::Error),
}
