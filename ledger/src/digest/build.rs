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

use super::log::{
    CachedLeaf, CachedTree, LogError, TreeCache, append_log, hash32, merge, read_leaves, read_log,
};
use super::merkle::Hash;
use super::{DigestDocument, DigestKey, Head, SignedDigest, Statement, merkle};
use crate::older_transactions::{WaitError, wait_for_older};
use crate::tlog::note::{Checkpoint, SignedNote, sign_checkpoint};

/// Advisory lock key of the digest builder ("RALDIGST" in ASCII).
pub const DIGEST_LOCK_KEY: i64 = 0x5241_4c44_4947_5354;

/// The outbox's aggregate type of digests: the relay publishes them to
/// `<topic prefix>digest`.
pub const AGGREGATE_TYPE: &str = "digest";

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
        .query_one("SELECT pg_try_advisory_lock($1)", &[&DIGEST_LOCK_KEY])
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
        .execute("SELECT pg_advisory_unlock($1)", &[&DIGEST_LOCK_KEY])
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
        .query_one(
            "SELECT clock_timestamp(), EXISTS (SELECT 1 FROM digest_dirty) \
                    OR NOT EXISTS (SELECT 1 FROM digests)",
            &[],
        )
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
        .query_opt(
            "SELECT seq, hash, root, event_count FROM digests ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await?;
    if changed.is_empty() && last.is_some() {
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
    let (leaves, event_count, log) = match tree {
        Some(tree) => {
            // Copied only if a proof still holds it.
            let tree = Arc::try_unwrap(tree).unwrap_or_else(|shared| (*shared).clone());
            let mut log = tree.log;
            append_log(&tx, &mut log, seq).await?;
            let (leaves, event_count) = merge(tree.leaves, heads, tree.event_count);
            (leaves, event_count, log)
        }
        None => {
            let (leaves, event_count) = read_leaves(&tx).await?;
            let log = read_log(&tx, seq).await?;
            (leaves, event_count, log)
        }
    };
    if log.size() != event_count {
        // Honest history keeps them equal: every sealed event is one leaf. Sealed anyway
        // (the witnesses judge the log), and said loudly.
        tracing::error!(
            seq,
            log_size = log.size(),
            event_count,
            "the transparency log's size is not the digest's event count: the sealed history was changed"
        );
    }
    let checkpoint = sign_checkpoint(
        key.public(),
        |message| key.sign_bytes(message),
        &Checkpoint {
            origin: origin.to_owned(),
            size: log.size(),
            root: log.root(),
        },
    );
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
    insert_digest(&tx, seq, &digest, key, changed.len(), &checkpoint).await?;
    // Exactly the rows this snapshot shows: later appends keep theirs.
    tx.execute("DELETE FROM digest_dirty", &[]).await?;
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
    });
    let built = Built::Sealed {
        seq,
        changed: changed.len(),
        digest,
    };
    Ok((built, Some(tree)))
}

/// The streams whose head moved since the last digest (`digest_dirty`), or every stream
/// when the marks were cleared while no builder ran.
async fn changed_streams(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<Vec<String>, BuildError> {
    let streams = |rows: Vec<tokio_postgres::Row>| rows.iter().map(|row| row.get(0)).collect();
    let changed: Vec<String> = streams(
        tx.query("SELECT DISTINCT stream FROM digest_dirty", &[])
            .await?,
    );
    if !changed.iter().any(|stream| stream == EVERY_STREAM) {
        return Ok(changed);
    }
    // Marks were cleared while no builder ran (or none was ever taken): re-read all.
    Ok(streams(
        tx.query("SELECT DISTINCT stream FROM events", &[]).await?,
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

/// Inserts digest `seq` and, in the same statement, its outbox row: the digest document
/// the relay publishes on `<prefix>digest`.
async fn insert_digest(
    tx: &deadpool_postgres::Transaction<'_>,
    seq: i64,
    digest: &SignedDigest,
    key: &DigestKey,
    changed: usize,
    checkpoint: &SignedNote,
) -> Result<(), BuildError> {
    let mut document = DigestDocument::new(seq, digest, key.public_pem());
    document.checkpoint = Some(checkpoint.text());
    let sealed = Checkpoint::parse(&checkpoint.body).expect("a checkpoint this builder wrote");
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
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO checkpoints (digest_seq, size, root, note) VALUES ($1, $2, $3, $4)",
        &[
            &seq,
            &(sealed.size as i64),
            &sealed.root.to_vec(),
            &checkpoint.text(),
        ],
    )
    .await?;
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

/// The newest digest's document, if any.
pub async fn latest(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Option<DigestDocument>, BuildError> {
    let Some(row) = client
        .query_opt(
            "SELECT d.seq, d.root, d.time_micros, d.stream_count, d.event_count, d.previous, \
                    d.signature, d.public_key, d.message_version, c.note \
             FROM digests d LEFT JOIN checkpoints c ON c.digest_seq = d.seq \
             ORDER BY d.seq DESC LIMIT 1",
            &[],
        )
        .await?
    else {
        return Ok(None);
    };
    let seq: i64 = row.get(0);
    let digest = SignedDigest {
        statement: Statement {
            // Digests sealed before the number was signed are version 1.
            seq: (row.get::<_, i16>(8) >= 2).then_some(seq),
            root: hash32("root", row.get(1))?,
            time_micros: row.get(2),
            stream_count: row.get::<_, i64>(3) as u64,
            event_count: row.get::<_, i64>(4) as u64,
            previous: hash32("previous", row.get(5))?,
        },
        signature: row
            .get::<_, Vec<u8>>(6)
            .try_into()
            .map_err(|_| BuildError::BadHash(format!("signature of digest {seq}")))?,
    };
    let public: [u8; 32] = hash32("public key", row.get(7))?;
    let pem = ed25519_dalek::VerifyingKey::from_bytes(&public)
        .ok()
        .and_then(|key| {
            use ed25519_dalek::pkcs8::EncodePublicKey;
            key.to_public_key_pem(Default::default()).ok()
        })
        .ok_or_else(|| BuildError::BadHash(format!("public key of digest {seq}")))?;
    let mut document = DigestDocument::new(seq, &digest, pem);
    document.checkpoint = row.get(9);
    Ok(Some(document))
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
            "DELETE FROM digest_dirty WHERE stream <> $1",
            &[&EVERY_STREAM],
        )
        .await?;
    if removed > 0 {
        tx.execute(
            "INSERT INTO digest_dirty (stream) SELECT $1 \
             WHERE NOT EXISTS (SELECT 1 FROM digest_dirty WHERE stream = $1)",
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
