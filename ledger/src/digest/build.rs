//! Building the next digest from the database, incrementally: only the streams whose head
//! moved since the last digest are read from `events`; the other leaves come from
//! `digest_leaves`, as the previous digest sealed them.
//!
//! One transaction, REPEATABLE READ: the changed streams (`digest_dirty`), their heads, the
//! leaves, the new digest, its outbox row and the removal of exactly the `digest_dirty` rows
//! it read all belong to one snapshot. Appends committed after that snapshot leave their
//! `digest_dirty` rows for the next digest. A session advisory lock keeps one builder at a
//! time per database (several `ledger serve` replicas may run).
//!
//! # The digest's time bounds what it sealed
//!
//! A proof "as known at" a digest's time must answer what the ledger answers for that
//! instant, so every event whose `recorded_at` is at or before the time a digest signs must
//! be in that digest. A writer reads its `recorded_at` before it commits, so the builder
//! cannot take its time and then its snapshot alone: a writer that read an earlier time may
//! still be in progress. As the replay's handoff does, the builder
//!
//! 1. reads the database's clock `c`, and signs `T = c - 1 µs`;
//! 2. waits until no transaction older than a fresh transaction id is in progress
//!    ([`crate::older_transactions`]);
//! 3. takes its REPEATABLE READ snapshot.
//!
//! A writer takes its transaction id before it reads its clock (`sql/stream_heads.sql`). If
//! its `recorded_at` is at or before `T`, it read the clock strictly before `c` was read,
//! so it had its id before step 2's id was given out: step 2 waits for it to commit or roll
//! back, and the snapshot of step 3 sees it if it committed. A writer given its id later
//! reads a clock later than `c`: its `recorded_at` is after `T`. The argument takes the
//! database server's clock to move forward, as `recorded_at` increasing along a stream
//! already does. A digest may seal events recorded after `T` as well (committed between
//! steps 1 and 3); a proof folds only what was recorded by its `known_at`.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::IsolationLevel;

use super::index::Index;
use super::log::{
    CachedLeaf, CachedTree, LogError, TreeCache, append_log, hash32, merge, read_indexed,
    read_leaves,
};
use super::merkle::Hash;
use super::{AGGREGATE_TYPE, DigestDocument, DigestKey, Head, SignedDigest, Statement, merkle};
use crate::older_transactions::{WaitError, wait_for_older};
use crate::tlog::note::{Checkpoint, SignedNote, sign_checkpoint};
use crate::tlog::tree::Tree;

/// Advisory lock key of the digest builder ("RALDIGST" in ASCII).
pub const DIGEST_LOCK_KEY: i64 = 0x5241_4c44_4947_5354;

/// The mark that stands for every stream (no stream is named `*`).
pub const EVERY_STREAM: &str = "*";

/// Heads read per statement.
const HEADS_PER_READ: usize = 10_000;

/// How long a build waits for the transactions older than its time to end; then it gives
/// up, and the next tick tries again with a new time.
const OLDER_TRANSACTIONS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a build did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Built {
    /// Nothing changed since the last digest.
    Unchanged,
    /// Another builder holds the lock.
    Busy,
    /// A new digest.
    Sealed {
        /// Its sequence number (1 for the first).
        seq: i64,
        /// The streams re-read.
        changed: usize,
        /// The digest.
        digest: SignedDigest,
    },
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No connection.
    #[error("digest: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("digest: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The database holds a head hash that is not 32 bytes.
    #[error("digest: stream {0} has a head hash that is not 32 bytes")]
    BadHash(String),
    /// The log's events do not follow each other in their streams.
    #[error("digest: the transparency log itself: {0}")]
    BrokenLog(String),
    /// Writers older than the digest's time did not end in time.
    #[error(
        "digest: transactions older than its time are still open after {0:?} ({1}); \
         not sealed, so that its time still bounds what it seals"
    )]
    OlderTransactions(std::time::Duration, String),
}

impl From<LogError> for BuildError {
    fn from(error: LogError) -> Self {
        match error {
            LogError::Database(error) => Self::Database(error),
            LogError::BadHash(what) => Self::BadHash(what),
            LogError::Broken(why) => Self::BrokenLog(why),
        }
    }
}

impl From<WaitError> for BuildError {
    fn from(error: WaitError) -> Self {
        match error {
            WaitError::Database(error) => Self::Database(error),
            WaitError::StillOpen { waited, open } => Self::OlderTransactions(waited, open),
        }
    }
}

/// Seals the next digest, unless nothing changed. Its time is the database's clock, with
/// every writer of an earlier `recorded_at` waited for (see the module's documentation).
pub async fn build(pool: &Pool, key: &DigestKey) -> Result<Built, BuildError> {
    build_cached(pool, key, &TreeCache::default()).await
}

