//! What the relay publishes as a message's value, per aggregate type's topic
//! (`value_formats` in the relay's config): the outbox payload as stored (protobuf, the
//! default); its proto3 canonical JSON mapping, for teams without protobuf tooling; or the
//! stored payload framed in Confluent's wire format ([`crate::confluent_wire`]), for teams
//! whose deserializers read through a schema registry.
//!
//! Only the published value changes: the ledger stores, hashes and seals the protobuf
//! bytes, and a JSON or framed value is rendered from exactly those bytes, so every format
//! decodes to the same `ra.ledger.v1.Envelope`. The key and the headers are the same in all.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message as _;
use ra_ledger_proto::v1::Envelope;
use serde::Deserialize;

use crate::confluent_wire::{self, SchemaId};
use crate::infra::settings::ConfigError;

/// The aggregate types whose outbox payload is a `ra.ledger.v1.Envelope` (what the ledger
/// writes for contacts, assignments and reassignment runs), the only ones a format may be
/// set for. Digests (`digest`) are already a JSON document.
pub const ENVELOPE_AGGREGATES: [&str; 3] = ["contact", "assignment", "reassignment"];

/// The encoding of a topic's message values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum ValueFormat {
    /// The envelope's protobuf bytes, as the ledger stored them (`application/x-protobuf`).
    #[default]
    Protobuf,
    /// The envelope in the proto3 canonical JSON mapping (`application/json`):
    /// lowerCamelCase names, 64-bit integers as strings, enums by name, default values left
    /// out, the `event` oneof as its case's field (e.g. `"contactCreated": {...}`).
    Json,
    /// `confluent_protobuf`: the envelope's protobuf bytes in Confluent's wire format,
    /// `0x00`, the schema's id in the registry (4 bytes, big-endian), the envelope's message
    /// indexes (`0x00`: the first message of events.proto), then the bytes as stored.
    /// `schema_id` is what the registry answered when the relay registered events.proto under
    /// the topic's subject at start ([`crate::registry::register_topics`]); `None` until then,
    /// and no value is rendered without it, so nothing unframed is ever published as framed.
    ConfluentProtobuf {
        /// The registry's id of the schema, once registered.
        schema_id: Option<SchemaId>,
    },
}

impl ValueFormat {
    /// The names configuration files use, in the order error messages list them.
    pub const NAMES: [&str; 3] = ["protobuf", "json", "confluent_protobuf"];

    /// Parses `protobuf`, `json` or `confluent_protobuf` (not registered yet).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "protobuf" => Some(Self::Protobuf),
            "json" => Some(Self::Json),
            "confluent_protobuf" => Some(Self::ConfluentProtobuf { schema_id: None }),
            _ => None,
        }
    }

    /// The name configuration files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Protobuf => "protobuf",
            Self::Json => "json",
            Self::ConfluentProtobuf { .. } => "confluent_protobuf",
        }
    }

    /// Whether the values go through a schema registry.
    pub fn is_framed(self) -> bool {
        matches!(self, Self::ConfluentProtobuf { .. })
    }

    /// The value to publish for the stored `payload`.
    pub fn render(self, payload: &Bytes) -> Result<Bytes, RenderError> {
        match self {
            Self::Protobuf => Ok(payload.clone()),
            Self::ConfluentProtobuf {
                schema_id: Some(schema_id),
            } => Ok(confluent_wire::frame(
                schema_id,
                ra_ledger_proto::ENVELOPE_MESSAGE_INDEXES,
                payload,
            )),
            Self::ConfluentProtobuf { schema_id: None } => Err(RenderError::Unregistered),
            Self::Json => {
                let envelope = Envelope::decode(payload.as_ref())
                    .map_err(|error| RenderError::NotAnEnvelope(error.to_string()))?;
                // The JSON is rendered from the relay's own types: whatever its copy of
                // events.proto does not know (a new field, a new event in the oneof) would
                // be dropped in silence. The ledger encodes with the same generated code,
                // so a payload this relay fully knows encodes back to the same bytes.
                if envelope.encode_to_vec() != payload.as_ref() {
                    return Err(RenderError::Newer(
                        "a field or an event type it does not know".into(),
                    ));
                }
                serde_json::to_vec(&envelope)
                    .map(Bytes::from)
                    // pbjson refuses an enum number it has no name for.
                    .map_err(|error| {
                        RenderError::Newer(format!("an enum value it does not know ({error})"))
                    })
            }
        }
    }
}

