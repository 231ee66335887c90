//! Checking an inclusion proof offline, with the document and the public key alone
//! (`ledger proof verify`; the document: [`super::document`]).
//!
//! To check one: recompute each event's hash from its fields and the previous hash, check
//! each chain reaches its sealed head, each head's leaf reaches the root through its path,
//! the signature, and for an answer, what [`super::answer`] checks: `known_at` not after the
//! digest's time (the digest cannot vouch for what was recorded later), exactly the streams
//! the question and the answer name, and the fold. `tests/verify_digest.py` checks the same,
//! written apart from this code; both are held to one list of forged proofs in the tests.

use prost::Message as _;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

pub use super::refused::{AskedQuestion, ProvenStream, Refused};

use super::document::{EventRecord, LogProof, SignedFields, StreamProof};
use super::{Head, SignedDigest, Statement, merkle};
use crate::tlog::note::{Checkpoint, NoteKey, SignedNote};
use crate::tlog::tree;

/// A proof as the verifier reads it: the fields it checks and nothing else. The formats,
/// the keys and the digest's derived fields are not read (a verifier trusts none of them),
/// so a document without them is checked the same; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct ClaimedProof {
    /// The digest's signed fields.
    pub digest: SignedFields,
    /// The proven streams.
    pub streams: Vec<StreamProof>,
    /// For an event's proof: the event, which must be the first one proven.
    #[serde(default)]
    pub event_id: Option<Uuid>,
    /// For an audit answer: the question.
    #[serde(default)]
    pub question: Option<AskedQuestion>,
    /// For an audit answer: the answer, compared as JSON with the one the events fold to
    /// (`null` when absent, which only a question of no RA folds to).
    #[serde(default)]
    pub answer: Value,
    /// The transparency log's part, when the digest sealed a checkpoint.
    #[serde(default)]
    pub log: Option<LogProof>,
}

impl ClaimedProof {
    /// Reads a proof document, or the answer of `registered-agent?...&proof=true` as saved
    /// (the answer's fields and the proof under `proof`, whose `answer` they must equal);
    /// the error names the field and the value that do not read.
    pub fn from_json(document: &Value) -> Result<Self, Refused> {
        let document = match document.get("proof") {
            Some(proof) if document.get("digest").is_none() => {
                let mut outer = document.clone();
                if let Some(fields) = outer.as_object_mut() {
                    fields.remove("proof");
                }
                // No field beside the proof is the answer `null`: "no RA", proven.
                if outer.as_object().is_some_and(|fields| fields.is_empty()) {
                    outer = Value::Null;
                }
                if proof.get("answer").unwrap_or(&Value::Null) != &outer {
                    return Err(Refused::AnswerBesideProof);
                }
                proof
            }
            _ => document,
        };
        serde_path_to_error::deserialize(document).map_err(|error| Refused::Malformed {
            field: error.path().to_string(),
            problem: error.inner().to_string(),
        })
    }
}