/// [`build`], keeping the tree in `cache` between calls.
pub async fn build_cached(
    pool: &Pool,
    key: &DigestKey,
    cache: &TreeCache,
) -> Result<Built, BuildError> {
    let mut client = pool.get().await?;
    let locked: bool = client
        .query_one(
            include_str!("../sql/digest/try_lock.sql"),
            &[&DIGEST_LOCK_KEY],
        )
        .await?
        .get(0);
    if !locked {
        return Ok(Built::Busy);
    }
    let built = match sealing_time(&client).await {
        // The tree is taken out while building, not while waiting (proofs read it
        // meanwhile): a failed build leaves no cache to trust.
        Ok(Some(time_micros)) => {
            let tree = cache.slot().take();
            build_locked(&mut client, key, cache.origin(), time_micros, tree)
                .await
                .map(Some)
        }
        Ok(None) => Ok(None),
        Err(error) => Err(error),
    };
    let unlocked = client
        .execute(
            include_str!("../sql/digest/unlock.sql"),
            &[&DIGEST_LOCK_KEY],
        )
        .await;
    let built = built?;
    unlocked?;
    Ok(match built {
        Some((built, tree)) => {
            *cache.slot() = tree;
            built
        }
        // Nothing to seal: the cached tree still describes the newest digest.
        None => Built::Unchanged,
    })
}

/// Steps 1 and 2 of the module's documentation: the time the next digest signs, once
/// every writer that may have recorded an event at or before it has ended. `None` when no
/// stream is marked and a digest exists: nothing to seal, and nothing to wait for.
async fn sealing_time(client: &deadpool_postgres::Client) -> Result<Option<i64>, BuildError> {
    // The clock readings of ended writers (migrations/V24) are no longer needed.
    client
        .execute("SELECT prune_recording_clock()", &[])
        .await?;
    let row = client
        .query_one(include_str!("../sql/digest/sealing_time.sql"), &[])
        .await?;
    if !row.get::<_, bool>(1) {
        return Ok(None);
    }
    // One microsecond before the reading: a writer at or before it read its clock strictly
    // before this statement did, and so holds an id older than the fence taken next.
    let time_micros = row.get::<_, DateTime<Utc>>(0).timestamp_micros() - 1;
    wait_for_older(client, OLDER_TRANSACTIONS_WAIT).await?;
    Ok(Some(time_micros))
}

async fn build_locked(
    client: &mut deadpool_postgres::Client,
    key: &DigestKey,
    origin: &str,
    time_micros: i64,
    tree: Option<Arc<CachedTree>>,
) -> Result<(Built, Option<Arc<CachedTree>>), BuildError> {
    let started = std::time::Instant::now();
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let changed = changed_streams(&tx).await?;
    let last = tx
        .query_opt(include_str!("../sql/digest/last_digest.sql"), &[])
        .await?;
    // A newest digest sealed before V25 has no index leaf: seal one that has.
    let indexed = last.as_ref().is_some_and(|row| row.get::<_, bool>(4));
    if changed.is_empty() && indexed {
        return Ok((Built::Unchanged, tree));
    }
    let (seq, previous) = match &last {
        Some(row) => (
            row.get::<_, i64>(0) + 1,
            hash32("previous digest", row.get(1))?,
        ),
        None => (1, [0; 32]),
    };
    // The cache describes the newest digest, or it is dropped.
    let tree = tree.filter(|tree| {
        last.as_ref().is_some_and(|row| {
            tree.seq == row.get::<_, i64>(0) && tree.root[..] == row.get::<_, &[u8]>(2)[..]
        })
    });
    let heads = upsert_heads(&tx, &changed, seq, tree.is_some()).await?;
    let upserted = started.elapsed();
    let cached = tree.is_some();
    let (leaves, event_count, mut log, index) = next_tree(&tx, tree, heads, seq).await?;
    let index_leaf = index.leaf(seq, time_micros);
    log.push_hash(index_leaf.leaf_hash());
    let (checkpoint, note) = seal_checkpoint(key, origin, &log, seq, (event_count, &index));
    let hashes: Vec<Hash> = leaves.iter().map(|leaf| leaf.leaf_hash).collect();
    let digest = key.sign(Statement {
        seq: Some(seq),
        root: merkle::root(&hashes),
        time_micros,
        stream_count: leaves.len() as u64,
        event_count,
        previous,
    });
    let rooted = started.elapsed();
    let sealed = Sealed {
        changed: changed.len(),
        checkpoint: &checkpoint,
        note: &note,
        index_leaf: &index_leaf.bytes(),
    };
    insert_digest(&tx, seq, &digest, key, sealed).await?;
    // Exactly the rows this snapshot shows: later appends keep theirs.
    tx.execute(include_str!("../sql/digest/sealed_marks.sql"), &[])
        .await?;
    tx.commit().await?;
    tracing::debug!(
        seq,
        cached,
        ?upserted,
        ?rooted,
        total = ?started.elapsed(),
        "digest phases (cumulative)"
    );
    let tree = Arc::new(CachedTree {
        seq,
        root: digest.statement.root,
        event_count,
        leaves,
        hashes,
        log,
        index,
    });
    let built = Built::Sealed {
        seq,
        changed: changed.len(),
        digest,
    };
    Ok((built, Some(tree)))
}

