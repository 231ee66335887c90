//! Reassignment runs: after a supersede, every active assignment of the old contact is
//! REPLACEd onto the new contact in chained pages.
//!
//! One `ReassignmentPageRequested` event handles one keyset page (`assignment_id > cursor
//! ORDER BY assignment_id LIMIT page_size`, never OFFSET). The page's transaction appends the
//! REPLACE events and their outbox rows, records the run's progress and raises the next
//! request, so the next link exists exactly when this page committed. A short page ends the
//! chain with `ReassignmentCompleted`.
//!
//! Safety, in layers:
//! - **The fence.** A request is processed only if its cursor and page number equal the
//!   run's, checked and advanced under the run row's lock. A redelivered or duplicated
//!   request is stale and dropped, so one run has at most one page in flight and never forks.
//! - **Skip finished rows.** Candidate rows are locked (`FOR UPDATE`) and re-checked; a row
//!   that a concurrent run or a cancellation finished meanwhile is skipped, never rewritten.
//! - **The unique index** `assignments_one_active` is the last line of defense: a duplicate
//!   REPLACE that got past everything else fails its page instead of corrupting data.
//! - **No starvation.** A page that keeps failing is retried a bounded number of times,
//!   then run row by row: rows that still fail are recorded as failed with their reason and
//!   the cursor moves past them.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool, Transaction};
use ra_ledger_proto::v1::{self, envelope::Event};
use serde::Serialize;
use uuid::Uuid;

use crate::commands::{CommandError, record, replace_events};
use crate::db::cached;
use crate::domain::{
    ASSIGNMENT_AGGREGATE, Jurisdiction, REASSIGNMENT_AGGREGATE, ValidationError, registration_id,
};
use crate::projections;
use crate::queries::{ASSIGNMENT_COLUMNS, AssignmentView, ContactView};
use crate::store::{self, Metadata, NewEvent, StreamAppend};

/// Rows per page when the request does not say.
pub const DEFAULT_PAGE_SIZE: u32 = 1_000;
/// Largest page size accepted: keeps every page transaction short.
pub const MAX_PAGE_SIZE: u32 = 10_000;
/// Whole-page attempts before a page is processed row by row.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// How long a page waits for a row lock before it fails (and is retried).
const LOCK_TIMEOUT: &str = "10s";

/// Checks a requested page size.
pub fn page_size(requested: Option<u32>) -> Result<u32, ValidationError> {
    match requested {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(size) if (1..=MAX_PAGE_SIZE).contains(&size) => Ok(size),
        Some(size) => Err(ValidationError::new(
            "page_size",
            format!("{size} is outside 1..={MAX_PAGE_SIZE}"),
        )),
    }
}

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

/// Starts a run inside the caller's transaction: inserts its row and appends the first
/// page request (no cursor), whose outbox row is the chain's first link. If the caller's
/// transaction rolls back, nothing starts.
pub async fn start_in(
    tx: &Transaction<'_>,
    old: &ContactView,
    new_contact_id: Uuid,
    page_size: u32,
    metadata: &Metadata,
    now: DateTime<Utc>,
) -> Result<RunStarted, CommandError> {
    let jurisdiction = Jurisdiction::parse("jurisdiction", &old.jurisdiction)?;
    let run_id = Uuid::now_v7();
    let first = PageRequest {
        request_id: Uuid::now_v7(),
        run_id,
        old_contact_id: old.contact_id,
        new_contact_id,
        page: 1,
        cursor: None,
        page_size,
    };
    let request_id = first.request_id;
    let request = first.event(jurisdiction.code(), now);
    record(
        tx,
        &[StreamAppend {
            aggregate_type: REASSIGNMENT_AGGREGATE,
            aggregate_id: run_id.to_string(),
            expected_version: Some(0),
            events: vec![request],
        }],
        metadata,
        now,
    )
    .await?;
    let total_at_start: i64 = cached::query_one(
        tx,
        "INSERT INTO reassignment_runs (run_id, old_contact_id, new_contact_id, jurisdiction, \
         page_size, status, total_at_start, requested_by, correlation_id, last_request_id, \
         started_at, updated_at) \
         SELECT $1, $2, $3, $4, $5, 'running', \
                (SELECT count(*) FROM assignments WHERE contact_id = $2 AND ended_at IS NULL), \
                $6, $7, $8, $9, $9 \
         RETURNING total_at_start",
        &[
            &run_id,
            &old.contact_id,
            &new_contact_id,
            &jurisdiction.code(),
            &(page_size as i32),
            &metadata.actor,
            &metadata.correlation_id,
            &request_id,
            &now,
        ],
    )
    .await?
    .get(0);
    Ok(RunStarted {
        run_id,
        old_contact_id: old.contact_id,
        new_contact_id,
        page_size,
        total_at_start,
    })
}

