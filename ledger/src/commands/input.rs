//! What the commands take, as clients send it (JSON bodies, CLI arguments), and what a
//! supersede answers. Unknown fields are refused; values are checked by the commands.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use crate::domain::{self, Jurisdiction, PostalAddress, ValidationError, assignment_stream};
use crate::queries::ContactView;
use crate::reassign::RunStarted;

/// Create the first primary contact of a jurisdiction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateContact {
    /// Jurisdiction code, e.g. `TX`.
    pub jurisdiction: String,
    /// Name of the registered-agent office.
    pub name: String,
    /// Its postal address.
    pub address: PostalAddress,
    /// Business time; defaults to now.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub effective_at: Option<DateTime<Utc>>,
}

/// Supersede a primary contact with a new one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupersedeContact {
    /// Name of the new registered-agent office.
    pub name: String,
    /// Its postal address.
    pub address: PostalAddress,
    /// Business time; defaults to now.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub effective_at: Option<DateTime<Utc>>,
    /// The old contact's stream version the caller saw; a mismatch is a conflict.
    #[serde(default)]
    pub expected_version: Option<i64>,
    /// Rows per page of the reassignment run (default 1,000, at most 10,000).
    #[serde(default)]
    pub page_size: Option<u32>,
}

/// Start another reassignment run for a superseded contact.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartReassignment {
    /// Rows per page (default 1,000, at most 10,000).
    #[serde(default)]
    pub page_size: Option<u32>,
}

/// A business subscribes in a jurisdiction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assign {
    /// The customer's business.
    pub business_id: Uuid,
    /// Jurisdiction code.
    pub jurisdiction: String,
    /// Business time; defaults to now.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub effective_at: Option<DateTime<Utc>>,
}

/// An assignment to start, checked: a known jurisdiction and, if given, a business time the
/// ledger keeps (to the microsecond). What [`Assign`] becomes before any transaction, and
/// what an import, which checked its file already, hands a batch directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewAssignment {
    /// The customer's business.
    pub business_id: Uuid,
    /// The jurisdiction.
    pub jurisdiction: Jurisdiction,
    /// Business time; `None` for the time of the transaction.
    pub effective_at: Option<DateTime<Utc>>,
}

impl NewAssignment {
    /// Checks what a client sent.
    pub fn checked(assign: &Assign) -> Result<Self, ValidationError> {
        Ok(Self {
            business_id: assign.business_id,
            jurisdiction: Jurisdiction::parse("jurisdiction", &assign.jurisdiction)?,
            effective_at: assign
                .effective_at
                .map(|time| domain::instant("effective_at", time))
                .transpose()?,
        })
    }

    /// The stream of the business's assignments in the jurisdiction.
    pub fn stream(&self) -> String {
        assignment_stream(self.business_id, self.jurisdiction)
    }
}

/// End or replace one assignment.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeAssignment {
    /// Business time; defaults to now.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub effective_at: Option<DateTime<Utc>>,
    /// The registration stream version the caller saw; a mismatch is a conflict.
    #[serde(default)]
    pub expected_version: Option<i64>,
}

/// The result of a supersede.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Superseded {
    /// The demoted contact.
    pub old: ContactView,
    /// The new primary contact.
    pub new: ContactView,
    /// The run that repoints the old contact's active assignments, started by the same
    /// transaction.
    pub run: RunStarted,
}