/// The checkpoint of `log` that digest `seq` seals, signed with the digest key. In an honest
/// history the log's index (its events, stream by stream) counts the digest's `event_count`
/// events in as many streams as the digest's leaves; when it does not, it is sealed anyway
/// (the witnesses judge the log, `ledger digest monitor` names the stream) and said loudly.
fn seal_checkpoint(
    key: &DigestKey,
    origin: &str,
    log: &Tree,
    seq: i64,
    (event_count, index): (u64, &Index),
) -> (Checkpoint, SignedNote) {
    let checkpoint = Checkpoint {
        origin: origin.to_owned(),
        size: log.size(),
        root: log.root(),
    };
    let logged: u64 = index.entries().iter().map(|entry| entry.version).sum();
    if logged != event_count {
        tracing::error!(
            seq,
            log_size = checkpoint.size,
            logged_events = logged,
            event_count,
            "the transparency log does not hold the events the digest seals: the sealed history was changed"
        );
    }
    let note = sign_checkpoint(key.public(), |m| key.sign_bytes(m), &checkpoint);
    (checkpoint, note)
}

/// The tree, the log (without the index leaf) and the index of digest `seq`: the cached ones
/// with the changed `heads` merged and the log's new leaves appended, or, without a cache,
/// all read whole.
async fn next_tree(
    tx: &deadpool_postgres::Transaction<'_>,
    tree: Option<Arc<CachedTree>>,
    heads: Vec<CachedLeaf>,
    seq: i64,
) -> Result<(Vec<CachedLeaf>, u64, Tree, Index), BuildError> {
    Ok(match tree {
        Some(tree) => {
            // Copied only if a proof still holds it.
            let tree = Arc::try_unwrap(tree).unwrap_or_else(|shared| (*shared).clone());
            let mut log = tree.log;
            let index = append_log(tx, &mut log, tree.index, seq).await?;
            let (leaves, event_count) = merge(tree.leaves, heads, tree.event_count);
            (leaves, event_count, log, index)
        }
        None => {
            let (leaves, event_count) = read_leaves(tx).await?;
            let (log, index) = read_indexed(tx, seq).await?;
            (leaves, event_count, log, index)
        }
    })
}

/// The streams whose head moved since the last digest (`digest_dirty`), or every stream
/// when the marks were cleared while no builder ran.
async fn changed_streams(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<Vec<String>, BuildError> {
    let streams = |rows: Vec<tokio_postgres::Row>| rows.iter().map(|row| row.get(0)).collect();
    let changed: Vec<String> = streams(
        tx.query(include_str!("../sql/digest/dirty_streams.sql"), &[])
            .await?,
    );
    if !changed.iter().any(|stream| stream == EVERY_STREAM) {
        return Ok(changed);
    }
    // Marks were cleared while no builder ran (or none was ever taken): re-read all.
    Ok(streams(
        tx.query(include_str!("../sql/digest/every_stream.sql"), &[])
            .await?,
    ))
}

/// Reads the heads of `changed` and upserts their leaves into `digest_leaves` as sealed by
/// digest `seq`. Returns the changed leaves when `keep` (to merge into the cached tree).
async fn upsert_heads(
    tx: &deadpool_postgres::Transaction<'_>,
    changed: &[String],
    seq: i64,
    keep: bool,
) -> Result<Vec<CachedLeaf>, BuildError> {
    let mut heads = Vec::new();
    for chunk in changed.chunks(HEADS_PER_READ) {
        let rows = tx
            .query(include_str!("../sql/stream_heads.sql"), &[&chunk])
            .await?;
        let mut streams = Vec::with_capacity(rows.len());
        let mut versions = Vec::with_capacity(rows.len());
        let mut hashes = Vec::with_capacity(rows.len());
        let mut leaf_hashes = Vec::with_capacity(rows.len());
        for row in &rows {
            let stream: String = row.get(0);
            let Some(version) = row.get::<_, Option<i64>>(1) else {
                continue;
            };
            let hash = hash32(&stream, row.get(2))?;
            let head = Head {
                stream: stream.clone(),
                version: version as u64,
                hash,
            };
            let leaf_hash = head.leaf_hash();
            leaf_hashes.push(leaf_hash.to_vec());
            streams.push(stream);
            versions.push(version);
            hashes.push(hash.to_vec());
            if keep {
                heads.push(CachedLeaf {
                    stream: head.stream.into_boxed_str(),
                    version: version as u64,
                    leaf_hash,
                });
            }
        }
        tx.execute(
            include_str!("../sql/digest/upsert_leaves.sql"),
            &[&streams, &versions, &hashes, &leaf_hashes, &seq],
        )
        .await?;
    }
    Ok(heads)
}

/// What a digest sealed beside its statement: the streams it re-read, its checkpoint as
/// signed, and its index leaf.
struct Sealed<'a> {
    changed: usize,
    checkpoint: &'a Checkpoint,
    note: &'a SignedNote,
    index_leaf: &'a [u8; super::index::INDEX_LEAF_LEN],
}

