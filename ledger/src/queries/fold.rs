//! The audit answer folded from events alone, with no projection: what a proven as-of
//! answer is checked against (`ledger proof verify`), and the oracle of the as-of tests.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use super::{AssignmentView, ContactView, RegisteredAgent};
use crate::domain::{ContactStatus, EndReason, Jurisdiction, PostalAddress};
use crate::projections::from_micros;

/// Contacts and assignments as the ledger knew them at some `known_at`, folded from events.
#[derive(Debug, Default)]
pub struct Fold {
    /// Contacts by id.
    pub contacts: BTreeMap<Uuid, ContactView>,
    /// Assignments by id.
    pub assignments: BTreeMap<Uuid, AssignmentView>,
}

/// When an event took effect, and when the ledger recorded it.
#[derive(Debug, Clone, Copy)]
struct At {
    effective: DateTime<Utc>,
    recorded: DateTime<Utc>,
}

fn uuid(field: &str, text: &str) -> Result<Uuid, String> {
    text.parse()
        .map_err(|_| format!("{field} {text:?} is not a UUID"))
}

fn optional(field: &str, text: &str) -> Result<Option<Uuid>, String> {
    if text.is_empty() {
        Ok(None)
    } else {
        uuid(field, text).map(Some)
    }
}

impl Fold {
    /// Folds `events` (in stream-version order per stream), skipping those recorded after
    /// `known_at`. Errors name an event the fold cannot place (an end before its start).
    // One arm per event type, as in the ledger's projections.
    pub fn new(events: &[v1::Envelope], known_at: DateTime<Utc>) -> Result<Self, String> {
        let mut fold = Self::default();
        for envelope in events {
            let recorded = from_micros(envelope.recorded_at_micros);
            if recorded > known_at {
                continue;
            }
            let at = At {
                effective: from_micros(envelope.effective_at_micros),
                recorded,
            };
            match &envelope.event {
                Some(Event::ContactCreated(created)) => {
                    fold.contact_created(envelope, created, at)?;
                }
                Some(Event::ContactSuperseded(superseded)) => {
                    fold.contact_superseded(envelope, superseded, at)?;
                }
                Some(Event::AssignmentStarted(started)) => fold.assignment_started(started, at)?,
                Some(Event::AssignmentEnded(ended)) => {
                    fold.assignment_ended(envelope, ended, at)?
                }
                // Runs change no contact and no assignment; an envelope without an event
                // has nothing to fold. Named, not `_`: a new event type does not compile
                // here until the fold says what it does.
                Some(
                    Event::ReassignmentPageRequested(_)
                    | Event::ReassignmentRowFailed(_)
                    | Event::ReassignmentCompleted(_),
                )
                | None => {}
            }
        }
        Ok(fold)
    }

    fn contact_created(
        &mut self,
        envelope: &v1::Envelope,
        created: &v1::ContactCreated,
        at: At,
    ) -> Result<(), String> {
        // Every field by name, as the projections take them: a field added to an event does
        // not compile here until the fold takes it too.
        let v1::ContactCreated {
            contact_id,
            jurisdiction,
            name,
            address,
            // A contact is created primary; a supersede demotes it.
            status: _,
            supersedes,
        } = created;
        let address = address.clone().unwrap_or_default();
        let contact_id = uuid("contact_id", contact_id)?;
        self.contacts.insert(
            contact_id,
            ContactView {
                contact_id,
                jurisdiction: Jurisdiction::parse("jurisdiction", jurisdiction)
                    .map_err(|error| error.to_string())?,
                name: name.clone(),
                address: PostalAddress {
                    line1: address.line1,
                    line2: address.line2,
                    city: address.city,
                    region: address.region,
                    postal_code: address.postal_code,
                },
                status: ContactStatus::Primary,
                supersedes: optional("supersedes", supersedes)?,
                superseded_by: None,
                created_at: at.effective,
                recorded_at: at.recorded,
                superseded_at: None,
                superseded_recorded_at: None,
                version: envelope.stream_version,
            },
        );
        Ok(())
    }

