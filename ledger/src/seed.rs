//! Bulk seeding of assignments through the real write path (events, outbox rows,
//! projections), in large transactions: for demos, benchmarks and tests that need tens of
//! thousands of active assignments quickly.

use deadpool_postgres::Pool;
use ra_ledger_proto::v1::{self, envelope::Event};
use uuid::Uuid;

use crate::commands::CommandError;
use crate::domain::{ASSIGNMENT_AGGREGATE, Jurisdiction, registration_id};
use crate::store::{self, Metadata, NewEvent, StreamAppend};

/// Assigns `count` new businesses to `contact_id` in `jurisdiction`, `per_transaction` per
/// transaction, calling `progress(done)` after each. Returns the business ids.
pub async fn assignments(
    pool: &Pool,
    jurisdiction: Jurisdiction,
    contact_id: Uuid,
    count: usize,
    per_transaction: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Uuid>, CommandError> {
    let metadata = Metadata {
        actor: "seed".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
    };
    let mut businesses = Vec::with_capacity(count);
    let mut client = pool.get().await?;
    while businesses.len() < count {
        let batch = per_transaction.max(1).min(count - businesses.len());
        let tx = client.transaction().await?;
        // The streams are new by construction (fresh business ids).
        let heads = store::read_heads(&tx, &[]).await?;
        let now = heads.now;
        let appends: Vec<StreamAppend> = (0..batch)
            .map(|_| {
                let business_id = Uuid::now_v7();
                businesses.push(business_id);
                StreamAppend {
                    aggregate_type: ASSIGNMENT_AGGREGATE,
                    aggregate_id: registration_id(business_id, jurisdiction),
                    expected_version: Some(0),
                    events: vec![NewEvent::new(
                        Event::AssignmentStarted(v1::AssignmentStarted {
                            assignment_id: Uuid::now_v7().to_string(),
                            business_id: business_id.to_string(),
                            jurisdiction: jurisdiction.code().to_owned(),
                            contact_id: contact_id.to_string(),
                            replaces: String::new(),
                        }),
                        now,
                    )],
                }
            })
            .collect();
        crate::write::record(&tx, &appends, &heads, &metadata).await?;
        tx.commit().await?;
        progress(businesses.len());
    }
    Ok(businesses)
}
