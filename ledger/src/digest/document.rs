//! The JSON documents of the digests: a signed digest, as published on Kafka and served
//! over HTTP, and the inclusion proof of events against one.
//!
//! # Proof document (`ra-ledger proof v1`)
//!
//! - `digest`: the signed digest ([`document`]); `public_key_pem`: the key that
//!   signed it, for convenience only (a verifier must use a key it got elsewhere).
//! - `streams`: one entry per proven stream: `stream`, `events` (consecutive versions up to
//!   the head the digest sealed, each with every field its hash covers, see
//!   [`crate::store::event_hash`]), and the `index` and Merkle `path` of the head's leaf.
//! - An event's proof (`GET /v1/events/{id}/proof`) has `event_id` and one stream, from
//!   that event on.
//! - A proven audit answer (`registered-agent?at=T&proof=true`) has `question` (business,
//!   jurisdiction, `at_micros`, `known_at_micros`), `answer` (the API's answer) and two whole
//!   streams from version 1: the business's assignments in the jurisdiction and the
//!   answer's contact. Folding their events recorded by `known_at` ([`crate::queries::Fold`]) gives the
//!   answer.

use super::SignedDigest;

/// The JSON document of a digest, as published on Kafka and served over HTTP: the fields
/// of the signed message in hex and numbers, the signature, the digest's hash and the
/// public key. `tests/verify_digest.py` reads it as its `digest` object.
pub fn document(seq: i64, digest: &SignedDigest, public_key_pem: &str) -> serde_json::Value {
    let statement = &digest.statement;
    serde_json::json!({
        "format": "ra-ledger digest v1",
        "seq": seq,
        "root": hex(&statement.root),
        "time_micros": statement.time_micros,
        "time": chrono::DateTime::from_timestamp_micros(statement.time_micros)
            .map(|time| time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        "stream_count": statement.stream_count,
        "event_count": statement.event_count,
        "previous": hex(&statement.previous),
        "signature": hex(&digest.signature),
        "hash": hex(&digest.hash()),
        "public_key_pem": public_key_pem,
    })
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes from hex; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
