//! For consuming teams: decode the envelope, and apply each event exactly once inside your
//! own PostgreSQL transaction, deduplicating on the event id in an inbox table.
//!
//! The relay delivers at least once, so the same event may arrive twice (after a relay
//! crash, a broker retry, a replay). Recording the event id in the same transaction as the
//! change it causes makes the second arrival a no-op.
//!
//! ```text
//! let envelope = consumer::decode(message.payload())?;
//! let outcome = consumer::apply_once(&mut client, "billing", &envelope, |tx, event| {
//!     Box::pin(async move { tx.execute("...", &[...]).await.map(|_| ()) })
//! }).await?;
//! ```

use futures::future::BoxFuture;
use prost::Message as _;
use ra_ledger_proto::v1::Envelope;
use tokio_postgres::{Client, Transaction};

/// Creates the inbox table when missing. Run it with the consumer's migrations.
pub const INBOX_SCHEMA: &str = include_str!("sql/inbox.sql");

/// What happened to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// First time: the handler ran and its changes committed with the inbox row.
    Applied,
    /// Seen before by this consumer: nothing ran.
    Duplicate,
}

/// Why a message could not be handled.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The value is not a `ra.ledger.v1.Envelope`.
    #[error("message value is not a ra.ledger.v1.Envelope: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The envelope has no event id to deduplicate on.
    #[error("envelope carries no event_id")]
    MissingEventId,
    /// The database failed; nothing was recorded, so a redelivery will retry.
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// Decodes a Kafka message value.
pub fn decode(payload: &[u8]) -> Result<Envelope, ConsumeError> {
    let envelope = Envelope::decode(payload)?;
    if envelope.event_id.is_empty() {
        return Err(ConsumeError::MissingEventId);
    }
    Ok(envelope)
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