impl TryFrom<String> for ValueFormat {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text).ok_or_else(|| {
            format!(
                "unknown value format `{text}`, expected one of `{}`",
                Self::NAMES.join("`, `")
            )
        })
    }
}

/// A payload that cannot be rendered in its topic's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// It is not an envelope: Kafka would never get it as configured, so the relay parks it
    /// like a message Kafka refused.
    #[error("the payload is not a ra.ledger.v1.Envelope, so it has no JSON rendering: {0}")]
    NotAnEnvelope(String),
    /// An envelope of a newer schema than the relay's: rendering it would lose data, and
    /// parking it would skip an event, so the relay holds the stream until it is upgraded.
    #[error(
        "an envelope carries {0}: ledger serve writes a newer events.proto than this relay renders as JSON. Nothing is published or parked meanwhile, the stream waits. Upgrade the relay (and the consumers) before ledger serve (docs/event-schema-evolution.md)"
    )]
    Newer(String),
    /// A `confluent_protobuf` topic whose schema the relay has not registered: a value
    /// without its schema id would be read by no deserializer, so the stream waits. The relay
    /// registers before it reads anything; only a caller that skipped that meets this.
    #[error(
        "a confluent_protobuf topic has no schema id: the relay registers events.proto in the schema registry before it publishes (a bug if this shows); nothing is published or parked meanwhile"
    )]
    Unregistered,
}

impl RenderError {
    /// Whether the stream must wait rather than park the message.
    pub fn holds_the_stream(&self) -> bool {
        matches!(self, Self::Newer(_) | Self::Unregistered)
    }
}

