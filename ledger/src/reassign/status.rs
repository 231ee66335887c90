//! A run's progress: its state, counts, timing and the rows it gave up on, as
//! `GET /v1/reassignment-runs/{id}` and `ledger runs status` show them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::db::cached;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Pages are still being processed.
    Running,
    /// The chain ended: every active assignment of the old contact was moved, or is listed
    /// in `failures` with the reason it was not.
    Completed,
}

impl RunState {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
        }
    }

    /// Reads the database spelling (the table's CHECK allows only these two).
    pub fn parse(text: &str) -> Self {
        if text == "completed" {
            Self::Completed
        } else {
            Self::Running
        }
    }
}

/// A run's progress, as `GET /v1/reassignment-runs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStatus {
    /// Run id.
    pub run_id: Uuid,
    /// `running` or `completed`.
    pub status: RunState,
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
    /// Pages processed, across passes.
    pub pages: u32,
    /// Passes over the old contact's assignments: a pass that ends with rows still active
    /// on the old contact (not failed) starts another one.
    pub pass: u32,
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
    /// Seconds since the run last made progress (a page, a failed attempt, a re-raise).
    pub seconds_since_progress: f64,
    /// Running without progress for longer than [`super::STALL_AFTER`]: a worker raises its
    /// page request again (the default setting).
    pub stalled: bool,
    /// How often a worker found the run stalled and raised its page request again.
    pub stalls: u32,
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
        include_str!("../sql/reassign/run_status.sql"),
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
    let status = RunState::parse(row.get(1));
    let idle: f64 = row.get(24);
    let rate = if elapsed > 0.0 {
        replaced as f64 / elapsed
    } else {
        0.0
    };
    Ok(Some(RunStatus {
        run_id: row.get(0),
        eta_seconds: (status == RunState::Running && rate > 0.0).then(|| remaining as f64 / rate),
        status,
        old_contact_id: row.get(2),
        new_contact_id: row.get(3),
        jurisdiction: row.get(4),
        page_size: row.get::<_, i32>(5) as u32,
        cursor: row.get(6),
        pages: row.get::<_, i32>(7) as u32,
        pass: row.get::<_, i32>(22) as u32,
        stalls: row.get::<_, i32>(23) as u32,
        seconds_since_progress: idle,
        stalled: status == RunState::Running && idle > super::STALL_AFTER.as_secs_f64(),
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

/// The progress of every run of a contact (as the old contact), newest first.
pub async fn statuses_of(
    client: &impl GenericClient,
    old_contact_id: Uuid,
) -> Result<Vec<RunStatus>, tokio_postgres::Error> {
    let mut statuses = Vec::new();
    for run_id in runs_of(client, old_contact_id).await? {
        statuses.extend(status(client, run_id).await?);
    }
    Ok(statuses)
}

/// Runs in progress, oldest first.
pub async fn in_progress(client: &impl GenericClient) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    Ok(cached::query(
        client,
        "SELECT run_id FROM reassignment_runs WHERE status = 'running' ORDER BY started_at",
        &[],
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect())
}

/// Runs still in progress.
pub async fn running(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    Ok(in_progress_summary(client).await?.0)
}

/// The runs in progress, and the longest any of them has gone without processing a page, in
/// seconds (0 when none runs): what the worker's stalled-run gauge shows.
pub async fn in_progress_summary(
    client: &impl GenericClient,
) -> Result<(i64, f64), tokio_postgres::Error> {
    let row = cached::query_one(
        client,
        include_str!("../sql/reassign/runs_in_progress.sql"),
        &[],
    )
    .await?;
    Ok((row.get(0), row.get(1)))
}
