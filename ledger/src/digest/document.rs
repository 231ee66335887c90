//! The JSON documents of the digests, as typed values: a signed digest, as published on
//! Kafka and served over HTTP, and the inclusion proof of events against one. JSON is
//! written and read only at the edges (the outbox row, the HTTP handlers, the CLI reading a
//! file); inside, these types travel.
//!
//! Fields are declared in the order they are written: by name. The documents were first
//! built as JSON objects, whose keys serialize sorted, and the bytes stay the same
//! (`samples/` holds documents of that first version; the tests below read and write them
//! back byte for byte).
//!
//! A digest document's `format` is `ra-ledger digest v2` since its number is signed (issue
//! 35, item 5), `ra-ledger digest v1` before; both read, and each is written back as it was.
//!
//! Hex fields are [`Hex`] (a fixed number of bytes) or [`HexBytes`]: reading one that is not
//! lowercase or uppercase hex, or not of its length, is an error naming the value, never a
//! default.
//!
//! # Proof document (`ra-ledger proof v1`)
//!
//! - `digest`: the signed digest ([`DigestDocument`]); `public_key_pem`: the key that
//!   signed it, for convenience only (a verifier must use a key it got elsewhere).
//! - `streams`: one entry per proven stream: `stream`, `events` (consecutive versions up to
//!   the head the digest sealed, each with every field its hash covers, see
//!   [`crate::store::event_hash`]), and the `index` and Merkle `path` of the head's leaf.
//! - An event's proof (`GET /v1/events/{id}/proof`) has `event_id` and one stream, from
//!   that event on.
//! - A proven audit answer (`registered-agent?at=T&proof=true`) has `question` (business,
//!   jurisdiction, `at_micros`, `known_at_micros`), `answer` (the API's answer) and two
//!   whole streams from version 1: the business's assignments in the jurisdiction and the
//!   answer's contact. Folding their events recorded by `known_at`
//!   ([`crate::queries::Fold`]) gives the answer.
//! - `log` (issue 47, [`LogProof`]): `checkpoint`, the signed note the digest sealed with
//!   every cosignature the ledger holds; `heads`, per stream in the order of `streams`, the
//!   `index` and `path` of its head event's leaf (`SHA-256(0x00 || hash)`) in that
//!   checkpoint's tree; `consistency`, per earlier size asked for (`consistent_with`), the
//!   RFC 6962 consistency proof (`old_size`, `proof`) to the checkpoint's size. Hashes in
//!   hex, as everywhere in the document.
//!   Since issue 56 each head also has `positions` (the log position of each carried event),
//!   each consistency entry the `index_leaf` ending that size and its `index_path`, and
//!   `index` ([`LogIndex`]) the index leaf ending the checkpoint, its path, and each named
//!   stream's entry or absence ([`super::index::IndexProof`]).
//! - The answer of `registered-agent?...&proof=true` is the answer's fields and this proof
//!   under `proof`: both verifiers read it as saved (the outer fields must equal
//!   `proof.answer`; no fields beside `proof` stand for an answer of `null`, "no RA").

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

use super::{SignedDigest, Statement};

/// The `format` of a digest document sealed now: its number is signed.
pub const DIGEST_FORMAT: &str = "ra-ledger digest v2";
/// The `format` of a digest sealed before its number was signed (issue 35, item 5).
pub const DIGEST_FORMAT_V1: &str = "ra-ledger digest v1";
/// The `format` of a proof document.
pub const PROOF_FORMAT: &str = "ra-ledger proof v1";

pub use super::hexed::{Hex, HexBytes, HexHash, HexSignature};

/// The `format` of a digest document, which says which signed message its signature is of
/// ([`DIGEST_FORMAT`] or [`DIGEST_FORMAT_V1`]); reading another text is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DigestFormat {
    /// Version 1: the number is not signed.
    V1,
    /// Version 2: the number is signed.
    #[default]
    V2,
}

impl DigestFormat {
    /// The format of a statement's message.
    pub fn of(statement: &Statement) -> Self {
        if statement.seq.is_some() {
            Self::V2
        } else {
            Self::V1
        }
    }

    fn text(self) -> &'static str {
        match self {
            Self::V1 => DIGEST_FORMAT_V1,
            Self::V2 => DIGEST_FORMAT,
        }
    }
}

impl Serialize for DigestFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text())
    }
}

impl<'de> Deserialize<'de> for DigestFormat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        [Self::V2, Self::V1]
            .into_iter()
            .find(|format| format.text() == text)
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "not an {DIGEST_FORMAT} (or {DIGEST_FORMAT_V1}) document: {text:?}"
                ))
            })
    }
}

