//! One page of a run, in one transaction, as named steps: lock the run and check the fence;
//! read the candidates; lock and re-check them; replace them (all at once, or row by row
//! after repeated failures); decide how the chain goes on; append the run's events; record
//! the progress. A failed attempt is counted on the run and retried by the worker.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Object, Pool, Transaction};
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use super::MAX_PASSES;
use super::request::{PageRequest, display};
use super::status::RunState;
use crate::db::cached;
use crate::domain::{
    ASSIGNMENT_AGGREGATE, Jurisdiction, REASSIGNMENT_AGGREGATE, assignment_stream, registration_id,
    run_stream,
};
use crate::error::CommandError;
use crate::events::replace_events;
use crate::queries::{self, AssignmentView, ContactView, LockMode, PrimaryContactLock};
use crate::store::{self, Heads, Metadata, NewEvent, StreamAppend};
use crate::write;

/// How long a page waits for a lock (a row, the run, the jurisdiction's primary-contact
/// lock) before it fails and is retried: it never hangs behind a long transaction.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '10s'";

/// What handling a page request did.
#[derive(Debug, Clone, PartialEq)]
pub enum PageOutcome {
    /// The request does not match the run's cursor (redelivered, duplicated, or the run is
    /// finished): acknowledged and dropped, nothing written.
    Stale {
        /// Why.
        reason: String,
    },
    /// No such run (its row is gone, or the request is foreign): dropped.
    UnknownRun,
    /// The page was processed and committed.
    Processed(PageReport),
}

/// One processed page.
#[derive(Debug, Clone, PartialEq)]
pub struct PageReport {
    /// Run id.
    pub run_id: Uuid,
    /// Page number.
    pub page: u32,
    /// The pass over the old contact's assignments this page belongs to.
    pub pass: u32,
    /// Where the rows went: the jurisdiction's primary contact under the page's lock.
    pub target: Uuid,
    /// Rows the keyset read returned.
    pub candidates: usize,
    /// Rows REPLACEd.
    pub replaced: usize,
    /// Rows found already finished when locked.
    pub skipped: usize,
    /// Rows given up on.
    pub failed: usize,
    /// Processed row by row after repeated whole-page failures.
    pub isolated: bool,
    /// The chain ended with this page.
    pub completed: bool,
    /// Wall time of the page's transaction, commit included.
    pub duration: Duration,
}

/// Why a page must be retried later (it committed nothing).
#[derive(Debug, thiserror::Error)]
#[error("page {page} of run {run_id} failed (attempt {attempts}): {source}")]
pub struct PageFailed {
    /// Run id.
    pub run_id: Uuid,
    /// Page number.
    pub page: u32,
    /// Whole-page attempts recorded so far (0 when the attempt could not be recorded).
    pub attempts: u32,
    /// The failure.
    #[source]
    pub source: CommandError,
}

/// Handles one page request: processes the page if the fence admits it. A failed attempt
/// is recorded on the run; once `max_attempts` are recorded the page runs row by row, so a
/// poison row is recorded as failed instead of blocking the chain.
pub async fn handle(
    pool: &Pool,
    request: &PageRequest,
    max_attempts: u32,
) -> Result<PageOutcome, PageFailed> {
    let failed = |attempts, source| PageFailed {
        run_id: request.run_id,
        page: request.page,
        attempts,
        source,
    };
    let mut client = pool.get().await.map_err(|e| failed(0, e.into()))?;
    let error = match process(&mut client, request, max_attempts).await {
        Ok(outcome) => return Ok(outcome),
        Err(error) => error,
    };
    let attempts = record_attempt(&client, request, &error.to_string())
        .await
        .map_err(|e| failed(0, e))?;
    match attempts {
        // The run moved on meanwhile: this request is stale now.
        None => Ok(PageOutcome::Stale {
            reason: "the run moved past this page while it failed".into(),
        }),
        // The limit is reached just now: go row by row at once.
        Some(attempts) if attempts == max_attempts => {
            tracing::warn!(run = %request.run_id, page = request.page, attempts, %error,
                "page keeps failing; processing it row by row");
            process(&mut client, request, max_attempts)
                .await
                .map_err(|e| failed(attempts, e))
        }
        Some(attempts) => Err(failed(attempts, error)),
    }
}

