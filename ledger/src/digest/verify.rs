//! Checking an inclusion proof offline, with the document and the public key alone
//! (`ledger proof verify`; the document: [`super::document`]).
//!
//! To check one: recompute each event's hash from its fields and the previous hash, check
//! each chain reaches its sealed head, each head's leaf reaches the root through its path,
//! the signature, and for an answer, that `known_at` is not after the digest's time (the
//! digest cannot vouch for what was recorded later) and the fold (`ledger proof verify`;
//! `tests/verify_digest.py` checks all but the fold, and says so).

use chrono::DateTime;
use prost::Message as _;
use serde_json::Value;
use uuid::Uuid;

use super::merkle;
use crate::domain::{Jurisdiction, assignment_stream};
use crate::queries::Fold;

/// Checks a proof document offline against `public_key`: every event's hash from its
/// fields and the previous hash, each chain up to its sealed head, each head's leaf through
/// its Merkle path to the root, the signature, and for an audit answer, that the proven
/// events fold to it. The error names the first thing that does not hold.
pub fn verify(
    document: &Value,
    public_key: &ed25519_dalek::VerifyingKey,
) -> Result<VerifiedProof, String> {
    let signed = super::SignedDigest::from_document(&document["digest"])?;
    if !signed.verify(public_key) {
        return Err("the digest's signature does not verify with the public key".into());
    }
    let entries = document["streams"]
        .as_array()
        .filter(|streams| !streams.is_empty())
        .ok_or("the proof has no streams")?;
    let mut streams = Vec::with_capacity(entries.len());
    let mut envelopes = Vec::new();
    for entry in entries {
        let (proven, events) = verify_stream(entry, &signed.statement)?;
        streams.push(proven);
        envelopes.extend(events);
    }
    if !document["event_id"].is_null()
        && entries[0]["events"][0]["event_id"] != document["event_id"]
    {
        return Err("the proof's first event is not the event it proves".into());
    }
    let answer = match &document["question"] {
        Value::Null => None,
        question => Some(verify_answer(
            question,
            &document["answer"],
            &streams,
            &envelopes,
            signed.statement.time_micros,
        )?),
    };
    Ok(VerifiedProof {
        streams,
        digest_time_micros: signed.statement.time_micros,
        answer,
    })
}

/// One stream's chain and inclusion; returns what it proved and its events' envelopes.
fn verify_stream(
    entry: &Value,
    statement: &super::Statement,
) -> Result<(ProvenStream, Vec<ra_ledger_proto::v1::Envelope>), String> {
    let stream = entry["stream"]
        .as_str()
        .ok_or("a proven stream has no name")?;
    let events = entry["events"]
        .as_array()
        .filter(|events| !events.is_empty())
        .ok_or_else(|| format!("the proof of stream {stream} has no events"))?;
    let mut previous: Option<merkle::Hash> = None;
    let mut last_version = None;
    let mut envelopes = Vec::with_capacity(events.len());
    for event in events {
        let fields = EventFields::read(event)?;
        if fields.stream != stream {
            return Err(format!(
                "event {} is of stream {}, not {stream}",
                fields.event_id, fields.stream
            ));
        }
        if let Some(version) = last_version {
            if fields.stream_version != version + 1 {
                return Err(format!(
                    "event {} does not follow version {version} of {stream}",
                    fields.event_id
                ));
            }
            if fields.prev_hash.as_deref() != previous.as_ref().map(|hash| &hash[..]) {
                return Err(format!(
                    "event {} does not chain to the event before it",
                    fields.event_id
                ));
            }
        } else if fields.stream_version == 1 && fields.prev_hash.is_some() {
            return Err(format!(
                "event {} is version 1 of {stream} but chains to an earlier one",
                fields.event_id
            ));
        }
        let computed = fields.hash();
        if computed[..] != fields.hash[..] {
            return Err(format!(
                "event {} (version {}) does not hash to its recorded hash",
                fields.event_id, fields.stream_version
            ));
        }
        envelopes.push(fields.envelope()?);
        previous = Some(computed);
        last_version = Some(fields.stream_version);
    }
    let (first, version) = (
        events[0]["stream_version"].as_i64().unwrap_or_default(),
        last_version.expect("at least one event"),
    );
    let leaf = super::Head {
        stream: stream.to_owned(),
        version: version as u64,
        hash: previous.expect("at least one event"),
    };
    let path = entry["path"]
        .as_array()
        .ok_or_else(|| format!("the path of stream {stream} is missing"))?
        .iter()
        .map(|hash| hash_field(hash, "path"))
        .collect::<Result<Vec<_>, _>>()?;
    let index = entry["index"]
        .as_u64()
        .ok_or_else(|| format!("the index of stream {stream} is missing"))?;
    if !merkle::verify_inclusion(
        &leaf.leaf_hash(),
        index,
        statement.stream_count,
        &path,
        &statement.root,
    ) {
        return Err(format!(
            "the inclusion path of stream {stream} does not lead to the root"
        ));
    }
    Ok((
        ProvenStream {
            stream: stream.to_owned(),
            first_version: first,
            sealed_version: version,
        },
        envelopes,
    ))
}