    fn contact_superseded(
        &mut self,
        envelope: &v1::Envelope,
        superseded: &v1::ContactSuperseded,
        at: At,
    ) -> Result<(), String> {
        let v1::ContactSuperseded {
            contact_id,
            jurisdiction: _,
            superseded_by,
        } = superseded;
        let contact_id = uuid("contact_id", contact_id)?;
        let contact = self.contacts.get_mut(&contact_id).ok_or_else(|| {
            format!(
                "event {}: contact {contact_id} superseded before it was created",
                envelope.event_id
            )
        })?;
        contact.status = ContactStatus::OnFile;
        contact.superseded_by = Some(uuid("superseded_by", superseded_by)?);
        contact.superseded_at = Some(at.effective);
        contact.superseded_recorded_at = Some(at.recorded);
        contact.version = envelope.stream_version;
        Ok(())
    }

    fn assignment_started(
        &mut self,
        started: &v1::AssignmentStarted,
        at: At,
    ) -> Result<(), String> {
        let v1::AssignmentStarted {
            assignment_id,
            business_id,
            jurisdiction,
            contact_id,
            replaces,
        } = started;
        let assignment_id = uuid("assignment_id", assignment_id)?;
        self.assignments.insert(
            assignment_id,
            AssignmentView {
                assignment_id,
                business_id: uuid("business_id", business_id)?,
                jurisdiction: Jurisdiction::parse("jurisdiction", jurisdiction)
                    .map_err(|error| error.to_string())?,
                contact_id: uuid("contact_id", contact_id)?,
                started_at: at.effective,
                ended_at: None,
                end_reason: None,
                replaces: optional("replaces", replaces)?,
                replaced_by: None,
                recorded_at: at.recorded,
                ended_recorded_at: None,
            },
        );
        Ok(())
    }

    fn assignment_ended(
        &mut self,
        envelope: &v1::Envelope,
        ended: &v1::AssignmentEnded,
        at: At,
    ) -> Result<(), String> {
        let v1::AssignmentEnded {
            assignment_id,
            // The assignment has these since its start.
            business_id: _,
            jurisdiction: _,
            contact_id: _,
            reason,
            replaced_by,
        } = ended;
        let assignment_id = uuid("assignment_id", assignment_id)?;
        let assignment = self.assignments.get_mut(&assignment_id).ok_or_else(|| {
            format!(
                "event {}: assignment {assignment_id} ended before it started",
                envelope.event_id
            )
        })?;
        assignment.ended_at = Some(at.effective);
        assignment.end_reason = Some(if *reason == v1::EndReason::Replaced as i32 {
            EndReason::Replaced
        } else {
            EndReason::Cancelled
        });
        assignment.replaced_by = optional("replaced_by", replaced_by)?;
        assignment.ended_recorded_at = Some(at.recorded);
        Ok(())
    }

    /// The assignment in force at `at`: the newest with `started_at <= at < ended_at`, if
    /// any, whether or not its contact was folded (a proof's verifier asks which contact
    /// stream the answer needs).
    pub fn assignment_at(&self, at: DateTime<Utc>) -> Option<&AssignmentView> {
        self.assignments
            .values()
            .filter(|a| a.started_at <= at && a.ended_at.is_none_or(|ended| ended > at))
            .max_by_key(|a| (a.started_at, a.assignment_id))
    }

    /// Who was the RA at `at`: the newest assignment with `started_at <= at < ended_at`,
    /// with its contact. `None` when no assignment was in force, or when its contact is
    /// not among the folded events.
    pub fn registered_agent_at(&self, at: DateTime<Utc>) -> Option<RegisteredAgent> {
        let assignment = self.assignment_at(at)?.clone();
        let contact = self.contacts.get(&assignment.contact_id)?.clone();
        let contact_status = match contact.superseded_at {
            Some(superseded) if superseded <= at => ContactStatus::OnFile,
            _ => ContactStatus::Primary,
        };
        Some(RegisteredAgent {
            assignment,
            contact,
            contact_status,
        })
    }
}
