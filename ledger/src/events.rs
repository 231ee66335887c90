//! Domain -> event: the events the commands and the reassignment pages append, built from
//! validated domain values in one place.

use chrono::{DateTime, Utc};
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use crate::domain::{ContactDetails, Jurisdiction};
use crate::queries::AssignmentView;
use crate::store::NewEvent;

/// A new primary contact, superseding `supersedes` when given.
pub fn contact_created(
    contact_id: Uuid,
    jurisdiction: Jurisdiction,
    details: &ContactDetails,
    supersedes: Option<Uuid>,
) -> Event {
    Event::ContactCreated(v1::ContactCreated {
        contact_id: contact_id.to_string(),
        jurisdiction: jurisdiction.code().to_owned(),
        name: details.name.clone(),
        address: Some(v1::PostalAddress {
            line1: details.address.line1.clone(),
            line2: details.address.line2.clone(),
            city: details.address.city.clone(),
            region: details.address.region.clone(),
            postal_code: details.address.postal_code.clone(),
        }),
        status: v1::ContactStatus::Primary.into(),
        supersedes: supersedes.map(|id| id.to_string()).unwrap_or_default(),
    })
}

/// A primary contact demoted to on_file in favour of `successor`.
pub fn contact_superseded(contact_id: Uuid, jurisdiction: Jurisdiction, successor: Uuid) -> Event {
    Event::ContactSuperseded(v1::ContactSuperseded {
        contact_id: contact_id.to_string(),
        jurisdiction: jurisdiction.code().to_owned(),
        superseded_by: successor.to_string(),
    })
}

/// A business starts being served by `contact_id`, replacing `replaces` when given.
pub fn assignment_started(
    assignment_id: Uuid,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    contact_id: Uuid,
    replaces: Option<Uuid>,
) -> Event {
    Event::AssignmentStarted(v1::AssignmentStarted {
        assignment_id: assignment_id.to_string(),
        business_id: business_id.to_string(),
        jurisdiction: jurisdiction.code().to_owned(),
        contact_id: contact_id.to_string(),
        replaces: replaces.map(|id| id.to_string()).unwrap_or_default(),
    })
}

/// An active assignment ends because its subscription was cancelled.
pub fn assignment_cancelled(assignment: &AssignmentView, jurisdiction: Jurisdiction) -> Event {
    Event::AssignmentEnded(v1::AssignmentEnded {
        assignment_id: assignment.assignment_id.to_string(),
        business_id: assignment.business_id.to_string(),
        jurisdiction: jurisdiction.code().to_owned(),
        contact_id: assignment.contact_id.to_string(),
        reason: v1::EndReason::Cancelled.into(),
        replaced_by: String::new(),
    })
}

/// The two events of a REPLACE: end `old`, start `new_id` on `contact_id`, same instant.
pub fn replace_events(
    old: &AssignmentView,
    jurisdiction: Jurisdiction,
    new_id: Uuid,
    contact_id: Uuid,
    effective_at: DateTime<Utc>,
) -> Vec<NewEvent> {
    vec![
        NewEvent::new(
            Event::AssignmentEnded(v1::AssignmentEnded {
                assignment_id: old.assignment_id.to_string(),
                business_id: old.business_id.to_string(),
                jurisdiction: jurisdiction.code().to_owned(),
                contact_id: old.contact_id.to_string(),
                reason: v1::EndReason::Replaced.into(),
                replaced_by: new_id.to_string(),
            }),
            effective_at,
        ),
        NewEvent::new(
            assignment_started(
                new_id,
                old.business_id,
                jurisdiction,
                contact_id,
                Some(old.assignment_id),
            ),
            effective_at,
        ),
    ]
}
