//! Commands: each runs in one transaction that takes its locks, reads what it decides on,
//! appends its events, writes their outbox rows and updates the projections. A command that
//! fails leaves no trace; one that loses a deadlock runs again (see [`crate::write`] for
//! the lock order every write follows).

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::Transaction;
use uuid::Uuid;

pub use crate::error::{CommandError, Race};

use crate::domain::{
    self, ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE, ContactDetails, Jurisdiction, ValidationError,
    assignment_stream, contact_stream, registration_id,
};
use crate::events;
use crate::queries::{self, AssignmentView, ContactView, LockMode, PrimaryContactLock};
use crate::reassign::{self, RunStarted};
use crate::store::{self, AppendError, Metadata, NewEvent, StreamAppend};
use crate::write;
pub use crate::write::Ledger;

mod input;

pub use input::{
    Assign, ChangeAssignment, CreateContact, NewAssignment, StartReassignment, SupersedeContact,
    Superseded,
};

/// Most assignments one batch takes.
pub const MAX_BATCH: usize = 1_000;

/// How far ahead of the server clock an `effective_at` may be (clock skew).
const MAX_FUTURE_SKEW: Duration = Duration::minutes(5);

impl Ledger {
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
        let requested = requested_time(command.effective_at)?;
        let details = &details;
        self.write(|tx, _| {
            Box::pin(async move {
                let contact_id = Uuid::now_v7();
                // Creating the primary contact changes which contact is primary: exclusively.
                let lock =
                    PrimaryContactLock::prepare(tx, jurisdiction, LockMode::Exclusive).await?;
                let streams = [contact_stream(contact_id)];
                let (_, primary, heads) = tokio::try_join!(
                    biased;
                    lock.take(tx),
                    queries::primary_contact(tx, jurisdiction),
                    store::read_heads(tx, &streams),
                )?;
                if let Some(primary) = primary {
                    return Err(CommandError::Conflict(format!(
                        "{} already has primary contact {}; supersede it instead",
                        jurisdiction.code(),
                        primary.contact_id
                    )));
                }
                let created = events::contact_created(contact_id, jurisdiction, details, None);
                let appends = [StreamAppend {
                    aggregate_type: CONTACT_AGGREGATE,
                    aggregate_id: contact_id.to_string(),
                    expected_version: Some(0),
                    events: vec![NewEvent::new(created, effective_at(requested, heads.now)?)],
                }];
                write::record(tx, &appends, &heads, metadata).await?;
                contact_in(tx, contact_id).await
            })
        })
        .await
    }

    /// Demotes a primary contact to on_file, creates its successor as primary and starts the
    /// run that repoints the old contact's active assignments, in one transaction.
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
        let requested = requested_time(command.effective_at)?;
        let (details, expected_version) = (&details, command.expected_version);
        self.write(|tx, _| {
            Box::pin(async move {
                let jurisdiction = jurisdiction_of_contact(tx, contact_id).await?;
                let new_id = Uuid::now_v7();
                let streams = [contact_stream(contact_id), contact_stream(new_id)];
                // Waits for every write in flight that put an assignment on the old contact,
                // and holds off new ones until this commits: then they get the new contact. The
                // contact is read again under the lock, so a supersede that won the race is seen.
                let lock =
                    PrimaryContactLock::prepare(tx, jurisdiction, LockMode::Exclusive).await?;
                let (_, old, heads) = tokio::try_join!(
                    biased;
                    lock.take(tx),
                    queries::contact(tx, contact_id),
                    store::read_heads(tx, &streams),
                )?;
                let old = old.ok_or_else(|| not_found("contact", contact_id))?;
                if let Some(successor) = old.superseded_by {
                    return Err(CommandError::Conflict(format!(
                        "contact {contact_id} was already superseded by {successor}"
                    )));
                }
                let effective_at = effective_at(requested, heads.now)?;
                let appends = [
                    StreamAppend {
                        aggregate_type: CONTACT_AGGREGATE,
                        aggregate_id: contact_id.to_string(),
                        expected_version: Some(expected_version.unwrap_or(old.version)),
                        events: vec![NewEvent::new(
                            events::contact_superseded(contact_id, jurisdiction, new_id),
                            effective_at,
                        )],
                    },
                    StreamAppend {
                        aggregate_type: CONTACT_AGGREGATE,
                        aggregate_id: new_id.to_string(),
                        expected_version: Some(0),
                        events: vec![NewEvent::new(
                            events::contact_created(
                                new_id,
                                jurisdiction,
                                details,
                                Some(contact_id),
                            ),
                            effective_at,
                        )],
                    },
                ];
                write::record(tx, &appends, &heads, metadata).await?;
                let old = contact_in(tx, contact_id).await?;
                // The first page request commits with the supersede, or neither does.
                let run = reassign::start_in(tx, &old, new_id, page_size, metadata, &heads).await?;
                Ok(Superseded {
                    old,
                    new: contact_in(tx, new_id).await?,
                    run,
                })
            })
        })
        .await
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
        self.write(|tx, _| {
            Box::pin(async move {
                let jurisdiction = jurisdiction_of_contact(tx, contact_id).await?;
                let lock = PrimaryContactLock::prepare(tx, jurisdiction, LockMode::Shared).await?;
                let (_, old, primary, heads) = tokio::try_join!(
                    biased;
                    lock.take(tx),
                    queries::contact(tx, contact_id),
                    queries::primary_contact(tx, jurisdiction),
                    store::read_heads(tx, &[]),
                )?;
                let old = old.ok_or_else(|| not_found("contact", contact_id))?;
                if old.superseded_by.is_none() {
                    return Err(CommandError::Conflict(format!(
                        "contact {contact_id} is the primary contact of {}; supersede it first",
                        jurisdiction.code()
                    )));
                }
                let primary = primary.ok_or_else(|| {
                    CommandError::Conflict(format!(
                        "{} has no primary contact",
                        jurisdiction.code()
                    ))
                })?;
                reassign::start_in(tx, &old, primary.contact_id, page_size, metadata, &heads).await
            })
        })
        .await
    }

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

    /// Starts many assignments in one transaction: all of them or none (a provider's
    /// portfolio arrives as a unit; a retry of a failed batch never half-applies). Items are
    /// named by their index in errors: `items[3].jurisdiction`, `items[3]: business … already
    /// has …`. At most [`MAX_BATCH`]; a business may appear once per jurisdiction.
    pub async fn assign_batch(
        &self,
        items: Vec<Assign>,
        metadata: &Metadata,
    ) -> Result<Vec<AssignmentView>, CommandError> {
        check_batch_size(items.len())?;
        let items = items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                NewAssignment::checked(item)
                    .map_err(|error| CommandError::from(error).in_item(index))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outcomes = self.batch(&items, WhenAssigned::Refuse, metadata).await?;
        Ok(outcomes
            .into_iter()
            .filter_map(|outcome| match outcome {
                BatchItem::Started(view) => Some(view),
                BatchItem::AlreadyAssigned(_) => None,
            })
            .collect())
    }

    /// [`Ledger::assign_batch`] for an import that may run again: an item whose business
    /// already has an active assignment in the jurisdiction (on any contact) is skipped
    /// instead of refusing the batch. The others start, all or none.
    pub async fn import_batch(
        &self,
        items: &[NewAssignment],
        metadata: &Metadata,
    ) -> Result<Vec<BatchItem>, CommandError> {
        check_batch_size(items.len())?;
        self.batch(items, WhenAssigned::Skip, metadata).await
    }

    /// The batch both share. The shared primary-contact locks of every jurisdiction are
    /// taken first, in code order (so two batches cannot deadlock on them); then, in one
    /// round trip, every stream's head and every item's context; then one append of every
    /// event with its outbox row and projection rows. An error of one item is
    /// [`CommandError::Item`], with its index.
    async fn batch(
        &self,
        items: &[NewAssignment],
        when_assigned: WhenAssigned,
        metadata: &Metadata,
    ) -> Result<Vec<BatchItem>, CommandError> {
        check_distinct(items)?;
        self.write(|tx, _| {
            Box::pin(async move {
                let mut codes: Vec<Jurisdiction> =
                    items.iter().map(|item| item.jurisdiction).collect();
                codes.sort_by_key(|j| j.code());
                codes.dedup();
                for jurisdiction in &codes {
                    PrimaryContactLock::prepare(tx, *jurisdiction, LockMode::Shared)
                        .await?
                        .take(tx)
                        .await?;
                }
                let keys: Vec<(Uuid, Jurisdiction)> = items
                    .iter()
                    .map(|item| (item.business_id, item.jurisdiction))
                    .collect();
                let streams: Vec<String> = items.iter().map(NewAssignment::stream).collect();
                // Each statement reads its own snapshot. The heads go first: a concurrent
                // start that commits between the two reads is then seen by the lookups (an
                // item already assigned) or not at all (its event then takes the version
                // this append wants), and either names the item. The other way round, an
                // old lookup on a new head is caught only by the projection's unique index.
                let (heads, contexts) = tokio::try_join!(
                    biased;
                    store::read_heads(tx, &streams),
                    queries::assign_contexts(tx, &keys),
                )?;
                let mut appends = Vec::with_capacity(items.len());
                let mut outcomes = Vec::with_capacity(items.len());
                for (index, (item, context)) in items.iter().zip(&contexts).enumerate() {
                    if let (WhenAssigned::Skip, Some(active)) =
                        (when_assigned, context.active_assignment)
                    {
                        outcomes.push(BatchItem::AlreadyAssigned(active));
                        continue;
                    }
                    let (append, view) = new_assignment(item, context, heads.now)
                        .map_err(|error| error.in_item(index))?;
                    appends.push(append);
                    outcomes.push(BatchItem::Started(view));
                }
                if !appends.is_empty() {
                    write::record(tx, &appends, &heads, metadata).await?;
                }
                Ok(outcomes)
            })
        })
        .await
        .map_err(|error| name_raced_item(error, items))
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
                let jurisdiction = Jurisdiction::parse("jurisdiction", &found.jurisdiction)?;
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

    /// One contact.
    pub async fn contact(&self, contact_id: Uuid) -> Result<ContactView, CommandError> {
        let client = self.pool().get().await?;
        queries::contact(&client, contact_id)
            .await?
            .ok_or_else(|| not_found("contact", contact_id))
    }

    /// One assignment.
    pub async fn assignment(&self, assignment_id: Uuid) -> Result<AssignmentView, CommandError> {
        let client = self.pool().get().await?;
        queries::assignment(&client, assignment_id)
            .await?
            .ok_or_else(|| not_found("assignment", assignment_id))
    }
}