/// One page request, as carried by a `ReassignmentPageRequested` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// The request's event id.
    pub request_id: Uuid,
    /// Run id.
    pub run_id: Uuid,
    /// Contact whose assignments move.
    pub old_contact_id: Uuid,
    /// Contact they move to.
    pub new_contact_id: Uuid,
    /// 1-based page number.
    pub page: u32,
    /// Process assignment ids greater than this; `None` on the first page.
    pub cursor: Option<Uuid>,
    /// Rows per page.
    pub page_size: u32,
}

impl PageRequest {
    /// The `ReassignmentPageRequested` event carrying this request (its id is the event id).
    fn event(&self, jurisdiction: &str, effective_at: DateTime<Utc>) -> NewEvent {
        NewEvent {
            event_id: self.request_id,
            event: Event::ReassignmentPageRequested(v1::ReassignmentPageRequested {
                run_id: self.run_id.to_string(),
                old_contact_id: self.old_contact_id.to_string(),
                new_contact_id: self.new_contact_id.to_string(),
                jurisdiction: jurisdiction.to_owned(),
                page: self.page,
                cursor: self.cursor.map(|c| c.to_string()).unwrap_or_default(),
                page_size: self.page_size,
            }),
            effective_at,
        }
    }

    /// The request an envelope carries; `Ok(None)` for any other event.
    pub fn from_envelope(envelope: &v1::Envelope) -> Result<Option<Self>, String> {
        let Some(Event::ReassignmentPageRequested(request)) = &envelope.event else {
            return Ok(None);
        };
        let parse = |field: &str, value: &str| {
            value
                .parse::<Uuid>()
                .map_err(|_| format!("{field} {value:?} is not a UUID"))
        };
        let page_size = request.page_size;
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) || request.page == 0 {
            return Err(format!(
                "page {} with page size {page_size} is out of range",
                request.page
            ));
        }
        Ok(Some(Self {
            request_id: parse("event_id", &envelope.event_id)?,
            run_id: parse("run_id", &request.run_id)?,
            old_contact_id: parse("old_contact_id", &request.old_contact_id)?,
            new_contact_id: parse("new_contact_id", &request.new_contact_id)?,
            page: request.page,
            cursor: if request.cursor.is_empty() {
                None
            } else {
                Some(parse("cursor", &request.cursor)?)
            },
            page_size,
        }))
    }
}

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
        "UPDATE reassignment_runs SET page_attempts = page_attempts + 1, last_error = $4, \
         updated_at = clock_timestamp() \
         WHERE run_id = $1 AND status = 'running' AND cursor IS NOT DISTINCT FROM $2 \
           AND pages = $3 RETURNING page_attempts",
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

/// The run row, locked.
struct LockedRun {
    status: String,
    cursor: Option<Uuid>,
    pages: i32,
    replaced: i64,
    skipped: i64,
    failed: i64,
    page_attempts: i32,
    jurisdiction: String,
    requested_by: String,
    correlation_id: Uuid,
    new_contact_created_at: DateTime<Utc>,
    now: DateTime<Utc>,
}

