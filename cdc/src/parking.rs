//! Parked messages: ones Kafka refused for good, kept durably in `outbox_parked` with every
//! header (the relay parks them: [`park_refused`]), listed and re-published by operators. Both ways in are here: the CLI publishes
//! again at once ([`republish`]); the console asks for it ([`request_republish`]) and the
//! relay, which holds the producer, publishes what was asked ([`republish_requested`]).

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::Serialize;
use tokio_postgres::Client;

use crate::lsn::format_lsn;
use crate::metrics::RelayMetrics;
use crate::publish::OutgoingMessage;

/// A parked message, as operators see it.
#[derive(Debug, Clone, Serialize)]
pub struct ParkedMessage {
    /// Row id in `outbox_parked`.
    pub id: i64,
    /// Event id.
    pub event_id: String,
    /// Aggregate type.
    pub aggregate_type: String,
    /// Aggregate id (the Kafka key).
    pub aggregate_id: String,
    /// Event type.
    pub event_type: String,
    /// Topic it was meant for.
    pub topic: String,
    /// Payload size in bytes.
    pub payload_bytes: i64,
    /// Headers it carried.
    pub headers: serde_json::Value,
    /// Commit LSN of its transaction.
    pub commit_lsn: String,
    /// Why Kafka refused it.
    pub error: String,
    /// When it was parked.
    pub parked_at: chrono::DateTime<chrono::Utc>,
    /// When it was re-published, if it was.
    pub republished_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Parks a message durably, with the value it would have carried (in its topic's format,
/// so a republish sends that). Parking the same event twice (after a crash and a replay)
/// keeps the first row.
pub async fn park(
    client: &Client,
    message: &OutgoingMessage,
    commit_lsn: u64,
    error: &str,
) -> Result<(), tokio_postgres::Error> {
    let headers: serde_json::Map<String, serde_json::Value> = message
        .headers()
        .into_iter()
        .map(|(key, value)| (key.to_owned(), serde_json::Value::String(value)))
        .collect();
    client
        .execute(
            include_str!("sql/park.sql"),
            &[
                &message.row.event_id,
                &message.row.aggregate_type,
                &message.row.aggregate_id,
                &message.row.event_type,
                &message.topic,
                &message.value.as_ref(),
                &serde_json::Value::Object(headers),
                &format_lsn(commit_lsn),
                &error,
            ],
        )
        .await?;
    Ok(())
}

/// Parks, as [`park`] does, a message a relay session found Kafka would never take as it
/// is (refused for good, or with no rendering in its topic's format): said at ERROR for
/// the operator, and counted. Both delivery modes park so.
pub async fn park_refused(
    client: &Client,
    metrics: &RelayMetrics,
    message: &OutgoingMessage,
    commit_lsn: u64,
    error: &str,
) -> Result<(), tokio_postgres::Error> {
    tracing::error!(
        event_id = %message.row.event_id,
        topic = %message.topic,
        value_bytes = message.value.len(),
        %error,
        "a message Kafka will never take as it is; parking it in outbox_parked (see `ledger relay parked list`)"
    );
    park(client, message, commit_lsn, error).await?;
    metrics.parked();
    Ok(())
}

/// Parked messages, oldest first; only those not re-published unless `all`.
pub async fn list(client: &Client, all: bool) -> Result<Vec<ParkedMessage>, tokio_postgres::Error> {
    let rows = client
        .query(include_str!("sql/list_parked.sql"), &[&all])
        .await?;
    Ok(rows
        .iter()
        .map(|row| ParkedMessage {
            id: row.get(0),
            event_id: row.get(1),
            aggregate_type: row.get(2),
            aggregate_id: row.get(3),
            event_type: row.get(4),
            topic: row.get(5),
            payload_bytes: row.get(6),
            headers: row.get(7),
            commit_lsn: row.get(8),
            error: row.get(9),
            parked_at: row.get(10),
            republished_at: row.get(11),
        })
        .collect())
}

/// A parked message waiting to be published again, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingMessage {
    /// Row id in `outbox_parked`.
    pub id: i64,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Topic it was meant for.
    pub topic: String,
    /// Why Kafka refused it.
    pub error: String,
    /// When it was parked.
    pub parked_at: chrono::DateTime<chrono::Utc>,
    /// When an operator asked to publish it again, while the relay has not tried yet.
    pub republish_requested_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Who asked.
    pub republish_requested_by: Option<String>,
    /// Kafka's refusal of the last attempt the relay made on request.
    pub republish_error: Option<String>,
}

/// Parked messages not re-published yet, oldest first, at most `limit`.
pub async fn waiting(
    client: &Client,
    limit: i64,
) -> Result<Vec<WaitingMessage>, tokio_postgres::Error> {
    let rows = client
        .query(include_str!("sql/waiting_parked.sql"), &[&limit])
        .await?;
    Ok(rows
        .iter()
        .map(|row| WaitingMessage {
            id: row.get(0),
            event_id: row.get(1),
            event_type: row.get(2),
            topic: row.get(3),
            error: row.get(4),
            parked_at: row.get(5),
            republish_requested_at: row.get(6),
            republish_requested_by: row.get(7),
            republish_error: row.get(8),
        })
        .collect())
}

/// Asks the relay to publish parked message `id` again (see [`republish_requested`]), on
/// behalf of `requested_by`. `false` when no such message waits to be published.
pub async fn request_republish(
    client: &Client,
    id: i64,
    requested_by: &str,
) -> Result<bool, tokio_postgres::Error> {
    let updated = client
        .execute(
            include_str!("sql/request_republish.sql"),
            &[&id, &requested_by],
        )
        .await?;
    Ok(updated > 0)
}

/// Outcome of re-publishing one parked message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Republished {
    /// Kafka took it; the row is marked.
    Sent {
        /// Parked row id.
        id: i64,
    },
    /// Kafka still refuses it.
    Refused {
        /// Parked row id.
        id: i64,
        /// Kafka's error.
        error: String,
    },
}

