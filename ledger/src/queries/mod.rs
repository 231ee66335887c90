//! Read side: contacts, assignments and the audit questions, answered from the projections.
//!
//! Time has two axes. `at` is business time (`effective_at`: when a change took effect);
//! `known_at` is transaction time (`recorded_at`: when the ledger learned it). "Who was the
//! RA at T, as known at K" ignores everything recorded after K. The audit questions are in
//! [`audit`]; this module holds the views and the lookups the commands make, and the
//! console's reads: a business's or a contact's whole record ([`records`]) and its search
//! ([`search`]).
//!
//! Each view has one column list, its `COLUMNS`, and its reader finds each column by name:
//! every statement read as a view selects exactly that list, in any order, and the test
//! `queries::every_statement_read_as_a_view_selects_its_columns` prepares each one to hold
//! it there. Not a SQL view: an online rebuild moves the projection tables to another
//! schema, and a view would follow the retired tables.

mod audit;
mod fold;
mod records;
mod search;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

pub use audit::{
    ASSIGNMENT_HISTORY_SQL, HistoryCursor, REGISTERED_AGENT_AT_SQL, REGISTERED_AGENTS_DURING_SQL,
    RegisteredAgent, assignment_history, lineage, registered_agent_at, registered_agents_during,
};
pub use fold::Fold;
pub use records::{
    BusinessRecord, ContactRecord, StreamEvent, Timeline, business_record, contact_record, contacts,
};
pub use search::{Found, SEARCH_LIMIT, find_id, search_contacts};

use crate::db::cached;
use crate::domain::{ContactStatus, EndReason, Jurisdiction, PostalAddress};

/// A jurisdiction column read as a [`Jurisdiction`]: the read views carry the type, so a
/// command that reads a view never parses its code again. The columns reference the
/// `jurisdictions` table, which holds the same codes as [`crate::domain::JURISDICTIONS`].
impl<'a> tokio_postgres::types::FromSql<'a> for Jurisdiction {
    fn from_sql(
        ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let code = <&str as tokio_postgres::types::FromSql>::from_sql(ty, raw)?;
        Ok(Jurisdiction::parse("jurisdiction", code)?)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::FromSql>::accepts(ty)
    }
}

/// A contact as the projection holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContactView {
    /// Contact id.
    pub contact_id: Uuid,
    /// Jurisdiction (its code in JSON).
    pub jurisdiction: Jurisdiction,
    /// Office name.
    pub name: String,
    /// Postal address.
    pub address: PostalAddress,
    /// Current status.
    pub status: ContactStatus,
    /// The contact this one replaced.
    pub supersedes: Option<Uuid>,
    /// The contact that replaced this one.
    pub superseded_by: Option<Uuid>,
    /// When it took effect.
    pub created_at: DateTime<Utc>,
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
    /// When it was superseded.
    pub superseded_at: Option<DateTime<Utc>>,
    /// When the ledger recorded the supersede.
    pub superseded_recorded_at: Option<DateTime<Utc>>,
    /// Version of the contact's stream.
    pub version: i64,
}

impl ContactView {
    /// The view's columns: every statement whose rows are read as contacts selects exactly
    /// these, in any order, and [`ContactView::from_row`] reads them by name. The test
    /// `queries::every_statement_read_as_a_view_selects_its_columns` holds each statement
    /// to this list.
    pub const COLUMNS: [&'static str; 16] = [
        "contact_id",
        "jurisdiction",
        "name",
        "address_line1",
        "address_line2",
        "city",
        "region",
        "postal_code",
        "status",
        "supersedes",
        "superseded_by",
        "created_at",
        "recorded_at",
        "superseded_at",
        "superseded_recorded_at",
        "stream_version",
    ];

    /// What a statement that joins an assignment with its contact puts before each of the
    /// contact's [`COLUMNS`](Self::COLUMNS), so that no name is read twice (both views have
    /// a `recorded_at`, of different events).
    pub const JOINED_PREFIX: &'static str = "c_";

    pub(crate) fn from_row(row: &Row) -> Self {
        Self::read(&Named { row, prefix: "" })
    }

