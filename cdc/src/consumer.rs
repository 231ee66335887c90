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

use std::collections::HashSet;

use futures::future::BoxFuture;
use prost::Message as _;
use ra_ledger_proto::v1::Envelope;
use tokio_postgres::{Client, Transaction};

/// Sets `isolation.level=read_committed` on a consumer's settings: records of aborted Kafka
/// transactions (an exactly-once relay that crashed or was fenced mid-transaction) are
/// never delivered, and records of open ones only once they commit. librdkafka's default
/// is the same today; set explicitly, it survives a change of default or of client.
pub fn read_committed(config: &mut rdkafka::ClientConfig) -> &mut rdkafka::ClientConfig {
    config.set("isolation.level", "read_committed")
}

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