/// Checks a proof offline against `public_key`: every event's hash from its fields and the
/// previous hash, each chain up to its sealed head, each head's leaf through its Merkle
/// path to the root, the signature, and for an audit answer, that the proven events fold
/// to it. The error names the first thing that does not hold.
pub fn verify(
    proof: &ClaimedProof,
    public_key: &ed25519_dalek::VerifyingKey,
) -> Result<VerifiedProof, Refused> {
    let signed = SignedDigest::from(proof.digest.clone());
    if !signed.verify(public_key) {
        return Err(Refused::Signature);
    }
    // The index part, when the digest sealed a checkpoint: the heads are the newest, and
    // the streams it shows absent.
    let indexed = match &proof.log {
        Some(log) => {
            let (_, checkpoint) = read_checkpoint("log.checkpoint", &log.checkpoint, public_key)?;
            let statement = &signed.statement;
            let streams = &proof.streams;
            Some(super::indexed::verify_index(
                streams,
                log,
                &checkpoint,
                statement,
            )?)
        }
        None => None,
    };
    // Only an answer may carry no stream: "no RA" with the assignment stream shown absent.
    if proof.streams.is_empty() && proof.question.is_none() {
        return Err(Refused::NoStreams);
    }
    let mut streams = Vec::with_capacity(proof.streams.len());
    let mut envelopes = Vec::new();
    for entry in &proof.streams {
        let (proven, events) = verify_stream(entry, &signed.statement)?;
        streams.push(proven);
        envelopes.extend(events);
    }
    if proof
        .event_id
        .is_some_and(|event_id| proof.streams[0].events[0].event_id != event_id)
    {
        return Err(Refused::NotTheEvent);
    }
    let answer = match &proof.question {
        None => None,
        Some(question) => Some(super::answer::verify_answer(
            question,
            &proof.answer,
            &streams,
            &envelopes,
            signed.statement.time_micros,
            indexed
                .as_ref()
                .map_or(&[][..], |indexed| &indexed.absent[..]),
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
    entry: &StreamProof,
    statement: &Statement,
) -> Result<(ProvenStream, Vec<ra_ledger_proto::v1::Envelope>), Refused> {
    let stream = &entry.stream;
    let (Some(first), Some(head)) = (entry.events.first(), entry.events.last()) else {
        return Err(Refused::NoEvents(stream.clone()));
    };
    let mut previous: Option<&EventRecord> = None;
    let mut envelopes = Vec::with_capacity(entry.events.len());
    for event in &entry.events {
        verify_link(event, previous, stream)?;
        envelopes.push(envelope(event)?);
        previous = Some(event);
    }
    let leaf = Head {
        stream: stream.clone(),
        version: head.stream_version as u64,
        hash: head.hash.0,
    };
    let path: Vec<merkle::Hash> = entry.path.iter().map(|hash| hash.0).collect();
    if !merkle::verify_inclusion(
        &leaf.leaf_hash(),
        entry.index,
        statement.stream_count,
        &path,
        &statement.root,
    ) {
        return Err(Refused::Path(stream.clone()));
    }
    Ok((
        ProvenStream {
            stream: stream.clone(),
            first_version: first.stream_version,
            sealed_version: head.stream_version,
        },
        envelopes,
    ))
}

/// That `event`, listed under `stream`, follows `previous` (the event before it in the
/// proof, if any) and hashes to its recorded hash.
fn verify_link(
    event: &EventRecord,
    previous: Option<&EventRecord>,
    stream: &str,
) -> Result<(), Refused> {
    let event_id = event.event_id;
    if event.stream != stream {
        return Err(Refused::OtherStream {
            event_id,
            actual: event.stream.clone(),
            listed: stream.to_owned(),
        });
    }
    let previous_hash = event.prev_hash.map(|hash| hash.0);
    if let Some(before) = previous {
        if event.stream_version != before.stream_version + 1 {
            return Err(Refused::NotNext {
                event_id,
                version: before.stream_version,
                stream: stream.to_owned(),
            });
        }
        // The event before it was checked to hash to its recorded hash.
        if previous_hash != Some(before.hash.0) {
            return Err(Refused::Unchained(event_id));
        }
    } else if event.stream_version == 1 && previous_hash.is_some() {
        return Err(Refused::ChainsBeforeFirst {
            event_id,
            stream: stream.to_owned(),
        });
    }
    if event_hash(event) != event.hash.0 {
        return Err(Refused::Hash {
            event_id,
            version: event.stream_version,
        });
    }
    Ok(())
}

/// What the log part of a proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedLog {
    /// The checkpoint.
    pub checkpoint: crate::tlog::note::Checkpoint,
    /// The policy's witnesses whose cosignature verified.
    pub cosigned: Vec<String>,
    /// The newest of their cosignatures' times (Unix seconds), if any verified.
    pub newest_cosignature: Option<u64>,
    /// The saved checkpoints' sizes it was proven consistent with.
    pub consistent_with: Vec<u64>,
}

/// Checks the transparency log's part of a proof the digest checks of [`verify`] passed:
/// the checkpoint's log signature (the digest key, named by the checkpoint's origin), its
/// size against the digest's event count, the witnesses' cosignatures against `policy`'s
/// quorum, each proven stream's head event in the checkpoint's tree, and that the log
/// extends every checkpoint in `saved` (the auditor's own copies, checked with the same key).
/// The error names the first thing that does not hold.
pub fn verify_log(
    proof: &ClaimedProof,
    public_key: &ed25519_dalek::VerifyingKey,
    policy: Option<&crate::tlog::policy::Policy>,
    saved: &[String],
) -> Result<VerifiedLog, Refused> {
    verify_log_across(proof, public_key, &[], policy, saved)
}

/// [`verify_log`] across a rotation of the digest key: a saved checkpoint may be signed by
/// one of the `previous` keys (the ledger's before, as announced to the auditor), and the
/// log must still extend it.
pub fn verify_log_across(
    proof: &ClaimedProof,
    public_key: &ed25519_dalek::VerifyingKey,
    previous: &[ed25519_dalek::VerifyingKey],
    policy: Option<&crate::tlog::policy::Policy>,
    saved: &[String],
) -> Result<VerifiedLog, Refused> {
    let log = proof.log.as_ref().ok_or(Refused::NoLog)?;
    let (note, checkpoint) = read_checkpoint("log.checkpoint", &log.checkpoint, public_key)?;
    if let Some(pinned) = policy.and_then(|policy| policy.log.as_ref()) {
        pinned_log_key(pinned, public_key, &checkpoint.origin)?;
    }
    // The index leaf, not the event count, ties the checkpoint to the digest (verify).
    if log.index.is_none() {
        return Err(Refused::NoIndex);
    }
    let cosigners = policy
        .map(|policy| policy.cosigners(&note))
        .unwrap_or_default();
    if let Some(policy) = policy
        && !policy.satisfied(&cosigners.set())
    {
        return Err(Refused::Quorum {
            cosigned: cosigners.names.join(", "),
            quorum: policy.describe(),
        });
    }
    verify_heads(proof, log, &checkpoint)?;
    let consistent_with = verify_saved(proof, &checkpoint, saved, public_key, previous)?;
    Ok(VerifiedLog {
        checkpoint,
        cosigned: cosigners.names,
        newest_cosignature: cosigners.newest,
        consistent_with,
    })
}

/// A checkpoint as a signed note, read and checked with the log's key (the digest key,
/// named by the checkpoint's origin); the error names `what`.
pub(super) fn read_checkpoint(
    what: &str,
    text: &str,
    public_key: &ed25519_dalek::VerifyingKey,
) -> Result<(SignedNote, Checkpoint), Refused> {
    let problem = |problem: String| Refused::Checkpoint {
        what: what.to_owned(),
        problem,
    };
    let note = SignedNote::parse(text).map_err(|e| problem(e.to_string()))?;
    let checkpoint = Checkpoint::parse(&note.body).map_err(|e| problem(e.to_string()))?;
    NoteKey::log(&checkpoint.origin, *public_key)
        .verify_signature(&note)
        .map_err(|e| problem(format!("{e} (the log's key is the digest key)")))?;
    Ok((note, checkpoint))
}

/// Each proven stream's head event in `checkpoint`'s tree, by the log part's paths.
fn verify_heads(
    proof: &ClaimedProof,
    log: &LogProof,
    checkpoint: &Checkpoint,
) -> Result<(), Refused> {
    super::indexed::one_head_per_stream(&proof.streams, log)?;
    for (stream, head) in proof.streams.iter().zip(&log.heads) {
        let event = stream
            .events
            .last()
            .ok_or_else(|| Refused::NoEvents(stream.stream.clone()))?;
        let path: Vec<tree::Hash> = head.path.iter().map(|hash| hash.0).collect();
        tree::verify_inclusion(
            &tree::leaf_hash(&event.hash.0),
            head.index,
            checkpoint.size,
            &path,
            &checkpoint.root,
        )
        .map_err(|problem| Refused::LogPath {
            stream: stream.stream.clone(),
            index: head.index,
            problem: problem.to_string(),
        })?;
    }
    Ok(())
}

/// That the log extends every checkpoint in `saved` (the auditor's own copies, read with
/// the same key); the sizes it was proven consistent with.
fn verify_saved(
    proof: &ClaimedProof,
    checkpoint: &Checkpoint,
    saved: &[String],
    public_key: &ed25519_dalek::VerifyingKey,
    previous: &[ed25519_dalek::VerifyingKey],
) -> Result<Vec<u64>, Refused> {
    let log = proof.log.as_ref().ok_or(Refused::NoLog)?;
    let mut consistent_with = Vec::new();
    for (i, text) in saved.iter().enumerate() {
        let what = format!("saved checkpoint {}", i + 1);
        // Signed by the key, or by a key before a rotation; refused, it is --public-key's
        // refusal that is said.
        let old = std::iter::once(public_key)
            .chain(previous)
            .map(|key| read_checkpoint(&what, text, key))
            .reduce(|first, next| first.or_else(|refused| next.map_err(|_| refused)))
            .expect("one key at least")
            .map(|(_, old)| old)?;
        let inconsistent = |problem: String| Refused::Inconsistent {
            saved_size: old.size,
            saved_root: base64_of(&old.root),
            problem,
        };
        if old.origin != checkpoint.origin {
            return Err(Refused::Checkpoint {
                what: format!("saved checkpoint {}", i + 1),
                problem: format!("of log {:?}, not {:?}", old.origin, checkpoint.origin),
            });
        }
        if old.size > checkpoint.size {
            return Err(Refused::SavedNewer {
                saved: old.size,
                size: checkpoint.size,
            });
        }
        let hashes: Vec<tree::Hash> = if old.size == checkpoint.size || old.size == 0 {
            Vec::new()
        } else {
            log.consistency
                .iter()
                .find(|proof| proof.old_size == old.size)
                .ok_or(Refused::NoConsistencyProof(old.size))?
                .proof
                .iter()
                .map(|hash| hash.0)
                .collect()
        };
        tree::verify_consistency(
            old.size,
            checkpoint.size,
            &old.root,
            &checkpoint.root,
            &hashes,
        )
        .map_err(|problem| inconsistent(problem.to_string()))?;
        super::indexed::not_backdated(&proof.streams, log, checkpoint, &old)?;
        consistent_with.push(old.size);
    }
    Ok(consistent_with)
}

/// That the policy's `log` line pins the key given and the checkpoint's origin: the auditor
/// had the key and the policy from two places, and a disagreement means one of them is not
/// the ledger's (a proof signed by another key is refused even when `--public-key` is that
/// key). Pure.
pub fn pinned_log_key(
    pinned: &crate::tlog::note::NoteKey,
    public_key: &ed25519_dalek::VerifyingKey,
    origin: &str,
) -> Result<(), Refused> {
    use crate::tlog::note::NoteKey;
    if pinned.public != *public_key {
        return Err(Refused::LogKey(format!(
            "the policy's log key {} is not --public-key's ({}): one of them is not the \
             ledger's; get both again from their owners",
            pinned.vkey(),
            NoteKey::log(&pinned.name, *public_key).vkey()
        )));
    }
    if pinned.name != origin {
        return Err(Refused::LogKey(format!(
            "the checkpoint is of log {origin:?}, the policy's log key is of {:?}",
            pinned.name
        )));
    }
    Ok(())
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
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

/// The event's payload, which must agree with the fields the fold reads.
fn envelope(event: &EventRecord) -> Result<ra_ledger_proto::v1::Envelope, Refused> {
    let envelope = ra_ledger_proto::v1::Envelope::decode(&event.payload.0[..])
        .map_err(|_| Refused::Payload(event.event_id))?;
    let agrees = envelope.event_id == event.event_id.to_string()
        && envelope.stream == event.stream
        && envelope.stream_version == event.stream_version
        && envelope.recorded_at_micros == event.recorded_at.timestamp_micros()
        && envelope.effective_at_micros == event.effective_at.timestamp_micros();
    if !agrees {
        return Err(Refused::PayloadDisagrees(event.event_id));
    }
    Ok(envelope)
}

/// The hash of the event's fields and its previous hash.
fn event_hash(event: &EventRecord) -> merkle::Hash {
    crate::store::event_hash(
        event.prev_hash.as_ref().map(|hash| &hash.0[..]),
        &crate::store::EventRow {
            event_id: event.event_id,
            stream: &event.stream,
            stream_version: event.stream_version,
            event_type: &event.event_type,
            schema_version: event.schema_version,
            payload: &event.payload.0,
            recorded_at: event.recorded_at,
            effective_at: event.effective_at,
            actor: &event.actor,
            correlation_id: event.correlation_id,
            causation_id: event.causation_id,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::DigestKey;

    fn sample(text: &str) -> Value {
        serde_json::from_str(text).expect("a sample proof")
    }

    /// The samples were proven with the key of seed 7s.
    fn check(document: &Value) -> Result<VerifiedProof, Refused> {
        let key = DigestKey::from_seed(&[7; 32]).public();
        verify(&ClaimedProof::from_json(document)?, &key)
    }

    /// The refusal says what the events fold to, in words: "null" read as if the answer
    /// were missing from the message.
    #[test]
    fn another_answer_says_what_the_events_give() {
        let given = serde_json::json!({
            "contact": {"contact_id": "c-1", "name": "Lone Star Agents"},
            "assignment": {"assignment_id": "a-1"},
        });
        let refused = Refused::OtherAnswer {
            folded: Value::Null,
            given,
        };
        assert_eq!(
            refused.to_string(),
            "the proven events fold to another answer than the one given: they give no \
             registered agent, the proof's answer is contact c-1 (\"Lone Star Agents\") through \
             assignment a-1"
        );
    }

    #[test]
    fn the_sample_proofs_hold_and_a_malformed_field_is_named() {
        let event = sample(include_str!("samples/event-proof.json"));
        let verified = check(&event).expect("the event's proof holds");
        assert_eq!(verified.streams.len(), 1);
        let answer = sample(include_str!("samples/answer-proof.json"));
        let verified = check(&answer).expect("the answer's proof holds");
        assert!(
            verified
                .answer
                .is_some_and(|said| said.contains("is contact"))
        );
        // What is not read does not count: no key, no formats, no derived digest fields.
        let mut bare = event.clone();
        for field in ["format", "public_key_pem"] {
            bare.as_object_mut().expect("an object").remove(field);
        }
        for field in ["format", "seq", "hash", "time", "public_key_pem"] {
            bare["digest"]
                .as_object_mut()
                .expect("an object")
                .remove(field);
        }
        check(&bare).expect("the signed fields are enough");
        let mut short = event.clone();
        short["streams"][0]["events"][0]["hash"] = serde_json::json!("ab".repeat(31));
        let refused = check(&short).expect_err("a short hash").to_string();
        assert!(
            refused.starts_with("streams[0].events[0].hash: not 32 bytes"),
            "{refused}"
        );
    }
}
