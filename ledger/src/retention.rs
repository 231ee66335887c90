//! Outbox retention: rows the relay has published are removed in bounded batches, and
//! never before the relay recorded that Kafka holds them.
//!
//! Why batched deletes rather than time partitions dropped whole: a partition could only be
//! dropped once every row in it is in Kafka, which needs each row's commit position, and
//! rows do not know it (ids are not commit order). Partitioning would also split the
//! `event_id` unique index (a unique index must include the partition key) and need
//! `publish_via_partition_root` on the publication. Batched deletes keep one plain table;
//! autovacuum hands the space back to new rows, so the table's size follows the backlog the
//! relay has not published, not the ledger's age.
//!
//! What retention deletes on is the relay's own record, `relay_slots.published_lsn`
//! (migration V20): Kafka holds every outbox row committed below it. The relay alone writes
//! it, after Kafka acknowledged, under the slot registration it streams with and while that
//! registration is ready, and with the server's system identifier. Not the slot's confirmed
//! position, which others write: PostgreSQL puts a new slot's at its consistent point before
//! the snapshot's rows are in Kafka, and a DBA's `pg_replication_slot_advance` or a peek
//! moves it. Both once deleted committed rows that never reached Kafka (issue 55, item 1).
//!
//! Rows are matched to that record through marks (see migration V6): a mark taken at one
//! moment names the oldest transaction then running and the WAL position after it. When the
//! record passes a mark, every row of an older transaction is in Kafka. Each [`prune`]
//! removes what the newest such mark covers, then takes a new mark.
//!
//! `outbox_parked` is never purged: an operator decides what becomes of a parked row.

use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

/// Most rows one delete statement removes: short transactions, short locks.
pub const DEFAULT_BATCH: i64 = 5_000;

/// How often `ledger serve` prunes, by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// What one [`prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// What the relay recorded Kafka holds (`relay_slots.published_lsn`); `None` while its
    /// registration is not ready, has no record yet or is of another server, and then
    /// nothing is removed.
    pub published: Option<String>,
    /// The mark the removal went up to, when the slot had passed one.
    pub through: Option<String>,
    /// Rows removed.
    pub removed: u64,
    /// Delete statements run.
    pub batches: u32,
}

/// Where retention stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Rows in the outbox.
    pub rows: i64,
    /// The outbox's size on disk, indexes and TOAST included, in bytes.
    pub bytes: i64,
    /// Marks kept: those the relay's record has not passed yet, and the newest one it has (kept so
    /// the console can tell which rows are published, [`crate::lag`]).
    pub marks: i64,
    /// The oldest of them.
    pub oldest_mark: Option<String>,
    /// Rows the relay parked (never removed by retention).
    pub parked: i64,
}

/// Removes the outbox rows the relay of slot `slot` recorded Kafka holds, `batch` rows per
/// statement, then takes a new mark. Safe to run from several processes at once.
pub async fn prune(pool: &Pool, slot: &str, batch: i64) -> Result<Pruned, RetentionError> {
    let client = pool.get().await?;
    let published: Option<String> = client
        .query_opt(
            include_str!("sql/retention/published_position.sql"),
            &[&slot],
        )
        .await?
        .and_then(|row| row.get(0));
    let mut pruned = Pruned {
        published: published.clone(),
        ..Pruned::default()
    };
    if let Some(published) = published {
        let mark = client
            .query_opt(include_str!("sql/retention/usable_mark.sql"), &[&published])
            .await?;
        if let Some(mark) = mark {
            let lsn: String = mark.get(0);
            let mut after = 0_i64;
            loop {
                let row = client
                    .query_one(
                        include_str!("sql/retention/delete_published.sql"),
                        &[&lsn, &after, &batch],
                    )
                    .await?;
                let removed: i64 = row.get(0);
                after = row.get(1);
                pruned.removed += removed as u64;
                pruned.batches += 1;
                if removed < batch {
                    break;
                }
            }
            client
                .execute(include_str!("sql/retention/forget_marks.sql"), &[&lsn])
                .await?;
            pruned.through = Some(lsn);
        }
    }
    client
        .execute(
            include_str!("sql/retention/take_mark.sql"),
            &[&pruned.through],
        )
        .await?;
    Ok(pruned)
}

/// Rows, size and marks of the outbox.
pub async fn status(pool: &Pool) -> Result<Status, RetentionError> {
    let client = pool.get().await?;
    let row = client
        .query_one(include_str!("sql/retention/status.sql"), &[])
        .await?;
    Ok(Status {
        rows: row.get(0),
        bytes: row.get(1),
        marks: row.get(2),
        oldest_mark: row.get(3),
        parked: row.get(4),
    })
}

/// Prunes every `interval` until `shutdown`; a failed round is logged and retried at the
/// next one. A missing slot is logged once, not every round.
pub async fn run(
    pool: Pool,
    slot: String,
    interval: Duration,
    batch: i64,
    shutdown: CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(interval, shutdown);
    let mut warned_missing = false;
    while every.tick().await {
        match prune(&pool, &slot, batch).await {
            Ok(pruned) if pruned.published.is_none() => {
                if !warned_missing {
                    tracing::warn!(
                        %slot,
                        "outbox retention waits: the relay has not recorded that Kafka holds \
                         anything under a ready registration of this slot on this server (no \
                         relay yet, or a snapshot being published), so no row is removed"
                    );
                    warned_missing = true;
                }
            }
            Ok(pruned) => {
                warned_missing = false;
                if pruned.removed > 0 {
                    tracing::info!(
                        removed = pruned.removed,
                        batches = pruned.batches,
                        through = pruned.through.as_deref().unwrap_or_default(),
                        published = pruned.published.as_deref().unwrap_or_default(),
                        "outbox rows the relay recorded Kafka holds were removed"
                    );
                }
            }
            Err(error) => tracing::warn!(%error, "outbox retention failed; retrying next round"),
        }
    }
}

/// Retention could not reach or query the database.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// No connection.
    #[error("cannot connect to the ledger database: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("outbox retention query failed: {}", crate::db::describe(.0))]
    Query(#[from] tokio_postgres::Error),
}