/// Checks `value_formats`: its keys must be envelope aggregate types (a typo would leave a
/// topic on protobuf without a word). The reassignment worker reads every format
/// ([`crate::consumer::decode`]), so its topic may be JSON or framed too.
pub fn validate(formats: &BTreeMap<String, ValueFormat>) -> Result<(), ConfigError> {
    for aggregate_type in formats.keys() {
        if !ENVELOPE_AGGREGATES.contains(&aggregate_type.as_str()) {
            return Err(ConfigError::invalid(
                "value_formats",
                aggregate_type,
                format!(
                    "not an aggregate type whose topic carries envelopes; expected one of {}",
                    ENVELOPE_AGGREGATES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ra_ledger_proto::v1::envelope::Event;
    use ra_ledger_proto::v1::{AssignmentEnded, EndReason};

    use super::*;

    fn envelope() -> Envelope {
        Envelope {
            event_id: "0192f0c4-0000-7000-8000-000000000001".into(),
            stream: "assignment-b-1-TX".into(),
            stream_version: 9_007_199_254_740_993,
            event_type: "AssignmentEnded".into(),
            schema_version: 1,
            recorded_at_micros: 1_767_225_600_000_001,
            effective_at_micros: 1_767_225_600_000_001,
            actor: "ops".into(),
            correlation_id: String::new(),
            causation_id: String::new(),
            event: Some(Event::AssignmentEnded(AssignmentEnded {
                assignment_id: "a-1".into(),
                business_id: "b-1".into(),
                jurisdiction: "TX".into(),
                contact_id: "c-1".into(),
                reason: EndReason::Replaced as i32,
                replaced_by: "a-2".into(),
            })),
        }
    }

    #[test]
    fn json_is_the_canonical_mapping_of_the_stored_bytes() {
        let stored = Bytes::from(envelope().encode_to_vec());
        let json = ValueFormat::Json.render(&stored).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        // 2^53 + 1: a JSON number would lose it, so 64-bit integers are strings.
        assert_eq!(value["streamVersion"], "9007199254740993");
        assert_eq!(value["recordedAtMicros"], "1767225600000001");
        assert_eq!(value["schemaVersion"], 1);
        assert_eq!(value["assignmentEnded"]["reason"], "END_REASON_REPLACED");
        assert_eq!(value["assignmentEnded"]["replacedBy"], "a-2");
        // Defaults are left out, and no snake_case name appears.
        assert!(value.get("correlationId").is_none(), "{value}");
        assert!(value.get("stream_version").is_none(), "{value}");
        assert_eq!(
            serde_json::from_slice::<Envelope>(&json).unwrap(),
            envelope()
        );
        assert_eq!(ValueFormat::Protobuf.render(&stored).unwrap(), stored);
    }

    #[test]
    fn a_payload_that_is_no_envelope_has_no_json() {
        let digest = Bytes::from_static(br#"{"format":"ra-ledger digest v1"}"#);
        let error = ValueFormat::Json.render(&digest).unwrap_err().to_string();
        assert!(error.contains("not a ra.ledger.v1.Envelope"), "{error}");
    }

    #[test]
    fn an_envelope_of_a_newer_schema_holds_the_stream_rather_than_lose_a_field() {
        // A field number this relay's events.proto does not have (50, a string), appended
        // as a newer ledger would write it.
        let unknown_field = |number: u32, value: &[u8]| -> Vec<u8> {
            let mut bytes = Vec::new();
            prost::encoding::encode_key(
                number,
                prost::encoding::WireType::LengthDelimited,
                &mut bytes,
            );
            prost::encoding::encode_varint(value.len() as u64, &mut bytes);
            bytes.extend_from_slice(value);
            bytes
        };
        let mut newer = envelope().encode_to_vec();
        newer.extend(unknown_field(50, b"new"));
        let error = ValueFormat::Json.render(&Bytes::from(newer)).unwrap_err();
        assert!(error.holds_the_stream(), "{error}");
        assert!(error.to_string().contains("Upgrade the relay"), "{error}");
        // An enum number without a name here.
        let mut unknown_reason = envelope();
        if let Some(Event::AssignmentEnded(ended)) = unknown_reason.event.as_mut() {
            ended.reason = 99;
        }
        let error = ValueFormat::Json
            .render(&Bytes::from(unknown_reason.encode_to_vec()))
            .unwrap_err();
        assert!(error.holds_the_stream(), "{error}");
        // A new event type: a oneof case (field 40) this relay does not know.
        let mut new_event = envelope();
        new_event.event = None;
        let mut bytes = new_event.encode_to_vec();
        bytes.extend(unknown_field(40, b""));
        assert!(
            ValueFormat::Json
                .render(&Bytes::from(bytes))
                .unwrap_err()
                .holds_the_stream()
        );
        // Protobuf passes the bytes on as they are: nothing to lose.
        let stored = Bytes::from(unknown_field(50, b"n"));
        assert_eq!(ValueFormat::Protobuf.render(&stored).unwrap(), stored);
        // Garbage is not an envelope: parked, as before.
        assert!(
            !ValueFormat::Json
                .render(&Bytes::from_static(b"{not protobuf"))
                .unwrap_err()
                .holds_the_stream()
        );
    }

    #[test]
    fn formats_are_set_for_envelope_topics_only() {
        let formats = |key: &str| BTreeMap::from([(key.to_owned(), ValueFormat::Json)]);
        validate(&formats("assignment")).unwrap();
        let error = validate(&formats("asignment")).unwrap_err().to_string();
        assert!(error.contains("value_formats = \"asignment\""), "{error}");
        assert!(validate(&formats("digest")).is_err());
        validate(&formats("reassignment")).unwrap();
        assert_eq!(ValueFormat::parse(" JSON "), Some(ValueFormat::Json));
        assert_eq!(ValueFormat::parse("avro"), None);
    }

    #[test]
    fn a_framed_value_is_the_stored_bytes_behind_six_bytes_and_never_without_an_id() {
        let stored = Bytes::from(envelope().encode_to_vec());
        let framed = ValueFormat::ConfluentProtobuf {
            schema_id: Some(258),
        }
        .render(&stored)
        .unwrap();
        assert_eq!(&framed[..6], b"\x00\x00\x00\x01\x02\x00");
        assert_eq!(&framed[6..], stored.as_ref());
        let parsed = crate::confluent_wire::Framed::parse(&framed).unwrap();
        assert_eq!(Envelope::decode(parsed.payload).unwrap(), envelope());
        let error = ValueFormat::parse("confluent_protobuf")
            .unwrap()
            .render(&stored)
            .unwrap_err();
        assert_eq!(error, RenderError::Unregistered);
        assert!(error.holds_the_stream(), "{error}");
        assert_eq!(
            ValueFormat::try_from("avro".to_owned()).unwrap_err(),
            "unknown value format `avro`, expected one of `protobuf`, `json`, `confluent_protobuf`"
        );
    }
}
