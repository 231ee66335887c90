//! One assignment at a time: start, end and REPLACE.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use uuid::Uuid;

use super::{
    Assign, ChangeAssignment, CommandError, Ledger, NewAssignment, check_not_before_contact,
    effective_at, not_found, requested_time,
};
use crate::domain::{
    ASSIGNMENT_AGGREGATE, Jurisdiction, ValidationError, assignment_stream, registration_id,
};
use crate::events;
use crate::queries::{self, AssignmentView, LockMode, PrimaryContactLock};
use crate::store::{self, Metadata, NewEvent, StreamAppend};
use crate::write;

impl Ledger {
    /// Starts an assignment of a business to the jurisdiction's primary contact.
    ///
    /// The hot path of bulk onboarding: one round trip for the lock and every lookup, one
    /// append, one projection row.
    pub async fn assign(
        &self,
        command: Assign,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let item = NewAssignment::checked(&command)?;
        self.write(|tx, _| {
            Box::pin(async move {
                // The lock, the heads and the lookups travel in one round trip. The lock is
                // sent first and the server runs them in order, so the lookups see any
                // supersede that committed while the lock waited; the heads go before the
                // lookups for the reason given in `batch`.
                let lock =
                    PrimaryContactLock::prepare(tx, item.jurisdiction, LockMode::Shared).await?;
                let streams = [item.stream()];
                let (_, heads, context) = tokio::try_join!(
                    biased;
                    lock.take(tx),
                    store::read_heads(tx, &streams),
                    queries::assign_context(tx, item.business_id, item.jurisdiction),
                )?;
                let (append, view) = new_assignment(&item, &context, heads.now)?;
                write::record(tx, &[append], &heads, metadata).await?;
                Ok(view)
            })
        })
        .await
    }

    /// Ends an assignment because the subscription was cancelled.
    pub async fn end_assignment(
        &self,
        assignment_id: Uuid,
        command: ChangeAssignment,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let requested = requested_time(command.effective_at)?;
        self.write(|tx, _| {
            Box::pin(async move {
                // The row lock comes first, as in a reassignment page: whoever holds it
                // finishes, and the other then finds the assignment ended instead of
                // deadlocking on the stream's next version.
                let locked = queries::assignment_for_update(tx, assignment_id).await?;
                let (active, jurisdiction) = active(locked, assignment_id)?;
                let streams = [assignment_stream(active.business_id, jurisdiction)];
                let heads = store::read_heads(tx, &streams).await?;
                let appends = [StreamAppend {
                    aggregate_type: ASSIGNMENT_AGGREGATE,
                    aggregate_id: registration_id(active.business_id, jurisdiction),
                    expected_version: command.expected_version,
                    events: vec![NewEvent::new(
                        events::assignment_cancelled(&active, jurisdiction),
                        effective_at(requested, heads.now)?,
                    )],
                }];
                write::record(tx, &appends, &heads, metadata).await?;
                assignment_in(tx, assignment_id).await
            })
        })
        .await
    }

    /// REPLACE: ends an assignment and starts a new one on the jurisdiction's current
    /// primary contact, at the same instant, linked both ways.
    pub async fn replace_assignment(
        &self,
        assignment_id: Uuid,
        command: ChangeAssignment,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let requested = requested_time(command.effective_at)?;
        self.write(|tx, _| {
            Box::pin(async move {
                // Business and jurisdiction never change: read them to know which lock to take.
                let found = queries::assignment(tx, assignment_id)
                    .await?
                    .ok_or_else(|| not_found("assignment", assignment_id))?;
                let jurisdiction = found.jurisdiction;
                // Like an assign, a REPLACE puts an assignment on the primary contact: it holds
                // the shared lock from before it reads that contact until it commits, so it
                // never lands on a contact whose supersede committed first. Then the row, then
                // the heads and the time, all in one round trip.
                let lock = PrimaryContactLock::prepare(tx, jurisdiction, LockMode::Shared).await?;
                let streams = [assignment_stream(found.business_id, jurisdiction)];
                let (_, locked, primary, heads) = tokio::try_join!(
                    biased;
                    lock.take(tx),
                    queries::assignment_for_update(tx, assignment_id),
                    queries::primary_contact(tx, jurisdiction),
                    store::read_heads(tx, &streams),
                )?;
                let (active, jurisdiction) = active(locked, assignment_id)?;
                let primary = primary.ok_or_else(|| {
                    CommandError::Conflict(format!(
                        "{} has no primary contact",
                        jurisdiction.code()
                    ))
                })?;
                let effective_at = effective_at(requested, heads.now)?;
                check_not_before_contact(&primary, effective_at)?;
                let new_id = Uuid::now_v7();
                let appends = [StreamAppend {
                    aggregate_type: ASSIGNMENT_AGGREGATE,
                    aggregate_id: registration_id(active.business_id, jurisdiction),
                    expected_version: command.expected_version,
                    events: events::replace_events(
                        &active,
                        jurisdiction,
                        new_id,
                        primary.contact_id,
                        effective_at,
                    ),
                }];
                write::record(tx, &appends, &heads, metadata).await?;
                assignment_in(tx, new_id).await
            })
        })
        .await
    }