fn not_found(what: &'static str, id: Uuid) -> CommandError {
    CommandError::NotFound {
        what,
        id: id.to_string(),
    }
}

/// What a batch does with an item whose business already has an active assignment in the
/// jurisdiction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenAssigned {
    /// Refuse the whole batch with a conflict naming the item.
    Refuse,
    /// Skip the item: an import running again.
    Skip,
}

/// One item of a batch, once it committed.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchItem {
    /// The assignment it started.
    Started(AssignmentView),
    /// Skipped: the business already has this active assignment in the jurisdiction.
    AlreadyAssigned(Uuid),
}

/// A batch that lost a race to a concurrent writer, for a stream or for the active
/// assignment of a business: the error names the item.
fn name_raced_item(error: CommandError, items: &[NewAssignment]) -> CommandError {
    let index = match &error {
        CommandError::Append(AppendError::Conflict { stream, .. }) => {
            items.iter().position(|item| item.stream() == *stream)
        }
        CommandError::Raced(Race::ActiveAssignment {
            key: Some((business_id, code)),
        }) => items
            .iter()
            .position(|item| item.business_id == *business_id && item.jurisdiction.code() == code),
        _ => None,
    };
    match index {
        Some(index) => error.in_item(index),
        None => error,
    }
}

/// A batch holds 1 to [`MAX_BATCH`] items.
fn check_batch_size(items: usize) -> Result<(), ValidationError> {
    if items == 0 || items > MAX_BATCH {
        return Err(ValidationError::new(
            "items",
            format!("must hold 1 to {MAX_BATCH} assignments, not {items}"),
        ));
    }
    Ok(())
}

