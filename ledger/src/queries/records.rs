//! One business or one contact with everything a page about it shows, each read in one
//! call and in a fixed number of statements, however many contacts or jurisdictions it has.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::{AssignmentView, ContactView, assignment_history, contact, lineage};
use crate::db::cached;
use crate::domain::{self, Jurisdiction};

/// Most assignments a business record holds. A business has a handful per jurisdiction;
/// this is far beyond any real one and bounds the page.
const BUSINESS_ASSIGNMENTS: i64 = 2_000;

/// A business's whole history, by jurisdiction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusinessRecord {
    /// Each jurisdiction's assignments and the events behind them, by code.
    pub timelines: BTreeMap<String, Timeline>,
    /// Every contact those assignments name, by id.
    pub contacts: HashMap<Uuid, ContactView>,
}

/// A business's assignments in one jurisdiction, oldest first, and its stream's events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The assignments.
    pub assignments: Vec<AssignmentView>,
    /// The events of the stream, in version order.
    pub events: Vec<StreamEvent>,
}

/// An event behind a timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// Event id.
    pub event_id: Uuid,
    /// Event type.
    pub event_type: String,
    /// Version in its stream.
    pub version: i64,
    /// When it took effect.
    pub effective_at: DateTime<Utc>,
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
}

/// A business's record, or `None` when the ledger has no assignment of it. Three
/// statements: the assignments, their contacts, their streams' events.
pub async fn business_record(
    client: &impl GenericClient,
    business_id: Uuid,
) -> Result<Option<BusinessRecord>, tokio_postgres::Error> {
    let history = assignment_history(client, business_id, None, BUSINESS_ASSIGNMENTS).await?;
    if history.is_empty() {
        return Ok(None);
    }
    let mut timelines: BTreeMap<String, Timeline> = BTreeMap::new();
    for assignment in history {
        timelines
            .entry(assignment.jurisdiction.code().to_owned())
            .or_default()
            .assignments
            .push(assignment);
    }
    let contact_ids: Vec<Uuid> = timelines
        .values()
        .flat_map(|timeline| timeline.assignments.iter().map(|a| a.contact_id))
        .collect();
    let contacts = contacts(client, &contact_ids)
        .await?
        .into_iter()
        .map(|contact| (contact.contact_id, contact))
        .collect();
    add_events(client, business_id, &mut timelines).await?;
    Ok(Some(BusinessRecord {
        timelines,
        contacts,
    }))
}

/// Contacts by id, in one statement; ids with no contact are left out.
pub async fn contacts(
    client: &impl GenericClient,
    contact_ids: &[Uuid],
) -> Result<Vec<ContactView>, tokio_postgres::Error> {
    Ok(cached::query(
        client,
        include_str!("../sql/queries/contacts.sql"),
        &[&contact_ids],
    )
    .await?
    .iter()
    .map(ContactView::from_row)
    .collect())
}

/// Fills each timeline's events from its stream, all streams in one statement. Every code
/// in the projection is one the commands accepted, so each names a stream.
async fn add_events(
    client: &impl GenericClient,
    business_id: Uuid,
    timelines: &mut BTreeMap<String, Timeline>,
) -> Result<(), tokio_postgres::Error> {
    let streams: HashMap<String, String> = timelines
        .keys()
        .filter_map(|code| {
            let jurisdiction = Jurisdiction::parse("jurisdiction", code).ok()?;
            Some((
                domain::assignment_stream(business_id, jurisdiction),
                code.clone(),
            ))
        })
        .collect();
    let names: Vec<&String> = streams.keys().collect();
    let rows = cached::query(
        client,
        include_str!("../sql/queries/streams_events.sql"),
        &[&names],
    )
    .await?;
    for row in rows {
        let stream: String = row.get(0);
        let Some(timeline) = streams
            .get(&stream)
            .and_then(|code| timelines.get_mut(code))
        else {
            continue;
        };
        timeline.events.push(StreamEvent {
            event_id: row.get(1),
            event_type: row.get(2),
            version: row.get(3),
            effective_at: row.get(4),
            recorded_at: row.get(5),
        });
    }
    Ok(())
}

/// A contact with its supersede lineage and how many assignments it serves now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactRecord {
    /// The contact.
    pub contact: ContactView,
    /// Its ancestors, itself and its successors, oldest first.
    pub lineage: Vec<ContactView>,
    /// Its assignments not ended.
    pub active_assignments: i64,
}

/// A contact's record, or `None` when there is no such contact.
pub async fn contact_record(
    client: &impl GenericClient,
    contact_id: Uuid,
) -> Result<Option<ContactRecord>, tokio_postgres::Error> {
    let Some(contact) = contact(client, contact_id).await? else {
        return Ok(None);
    };
    let lineage = lineage(client, contact_id).await?;
    let active_assignments = cached::query_one(
        client,
        include_str!("../sql/queries/active_assignments.sql"),
        &[&contact_id],
    )
    .await?
    .get(0);
    Ok(Some(ContactRecord {
        contact,
        lineage,
        active_assignments,
    }))
}
