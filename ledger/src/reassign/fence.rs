//! Step 1 of a page: the jurisdiction's primary-contact lock, the run row locked, and the
//! fence that admits only the request the run waits for.

use deadpool_postgres::Transaction;
use uuid::Uuid;

use super::request::{PageRequest, display};
use super::status::RunState;
use crate::db::cached;
use crate::error::CommandError;
use crate::queries::{self, ContactView, LockMode, PrimaryContactLock};
use crate::store::Metadata;

/// How long a page waits for a lock (a row, the run, the jurisdiction's primary-contact
/// lock) before it fails and is retried: it never hangs behind a long transaction.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '10s'";

/// The run row, locked, and the contact its rows move to now.
pub(super) struct LockedRun {
    pub(super) state: RunState,
    pub(super) cursor: Option<Uuid>,
    pub(super) pages: i32,
    pub(super) pass: u32,
    pub(super) replaced: i64,
    pub(super) skipped: i64,
    pub(super) failed: i64,
    pub(super) page_attempts: u32,
    pub(super) jurisdiction: String,
    pub(super) requested_by: String,
    pub(super) correlation_id: Uuid,
    /// The trace of the supersede (or request) that started the run.
    pub(super) traceparent: Option<String>,
    /// The jurisdiction's primary contact, read under the shared primary-contact lock.
    pub(super) primary: Option<ContactView>,
}

impl LockedRun {
    /// The contact the page moves rows to: the jurisdiction's primary contact now.
    pub(super) fn primary(&self, request: &PageRequest) -> Result<&ContactView, CommandError> {
        self.primary.as_ref().ok_or_else(|| {
            CommandError::Conflict(format!(
                "{} has no primary contact to move rows to",
                request.jurisdiction.code()
            ))
        })
    }

    /// Who and what cause the page's events: the run's requester and correlation, the
    /// request being handled.
    pub(super) fn metadata(&self, request: &PageRequest) -> Metadata {
        Metadata {
            actor: self.requested_by.clone(),
            correlation_id: self.correlation_id,
            causation_id: Some(request.request_id),
            // Each page is a span of its own in the run's trace.
            traceparent: self
                .traceparent
                .as_deref()
                .and_then(crate::trace::TraceParent::parse)
                .map(|run| run.child().to_string()),
        }
    }

    /// Why the fence drops `request`, if it does.
    pub(super) fn refuses(&self, request: &PageRequest) -> Option<String> {
        if self.state != RunState::Running {
            return Some(format!("the run is {}", self.state.as_str()));
        }
        if self.jurisdiction != request.jurisdiction.code() {
            return Some(format!(
                "the request names {} but the run is in {}",
                request.jurisdiction.code(),
                self.jurisdiction
            ));
        }
        if self.cursor != request.cursor || self.pages != request.page as i32 - 1 {
            return Some(format!(
                "the run is at page {} with cursor {}, the request is for page {} after cursor {}",
                self.pages + 1,
                display(self.cursor),
                request.page,
                display(request.cursor)
            ));
        }
        None
    }
}

/// Step 1: the lock timeout, the jurisdiction's primary-contact lock (shared: pages,
/// assigns and replaces run side by side, a supersede waits for them), the run row and the
/// primary contact, in one round trip and in that order.
pub(super) async fn lock_run(
    tx: &Transaction<'_>,
    request: &PageRequest,
) -> Result<Option<LockedRun>, CommandError> {
    let lock = PrimaryContactLock::prepare(tx, request.jurisdiction, LockMode::Shared).await?;
    let run_id = [&request.run_id as &(dyn tokio_postgres::types::ToSql + Sync)];
    let (_, _, row, primary) = tokio::try_join!(
        biased;
        tx.batch_execute(LOCK_TIMEOUT),
        lock.take(tx),
        cached::query_opt(tx, include_str!("../sql/reassign/lock_run.sql"), &run_id),
        queries::primary_contact(tx, request.jurisdiction),
    )?;
    Ok(row.map(|row| LockedRun {
        state: RunState::parse(row.get(0)),
        cursor: row.get(1),
        pages: row.get(2),
        pass: row.get::<_, i32>(3) as u32,
        replaced: row.get(4),
        skipped: row.get(5),
        failed: row.get(6),
        page_attempts: row.get::<_, i32>(7) as u32,
        jurisdiction: row.get(8),
        requested_by: row.get(9),
        correlation_id: row.get(10),
        traceparent: row.get(11),
        primary,
    }))
}
