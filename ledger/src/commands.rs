//! Commands: each runs in one transaction that appends its events, writes their outbox
//! rows and updates the projections. A command that fails leaves no trace.

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::{Pool, Transaction};
use ra_ledger_proto::v1::{self, envelope::Event};
use serde::Deserialize;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::domain::{
    ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE, ContactDetails, Jurisdiction, PostalAddress,
    ValidationError, registration_id,
};
use crate::projections::{self, ProjectionError};
use crate::queries::{self, AssignmentView, ContactView};
use crate::reassign::{self, RunStarted};
use crate::store::{self, AppendError, Metadata, NewEvent, RecordedEvent, StreamAppend};

/// How far ahead of the server clock an `effective_at` may be (clock skew).
const MAX_FUTURE_SKEW: Duration = Duration::minutes(5);

/// Why a command was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A field is invalid.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// Something the command refers to does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// Kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The command conflicts with the current state or a concurrent writer.
    #[error("{0}")]
    Conflict(String),
    /// The event store refused the append.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// Projecting failed: ledger and projections disagree.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// No database connection.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The database failed.
    #[error("database error: {0}")]
    Database(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for CommandError {
    /// Unique violations of the invariants' indexes are conflicts, not failures: they are
    /// how a race between two commands is settled.
    fn from(error: tokio_postgres::Error) -> Self {
        if error.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            match error.as_db_error().and_then(|db| db.constraint()) {
                Some("contacts_one_primary") => {
                    return Self::Conflict("the jurisdiction already has a primary contact".into());
                }
                Some("assignments_one_active") => {
                    return Self::Conflict(
                        "the business already has an active assignment in this jurisdiction".into(),
                    );
                }
                _ => {}
            }
        }
        Self::Database(error)
    }
}

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
    #[serde(default)]
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
    #[serde(default)]
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
    #[serde(default)]
    pub effective_at: Option<DateTime<Utc>>,
}

/// End or replace one assignment.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeAssignment {
    /// Business time; defaults to now.
    #[serde(default)]
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

/// Runs commands against the ledger database.
#[derive(Debug, Clone)]
pub struct Ledger {
    pool: Pool,
}

impl Ledger {
    /// A ledger on `pool`.
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// The pool, for queries.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Creates the first primary contact of a jurisdiction.
    pub async fn create_contact(
        &self,
        command: CreateContact,
        metadata: &Metadata,
    ) -> Result<ContactView, CommandError> {
        let jurisdiction = Jurisdiction::parse("jurisdiction", &command.jurisdiction)?;
        let details = ContactDetails {
            name: command.name,
            address: command.address,
        }
        .validated()?;
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let now = transaction_time(&tx).await?;
        let effective_at = effective_at(command.effective_at, now)?;
        if let Some(primary) = queries::primary_contact(&tx, jurisdiction).await? {
            return Err(CommandError::Conflict(format!(
                "{} already has primary contact {}; supersede it instead",
                jurisdiction.code(),
                primary.contact_id
            )));
        }
        let contact_id = Uuid::now_v7();
        let created = contact_created(contact_id, jurisdiction, &details, None);
        let appends = [StreamAppend {
            aggregate_type: CONTACT_AGGREGATE,
            aggregate_id: contact_id.to_string(),
            expected_version: Some(0),
            events: vec![NewEvent::new(created, effective_at)],
        }];
        record(&tx, &appends, metadata, now).await?;
        let contact = contact_in(&tx, contact_id).await?;
        tx.commit().await?;
        Ok(contact)
    }

