//! `ledger projections rebuild --online`: new projection tables built while writes go on,
//! swapped in by one short transaction.
//!
//! # How no event is missed or applied twice
//!
//! Events are read in windows of `position` (insertion order, which is not commit order). A
//! window ends at a `position` read while holding a SHARE lock on `events`: the lock waits
//! for every transaction that is inserting events to end and holds off new ones, so every
//! position up to that end belongs to a transaction that has committed or rolled back, and
//! every later insert gets a greater one. The window's events are then final: read without
//! a lock, applied once, never revisited. The lock is held only to read one number, and it
//! is asked for with a 50 ms `lock_timeout` (then retried), so a writer never waits long
//! behind it.
//!
//! 1. A first window up to the events' end at the start: the bulk, applied in chunks, each
//!    committed, into tables of their own (`projection_rebuild.contacts`, `.assignments`,
//!    made `LIKE` the live ones with their indexes, constraints, foreign keys and grants).
//! 2. Catch-up windows, until one holds fewer than [`SMALL_WINDOW`] events.
//! 3. One transaction: ACCESS EXCLUSIVE on the live projections (writers lock projection
//!    rows before they append, so this order cannot deadlock with them), SHARE on `events`,
//!    both with the 50 ms timeout; the last window; the live tables moved out and the new
//!    ones moved in (`ALTER TABLE ... SET SCHEMA`, no copy). Statements prepared on the old
//!    tables are re-planned by PostgreSQL on the new ones.
//!
//! With `--verify` the last window is read in a snapshot taken while another session held
//! the SHARE lock, so the live tables in that snapshot correspond exactly to the events up to
//! the window's end; the tables are compared there and nothing is swapped.
//!
//! A rebuild that fails or is killed leaves the live tables as they were; the next one
//! drops what the last one left in `projection_rebuild` and starts over.

use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Object, Pool};
use prost::Message as _;
use ra_ledger_proto::v1::{self, envelope::Event};
use tokio_postgres::IsolationLevel;

use super::{RebuildError, TABLES};
use crate::projections;

/// The schema the new tables are built in.
pub const SCHEMA: &str = "projection_rebuild";
/// Where the replaced tables go before they are dropped.
const RETIRED: &str = "projection_retired";
/// Advisory lock key: one online rebuild per database ("RALREBLD").
const REBUILD_LOCK_KEY: i64 = 0x5241_4c52_4542_4c44;
/// A catch-up window this small is left for the swap.
const SMALL_WINDOW: u64 = 2_000;
/// Catch-up windows at most, however busy the writers.
const MAX_CATCH_UP: u32 = 50;
/// How long a lock is waited for before giving up and trying again.
pub(super) const LOCK_TIMEOUT: &str = "50ms";
/// Attempts at each lock.
pub(super) const LOCK_ATTEMPTS: u32 = 200;

/// What an online rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnlineReport {
    /// Events applied in all.
    pub events: u64,
    /// Catch-up windows after the first.
    pub catch_up_windows: u32,
    /// Events applied in the swapping (or comparing) transaction.
    pub last_window: u64,
    /// How long the swapping transaction held its locks.
    pub swap_held: Duration,
    /// Lock attempts that timed out and were retried.
    pub lock_retries: u32,
    /// Time from the start to the end of the first window's bulk, and to the start of the
    /// swapping (or comparing) transaction.
    pub bulk_done: Duration,
    /// See `bulk_done`.
    pub last_window_started: Duration,
    /// Catch-up windows' ends: when one was asked for, and how long reading it took (the
    /// lock included).
    pub window_ends: Vec<(Duration, Duration)>,
    /// Rows that differ per table (with `verify_only`).
    pub differences: Vec<(String, u64)>,
    /// A few differing rows.
    pub examples: Vec<String>,
}

/// How an online rebuild paces itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnlineOptions {
    /// Compare with the live tables instead of swapping.
    pub verify_only: bool,
    /// Events read and applied per transaction.
    pub chunk: i64,
    /// After each chunk, pause this many times as long as the chunk took (0: full speed).
    /// The bulk competes with the writers for CPU, WAL and disk; pausing trades rebuild time
    /// for their latency.
    pub pause_ratio: f64,
}

impl Default for OnlineOptions {
    fn default() -> Self {
        Self {
            verify_only: false,
            chunk: 10_000,
            pause_ratio: 1.0,
        }
    }
}

/// What the rebuild is doing, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The first window: `done` of `total` events.
    Bulk,
    /// A catch-up window.
    CatchUp,
}

