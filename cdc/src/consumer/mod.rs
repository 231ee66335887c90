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
    /// The value is JSON, but not the canonical JSON of a `ra.ledger.v1.Envelope`.
    #[error("message value is not the JSON of a ra.ledger.v1.Envelope: {0}")]
    DecodeJson(#[from] serde_json::Error),
    /// The envelope has no event id to deduplicate on.
    #[error("envelope carries no event_id")]
    MissingEventId,
    /// The database failed; nothing was recorded, so a redelivery will retry.
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// Decodes a Kafka message value: the protobuf envelope, or its canonical JSON (a topic the
/// relay's `value_formats` sets to `json`), told apart by the first byte: a JSON object
/// starts with `{`, an envelope's encoding with field 1's tag (`0x0A`).
pub fn decode(payload: &[u8]) -> Result<Envelope, ConsumeError> {
    let envelope = match payload.first() {
        Some(b'{') => serde_json::from_slice(payload)?,
        _ => Envelope::decode(payload)?,
    };
    if envelope.event_id.is_empty() {
        return Err(ConsumeError::MissingEventId);
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_either_value_format_to_the_same_envelope() {
        let envelope = Envelope {
            event_id: "e-1".into(),
            stream_version: 3,
            ..Envelope::default()
        };
        let protobuf = envelope.encode_to_vec();
        let json = serde_json::to_vec(&envelope).unwrap();
        assert_eq!(decode(&protobuf).unwrap(), envelope);
        assert_eq!(decode(&json).unwrap(), envelope);
        let error = decode(br#"{"eventId":"e-1","stream_versoin":"3"}"#).unwrap_err();
        assert!(matches!(error, ConsumeError::DecodeJson(_)), "{error}");
        assert!(matches!(
            decode(&[0xff; 3]).unwrap_err(),
            ConsumeError::Decode(_)
        ));
    }
}
