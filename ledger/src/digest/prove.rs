//! Inclusion proofs from the database: the events of a stream up to the head the newest
//! digest sealed, and the Merkle path of that head's leaf, in one snapshot (the document:
//! [`ProofDocument`]).

use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};
use ra_ledger_cdc::infra::entry::Entry;
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use super::document::{
    ConsistencyProof, EventRecord, Hex, HexBytes, LogInclusion, LogIndex, LogProof, ProofDocument,
    Question, StreamProof,
};
use super::log::{CachedTree, TreeCache};
use super::{DigestDocument, merkle};
use crate::domain::{Jurisdiction, assignment_stream, contact_stream};
use crate::queries::{self, RegisteredAgent};
use crate::tlog::note::Checkpoint;

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
    Digest(#[from] super::log::LogError),
    /// The database holds a hash that is not 32 bytes.
    #[error("proof: {0} is not 32 bytes")]
    BadHash(String),
    /// The transparency log's part could not be made.
    #[error("proof: the transparency log: {0}")]
    Log(String),
    /// A size to prove consistency from that is beyond the checkpoint.
    #[error(
        "consistent_with {asked} is beyond the size {size} of the newest checkpoint: name sizes of checkpoints you saved, at most {size}"
    )]
    ConsistentWith {
        /// The size asked for.
        asked: u64,
        /// The checkpoint's size.
        size: u64,
    },
}

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
pub async fn for_event(
    pool: &Pool,
    event_id: Uuid,
    tree: &TreeCache,
) -> Result<ProofDocument, ProofError> {
    for_event_with(pool, event_id, tree, &[]).await
}

/// [`for_event`], with the log's consistency proofs from each size of `consistent_with`
/// (sizes of checkpoints the auditor saved) to the proof's checkpoint.
#[inline(never)]
pub fn for_event_with<'a>(
    pool: &'a Pool,
    event_id: Uuid,
    tree: &'a TreeCache,
    consistent_with: &'a [u64],
) -> Entry<'a, Result<ProofDocument, ProofError>> {
    Box::pin(for_event_with_inner(pool, event_id, tree, consistent_with))
}

async fn for_event_with_inner(
    pool: &Pool,
    event_id: Uuid,
    tree: &TreeCache,
    consistent_with: &[u64],
) -> Result<ProofDocument, ProofError> {
    let mut client = pool.get().await?;
    let tx = read_only_snapshot(&mut client).await?;
    let event = tx
        .query_opt(
            include_str!("../sql/digest/event_position.sql"),
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
        &[],
        consistent_with,
    )
    .await?;
    tx.commit().await?;
    document.event_id = Some(event_id);
    Ok(document)
}

/// "Who was the RA of `business_id` in `jurisdiction` at `at`, as known at `known_at`",
/// answered with its proof against the newest digest, both from one snapshot. An answer of
/// `None` (no RA then) is proven too: by the assignment stream's events, or by the index's
/// proof that the stream has none (issue 56). Without `known_at`, the answer is as known at
/// the newest digest's time, the latest instant a digest can vouch for (see
/// [`provable_known_at`]).
pub async fn for_answer(
    pool: &Pool,
    tree: &TreeCache,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
) -> Result<(Option<RegisteredAgent>, ProofDocument), ProofError> {
    for_answer_with(pool, tree, business_id, jurisdiction, at, known_at, &[]).await
}

/// [`for_answer`], with the log's consistency proofs from each size of `consistent_with`.
#[inline(never)]
pub fn for_answer_with<'a>(
    pool: &'a Pool,
    tree: &'a TreeCache,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
    consistent_with: &'a [u64],
) -> Entry<'a, Result<(Option<RegisteredAgent>, ProofDocument), ProofError>> {
    Box::pin(for_answer_with_inner(
        pool,
        tree,
        business_id,
        jurisdiction,
        at,
        known_at,
        consistent_with,
    ))
}