/// Rebuilds the projections while writes continue (see [`OnlineOptions`]). Must run as the owner of the projection tables (like `ledger migrate`).
/// `progress(phase, done, total)` is called after every chunk.
pub async fn rebuild_online(
    pool: &Pool,
    options: OnlineOptions,
    mut progress: impl FnMut(Phase, u64, u64),
) -> Result<OnlineReport, RebuildError> {
    let mut work = pool.get().await?;
    let locker = pool.get().await?;
    let locked: bool = work
        .query_one("SELECT pg_try_advisory_lock($1)", &[&REBUILD_LOCK_KEY])
        .await?
        .get(0);
    if !locked {
        return Err(RebuildError::Busy);
    }
    // The new tables are reached by their unqualified names, as the projections write them.
    work.statement_cache.clear();
    let outcome = run(&mut work, &locker, options, &mut progress).await;
    work.statement_cache.clear();
    let reset = work
        .batch_execute("RESET search_path; RESET lock_timeout; RESET synchronous_commit")
        .await;
    let unlocked = work
        .execute("SELECT pg_advisory_unlock($1)", &[&REBUILD_LOCK_KEY])
        .await;
    let report = outcome?;
    reset?;
    unlocked?;
    Ok(report)
}

async fn run(
    work: &mut Object,
    locker: &Object,
    options: OnlineOptions,
    progress: &mut impl FnMut(Phase, u64, u64),
) -> Result<OnlineReport, RebuildError> {
    let started = Instant::now();
    let deferred = prepare(work).await?;
    let deferred_keys: Vec<String> = deferred.iter().map(|(_, _, key)| key.clone()).collect();
    let deferred_names: Vec<(&str, String)> = deferred
        .iter()
        .map(|(table, name, _)| (*table, name.clone()))
        .collect();
    let mut report = OnlineReport::default();
    let mut from = 0i64;
    let (end, retries) = window_end(locker).await?;
    report.lock_retries += retries;
    let total = count(work, from, end).await?;
    report.events += apply_window(
        work,
        (from, end),
        (options.chunk, options.pause_ratio),
        |done| progress(Phase::Bulk, done, total),
    )
    .await?;
    report.bulk_done = started.elapsed();
    from = end;
    loop {
        let asked = started.elapsed();
        let (end, retries) = window_end(locker).await?;
        report.window_ends.push((asked, started.elapsed() - asked));
        report.lock_retries += retries;
        let applied = apply_window(
            work,
            (from, end),
            (options.chunk, options.pause_ratio),
            |done| progress(Phase::CatchUp, done, 0),
        )
        .await?;
        report.events += applied;
        report.catch_up_windows += 1;
        from = end;
        if applied < SMALL_WINDOW || report.catch_up_windows >= MAX_CATCH_UP {
            break;
        }
    }
    for table in TABLES {
        work.batch_execute(&format!("ANALYZE {SCHEMA}.{table}"))
            .await?;
    }
    report.last_window_started = started.elapsed();
    if options.verify_only {
        compare(work, locker, from, options.chunk, &mut report).await?;
        work.batch_execute(&format!(
            "SET client_min_messages = warning; DROP SCHEMA {SCHEMA} CASCADE; \
             RESET client_min_messages"
        ))
        .await?;
    } else {
        swap(work, from, options.chunk, &deferred_keys, &mut report).await?;
        drop_retired(work, &mut report).await?;
        // Checked against every row now, without blocking writers (SHARE UPDATE EXCLUSIVE).
        for (table, name) in &deferred_names {
            work.batch_execute(&format!(
                "ALTER TABLE public.{table} VALIDATE CONSTRAINT {}",
                quote_ident(name)
            ))
            .await?;
        }
    }
    Ok(report)
}

