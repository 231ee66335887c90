//! The end of an online rebuild: the last window and the swap in one transaction, the
//! retired tables dropped, or (with `--verify`) the comparison in a locked snapshot.

use std::time::Instant;

use deadpool_postgres::Object;
use tokio_postgres::IsolationLevel;

use super::windows::{apply_in, apply_window, share_lock_events, window_end};
use super::{LOCK_ATTEMPTS, LOCK_TIMEOUT, OnlineReport, RETIRED, SCHEMA, back_off, lock_timed_out};
use crate::rebuild::RebuildError;

/// The last window and the swap, in one transaction; retried when a lock times out.
pub(super) async fn swap(
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
pub(super) async fn drop_retired(
    work: &mut Object,
    report: &mut OnlineReport,
) -> Result<(), RebuildError> {
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
pub(super) async fn compare(
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
        (report.differences, report.examples) = crate::rebuild::differences(&tx, SCHEMA).await?;
        tx.rollback().await?;
        return Ok(());
    }
    Err(RebuildError::LockUnavailable(LOCK_ATTEMPTS))
}
