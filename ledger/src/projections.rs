//! Projections: the current view and the full history, folded from events.
//!
//! The same [`apply`] runs inline in every command's transaction (so clients read their own
//! writes) and during `ledger projections rebuild`, so the two can only differ if the
//! events say so.

use chrono::{DateTime, TimeZone, Utc};
use deadpool_postgres::GenericClient;
use ra_ledger_proto::v1::{self, envelope::Event};

use crate::db::cached;
use uuid::Uuid;

/// Why an event could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// The event references something the projection does not hold, or holds in another
    /// state; the projections and the ledger disagree.
    #[error("event {event_id} ({event_type}) does not fit the projection: {reason}")]
    Mismatch {
        /// The event.
        event_id: String,
        /// Its type.
        event_type: String,
        /// What did not fit.
        reason: String,
    },
    /// The database failed.
    #[error("database error while projecting: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// Microseconds since the Unix epoch as a UTC time.
pub fn from_micros(micros: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(micros).single().unwrap_or_default()
}

fn uuid(field: &str, value: &str, envelope: &v1::Envelope) -> Result<Uuid, ProjectionError> {
    value
        .parse()
        .map_err(|_| mismatch(envelope, format!("{field} {value:?} is not a UUID")))
}

fn optional_uuid(
    field: &str,
    value: &str,
    envelope: &v1::Envelope,
) -> Result<Option<Uuid>, ProjectionError> {
    if value.is_empty() {
        Ok(None)
    } else {
        uuid(field, value, envelope).map(Some)
    }
}

fn mismatch(envelope: &v1::Envelope, reason: impl Into<String>) -> ProjectionError {
    ProjectionError::Mismatch {
        event_id: envelope.event_id.clone(),
        event_type: envelope.event_type.clone(),
        reason: reason.into(),
    }
}

/// Folds one event into the projection tables visible on `client`'s search path.
pub async fn apply(
    client: &impl GenericClient,
    envelope: &v1::Envelope,
) -> Result<(), ProjectionError> {
    let Some(event) = &envelope.event else {
        return Err(mismatch(envelope, "envelope carries no event"));
    };
    let changed = match event {
        Event::ContactCreated(created) => contact_created(client, envelope, created).await?,
        Event::ContactSuperseded(superseded) => {
            contact_superseded(client, envelope, superseded).await?
        }
        Event::AssignmentStarted(started) => assignment_started(client, envelope, started).await?,
        Event::AssignmentEnded(ended) => assignment_ended(client, envelope, ended).await?,
        // A run's progress lives in the reassignment tables, which the worker keeps in the
        // page's own transaction; the contact and assignment views do not change.
        Event::ReassignmentPageRequested(_)
        | Event::ReassignmentRowFailed(_)
        | Event::ReassignmentCompleted(_) => return Ok(()),
    };
    if changed != 1 {
        return Err(mismatch(
            envelope,
            "the row it changes is missing or already in the target state",
        ));
    }
    Ok(())
}

async fn contact_created(
    client: &impl GenericClient,
    envelope: &v1::Envelope,
    created: &v1::ContactCreated,
) -> Result<u64, ProjectionError> {
    // Every field named, none with `..`: a field added to the event does not compile here
    // until the projection takes it or says why not.
    let v1::ContactCreated {
        contact_id,
        jurisdiction,
        name,
        address,
        status,
        supersedes,
    } = created;
    let address = address.clone().unwrap_or_default();
    let status = if *status == v1::ContactStatus::OnFile as i32 {
        "on_file"
    } else {
        "primary"
    };
    Ok(cached::execute(
        client,
        include_str!("sql/projections/contact_created.sql"),
        &[
            &uuid("contact_id", contact_id, envelope)?,
            jurisdiction,
            name,
            &address.line1,
            &address.line2,
            &address.city,
            &address.region,
            &address.postal_code,
            &status,
            &optional_uuid("supersedes", supersedes, envelope)?,
            &from_micros(envelope.effective_at_micros),
            &from_micros(envelope.recorded_at_micros),
            &envelope.stream_version,
        ],
    )
    .await?)
}