    /// The contact of a row that also holds its assignment: its columns carry
    /// [`JOINED_PREFIX`](Self::JOINED_PREFIX).
    pub(crate) fn from_joined_row(row: &Row) -> Self {
        Self::read(&Named {
            row,
            prefix: Self::JOINED_PREFIX,
        })
    }

    fn read(row: &Named<'_>) -> Self {
        let status: String = row.get("status");
        Self {
            contact_id: row.get("contact_id"),
            jurisdiction: row.get("jurisdiction"),
            name: row.get("name"),
            address: PostalAddress {
                line1: row.get("address_line1"),
                line2: row.get("address_line2"),
                city: row.get("city"),
                region: row.get("region"),
                postal_code: row.get("postal_code"),
            },
            status: if status == ContactStatus::Primary.as_str() {
                ContactStatus::Primary
            } else {
                ContactStatus::OnFile
            },
            supersedes: row.get("supersedes"),
            superseded_by: row.get("superseded_by"),
            created_at: row.get("created_at"),
            recorded_at: row.get("recorded_at"),
            superseded_at: row.get("superseded_at"),
            superseded_recorded_at: row.get("superseded_recorded_at"),
            version: row.get("stream_version"),
        }
    }

    /// The contact as the ledger knew it at `known_at`: a supersede recorded later is not
    /// known yet, so the contact is still the primary one with no successor. (A contact's
    /// stream holds `ContactCreated` and at most one `ContactSuperseded`, so its version
    /// then is one less.)
    pub fn as_known_at(mut self, known_at: DateTime<Utc>) -> Self {
        if self
            .superseded_recorded_at
            .is_some_and(|recorded| recorded > known_at)
        {
            self.status = ContactStatus::Primary;
            self.superseded_by = None;
            self.superseded_at = None;
            self.superseded_recorded_at = None;
            self.version -= 1;
        }
        self
    }

    /// The contact's status at business time `at`, as known at `known_at`.
    pub fn status_at(&self, at: DateTime<Utc>, known_at: DateTime<Utc>) -> ContactStatus {
        match (self.superseded_at, self.superseded_recorded_at) {
            (Some(superseded), Some(recorded)) if superseded <= at && recorded <= known_at => {
                ContactStatus::OnFile
            }
            _ => ContactStatus::Primary,
        }
    }
}

/// An assignment with its validity interval `[started_at, ended_at)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssignmentView {
    /// Assignment id.
    pub assignment_id: Uuid,
    /// The customer's business.
    pub business_id: Uuid,
    /// Jurisdiction (its code in JSON).
    pub jurisdiction: Jurisdiction,
    /// The serving contact.
    pub contact_id: Uuid,
    /// Start (business time).
    pub started_at: DateTime<Utc>,
    /// End (business time); open while active.
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended.
    pub end_reason: Option<EndReason>,
    /// The assignment this one replaced.
    pub replaces: Option<Uuid>,
    /// The assignment that replaced this one.
    pub replaced_by: Option<Uuid>,
    /// When the ledger recorded the start.
    pub recorded_at: DateTime<Utc>,
    /// When the ledger recorded the end.
    pub ended_recorded_at: Option<DateTime<Utc>>,
}

impl AssignmentView {
    /// The view's columns: every statement whose rows are read as assignments selects
    /// exactly these, in any order (a joined one adds its contact's, prefixed), and
    /// [`AssignmentView::from_row`] reads them by name. The test
    /// `queries::every_statement_read_as_a_view_selects_its_columns` holds each statement
    /// to this list.
    pub const COLUMNS: [&'static str; 11] = [
        "assignment_id",
        "business_id",
        "jurisdiction",
        "contact_id",
        "started_at",
        "ended_at",
        "end_reason",
        "replaces",
        "replaced_by",
        "recorded_at",
        "ended_recorded_at",
    ];

