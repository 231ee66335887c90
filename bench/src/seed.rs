//! What the benchmarks write through the ledger beside their bulk seeding: a Texas primary
//! contact, and the one-transaction REPLACE the chained pages are measured against.

use deadpool_postgres::Pool;
use ra_ledger::commands::{CreateContact, Ledger};
use ra_ledger::domain::{PostalAddress, assignment_stream};
use ra_ledger::error::CommandError;
use ra_ledger::queries::{self, AssignmentView, ContactView};
use ra_ledger::store::{self, Metadata};
use ra_ledger::{reassign, write};
use uuid::Uuid;

/// The benches' metadata, and a Texas primary contact created through the ledger.
pub async fn bench_contact(ledger: &Ledger) -> anyhow::Result<(Metadata, ContactView)> {
    let metadata = Metadata {
        actor: "bench".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    let contact = ledger
        .create_contact(
            CreateContact {
                jurisdiction: "TX".into(),
                name: "Bench Agents".into(),
                address: texas_address(),
                effective_at: None,
            },
            &metadata,
        )
        .await?;
    Ok((metadata, contact))
}

/// A Texas address, for the contacts the benchmarks create.
pub fn texas_address() -> PostalAddress {
    PostalAddress {
        line1: "211 E 7th St".into(),
        line2: "Suite 620".into(),
        city: "Austin".into(),
        region: "TX".into(),
        postal_code: "78701".into(),
    }
}

/// What the chained pages avoid: every active assignment of `old_contact_id` REPLACEd onto
/// `new_contact_id` in one transaction, with the same statements a page uses
/// ([`reassign::replace_appends`]): the reassignment benchmark's comparison. Returns the
/// rows moved.
pub async fn replace_all_at_once(
    pool: &Pool,
    old_contact_id: Uuid,
    new_contact_id: Uuid,
    metadata: &Metadata,
) -> Result<usize, CommandError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let new = queries::contact(&tx, new_contact_id)
        .await?
        .ok_or_else(|| CommandError::NotFound {
            what: "contact",
            id: new_contact_id.to_string(),
        })?;
    let jurisdiction = new.jurisdiction;
    let locked: Vec<AssignmentView> = tx
        .query(
            include_str!("sql/lock_active_of_contact.sql"),
            &[&old_contact_id],
        )
        .await?
        .iter()
        .map(AssignmentView::from_row)
        .collect();
    let streams: Vec<String> = locked
        .iter()
        .map(|row| assignment_stream(row.business_id, jurisdiction))
        .collect();
    let heads = store::read_heads(&tx, &streams).await?;
    // As a page's target: the old assignment ends and the new one starts at the same
    // instant, never before the contact took effect.
    let effective_at = heads.now.max(new.created_at);
    let appends = reassign::replace_appends(&locked, jurisdiction, new_contact_id, effective_at);
    write::record(&tx, &appends, &heads, metadata).await?;
    tx.commit().await?;
    Ok(locked.len())
}