/// That the proven events, whole streams from version 1, fold to the answer.
fn verify_answer(
    question: &Value,
    answer: &Value,
    streams: &[ProvenStream],
    envelopes: &[ra_ledger_proto::v1::Envelope],
    digest_time_micros: i64,
) -> Result<String, String> {
    let business_id: Uuid = question["business_id"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .ok_or("question.business_id is not a UUID")?;
    let jurisdiction = question["jurisdiction"]
        .as_str()
        .and_then(|code| Jurisdiction::parse("question.jurisdiction", code).ok())
        .ok_or("question.jurisdiction is not a jurisdiction")?;
    let instant = |name: &str| {
        question[name]
            .as_i64()
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(|| format!("question.{name} is missing"))
    };
    let (at, known_at) = (instant("at_micros")?, instant("known_at_micros")?);
    if known_at.timestamp_micros() > digest_time_micros {
        let sealed = DateTime::from_timestamp_micros(digest_time_micros)
            .map_or_else(|| digest_time_micros.to_string(), |time| time.to_string());
        return Err(format!(
            "the answer is not proven for known_at {known_at}: the digest is of {sealed}, and \
             proves what was recorded by then, not that nothing else was recorded by known_at"
        ));
    }
    let registration = assignment_stream(business_id, jurisdiction);
    if !streams.iter().any(|proven| proven.stream == registration) {
        return Err(format!(
            "the proof does not prove stream {registration}, whose events the answer folds"
        ));
    }
    if let Some(partial) = streams.iter().find(|proven| proven.first_version != 1) {
        return Err(format!(
            "the proof of stream {} starts at version {}: an answer needs whole streams",
            partial.stream, partial.first_version
        ));
    }
    // Only this registration's assignments count, whatever other streams came along.
    let relevant: Vec<_> = envelopes
        .iter()
        .filter(|envelope| {
            envelope.stream == registration || !envelope.stream.starts_with("assignment-")
        })
        .cloned()
        .collect();
    let folded = Fold::new(&relevant, known_at)?.registered_agent_at(at);
    let folded = serde_json::to_value(&folded).expect("an answer always serializes");
    if &folded != answer {
        return Err(format!(
            "the proven events fold to another answer than the one given: {folded}"
        ));
    }
    Ok(format!(
        "the RA of business {business_id} in {} at {at}, as known at {known_at}, is contact {}",
        jurisdiction.code(),
        folded["contact"]["contact_id"].as_str().unwrap_or("(none)")
    ))
}

/// One stream a proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenStream {
    /// The stream.
    pub stream: String,
    /// Its first proven event's version.
    pub first_version: i64,
    /// The head version the digest sealed.
    pub sealed_version: i64,
}

