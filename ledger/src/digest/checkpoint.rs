//! The cosigned checkpoints as the ledger keeps them: read back with every cosignature
//! stored for them (for proofs and `GET /v1/checkpoints/latest`), and published on the
//! digest topic through the outbox. The rounds that gather the cosignatures are
//! [`super::cosign`]'s.

use std::collections::BTreeSet;

use crate::tlog::note::{SignatureLine, SignedNote};

/// Why a round could not run.
#[derive(Debug, thiserror::Error)]
pub enum CosignError {
    /// No connection.
    #[error("cosigning: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("cosigning: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The log could not be read.
    #[error("cosigning: {0}")]
    Log(#[from] super::build::BuildError),
    /// A stored checkpoint does not read.
    #[error("cosigning: checkpoint of digest {0} does not read: {1}")]
    Checkpoint(i64, crate::tlog::note::NoteError),
}

impl From<super::log::LogError> for CosignError {
    fn from(error: super::log::LogError) -> Self {
        Self::Log(error.into())
    }
}

/// The `format` of a cosigned checkpoint's document on the digest topic.
pub const COSIGNED_FORMAT: &str = "ra-ledger cosigned checkpoint v1";

/// The outbox's event type of a cosigned checkpoint (the relay's `event_type` header).
pub const COSIGNED_EVENT_TYPE: &str = "CheckpointCosigned";

/// A cosigned checkpoint as the digest topic carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CosignedDocument {
    /// The signed note: the log's signature and the witnesses' cosignatures.
    pub checkpoint: String,
    /// The policy's witnesses whose cosignature it carries.
    pub cosigners: Vec<String>,
    /// The digest that sealed it.
    pub digest_seq: i64,
    /// [`COSIGNED_FORMAT`].
    pub format: String,
    /// Whether the cosigners meet the policy's quorum (a checkpoint short of it is
    /// published as such, once, and again once the quorum is met).
    pub quorum: bool,
    /// The checkpoint's size.
    pub size: u64,
}

/// Publishes the checkpoint of digest `seq` on the digest topic through the outbox, once
/// short of the quorum (after a round every witness answered or failed) and once with it:
/// `checkpoint_publications` remembers which, in the same transaction.
pub(super) async fn publish(
    client: &deadpool_postgres::Client,
    seq: i64,
    size: u64,
    quorum: bool,
    cosigners: &BTreeSet<String>,
    cosigned: &SignedNote,
) -> Result<(), CosignError> {
    let document = CosignedDocument {
        checkpoint: cosigned.text(),
        cosigners: cosigners.iter().cloned().collect(),
        digest_seq: seq,
        format: COSIGNED_FORMAT.into(),
        quorum,
        size,
    };
    client
        .execute(
            "WITH first AS ( \
                 INSERT INTO checkpoint_publications (digest_seq, quorum) VALUES ($1, $2) \
                 ON CONFLICT DO NOTHING RETURNING digest_seq) \
             INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT $3, $4, 'ledger', $5, $6 FROM first",
            &[
                &seq,
                &quorum,
                &uuid::Uuid::now_v7(),
                &super::build::AGGREGATE_TYPE,
                &COSIGNED_EVENT_TYPE,
                &serde_json::to_vec(&document).expect("a document always serializes"),
            ],
        )
        .await?;
    Ok(())
}

/// Whether a message of the digest topic is a cosigned checkpoint (not a digest).
pub fn is_cosigned_checkpoint(payload: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(payload)
        .ok()
        .is_some_and(|document| document["format"] == COSIGNED_FORMAT)
}

/// The checkpoint digest `seq` sealed, with every cosignature stored for it; `None` when
/// that digest sealed none (sealed before issue 47).
pub async fn cosigned(
    client: &impl deadpool_postgres::GenericClient,
    seq: i64,
) -> Result<Option<SignedNote>, CosignError> {
    let Some(row) = client
        .query_opt(
            "SELECT c.note, \
                    coalesce(array_agg(s.line ORDER BY s.witness) FILTER (WHERE s.line IS NOT NULL), '{}') \
             FROM checkpoints c LEFT JOIN cosignatures s ON s.digest_seq = c.digest_seq \
             WHERE c.digest_seq = $1 GROUP BY c.note",
            &[&seq],
        )
        .await?
    else {
        return Ok(None);
    };
    let mut note =
        SignedNote::parse(row.get(0)).map_err(|error| CosignError::Checkpoint(seq, error))?;
    for line in row.get::<_, Vec<String>>(1) {
        note.add([
            SignatureLine::parse(&line).map_err(|error| CosignError::Checkpoint(seq, error))?
        ]);
    }
    Ok(Some(note))
}

/// The newest checkpoint with every cosignature stored for it, as a signed note, and the
/// digest that sealed it; `None` before the first.
pub async fn latest_cosigned(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Option<(i64, SignedNote)>, CosignError> {
    let Some(row) = client
        .query_opt(
            "SELECT c.digest_seq, c.note, \
                    coalesce(array_agg(s.line ORDER BY s.witness) FILTER (WHERE s.line IS NOT NULL), '{}') \
             FROM (SELECT * FROM checkpoints ORDER BY digest_seq DESC LIMIT 1) c \
             LEFT JOIN cosignatures s ON s.digest_seq = c.digest_seq \
             GROUP BY c.digest_seq, c.note",
            &[],
        )
        .await?
    else {
        return Ok(None);
    };
    let seq: i64 = row.get(0);
    let mut note =
        SignedNote::parse(row.get(1)).map_err(|error| CosignError::Checkpoint(seq, error))?;
    for line in row.get::<_, Vec<String>>(2) {
        note.add([
            SignatureLine::parse(&line).map_err(|error| CosignError::Checkpoint(seq, error))?
        ]);
    }
    Ok(Some((seq, note)))
}
