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
    /// The value starts with the magic byte of Confluent's wire format but is not framed.
    #[error("message value: {0}")]
    Framing(#[from] crate::confluent_wire::WireError),
    /// A framed value whose message indexes name another message than the envelope.
    #[error(
        "message value is framed for a registry with message indexes {0:?}, not those of ra.ledger.v1.Envelope"
    )]
    NotTheEnvelope(Vec<i32>),
    /// The envelope has no event id to deduplicate on.
    #[error("envelope carries no event_id")]
    MissingEventId,
    /// The database failed; nothing was recorded, so a redelivery will retry.
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// Decodes a Kafka message value: the protobuf envelope, its canonical JSON (a topic the
/// relay's `value_formats` sets to `json`), or the envelope in Confluent's wire format (set
/// to `confluent_protobuf`), told apart by the first byte: a JSON object starts with `{`, a
/// framed value with the magic byte `0x00`, an envelope's encoding with field 1's tag
/// (`0x0A`). A framed value is read without the registry: the envelope is the only message
/// a topic carries, so its message indexes must name it, and its schema id is not needed to
/// decode it.
pub fn decode(payload: &[u8]) -> Result<Envelope, ConsumeError> {
    let envelope = match payload.first() {
        Some(b'{') => serde_json::from_slice(payload)?,
        Some(&crate::confluent_wire::MAGIC) => {
            let framed = crate::confluent_wire::Framed::parse(payload)?;
            if framed.indexes != ra_ledger_proto::ENVELOPE_MESSAGE_INDEXES {
                return Err(ConsumeError::NotTheEnvelope(framed.indexes));
            }
            Envelope::decode(framed.payload)?
        }
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
    fn decodes_every_value_format_to_the_same_envelope() {
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
        let framed = crate::confluent_wire::frame(9, &[0], &protobuf);
        assert_eq!(decode(&framed).unwrap(), envelope);
        let other_message = crate::confluent_wire::frame(9, &[1], &protobuf);
        assert!(matches!(
            decode(&other_message).unwrap_err(),
            ConsumeError::NotTheEnvelope(indexes) if indexes == [1]
        ));
        assert!(matches!(
            decode(b"\x00\x00").unwrap_err(),
            ConsumeError::Framing(_)
        ));
    }
}