/// One attempt at a page, in one transaction. After `max_attempts` recorded failures the
/// page runs row by row.
async fn process(
    client: &mut deadpool_postgres::Object,
    request: &PageRequest,
    max_attempts: u32,
) -> Result<PageOutcome, CommandError> {
    let began = Instant::now();
    let tx = client.transaction().await?;
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        .await?;
    let Some(row) = cached::query_opt(
        &tx,
        "SELECT r.status, r.cursor, r.pages, r.replaced, r.skipped, r.failed, r.page_attempts, \
                r.jurisdiction, r.requested_by, r.correlation_id, c.created_at, now() \
         FROM reassignment_runs r JOIN contacts c ON c.contact_id = r.new_contact_id \
         WHERE r.run_id = $1 FOR UPDATE OF r",
        &[&request.run_id],
    )
    .await?
    else {
        return Ok(PageOutcome::UnknownRun);
    };
    let run = LockedRun {
        status: row.get(0),
        cursor: row.get(1),
        pages: row.get(2),
        replaced: row.get(3),
        skipped: row.get(4),
        failed: row.get(5),
        page_attempts: row.get(6),
        jurisdiction: row.get(7),
        requested_by: row.get(8),
        correlation_id: row.get(9),
        new_contact_created_at: row.get(10),
        now: row.get(11),
    };
    let isolated = run.page_attempts as u32 >= max_attempts;
    if run.status != "running" {
        return Ok(PageOutcome::Stale {
            reason: format!("the run is {}", run.status),
        });
    }
    if run.cursor != request.cursor || run.pages != request.page as i32 - 1 {
        return Ok(PageOutcome::Stale {
            reason: format!(
                "the run is at page {} with cursor {}, the request is for page {} after cursor {}",
                run.pages + 1,
                display(run.cursor),
                request.page,
                display(request.cursor)
            ),
        });
    }
    let jurisdiction = Jurisdiction::parse("jurisdiction", &run.jurisdiction)?;
    // Keyset read of the page, without locks: its length alone decides whether the chain
    // goes on, so rows finished meanwhile cannot end the chain early.
    let candidates: Vec<Uuid> = cached::query(
        &tx,
        "SELECT assignment_id FROM assignments \
         WHERE contact_id = $1 AND ended_at IS NULL AND assignment_id > $2 \
         ORDER BY assignment_id LIMIT $3",
        &[
            &request.old_contact_id,
            &request.cursor.unwrap_or(Uuid::nil()),
            &i64::from(request.page_size),
        ],
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect();
    // Lock and re-check: a row a concurrent run already replaced (or a cancellation ended)
    // is waited for, then no longer matches and is skipped.
    let locked: Vec<AssignmentView> = cached::query(
        &tx,
        &format!(
            "SELECT {ASSIGNMENT_COLUMNS} FROM assignments a \
             WHERE a.assignment_id = ANY($1) AND a.contact_id = $2 AND a.ended_at IS NULL \
             ORDER BY a.assignment_id FOR UPDATE"
        ),
        &[&candidates, &request.old_contact_id],
    )
    .await?
    .iter()
    .map(AssignmentView::from_row)
    .collect();
    let skipped = candidates.len() - locked.len();
    // The old assignment ends and the new one starts at the same instant, never before
    // the new contact took effect.
    let effective_at = run.now.max(run.new_contact_created_at);
    let metadata = Metadata {
        actor: run.requested_by.clone(),
        correlation_id: run.correlation_id,
        causation_id: Some(request.request_id),
    };
    let target = Target {
        jurisdiction,
        new_contact_id: request.new_contact_id,
        effective_at,
        metadata: &metadata,
        now: run.now,
    };
    let mut failures = Vec::new();
    if isolated {
        for assignment in &locked {
            tx.batch_execute("SAVEPOINT reassign_row").await?;
            match replace_all(&tx, std::slice::from_ref(assignment), &target).await {
                Ok(()) => tx.batch_execute("RELEASE SAVEPOINT reassign_row").await?,
                Err(error) => {
                    tx.batch_execute("ROLLBACK TO SAVEPOINT reassign_row")
                        .await?;
                    failures.push((assignment, error.to_string()));
                }
            }
        }
    }
    // A whole page either commits every REPLACE or nothing, so its outcome is known before
    // the REPLACEs are written. Writing the run's events first makes the next page request
    // the transaction's first outbox row: the relay publishes it while the page's own
    // events still stream, and the next page starts sooner.
    let replaced = locked.len() - failures.len();
    let completed = candidates.len() < request.page_size as usize;
    let cursor_to = candidates.last().copied().or(request.cursor);
    let attempts = run.page_attempts as u32 + 1;
    let mut run_events: Vec<NewEvent> = failures
        .iter()
        .map(|(assignment, reason)| {
            NewEvent::new(
                Event::ReassignmentRowFailed(v1::ReassignmentRowFailed {
                    run_id: request.run_id.to_string(),
                    assignment_id: assignment.assignment_id.to_string(),
                    business_id: assignment.business_id.to_string(),
                    attempts,
                    reason: reason.clone(),
                }),
                run.now,
            )
        })
        .collect();
    let pages = run.pages + 1;
    let totals = (
        run.replaced + replaced as i64,
        run.skipped + skipped as i64,
        run.failed + failures.len() as i64,
    );
    run_events.push(if completed {
        NewEvent::new(
            Event::ReassignmentCompleted(v1::ReassignmentCompleted {
                run_id: request.run_id.to_string(),
                old_contact_id: request.old_contact_id.to_string(),
                new_contact_id: request.new_contact_id.to_string(),
                jurisdiction: jurisdiction.code().to_owned(),
                pages: pages as u32,
                replaced: totals.0 as u64,
                skipped: totals.1 as u64,
                failed: totals.2 as u64,
            }),
            run.now,
        )
    } else {
        PageRequest {
            request_id: Uuid::now_v7(),
            page: request.page + 1,
            cursor: cursor_to,
            ..request.clone()
        }
        .event(jurisdiction.code(), run.now)
    });
    let last_request_id = run_events
        .last()
        .map(|event| event.event_id)
        .unwrap_or_default();
    store::append(
        &tx,
        &[StreamAppend {
            aggregate_type: REASSIGNMENT_AGGREGATE,
            aggregate_id: request.run_id.to_string(),
            expected_version: None,
            events: run_events,
        }],
        &metadata,
        run.now,
    )
    .await?;
    if !isolated {
        replace_all(&tx, &locked, &target).await?;
    }
    if !failures.is_empty() {
        let ids: Vec<Uuid> = failures.iter().map(|(a, _)| a.assignment_id).collect();
        let businesses: Vec<Uuid> = failures.iter().map(|(a, _)| a.business_id).collect();
        let reasons: Vec<&str> = failures.iter().map(|(_, r)| r.as_str()).collect();
        cached::execute(
            &tx,
            "INSERT INTO reassignment_failures (run_id, assignment_id, business_id, attempts, \
             reason, failed_at) \
             SELECT $1, f.assignment_id, f.business_id, $4, f.reason, clock_timestamp() \
             FROM unnest($2::uuid[], $3::uuid[], $5::text[]) AS f(assignment_id, business_id, reason)",
            &[
                &request.run_id,
                &ids,
                &businesses,
                &(attempts as i32),
                &reasons,
            ],
        )
        .await?;
    }
    // Progress and the page's record come last, so `finished_at` and the longest page
    // cover all of the page's work.
    cached::execute(
        &tx,
        "WITH page AS ( \
             INSERT INTO reassignment_pages (run_id, page, cursor_from, cursor_to, candidates, \
             replaced, skipped, failed, isolated, started_at, finished_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), clock_timestamp())) \
         UPDATE reassignment_runs SET cursor = $4, pages = $2, replaced = $11, skipped = $12, \
             failed = $13, page_attempts = 0, last_error = NULL, last_request_id = $10, \
             status = CASE WHEN $14 THEN 'completed' ELSE status END, \
             completed_at = CASE WHEN $14 THEN clock_timestamp() END, \
             longest_page_ms = greatest(longest_page_ms, \
                 extract(epoch FROM clock_timestamp() - now()) * 1000), \
             updated_at = clock_timestamp() \
         WHERE run_id = $1",
        &[
            &request.run_id,
            &pages,
            &request.cursor,
            &cursor_to,
            &(candidates.len() as i32),
            &(replaced as i32),
            &(skipped as i32),
            &(failures.len() as i32),
            &isolated,
            &last_request_id,
            &totals.0,
            &totals.1,
            &totals.2,
            &completed,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(PageOutcome::Processed(PageReport {
        run_id: request.run_id,
        page: request.page,
        candidates: candidates.len(),
        replaced,
        skipped,
        failed: failures.len(),
        isolated,
        completed,
        duration: began.elapsed(),
    }))
}

/// Where a page's rows move to.
struct Target<'a> {
    jurisdiction: Jurisdiction,
    new_contact_id: Uuid,
    effective_at: DateTime<Utc>,
    metadata: &'a Metadata,
    now: DateTime<Utc>,
}

/// REPLACEs `assignments` (locked, active, of distinct registrations) in one append and
/// one set-based projection update.
async fn replace_all(
    tx: &Transaction<'_>,
    assignments: &[AssignmentView],
    target: &Target<'_>,
) -> Result<(), CommandError> {
    if assignments.is_empty() {
        return Ok(());
    }
    let appends: Vec<StreamAppend> = assignments
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
                target.new_contact_id,
                target.effective_at,
            ),
        })
        .collect();
    let recorded = store::append(tx, &appends, target.metadata, target.now).await?;
    let envelopes: Vec<&v1::Envelope> = recorded.iter().map(|event| &event.envelope).collect();
    projections::apply_batch(tx, &envelopes)
        .await
        .map_err(|error| match error {
            projections::ProjectionError::Database(db) => CommandError::from(db),
            other => CommandError::Projection(other),
        })
}

