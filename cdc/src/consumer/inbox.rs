//! The inbox: each event applied once per consumer, inside the consumer's own PostgreSQL
//! transaction, by recording its event id in `ledger_inbox` in the same transaction.

use std::collections::HashSet;

use futures::future::BoxFuture;
use ra_ledger_proto::v1::Envelope;
use tokio_postgres::{Client, Transaction};

use super::ConsumeError;

/// Creates the inbox table when missing. Run it with the consumer's migrations.
pub const INBOX_SCHEMA: &str = include_str!("../sql/inbox.sql");

/// What happened to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// First time: the handler ran and its changes committed with the inbox row.
    Applied,
    /// Seen before by this consumer: nothing ran.
    Duplicate,
}

/// Runs `handler` once per (consumer, event id): in one transaction, claims the event in
/// the inbox and applies it. A duplicate claims nothing and runs nothing.
pub async fn apply_once<F>(
    client: &mut Client,
    consumer: &str,
    envelope: &Envelope,
    handler: F,
) -> Result<Outcome, ConsumeError>
where
    F: for<'a> FnOnce(
        &'a Transaction<'a>,
        &'a Envelope,
    ) -> BoxFuture<'a, Result<(), tokio_postgres::Error>>,
{
    let tx = client.transaction().await?;
    let claimed = tx
        .execute(
            "INSERT INTO ledger_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&consumer, &envelope.event_id],
        )
        .await?;
    if claimed == 0 {
        tx.rollback().await?;
        return Ok(Outcome::Duplicate);
    }
    handler(&tx, envelope).await?;
    tx.commit().await?;
    Ok(Outcome::Applied)
}

/// What happened to a batch of deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Events applied for the first time.
    pub applied: u64,
    /// Deliveries seen before by this consumer (or twice in the batch): nothing ran.
    pub duplicates: u64,
}

/// [`apply_once`] for many deliveries in one transaction: claims all their event ids in one
/// statement, then runs `handler` for each claimed one, in the order given (a stream's
/// events stay in order). All or nothing: on an error nothing is recorded and a redelivery
/// retries the whole batch. A bootstrap reading a replay applies thousands per second this
/// way where one transaction per event manages hundreds.
pub async fn apply_batch<F>(
    client: &mut Client,
    consumer: &str,
    envelopes: &[Envelope],
    mut handler: F,
) -> Result<BatchOutcome, ConsumeError>
where
    F: for<'a> FnMut(
        &'a Transaction<'a>,
        &'a Envelope,
    ) -> BoxFuture<'a, Result<(), tokio_postgres::Error>>,
{
    if envelopes.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let ids: Vec<&str> = envelopes.iter().map(|e| e.event_id.as_str()).collect();
    let tx = client.transaction().await?;
    let mut claimed: HashSet<String> = tx
        .query(
            "INSERT INTO ledger_inbox (consumer, event_id) SELECT $1, unnest($2::text[]) \
             ON CONFLICT DO NOTHING RETURNING event_id",
            &[&consumer, &ids],
        )
        .await?
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    let mut outcome = BatchOutcome::default();
    for envelope in envelopes {
        if claimed.remove(&envelope.event_id) {
            handler(&tx, envelope).await?;
            outcome.applied += 1;
        } else {
            outcome.duplicates += 1;
        }
    }
    tx.commit().await?;
    Ok(outcome)
}
