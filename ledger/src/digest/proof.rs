//! Inclusion proofs: one self-contained JSON document that proves events against a signed
//! digest, for someone holding only the document and the public key.
//!
//! # Document (`ra-ledger proof v1`)
//!
//! - `digest`: the signed digest ([`super::document`]); `public_key_pem`: the key that
//!   signed it, for convenience only (a verifier must use a key it got elsewhere).
//! - `streams`: one entry per proven stream: `stream`, `events` (consecutive versions up to
//!   the head the digest sealed, each with every field its hash covers, see
//!   [`crate::store::event_hash`]), and the `index` and Merkle `path` of the head's leaf.
//! - An event's proof (`GET /v1/events/{id}/proof`) has `event_id` and one stream, from
//!   that event on.
//! - A proven audit answer (`registered-agent?at=T&proof=true`) has `question` (business,
//!   jurisdiction, `at_micros`, `known_at_micros`), `answer` (the API's answer) and two whole
//!   streams from version 1: the business's assignments in the jurisdiction and the
//!   answer's contact. Folding their events recorded by `known_at` ([`Fold`]) gives the
//!   answer.
//!
//! To check one: recompute each event's hash from its fields and the previous hash, check
//! each chain reaches its sealed head, each head's leaf reaches the root through its path,
//! the signature, and for an answer, that `known_at` is not after the digest's time (the
//! digest cannot vouch for what was recorded later) and the fold (`ledger proof verify`;
//! `tests/verify_digest.py` checks all but the fold, and says so).

use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};
use prost::Message as _;
use serde_json::{Value, json};
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use super::build::{CachedTree, TreeCache};
use super::{hex, merkle};
use crate::domain::{Jurisdiction, assignment_stream, contact_stream};
use crate::queries::{self, Fold, RegisteredAgent};

/// Why there is no proof.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// No such event.
    #[error("event {0} not found")]
    UnknownEvent(Uuid),
    /// No digest has sealed what is to be proven yet.
    #[error(
        "{0} is not sealed by a digest yet: digests are sealed every digest_interval_ms while something changed"
    )]
    NotSealed(String),
    /// No connection.
    #[error("proof: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("proof: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The stored digest does not read back.
    #[error("proof: {0}")]
    Digest(#[from] super::build::BuildError),
}

const EVENT_COLUMNS: &str = "event_id, stream, stream_version, event_type, schema_version, \
     payload, recorded_at, effective_at, actor, correlation_id, causation_id, prev_hash, hash";

/// One stream to prove: its events from `from_version` up to the sealed head, which must
/// be at least `sealed_at_least` (else [`ProofError::NotSealed`], naming `what`).
struct Span {
    stream: String,
    from_version: i64,
    sealed_at_least: i64,
    what: String,
}

async fn read_only_snapshot(
    client: &mut deadpool_postgres::Client,
) -> Result<Transaction<'_>, tokio_postgres::Error> {
    // One snapshot: the newest digest and `digest_leaves` were written together.
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
}

/// The proof of `event_id` against the newest digest.
/// `tree` is the builder's tree in memory, used when it is the newest digest's.
pub async fn for_event(pool: &Pool, event_id: Uuid, tree: &TreeCache) -> Result<Value, ProofError> {
    let mut client = pool.get().await?;
    let tx = read_only_snapshot(&mut client).await?;
    let event = tx
        .query_opt(
            "SELECT stream, stream_version FROM events WHERE event_id = $1",
            &[&event_id],
        )
        .await?
        .ok_or(ProofError::UnknownEvent(event_id))?;
    let version: i64 = event.get(1);
    let mut document = prove(
        &tx,
        tree,
        &[Span {
            stream: event.get(0),
            from_version: version,
            sealed_at_least: version,
            what: format!("event {event_id}"),
        }],
    )
    .await?;
    tx.commit().await?;
    document["event_id"] = json!(event_id);
    Ok(document)
}

