//! `ledger projections rebuild`: replays the ledger into fresh tables, then either swaps
//! them in or (with `--verify`) compares them with the live projections.
//!
//! Both run in one transaction. Verify runs at one REPEATABLE READ snapshot and blocks
//! nobody. Rebuild takes every lock it needs before it replays, in the writers' order:
//! EXCLUSIVE on the projections (writers lock projection rows before they append), then
//! SHARE on `events`, so commands wait while it runs and no event can slip between the
//! replay and the swap; readers go on reading the old rows until the swap commits.
//!
//! Writers also update the projections after they append, so a writer caught between the
//! two can still close a cycle with a rebuild that is taking its locks. The locks are
//! therefore asked for with a short `lock_timeout` and taken again when one is not
//! granted: nothing is done yet, and the rebuild is the side that yields. Once held,
//! nothing more is waited for: the swap deletes the live rows (a TRUNCATE would need ACCESS
//! EXCLUSIVE, waited for behind readers and writers that hold the tables, the deadlock this
//! order avoids).

pub mod online;

use deadpool_postgres::{Object, Transaction};
use prost::Message as _;
use ra_ledger_cdc::infra::entry::Entry;
use ra_ledger_proto::v1;
use tokio_postgres::IsolationLevel;

use crate::projections::{self, ProjectionError};

/// Projection tables, in the order they are filled (contacts before the assignments that
/// reference them).
const TABLES: [&str; 2] = ["contacts", "assignments"];

/// What a rebuild did or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    /// Events replayed.
    pub events: u64,
    /// Rows that differ between rebuilt and live, per table (verify only).
    pub differences: Vec<(String, u64)>,
    /// A few differing row ids, for the operator to look at.
    pub examples: Vec<String>,
}

/// Why a rebuild failed.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The database failed.
    #[error("database error during rebuild: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// An event's payload does not decode.
    #[error("event at position {position} has an undecodable payload: {source}")]
    Decode {
        /// Position of the event.
        position: i64,
        /// The decoder's error.
        #[source]
        source: prost::DecodeError,
    },
    /// An event does not fit the projection being rebuilt.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// No connection.
    #[error("rebuild: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Another online rebuild holds the lock.
    #[error("another online rebuild is running on this database")]
    Busy,
    /// The rebuild must create tables the owner of the live ones owns.
    #[error(
        "an online rebuild creates the new tables: run it as the projections' owner {0} (as ledger migrate runs)"
    )]
    NotOwner(String),
    /// Other tables point at the projections; replacing their rows would break those keys,
    /// or delete the rows that hold them (`ON DELETE CASCADE`).
    #[error(
        "foreign keys of other tables reference the projections ({0}); a rebuild replaces \
         every projection row, which would break those keys or, with ON DELETE CASCADE, \
         delete the rows holding them. Nothing was changed: drop those keys (or point them \
         elsewhere), then rebuild"
    )]
    Referenced(String),
    /// Writers held the tables for every attempt.
    #[error("could not take the rebuild's brief lock in {0} attempts: writers held it each time")]
    LockUnavailable(u32),
}

/// Rebuilds the projections. With `verify_only`, compares instead of swapping and leaves the
/// live tables untouched. `progress(done, total)` is called every 10,000 events.
///
/// Takes a connection of its own: its statement cache is cleared before and after, since
/// the same statement text resolves to the temporary tables while the rebuild runs.
pub fn rebuild<'a>(
    client: &'a mut Object,
    verify_only: bool,
    progress: impl FnMut(u64, u64) + Send + 'a,
) -> Entry<'a, Result<RebuildReport, RebuildError>> {
    rebuild_boxed(client, verify_only, Box::new(progress))
}

/// [`rebuild`]'s future, made here ([`Entry`]).
#[inline(never)]
fn rebuild_boxed<'a>(
    client: &'a mut Object,
    verify_only: bool,
    mut progress: Box<dyn FnMut(u64, u64) + Send + 'a>,
) -> Entry<'a, Result<RebuildReport, RebuildError>> {
    Box::pin(async move {
        client.statement_cache.clear();
        let outcome = replay(client, verify_only, &mut progress).await;
        client.statement_cache.clear();
        outcome
    })
}