/// Counts a failed whole-page attempt on the run, if the request is still current.
async fn record_attempt(
    client: &impl GenericClient,
    request: &PageRequest,
    error: &str,
) -> Result<Option<u32>, CommandError> {
    let row = cached::query_opt(
        client,
        include_str!("../sql/reassign/record_attempt.sql"),
        &[
            &request.run_id,
            &request.cursor,
            &(request.page as i32 - 1),
            &error,
        ],
    )
    .await?;
    Ok(row.map(|row| row.get::<_, i32>(0) as u32))
}

/// One attempt at a page, in one transaction. After `max_attempts` recorded failures the
/// page runs row by row.
async fn process(
    client: &mut Object,
    request: &PageRequest,
    max_attempts: u32,
) -> Result<PageOutcome, CommandError> {
    let began = Instant::now();
    let tx = client.transaction().await?;
    let Some(run) = lock_run(&tx, request).await? else {
        return Ok(PageOutcome::UnknownRun);
    };
    if let Some(reason) = run.refuses(request) {
        return Ok(PageOutcome::Stale { reason });
    }
    let target_contact = run.primary.clone().ok_or_else(|| {
        CommandError::Conflict(format!(
            "{} has no primary contact to move rows to",
            request.jurisdiction.code()
        ))
    })?;
    let candidates = read_candidates(&tx, request).await?;
    let locked = lock_rows(&tx, request, &candidates).await?;
    let mut streams: Vec<String> = locked
        .iter()
        .map(|row| assignment_stream(row.business_id, request.jurisdiction))
        .collect();
    streams.push(run_stream(request.run_id));
    let heads = store::read_heads(&tx, &streams).await?;
    let metadata = Metadata {
        actor: run.requested_by.clone(),
        correlation_id: run.correlation_id,
        causation_id: Some(request.request_id),
    };
    let target = Target {
        jurisdiction: request.jurisdiction,
        // The old assignment ends and the new one starts at the same instant, never before
        // the contact they move to took effect.
        effective_at: heads.now.max(target_contact.created_at),
        contact_id: target_contact.contact_id,
        metadata: &metadata,
        heads: &heads,
    };
    let isolated = run.page_attempts >= max_attempts;
    let mut failures = if isolated {
        replace_row_by_row(&tx, &locked, &target).await?
    } else {
        Vec::new()
    };
    let next = next_link(&tx, request, &run, &candidates, &locked, &mut failures).await?;
    let page = PageCounts {
        candidates: candidates.len(),
        replaced: locked.len() - failures.iter().filter(|f| f.in_page).count(),
        skipped: candidates.len() - locked.len(),
        failed: failures.len(),
    };
    // A whole page either commits every REPLACE or nothing, so its outcome is known before
    // the REPLACEs are written. Writing the run's events first makes the next page request
    // the transaction's first outbox row: the relay publishes it while the page's own
    // events still stream, and the next page starts sooner.
    let last_request_id =
        append_run_events(&tx, request, &run, &next, &failures, &page, &target).await?;
    if !isolated {
        write::record(&tx, &replace_appends(&locked, &target), &heads, &metadata).await?;
    }
    let attempts = run.page_attempts + 1;
    record_failures(&tx, request, &failures, attempts).await?;
    let cursor_to = candidates.last().copied().or(request.cursor);
    record_progress(
        &tx,
        request,
        &run,
        &page,
        Progress {
            isolated,
            cursor_to,
            next: &next,
            target: target.contact_id,
            last_request_id,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(PageOutcome::Processed(PageReport {
        run_id: request.run_id,
        page: request.page,
        pass: run.pass,
        target: target.contact_id,
        candidates: page.candidates,
        replaced: page.replaced,
        skipped: page.skipped,
        failed: page.failed,
        isolated,
        completed: matches!(next, Next::Complete),
        duration: began.elapsed(),
    }))
}

/// The run row, locked, and the contact its rows move to now.
struct LockedRun {
    state: RunState,
    cursor: Option<Uuid>,
    pages: i32,
    pass: u32,
    replaced: i64,
    skipped: i64,
    failed: i64,
    page_attempts: u32,
    jurisdiction: String,
    requested_by: String,
    correlation_id: Uuid,
    /// The jurisdiction's primary contact, read under the shared primary-contact lock.
    primary: Option<ContactView>,
}

impl LockedRun {
    /// Why the fence drops `request`, if it does.
    fn refuses(&self, request: &PageRequest) -> Option<String> {
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
async fn lock_run(
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
        primary,
    }))
}

/// Step 2: the keyset read, without locks. Its length alone decides whether the pass goes
/// on, so rows finished meanwhile cannot end it early.
async fn read_candidates(
    tx: &Transaction<'_>,
    request: &PageRequest,
) -> Result<Vec<Uuid>, CommandError> {
    // PostgreSQL orders UUIDs by their bytes, as big-endian integers.
    let from = match request.cursor {
        None => Uuid::nil(),
        Some(cursor) => match cursor.as_u128().checked_add(1) {
            Some(next) => Uuid::from_u128(next),
            None => return Ok(Vec::new()),
        },
    };
    Ok(cached::query(
        tx,
        include_str!("../sql/reassign/page_candidates.sql"),
        &[
            &request.old_contact_id,
            &from,
            &i64::from(request.page_size),
            &request.run_id,
        ],
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect())
}

/// Step 3: lock the candidates and re-check them.
async fn lock_rows(
    tx: &Transaction<'_>,
    request: &PageRequest,
    candidates: &[Uuid],
) -> Result<Vec<AssignmentView>, CommandError> {
    Ok(cached::query(
        tx,
        include_str!("../sql/reassign/lock_page_rows.sql"),
        &[&candidates, &request.old_contact_id],
    )
    .await?
    .iter()
    .map(AssignmentView::from_row)
    .collect())
}

/// Where a page's rows move to, and when.
struct Target<'a> {
    jurisdiction: Jurisdiction,
    contact_id: Uuid,
    effective_at: DateTime<Utc>,
    metadata: &'a Metadata,
    heads: &'a Heads,
}

/// The REPLACE of each of `assignments` (locked, active, of distinct registrations).
fn replace_appends(assignments: &[AssignmentView], target: &Target<'_>) -> Vec<StreamAppend> {
    assignments
        .iter()
        .map(|old| StreamAppend {
            aggregate_type: ASSIGNMENT_AGGREGATE,
            aggregate_id: registration_id(old.business_id, target.jurisdiction),
            // The row lock taken above serializes REPLACEs of this assignment; a writer
            // that appends without it loses on UNIQUE (stream, stream_version).
            expected_version: None,
            events: replace_events(
                old,
                target.jurisdiction,
                Uuid::now_v7(),
                target.contact_id,
                target.effective_at,
            ),
        })
        .collect()
}

/// A row the run gives up on, and why.
struct Failure {
    assignment_id: Uuid,
    business_id: Uuid,
    reason: String,
    /// Whether the row was one of the page's locked rows (not one left behind).
    in_page: bool,
}

/// Step 4, after repeated whole-page failures: each row in a savepoint of its own, so the
/// rows that can move do, and the others are returned with their reasons.
async fn replace_row_by_row(
    tx: &Transaction<'_>,
    locked: &[AssignmentView],
    target: &Target<'_>,
) -> Result<Vec<Failure>, CommandError> {
    let mut failures = Vec::new();
    for assignment in locked {
        tx.batch_execute("SAVEPOINT reassign_row").await?;
        let appends = replace_appends(std::slice::from_ref(assignment), target);
        match write::record(tx, &appends, target.heads, target.metadata).await {
            Ok(_) => tx.batch_execute("RELEASE SAVEPOINT reassign_row").await?,
            Err(error) => {
                tx.batch_execute("ROLLBACK TO SAVEPOINT reassign_row")
                    .await?;
                failures.push(Failure {
                    assignment_id: assignment.assignment_id,
                    business_id: assignment.business_id,
                    reason: error.to_string(),
                    in_page: true,
                });
            }
        }
    }
    Ok(failures)
}

/// How the chain goes on after a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Another page, after `cursor` (`None`: the start of a new pass).
    Page { cursor: Option<Uuid>, pass: u32 },
    /// The run is complete.
    Complete,
}