    /// An assignment from a row holding its [`COLUMNS`](Self::COLUMNS), read by name.
    /// Public for the reassignment benchmark's one-transaction comparison, which locks a
    /// contact's rows as a page does.
    pub fn from_row(row: &Row) -> Self {
        let row = Named { row, prefix: "" };
        let reason: Option<String> = row.get("end_reason");
        Self {
            assignment_id: row.get("assignment_id"),
            business_id: row.get("business_id"),
            jurisdiction: row.get("jurisdiction"),
            contact_id: row.get("contact_id"),
            started_at: row.get("started_at"),
            ended_at: row.get("ended_at"),
            end_reason: reason.map(|reason| {
                if reason == EndReason::Replaced.as_str() {
                    EndReason::Replaced
                } else {
                    EndReason::Cancelled
                }
            }),
            replaces: row.get("replaces"),
            replaced_by: row.get("replaced_by"),
            recorded_at: row.get("recorded_at"),
            ended_recorded_at: row.get("ended_recorded_at"),
        }
    }
}

/// A row read by column name, each name behind `prefix`: a view's columns are found
/// wherever its statement puts them, so neither a column moved nor one added before them
/// shifts what is read.
struct Named<'r> {
    row: &'r Row,
    prefix: &'static str,
}

impl Named<'_> {
    /// The column `name` (behind the prefix); a statement without it panics, which the
    /// columns test rules out for every statement read as a view.
    fn get<'a, T: tokio_postgres::types::FromSql<'a>>(&'a self, name: &str) -> T {
        if self.prefix.is_empty() {
            self.row.get(name)
        } else {
            self.row.get(format!("{}{name}", self.prefix).as_str())
        }
    }
}

impl AssignmentView {
    /// The assignment as the ledger knew it at `known_at`: an end recorded later is not
    /// known yet, so the assignment is still open.
    pub fn as_known_at(mut self, known_at: DateTime<Utc>) -> Self {
        if self
            .ended_recorded_at
            .is_some_and(|recorded| recorded > known_at)
        {
            self.ended_at = None;
            self.end_reason = None;
            self.replaced_by = None;
            self.ended_recorded_at = None;
        }
        self
    }

    /// Whether it was in force at some instant: its interval `[started_at, ended_at)` is
    /// not empty. An assignment ended at the instant it started never served.
    pub fn ever_in_force(&self) -> bool {
        self.ended_at.is_none_or(|ended| ended > self.started_at)
    }
}

/// One contact.
pub async fn contact(
    client: &impl GenericClient,
    contact_id: Uuid,
) -> Result<Option<ContactView>, tokio_postgres::Error> {
    Ok(cached::query_opt(
        client,
        include_str!("../sql/queries/contact.sql"),
        &[&contact_id],
    )
    .await?
    .map(|row| ContactView::from_row(&row)))
}

/// The jurisdiction's primary contact, if any.
pub async fn primary_contact(
    client: &impl GenericClient,
    jurisdiction: Jurisdiction,
) -> Result<Option<ContactView>, tokio_postgres::Error> {
    let sql = include_str!("../sql/queries/primary_contact.sql");
    Ok(cached::query_opt(client, sql, &[&jurisdiction.code()])
        .await?
        .map(|row| ContactView::from_row(&row)))
}

/// One assignment.
pub async fn assignment(
    client: &impl GenericClient,
    assignment_id: Uuid,
) -> Result<Option<AssignmentView>, tokio_postgres::Error> {
    let sql = include_str!("../sql/queries/assignment.sql");
    Ok(cached::query_opt(client, sql, &[&assignment_id])
        .await?
        .map(|row| AssignmentView::from_row(&row)))
}

/// Advisory lock class of "the primary contact of a jurisdiction" (the object id is the
/// jurisdiction's ordinal).
const PRIMARY_CONTACT_LOCK: i32 = 0x5241_4c01;

/// SQL of the shared lock every write that puts an assignment on the jurisdiction's primary
/// contact takes before it reads that contact: assign, replace, a run's start and each of
/// its pages. `($1, $2)` = ([`PRIMARY_CONTACT_LOCK`], jurisdiction ordinal). It waits while
/// a supersede (or the first contact's creation) in the jurisdiction is in progress; then
/// none can commit until the write ends. So an assignment that commits after a supersede
/// always got the new contact, and no write lands on a contact superseded before it
/// committed, where the reassignment run could miss it.
pub const SHARE_PRIMARY_CONTACT: &str = "SELECT pg_advisory_xact_lock_shared($1, $2)::text";

