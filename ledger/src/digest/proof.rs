//! Inclusion proofs: one self-contained JSON document that proves an event against a signed
//! digest, for someone holding only the document and the public key.
//!
//! It carries the event and the stream's later events up to the head the newest digest
//! sealed (each with every field its hash covers, see [`crate::store::event_hash`]), the
//! Merkle path from that head's leaf to the digest's root, and the signed digest. To check
//! it: recompute each event's hash from its fields and the previous hash, check the chain
//! reaches the sealed head, the head's leaf reaches the root through the path, and the
//! signature (`tests/verify_digest.py` does all of it).

use deadpool_postgres::Pool;
use serde_json::{Value, json};
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use super::{hex, merkle};

/// Why there is no proof.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// No such event.
    #[error("event {0} not found")]
    UnknownEvent(Uuid),
    /// No digest has sealed the event yet.
    #[error(
        "event {0} is not sealed by a digest yet: digests are sealed every digest_interval_ms while something changed"
    )]
    NotSealed(Uuid),
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

/// The proof of `event_id` against the newest digest.
pub async fn for_event(pool: &Pool, event_id: Uuid) -> Result<Value, ProofError> {
    let mut client = pool.get().await?;
    // One snapshot: the newest digest and `digest_leaves` were written together.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let event = tx
        .query_opt(
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE event_id = $1"),
            &[&event_id],
        )
        .await?
        .ok_or(ProofError::UnknownEvent(event_id))?;
    let stream: String = event.get(1);
    let version: i64 = event.get(2);
    let sealed = tx
        .query_opt(
            "SELECT version FROM digest_leaves WHERE stream = $1",
            &[&stream],
        )
        .await?
        .map(|row| row.get::<_, i64>(0))
        .filter(|sealed| *sealed >= version)
        .ok_or(ProofError::NotSealed(event_id))?;
    let digest = super::build::latest(&tx)
        .await?
        .ok_or(ProofError::NotSealed(event_id))?;
    let events = tx
        .query(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 \
                 AND stream_version BETWEEN $2 AND $3 ORDER BY stream_version"
            ),
            &[&stream, &version, &sealed],
        )
        .await?;
    let leaves = tx
        .query(
            "SELECT stream, leaf_hash FROM digest_leaves ORDER BY stream COLLATE \"C\"",
            &[],
        )
        .await?;
    tx.commit().await?;
    let index = leaves
        .iter()
        .position(|row| row.get::<_, &str>(0) == stream)
        .ok_or(ProofError::NotSealed(event_id))?;
    let hashes: Vec<merkle::Hash> = leaves
        .iter()
        .map(|row| row.get::<_, Vec<u8>>(1).try_into().unwrap_or([0; 32]))
        .collect();
    let path = merkle::inclusion_path(&hashes, index).unwrap_or_default();
    Ok(json!({
        "format": "ra-ledger proof v1",
        "event_id": event_id,
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
        "inclusion": {
            "stream": stream,
            "index": index,
            "path": path.iter().map(|hash| hex(hash)).collect::<Vec<_>>(),
        },
        "public_key_pem": digest["public_key_pem"],
        "digest": digest,
    }))
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

/// Checks a proof document offline against `public_key`, as `tests/verify_digest.py`
/// does: every event's hash from its fields and the previous hash, the chain up to the
/// sealed head, the head's leaf through the Merkle path to the root, the signature. The
/// error names the first thing that does not hold.
pub fn verify(
    document: &Value,
    public_key: &ed25519_dalek::VerifyingKey,
) -> Result<VerifiedProof, String> {
    let digest = &document["digest"];
    let statement = super::Statement {
        root: hash_field(&digest["root"], "digest.root")?,
        time_micros: digest["time_micros"]
            .as_i64()
            .ok_or("digest.time_micros is missing")?,
        stream_count: digest["stream_count"]
            .as_u64()
            .ok_or("digest.stream_count is missing")?,
        event_count: digest["event_count"]
            .as_u64()
            .ok_or("digest.event_count is missing")?,
        previous: hash_field(&digest["previous"], "digest.previous")?,
    };
    let signature: [u8; 64] = bytes_field(&digest["signature"], "digest.signature")?
        .try_into()
        .map_err(|_| "digest.signature is not 64 bytes")?;
    let signed = super::SignedDigest {
        statement,
        signature,
    };
    if !signed.verify(public_key) {
        return Err("the digest's signature does not verify with the public key".into());
    }
    let events = document["events"]
        .as_array()
        .filter(|events| !events.is_empty())
        .ok_or("the proof has no events")?;
    if events[0]["event_id"] != document["event_id"] {
        return Err("the proof's first event is not the event it proves".into());
    }
    let mut previous: Option<merkle::Hash> = None;
    let mut head = None;
    for (i, event) in events.iter().enumerate() {
        let fields = EventFields::read(event)?;
        if i > 0 {
            let before = head.as_ref().expect("set on the first event");
            let (stream, version): &(String, i64) = before;
            if &fields.stream != stream || fields.stream_version != version + 1 {
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
        }
        let computed = fields.hash();
        if computed[..] != fields.hash[..] {
            return Err(format!(
                "event {} (version {}) does not hash to its recorded hash",
                fields.event_id, fields.stream_version
            ));
        }
        previous = Some(computed);
        head = Some((fields.stream, fields.stream_version));
    }
    let (stream, version) = head.expect("at least one event");
    let inclusion = &document["inclusion"];
    if inclusion["stream"].as_str() != Some(stream.as_str()) {
        return Err("the inclusion path is of another stream".into());
    }
    let leaf = super::Head {
        stream: stream.clone(),
        version: version as u64,
        hash: previous.expect("at least one event"),
    };
    let path = inclusion["path"]
        .as_array()
        .ok_or("inclusion.path is missing")?
        .iter()
        .map(|hash| hash_field(hash, "inclusion.path"))
        .collect::<Result<Vec<_>, _>>()?;
    let index = inclusion["index"]
        .as_u64()
        .ok_or("inclusion.index is missing")?;
    if !merkle::verify_inclusion(
        &leaf.leaf_hash(),
        index,
        signed.statement.stream_count,
        &path,
        &signed.statement.root,
    ) {
        return Err(format!(
            "the inclusion path of stream {stream} does not lead to the root"
        ));
    }
    Ok(VerifiedProof {
        stream,
        events: events.len(),
        sealed_version: version,
        digest_time_micros: signed.statement.time_micros,
    })
}

/// What a verified proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedProof {
    /// The event's stream.
    pub stream: String,
    /// Events checked, the proved one first.
    pub events: usize,
    /// The head version the digest sealed.
    pub sealed_version: i64,
    /// The digest's time.
    pub digest_time_micros: i64,
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
    if text.len() % 2 != 0 {
        return Err(format!("{name} is not hex"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("{name} is not hex")))
        .collect()
}

fn hash_field(value: &Value, name: &str) -> Result<merkle::Hash, String> {
    bytes_field(value, name)?
        .try_into()
        .map_err(|_| format!("{name} is not 32 bytes"))
}
