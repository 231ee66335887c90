//! The end-to-end watcher (issue 55, item 7): a task of `ledger serve` that compares, round
//! after round, what the ledger committed (`events`) with what Kafka's event topics hold,
//! as a `read_committed` consumer, and says within seconds when a committed event older
//! than the lag bound is not there, whatever the cause: a path nobody listed, a relay that
//! confirmed what Kafka never acknowledged, a topic deleted and re-created, records
//! deleted. It trusts nothing the relay writes (not the slot, not its reports): only the
//! records it reads.
//!
//! # How a round decides
//!
//! 1. **What is closed.** A position is *closed* once every transaction that could still
//!    commit an event at or below it ended: the last position handed out, read before a
//!    fresh transaction id (the fence, `sql/watcher/last_position.sql`), closes once no
//!    transaction below the fence is in progress, a round or two later. `position` is an
//!    identity: ordered, but a rolled-back insert leaves a hole, and a hole is no gap on
//!    Kafka. Only closed positions settle, so an event that commits late below events
//!    already settled is never skipped. (A writer outside the ledger's write path, a
//!    hand-made `INSERT`, takes its transaction id only as it inserts: for the microseconds
//!    between its position and its id, the fence does not wait for it.)
//! 2. **Kafka's partitions** with their log start and end; [`losses`] compares them with
//!    what was counted: a topic deleted or re-created, or records deleted, is a *rescan*
//!    (every topic read again from its start, the watermark back to 0).
//! 3. **The window** ([`window`]): the committed events above the watermark, at most
//!    `window` of them, read from `events` with whether each is older than the lag bound by
//!    the database's clock. A load that ran once positions up to `closed` were closed
//!    brought every event up to there, so the next starts above it: each event is read
//!    about once, and only the young unread ones below it are asked their age again.
//! 4. **The records** from where each partition's read stands to the end it had in step 2,
//!    headers only (the `id` header; values may be protobuf, JSON or framed for a schema
//!    registry). An id read marks its pending event; one not pending waits *ahead* (its
//!    event not loaded yet) until the database says it is a copy of a settled event.
//! 5. **The verdict** ([`crate::reconcile::classify_missing`], shared with `ledger
//!    reconcile`): an event no record was read of is parked when `outbox_parked` holds it,
//!    else lost when it is *due* (older than the lag bound, loaded at least
//!    [`COMMIT_GRACE`] ago, and every partition was read to its end), else unseen. Lost events go to `watcher_missing`; a record of one read
//!    later takes it out. The watermark moves over what settled.
//! 6. **Progress** in one transaction (migration V21): the watermark, and per partition
//!    where a restart resumes ([`window::Window::checkpoint`]: before every record of an
//!    event not settled), so a restart re-reads at most the records of the events above
//!    the watermark.
//!
//! # Why a rescan, not a record count
//!
//! Comparing counts per partition would see that records went, not which events they
//! carried; keeping which would be a copy of the topics in the database. A rescan re-reads
//! what Kafka still holds, with the same bounded window, and the events no record is found
//! of are missing: sound for any removal, and paid only when an admin removed something.
//! The event topics keep everything by default (`retention.ms=-1`); one given a retention
//! makes each segment Kafka deletes a rescan that finds its events missing, which is true:
//! Kafka no longer holds them.
//!
//! # Bounded memory, one watcher at a time
//!
//! At most `window` events and as many ids read ahead are held (16 bytes each and a map's
//! overhead: about 10 MB at the default 100,000); an id read past that is dropped and its
//! partition read again once the window moved ([`window`]). A round reads at most `window`
//! records. Replicas of `ledger serve` run one watcher: the one holding a session advisory
//! lock; the others read its findings from the tables for their gauges, and take over
//! when its connection goes.

mod kafka;
pub mod losses;
pub mod metrics;
mod round;
pub mod window;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use ra_ledger_cdc::config::RelayConfig;
use tokio_util::sync::CancellationToken;

use self::metrics::{WatcherGauges, WatcherMetrics};
use self::round::Watcher;

