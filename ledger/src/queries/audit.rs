//! The audit questions: who was the RA at T as known at K, every RA during a period, a
//! contact's lineage, a business's history in keyset pages.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::{AssignmentView, ContactView};
use crate::db::cached;
use crate::domain::{ContactStatus, Jurisdiction};

/// The SQL of [`registered_agent_at`]: `$1` business, `$2` jurisdiction code, `$3` at, `$4`
/// known at. Public, as the other two below, so that its plan can be read where it runs
/// (`ledger-bench as-of` prints it, with EXPLAIN ANALYZE, over a large history).
pub const REGISTERED_AGENT_AT_SQL: &str = include_str!("../sql/queries/registered_agent_at.sql");
/// The SQL of [`registered_agents_during`]: `$1` business, `$2` jurisdiction code, `$3`
/// from, `$4` to.
pub const REGISTERED_AGENTS_DURING_SQL: &str =
    include_str!("../sql/queries/registered_agents_during.sql");
/// The SQL of [`assignment_history`]: `$1` business, `$2` and `$3` the cursor (or nulls),
/// `$4` the page's size.
pub const ASSIGNMENT_HISTORY_SQL: &str = include_str!("../sql/queries/assignment_history.sql");

/// The answer to "who was the RA": the assignment and its contact as they were.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegisteredAgent {
    /// The assignment in force.
    pub assignment: AssignmentView,
    /// The contact serving it (contacts never change; only their status does).
    pub contact: ContactView,
    /// The contact's status at that time.
    pub contact_status: ContactStatus,
}

/// Who was the RA of `business_id` in `jurisdiction` at business time `at`, as known at
/// `known_at`.
///
/// Every field of the answer reflects only events recorded at or before `known_at`: an end
/// of the assignment or a supersede of its contact recorded later is left out.
pub async fn registered_agent_at(
    client: &impl GenericClient,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: DateTime<Utc>,
) -> Result<Option<RegisteredAgent>, tokio_postgres::Error> {
    let sql = REGISTERED_AGENT_AT_SQL;
    let row = cached::query_opt(
        client,
        sql,
        &[&business_id, &jurisdiction.code(), &at, &known_at],
    )
    .await?;
    Ok(row.map(|row| {
        let contact = ContactView::from_joined_row(&row);
        RegisteredAgent {
            assignment: AssignmentView::from_row(&row).as_known_at(known_at),
            contact_status: contact.status_at(at, known_at),
            contact: contact.as_known_at(known_at),
        }
    }))
}

/// Every RA of `business_id` in `jurisdiction` whose assignment was in force at some
/// instant of `[from, to)`, in order.
///
/// Intervals are half-open: an assignment serves during `[started_at, ended_at)`, so it
/// overlaps the period when it starts before `to` and ends after `from`, and one that ended
/// at the instant it started never served and is never listed. An assignment is listed
/// exactly when [`registered_agent_at`] names it at some instant of the period.
pub async fn registered_agents_during(
    client: &impl GenericClient,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<RegisteredAgent>, tokio_postgres::Error> {
    let sql = REGISTERED_AGENTS_DURING_SQL;
    let rows = cached::query(
        client,
        sql,
        &[&business_id, &jurisdiction.code(), &from, &to],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let contact = ContactView::from_joined_row(row);
            let assignment = AssignmentView::from_row(row);
            RegisteredAgent {
                contact_status: contact.status_at(assignment.started_at.max(from), Utc::now()),
                assignment,
                contact,
            }
        })
        .collect())
}

/// The supersede lineage of a contact: its ancestors, itself and its successors, oldest
/// first.
pub async fn lineage(
    client: &impl GenericClient,
    contact_id: Uuid,
) -> Result<Vec<ContactView>, tokio_postgres::Error> {
    let sql = include_str!("../sql/queries/lineage.sql");
    Ok(cached::query(client, sql, &[&contact_id])
        .await?
        .iter()
        .map(ContactView::from_row)
        .collect())
}

/// Where a history page starts: after this assignment in (started_at, assignment_id) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryCursor {
    /// Start of the last assignment returned.
    pub started_at: DateTime<Utc>,
    /// Id of the last assignment returned.
    pub assignment_id: Uuid,
}

/// One page of a business's assignment history, every jurisdiction, oldest first. Keyset
/// pagination: the cost of a page does not grow with its position.
pub async fn assignment_history(
    client: &impl GenericClient,
    business_id: Uuid,
    after: Option<HistoryCursor>,
    limit: i64,
) -> Result<Vec<AssignmentView>, tokio_postgres::Error> {
    let (started_at, assignment_id) = after.map_or((None, None), |cursor| {
        (Some(cursor.started_at), Some(cursor.assignment_id))
    });
    let sql = ASSIGNMENT_HISTORY_SQL;
    Ok(cached::query(
        client,
        sql,
        &[&business_id, &started_at, &assignment_id, &limit],
    )
    .await?
    .iter()
    .map(AssignmentView::from_row)
    .collect())
}
