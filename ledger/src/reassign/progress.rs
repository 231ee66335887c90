//! Steps 5 to 7 of a page: how the chain goes on (the next page, another pass, or the end),
//! the run's events, and its progress, which is the fence the next request must match.

use deadpool_postgres::Transaction;
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use super::MAX_PASSES;
use super::fence::LockedRun;
use super::request::PageRequest;
use super::rows::{Failure, Target};
use crate::db::cached;
use crate::domain::REASSIGNMENT_AGGREGATE;
use crate::error::CommandError;
use crate::queries::AssignmentView;
use crate::store::{self, NewEvent, StreamAppend};

/// How the chain goes on after a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Another page, after `cursor` (`None`: the start of a new pass).
    Page { cursor: Option<Uuid>, pass: u32 },
    /// The run is complete.
    Complete,
}

/// Step 5: a full page goes on after its last candidate. A short page ends the pass: if
/// rows are still active on the old contact (neither in this page nor given up on), the
/// next pass starts from the first assignment; after [`MAX_PASSES`] they are given up on,
/// with the reason, so the run never completes with a row left behind unexplained.
pub(super) async fn next_link(
    tx: &Transaction<'_>,
    request: &PageRequest,
    run: &LockedRun,
    candidates: &[Uuid],
    locked: &[AssignmentView],
    failures: &mut Vec<Failure>,
) -> Result<Next, CommandError> {
    if candidates.len() == request.page_size as usize {
        return Ok(Next::Page {
            cursor: candidates.last().copied(),
            pass: run.pass,
        });
    }
    let in_page: Vec<Uuid> = locked.iter().map(|row| row.assignment_id).collect();
    let last_pass = run.pass >= MAX_PASSES;
    let limit: Option<i64> = if last_pass { None } else { Some(1) };
    let left: Vec<(Uuid, Uuid)> = cached::query(
        tx,
        include_str!("../sql/reassign/left_behind.sql"),
        &[&request.old_contact_id, &in_page, &request.run_id, &limit],
    )
    .await?
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    if left.is_empty() {
        return Ok(Next::Complete);
    }
    if !last_pass {
        tracing::warn!(run = %request.run_id, pass = run.pass,
            "assignments are still active on the old contact after a pass; starting another");
        return Ok(Next::Page {
            cursor: None,
            pass: run.pass + 1,
        });
    }
    failures.extend(
        left.into_iter()
            .map(|(assignment_id, business_id)| Failure {
                assignment_id,
                business_id,
                reason: format!(
                    "still active on the old contact after {MAX_PASSES} passes over it: a write \
             outside the run keeps putting assignments on it; start another run once it stops"
                ),
                in_page: false,
            }),
    );
    Ok(Next::Complete)
}

/// What a page did to the run's counts.
#[derive(Debug, Clone, Copy)]
pub(super) struct PageCounts {
    pub(super) candidates: usize,
    pub(super) replaced: usize,
    pub(super) skipped: usize,
    pub(super) failed: usize,
}

impl PageCounts {
    /// The counts of a page that read `candidates`, locked `locked` of them still active,
    /// and gave up on `failures` (some of them left behind, not in the page).
    pub(super) fn new(
        candidates: &[Uuid],
        locked: &[AssignmentView],
        failures: &[Failure],
    ) -> Self {
        Self {
            candidates: candidates.len(),
            replaced: locked.len() - failures.iter().filter(|f| f.in_page).count(),
            skipped: candidates.len() - locked.len(),
            failed: failures.len(),
        }
    }
}