/// The `format` of a proof document, [`PROOF_FORMAT`]; reading another text is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProofFormat;

impl Serialize for ProofFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(PROOF_FORMAT)
    }
}

impl<'de> Deserialize<'de> for ProofFormat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == PROOF_FORMAT {
            Ok(Self)
        } else {
            Err(de::Error::custom(format!(
                "not an {PROOF_FORMAT} document: {text:?}"
            )))
        }
    }
}

/// A digest document: what the relay publishes on `<prefix>digest`, what
/// `GET /v1/digests/latest` serves and what every proof carries. The fields of the signed
/// message, the signature, and for the reader's convenience the time in words, the digest's
/// hash and the public key (none of which a verifier trusts: see [`SignedFields`]).
/// `tests/verify_digest.py` reads it as its `digest` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestDocument {
    /// The checkpoint of the transparency log this digest sealed: a C2SP signed note by
    /// the same key ([`crate::tlog::note`]). Absent in digests sealed before issue 47.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Events in the sealed streams.
    pub event_count: u64,
    /// [`DIGEST_FORMAT`], or [`DIGEST_FORMAT_V1`] for a digest sealed before its number
    /// was signed.
    pub format: DigestFormat,
    /// `SHA-256(signed message || signature)`, what the next digest chains to.
    pub hash: HexHash,
    /// The previous digest's hash, zeros for the first.
    pub previous: HexHash,
    /// The signing key, SubjectPublicKeyInfo PEM.
    pub public_key_pem: String,
    /// The Merkle root.
    pub root: HexHash,
    /// The digest's number, 1 for the first: signed in version 2, a label in version 1.
    pub seq: i64,
    /// Ed25519 over the signed message.
    pub signature: HexSignature,
    /// Streams in the tree.
    pub stream_count: u64,
    /// `time_micros` in RFC 3339, `null` when out of chrono's range.
    pub time: Option<String>,
    /// Microseconds since the Unix epoch.
    pub time_micros: i64,
}

impl DigestDocument {
    /// The document of digest `seq`, signed by the key of `public_key_pem`. A version-2
    /// digest's document carries the number it signs.
    pub fn new(seq: i64, digest: &SignedDigest, public_key_pem: String) -> Self {
        let statement = &digest.statement;
        debug_assert!(statement.seq.is_none_or(|signed| signed == seq));
        Self {
            checkpoint: None,
            event_count: statement.event_count,
            format: DigestFormat::of(statement),
            hash: Hex(digest.hash()),
            previous: Hex(statement.previous),
            public_key_pem,
            root: Hex(statement.root),
            seq,
            signature: Hex(digest.signature),
            stream_count: statement.stream_count,
            time: DateTime::from_timestamp_micros(statement.time_micros)
                .map(|time| time.to_rfc3339_opts(SecondsFormat::Micros, true)),
            time_micros: statement.time_micros,
        }
    }

    /// The signed digest it states.
    pub fn signed(&self) -> SignedDigest {
        SignedFields {
            seq: (self.format == DigestFormat::V2).then_some(self.seq),
            event_count: self.event_count,
            previous: self.previous,
            root: self.root,
            signature: self.signature,
            stream_count: self.stream_count,
            time_micros: self.time_micros,
        }
        .into()
    }
}

/// The signed fields of a digest document: all a verifier reads of one. The others are
/// derived from these or are the key, which a verifier must get elsewhere; they are not
/// read, so a document without them is checked the same. `format` says which message the
/// signature is of; a document without it is read as version 1, whose message has no
/// number (a version-2 signature then fails, as it should: its number is not there).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "DocumentFields")]
pub struct SignedFields {
    /// The digest's number, for a version-2 digest, which signs it; `None` in version 1.
    pub seq: Option<i64>,
    /// Events in the sealed streams.
    pub event_count: u64,
    /// The previous digest's hash.
    pub previous: HexHash,
    /// The Merkle root.
    pub root: HexHash,
    /// Ed25519 over the signed message.
    pub signature: HexSignature,
    /// Streams in the tree.
    pub stream_count: u64,
    /// Microseconds since the Unix epoch.
    pub time_micros: i64,
}

/// The fields of a digest document a verifier reads, as they stand in it.
#[derive(Deserialize)]
struct DocumentFields {
    #[serde(default)]
    format: Option<DigestFormat>,
    #[serde(default)]
    seq: Option<i64>,
    event_count: u64,
    previous: HexHash,
    root: HexHash,
    signature: HexSignature,
    stream_count: u64,
    time_micros: i64,
}

impl TryFrom<DocumentFields> for SignedFields {
    type Error = String;