    /// Demotes a primary contact to on_file and creates its successor as primary.
    pub async fn supersede_contact(
        &self,
        contact_id: Uuid,
        command: SupersedeContact,
        metadata: &Metadata,
    ) -> Result<Superseded, CommandError> {
        let details = ContactDetails {
            name: command.name,
            address: command.address,
        }
        .validated()?;
        let page_size = reassign::page_size(command.page_size)?;
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let now = transaction_time(&tx).await?;
        let effective_at = effective_at(command.effective_at, now)?;
        let old = queries::contact(&tx, contact_id)
            .await?
            .ok_or_else(|| not_found("contact", contact_id))?;
        if let Some(successor) = old.superseded_by {
            return Err(CommandError::Conflict(format!(
                "contact {contact_id} was already superseded by {successor}"
            )));
        }
        let expected = command.expected_version.unwrap_or(old.version);
        let jurisdiction = Jurisdiction::parse("jurisdiction", &old.jurisdiction)?;
        // No assignment may commit on the old contact after this supersede commits.
        queries::lock_primary_contact(&tx, jurisdiction).await?;
        let new_id = Uuid::now_v7();
        let appends = [
            StreamAppend {
                aggregate_type: CONTACT_AGGREGATE,
                aggregate_id: contact_id.to_string(),
                expected_version: Some(expected),
                events: vec![NewEvent::new(
                    Event::ContactSuperseded(v1::ContactSuperseded {
                        contact_id: contact_id.to_string(),
                        jurisdiction: jurisdiction.code().to_owned(),
                        superseded_by: new_id.to_string(),
                    }),
                    effective_at,
                )],
            },
            StreamAppend {
                aggregate_type: CONTACT_AGGREGATE,
                aggregate_id: new_id.to_string(),
                expected_version: Some(0),
                events: vec![NewEvent::new(
                    contact_created(new_id, jurisdiction, &details, Some(contact_id)),
                    effective_at,
                )],
            },
        ];
        record(&tx, &appends, metadata, now).await?;
        let old = contact_in(&tx, contact_id).await?;
        // The first page request commits with the supersede, or neither does.
        let run = reassign::start_in(&tx, &old, new_id, page_size, metadata, now).await?;
        let superseded = Superseded {
            old,
            new: contact_in(&tx, new_id).await?,
            run,
        };
        tx.commit().await?;
        Ok(superseded)
    }

    /// Starts another run that repoints a superseded contact's remaining active assignments
    /// to the jurisdiction's current primary contact: after a run left failed rows, or to
    /// re-raise a chain. Rows already moved are skipped.
    pub async fn start_reassignment(
        &self,
        contact_id: Uuid,
        command: StartReassignment,
        metadata: &Metadata,
    ) -> Result<RunStarted, CommandError> {
        let page_size = reassign::page_size(command.page_size)?;
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let now = transaction_time(&tx).await?;
        let old = queries::contact(&tx, contact_id)
            .await?
            .ok_or_else(|| not_found("contact", contact_id))?;
        let jurisdiction = Jurisdiction::parse("jurisdiction", &old.jurisdiction)?;
        if old.superseded_by.is_none() {
            return Err(CommandError::Conflict(format!(
                "contact {contact_id} is the primary contact of {}; supersede it first",
                jurisdiction.code()
            )));
        }
        let primary = queries::primary_contact(&tx, jurisdiction)
            .await?
            .ok_or_else(|| {
                CommandError::Conflict(format!("{} has no primary contact", jurisdiction.code()))
            })?;
        let run =
            reassign::start_in(&tx, &old, primary.contact_id, page_size, metadata, now).await?;
        tx.commit().await?;
        Ok(run)
    }

