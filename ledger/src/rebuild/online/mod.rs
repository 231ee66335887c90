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
use ra_ledger_cdc::infra::entry::Entry;

mod swap;
mod tables;
mod windows;

use swap::{compare, drop_retired, swap};
use tables::prepare;
use windows::{apply_window, count, window_end};

use super::{RebuildError, TABLES};

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
pub fn rebuild_online<'a>(
    pool: &'a Pool,
    options: OnlineOptions,
    progress: impl FnMut(Phase, u64, u64) + Send + 'a,
) -> Entry<'a, Result<OnlineReport, RebuildError>> {
    rebuild_online_boxed(pool, options, Box::new(progress))
}

/// [`rebuild_online`]'s future, made here ([`Entry`]).
#[inline(never)]
fn rebuild_online_boxed<'a>(
    pool: &'a Pool,
    options: OnlineOptions,
    progress: Box<dyn FnMut(Phase, u64, u64) + Send + 'a>,
) -> Entry<'a, Result<OnlineReport, RebuildError>> {
    Box::pin(rebuild_online_inner(pool, options, progress))
}

async fn rebuild_online_inner(
    pool: &Pool,
    options: OnlineOptions,
    mut progress: Box<dyn FnMut(Phase, u64, u64) + Send + '_>,
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

/// Whether `error` is a lock wait that hit `lock_timeout`.
pub(super) fn lock_timed_out(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

/// Pause between lock attempts: writers queued behind a timed-out attempt go first.
pub(super) async fn back_off(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(20 + 10 * u64::from(attempt.min(20)))).await;
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
