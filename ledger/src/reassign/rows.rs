//! Steps 2 to 4 of a page: the keyset read, the rows locked and re-checked, and their
//! REPLACE onto the jurisdiction's primary contact, all at once or row by row.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use uuid::Uuid;

use super::request::PageRequest;
use crate::db::cached;
use crate::domain::{
    ASSIGNMENT_AGGREGATE, Jurisdiction, assignment_stream, registration_id, run_stream,
};
use crate::error::CommandError;
use crate::events::replace_events;
use crate::queries::{AssignmentView, ContactView};
use crate::store::{self, Heads, Metadata, StreamAppend};
use crate::write;

/// Step 2: the keyset read, without locks. Its length alone decides whether the pass goes
/// on, so rows finished meanwhile cannot end it early.
pub(super) async fn read_candidates(
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
pub(super) async fn lock_rows(
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
pub(super) struct Target<'a> {
    pub(super) jurisdiction: Jurisdiction,
    pub(super) contact_id: Uuid,
    pub(super) effective_at: DateTime<Utc>,
    pub(super) metadata: &'a Metadata,
    pub(super) heads: &'a Heads,
}

impl<'a> Target<'a> {
    /// The jurisdiction's primary contact, at the page's time: the old assignment ends and
    /// the new one starts at the same instant, never before the contact took effect.
    pub(super) fn new(
        request: &PageRequest,
        primary: &ContactView,
        metadata: &'a Metadata,
        heads: &'a Heads,
    ) -> Self {
        Self {
            jurisdiction: request.jurisdiction,
            contact_id: primary.contact_id,
            effective_at: heads.now.max(primary.created_at),
            metadata,
            heads,
        }
    }
}

/// The heads of the streams a page appends to (its rows' and the run's), and its time.
pub(super) async fn read_heads(
    tx: &Transaction<'_>,
    request: &PageRequest,
    locked: &[AssignmentView],
) -> Result<Heads, CommandError> {
    let mut streams: Vec<String> = locked
        .iter()
        .map(|row| assignment_stream(row.business_id, request.jurisdiction))
        .collect();
    streams.push(run_stream(request.run_id));
    Ok(store::read_heads(tx, &streams).await?)
}

/// The REPLACE of each of `assignments` (locked, active, of distinct registrations) onto
/// `contact_id` of `jurisdiction` at `effective_at`: what a page appends. Public for one
/// caller outside the crate, the reassignment benchmark's one-transaction comparison
/// (`ledger-bench reassign`), so that it appends what a page does.
pub fn replace_appends(
    assignments: &[AssignmentView],
    jurisdiction: Jurisdiction,
    contact_id: Uuid,
    effective_at: DateTime<Utc>,
) -> Vec<StreamAppend> {
    assignments
        .iter()
        .map(|old| StreamAppend {
            aggregate_type: ASSIGNMENT_AGGREGATE,
            aggregate_id: registration_id(old.business_id, jurisdiction),
            // The row lock taken above serializes REPLACEs of this assignment; a writer
            // that appends without it loses on UNIQUE (stream, stream_version).
            expected_version: None,
            events: replace_events(old, jurisdiction, Uuid::now_v7(), contact_id, effective_at),
        })
        .collect()
}

/// A row the run gives up on, and why.
pub(super) struct Failure {
    pub(super) assignment_id: Uuid,
    pub(super) business_id: Uuid,
    pub(super) reason: String,
    /// Whether the row was one of the page's locked rows (not one left behind).
    pub(super) in_page: bool,
}

/// Step 4, after repeated whole-page failures: each row in a savepoint of its own, so the
/// rows that can move do, and the others are returned with their reasons.
pub(super) async fn replace_row_by_row(
    tx: &Transaction<'_>,
    locked: &[AssignmentView],
    target: &Target<'_>,
) -> Result<Vec<Failure>, CommandError> {
    let mut failures = Vec::new();
    for assignment in locked {
        tx.batch_execute("SAVEPOINT reassign_row").await?;
        let appends = replace_appends(
            std::slice::from_ref(assignment),
            target.jurisdiction,
            target.contact_id,
            target.effective_at,
        );
        match write::record(tx, &appends, target.heads, target.metadata).await {
            Ok(_) => tx.batch_execute("RELEASE SAVEPOINT reassign_row").await?,
            Err(error) => {
                tx.batch_execute("ROLLBACK TO SAVEPOINT reassign_row")
                    .await?;
                failures.push(Failure {
                    assignment_id: assignment.assignment_id,
                    business_id: assignment.business_id,
                    // Readers and Kafka get the disclosed code and sentence, the log
                    // the cause.
                    reason: error.disclosed().to_string(),
                    in_page: true,
                });
            }
        }
    }
    Ok(failures)
}