/// A batch names each business once per jurisdiction.
fn check_distinct(items: &[NewAssignment]) -> Result<(), CommandError> {
    let mut seen = std::collections::HashMap::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if let Some(first) = seen.insert((item.business_id, item.jurisdiction), index) {
            let duplicate = ValidationError::new(
                "business_id",
                format!(
                    "{} in {} is already items[{first}]; a batch names each once",
                    item.business_id,
                    item.jurisdiction.code()
                ),
            );
            return Err(CommandError::from(duplicate).in_item(index));
        }
    }
    Ok(())
}

/// The checks and the `AssignmentStarted` of one new assignment, given its context read
/// under the jurisdiction's primary-contact lock. A batch wraps its errors in
/// [`CommandError::Item`].
fn new_assignment(
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
        jurisdiction: jurisdiction.code().to_owned(),
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

/// The jurisdiction of a contact (which never changes), to know which lock to take.
async fn jurisdiction_of_contact(
    tx: &Transaction<'_>,
    contact_id: Uuid,
) -> Result<Jurisdiction, CommandError> {
    let contact = queries::contact(tx, contact_id)
        .await?
        .ok_or_else(|| not_found("contact", contact_id))?;
    Ok(Jurisdiction::parse("jurisdiction", &contact.jurisdiction)?)
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
    let jurisdiction = Jurisdiction::parse("jurisdiction", &assignment.jurisdiction)?;
    Ok((assignment, jurisdiction))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn item(business: u128, code: &str) -> NewAssignment {
        NewAssignment {
            business_id: Uuid::from_u128(business),
            jurisdiction: Jurisdiction::parse("jurisdiction", code).unwrap(),
            effective_at: None,
        }
    }

    #[test]
    fn a_lost_race_names_the_item_by_its_stream_or_its_key() {
        let items = [item(1, "TX"), item(2, "TX"), item(2, "CA")];
        let stream = CommandError::Append(AppendError::Conflict {
            stream: items[2].stream(),
            expected: 0,
            actual: 1,
        });
        assert!(matches!(
            name_raced_item(stream, &items),
            CommandError::Item { index: 2, .. }
        ));
        let key = CommandError::from(Race::ActiveAssignment {
            key: Some((Uuid::from_u128(2), "TX".into())),
        });
        let named = name_raced_item(key, &items);
        assert!(matches!(named, CommandError::Item { index: 1, .. }));
        assert!(named.to_string().starts_with("items[1]: business "));
        // A race the batch cannot place stays as it is.
        let unknown = CommandError::from(Race::ActiveAssignment { key: None });
        assert!(matches!(
            name_raced_item(unknown, &items),
            CommandError::Raced(_)
        ));
    }

    #[test]
    fn a_batch_names_a_business_twice_by_the_later_index() {
        let items = [item(1, "TX"), item(2, "TX"), item(1, "TX")];
        let error = check_distinct(&items).unwrap_err();
        assert!(matches!(error, CommandError::Item { index: 2, .. }));
        assert!(error.to_string().contains("is already items[0]"), "{error}");
        assert!(check_distinct(&items[..2]).is_ok());
        assert!(check_batch_size(0).is_err());
        assert!(check_batch_size(MAX_BATCH).is_ok());
        assert!(check_batch_size(MAX_BATCH + 1).is_err());
    }
}
