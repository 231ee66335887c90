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
    #[error("database error while projecting: {0}")]
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
    };
    if changed != 1 {
        return Err(mismatch(
            envelope,
            "the row it changes is missing or already in the target state",
        ));
    }
    Ok(())
}