fn display(cursor: Option<Uuid>) -> String {
    cursor.map_or_else(|| "(start)".to_owned(), |cursor| cursor.to_string())
}

/// Re-raises the page request a run is waiting for, e.g. after its message was lost to an
/// operator mistake. Safe at any time: if the original request is still in flight, whichever
/// arrives second is stale and dropped.
pub async fn resume(pool: &Pool, run_id: Uuid) -> Result<PageRequest, CommandError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let row = cached::query_opt(
        &tx,
        "SELECT status, cursor, pages, old_contact_id, new_contact_id, jurisdiction, page_size, \
                requested_by, correlation_id, last_request_id, now() \
         FROM reassignment_runs WHERE run_id = $1 FOR UPDATE",
        &[&run_id],
    )
    .await?
    .ok_or_else(|| CommandError::NotFound {
        what: "reassignment run",
        id: run_id.to_string(),
    })?;
    let status: String = row.get(0);
    if status != "running" {
        return Err(CommandError::Conflict(format!(
            "run {run_id} is {status}; start a new run to repoint what is left"
        )));
    }
    let request = PageRequest {
        request_id: Uuid::now_v7(),
        run_id,
        old_contact_id: row.get(3),
        new_contact_id: row.get(4),
        page: row.get::<_, i32>(2) as u32 + 1,
        cursor: row.get(1),
        page_size: row.get::<_, i32>(6) as u32,
    };
    let jurisdiction: &str = row.get(5);
    let now: DateTime<Utc> = row.get(10);
    let metadata = Metadata {
        actor: row.get(7),
        correlation_id: row.get(8),
        causation_id: Some(row.get(9)),
    };
    record(
        &tx,
        &[StreamAppend {
            aggregate_type: REASSIGNMENT_AGGREGATE,
            aggregate_id: run_id.to_string(),
            expected_version: None,
            events: vec![request.event(jurisdiction, now)],
        }],
        &metadata,
        now,
    )
    .await?;
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