/// What a verified proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedProof {
    /// The proven streams.
    pub streams: Vec<ProvenStream>,
    /// The digest's time.
    pub digest_time_micros: i64,
    /// For an audit answer: the answer the proven events fold to, in words.
    pub answer: Option<String>,
}

struct EventFields {
    event_id: Uuid,
    stream: String,
    stream_version: i64,
    event_type: String,
    schema_version: i32,
    payload: Vec<u8>,
    recorded_at: chrono::DateTime<chrono::Utc>,
    effective_at: chrono::DateTime<chrono::Utc>,
    actor: String,
    correlation_id: Uuid,
    causation_id: Option<Uuid>,
    prev_hash: Option<Vec<u8>>,
    hash: Vec<u8>,
}

impl EventFields {
    fn read(event: &Value) -> Result<Self, String> {
        let text = |name: &str| {
            event[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("event field {name} is missing"))
        };
        let uuid = |name: &str| -> Result<Uuid, String> {
            text(name)?
                .parse()
                .map_err(|_| format!("event field {name} is not a UUID"))
        };
        let time = |name: &str| -> Result<chrono::DateTime<chrono::Utc>, String> {
            event[name]
                .as_i64()
                .and_then(chrono::DateTime::from_timestamp_micros)
                .ok_or_else(|| format!("event field {name} is missing"))
        };
        Ok(Self {
            event_id: uuid("event_id")?,
            stream: text("stream")?,
            stream_version: event["stream_version"]
                .as_i64()
                .ok_or("event field stream_version is missing")?,
            event_type: text("event_type")?,
            schema_version: event["schema_version"]
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or("event field schema_version is missing")?,
            payload: bytes_field(&event["payload"], "payload")?,
            recorded_at: time("recorded_at_micros")?,
            effective_at: time("effective_at_micros")?,
            actor: text("actor")?,
            correlation_id: uuid("correlation_id")?,
            causation_id: match &event["causation_id"] {
                Value::Null => None,
                _ => Some(uuid("causation_id")?),
            },
            prev_hash: match &event["prev_hash"] {
                Value::Null => None,
                other => Some(bytes_field(other, "prev_hash")?),
            },
            hash: bytes_field(&event["hash"], "hash")?,
        })
    }

    /// The payload, which must agree with the row's fields the fold reads.
    fn envelope(&self) -> Result<ra_ledger_proto::v1::Envelope, String> {
        let envelope = ra_ledger_proto::v1::Envelope::decode(&self.payload[..]).map_err(|_| {
            format!(
                "event {}: the payload is not an event envelope",
                self.event_id
            )
        })?;
        let agrees = envelope.event_id == self.event_id.to_string()
            && envelope.stream == self.stream
            && envelope.stream_version == self.stream_version
            && envelope.recorded_at_micros == self.recorded_at.timestamp_micros()
            && envelope.effective_at_micros == self.effective_at.timestamp_micros();
        if !agrees {
            return Err(format!(
                "event {}: the payload disagrees with the event's fields",
                self.event_id
            ));
        }
        Ok(envelope)
    }

    fn hash(&self) -> merkle::Hash {
        crate::store::event_hash(
            self.prev_hash.as_deref(),
            &crate::store::EventRow {
                event_id: self.event_id,
                stream: &self.stream,
                stream_version: self.stream_version,
                event_type: &self.event_type,
                schema_version: self.schema_version,
                payload: &self.payload,
                recorded_at: self.recorded_at,
                effective_at: self.effective_at,
                actor: &self.actor,
                correlation_id: self.correlation_id,
                causation_id: self.causation_id,
            },
        )
    }
}

fn bytes_field(value: &Value, name: &str) -> Result<Vec<u8>, String> {
    let text = value.as_str().ok_or_else(|| format!("{name} is missing"))?;
    super::unhex(text).ok_or_else(|| format!("{name} is not hex"))
}

fn hash_field(value: &Value, name: &str) -> Result<merkle::Hash, String> {
    bytes_field(value, name)?
        .try_into()
        .map_err(|_| format!("{name} is not 32 bytes"))
}