    /// One assignment.
    pub async fn assignment(&self, assignment_id: Uuid) -> Result<AssignmentView, CommandError> {
        let client = self.pool().get().await?;
        queries::assignment(&client, assignment_id)
            .await?
            .ok_or_else(|| not_found("assignment", assignment_id))
    }
}

/// The checks and the `AssignmentStarted` of one new assignment, given its context read
/// under the jurisdiction's primary-contact lock. A batch wraps its errors in
/// [`CommandError::Item`].
pub(super) fn new_assignment(
    item: &NewAssignment,
    context: &queries::AssignContext,
    now: DateTime<Utc>,
) -> Result<(StreamAppend, AssignmentView), CommandError> {
    let NewAssignment {
        business_id,
        jurisdiction,
        effective_at: requested,
    } = *item;
    let effective_at = effective_at(requested, now)?;
    let Some((contact_id, contact_created_at)) = context.primary else {
        return Err(CommandError::Conflict(format!(
            "{} has no primary contact yet; create one first",
            jurisdiction.code()
        )));
    };
    if effective_at < contact_created_at {
        return Err(ValidationError::new(
            "effective_at",
            format!(
                "{effective_at} is before contact {contact_id} took effect ({contact_created_at})"
            ),
        )
        .into());
    }
    if let Some(active) = context.active_assignment {
        return Err(CommandError::Conflict(format!(
            "business {business_id} already has active assignment {active} in {}",
            jurisdiction.code()
        )));
    }
    let assignment_id = Uuid::now_v7();
    let started =
        events::assignment_started(assignment_id, business_id, jurisdiction, contact_id, None);
    let append = StreamAppend {
        aggregate_type: ASSIGNMENT_AGGREGATE,
        aggregate_id: registration_id(business_id, jurisdiction),
        // The active-assignment check above and the unique index guard this append.
        expected_version: None,
        events: vec![NewEvent::new(started, effective_at)],
    };
    let view = AssignmentView {
        assignment_id,
        business_id,
        jurisdiction,
        contact_id,
        started_at: effective_at,
        ended_at: None,
        end_reason: None,
        replaces: None,
        replaced_by: None,
        recorded_at: now,
        ended_recorded_at: None,
    };
    Ok((append, view))
}

/// The locked assignment, if it exists and is still active, with its jurisdiction.
fn active(
    locked: Option<AssignmentView>,
    assignment_id: Uuid,
) -> Result<(AssignmentView, Jurisdiction), CommandError> {
    let assignment = locked.ok_or_else(|| not_found("assignment", assignment_id))?;
    if let Some(ended_at) = assignment.ended_at {
        let by = assignment
            .replaced_by
            .map(|successor| format!(", replaced by {successor}"))
            .unwrap_or_default();
        return Err(CommandError::Conflict(format!(
            "assignment {assignment_id} already ended at {ended_at}{by}"
        )));
    }
    let jurisdiction = assignment.jurisdiction;
    Ok((assignment, jurisdiction))
}

async fn assignment_in(
    tx: &Transaction<'_>,
    assignment_id: Uuid,
) -> Result<AssignmentView, CommandError> {
    queries::assignment(tx, assignment_id)
        .await?
        .ok_or_else(|| not_found("assignment", assignment_id))
}