/// A run's progress, as `GET /v1/reassignment-runs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStatus {
    /// Run id.
    pub run_id: Uuid,
    /// `running` or `completed`.
    pub status: String,
    /// Contact whose assignments move.
    pub old_contact_id: Uuid,
    /// Contact they move to.
    pub new_contact_id: Uuid,
    /// Jurisdiction code.
    pub jurisdiction: String,
    /// Rows per page.
    pub page_size: u32,
    /// The last assignment id the chain passed; `None` before the first page.
    pub cursor: Option<Uuid>,
    /// Pages processed.
    pub pages: u32,
    /// Rows REPLACEd.
    pub replaced: i64,
    /// Rows found already finished (by a concurrent run or a cancellation).
    pub skipped: i64,
    /// Rows given up on; see `failures`.
    pub failed: i64,
    /// Active assignments of the old contact when the run started.
    pub total_at_start: i64,
    /// Active assignments still on the old contact now.
    pub remaining: i64,
    /// Failed attempts of the current page, and the last error.
    pub page_attempts: u32,
    /// The last page failure, while the page is being retried.
    pub last_error: Option<String>,
    /// Who asked.
    pub requested_by: String,
    /// Correlation id of every event of the run (and of the supersede that started it).
    pub correlation_id: Uuid,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// Last progress.
    pub updated_at: DateTime<Utc>,
    /// End of the chain.
    pub completed_at: Option<DateTime<Utc>>,
    /// Seconds from start to completion (or to now while running).
    pub elapsed_seconds: f64,
    /// Rows replaced per second so far.
    pub rows_per_second: f64,
    /// Seconds left at the current rate; `None` when unknown or done.
    pub eta_seconds: Option<f64>,
    /// Longest page transaction so far, in milliseconds.
    pub longest_page_ms: f64,
    /// Rows given up on (the first 100).
    pub failures: Vec<RowFailure>,
}