/// Parameters of [`SHARE_PRIMARY_CONTACT`] for `jurisdiction`.
pub fn primary_contact_lock(jurisdiction: Jurisdiction) -> (i32, i32) {
    (PRIMARY_CONTACT_LOCK, jurisdiction.ordinal())
}

/// How a write holds a jurisdiction's primary-contact lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Writes that put assignments on the primary contact: many at once.
    Shared,
    /// Writes that change which contact is primary: alone.
    Exclusive,
}

/// A jurisdiction's primary-contact lock, its statement prepared, so that a command can
/// send it ahead of the statements that must run under it, in one round trip
/// (tokio-postgres pipelines the futures of one connection, and the server runs them in
/// the order they were sent).
#[derive(Debug)]
pub struct PrimaryContactLock {
    statement: tokio_postgres::Statement,
    class: i32,
    object: i32,
}

impl PrimaryContactLock {
    /// Prepares the lock (a no-op once the statement is cached on the connection).
    pub async fn prepare(
        client: &impl GenericClient,
        jurisdiction: Jurisdiction,
        mode: LockMode,
    ) -> Result<Self, tokio_postgres::Error> {
        let sql = match mode {
            LockMode::Shared => SHARE_PRIMARY_CONTACT,
            LockMode::Exclusive => LOCK_PRIMARY_CONTACT,
        };
        let (class, object) = primary_contact_lock(jurisdiction);
        Ok(Self {
            statement: client.prepare_cached(sql).await?,
            class,
            object,
        })
    }

    /// Takes the lock until the transaction ends. Poll this future before the statements
    /// that must run under the lock.
    pub async fn take(&self, client: &impl GenericClient) -> Result<(), tokio_postgres::Error> {
        client
            .query_one(&self.statement, &[&self.class, &self.object])
            .await
            .map(drop)
    }
}

/// SQL of the exclusive lock: see [`SHARE_PRIMARY_CONTACT`].
const LOCK_PRIMARY_CONTACT: &str = "SELECT pg_advisory_xact_lock($1, $2)::text";

/// What `assign` needs to know, in one round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignContext {
    /// The jurisdiction's primary contact and when it took effect.
    pub primary: Option<(Uuid, DateTime<Utc>)>,
    /// The business's active assignment in the jurisdiction.
    pub active_assignment: Option<Uuid>,
}

/// Primary contact and active assignment, in one query.
pub async fn assign_context(
    client: &impl GenericClient,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
) -> Result<AssignContext, tokio_postgres::Error> {
    let row = cached::query_one(
        client,
        include_str!("../sql/queries/assign_context.sql"),
        &[&jurisdiction.code(), &business_id],
    )
    .await?;
    let contact: Option<Uuid> = row.get(0);
    Ok(AssignContext {
        primary: contact.map(|id| (id, row.get(1))),
        active_assignment: row.get(2),
    })
}

/// [`assign_context`] for many (business, jurisdiction) pairs in one statement, in their
/// order.
pub async fn assign_contexts(
    client: &impl GenericClient,
    items: &[(Uuid, Jurisdiction)],
) -> Result<Vec<AssignContext>, tokio_postgres::Error> {
    let businesses: Vec<Uuid> = items.iter().map(|(business, _)| *business).collect();
    let codes: Vec<&str> = items.iter().map(|(_, j)| j.code()).collect();
    let rows = cached::query(
        client,
        include_str!("../sql/queries/assign_contexts.sql"),
        &[&businesses, &codes],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let contact: Option<Uuid> = row.get(0);
            AssignContext {
                primary: contact.map(|id| (id, row.get(1))),
                active_assignment: row.get(2),
            }
        })
        .collect())
}

/// One assignment, locked for the rest of the transaction: the first lock a command that
/// ends or replaces it takes on its rows (see the write module for the order).
pub async fn assignment_for_update(
    client: &impl GenericClient,
    assignment_id: Uuid,
) -> Result<Option<AssignmentView>, tokio_postgres::Error> {
    let sql = include_str!("../sql/queries/assignment_for_update.sql");
    Ok(cached::query_opt(client, sql, &[&assignment_id])
        .await?
        .map(|row| AssignmentView::from_row(&row)))
}
