//! The transparency log and the digest's tree in memory (issue 58, item 3: they were in
//! `build.rs`, which `prove`, `cosign`, the service and the bench reached into for them):
//! the [`TreeCache`] a builder keeps of the last digest it sealed, shared with the proofs;
//! the [`SealedLog`] of a checkpoint, that tree or read from the database; and reading and
//! appending the log's leaves. [`super::build`] seals digests with them.

use std::sync::{Arc, Mutex};

use super::index::Index;
use super::merkle::{self, Hash};
use crate::tlog::tree::Tree;

/// Reading what the digests sealed (the log, the leaves, the newest digest) failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A statement failed.
    #[error("digest: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The database holds a head hash that is not 32 bytes.
    #[error("digest: stream {0} has a head hash that is not 32 bytes")]
    BadHash(String),
    /// The log's events do not follow each other in their streams.
    #[error("digest: the transparency log itself: {0}")]
    Broken(String),
}

/// The leaves as the last digest this process sealed left them, so that the next digest
/// reads only the changed streams and not every leaf again. It is used only while the
/// newest digest in the database is still the one it describes (same number and root);
/// otherwise (another replica sealed one, a restart) the leaves are read from
/// `digest_leaves` once and the cache starts over.
///
/// Cloning it shares it: `ledger serve` gives the same one to the builder and to the proofs,
/// which take their Merkle paths from it instead of reading every leaf.
#[derive(Debug, Clone)]
pub struct TreeCache(Arc<Mutex<Option<Arc<CachedTree>>>>, Arc<str>);

impl Default for TreeCache {
    fn default() -> Self {
        Self::with_origin(crate::tlog::DEFAULT_ORIGIN)
    }
}

impl TreeCache {
    /// An empty cache of a builder whose checkpoints name the log `origin`.
    pub fn with_origin(origin: &str) -> Self {
        Self(Arc::default(), origin.into())
    }

    /// The log's origin, the first line of its checkpoints.
    pub fn origin(&self) -> &str {
        &self.1
    }

    /// The newest tree this process sealed, if any.
    pub fn newest(&self) -> Option<Arc<CachedTree>> {
        self.slot().clone()
    }

    /// The digest the cached leaves describe, if any.
    pub fn seq(&self) -> Option<i64> {
        self.slot().as_ref().map(|tree| tree.seq)
    }

    /// The cached tree, if it is the one of digest `seq` with `root`.
    pub fn tree_of(&self, seq: i64, root: &Hash) -> Option<Arc<CachedTree>> {
        self.slot()
            .as_ref()
            .filter(|tree| tree.seq == seq && tree.root == *root)
            .cloned()
    }