/// A row a run gave up on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowFailure {
    /// The assignment left on the old contact.
    pub assignment_id: Uuid,
    /// Its business.
    pub business_id: Uuid,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub reason: String,
    /// When the run gave up.
    pub failed_at: DateTime<Utc>,
}

/// Most failures a status lists.
const FAILURES_LISTED: i64 = 100;

/// A run's progress, or `None` if there is no such run.
pub async fn status(
    client: &impl GenericClient,
    run_id: Uuid,
) -> Result<Option<RunStatus>, tokio_postgres::Error> {
    let Some(row) = cached::query_opt(
        client,
        "SELECT r.run_id, r.status, r.old_contact_id, r.new_contact_id, r.jurisdiction, \
                r.page_size, r.cursor, r.pages, r.replaced, r.skipped, r.failed, \
                r.total_at_start, \
                (SELECT count(*) FROM assignments a \
                  WHERE a.contact_id = r.old_contact_id AND a.ended_at IS NULL), \
                r.page_attempts, r.last_error, r.requested_by, r.correlation_id, \
                r.started_at, r.updated_at, r.completed_at, \
                extract(epoch FROM coalesce(r.completed_at, clock_timestamp()) - r.started_at)::float8, \
                r.longest_page_ms \
         FROM reassignment_runs r WHERE r.run_id = $1",
        &[&run_id],
    )
    .await?
    else {
        return Ok(None);
    };
    let failures = cached::query(
        client,
        "SELECT assignment_id, business_id, attempts, reason, failed_at \
         FROM reassignment_failures WHERE run_id = $1 ORDER BY assignment_id LIMIT $2",
        &[&run_id, &FAILURES_LISTED],
    )
    .await?
    .iter()
    .map(|row| RowFailure {
        assignment_id: row.get(0),
        business_id: row.get(1),
        attempts: row.get::<_, i32>(2) as u32,
        reason: row.get(3),
        failed_at: row.get(4),
    })
    .collect();
    let replaced: i64 = row.get(8);
    let remaining: i64 = row.get(12);
    let elapsed: f64 = row.get(20);
    let status: String = row.get(1);
    let rate = if elapsed > 0.0 {
        replaced as f64 / elapsed
    } else {
        0.0
    };
    Ok(Some(RunStatus {
        run_id: row.get(0),
        eta_seconds: (status == "running" && rate > 0.0).then(|| remaining as f64 / rate),
        status,
        old_contact_id: row.get(2),
        new_contact_id: row.get(3),
        jurisdiction: row.get(4),
        page_size: row.get::<_, i32>(5) as u32,
        cursor: row.get(6),
        pages: row.get::<_, i32>(7) as u32,
        replaced,
        skipped: row.get(9),
        failed: row.get(10),
        total_at_start: row.get(11),
        remaining,
        page_attempts: row.get::<_, i32>(13) as u32,
        last_error: row.get(14),
        requested_by: row.get(15),
        correlation_id: row.get(16),
        started_at: row.get(17),
        updated_at: row.get(18),
        completed_at: row.get(19),
        elapsed_seconds: elapsed,
        rows_per_second: rate,
        longest_page_ms: row.get(21),
        failures,
    }))
}