async fn contact_superseded(
    client: &impl GenericClient,
    envelope: &v1::Envelope,
    superseded: &v1::ContactSuperseded,
) -> Result<u64, ProjectionError> {
    let v1::ContactSuperseded {
        contact_id,
        // The contact's row has it since its creation.
        jurisdiction: _,
        superseded_by,
    } = superseded;
    Ok(cached::execute(
        client,
        include_str!("sql/projections/contact_superseded.sql"),
        &[
            &uuid("contact_id", contact_id, envelope)?,
            &uuid("superseded_by", superseded_by, envelope)?,
            &from_micros(envelope.effective_at_micros),
            &from_micros(envelope.recorded_at_micros),
            &envelope.stream_version,
        ],
    )
    .await?)
}

async fn assignment_started(
    client: &impl GenericClient,
    envelope: &v1::Envelope,
    started: &v1::AssignmentStarted,
) -> Result<u64, ProjectionError> {
    let v1::AssignmentStarted {
        assignment_id,
        business_id,
        jurisdiction,
        contact_id,
        replaces,
    } = started;
    Ok(cached::execute(
        client,
        include_str!("sql/projections/assignment_started.sql"),
        &[
            &uuid("assignment_id", assignment_id, envelope)?,
            &uuid("business_id", business_id, envelope)?,
            jurisdiction,
            &uuid("contact_id", contact_id, envelope)?,
            &from_micros(envelope.effective_at_micros),
            &optional_uuid("replaces", replaces, envelope)?,
            &from_micros(envelope.recorded_at_micros),
        ],
    )
    .await?)
}

async fn assignment_ended(
    client: &impl GenericClient,
    envelope: &v1::Envelope,
    ended: &v1::AssignmentEnded,
) -> Result<u64, ProjectionError> {
    let Ended {
        assignment_id,
        reason,
        replaced_by,
    } = Ended::of(ended);
    Ok(cached::execute(
        client,
        include_str!("sql/projections/assignment_ended.sql"),
        &[
            &uuid("assignment_id", assignment_id, envelope)?,
            &from_micros(envelope.effective_at_micros),
            &reason,
            &optional_uuid("replaced_by", replaced_by, envelope)?,
            &from_micros(envelope.recorded_at_micros),
        ],
    )
    .await?)
}

/// What an `AssignmentEnded` changes on its row, taken from every field of the event by
/// name: a field added to the event does not compile here until the projection takes it
/// or says why not.
struct Ended<'e> {
    assignment_id: &'e str,
    /// The database spelling of why it ended.
    reason: &'static str,
    replaced_by: &'e str,
}

impl<'e> Ended<'e> {
    fn of(ended: &'e v1::AssignmentEnded) -> Self {
        let v1::AssignmentEnded {
            assignment_id,
            // The row has these since its start.
            business_id: _,
            jurisdiction: _,
            contact_id: _,
            reason,
            replaced_by,
        } = ended;
        Self {
            assignment_id,
            reason: if *reason == v1::EndReason::Replaced as i32 {
                "replaced"
            } else {
                "cancelled"
            },
            replaced_by,
        }
    }
}