async fn replay(
    client: &mut Object,
    verify_only: bool,
    progress: &mut impl FnMut(u64, u64),
) -> Result<RebuildReport, RebuildError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await?;
    if !verify_only {
        take_locks(&tx).await?;
        // Under the EXCLUSIVE lock: no key can be added to the projections until commit.
        refuse_outside_references(&tx).await?;
    }
    for table in TABLES {
        // Temporary tables shadow the live ones for unqualified names in this session.
        tx.batch_execute(&format!(
            "CREATE TEMP TABLE {table} (LIKE public.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES) ON COMMIT DROP"
        ))
        .await?;
    }
    let total: i64 = tx
        .query_one("SELECT count(*) FROM events", &[])
        .await?
        .get(0);
    // A server-side cursor: fetch a bounded chunk, apply it on the same connection, repeat.
    tx.batch_execute("DECLARE replay NO SCROLL CURSOR FOR SELECT position, payload FROM events ORDER BY position")
        .await?;
    let mut events = 0u64;
    loop {
        let chunk = tx.query("FETCH 10000 FROM replay", &[]).await?;
        if chunk.is_empty() {
            break;
        }
        for row in chunk {
            let position: i64 = row.get(0);
            let payload: &[u8] = row.get(1);
            let envelope = v1::Envelope::decode(payload)
                .map_err(|source| RebuildError::Decode { position, source })?;
            projections::apply(&tx, &envelope).await?;
            events += 1;
        }
        progress(events, total as u64);
    }
    let mut report = RebuildReport {
        events,
        differences: Vec::new(),
        examples: Vec::new(),
    };
    if verify_only {
        (report.differences, report.examples) = differences(&tx, "pg_temp").await?;
        tx.rollback().await?;
    } else {
        tx.batch_execute(include_str!("../sql/tools/swap_projections.sql"))
            .await?;
        tx.commit().await?;
    }
    Ok(report)
}

/// Refuses, before anything is built, a rebuild of projections that other tables'
/// foreign keys reference (both rebuilds, offline and online, replace every row).
pub(crate) async fn refuse_outside_references(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<(), RebuildError> {
    let outside: Vec<String> = client
        .query(include_str!("../sql/tools/outside_references.sql"), &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if !outside.is_empty() {
        return Err(RebuildError::Referenced(outside.join(", ")));
    }
    Ok(())
}

/// Takes the rebuild's locks in `tx`, before its snapshot: EXCLUSIVE on the projections,
/// then SHARE on `events`. An attempt that waits longer than [`online::LOCK_TIMEOUT`] for
/// either (a writer holds one and waits for the other, or just holds it) is rolled back to
/// its savepoint, which releases what it took, and tried again after the writers queued
/// behind it went first.
async fn take_locks(tx: &Transaction<'_>) -> Result<(), RebuildError> {
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{}'",
        online::LOCK_TIMEOUT
    ))
    .await?;
    for attempt in 0..online::LOCK_ATTEMPTS {
        if attempt > 0 {
            online::back_off(attempt).await;
        }
        let locked = tx
            .batch_execute(
                "SAVEPOINT rebuild_locks; \
                 LOCK TABLE contacts, assignments IN EXCLUSIVE MODE; \
                 LOCK TABLE events IN SHARE MODE",
            )
            .await;
        match locked {
            Ok(()) => {
                tx.batch_execute(
                    "RELEASE SAVEPOINT rebuild_locks; SET LOCAL lock_timeout TO DEFAULT",
                )
                .await?;
                return Ok(());
            }
            Err(error) if online::lock_timed_out(&error) => {
                tx.batch_execute("ROLLBACK TO SAVEPOINT rebuild_locks")
                    .await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(RebuildError::LockUnavailable(online::LOCK_ATTEMPTS))
}

/// Rows that differ between the rebuilt projections in `schema` and the live ones, per
/// table, and a few of their ids.
async fn differences(
    client: &impl deadpool_postgres::GenericClient,
    schema: &str,
) -> Result<(Vec<(String, u64)>, Vec<String>), tokio_postgres::Error> {
    let mut differences = Vec::new();
    let mut examples = Vec::new();
    for (table, key) in [("contacts", "contact_id"), ("assignments", "assignment_id")] {
        let rows = client
            .query(
                &format!(
                    "SELECT {key}::text FROM ((TABLE {schema}.{table} EXCEPT TABLE public.{table}) \
                     UNION ALL (TABLE public.{table} EXCEPT TABLE {schema}.{table})) d"
                ),
                &[],
            )
            .await?;
        differences.push((table.to_owned(), rows.len() as u64));
        examples.extend(
            rows.iter()
                .take(5)
                .map(|row| format!("{table} {}", row.get::<_, String>(0))),
        );
    }
    Ok((differences, examples))
}