    pub(super) fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<CachedTree>>> {
        // Only ever replaced whole: a panic elsewhere cannot leave it half-written.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A digest's tree, in memory.
#[derive(Debug, Clone)]
pub struct CachedTree {
    pub(super) seq: i64,
    pub(super) root: Hash,
    pub(super) event_count: u64,
    /// Sorted by stream name bytes: the tree's order.
    pub(super) leaves: Vec<CachedLeaf>,
    /// The leaves' hashes, in the same order.
    pub(super) hashes: Vec<Hash>,
    /// The transparency log as this digest's checkpoint sealed it, its index leaf last.
    pub(super) log: Tree,
    /// The index of every stream's head and log positions, whose leaf ends the log.
    pub(super) index: Index,
}

impl CachedTree {
    /// The digest's number.
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// The transparency log its checkpoint sealed.
    pub fn log(&self) -> &Tree {
        &self.log
    }

    /// The index whose leaf ends that log.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The index of `stream`'s leaf and its inclusion path, if the tree has it.
    pub fn path(&self, stream: &str) -> Option<(usize, Vec<Hash>)> {
        let index = self
            .leaves
            .binary_search_by(|leaf| leaf.stream.as_bytes().cmp(stream.as_bytes()))
            .ok()?;
        Some((index, merkle::inclusion_path(&self.hashes, index)?))
    }
}

/// One leaf of a digest's tree: a stream's head.
#[derive(Debug, Clone)]
pub(super) struct CachedLeaf {
    pub(super) stream: Box<str>,
    pub(super) version: u64,
    pub(super) leaf_hash: Hash,
}

/// A checkpoint's log: shared with the builder's tree when it is that one (no copy of a
/// million leaves per use), else read from the database.
#[derive(Debug, Clone)]
pub enum SealedLog {
    /// The builder's tree in memory.
    Cached(Arc<CachedTree>),
    /// Read from `digest_leaf_changes`, `events` and `digests`, with the index recomputed
    /// from it.
    Read(Arc<(Tree, Index)>),
}

impl SealedLog {
    /// The log of digest `seq`'s checkpoint.
    pub async fn of(
        client: &impl deadpool_postgres::GenericClient,
        cache: &TreeCache,
        seq: i64,
    ) -> Result<Self, LogError> {
        match cache.newest().filter(|tree| tree.seq == seq) {
            Some(tree) => Ok(Self::Cached(tree)),
            None => Ok(Self::Read(Arc::new(read_indexed(client, seq).await?))),
        }
    }

    /// The tree.
    pub fn tree(&self) -> &Tree {
        match self {
            Self::Cached(cached) => &cached.log,
            Self::Read(read) => &read.0,
        }
    }

    /// The index of the streams' heads as of that checkpoint.
    pub fn index(&self) -> &Index {
        match self {
            Self::Cached(cached) => &cached.index,
            Self::Read(read) => &read.1,
        }
    }
}

/// Appends to `log` the event leaves digest `seq` seals (`sql/tlog/log_appended.sql`) and
/// moves `index` past them; the caller appends the index leaf.
pub(super) async fn append_log(
    tx: &deadpool_postgres::Transaction<'_>,
    log: &mut Tree,
    index: Index,
    seq: i64,
) -> Result<Index, LogError> {
    let rows = tx
        .query(include_str!("../sql/tlog/log_appended.sql"), &[&seq])
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let hash = hash32("a log leaf", row.get(2))?;
        events.push((
            log.size(),
            row.get::<_, &str>(0),
            row.get::<_, i64>(1) as u64,
            hash,
        ));
        log.push_hash(merkle::leaf_hash(&hash));
    }
    index.extended(events).map_err(LogError::Broken)
}

/// The whole transparency log up to digest `seq` with the index its events give
/// (`sql/tlog/log_entries.sql`): an event's leaf is `SHA-256(0x00 || event hash)`, an index
/// leaf's `SHA-256(0x00 || its 80 bytes)`.
pub async fn read_indexed(
    client: &impl deadpool_postgres::GenericClient,
    seq: i64,
) -> Result<(Tree, Index), LogError> {
    let rows = client
        .query(include_str!("../sql/tlog/log_entries.sql"), &[&seq])
        .await?;
    let mut log = Tree::new();
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let leaf: &[u8] = row.get(2);
        if let Some(stream) = row.get::<_, Option<&str>>(0) {
            let hash = hash32("a log leaf", leaf.to_vec())?;
            events.push((log.size(), stream, row.get::<_, i64>(1) as u64, hash));
        }
        log.push_hash(merkle::leaf_hash(leaf));
    }
    let index = Index::from_log(events).map_err(LogError::Broken)?;
    Ok((log, index))
}

/// The whole transparency log up to digest `seq` ([`read_indexed`]'s tree): a leaf is
/// `SHA-256(0x00 || event hash)`, or `SHA-256(0x00 || the index leaf's 80 bytes)` after each
/// digest's events.
pub async fn read_log(
    client: &impl deadpool_postgres::GenericClient,
    seq: i64,
) -> Result<Tree, LogError> {
    Ok(read_indexed(client, seq).await?.0)
}

/// Every leaf from `digest_leaves`, in the tree's order, and the events they count.
pub(super) async fn read_leaves(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<(Vec<CachedLeaf>, u64), LogError> {
    let rows = tx
        .query(include_str!("../sql/digest/leaves.sql"), &[])
        .await?;
    let mut event_count = 0u64;
    let mut leaves = Vec::with_capacity(rows.len());
    for row in rows {
        let stream: String = row.get(0);
        let version = row.get::<_, i64>(1) as u64;
        event_count += version;
        leaves.push(CachedLeaf {
            leaf_hash: hash32(&stream, row.get(2))?,
            stream: stream.into_boxed_str(),
            version,
        });
    }
    Ok((leaves, event_count))
}

/// The cached leaves with `changes` applied (replaced or inserted in order), in one pass,
/// and the events they count.
pub(super) fn merge(
    old: Vec<CachedLeaf>,
    mut changes: Vec<CachedLeaf>,
    mut event_count: u64,
) -> (Vec<CachedLeaf>, u64) {
    changes.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
    let mut merged = Vec::with_capacity(old.len() + changes.len());
    let mut changes = changes.into_iter().peekable();
    for leaf in old {
        while let Some(change) =
            changes.next_if(|change| change.stream.as_bytes() < leaf.stream.as_bytes())
        {
            event_count += change.version;
            merged.push(change);
        }
        match changes.next_if(|change| change.stream == leaf.stream) {
            Some(change) => {
                event_count = event_count - leaf.version + change.version;
                merged.push(change);
            }
            None => merged.push(leaf),
        }
    }
    for change in changes {
        event_count += change.version;
        merged.push(change);
    }
    (merged, event_count)
}

pub(super) fn hash32(what: &str, bytes: Vec<u8>) -> Result<Hash, LogError> {
    bytes
        .try_into()
        .map_err(|_| LogError::BadHash(what.to_owned()))
}
