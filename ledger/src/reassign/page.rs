//! One page of a run, in one transaction, as named steps: lock the run and check the fence
//! ([`fence`](super::fence)); read the candidates, lock and re-check them, replace them, all at once or
//! row by row after repeated failures ([`rows`]); decide how the chain goes on, append the
//! run's events and record the progress ([`progress`]). A failed attempt is counted on the
//! run and retried by the worker.

use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Object, Pool};
use uuid::Uuid;

use super::fence::lock_run;
use super::progress::{self, Next, PageCounts, Progress};
use super::request::PageRequest;
use super::rows::{self, Target};
use crate::db::cached;
use crate::error::CommandError;
use crate::write;

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
    /// The next page's request, as the page published it (`None` when the chain ended): a
    /// worker may run it at once instead of waiting for it to come back through Kafka.
    pub next: Option<PageRequest>,
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
    // The run's `last_error` reaches every reader: the disclosed code and sentence, the
    // cause in the log under the reference it names.
    let attempts = record_attempt(&client, request, &error.disclosed().to_string())
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
    let primary = run.primary(request)?;
    let candidates = rows::read_candidates(&tx, request).await?;
    let locked = rows::lock_rows(&tx, request, &candidates).await?;
    let heads = rows::read_heads(&tx, request, &locked).await?;
    let metadata = run.metadata(request);
    let target = Target::new(request, primary, &metadata, &heads);
    let isolated = run.page_attempts >= max_attempts;
    let mut failures = if isolated {
        rows::replace_row_by_row(&tx, &locked, &target).await?
    } else {
        Vec::new()
    };
    let next = progress::next_link(&tx, request, &run, &candidates, &locked, &mut failures).await?;
    let page = PageCounts::new(&candidates, &locked, &failures);
    // A whole page either commits every REPLACE or nothing, so its outcome is known before
    // the REPLACEs are written. Writing the run's events first makes the next page request
    // the transaction's first outbox row: the relay publishes it while the page's own
    // events still stream, and the next page starts sooner.
    let (last_request_id, next_request) =
        progress::append_run_events(&tx, request, &run, &next, &failures, &page, &target).await?;
    if !isolated {
        let appends = rows::replace_appends(
            &locked,
            target.jurisdiction,
            target.contact_id,
            target.effective_at,
        );
        write::record(&tx, &appends, &heads, &metadata).await?;
    }
    let progress = Progress {
        isolated,
        cursor_to: candidates.last().copied().or(request.cursor),
        next: &next,
        target: target.contact_id,
        last_request_id,
    };
    progress::record(&tx, request, &run, &page, &failures, progress).await?;
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
        next: next_request,
        duration: began.elapsed(),
    }))
}
