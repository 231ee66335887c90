//! Cancelling a replay, for operators (`POST /v1/replays/{id}/cancel`, `ledger replay
//! cancel`), and how its runner learns of it.
//!
//! A cancel is one statement: a replay requested or running becomes `cancelled`. That frees
//! its place at once, since the bound on replays counts the requested and running ones. A
//! replay that already ended (complete, failed, or cancelled before) is left as it is.
//!
//! Its runner, if one runs it, stops within [`POLL`] and the step it is in: a watcher
//! beside the run reads the replay's status and stops the run, which drops the messages its
//! producer has not sent. Whichever comes first, the watcher or the run's next statement,
//! the replay does not move again: every statement that moves a replay on (its start, each
//! checkpoint, its completion, a recorded error) only changes a replay that is requested or
//! running. A cancel that lands while the completion markers go out leaves them on the
//! replay topics, and the replay cancelled.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ReplayState;

/// How often a runner's watcher reads its replay's status.
pub const POLL: Duration = Duration::from_millis(500);

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The replay was requested or running, and is cancelled now.
    Cancelled,
    /// The replay had ended before, as this.
    AlreadyEnded(ReplayState),
    /// No such replay.
    NotFound,
}

/// Cancels replay `id` on behalf of `by` (a token's name, or `cli:<user>`).
pub async fn cancel(
    client: &impl GenericClient,
    id: Uuid,
    by: &str,
) -> Result<Cancel, tokio_postgres::Error> {
    let cancelled = client
        .execute(include_str!("../sql/replay/cancel.sql"), &[&id, &by])
        .await?;
    if cancelled > 0 {
        tracing::info!(replay = %id, by, "replay cancelled");
        return Ok(Cancel::Cancelled);
    }
    Ok(match state(client, id).await? {
        Some(state) => Cancel::AlreadyEnded(state),
        None => Cancel::NotFound,
    })
}

/// The replay's state, if it exists.
pub(super) async fn state(
    client: &impl GenericClient,
    id: Uuid,
) -> Result<Option<ReplayState>, tokio_postgres::Error> {
    Ok(client
        .query_opt(include_str!("../sql/replay/state.sql"), &[&id])
        .await?
        .map(|row| ReplayState::parse(row.get(0))))
}

/// Stops the run (`stop`) once replay `id` is cancelled; ends when `stop` fires, for
/// whatever reason. A failed read is tried again at the next poll: the run's own
/// statements notice a cancel too.
pub(super) async fn watch(pool: Pool, id: Uuid, stop: CancellationToken) {
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        let read = match pool.get().await {
            Ok(client) => state(&client, id).await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        match read {
            Ok(Some(ReplayState::Cancelled)) => {
                tracing::info!(replay = %id, "replay cancelled: its run stops");
                stop.cancel();
                return;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(replay = %id, %error, "cannot read whether the replay was cancelled; trying again")
            }
        }
    }
}
