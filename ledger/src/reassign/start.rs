//! Starting a run (inside the supersede's transaction, or again for what is left) and
//! re-raising the page a run waits for.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;
use uuid::Uuid;

use super::request::PageRequest;
use super::status::RunState;
use crate::db::cached;
use crate::domain::{Jurisdiction, REASSIGNMENT_AGGREGATE, run_stream};
use crate::error::CommandError;
use crate::queries::ContactView;
use crate::store::{self, Heads, Metadata, StreamAppend};

/// A run just started (the first page request is raised in the same transaction).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunStarted {
    /// Run id.
    pub run_id: Uuid,
    /// The contact whose assignments move.
    pub old_contact_id: Uuid,
    /// The contact they move to.
    pub new_contact_id: Uuid,
    /// Rows per page.
    pub page_size: u32,
    /// Active assignments of the old contact at the start.
    pub total_at_start: i64,
}

/// Starts a run inside the caller's transaction, at the time of `heads` (read after the
/// caller's locks): inserts its row and appends the first page request (no cursor), whose
/// outbox row is the chain's first link. If the caller's transaction rolls back, nothing
/// starts.
pub async fn start_in(
    client: &impl GenericClient,
    old: &ContactView,
    new_contact_id: Uuid,
    page_size: u32,
    metadata: &Metadata,
    heads: &Heads,
) -> Result<RunStarted, CommandError> {
    let jurisdiction = old.jurisdiction;
    let first = PageRequest {
        request_id: Uuid::now_v7(),
        run_id: Uuid::now_v7(),
        old_contact_id: old.contact_id,
        new_contact_id,
        jurisdiction,
        page: 1,
        cursor: None,
        page_size,
    };
    // The run's stream is new: its id was generated just now.
    store::append_at(
        client,
        &[StreamAppend {
            aggregate_type: REASSIGNMENT_AGGREGATE,
            aggregate_id: first.run_id.to_string(),
            expected_version: Some(0),
            events: vec![first.event(heads.now)],
        }],
        heads,
        metadata,
    )
    .await?;
    let total_at_start: i64 = cached::query_one(
        client,
        include_str!("../sql/reassign/insert_run.sql"),
        &[
            &first.run_id,
            &old.contact_id,
            &new_contact_id,
            &jurisdiction.code(),
            &(page_size as i32),
            &metadata.actor,
            &metadata.correlation_id,
            &first.request_id,
            &heads.now,
            &metadata.traceparent,
        ],
    )
    .await?
    .get(0);
    Ok(RunStarted {
        run_id: first.run_id,
        old_contact_id: old.contact_id,
        new_contact_id,
        page_size,
        total_at_start,
    })
}

/// Re-raises the page request a run is waiting for, e.g. after its message was lost to an
/// operator mistake. Safe at any time: if the original request is still in flight, whichever
/// arrives second is stale and dropped.
pub async fn resume(pool: &Pool, run_id: Uuid) -> Result<PageRequest, CommandError> {
    // Without a stall condition a running run is always re-raised.
    reraise(pool, run_id, None).await?.ok_or_else(|| {
        CommandError::Conflict(format!(
            "run {run_id} made progress meanwhile; nothing to do"
        ))
    })
}

/// Re-raises the page request of a run that made no progress for `stall_after`, and counts
/// the stall on the run; `None` when it made progress meanwhile (checked under the run's
/// lock, so of several workers noticing the same stall, one re-raises).
pub async fn reraise_stalled(
    pool: &Pool,
    run_id: Uuid,
    stall_after: Duration,
) -> Result<Option<PageRequest>, CommandError> {
    reraise(pool, run_id, Some(stall_after)).await
}

/// Runs in progress that made no progress for `stall_after`.
pub async fn stalled(
    client: &impl GenericClient,
    stall_after: Duration,
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    Ok(cached::query(
        client,
        include_str!("../sql/reassign/stalled_runs.sql"),
        &[&stall_after.as_secs_f64()],
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect())
}

async fn reraise(
    pool: &Pool,
    run_id: Uuid,
    only_if_stalled_for: Option<Duration>,
) -> Result<Option<PageRequest>, CommandError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let row = cached::query_opt(
        &tx,
        include_str!("../sql/reassign/lock_run_to_resume.sql"),
        &[&run_id],
    )
    .await?
    .ok_or_else(|| CommandError::NotFound {
        what: "reassignment run",
        id: run_id.to_string(),
    })?;
    let state = RunState::parse(row.get(0));
    if state != RunState::Running {
        if only_if_stalled_for.is_some() {
            return Ok(None);
        }
        return Err(CommandError::Conflict(format!(
            "run {run_id} is {}; start a new run to repoint what is left",
            state.as_str()
        )));
    }
    let idle = Duration::from_secs_f64(row.get::<_, f64>(10).max(0.0));
    if only_if_stalled_for.is_some_and(|stall_after| idle < stall_after) {
        return Ok(None);
    }
    let request = PageRequest {
        request_id: Uuid::now_v7(),
        run_id,
        old_contact_id: row.get(3),
        new_contact_id: row.get(4),
        jurisdiction: Jurisdiction::parse("jurisdiction", row.get(5))?,
        page: row.get::<_, i32>(2) as u32 + 1,
        cursor: row.get(1),
        page_size: row.get::<_, i32>(6) as u32,
    };
    let metadata = Metadata {
        actor: row.get(7),
        correlation_id: row.get(8),
        causation_id: Some(row.get(9)),
        traceparent: row
            .get::<_, Option<String>>(11)
            .as_deref()
            .and_then(crate::trace::TraceParent::parse)
            .map(|run| run.child().to_string()),
    };
    let heads = store::read_heads(&tx, &[run_stream(run_id)]).await?;
    let appends = [StreamAppend {
        aggregate_type: REASSIGNMENT_AGGREGATE,
        aggregate_id: run_id.to_string(),
        expected_version: None,
        events: vec![request.event(heads.now)],
    }];
    store::append_at(&tx, &appends, &heads, &metadata).await?;
    cached::execute(
        &tx,
        "UPDATE reassignment_runs SET last_request_id = $2, updated_at = clock_timestamp(), \
         stalls = stalls + $3 WHERE run_id = $1",
        &[
            &run_id,
            &request.request_id,
            &i32::from(only_if_stalled_for.is_some()),
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(Some(request))
}
