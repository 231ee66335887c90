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
    #[error("database error while projecting: {}", crate::error::describe(.0))]
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
    let effective_at = from_micros(envelope.effective_at_micros);
    let recorded_at = from_micros(envelope.recorded_at_micros);
    let Some(event) = &envelope.event else {
        return Err(mismatch(envelope, "envelope carries no event"));
    };
    let changed = match event {
        Event::ContactCreated(created) => {
            let address = created.address.clone().unwrap_or_default();
            let status = if created.status == v1::ContactStatus::OnFile as i32 {
                "on_file"
            } else {
                "primary"
            };
            cached::execute(client,
                    "INSERT INTO contacts (contact_id, jurisdiction, name, address_line1, address_line2, \
                     city, region, postal_code, status, supersedes, created_at, recorded_at, stream_version) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                    &[
                        &uuid("contact_id", &created.contact_id, envelope)?,
                        &created.jurisdiction,
                        &created.name,
                        &address.line1,
                        &address.line2,
                        &address.city,
                        &address.region,
                        &address.postal_code,
                        &status,
                        &optional_uuid("supersedes", &created.supersedes, envelope)?,
                        &effective_at,
                        &recorded_at,
                        &envelope.stream_version,
                    ],
                )
                .await?
        }
        Event::ContactSuperseded(superseded) => {
            cached::execute(
                client,
                "UPDATE contacts SET status = 'on_file', superseded_by = $2, superseded_at = $3, \
                     superseded_recorded_at = $4, stream_version = $5 \
                     WHERE contact_id = $1 AND status = 'primary'",
                &[
                    &uuid("contact_id", &superseded.contact_id, envelope)?,
                    &uuid("superseded_by", &superseded.superseded_by, envelope)?,
                    &effective_at,
                    &recorded_at,
                    &envelope.stream_version,
                ],
            )
            .await?
        }
        Event::AssignmentStarted(started) => {
            cached::execute(
                client,
                "INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, \
                     started_at, replaces, recorded_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &uuid("assignment_id", &started.assignment_id, envelope)?,
                    &uuid("business_id", &started.business_id, envelope)?,
                    &started.jurisdiction,
                    &uuid("contact_id", &started.contact_id, envelope)?,
                    &effective_at,
                    &optional_uuid("replaces", &started.replaces, envelope)?,
                    &recorded_at,
                ],
            )
            .await?
        }
        Event::AssignmentEnded(ended) => {
            let reason = if ended.reason == v1::EndReason::Replaced as i32 {
                "replaced"
            } else {
                "cancelled"
            };
            cached::execute(
                client,
                "UPDATE assignments SET ended_at = $2, end_reason = $3, replaced_by = $4, \
                     ended_recorded_at = $5 WHERE assignment_id = $1 AND ended_at IS NULL",
                &[
                    &uuid("assignment_id", &ended.assignment_id, envelope)?,
                    &effective_at,
                    &reason,
                    &optional_uuid("replaced_by", &ended.replaced_by, envelope)?,
                    &recorded_at,
                ],
            )
            .await?
        }
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
            "UPDATE assignments a SET ended_at = e.ended_at, end_reason = e.reason, \
             replaced_by = e.replaced_by, ended_recorded_at = e.recorded_at \
             FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::uuid[], $5::timestamptz[]) \
                  AS e(assignment_id, ended_at, reason, replaced_by, recorded_at) \
             WHERE a.assignment_id = e.assignment_id AND a.ended_at IS NULL",
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
            "INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, \
             started_at, replaces, recorded_at) \
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], \
                                  $5::timestamptz[], $6::uuid[], $7::timestamptz[])",
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
        self.event_id.push(envelope.event_id.clone());
        self.assignment_id
            .push(uuid("assignment_id", &ended.assignment_id, envelope)?);
        self.ended_at
            .push(from_micros(envelope.effective_at_micros));
        self.reason
            .push(if ended.reason == v1::EndReason::Replaced as i32 {
                "replaced"
            } else {
                "cancelled"
            });
        self.replaced_by
            .push(optional_uuid("replaced_by", &ended.replaced_by, envelope)?);
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
        self.assignment_id
            .push(uuid("assignment_id", &started.assignment_id, envelope)?);
        self.business_id
            .push(uuid("business_id", &started.business_id, envelope)?);
        self.jurisdiction.push(started.jurisdiction.clone());
        self.contact_id
            .push(uuid("contact_id", &started.contact_id, envelope)?);
        self.started_at
            .push(from_micros(envelope.effective_at_micros));
        self.replaces
            .push(optional_uuid("replaces", &started.replaces, envelope)?);
        self.recorded_at
            .push(from_micros(envelope.recorded_at_micros));
        Ok(())
    }
}