    fn try_from(fields: DocumentFields) -> Result<Self, String> {
        let seq = match fields.format.unwrap_or(DigestFormat::V1) {
            DigestFormat::V1 => None,
            DigestFormat::V2 => Some(fields.seq.ok_or_else(|| {
                format!("seq: missing; an {DIGEST_FORMAT} document signs its number")
            })?),
        };
        Ok(Self {
            seq,
            event_count: fields.event_count,
            previous: fields.previous,
            root: fields.root,
            signature: fields.signature,
            stream_count: fields.stream_count,
            time_micros: fields.time_micros,
        })
    }
}

impl From<SignedFields> for SignedDigest {
    fn from(fields: SignedFields) -> Self {
        Self {
            statement: Statement {
                seq: fields.seq,
                root: fields.root.0,
                time_micros: fields.time_micros,
                stream_count: fields.stream_count,
                event_count: fields.event_count,
                previous: fields.previous.0,
            },
            signature: fields.signature.0,
        }
    }
}

/// An inclusion proof (see the [module](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProofDocument {
    /// For an audit answer: the API's answer, as JSON. A verifier compares it with the
    /// answer the proven events fold to, field for field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
    /// The digest that seals the streams.
    pub digest: DigestDocument,
    /// For an event's proof: the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<Uuid>,
    /// [`PROOF_FORMAT`].
    pub format: ProofFormat,
    /// The digest's key, for convenience only.
    pub public_key_pem: String,
    /// The transparency log's part (issue 47): the digest's checkpoint with its witnesses'
    /// cosignatures, each proven stream's head event in the log, and consistency proofs
    /// from the earlier sizes asked for. Absent when the digest sealed no checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogProof>,
    /// For an audit answer: the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
    /// The proven streams.
    pub streams: Vec<StreamProof>,
}

/// A proof's part in the transparency log ([`crate::tlog`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogProof {
    /// The checkpoint the proof's digest sealed, a C2SP signed note: the log's signature
    /// (the digest key, named by the origin) and every witness cosignature the ledger holds.
    pub checkpoint: String,
    /// Consistency proofs from earlier sizes (`consistent_with`) to the checkpoint's.
    pub consistency: Vec<ConsistencyProof>,
    /// One per proven stream, in the order of `streams`: its head event's place in the log.
    pub heads: Vec<LogInclusion>,
    /// The index leaf that ends the checkpoint, its path, and each stream's entry or
    /// absence (issue 56, item 2). Absent in proofs against digests sealed before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<LogIndex>,
}

/// A proof's part in the index ([`super::index`]) of its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogIndex {
    /// The index leaf's 80 bytes: the checkpoint's last leaf.
    pub leaf: HexBytes,
    /// Its RFC 6962 inclusion path at `size - 1` in the checkpoint's tree.
    pub path: Vec<HexHash>,
    /// One per proven stream, in the order of `streams`, then, for an answer whose
    /// assignment stream is not carried, that stream's absence.
    pub streams: Vec<super::index::IndexProof>,
}

/// An event's leaf in the log: `SHA-256(0x00 || event hash)` at `index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogInclusion {
    /// The leaf's index.
    pub index: u64,
    /// Its RFC 6962 inclusion path in the checkpoint's tree.
    pub path: Vec<HexHash>,
    /// The log position of each of the stream's events the proof carries, in order (the
    /// last is `index`): what the index entry's positions chain covers, and what shows an
    /// event sealed after a checkpoint the auditor kept.
    #[serde(default)]
    pub positions: Vec<u64>,
}

/// RFC 6962 `PROOF(old_size, D[size])`, to the checkpoint's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistencyProof {
    /// The earlier size.
    pub old_size: u64,
    /// The hashes.
    pub proof: Vec<HexHash>,
    /// The index leaf at `old_size - 1`, which ends the saved checkpoint (its digest's
    /// time bounds the events recorded before it), when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_leaf: Option<HexBytes>,
    /// Its RFC 6962 inclusion path in the proof's checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_path: Option<Vec<HexHash>>,
}

impl ProofDocument {
    /// The proof of `streams` against `digest`, of no event or question yet.
    pub fn new(digest: DigestDocument, streams: Vec<StreamProof>) -> Self {
        Self {
            answer: None,
            public_key_pem: digest.public_key_pem.clone(),
            digest,
            event_id: None,
            format: ProofFormat,
            log: None,
            question: None,
            streams,
        }
    }
}

