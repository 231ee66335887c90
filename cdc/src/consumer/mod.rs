//! For consuming teams: decode the envelope, and apply each event exactly once inside your
//! own PostgreSQL transaction, deduplicating on the event id in an inbox table.
//!
//! The relay delivers at least once by default, so the same event may arrive twice (after
//! a relay crash, a broker retry, a replay). Recording the event id in the same transaction
//! as the change it causes makes the second arrival a no-op. With the relay in
//! `exactly_once` mode a consumer reading with `isolation.level=read_committed`
//! ([`read_committed`]) sees each live event once; the inbox stays, as the second line of
//! defence and for what is still at least once (replays, republished parked messages, a
//! consumer's own crash between its commit and its offset commit).
//!
//! ```text
//! let envelope = consumer::decode(message.payload())?;
//! let outcome = consumer::apply_once(&mut client, "billing", &envelope, |tx, event| {
//!     Box::pin(async move { tx.execute("...", &[...]).await.map(|_| ()) })
//! }).await?;
//! ```
//!
//! The inbox itself is in `inbox` (re-exported here); [`example`] is the example consumer
//! `ra-example-consumer` runs; [`event_router`] reads a message in the shape of Debezium's
//! Outbox Event Router, for consumers written against that shape.

pub mod event_router;
pub mod example;
mod inbox;

pub use inbox::{BatchOutcome, INBOX_SCHEMA, Outcome, apply_batch, apply_once};

use prost::Message as _;
use ra_ledger_proto::v1::Envelope;

/// Sets `isolation.level=read_committed` on a consumer's settings: records of aborted Kafka
/// transactions (an exactly-once relay that crashed or was fenced mid-transaction) are
/// never delivered, and records of open ones only once they commit. librdkafka's default
/// is the same today; set explicitly, it survives a change of default or of client.
pub fn read_committed(config: &mut rdkafka::ClientConfig) -> &mut rdkafka::ClientConfig {
    config.set("isolation.level", "read_committed")
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
