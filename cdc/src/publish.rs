//! Turning outbox rows into Kafka messages, and deciding what a delivery error means.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureProducer;

use crate::config::RelayConfig;
use crate::outbox::OutboxRow;

/// Header names, as consumers see them. `id` matches Debezium's EventRouter.
pub mod header {
    /// Event id: the deduplication key.
    pub const ID: &str = "id";
    /// Event type.
    pub const EVENT_TYPE: &str = "event_type";
    /// Commit LSN of the transaction, e.g. `0/16B3748`.
    pub const COMMIT_LSN: &str = "commit_lsn";
    /// PostgreSQL transaction id.
    pub const TXID: &str = "txid";
    /// Commit time, RFC 3339 with microseconds.
    pub const COMMIT_TIMESTAMP: &str = "commit_timestamp";
    /// Position of the message within its transaction, from 0.
    pub const ORDINAL: &str = "ordinal";
    /// W3C trace context of the request that wrote the event, when it had one.
    pub const TRACEPARENT: &str = "traceparent";
}

/// The transaction an outbox row committed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    /// Commit LSN.
    pub commit_lsn: u64,
    /// Transaction id.
    pub xid: u32,
    /// Commit time, microseconds since the Unix epoch.
    pub commit_time_micros: i64,
}

/// One message ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Topic.
    pub topic: String,
    /// The row.
    pub row: OutboxRow,
    /// Headers as (name, value) pairs.
    pub headers: Vec<(&'static str, String)>,
}

impl OutgoingMessage {
    /// Builds the message of `row`, the `ordinal`-th of its transaction.
    pub fn new(config: &RelayConfig, row: OutboxRow, commit: &CommitInfo, ordinal: usize) -> Self {
        let mut headers = vec![
            (header::ID, row.event_id.clone()),
            (header::EVENT_TYPE, row.event_type.clone()),
            (header::COMMIT_LSN, format_lsn(commit.commit_lsn)),
            (header::TXID, commit.xid.to_string()),
            (
                header::COMMIT_TIMESTAMP,
                format_micros(commit.commit_time_micros),
            ),
            (header::ORDINAL, ordinal.to_string()),
        ];
        if let Some(traceparent) = &row.traceparent {
            headers.push((header::TRACEPARENT, traceparent.clone()));
        }
        Self {
            topic: config.topic(&row.aggregate_type),
            row,
            headers,
        }
    }

    /// The rdkafka headers.
    pub fn kafka_headers(&self) -> OwnedHeaders {
        self.headers.iter().fold(
            OwnedHeaders::new_with_capacity(self.headers.len()),
            |headers, (key, value)| {
                headers.insert(Header {
                    key,
                    value: Some(value.as_bytes()),
                })
            },
        )
    }
}

/// PostgreSQL's text form of an LSN.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn format_micros(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|time| time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

/// What to do about a failed send or delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// Kafka will never take this message as it is: park it and go on.
    Permanent,
    /// Anything else: end the session and replay from the slot (duplicates, never loss).
    Transient,
}

/// Classifies a Kafka error. Pure, so the policy is tested on its own.
pub fn classify(error: &KafkaError) -> DeliveryFailure {
    let code = match error {
        KafkaError::MessageProduction(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    match code {
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::InvalidTopic,
        ) => DeliveryFailure::Permanent,
        // A missing topic or a missing grant is the environment, not the message: parking
        // would shunt every event aside. Stall loudly instead, until an operator fixes it.
        _ => DeliveryFailure::Transient,
    }
}

/// The relay's idempotent producer.
pub fn producer(config: &RelayConfig) -> Result<FutureProducer, KafkaError> {
    config
        .kafka_settings()
        .client_config()
        .map_err(|error| KafkaError::ClientCreation(error.to_string()))?
        .create()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn builds_topic_key_and_headers() {
        let row = OutboxRow {
            id: 1,
            event_id: "e-1".into(),
            aggregate_type: "contact".into(),
            aggregate_id: "c-1".into(),
            event_type: "ContactCreated".into(),
            payload: Bytes::from_static(b"p"),
            traceparent: None,
        };
        let commit = CommitInfo {
            commit_lsn: 0x1_0000_00A0,
            xid: 742,
            commit_time_micros: 1_767_225_600_000_001,
        };
        let message = OutgoingMessage::new(&RelayConfig::default(), row, &commit, 3);
        assert_eq!(message.topic, "outbox.event.contact");
        assert_eq!(
            message.headers,
            vec![
                ("id", "e-1".to_owned()),
                ("event_type", "ContactCreated".to_owned()),
                ("commit_lsn", "1/A0".to_owned()),
                ("txid", "742".to_owned()),
                ("commit_timestamp", "2026-01-01T00:00:00.000001Z".to_owned()),
                ("ordinal", "3".to_owned()),
            ]
        );
    }

    #[test]
    fn only_refusals_for_good_are_permanent() {
        let permanent = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(classify(&permanent), DeliveryFailure::Permanent);
        let down = KafkaError::MessageProduction(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(classify(&down), DeliveryFailure::Transient);
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert_eq!(classify(&timeout), DeliveryFailure::Transient);
        let fatal = KafkaError::MessageProduction(RDKafkaErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(classify(&fatal), DeliveryFailure::Transient);
        let missing_topic = KafkaError::MessageProduction(RDKafkaErrorCode::UnknownTopic);
        assert_eq!(classify(&missing_topic), DeliveryFailure::Transient);
    }
}