/// Folds a batch of recorded events, in order, with as few statements as the batch allows.
///
/// A batch of only assignment ends and starts where no assignment both starts and ends
/// (REPLACE pairs of distinct registrations, bulk assigns) is folded with one set-based
/// UPDATE for every end and then one INSERT for every start. That equals applying them one
/// by one: ends touch only rows that existed before the batch, starts only insert, and
/// ending first is what the one-active-assignment index needs. Any other batch falls back
/// to [`apply`] per event.
pub async fn apply_batch(
    client: &impl GenericClient,
    envelopes: &[&v1::Envelope],
) -> Result<(), ProjectionError> {
    let mut ends = EndColumns::default();
    let mut starts = StartColumns::default();
    for envelope in envelopes {
        match &envelope.event {
            Some(Event::AssignmentEnded(ended)) => ends.push(envelope, ended)?,
            Some(Event::AssignmentStarted(started)) => starts.push(envelope, started)?,
            _ => return apply_each(client, envelopes).await,
        }
    }
    if ends
        .assignment_id
        .iter()
        .any(|id| starts.assignment_id.contains(id))
    {
        return apply_each(client, envelopes).await;
    }
    if !ends.assignment_id.is_empty() {
        let changed = cached::execute(
            client,
            include_str!("sql/projections/assignments_ended.sql"),
            &[
                &ends.assignment_id,
                &ends.ended_at,
                &ends.reason,
                &ends.replaced_by,
                &ends.recorded_at,
            ],
        )
        .await?;
        if changed != ends.assignment_id.len() as u64 {
            return Err(ProjectionError::Mismatch {
                event_id: ends.event_id.join(","),
                event_type: "AssignmentEnded".into(),
                reason: format!(
                    "{} of {} assignments to end are missing or already ended",
                    ends.assignment_id.len() as u64 - changed,
                    ends.assignment_id.len()
                ),
            });
        }
    }
    if !starts.assignment_id.is_empty() {
        cached::execute(
            client,
            include_str!("sql/projections/assignments_started.sql"),
            &[
                &starts.assignment_id,
                &starts.business_id,
                &starts.jurisdiction,
                &starts.contact_id,
                &starts.started_at,
                &starts.replaces,
                &starts.recorded_at,
            ],
        )
        .await?;
    }
    Ok(())
}

async fn apply_each(
    client: &impl GenericClient,
    envelopes: &[&v1::Envelope],
) -> Result<(), ProjectionError> {
    for envelope in envelopes {
        apply(client, envelope).await?;
    }
    Ok(())
}

#[derive(Debug, Default)]
struct EndColumns {
    event_id: Vec<String>,
    assignment_id: Vec<Uuid>,
    ended_at: Vec<DateTime<Utc>>,
    reason: Vec<&'static str>,
    replaced_by: Vec<Option<Uuid>>,
    recorded_at: Vec<DateTime<Utc>>,
}

impl EndColumns {
    fn push(
        &mut self,
        envelope: &v1::Envelope,
        ended: &v1::AssignmentEnded,
    ) -> Result<(), ProjectionError> {
        let Ended {
            assignment_id,
            reason,
            replaced_by,
        } = Ended::of(ended);
        self.event_id.push(envelope.event_id.clone());
        self.assignment_id
            .push(uuid("assignment_id", assignment_id, envelope)?);
        self.ended_at
            .push(from_micros(envelope.effective_at_micros));
        self.reason.push(reason);
        self.replaced_by
            .push(optional_uuid("replaced_by", replaced_by, envelope)?);
        self.recorded_at
            .push(from_micros(envelope.recorded_at_micros));
        Ok(())
    }
}

#[derive(Debug, Default)]
struct StartColumns {
    assignment_id: Vec<Uuid>,
    business_id: Vec<Uuid>,
    jurisdiction: Vec<String>,
    contact_id: Vec<Uuid>,
    started_at: Vec<DateTime<Utc>>,
    replaces: Vec<Option<Uuid>>,
    recorded_at: Vec<DateTime<Utc>>,
}

impl StartColumns {
    fn push(
        &mut self,
        envelope: &v1::Envelope,
        started: &v1::AssignmentStarted,
    ) -> Result<(), ProjectionError> {
        // Every field by name, as in `assignment_started`: the two folds of a start cannot
        // take different fields.
        let v1::AssignmentStarted {
            assignment_id,
            business_id,
            jurisdiction,
            contact_id,
            replaces,
        } = started;
        self.assignment_id
            .push(uuid("assignment_id", assignment_id, envelope)?);
        self.business_id
            .push(uuid("business_id", business_id, envelope)?);
        self.jurisdiction.push(jurisdiction.clone());
        self.contact_id
            .push(uuid("contact_id", contact_id, envelope)?);
        self.started_at
            .push(from_micros(envelope.effective_at_micros));
        self.replaces
            .push(optional_uuid("replaces", replaces, envelope)?);
        self.recorded_at
            .push(from_micros(envelope.recorded_at_micros));
        Ok(())
    }
}