/// Re-publishes parked messages (one id, or every pending one), with their original key
/// and headers, and marks those Kafka acknowledged.
pub async fn republish(
    client: &impl tokio_postgres::GenericClient,
    producer: &FutureProducer,
    only: Option<i64>,
) -> Result<Vec<Republished>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT id, topic, aggregate_id, payload, headers FROM outbox_parked \
             WHERE republished_at IS NULL AND ($1::bigint IS NULL OR id = $1) ORDER BY id",
            &[&only],
        )
        .await?;
    let mut outcomes = Vec::new();
    for row in rows {
        let id: i64 = row.get(0);
        let topic: String = row.get(1);
        let key: String = row.get(2);
        let payload: Vec<u8> = row.get(3);
        let headers: serde_json::Value = row.get(4);
        let mut kafka_headers = rdkafka::message::OwnedHeaders::new();
        if let Some(map) = headers.as_object() {
            for (name, value) in map {
                kafka_headers = kafka_headers.insert(rdkafka::message::Header {
                    key: name,
                    value: Some(value.as_str().unwrap_or_default().as_bytes()),
                });
            }
        }
        let record = FutureRecord::to(&topic)
            .key(key.as_bytes())
            .payload(&payload)
            .headers(kafka_headers);
        match producer.send(record, Duration::from_secs(30)).await {
            Ok(_) => {
                client
                    .execute(
                        "UPDATE outbox_parked SET republished_at = now(), republish_error = NULL \
                         WHERE id = $1",
                        &[&id],
                    )
                    .await?;
                outcomes.push(Republished::Sent { id });
            }
            Err((error, _)) => outcomes.push(Republished::Refused {
                id,
                error: error.to_string(),
            }),
        }
    }
    Ok(outcomes)
}

/// Publishes the parked messages an operator asked for ([`request_republish`], from the
/// console), one at a time, each in a transaction holding its row (`FOR UPDATE SKIP LOCKED`:
/// two relays never publish the same request). A refusal clears the request and records
/// Kafka's error for the operator to see. Returns the outcomes.
pub async fn republish_requested(
    client: &mut Client,
    producer: &FutureProducer,
) -> Result<Vec<Republished>, tokio_postgres::Error> {
    let mut outcomes = Vec::new();
    loop {
        let tx = client.transaction().await?;
        let Some(row) = tx
            .query_opt(
                "SELECT id FROM outbox_parked \
                 WHERE republish_requested_at IS NOT NULL AND republished_at IS NULL \
                 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[],
            )
            .await?
        else {
            return Ok(outcomes);
        };
        let id: i64 = row.get(0);
        let outcome = republish(&tx, producer, Some(id)).await?;
        for outcome in outcome {
            if let Republished::Refused { id, error } = &outcome {
                tx.execute(
                    "UPDATE outbox_parked SET republish_requested_at = NULL, \
                     republish_error = $2 WHERE id = $1",
                    &[id, error],
                )
                .await?;
            }
            outcomes.push(outcome);
        }
        tx.commit().await?;
    }
}
