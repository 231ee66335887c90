//! Turning outbox rows into Kafka messages, and deciding what a delivery error means.

use std::sync::Arc;

use bytes::Bytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureProducer;

use crate::config::RelayConfig;
use crate::lsn::format_lsn;
use crate::outbox::OutboxRow;
use crate::value_format::RenderError;

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

/// The headers every outbox row of one transaction shares, rendered once for the
/// transaction rather than once a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitHeaders {
    commit_lsn: String,
    txid: String,
    commit_timestamp: String,
}

impl CommitHeaders {
    /// The headers of `commit`.
    pub fn of(commit: &CommitInfo) -> Self {
        Self {
            commit_lsn: format_lsn(commit.commit_lsn),
            txid: commit.xid.to_string(),
            commit_timestamp: format_micros(commit.commit_time_micros),
        }
    }
}

/// One message ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Topic.
    pub topic: String,
    /// The row.
    pub row: OutboxRow,
    /// Where the headers beyond the row's own come from; they are rendered when asked for
    /// ([`OutgoingMessage::headers`], [`OutgoingMessage::kafka_headers`]).
    origin: Origin,
    /// The value: the row's payload in its topic's format (the payload itself for
    /// protobuf, the default).
    pub value: Bytes,
}

/// A row whose payload has no rendering in its topic's format: the message, with the
/// stored payload as its value, to park; and why.
#[derive(Debug)]
pub struct Unrenderable {
    /// The message.
    pub message: Box<OutgoingMessage>,
    /// Why.
    pub error: RenderError,
}

impl OutgoingMessage {
    /// Builds the message of `row`, the `ordinal`-th of its transaction, its value in the
    /// format `value_formats` sets for the row's aggregate type.
    pub fn new(
        config: &RelayConfig,
        row: OutboxRow,
        commit: &Arc<CommitHeaders>,
        ordinal: usize,
    ) -> Result<Self, Unrenderable> {
        let commit = Arc::clone(commit);
        Self::with_origin(config, row, Origin::Wal { commit, ordinal })
    }

    /// Builds the message of `row`, its headers from what `origin` knows: the relay's
    /// recovery reads rows from a snapshot, which knows no commit LSN or ordinal.
    pub fn with_origin(
        config: &RelayConfig,
        row: OutboxRow,
        origin: Origin,
    ) -> Result<Self, Unrenderable> {
        let rendered = config
            .value_format(&row.aggregate_type)
            .render(&row.payload);
        let mut message = Self {
            topic: config.topic(&row.aggregate_type),
            value: row.payload.clone(),
            row,
            origin,
        };
        match rendered {
            Ok(value) => {
                message.value = value;
                Ok(message)
            }
            Err(error) => Err(Unrenderable {
                message: Box::new(message),
                error,
            }),
        }
    }

    /// The headers as (name, value) pairs, in [`event_headers`]'s order.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let row = &self.row;
        event_headers(
            &row.event_id,
            &row.event_type,
            row.traceparent.as_deref(),
            &self.origin,
        )
    }

    /// The rdkafka headers, the same: each value copied once, straight into librdkafka's
    /// (the relay does this for every row).
    pub fn kafka_headers(&self) -> OwnedHeaders {
        let row = &self.row;
        let mut kafka = Some(OwnedHeaders::new_with_capacity(7));
        each_header(
            &row.event_id,
            &row.event_type,
            row.traceparent.as_deref(),
            &self.origin,
            |key, value| {
                kafka = kafka.take().map(|headers| {
                    headers.insert(Header {
                        key,
                        value: Some(value.as_bytes()),
                    })
                });
            },
        );
        kafka.unwrap_or_default()
    }
}

/// Where the facts behind an event's headers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The relay, decoding the WAL: the transaction's Begin message and the row's place
    /// among the transaction's outbox rows.
    Wal {
        /// The transaction's headers.
        commit: Arc<CommitHeaders>,
        /// The row's position in it, from 0.
        ordinal: usize,
    },
    /// A replay, reading the `events` table: it records each event's transaction id (since
    /// migration V8; `None` before), but not the commit's LSN or time, nor the event's
    /// place among its transaction's outbox rows. Without the commit LSN an ordinal orders
    /// nothing, and PostgreSQL keeps commit times only with `track_commit_timestamp` (and
    /// not for ever), so `commit_lsn`, `commit_timestamp` and `ordinal` are left out of
    /// replayed messages rather than made up.
    Events {
        /// The transaction's 32-bit id, the one pgoutput's Begin carries: the low 32 bits
        /// of the `xid8` the table holds.
        xid: Option<u32>,
    },
}

/// An event's headers, in this order: `id`, `event_type`, `commit_lsn`, `txid`,
/// `commit_timestamp`, `ordinal`, `traceparent`, each where `origin` knows it (and
/// `traceparent` when the event has one). The live relay and a replay both build them
/// here, so a consumer finds the same names with the same values on either topic.
pub fn event_headers(
    event_id: &str,
    event_type: &str,
    traceparent: Option<&str>,
    origin: &Origin,
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::with_capacity(7);
    each_header(event_id, event_type, traceparent, origin, |key, value| {
        headers.push((key, value.to_owned()));
    });
    headers
}

