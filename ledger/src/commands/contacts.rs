//! Contacts: the first primary contact of a jurisdiction, its supersede, and the runs
//! that repoint its assignments.

use deadpool_postgres::Transaction;
use uuid::Uuid;

use super::{
    CommandError, CreateContact, Ledger, StartReassignment, SupersedeContact, Superseded,
    effective_at, not_found, requested_time,
};
use crate::domain::{CONTACT_AGGREGATE, ContactDetails, Jurisdiction, contact_stream};
use crate::events;
use crate::queries::{self, ContactView, LockMode, PrimaryContactLock};
use crate::reassign::{self, RunStarted};
use crate::store::{self, Metadata, NewEvent, StreamAppend};
use crate::write;

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

    /// One contact.
    pub async fn contact(&self, contact_id: Uuid) -> Result<ContactView, CommandError> {
        let client = self.pool().get().await?;
        queries::contact(&client, contact_id)
            .await?
            .ok_or_else(|| not_found("contact", contact_id))
    }
}

/// The jurisdiction of a contact (which never changes), to know which lock to take.
async fn jurisdiction_of_contact(
    tx: &Transaction<'_>,
    contact_id: Uuid,
) -> Result<Jurisdiction, CommandError> {
    let contact = queries::contact(tx, contact_id)
        .await?
        .ok_or_else(|| not_found("contact", contact_id))?;
    Ok(contact.jurisdiction)
}

async fn contact_in(tx: &Transaction<'_>, contact_id: Uuid) -> Result<ContactView, CommandError> {
    queries::contact(tx, contact_id)
        .await?
        .ok_or_else(|| not_found("contact", contact_id))
}
