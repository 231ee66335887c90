//! Windows of events: where the next one ends (read under a SHARE lock on `events`), and
//! its events applied to the new tables in committed chunks.

use std::time::Instant;

use deadpool_postgres::{GenericClient, Object};
use prost::Message as _;
use ra_ledger_proto::v1::{self, envelope::Event};

use super::{LOCK_ATTEMPTS, LOCK_TIMEOUT, back_off, lock_timed_out};
use crate::projections;
use crate::rebuild::RebuildError;

/// The end of the next window: the greatest `position`, read under a SHARE lock on `events`
/// held only for that. Returns it and the lock attempts that timed out.
pub(super) async fn window_end(locker: &Object) -> Result<(i64, u32), RebuildError> {
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
pub(super) async fn share_lock_events(locker: &Object) -> Result<bool, RebuildError> {
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

pub(super) async fn count(work: &Object, from: i64, to: i64) -> Result<u64, RebuildError> {
    Ok(work
        .query_one(
            "SELECT count(*) FROM events WHERE position > $1 AND position <= $2",
            &[&from, &to],
        )
        .await?
        .get::<_, i64>(0) as u64)
}

/// Applies the events of `(from, to]`, a transaction per chunk.
pub(super) async fn apply_window(
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
pub(super) async fn apply_in(
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