/// How old a committed event may be before Kafka must hold it, by default: the relay's
/// normal lag, a broker's restart and a loaded machine stay well under it.
pub const DEFAULT_LAG_BOUND: Duration = Duration::from_secs(60);
/// How long an event stays not due after the watcher first loaded it, whatever its
/// `recorded_at`: a transaction that ran long commits events already older than the lag
/// bound, and the relay gets this long after the commit to deliver them (5 s is well above
/// its commit-to-acknowledgement time). A restart delays a finding by as much.
pub const COMMIT_GRACE: Duration = Duration::from_secs(5);
/// Time between rounds, by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Events held above the watermark, and ids read ahead, by default.
pub const DEFAULT_WINDOW: usize = 100_000;

/// What the watcher needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The relay's settings: its topics and how to reach Kafka.
    pub relay: RelayConfig,
    /// How old a committed event may be before Kafka must hold it.
    pub lag_bound: Duration,
    /// Time between rounds.
    pub interval: Duration,
    /// Events held above the watermark (and ids read ahead).
    pub window: usize,
}

/// Why a round could not finish (the next one tries again).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The ledger database failed.
    #[error("ledger database: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No connection.
    #[error("cannot connect to the ledger database: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Kafka failed.
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The consumer's settings.
    #[error("{0}")]
    Settings(#[from] ra_ledger_cdc::infra::settings::ConfigError),
}

/// Runs the watcher every `settings.interval` until `shutdown`: rounds while this replica
/// holds the lock, else the findings of the one that does, read for the gauges.
pub async fn run(
    pool: Pool,
    settings: Settings,
    metrics: Arc<WatcherMetrics>,
    shutdown: CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(settings.interval, shutdown);
    let mut watcher: Option<Watcher> = None;
    while every.tick().await {
        if watcher.is_none() {
            match Watcher::start(&pool, &settings).await {
                Ok(Some(started)) => {
                    tracing::info!(
                        watermark = started.watermark(),
                        lag_bound = ?settings.lag_bound,
                        "this replica runs the watcher"
                    );
                    watcher = Some(started);
                }
                Ok(None) => {
                    match standby(&pool).await {
                        Ok(gauges) => metrics.read(gauges),
                        Err(error) => {
                            tracing::warn!(%error, "cannot read the watcher's findings");
                        }
                    }
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "the watcher cannot start; trying again next round");
                    metrics.failed();
                    continue;
                }
            }
        }
        let Some(running) = watcher.as_mut() else {
            continue;
        };
        match running.round().await {
            Ok(gauges) => metrics.read(gauges),
            Err(error) => {
                tracing::warn!(%error, "a watcher round failed; resuming from its last progress");
                metrics.failed();
                // Its lock goes with its connection; the next round starts again from the
                // progress saved.
                watcher = None;
            }
        }
    }
}

/// The findings of the replica that runs the watcher, from its tables.
async fn standby(pool: &Pool) -> Result<WatcherGauges, WatchError> {
    let client = pool.get().await?;
    let findings = findings(&client).await?;
    Ok(WatcherGauges {
        missing: findings.missing,
        watermark: findings.watermark.unwrap_or(0),
        pending: 0,
        round_at: findings.round_at.unwrap_or(0.0),
        rescans: findings.rescans,
        active: false,
    })
}

/// What the watcher's tables say, for the gauges of a replica that does not run it and
/// for the console.
#[derive(Debug, Clone, PartialEq)]
pub struct Findings {
    /// Events missing.
    pub missing: i64,
    /// The watermark; `None` before the watcher's first round (or with it off).
    pub watermark: Option<i64>,
    /// When its last round ended, Unix seconds.
    pub round_at: Option<f64>,
    /// Rescans so far.
    pub rescans: i64,
    /// Why the last rescan was.
    pub last_rescan: Option<String>,
}

/// Reads [`Findings`].
pub async fn findings(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Findings, tokio_postgres::Error> {
    let row = client
        .query_one(include_str!("../sql/watcher/gauges.sql"), &[])
        .await?;
    Ok(Findings {
        missing: row.get("missing"),
        watermark: row.get("watermark"),
        round_at: row.get("round_at"),
        rescans: row.get::<_, Option<i64>>("rescans").unwrap_or(0),
        last_rescan: row.get("last_rescan"),
    })
}
