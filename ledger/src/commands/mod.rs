//! Commands: each runs in one transaction that takes its locks, reads what it decides on,
//! appends its events, writes their outbox rows and updates the projections. A command that
//! fails leaves no trace; one that loses a deadlock runs again (see [`crate::write`] for
//! the lock order every write follows).
//!
//! By what they change: [`contacts`] (create, supersede, reassignment runs),
//! [`assignments`] (start, end, REPLACE, one at a time) and [`batch`] (many starts, all or
//! none). What they take is in [`input`].

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::domain::{self, ValidationError};
use crate::queries::ContactView;

mod assignments;
mod batch;
mod contacts;
mod input;

pub use crate::error::{CommandError, Race};
pub use crate::write::Ledger;
pub use batch::BatchItem;
pub use input::{
    Assign, ChangeAssignment, CreateContact, NewAssignment, StartReassignment, SupersedeContact,
    Superseded,
};

/// Most assignments one batch takes.
pub const MAX_BATCH: usize = 1_000;

/// How far ahead of the server clock an `effective_at` may be (clock skew).
const MAX_FUTURE_SKEW: Duration = Duration::minutes(5);

fn not_found(what: &'static str, id: Uuid) -> CommandError {
    CommandError::NotFound {
        what,
        id: id.to_string(),
    }
}

/// A requested business time, checked and kept to the microsecond.
fn requested_time(
    requested: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, ValidationError> {
    requested
        .map(|time| domain::instant("effective_at", time))
        .transpose()
}

fn effective_at(
    requested: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, ValidationError> {
    let effective = requested.unwrap_or(now);
    if effective > now + MAX_FUTURE_SKEW {
        return Err(ValidationError::new(
            "effective_at",
            format!("{effective} is in the future; the ledger records what has happened"),
        ));
    }
    Ok(effective)
}

fn check_not_before_contact(
    contact: &ContactView,
    effective_at: DateTime<Utc>,
) -> Result<(), ValidationError> {
    if effective_at < contact.created_at {
        return Err(ValidationError::new(
            "effective_at",
            format!(
                "{effective_at} is before contact {} took effect ({})",
                contact.contact_id, contact.created_at
            ),
        ));
    }
    Ok(())
}
