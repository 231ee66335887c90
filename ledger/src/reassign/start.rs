//! Starting a run (inside the supersede's transaction, or again for what is left) and
//! re-raising the page a run waits for.

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
    let jurisdiction = Jurisdiction::parse("jurisdiction", &old.jurisdiction)?;
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
        return Err(CommandError::Conflict(format!(
            "run {run_id} is {}; start a new run to repoint what is left",
            state.as_str()
        )));
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
        "UPDATE reassignment_runs SET last_request_id = $2, updated_at = clock_timestamp() \
         WHERE run_id = $1",
        &[&run_id, &request.request_id],
    )
    .await?;
    tx.commit().await?;
    Ok(request)
}