/// Step 6: the run's events: a `ReassignmentRowFailed` per row given up on, then the next
/// page request or `ReassignmentCompleted`. Returns the id of the last one, and the next
/// page request when there is one.
pub(super) async fn append_run_events(
    tx: &Transaction<'_>,
    request: &PageRequest,
    run: &LockedRun,
    next: &Next,
    failures: &[Failure],
    page: &PageCounts,
    target: &Target<'_>,
) -> Result<(Uuid, Option<PageRequest>), CommandError> {
    let now = target.heads.now;
    let attempts = run.page_attempts + 1;
    let mut events: Vec<NewEvent> = failures
        .iter()
        .map(|failure| {
            NewEvent::new(
                Event::ReassignmentRowFailed(v1::ReassignmentRowFailed {
                    run_id: request.run_id.to_string(),
                    assignment_id: failure.assignment_id.to_string(),
                    business_id: failure.business_id.to_string(),
                    attempts,
                    reason: failure.reason.clone(),
                }),
                now,
            )
        })
        .collect();
    let next_request = match *next {
        Next::Page { cursor, .. } => Some(PageRequest {
            request_id: Uuid::now_v7(),
            new_contact_id: target.contact_id,
            page: request.page + 1,
            cursor,
            ..request.clone()
        }),
        Next::Complete => None,
    };
    events.push(match &next_request {
        Some(next_request) => next_request.event(now),
        None => NewEvent::new(
            Event::ReassignmentCompleted(v1::ReassignmentCompleted {
                run_id: request.run_id.to_string(),
                old_contact_id: request.old_contact_id.to_string(),
                new_contact_id: target.contact_id.to_string(),
                jurisdiction: request.jurisdiction.code().to_owned(),
                pages: request.page,
                replaced: (run.replaced + page.replaced as i64) as u64,
                skipped: (run.skipped + page.skipped as i64) as u64,
                failed: (run.failed + page.failed as i64) as u64,
            }),
            now,
        ),
    });
    let last = events.last().map_or(Uuid::nil(), |event| event.event_id);
    store::append_at(
        tx,
        &[StreamAppend {
            aggregate_type: REASSIGNMENT_AGGREGATE,
            aggregate_id: request.run_id.to_string(),
            expected_version: None,
            events,
        }],
        target.heads,
        target.metadata,
    )
    .await?;
    Ok((last, next_request))
}

/// Step 7: the rows given up on, the page's record and the run's new fence, counts and
/// state.
pub(super) async fn record(
    tx: &Transaction<'_>,
    request: &PageRequest,
    run: &LockedRun,
    page: &PageCounts,
    failures: &[Failure],
    progress: Progress<'_>,
) -> Result<(), CommandError> {
    record_failures(tx, request, failures, run.page_attempts + 1).await?;
    record_progress(tx, request, run, page, progress).await
}

/// Records the rows given up on.
async fn record_failures(
    tx: &Transaction<'_>,
    request: &PageRequest,
    failures: &[Failure],
    attempts: u32,
) -> Result<(), CommandError> {
    if failures.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.assignment_id).collect();
    let businesses: Vec<Uuid> = failures.iter().map(|f| f.business_id).collect();
    let reasons: Vec<&str> = failures.iter().map(|f| f.reason.as_str()).collect();
    cached::execute(
        tx,
        include_str!("../sql/reassign/record_failures.sql"),
        &[
            &request.run_id,
            &ids,
            &businesses,
            &(attempts as i32),
            &reasons,
        ],
    )
    .await?;
    Ok(())
}

/// The rest of what step 7 records.
pub(super) struct Progress<'a> {
    pub(super) isolated: bool,
    pub(super) cursor_to: Option<Uuid>,
    pub(super) next: &'a Next,
    pub(super) target: Uuid,
    pub(super) last_request_id: Uuid,
}

/// The page's record and the run's new fence, counts and state.
async fn record_progress(
    tx: &Transaction<'_>,
    request: &PageRequest,
    run: &LockedRun,
    page: &PageCounts,
    progress: Progress<'_>,
) -> Result<(), CommandError> {
    let (fence_cursor, next_pass, completed) = match *progress.next {
        Next::Page { cursor, pass } => (cursor, pass, false),
        Next::Complete => (progress.cursor_to, run.pass, true),
    };
    cached::execute(
        tx,
        include_str!("../sql/reassign/record_progress.sql"),
        &[
            &request.run_id,
            &(request.page as i32),
            &request.cursor,
            &progress.cursor_to,
            &(page.candidates as i32),
            &(page.replaced as i32),
            &(page.skipped as i32),
            &(page.failed as i32),
            &progress.isolated,
            &progress.last_request_id,
            &(run.replaced + page.replaced as i64),
            &(run.skipped + page.skipped as i64),
            &(run.failed + page.failed as i64),
            &completed,
            &(run.pass as i32),
            &fence_cursor,
            &(next_pass as i32),
            &progress.target,
        ],
    )
    .await?;
    Ok(())
}