/// Runs of a contact (as the old contact), newest first.
pub async fn runs_of(
    client: &impl GenericClient,
    old_contact_id: Uuid,
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    Ok(cached::query(
        client,
        "SELECT run_id FROM reassignment_runs WHERE old_contact_id = $1 ORDER BY started_at DESC",
        &[&old_contact_id],
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect())
}

/// Runs still in progress.
pub async fn running(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    Ok(cached::query_one(
        client,
        "SELECT count(*) FROM reassignment_runs WHERE status = 'running'",
        &[],
    )
    .await?
    .get(0))
}

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
    let row = cached::query_one(
        &tx,
        "SELECT c.jurisdiction, c.created_at, now() FROM contacts c WHERE c.contact_id = $1",
        &[&new_contact_id],
    )
    .await?;
    let jurisdiction = Jurisdiction::parse("jurisdiction", row.get(0))?;
    let now: DateTime<Utc> = row.get(2);
    let locked: Vec<AssignmentView> = tx
        .query(
            &format!(
                "SELECT {ASSIGNMENT_COLUMNS} FROM assignments a \
                 WHERE a.contact_id = $1 AND a.ended_at IS NULL \
                 ORDER BY a.assignment_id FOR UPDATE"
            ),
            &[&old_contact_id],
        )
        .await?
        .iter()
        .map(AssignmentView::from_row)
        .collect();
    let target = Target {
        jurisdiction,
        new_contact_id,
        effective_at: now.max(row.get(1)),
        metadata,
        now,
    };
    replace_all(&tx, &locked, &target).await?;
    tx.commit().await?;
    Ok(locked.len())
}

/// Most page transactions of one run that were open at the same time, from the pages'
/// recorded transaction intervals (the fence makes anything but 1 impossible).
pub async fn max_pages_in_flight(
    client: &tokio_postgres::Client,
    run_id: Uuid,
) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT coalesce(max(overlapping), 0) FROM ( \
               SELECT (SELECT count(*) FROM reassignment_pages q \
                       WHERE q.run_id = p.run_id AND q.started_at < p.finished_at \
                         AND p.started_at < q.finished_at) AS overlapping \
               FROM reassignment_pages p WHERE p.run_id = $1) o",
            &[&run_id],
        )
        .await?
        .get(0))
}

/// Where a run's time went: inside page transactions, and between them (relay, broker and
/// worker carrying the next request).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageTiming {
    /// Sum of the page transactions' durations, seconds.
    pub in_pages: f64,
    /// Mean time from one page's end to the next page's start, seconds.
    pub mean_gap: f64,
    /// Longest such gap, seconds.
    pub max_gap: f64,
}

/// The run's [`PageTiming`].
pub async fn page_timing(
    client: &tokio_postgres::Client,
    run_id: Uuid,
) -> Result<PageTiming, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8, \
                    coalesce(avg(gap), 0)::float8, coalesce(max(gap), 0)::float8 \
             FROM (SELECT started_at, finished_at, extract(epoch FROM started_at - \
                          lag(finished_at) OVER (ORDER BY page)) AS gap \
                   FROM reassignment_pages WHERE run_id = $1) p",
            &[&run_id],
        )
        .await?;
    Ok(PageTiming {
        in_pages: row.get(0),
        mean_gap: row.get(1),
        max_gap: row.get(2),
    })
}

