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