/// One proven stream: its events up to the sealed head, and the head leaf's place in the
/// tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamProof {
    /// Consecutive events, the last one the head the digest sealed.
    pub events: Vec<EventRecord>,
    /// The head leaf's index in the tree.
    pub index: u64,
    /// The leaf's inclusion path, RFC 9162.
    pub path: Vec<HexHash>,
    /// The stream.
    pub stream: String,
}

/// An event with every field its hash covers ([`crate::store::event_hash`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Who wrote it.
    pub actor: String,
    /// The event that caused it.
    pub causation_id: Option<Uuid>,
    /// The request it belongs to.
    pub correlation_id: Uuid,
    /// Business time, microseconds since the Unix epoch.
    #[serde(
        rename = "effective_at_micros",
        with = "chrono::serde::ts_microseconds"
    )]
    pub effective_at: DateTime<Utc>,
    /// The event.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// Its hash.
    pub hash: HexHash,
    /// The protobuf envelope.
    pub payload: HexBytes,
    /// The hash of the stream's event before it; none for version 1.
    pub prev_hash: Option<HexHash>,
    /// Transaction time, microseconds since the Unix epoch.
    #[serde(rename = "recorded_at_micros", with = "chrono::serde::ts_microseconds")]
    pub recorded_at: DateTime<Utc>,
    /// The payload's schema version.
    pub schema_version: i32,
    /// Its stream.
    pub stream: String,
    /// Its version in the stream.
    pub stream_version: i64,
}

/// The question a proven audit answer answers: who was the RA of `business_id` in
/// `jurisdiction` at `at`, as known at `known_at`. Both instants are written in
/// microseconds, which a verifier reads, and in RFC 3339, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// Business time, RFC 3339.
    pub at: String,
    /// Business time, microseconds since the Unix epoch.
    pub at_micros: i64,
    /// The business.
    pub business_id: Uuid,
    /// The jurisdiction's code.
    pub jurisdiction: String,
    /// Transaction time, RFC 3339.
    pub known_at: String,
    /// Transaction time, microseconds since the Unix epoch.
    pub known_at_micros: i64,
}

impl Question {
    /// The question about `business_id` in `jurisdiction` at `at`, as known at `known_at`.
    pub fn new(
        business_id: Uuid,
        jurisdiction: &str,
        at: DateTime<Utc>,
        known_at: DateTime<Utc>,
    ) -> Self {
        Self {
            at: at.to_rfc3339_opts(SecondsFormat::Micros, true),
            at_micros: at.timestamp_micros(),
            business_id,
            jurisdiction: jurisdiction.to_owned(),
            known_at: known_at.to_rfc3339_opts(SecondsFormat::Micros, true),
            known_at_micros: known_at.timestamp_micros(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = include_str!("samples/digest.json");
    const EVENT_PROOF: &str = include_str!("samples/event-proof.json");
    const ANSWER_PROOF: &str = include_str!("samples/answer-proof.json");

    #[test]
    fn documents_of_the_first_version_read_and_write_back_byte_for_byte() {
        let digest: DigestDocument = serde_json::from_str(DIGEST).expect("the sample digest");
        assert_eq!(serde_json::to_string(&digest).expect("writes"), DIGEST);
        // Written from the signed digest, the derived fields come out the same.
        let again =
            DigestDocument::new(digest.seq, &digest.signed(), digest.public_key_pem.clone());
        assert_eq!(again, digest);
        for sample in [EVENT_PROOF, ANSWER_PROOF] {
            let proof: ProofDocument = serde_json::from_str(sample).expect("a sample proof");
            assert_eq!(serde_json::to_string(&proof).expect("writes"), sample);
            assert_eq!(proof.digest, digest);
        }
    }

    #[test]
    fn a_hash_or_signature_of_another_length_or_not_hex_is_refused_naming_it() {
        let replaced = |field: &str, value: &str| {
            let mut document: serde_json::Value = serde_json::from_str(DIGEST).expect("JSON");
            document[field] = serde_json::json!(value);
            serde_json::from_value::<DigestDocument>(document)
                .expect_err(value)
                .to_string()
        };
        let short = "ab".repeat(31);
        assert_eq!(
            replaced("root", &short),
            format!("not 32 bytes: {short:?} is 31 bytes")
        );
        let long = "cd".repeat(65);
        assert_eq!(
            replaced("signature", &long),
            format!("not 64 bytes: {long:?} is 65 bytes")
        );
        assert_eq!(replaced("previous", "zz"), "not hex: \"zz\"");
        // A multi-byte character where a hex pair should be: refused, no panic.
        assert_eq!(replaced("hash", "aé"), "not hex: \"aé\"");
        assert!(replaced("format", "ra-ledger digest v3").contains("not an ra-ledger digest v2"));
    }
}
