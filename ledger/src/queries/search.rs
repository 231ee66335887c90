//! The console's search: what an id names, and contacts by jurisdiction and name.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::{ContactView, assignment_history, contact};
use crate::db::cached;
use crate::domain::Jurisdiction;

/// Most contacts a search returns.
pub const SEARCH_LIMIT: usize = 100;

/// What an id names in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A contact.
    Contact(Uuid),
    /// A business with at least one assignment.
    Business(Uuid),
}

/// The contact or the business `id` names, contacts first; `None` when it names neither.
pub async fn find_id(
    client: &impl GenericClient,
    id: Uuid,
) -> Result<Option<Found>, tokio_postgres::Error> {
    if let Some(contact) = contact(client, id).await? {
        return Ok(Some(Found::Contact(contact.contact_id)));
    }
    let history = assignment_history(client, id, None, 1).await?;
    Ok((!history.is_empty()).then_some(Found::Business(id)))
}

/// Contacts in `jurisdiction` (any when `None`) whose name contains `fragment` (any case;
/// `%`, `_` and `\` match themselves), primary first, at most [`SEARCH_LIMIT`].
pub async fn search_contacts(
    client: &impl GenericClient,
    jurisdiction: Option<Jurisdiction>,
    fragment: &str,
) -> Result<Vec<ContactView>, tokio_postgres::Error> {
    let pattern = format!(
        "%{}%",
        fragment
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_")
    );
    let rows = cached::query(
        client,
        include_str!("../sql/queries/search_contacts.sql"),
        &[&jurisdiction.map(Jurisdiction::code), &pattern],
    )
    .await?;
    Ok(rows.iter().map(ContactView::from_row).collect())
}