/// "Who was the RA of `business_id` in `jurisdiction` at `at`, as known at `known_at`",
/// answered with its proof against the newest digest, both from one snapshot. `None` when
/// there was no RA then. Without `known_at`, the answer is as known at the newest digest's
/// time, the latest instant a digest can vouch for (see [`provable_known_at`]).
pub async fn for_answer(
    pool: &Pool,
    tree: &TreeCache,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
) -> Result<Option<(RegisteredAgent, Value)>, ProofError> {
    let mut client = pool.get().await?;
    let tx = read_only_snapshot(&mut client).await?;
    let sealed_time = super::build::latest(&tx)
        .await?
        .and_then(|digest| digest["time_micros"].as_i64())
        .and_then(DateTime::from_timestamp_micros);
    let known_at = provable_known_at(known_at, sealed_time)?;
    let Some(answer) =
        queries::registered_agent_at(&tx, business_id, jurisdiction, at, known_at).await?
    else {
        return Ok(None);
    };
    let mut spans = Vec::with_capacity(2);
    for (stream, what) in [
        (
            assignment_stream(business_id, jurisdiction),
            format!(
                "the assignments of business {business_id} in {} recorded by {known_at}",
                jurisdiction.code()
            ),
        ),
        (
            contact_stream(answer.contact.contact_id),
            format!(
                "contact {} as recorded by {known_at}",
                answer.contact.contact_id
            ),
        ),
    ] {
        // Every event the answer folds must be sealed: those recorded by `known_at`.
        let folded: i64 = tx
            .query_one(
                "SELECT coalesce(max(stream_version), 1) FROM events \
                 WHERE stream = $1 AND recorded_at <= $2",
                &[&stream, &known_at],
            )
            .await?
            .get(0);
        spans.push(Span {
            stream,
            from_version: 1,
            sealed_at_least: folded,
            what,
        });
    }
    let mut document = prove(&tx, tree, &spans).await?;
    tx.commit().await?;
    document["question"] = json!({
        "business_id": business_id,
        "jurisdiction": jurisdiction.code(),
        "at_micros": at.timestamp_micros(),
        "known_at_micros": known_at.timestamp_micros(),
        "at": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "known_at": known_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    });
    document["answer"] = serde_json::to_value(&answer).expect("an answer always serializes");
    Ok(Some((answer, document)))
}

/// The `known_at` an answer can be proven as of, given the newest digest's time: the one
/// asked for, if not after that time; unasked, that time. A digest proves what was recorded
/// by its time, not that nothing else was recorded after it, so an answer as known at a
/// later instant is not proven by it (409 `not_sealed` until a later digest).
pub fn provable_known_at(
    asked: Option<DateTime<Utc>>,
    sealed_time: Option<DateTime<Utc>>,
) -> Result<DateTime<Utc>, ProofError> {
    let Some(sealed_time) = sealed_time else {
        return Err(ProofError::NotSealed("the ledger".into()));
    };
    match asked {
        None => Ok(sealed_time),
        Some(known_at) if known_at <= sealed_time => Ok(known_at),
        Some(known_at) => Err(ProofError::NotSealed(format!(
            "what was recorded by known_at {known_at} (the newest digest is of {sealed_time}: \
             known_at at or before it is proven now, or leave known_at out)"
        ))),
    }
}