/// The new tables, empty, like the live ones: indexes, constraints, foreign keys (to each
/// other where the live ones point at each other), grants.
///
/// Returns the deferrable foreign keys, which are checked at commit: the bulk's chunks end
/// in the middle of the original transactions (a REPLACE ends one assignment pointing at the
/// next, started by the next event), so those keys are added only in the swapping
/// transaction, `NOT VALID`, and validated after it: (table, name, ADD statement).
async fn prepare(work: &Object) -> Result<Vec<(&'static str, String, String)>, RebuildError> {
    work.batch_execute("SET search_path = public").await?;
    let owner: String = work
        .query_one(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'public.contacts'::regclass",
            &[],
        )
        .await?
        .get(0);
    let may: bool = work
        .query_one(
            "SELECT pg_has_role(current_user, $1::text, 'USAGE')",
            &[&owner],
        )
        .await?
        .get(0);
    if !may {
        return Err(RebuildError::NotOwner(owner));
    }
    let outside: Vec<String> = work
        .query(
            "SELECT conname || ' on ' || conrelid::regclass FROM pg_constraint \
             WHERE contype = 'f' \
               AND confrelid IN ('public.contacts'::regclass, 'public.assignments'::regclass) \
               AND conrelid NOT IN ('public.contacts'::regclass, 'public.assignments'::regclass)",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if !outside.is_empty() {
        return Err(RebuildError::Referenced(outside.join(", ")));
    }
    // Definitions read with search_path = public: they name the projections unqualified,
    // so with the rebuild's schema first they point at the new tables.
    let mut foreign_keys = Vec::new();
    let mut deferred = Vec::new();
    let mut grants = Vec::new();
    for table in TABLES {
        for row in work
            .query(
                "SELECT conname, pg_get_constraintdef(oid), condeferrable FROM pg_constraint \
                 WHERE conrelid = $1::text::regclass AND contype = 'f' ORDER BY conname",
                &[&format!("public.{table}")],
            )
            .await?
        {
            let (name, definition, deferrable): (String, String, bool) =
                (row.get(0), row.get(1), row.get(2));
            // A key a killed rebuild left unvalidated is validated on the new tables.
            let definition = definition.trim_end_matches(" NOT VALID");
            let add = format!(
                "ALTER TABLE {SCHEMA}.{table} ADD CONSTRAINT {} {definition}",
                quote_ident(&name)
            );
            if deferrable {
                deferred.push((table, name, add));
            } else {
                foreign_keys.push(add);
            }
        }
        for row in work
            .query(
                "SELECT grantee, string_agg(privilege_type, ', ') \
                 FROM information_schema.role_table_grants \
                 WHERE table_schema = 'public' AND table_name = $1 AND grantee <> $2 \
                 GROUP BY grantee",
                &[&table, &owner],
            )
            .await?
        {
            let (grantee, privileges): (String, String) = (row.get(0), row.get(1));
            let grantee = if grantee == "PUBLIC" {
                grantee
            } else {
                quote_ident(&grantee)
            };
            grants.push(format!(
                "GRANT {privileges} ON {SCHEMA}.{table} TO {grantee}"
            ));
        }
    }
    work.batch_execute(&format!(
        "SET client_min_messages = warning; \
         DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP SCHEMA IF EXISTS {RETIRED} CASCADE; \
         RESET client_min_messages; \
         CREATE SCHEMA {SCHEMA}; \
         CREATE TABLE {SCHEMA}.contacts (LIKE public.contacts INCLUDING ALL); \
         CREATE TABLE {SCHEMA}.assignments (LIKE public.assignments INCLUDING ALL); \
         SET search_path = {SCHEMA}, public; \
         SET synchronous_commit = off"
    ))
    .await?;
    // LIKE names the copied indexes after their columns: give them the live ones' names,
    // matching by what they index.
    let mut renames = Vec::new();
    for table in TABLES {
        let indexes = |schema: &str| {
            format!(
                "SELECT c.relname, substr(pg_get_indexdef(i.indexrelid), \
                        strpos(pg_get_indexdef(i.indexrelid), ' USING ')), i.indisunique \
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE i.indrelid = '{schema}.{table}'::regclass"
            )
        };
        let live = work.query(&indexes("public"), &[]).await?;
        for row in work.query(&indexes(SCHEMA), &[]).await? {
            let (name, shape, unique): (String, String, bool) =
                (row.get(0), row.get(1), row.get(2));
            let twin = live
                .iter()
                .find(|live| live.get::<_, &str>(1) == shape && live.get::<_, bool>(2) == unique);
            if let Some(twin) = twin
                .map(|live| live.get::<_, String>(0))
                .filter(|twin| *twin != name)
            {
                renames.push(format!(
                    "ALTER INDEX {SCHEMA}.{} RENAME TO {}",
                    quote_ident(&name),
                    quote_ident(&twin)
                ));
            }
        }
    }
    let owned: Vec<String> = TABLES
        .iter()
        .map(|table| {
            format!(
                "ALTER TABLE {SCHEMA}.{table} OWNER TO {}",
                quote_ident(&owner)
            )
        })
        .collect();
    for statement in renames
        .iter()
        .chain(&owned)
        .chain(&foreign_keys)
        .chain(&grants)
    {
        work.batch_execute(statement).await?;
    }
    Ok(deferred)
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Whether `error` is a lock wait that hit `lock_timeout`.
pub(super) fn lock_timed_out(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// Pause between lock attempts: writers queued behind a timed-out attempt go first.
pub(super) async fn back_off(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(20 + 10 * u64::from(attempt.min(20)))).await;
}

/// The end of the next window: the greatest `position`, read under a SHARE lock on `events`
/// held only for that. Returns it and the lock attempts that timed out.
async fn window_end(locker: &Object) -> Result<(i64, u32), RebuildError> {
    for attempt in 0..LOCK_ATTEMPTS {
        if !share_lock_events(locker).await? {
            back_off(attempt).await;
            continue;
        }
        let end = locker
            .query_one("SELECT coalesce(max(position), 0) FROM events", &[])
            .await;
        let released = locker.batch_execute("COMMIT").await;
        let end: i64 = end?.get(0);
        released?;
        return Ok((end, attempt));
    }
    Err(RebuildError::LockUnavailable(LOCK_ATTEMPTS))
}

/// Opens a transaction on `locker` holding a SHARE lock on `events`; `false` (and no
/// transaction) when the lock was not granted within [`LOCK_TIMEOUT`].
async fn share_lock_events(locker: &Object) -> Result<bool, RebuildError> {
    locker
        .batch_execute(&format!("BEGIN; SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        .await?;
    match locker
        .batch_execute("LOCK TABLE events IN SHARE MODE")
        .await
    {
        Ok(()) => Ok(true),
        Err(error) => {
            locker.batch_execute("ROLLBACK").await?;
            if lock_timed_out(&error) {
                Ok(false)
            } else {
                Err(error.into())
            }
        }
    }
}

async fn count(work: &Object, from: i64, to: i64) -> Result<u64, RebuildError> {
    Ok(work
        .query_one(
            "SELECT count(*) FROM events WHERE position > $1 AND position <= $2",
            &[&from, &to],
        )
        .await?
        .get::<_, i64>(0) as u64)
}

/// Applies the events of `(from, to]`, a transaction per chunk.
async fn apply_window(
    work: &mut Object,
    (from, to): (i64, i64),
    (chunk, pause_ratio): (i64, f64),
    mut progress: impl FnMut(u64),
) -> Result<u64, RebuildError> {
    let mut after = from;
    let mut applied = 0u64;
    while after < to {
        let chunk_started = Instant::now();
        let tx = work.transaction().await?;
        let (last, count) = apply_chunk(&tx, after, to, chunk).await?;
        tx.commit().await?;
        if count == 0 {
            break;
        }
        after = last;
        applied += count;
        progress(applied);
        // Yields the machine (CPU, WAL, disk) to the writers for a while after each chunk.
        tokio::time::sleep(chunk_started.elapsed().mul_f64(pause_ratio)).await;
    }
    Ok(applied)
}

/// Applies the events of `(from, to]` in `tx`, the caller's transaction.
async fn apply_in(
    tx: &impl GenericClient,
    from: i64,
    to: i64,
    chunk: i64,
) -> Result<u64, RebuildError> {
    let (mut after, mut applied) = (from, 0);
    while after < to {
        let (last, count) = apply_chunk(tx, after, to, chunk).await?;
        if count == 0 {
            break;
        }
        after = last;
        applied += count;
    }
    Ok(applied)
}

/// Applies up to `chunk` events after `after`, up to `to`; returns the last position and
/// how many.
async fn apply_chunk(
    client: &impl GenericClient,
    after: i64,
    to: i64,
    chunk: i64,
) -> Result<(i64, u64), RebuildError> {
    let rows = client
        .query(
            "SELECT position, payload FROM events WHERE position > $1 AND position <= $2 \
             ORDER BY position LIMIT $3",
            &[&after, &to, &chunk],
        )
        .await?;
    let mut envelopes = Vec::with_capacity(rows.len());
    for row in &rows {
        let position: i64 = row.get(0);
        envelopes.push(
            v1::Envelope::decode(row.get::<_, &[u8]>(1))
                .map_err(|source| RebuildError::Decode { position, source })?,
        );
    }
    // Runs of assignment events go set by set; contact events one by one, in order.
    let mut run: Vec<&v1::Envelope> = Vec::new();
    for envelope in &envelopes {
        match envelope.event {
            Some(Event::AssignmentStarted(_) | Event::AssignmentEnded(_)) => run.push(envelope),
            _ => {
                if !run.is_empty() {
                    projections::apply_batch(client, &run).await?;
                    run.clear();
                }
                projections::apply(client, envelope).await?;
            }
        }
    }
    if !run.is_empty() {
        projections::apply_batch(client, &run).await?;
    }
    let last = rows.last().map_or(after, |row| row.get(0));
    Ok((last, rows.len() as u64))
}

/// The last window and the swap, in one transaction; retried when a lock times out.
async fn swap(
    work: &mut Object,
    mut from: i64,
    chunk: i64,
    deferred_keys: &[String],
    report: &mut OnlineReport,
) -> Result<(), RebuildError> {
    for attempt in 0..LOCK_ATTEMPTS {
        let tx = work.transaction().await?;
        // The swap is the one commit that must be durable before it is reported.
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; SET LOCAL synchronous_commit = on"
        ))
        .await?;
        let locked = tx
            .batch_execute(
                "LOCK TABLE public.contacts, public.assignments IN ACCESS EXCLUSIVE MODE; \
                 LOCK TABLE events IN SHARE MODE",
            )
            .await;
        match locked {
            Ok(()) => {}
            Err(error) if lock_timed_out(&error) => {
                tx.rollback().await?;
                report.lock_retries += 1;
                back_off(attempt).await;
                // Writers went on meanwhile: catch up outside the locks again.
                let (end, retries) = window_end(work).await?;
                report.lock_retries += retries;
                report.events += apply_window(work, (from, end), (chunk, 0.0), |_| {}).await?;
                from = end;
                continue;
            }
            Err(error) => return Err(error.into()),
        }
        let held = Instant::now();
        let end: i64 = tx
            .query_one("SELECT coalesce(max(position), 0) FROM events", &[])
            .await?
            .get(0);
        let applied = apply_in(&tx, from, end, chunk).await?;
        // Keys checked at commit: added now that every transaction's events are in.
        for key in deferred_keys {
            tx.batch_execute(&format!("{key} NOT VALID")).await?;
        }
        tx.batch_execute(&format!(
            "CREATE SCHEMA {RETIRED}; \
             ALTER TABLE public.assignments SET SCHEMA {RETIRED}; \
             ALTER TABLE public.contacts SET SCHEMA {RETIRED}; \
             ALTER TABLE {SCHEMA}.contacts SET SCHEMA public; \
             ALTER TABLE {SCHEMA}.assignments SET SCHEMA public"
        ))
        .await?;
        tx.commit().await?;
        report.swap_held = held.elapsed();
        report.last_window = applied;
        report.events += applied;
        return Ok(());
    }
    Err(RebuildError::LockUnavailable(LOCK_ATTEMPTS))
}

/// Drops the replaced tables. Writers whose prepared statements still name them lock them
/// for a moment while PostgreSQL re-plans those statements on the new tables, in their own
/// order: the drop waits at most [`LOCK_TIMEOUT`] at a time, so it never deadlocks with
/// them, and tries again.
async fn drop_retired(work: &mut Object, report: &mut OnlineReport) -> Result<(), RebuildError> {
    for attempt in 0..LOCK_ATTEMPTS {
        let tx = work.transaction().await?;
        let dropped = tx
            .batch_execute(&format!(
                "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; SET LOCAL client_min_messages = warning; \
                 DROP SCHEMA {RETIRED} CASCADE; DROP SCHEMA {SCHEMA}"
            ))
            .await;
        match dropped {
            Ok(()) => {
                tx.commit().await?;
                return Ok(());
            }
            Err(error)
                if lock_timed_out(&error)
                    || error.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) =>
            {
                tx.rollback().await?;
                report.lock_retries += 1;
                back_off(attempt).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(RebuildError::LockUnavailable(LOCK_ATTEMPTS))
}

/// Compares the new tables, caught up to a window's end, with the live ones as of exactly
/// that end.
async fn compare(
    work: &mut Object,
    locker: &Object,
    from: i64,
    chunk: i64,
    report: &mut OnlineReport,
) -> Result<(), RebuildError> {
    for attempt in 0..LOCK_ATTEMPTS {
        if !share_lock_events(locker).await? {
            report.lock_retries += 1;
            back_off(attempt).await;
            continue;
        }
        // The snapshot is taken while no append is in flight and none can start.
        let tx = work
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .start()
            .await?;
        let end = tx
            .query_one("SELECT coalesce(max(position), 0) FROM events", &[])
            .await;
        let released = locker.batch_execute("COMMIT").await;
        let end: i64 = end?.get(0);
        released?;
        report.last_window = apply_in(&tx, from, end, chunk).await?;
        report.events += report.last_window;
        (report.differences, report.examples) = super::differences(&tx, SCHEMA).await?;
        tx.rollback().await?;
        return Ok(());
    }
    Err(RebuildError::LockUnavailable(LOCK_ATTEMPTS))
}