/// [`event_headers`] one by one, each handed to `emit` as (name, value), numbers written
/// on the stack: the one place that knows which headers there are and their order.
fn each_header(
    event_id: &str,
    event_type: &str,
    traceparent: Option<&str>,
    origin: &Origin,
    mut emit: impl FnMut(&'static str, &str),
) {
    let mut digits = [0u8; 20];
    emit(header::ID, event_id);
    emit(header::EVENT_TYPE, event_type);
    match origin {
        Origin::Wal { commit, ordinal } => {
            emit(header::COMMIT_LSN, &commit.commit_lsn);
            emit(header::TXID, &commit.txid);
            emit(header::COMMIT_TIMESTAMP, &commit.commit_timestamp);
            emit(header::ORDINAL, decimal(*ordinal as u64, &mut digits));
        }
        Origin::Events { xid: Some(xid) } => {
            emit(header::TXID, decimal(u64::from(*xid), &mut digits));
        }
        Origin::Events { xid: None } => {}
    }
    if let Some(traceparent) = traceparent {
        emit(header::TRACEPARENT, traceparent);
    }
}

/// `value` in decimal digits, written at the end of `digits`.
fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &str {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[start..]).expect("ASCII digits")
}

/// `headers` as rdkafka headers, in their order.
pub fn kafka_headers(headers: &[(&str, String)]) -> OwnedHeaders {
    headers.iter().fold(
        OwnedHeaders::new_with_capacity(headers.len()),
        |kafka, (key, value)| {
            kafka.insert(Header {
                key,
                value: Some(value.as_bytes()),
            })
        },
    )
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

/// Whether a transactional producer's error leaves the outcome unknown: a commit or an
/// abort that timed out, or a produce that timed out or lost its connection. The broker may
/// yet apply what was asked, late, so that instance must not be used again, not even to
/// abort (Kingsbury's advice after the 2024 Bufstream analysis: a delayed EndTxn can land
/// on a later transaction of the same producer). The session drops it; the next one makes
/// a new producer, whose `init_transactions` bumps the epoch and fences the old one. Pure.
pub fn indefinite(error: &KafkaError) -> bool {
    let code = match error {
        KafkaError::MessageProduction(code) | KafkaError::Flush(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    matches!(
        code,
        Some(
            RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::MessageTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::AllBrokersDown
        )
    )
}

/// The relay's idempotent producer, as a `FutureProducer` (for what produces now and then:
/// a republish of parked messages). The relay's sessions use [`crate::relay`]'s own.
pub fn producer(config: &RelayConfig) -> Result<FutureProducer, KafkaError> {
    config
        .kafka_settings()
        .client_config()
        .map_err(|error| KafkaError::ClientCreation(error.to_string()))?
        .create()
}

#[cfg(test)]
mod indefinite_tests {
    use super::*;

    #[test]
    fn timeouts_and_lost_connections_leave_an_outcome_unknown() {
        for code in [
            RDKafkaErrorCode::OperationTimedOut,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::RequestTimedOut,
        ] {
            assert!(indefinite(&KafkaError::MessageProduction(code)), "{code:?}");
            assert!(indefinite(&KafkaError::Flush(code)), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::InvalidProducerEpoch,
        ] {
            assert!(
                !indefinite(&KafkaError::MessageProduction(code)),
                "{code:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prost::Message as _;
    use ra_ledger_proto::v1::Envelope;

    use super::*;
    use crate::value_format::ValueFormat;

    /// A `contact` row, event `e-1`, payload `p`, no trace context.
    fn contact_row() -> OutboxRow {
        OutboxRow {
            id: 1,
            event_id: "e-1".into(),
            aggregate_type: "contact".into(),
            aggregate_id: "c-1".into(),
            event_type: "ContactCreated".into(),
            payload: Bytes::from_static(b"p"),
            traceparent: None,
        }
    }

    #[test]
    fn builds_topic_key_and_headers() {
        let row = contact_row();
        let commit = CommitInfo {
            commit_lsn: 0x1_0000_00A0,
            xid: 742,
            commit_time_micros: 1_767_225_600_000_001,
        };
        let message = OutgoingMessage::new(
            &RelayConfig::default(),
            row,
            &Arc::new(CommitHeaders::of(&commit)),
            3,
        )
        .unwrap();
        assert_eq!(message.topic, "outbox.event.contact");
        assert_eq!(message.value, Bytes::from_static(b"p"));
        assert_eq!(
            message.headers(),
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
    fn the_kafka_headers_are_the_headers_in_their_order() {
        use rdkafka::message::Headers as _;
        let row = OutboxRow {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            ..contact_row()
        };
        let commit = Arc::new(CommitHeaders::of(&CommitInfo {
            commit_lsn: 0x1_0000_00A0,
            xid: 742,
            commit_time_micros: 1_767_225_600_000_001,
        }));
        let config = RelayConfig::default();
        let messages = [0, 7, 10, 4_294_967_296]
            .map(|ordinal| OutgoingMessage::new(&config, row.clone(), &commit, ordinal).unwrap())
            .into_iter()
            .chain([OutgoingMessage::with_origin(
                &config,
                row.clone(),
                Origin::Events { xid: Some(9) },
            )
            .unwrap()]);
        for message in messages {
            let kafka = message.kafka_headers();
            let pairs: Vec<(&str, String)> = kafka
                .iter()
                .map(|header| {
                    let value = std::str::from_utf8(header.value.unwrap()).unwrap();
                    (header.key, value.to_owned())
                })
                .collect();
            assert_eq!(pairs, message.headers());
        }
    }

    #[test]
    fn a_json_topic_gets_the_json_of_the_stored_envelope_and_the_same_headers() {
        let envelope = Envelope {
            event_id: "e-1".into(),
            stream_version: 2,
            event_type: "ContactCreated".into(),
            ..Envelope::default()
        };
        let row = |payload: Vec<u8>| OutboxRow {
            id: 1,
            event_id: "e-1".into(),
            aggregate_type: "contact".into(),
            aggregate_id: "c-1".into(),
            event_type: "ContactCreated".into(),
            payload: Bytes::from(payload),
            traceparent: None,
        };
        let commit = Arc::new(CommitHeaders::of(&CommitInfo {
            commit_lsn: 1,
            xid: 1,
            commit_time_micros: 0,
        }));
        let json = RelayConfig {
            value_formats: BTreeMap::from([("contact".into(), ValueFormat::Json)]),
            ..RelayConfig::default()
        };
        let protobuf = RelayConfig::default();
        let stored = envelope.encode_to_vec();
        let as_json = OutgoingMessage::new(&json, row(stored.clone()), &commit, 0).unwrap();
        let as_protobuf = OutgoingMessage::new(&protobuf, row(stored.clone()), &commit, 0).unwrap();
        assert_eq!(
            as_json.value.as_ref(),
            br#"{"eventId":"e-1","streamVersion":"2","eventType":"ContactCreated"}"#
        );
        assert_eq!(as_json.row.payload.as_ref(), stored.as_slice());
        assert_eq!(as_json.headers(), as_protobuf.headers());
        assert_eq!(as_json.topic, as_protobuf.topic);
        let garbage = OutgoingMessage::new(&json, row(vec![0xff; 3]), &commit, 0).unwrap_err();
        assert_eq!(garbage.message.value.as_ref(), &[0xff; 3]);
    }

    #[test]
    fn a_framed_topic_gets_the_stored_bytes_framed_with_its_schema_id() {
        let stored = Envelope {
            event_id: "e-1".into(),
            ..Envelope::default()
        }
        .encode_to_vec();
        let row = OutboxRow {
            payload: Bytes::from(stored.clone()),
            ..contact_row()
        };
        let commit = Arc::new(CommitHeaders::of(&CommitInfo {
            commit_lsn: 1,
            xid: 1,
            commit_time_micros: 0,
        }));
        let framed = RelayConfig {
            value_formats: BTreeMap::from([(
                "contact".into(),
                ValueFormat::ConfluentProtobuf { schema_id: Some(7) },
            )]),
            ..RelayConfig::default()
        };
        let message = OutgoingMessage::new(&framed, row.clone(), &commit, 0).unwrap();
        let mut expected = b"\x00\x00\x00\x00\x07\x00".to_vec();
        expected.extend_from_slice(&stored);
        assert_eq!(message.value.as_ref(), expected.as_slice());
        assert_eq!(message.row.payload.as_ref(), stored.as_slice());
        // Not registered: no value, and the stream waits rather than park.
        let unregistered = RelayConfig {
            value_formats: BTreeMap::from([(
                "contact".into(),
                ValueFormat::ConfluentProtobuf { schema_id: None },
            )]),
            ..RelayConfig::default()
        };
        let refused = OutgoingMessage::new(&unregistered, row, &commit, 0).unwrap_err();
        assert!(refused.error.holds_the_stream(), "{}", refused.error);
    }

    #[test]
    fn a_replayed_event_carries_the_headers_the_events_table_can_give() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(
            event_headers(
                "e-1",
                "ContactCreated",
                Some(traceparent),
                &Origin::Events { xid: Some(742) }
            ),
            vec![
                ("id", "e-1".to_owned()),
                ("event_type", "ContactCreated".to_owned()),
                ("txid", "742".to_owned()),
                ("traceparent", traceparent.to_owned()),
            ]
        );
        assert_eq!(
            event_headers("e-1", "ContactCreated", None, &Origin::Events { xid: None }),
            vec![
                ("id", "e-1".to_owned()),
                ("event_type", "ContactCreated".to_owned()),
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