/// The proof of `spans` against the newest digest, in `tx`'s snapshot.
async fn prove(
    tx: &Transaction<'_>,
    tree: &TreeCache,
    spans: &[Span],
) -> Result<Value, ProofError> {
    let digest = super::build::latest(tx)
        .await?
        .ok_or_else(|| ProofError::NotSealed(spans[0].what.clone()))?;
    let paths = Paths::of(tx, tree, &digest).await?;
    let mut streams = Vec::with_capacity(spans.len());
    for span in spans {
        let sealed = tx
            .query_opt(
                "SELECT version FROM digest_leaves WHERE stream = $1",
                &[&span.stream],
            )
            .await?
            .map(|row| row.get::<_, i64>(0))
            .filter(|sealed| *sealed >= span.sealed_at_least)
            .ok_or_else(|| ProofError::NotSealed(span.what.clone()))?;
        let events = tx
            .query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 \
                     AND stream_version BETWEEN $2 AND $3 ORDER BY stream_version"
                ),
                &[&span.stream, &span.from_version, &sealed],
            )
            .await?;
        let (index, path) = paths
            .path(&span.stream)
            .await
            .ok_or_else(|| ProofError::NotSealed(span.what.clone()))?;
        streams.push(json!({
            "stream": span.stream,
            "events": events.iter().map(event_json).collect::<Vec<_>>(),
            "index": index,
            "path": path.iter().map(|hash| hex(hash)).collect::<Vec<_>>(),
        }));
    }
    Ok(json!({
        "format": "ra-ledger proof v1",
        "streams": streams,
        "public_key_pem": digest["public_key_pem"],
        "digest": digest,
    }))
}

/// Where the Merkle paths come from: the builder's tree in memory when it is the newest
/// digest's (same number and root), else every leaf read from `digest_leaves`.
enum Paths {
    Cached(std::sync::Arc<CachedTree>),
    Read(Vec<(String, merkle::Hash)>),
}

impl Paths {
    async fn of(
        tx: &Transaction<'_>,
        tree: &TreeCache,
        digest: &Value,
    ) -> Result<Self, ProofError> {
        let seq = digest["seq"].as_i64().unwrap_or_default();
        let root: merkle::Hash = digest["root"]
            .as_str()
            .and_then(super::unhex)
            .and_then(|bytes| bytes.try_into().ok())
            .unwrap_or([0; 32]);
        if let Some(tree) = tree.tree_of(seq, &root) {
            return Ok(Self::Cached(tree));
        }
        // In the tree's order: stream names by their bytes.
        let leaves = tx
            .query(
                "SELECT stream, leaf_hash FROM digest_leaves ORDER BY stream COLLATE \"C\"",
                &[],
            )
            .await?
            .iter()
            .map(|row| {
                let hash = row.get::<_, Vec<u8>>(1).try_into().unwrap_or([0; 32]);
                (row.get::<_, String>(0), hash)
            })
            .collect();
        Ok(Self::Read(leaves))
    }

    /// The leaf index and inclusion path of `stream`.
    async fn path(&self, stream: &str) -> Option<(usize, Vec<merkle::Hash>)> {
        match self {
            // Hashing a path touches every leaf: off the async threads.
            Self::Cached(tree) => {
                let (tree, stream) = (tree.clone(), stream.to_owned());
                tokio::task::spawn_blocking(move || tree.path(&stream))
                    .await
                    .ok()
                    .flatten()
            }
            Self::Read(leaves) => {
                let index = leaves.iter().position(|(name, _)| name == stream)?;
                let hashes: Vec<merkle::Hash> = leaves.iter().map(|(_, hash)| *hash).collect();
                Some((index, merkle::inclusion_path(&hashes, index)?))
            }
        }
    }
}

fn event_json(row: &tokio_postgres::Row) -> Value {
    let micros = |index: usize| {
        row.get::<_, chrono::DateTime<chrono::Utc>>(index)
            .timestamp_micros()
    };
    json!({
        "event_id": row.get::<_, Uuid>(0),
        "stream": row.get::<_, String>(1),
        "stream_version": row.get::<_, i64>(2),
        "event_type": row.get::<_, String>(3),
        "schema_version": row.get::<_, i32>(4),
        "payload": hex(&row.get::<_, Vec<u8>>(5)),
        "recorded_at_micros": micros(6),
        "effective_at_micros": micros(7),
        "actor": row.get::<_, String>(8),
        "correlation_id": row.get::<_, Uuid>(9),
        "causation_id": row.get::<_, Option<Uuid>>(10),
        "prev_hash": row.get::<_, Option<Vec<u8>>>(11).map(|hash| hex(&hash)),
        "hash": hex(&row.get::<_, Vec<u8>>(12)),
    })
}

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