async fn for_answer_with_inner(
    pool: &Pool,
    tree: &TreeCache,
    business_id: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
    consistent_with: &[u64],
) -> Result<(Option<RegisteredAgent>, ProofDocument), ProofError> {
    let mut client = pool.get().await?;
    let tx = read_only_snapshot(&mut client).await?;
    let sealed_time = super::sealed::latest(&tx)
        .await?
        .and_then(|digest| DateTime::from_timestamp_micros(digest.time_micros));
    let known_at = provable_known_at(known_at, sealed_time)?;
    let answer = queries::registered_agent_at(&tx, business_id, jurisdiction, at, known_at).await?;
    let mut named = vec![(
        assignment_stream(business_id, jurisdiction),
        format!(
            "the assignments of business {business_id} in {} recorded by {known_at}",
            jurisdiction.code()
        ),
    )];
    if let Some(answer) = &answer {
        named.push((
            contact_stream(answer.contact.contact_id),
            format!(
                "contact {} as recorded by {known_at}",
                answer.contact.contact_id
            ),
        ));
    }
    let (mut spans, mut absent) = (Vec::with_capacity(2), Vec::new());
    for (stream, what) in named {
        // Every event the answer folds must be sealed: those recorded by `known_at`.
        let folded: i64 = tx
            .query_one(
                include_str!("../sql/digest/folded_version.sql"),
                &[&stream, &known_at],
            )
            .await?
            .get(0);
        let sealed = tx
            .query_opt(include_str!("../sql/digest/sealed_version.sql"), &[&stream])
            .await?
            .is_some();
        if answer.is_none() && !sealed {
            // No RA, and no assignment of this business here sealed: the index proves
            // the stream's absence.
            absent.push(stream);
            continue;
        }
        spans.push(Span {
            stream,
            from_version: 1,
            sealed_at_least: folded,
            what,
        });
    }
    let mut document = prove(&tx, tree, &spans, &absent, consistent_with).await?;
    tx.commit().await?;
    document.question = Some(Question::new(
        business_id,
        jurisdiction.code(),
        at,
        known_at,
    ));
    document.answer = Some(serde_json::to_value(&answer).expect("an answer always serializes"));
    Ok((answer, document))
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

/// The proof of `spans` against the newest digest, in `tx`'s snapshot; its index part
/// also proves that each stream of `absent` has no entry.
async fn prove(
    tx: &Transaction<'_>,
    tree: &TreeCache,
    spans: &[Span],
    absent: &[String],
    consistent_with: &[u64],
) -> Result<ProofDocument, ProofError> {
    let digest = super::sealed::latest(tx).await?.ok_or_else(|| {
        ProofError::NotSealed(
            spans
                .first()
                .map_or("the ledger".into(), |s| s.what.clone()),
        )
    })?;
    let paths = Paths::of(tx, tree, &digest).await?;
    let mut streams = Vec::with_capacity(spans.len());
    for span in spans {
        let sealed = tx
            .query_opt(
                include_str!("../sql/digest/sealed_version.sql"),
                &[&span.stream],
            )
            .await?
            .map(|row| row.get::<_, i64>(0))
            .filter(|sealed| *sealed >= span.sealed_at_least)
            .ok_or_else(|| ProofError::NotSealed(span.what.clone()))?;
        let events = tx
            .query(
                include_str!("../sql/digest/span_events.sql"),
                &[&span.stream, &span.from_version, &sealed],
            )
            .await?;
        let (index, path) = paths
            .path(&span.stream)
            .await
            .ok_or_else(|| ProofError::NotSealed(span.what.clone()))?;
        streams.push(StreamProof {
            events: events.iter().map(event_record).collect::<Result<_, _>>()?,
            index: index as u64,
            path: path.into_iter().map(Hex).collect(),
            stream: span.stream.clone(),
        });
    }
    let log = log_part(tx, tree, &digest, &streams, absent, consistent_with).await?;
    let mut document = ProofDocument::new(digest, streams);
    document.log = log;
    Ok(document)
}

/// The proof's part in the transparency log: the checkpoint `digest` sealed with its
/// cosignatures, each stream's events in that checkpoint's tree, the consistency proofs
/// from `consistent_with` with the index leaves that end those sizes, and the index part
/// (its leaf, which ends the checkpoint, and the entry or absence of each stream and of
/// `absent`). `None` for a digest sealed before checkpoints were.
async fn log_part(
    tx: &Transaction<'_>,
    tree: &TreeCache,
    digest: &DigestDocument,
    streams: &[StreamProof],
    absent: &[String],
    consistent_with: &[u64],
) -> Result<Option<LogProof>, ProofError> {
    let Some((_, note)) = super::checkpoint::cosigned(tx, Some(digest.seq))
        .await
        .map_err(|error| ProofError::Log(error.to_string()))?
    else {
        return Ok(None);
    };
    let size = Checkpoint::parse(&note.body)
        .map_err(|error| ProofError::Log(error.to_string()))?
        .size;
    if let Some(&too_new) = consistent_with.iter().find(|&&old| old > size) {
        return Err(ProofError::ConsistentWith {
            asked: too_new,
            size,
        });
    }
    let index_leaf: Option<Vec<u8>> = tx
        .query_opt(include_str!("../sql/digest/index_leaf.sql"), &[&digest.seq])
        .await?
        .and_then(|row| row.get(0));
    let mut ending = Vec::with_capacity(consistent_with.len());
    for &old_size in consistent_with {
        let leaf: Option<Vec<u8>> = match old_size {
            0 => None,
            _ => tx
                .query_opt(
                    include_str!("../sql/checkpoints/index_leaf_at.sql"),
                    &[&(old_size as i64)],
                )
                .await?
                .map(|row| row.get(0)),
        };
        ending.push((old_size, leaf));
    }
    let log = super::log::SealedLog::of(tx, tree, digest.seq).await?;
    let heads: Vec<Vec<merkle::Hash>> = streams
        .iter()
        .map(|stream| {
            let events = stream.events.iter();
            events
                .map(|event| merkle::leaf_hash(&event.hash.0))
                .collect()
        })
        .collect();
    let mut named: Vec<String> = streams.iter().map(|s| s.stream.clone()).collect();
    named.extend(absent.iter().cloned());
    let seq = digest.seq;
    // Passes over the leaves and hashing: off the async threads.
    tokio::task::spawn_blocking(move || {
        let tree = log.tree();
        let heads = heads
            .iter()
            .map(|events| {
                let positions: Option<Vec<u64>> = tree.positions(events).into_iter().collect();
                let positions = positions.ok_or_else(|| {
                    ProofError::Log(format!(
                        "a proven event is not in the log of checkpoint {} (size {size})",
                        seq
                    ))
                })?;
                let index = *positions.last().expect("a proven stream has events");
                Ok(LogInclusion {
                    index,
                    path: hexes(tree.inclusion_proof(index, size)),
                    positions,
                })
            })
            .collect::<Result<Vec<_>, ProofError>>()?;
        let consistency = ending
            .into_iter()
            .map(|(old_size, leaf)| {
                let proof = tree.consistency_proof(old_size, size).ok_or_else(|| {
                    ProofError::Log(format!("the log has fewer than {size} leaves"))
                })?;
                let index_path = leaf
                    .as_ref()
                    .map(|_| hexes(tree.inclusion_proof(old_size - 1, size)));
                Ok(ConsistencyProof {
                    old_size,
                    proof: proof.into_iter().map(Hex).collect(),
                    index_leaf: leaf.map(HexBytes),
                    index_path,
                })
            })
            .collect::<Result<Vec<_>, ProofError>>()?;
        let index = index_leaf.map(|leaf| LogIndex {
            leaf: HexBytes(leaf),
            path: hexes(tree.inclusion_proof(size - 1, size)),
            streams: named.iter().map(|name| log.index().prove(name)).collect(),
        });
        Ok(Some(LogProof {
            checkpoint: note.text(),
            consistency,
            heads,
            index,
        }))
    })
    .await
    .map_err(|error| ProofError::Log(error.to_string()))?
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
        digest: &DigestDocument,
    ) -> Result<Self, ProofError> {
        if let Some(tree) = tree.tree_of(digest.seq, &digest.root.0) {
            return Ok(Self::Cached(tree));
        }
        // In the tree's order: stream names by their bytes.
        let leaves = tx
            .query(include_str!("../sql/digest/leaf_hashes.sql"), &[])
            .await?
            .iter()
            .map(|row| {
                let stream: String = row.get(0);
                let hash = hash32(row.get(1), || format!("the leaf hash of stream {stream}"))?;
                Ok((stream, hash))
            })
            .collect::<Result<_, ProofError>>()?;
        Ok(Self::Read(leaves))
    }

    /// The leaf index and inclusion path of `stream`.
    async fn path(&self, stream: &str) -> Option<(usize, Vec<merkle::Hash>)> {
        match self {
            // Hashing a path touches every leaf: off the async threads.
            Self::Cached(tree) => {
                let (tree, stream) = (std::sync::Arc::clone(tree), stream.to_owned());
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

/// A path as a proof carries it (empty when the tree has no such leaf: the verifier says
/// the path does not hold).
fn hexes(path: Option<Vec<merkle::Hash>>) -> Vec<Hex<32>> {
    path.unwrap_or_default().into_iter().map(Hex).collect()
}

/// An event row of `sql/digest/span_events.sql` as a proof carries it.
fn event_record(row: &tokio_postgres::Row) -> Result<EventRecord, ProofError> {
    let event_id: Uuid = row.get(0);
    let what = |column: &'static str| move || format!("the {column} of event {event_id}");
    Ok(EventRecord {
        actor: row.get(8),
        causation_id: row.get(10),
        correlation_id: row.get(9),
        effective_at: row.get(7),
        event_id,
        event_type: row.get(3),
        hash: Hex(hash32(row.get(12), what("hash"))?),
        payload: HexBytes(row.get(5)),
        prev_hash: row
            .get::<_, Option<Vec<u8>>>(11)
            .map(|bytes| hash32(bytes, what("prev_hash")).map(Hex))
            .transpose()?,
        recorded_at: row.get(6),
        schema_version: row.get(4),
        stream: row.get(1),
        stream_version: row.get(2),
    })
}

/// A hash the database holds; `what` names it when it is not 32 bytes.
fn hash32(bytes: Vec<u8>, what: impl FnOnce() -> String) -> Result<merkle::Hash, ProofError> {
    bytes.try_into().map_err(|_| ProofError::BadHash(what()))
}