/// One line of progress: a bar, counts, rate and estimate.
pub fn progress_line(status: &RunStatus) -> String {
    const WIDTH: usize = 30;
    let total = status.total_at_start.max(1) as f64;
    let done = (status.replaced + status.skipped + status.failed) as f64;
    let fraction = if status.status == "completed" {
        1.0
    } else {
        (done / total).min(1.0)
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let eta = status
        .eta_seconds
        .map(|eta| format!(", ETA {eta:.0} s"))
        .unwrap_or_default();
    format!(
        "[{}{}] {:>3.0}% page {} · replaced {} skipped {} failed {} of {} · {:.0} rows/s{eta} · {}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        fraction * 100.0,
        status.pages,
        status.replaced,
        status.skipped,
        status.failed,
        status.total_at_start,
        status.rows_per_second,
        status.status
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(request: v1::ReassignmentPageRequested) -> v1::Envelope {
        v1::Envelope {
            event_id: Uuid::now_v7().to_string(),
            event: Some(Event::ReassignmentPageRequested(request)),
            ..v1::Envelope::default()
        }
    }

    fn request(cursor: &str, page: u32, page_size: u32) -> v1::ReassignmentPageRequested {
        v1::ReassignmentPageRequested {
            run_id: Uuid::now_v7().to_string(),
            old_contact_id: Uuid::now_v7().to_string(),
            new_contact_id: Uuid::now_v7().to_string(),
            jurisdiction: "TX".into(),
            page,
            cursor: cursor.into(),
            page_size,
        }
    }

    #[test]
    fn page_size_defaults_and_bounds() {
        assert_eq!(page_size(None).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(Some(1)).unwrap(), 1);
        assert_eq!(page_size(Some(MAX_PAGE_SIZE)).unwrap(), MAX_PAGE_SIZE);
        for bad in [0, MAX_PAGE_SIZE + 1] {
            let error = page_size(Some(bad)).unwrap_err();
            assert_eq!(error.field, "page_size");
            assert!(error.reason.contains(&bad.to_string()), "{}", error.reason);
        }
    }

    #[test]
    fn decodes_page_requests_and_ignores_other_events() {
        let cursor = Uuid::now_v7();
        let decoded = PageRequest::from_envelope(&envelope(request(&cursor.to_string(), 3, 100)))
            .unwrap()
            .unwrap();
        assert_eq!(
            (decoded.page, decoded.cursor, decoded.page_size),
            (3, Some(cursor), 100)
        );
        let first = PageRequest::from_envelope(&envelope(request("", 1, 100)))
            .unwrap()
            .unwrap();
        assert_eq!(first.cursor, None);
        let other = v1::Envelope {
            event: Some(Event::ReassignmentCompleted(
                v1::ReassignmentCompleted::default(),
            )),
            ..v1::Envelope::default()
        };
        assert_eq!(PageRequest::from_envelope(&other), Ok(None));
    }

    #[test]
    fn a_request_survives_its_event() {
        let request = PageRequest {
            request_id: Uuid::now_v7(),
            run_id: Uuid::now_v7(),
            old_contact_id: Uuid::now_v7(),
            new_contact_id: Uuid::now_v7(),
            page: 7,
            cursor: Some(Uuid::now_v7()),
            page_size: 250,
        };
        let event = request.event("TX", Utc::now());
        let envelope = v1::Envelope {
            event_id: event.event_id.to_string(),
            event: Some(event.event),
            ..v1::Envelope::default()
        };
        assert_eq!(PageRequest::from_envelope(&envelope), Ok(Some(request)));
    }

    #[test]
    fn refuses_malformed_page_requests() {
        let bad_cursor = PageRequest::from_envelope(&envelope(request("nope", 2, 100)));
        assert!(bad_cursor.unwrap_err().contains("cursor \"nope\""));
        let zero_page = PageRequest::from_envelope(&envelope(request("", 0, 100)));
        assert!(zero_page.is_err());
        let huge = PageRequest::from_envelope(&envelope(request("", 1, MAX_PAGE_SIZE + 1)));
        assert!(huge.is_err());
    }

    #[test]
    fn progress_line_shows_counts_and_fills_when_completed() {
        let now = Utc::now();
        let mut status = RunStatus {
            run_id: Uuid::nil(),
            status: "running".into(),
            old_contact_id: Uuid::nil(),
            new_contact_id: Uuid::nil(),
            jurisdiction: "TX".into(),
            page_size: 100,
            cursor: None,
            pages: 5,
            replaced: 490,
            skipped: 5,
            failed: 5,
            total_at_start: 1_000,
            remaining: 500,
            page_attempts: 0,
            last_error: None,
            requested_by: "cs".into(),
            correlation_id: Uuid::nil(),
            started_at: now,
            updated_at: now,
            completed_at: None,
            elapsed_seconds: 1.0,
            rows_per_second: 490.0,
            eta_seconds: Some(1.02),
            longest_page_ms: 12.0,
            failures: Vec::new(),
        };
        let line = progress_line(&status);
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
        assert!(line.contains(" 50% page 5"), "{line}");
        assert!(
            line.contains("replaced 490 skipped 5 failed 5 of 1000"),
            "{line}"
        );
        assert!(line.contains("ETA 1 s"), "{line}");
        status.status = "completed".into();
        status.eta_seconds = None;
        assert!(progress_line(&status).starts_with(&format!("[{}]", "#".repeat(30))));
    }
}