    /// Starts an assignment of a business to the jurisdiction's primary contact.
    ///
    /// The hot path of bulk onboarding: one lookup, one append, one projection row.
    pub async fn assign(
        &self,
        command: Assign,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let jurisdiction = Jurisdiction::parse("jurisdiction", &command.jurisdiction)?;
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let aggregate_id = registration_id(command.business_id, jurisdiction);
        let stream = [format!("{ASSIGNMENT_AGGREGATE}-{aggregate_id}")];
        // The lock and both lookups travel in one round trip (tokio-postgres pipelines
        // them). The lock's statement is prepared first (a no-op once cached) and the
        // futures are polled in order, so the lock is sent first; the server runs them in
        // order, and the lookups see any supersede that committed while the lock waited.
        let share = tx.prepare_cached(queries::SHARE_PRIMARY_CONTACT).await?;
        let (class, object) = queries::primary_contact_lock(jurisdiction);
        let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&class, &object];
        let (_, context, heads) = tokio::try_join!(
            biased;
            tx.query_one(&share, &lock_params),
            queries::assign_context(&tx, command.business_id, jurisdiction),
            store::heads(&tx, &stream),
        )?;
        let now = context.now;
        let effective_at = effective_at(command.effective_at, now)?;
        let Some((contact_id, contact_created_at)) = context.primary else {
            return Err(CommandError::Conflict(format!(
                "{} has no primary contact yet; create one first",
                jurisdiction.code()
            )));
        };
        if effective_at < contact_created_at {
            return Err(ValidationError::new(
                "effective_at",
                format!("{effective_at} is before contact {contact_id} took effect ({contact_created_at})"),
            )
            .into());
        }
        if let Some(active) = context.active_assignment {
            return Err(CommandError::Conflict(format!(
                "business {} already has active assignment {active} in {}",
                command.business_id,
                jurisdiction.code()
            )));
        }
        let assignment_id = Uuid::now_v7();
        let started = assignment_started(
            assignment_id,
            command.business_id,
            jurisdiction,
            contact_id,
            None,
        );
        let appends = [StreamAppend {
            aggregate_type: ASSIGNMENT_AGGREGATE,
            aggregate_id,
            // The active-assignment check above and the unique index guard this append.
            expected_version: None,
            events: vec![NewEvent::new(started, effective_at)],
        }];
        let recorded = store::append_at(&tx, &appends, &heads, metadata, now).await?;
        project(&tx, &recorded).await?;
        tx.commit().await?;
        Ok(AssignmentView {
            assignment_id,
            business_id: command.business_id,
            jurisdiction: jurisdiction.code().to_owned(),
            contact_id,
            started_at: effective_at,
            ended_at: None,
            end_reason: None,
            replaces: None,
            replaced_by: None,
            recorded_at: now,
            ended_recorded_at: None,
        })
    }

    /// Ends an assignment because the subscription was cancelled.
    pub async fn end_assignment(
        &self,
        assignment_id: Uuid,
        command: ChangeAssignment,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let now = transaction_time(&tx).await?;
        let effective_at = effective_at(command.effective_at, now)?;
        let (active, jurisdiction) = load_active(&tx, assignment_id).await?;
        let ended = Event::AssignmentEnded(v1::AssignmentEnded {
            assignment_id: assignment_id.to_string(),
            business_id: active.business_id.to_string(),
            jurisdiction: jurisdiction.code().to_owned(),
            contact_id: active.contact_id.to_string(),
            reason: v1::EndReason::Cancelled.into(),
            replaced_by: String::new(),
        });
        let appends = [StreamAppend {
            aggregate_type: ASSIGNMENT_AGGREGATE,
            aggregate_id: registration_id(active.business_id, jurisdiction),
            expected_version: command.expected_version,
            events: vec![NewEvent::new(ended, effective_at)],
        }];
        record(&tx, &appends, metadata, now).await?;
        let assignment = assignment_in(&tx, assignment_id).await?;
        tx.commit().await?;
        Ok(assignment)
    }

    /// REPLACE: ends an assignment and starts a new one on the jurisdiction's current
    /// primary contact, at the same instant, linked both ways.
    pub async fn replace_assignment(
        &self,
        assignment_id: Uuid,
        command: ChangeAssignment,
        metadata: &Metadata,
    ) -> Result<AssignmentView, CommandError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let now = transaction_time(&tx).await?;
        let effective_at = effective_at(command.effective_at, now)?;
        let (active, jurisdiction) = load_active(&tx, assignment_id).await?;
        let primary = queries::primary_contact(&tx, jurisdiction)
            .await?
            .ok_or_else(|| {
                CommandError::Conflict(format!("{} has no primary contact", jurisdiction.code()))
            })?;
        check_not_before_contact(&primary, effective_at)?;
        let new_id = Uuid::now_v7();
        let appends = [StreamAppend {
            aggregate_type: ASSIGNMENT_AGGREGATE,
            aggregate_id: registration_id(active.business_id, jurisdiction),
            expected_version: command.expected_version,
            events: replace_events(
                &active,
                jurisdiction,
                new_id,
                primary.contact_id,
                effective_at,
            ),
        }];
        record(&tx, &appends, metadata, now).await?;
        let assignment = assignment_in(&tx, new_id).await?;
        tx.commit().await?;
        Ok(assignment)
    }

    /// One contact.
    pub async fn contact(&self, contact_id: Uuid) -> Result<ContactView, CommandError> {
        let client = self.pool.get().await?;
        queries::contact(&client, contact_id)
            .await?
            .ok_or_else(|| not_found("contact", contact_id))
    }

    /// One assignment.
    pub async fn assignment(&self, assignment_id: Uuid) -> Result<AssignmentView, CommandError> {
        let client = self.pool.get().await?;
        queries::assignment(&client, assignment_id)
            .await?
            .ok_or_else(|| not_found("assignment", assignment_id))
    }
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