/// Inserts digest `seq` and, in the same statement, its outbox row: the digest document
/// the relay publishes on `<prefix>digest`; then the checkpoint it sealed, as signed
/// (`checkpoint` and its `note`), into the checkpoints' room; the digests row keeps its index
/// leaf.
async fn insert_digest(
    tx: &deadpool_postgres::Transaction<'_>,
    seq: i64,
    digest: &SignedDigest,
    key: &DigestKey,
    sealed: Sealed<'_>,
) -> Result<(), BuildError> {
    let Sealed {
        changed,
        checkpoint,
        note,
        index_leaf,
    } = sealed;
    let mut document = DigestDocument::new(seq, digest, key.public_pem());
    document.checkpoint = Some(note.text());
    let statement = &digest.statement;
    tx.execute(
        include_str!("../sql/digest/insert_digest.sql"),
        &[
            &seq,
            &statement.root.to_vec(),
            &statement.time_micros,
            &(statement.stream_count as i64),
            &(statement.event_count as i64),
            &statement.previous.to_vec(),
            &digest.signature.to_vec(),
            &digest.hash().to_vec(),
            &key.public().as_bytes().to_vec(),
            &(changed as i64),
            &uuid::Uuid::now_v7(),
            &AGGREGATE_TYPE,
            &serde_json::to_vec(&document).expect("a digest document always serializes"),
            &statement.version(),
            &index_leaf.to_vec(),
        ],
    )
    .await?;
    super::checkpoint::insert(tx, seq, checkpoint, note).await?;
    Ok(())
}

/// Seals a digest every `interval` while something changed, until `shutdown`. Failures are
/// logged and retried on the next tick: a digest late is better than a service down.
pub async fn run(
    pool: Pool,
    key: Arc<DigestKey>,
    interval: std::time::Duration,
    cache: TreeCache,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(interval, shutdown);
    while every.tick().await {
        match build_cached(&pool, &key, &cache).await {
            Ok(Built::Sealed {
                seq,
                changed,
                digest,
            }) => tracing::info!(
                seq,
                changed,
                streams = digest.statement.stream_count,
                root = %crate::hex::hex(&digest.statement.root),
                "digest sealed"
            ),
            Ok(Built::Unchanged | Built::Busy) => {}
            Err(error) => tracing::warn!(%error, "digest not sealed; trying again next time"),
        }
    }
}

/// With digests off, clears the marks no builder will consume, leaving the one that makes
/// the first digest after digests are turned on re-read every stream. Returns the marks
/// removed.
pub async fn clear_marks(pool: &Pool) -> Result<u64, BuildError> {
    let mut client = pool.get().await?;
    // As the builder does: the clock readings of ended writers (migrations/V24).
    client
        .execute("SELECT prune_recording_clock()", &[])
        .await?;
    let tx = client.transaction().await?;
    let removed = tx
        .execute(
            include_str!("../sql/digest/forget_marks.sql"),
            &[&EVERY_STREAM],
        )
        .await?;
    if removed > 0 {
        tx.execute(
            include_str!("../sql/digest/mark_every_stream.sql"),
            &[&EVERY_STREAM],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(removed)
}

/// `ledger serve` without a digest key: clears the marks every `interval` until `shutdown`.
pub async fn clear_marks_until(
    pool: Pool,
    interval: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(interval, shutdown);
    while every.tick().await {
        if let Err(error) = clear_marks(&pool).await {
            tracing::warn!(%error, "cannot clear the digest marks; trying again next time");
        }
    }
}