/// Step 5: a full page goes on after its last candidate. A short page ends the pass: if
/// rows are still active on the old contact (neither in this page nor given up on), the
/// next pass starts from the first assignment; after [`MAX_PASSES`] they are given up on,
/// with the reason, so the run never completes with a row left behind unexplained.
async fn next_link(
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
struct PageCounts {
    candidates: usize,
    replaced: usize,
    skipped: usize,
    failed: usize,
}

/// Step 6: the run's events: a `ReassignmentRowFailed` per row given up on, then the next
/// page request or `ReassignmentCompleted`. Returns the id of the last one.
async fn append_run_events(
    tx: &Transaction<'_>,
    request: &PageRequest,
    run: &LockedRun,
    next: &Next,
    failures: &[Failure],
    page: &PageCounts,
    target: &Target<'_>,
) -> Result<Uuid, CommandError> {
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
    events.push(match *next {
        Next::Page { cursor, .. } => PageRequest {
            request_id: Uuid::now_v7(),
            new_contact_id: target.contact_id,
            page: request.page + 1,
            cursor,
            ..request.clone()
        }
        .event(now),
        Next::Complete => NewEvent::new(
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
    Ok(last)
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
struct Progress<'a> {
    isolated: bool,
    cursor_to: Option<Uuid>,
    next: &'a Next,
    target: Uuid,
    last_request_id: Uuid,
}

/// Step 7: the page's record and the run's new fence, counts and state.
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

#[cfg(feature = "testing")]
/// What the chained pages avoid: every active assignment of `old_contact_id` REPLACEd onto
/// `new_contact_id` in one transaction, with the same statements a page uses. Only for the
/// benchmark's comparison; returns the rows moved.
pub async fn replace_all_at_once(
    pool: &Pool,
    old_contact_id: Uuid,
    new_contact_id: Uuid,
    metadata: &Metadata,
) -> Result<usize, CommandError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let new = queries::contact(&tx, new_contact_id)
        .await?
        .ok_or_else(|| CommandError::NotFound {
            what: "contact",
            id: new_contact_id.to_string(),
        })?;
    let jurisdiction = Jurisdiction::parse("jurisdiction", &new.jurisdiction)?;
    let locked: Vec<AssignmentView> = tx
        .query(
            &format!(
                "SELECT {} FROM assignments a \
                 WHERE a.contact_id = $1 AND a.ended_at IS NULL \
                 ORDER BY a.assignment_id FOR UPDATE",
                queries::ASSIGNMENT_COLUMNS
            ),
            &[&old_contact_id],
        )
        .await?
        .iter()
        .map(AssignmentView::from_row)
        .collect();
    let streams: Vec<String> = locked
        .iter()
        .map(|row| assignment_stream(row.business_id, jurisdiction))
        .collect();
    let heads = store::read_heads(&tx, &streams).await?;
    let target = Target {
        jurisdiction,
        contact_id: new_contact_id,
        effective_at: heads.now.max(new.created_at),
        metadata,
        heads: &heads,
    };
    write::record(&tx, &replace_appends(&locked, &target), &heads, metadata).await?;
    tx.commit().await?;
    Ok(locked.len())
}