fn contact_created(
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

fn assignment_started(
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

fn not_found(what: &'static str, id: Uuid) -> CommandError {
    CommandError::NotFound {
        what,
        id: id.to_string(),
    }
}

/// The transaction's time: `recorded_at` of everything it appends.
async fn transaction_time(tx: &Transaction<'_>) -> Result<DateTime<Utc>, CommandError> {
    Ok(tx.query_one("SELECT now()", &[]).await?.get(0))
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
    // The database keeps microseconds; keep the envelope and the row identical.
    Ok(crate::projections::from_micros(
        effective.timestamp_micros(),
    ))
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

/// The active assignment with its jurisdiction.
async fn load_active(
    tx: &Transaction<'_>,
    assignment_id: Uuid,
) -> Result<(AssignmentView, Jurisdiction), CommandError> {
    let assignment = queries::assignment(tx, assignment_id)
        .await?
        .ok_or_else(|| not_found("assignment", assignment_id))?;
    if let Some(ended_at) = assignment.ended_at {
        return Err(CommandError::Conflict(format!(
            "assignment {assignment_id} already ended at {ended_at}"
        )));
    }
    let jurisdiction = Jurisdiction::parse("jurisdiction", &assignment.jurisdiction)?;
    Ok((assignment, jurisdiction))
}

/// Appends and projects inside the caller's transaction; on any error the transaction
/// rolls back when dropped. Views are read back on the same connection before the commit:
/// a second pool checkout while holding this one could deadlock a saturated pool.
pub async fn record(
    tx: &Transaction<'_>,
    appends: &[StreamAppend],
    metadata: &Metadata,
    now: DateTime<Utc>,
) -> Result<Vec<RecordedEvent>, CommandError> {
    let recorded = store::append(tx, appends, metadata, now).await?;
    project(tx, &recorded).await?;
    Ok(recorded)
}

/// Folds freshly recorded events into the projections, in the same transaction.
async fn project(tx: &Transaction<'_>, recorded: &[RecordedEvent]) -> Result<(), CommandError> {
    for event in recorded {
        projections::apply(tx, &event.envelope)
            .await
            .map_err(|error| match error {
                ProjectionError::Database(db) => CommandError::from(db),
                other => CommandError::Projection(other),
            })?;
    }
    Ok(())
}

async fn contact_in(tx: &Transaction<'_>, contact_id: Uuid) -> Result<ContactView, CommandError> {
    queries::contact(tx, contact_id)
        .await?
        .ok_or_else(|| not_found("contact", contact_id))
}

async fn assignment_in(
    tx: &Transaction<'_>,
    assignment_id: Uuid,
) -> Result<AssignmentView, CommandError> {
    queries::assignment(tx, assignment_id)
        .await?
        .ok_or_else(|| not_found("assignment", assignment_id))
}
