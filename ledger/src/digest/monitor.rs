//! `ledger digest monitor` (issue 56, item 2): recomputes, from the transparency log alone,
//! the index of every stream's head and its events' log positions ([`Index::from_log`]),
//! and says whether what the ledger signed agrees with it.
//!
//! Why: the digest's map of stream to head is signed by the ledger key alone, while the
//! witnesses cosign the log. A key holder could sign a digest over older heads (the
//! omission forgery of the issue); the log, which the witnesses hold the ledger to, still
//! has the newer events. The monitor reads the log as digest N sealed it, checks that it
//! reproduces checkpoint N's size and root (so it is the log the witnesses cosigned), and
//! that the heads it gives are, stream for stream, the leaves digest N signed. It exits 1
//! naming the first difference.
//!
//! It also checks the digest's index leaf, the log's last leaf, which the witnesses cosign
//! with it: it must commit to the index the log gives ([`super::index`]), the one every
//! proof's index part is checked against.

use std::collections::BTreeMap;

use deadpool_postgres::GenericClient;

use super::index::{Index, IndexLeaf};
use super::log::hash32;
use super::merkle::{self, Hash};
use super::signed::Head;
use crate::tlog::tree::Tree;

/// Why the monitor could not judge.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// A statement failed.
    #[error("monitor: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No such digest.
    #[error(
        "monitor: no digest {0} in this database (digests are sealed by `ledger serve` with a \
         digest key; name an existing one with --seq, or leave it out for the newest)"
    )]
    NoDigest(String),
    /// A stored hash is not 32 bytes.
    #[error("monitor: {0} is not 32 bytes")]
    BadHash(String),
    /// The log's events do not follow each other in their streams.
    #[error("monitor: the transparency log itself: {0}")]
    Broken(String),
}

impl From<super::log::LogError> for MonitorError {
    fn from(error: super::log::LogError) -> Self {
        match error {
            super::log::LogError::Database(error) => Self::Database(error),
            super::log::LogError::BadHash(what) => Self::BadHash(what),
            super::log::LogError::Broken(why) => Self::Broken(why),
        }
    }
}

/// What the monitor found for one digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The digest checked.
    pub seq: i64,
    /// The log's leaves as that digest sealed them.
    pub log_size: u64,
    /// The streams the log gives.
    pub streams: usize,
    /// The root of the index recomputed from the log.
    pub index_root: Hash,
    /// The first difference, if any: the ledger's index is not honest.
    pub difference: Option<String>,
}

/// The digest and checkpoint the monitor compares with.
struct Signed {
    seq: i64,
    root: Hash,
    stream_count: u64,
    event_count: u64,
    checkpoint: Option<(u64, Hash)>,
    /// The index leaf it sealed (none before V25).
    index_leaf: Option<Vec<u8>>,
}

/// Checks digest `seq` (the newest when `None`) against the log it sealed.
pub async fn monitor(
    client: &impl GenericClient,
    seq: Option<i64>,
) -> Result<Verdict, MonitorError> {
    let signed = read_signed(client, seq).await?;
    let (log, index, difference) = match super::log::read_indexed(client, signed.seq).await {
        Ok((log, index)) => {
            let difference = judge(client, &signed, &log, &index).await?;
            (log, index, difference)
        }
        Err(super::log::LogError::Broken(broken)) => (
            Tree::new(),
            Index::default(),
            Some(format!("the log itself: {broken}")),
        ),
        Err(error) => return Err(error.into()),
    };
    Ok(Verdict {
        seq: signed.seq,
        log_size: log.size(),
        streams: index.len(),
        index_root: index.root(),
        difference,
    })
}

async fn read_signed(
    client: &impl GenericClient,
    seq: Option<i64>,
) -> Result<Signed, MonitorError> {
    let row = client
        .query_opt(include_str!("../sql/digest/monitored_digest.sql"), &[&seq])
        .await?
        .ok_or_else(|| MonitorError::NoDigest(seq.map_or("at all".into(), |s| s.to_string())))?;
    let checkpoint = match row.get::<_, Option<i64>>(4) {
        Some(size) => Some((size as u64, hash32("a checkpoint root", row.get(5))?)),
        None => None,
    };
    Ok(Signed {
        seq: row.get(0),
        root: hash32("a digest root", row.get(1))?,
        stream_count: row.get::<_, i64>(2) as u64,
        event_count: row.get::<_, i64>(3) as u64,
        checkpoint,
        index_leaf: row.get(6),
    })
}

/// The first difference between what the ledger signed and what the log gives.
async fn judge(
    client: &impl GenericClient,
    signed: &Signed,
    log: &Tree,
    index: &Index,
) -> Result<Option<String>, MonitorError> {
    if let Some((size, root)) = signed.checkpoint
        && (size != log.size() || root != log.root())
    {
        return Ok(Some(format!(
            "the log as digest {} sealed it ({} leaves, root {}) is not checkpoint {}'s \
             (size {size}, root {}): the log was rewritten after the witnesses saw it",
            signed.seq,
            log.size(),
            crate::hex::hex(&log.root()),
            signed.seq,
            crate::hex::hex(&root)
        )));
    }
    if let Some(stored) = &signed.index_leaf {
        let recomputed = index.leaf(signed.seq, 0);
        let leaf = IndexLeaf::parse(stored);
        let honest = leaf.is_some_and(|leaf| {
            leaf.seq == signed.seq
                && leaf.entries == recomputed.entries
                && leaf.root == recomputed.root
        });
        if !honest {
            return Ok(Some(format!(
                "the index leaf digest {} sealed (the log's last leaf) does not commit to the \
                 index the log gives ({} streams, root {}): the ledger's index is not honest",
                signed.seq,
                recomputed.entries,
                crate::hex::hex(&recomputed.root)
            )));
        }
    }
    let heads: Vec<Hash> = index
        .entries()
        .iter()
        .map(|entry| head_of(entry).leaf_hash())
        .collect();
    let events: u64 = index.entries().iter().map(|entry| entry.version).sum();
    if merkle::root(&heads) == signed.root
        && index.len() as u64 == signed.stream_count
        && events == signed.event_count
    {
        return Ok(None);
    }
    // The root is the judge; naming the stream is the best the tables allow: the builder's
    // map (`digest_leaves`, what it signed last, when this is the newest digest), else the
    // changes each digest recorded.
    let newest: i64 = client
        .query_one("SELECT max(seq) FROM digests", &[])
        .await?
        .get(0);
    let mut named = None;
    if newest == signed.seq {
        named = first_difference(signed.seq, index, &builders_map(client).await?);
    }
    if named.is_none() {
        named = first_difference(signed.seq, index, &sealed_heads(client, signed.seq).await?);
    }
    Ok(Some(named.unwrap_or_else(|| {
        format!(
            "digest {}'s root, stream count or event count is not the log's, though no \
             stream's head differs in the tables: the digest's statement was altered",
            signed.seq
        )
    })))
}

/// The builder's map of the newest digest, `digest_leaves`, by stream.
async fn builders_map(
    client: &impl GenericClient,
) -> Result<BTreeMap<String, (u64, Hash)>, MonitorError> {
    let mut map = BTreeMap::new();
    for row in client
        .query("SELECT stream, version, hash FROM digest_leaves", &[])
        .await?
    {
        let stream: String = row.get(0);
        let hash = hash32(&stream, row.get(2))?;
        map.insert(stream, (row.get::<_, i64>(1) as u64, hash));
    }
    Ok(map)
}

fn head_of(entry: &super::index::IndexEntry) -> Head {
    Head {
        stream: entry.stream.clone(),
        version: entry.version,
        hash: entry.head_hash.0,
    }
}

/// The heads digest `seq` signed, by stream (`digest_leaf_changes`, the last change of each
/// stream up to it).
async fn sealed_heads(
    client: &impl GenericClient,
    seq: i64,
) -> Result<BTreeMap<String, (u64, Hash)>, MonitorError> {
    let mut sealed = BTreeMap::new();
    for row in client
        .query(
            include_str!("../sql/digest/sealed_leaves.sql"),
            &[&0i64, &seq],
        )
        .await?
    {
        let stream: String = row.get(0);
        let hash = hash32(&stream, row.get(2))?;
        sealed.insert(stream, (row.get::<_, i64>(1) as u64, hash));
    }
    Ok(sealed)
}

/// Names the first stream (by name bytes) whose signed head is not the log's; `None` when
/// every one agrees.
pub fn first_difference(
    seq: i64,
    index: &Index,
    sealed: &BTreeMap<String, (u64, Hash)>,
) -> Option<String> {
    let mut names: Vec<&str> = index
        .entries()
        .iter()
        .map(|entry| entry.stream.as_str())
        .chain(sealed.keys().map(String::as_str))
        .collect();
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names.dedup();
    for name in names {
        let logged = index
            .entries()
            .binary_search_by(|entry| entry.stream.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|at| &index.entries()[at]);
        match (logged, sealed.get(name)) {
            (Some(entry), Some((version, hash)))
                if entry.version == *version && entry.head_hash.0 == *hash => {}
            (Some(entry), Some((version, _))) => {
                return Some(format!(
                    "stream {name}: digest {seq} signed version {version} as its head; the log \
                     has version {} at position {}",
                    entry.version, entry.head_position
                ));
            }
            (Some(entry), None) => {
                return Some(format!(
                    "stream {name}: in the log (version {} at position {}), not in digest {seq}",
                    entry.version, entry.head_position
                ));
            }
            (None, Some((version, _))) => {
                return Some(format!(
                    "stream {name}: digest {seq} signed version {version}; the log has none of \
                     its events"
                ));
            }
            (None, None) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_stream_whose_signed_head_is_not_the_logs_is_named() {
        let log = [
            (0, "a", 1, [1; 32]),
            (1, "b", 1, [2; 32]),
            (2, "b", 2, [3; 32]),
        ];
        let index = Index::from_log(log).unwrap();
        let honest: BTreeMap<String, (u64, Hash)> =
            [("a".into(), (1, [1; 32])), ("b".into(), (2, [3; 32]))].into();
        assert_eq!(first_difference(4, &index, &honest), None);
        let mut older = honest.clone();
        older.insert("b".into(), (1, [2; 32]));
        assert_eq!(
            first_difference(4, &index, &older).unwrap(),
            "stream b: digest 4 signed version 1 as its head; the log has version 2 at position 2"
        );
        let mut omitted = honest.clone();
        omitted.remove("a");
        assert_eq!(
            first_difference(4, &index, &omitted).unwrap(),
            "stream a: in the log (version 1 at position 0), not in digest 4"
        );
        let mut invented = honest;
        invented.insert("0".into(), (1, [9; 32]));
        assert_eq!(
            first_difference(4, &index, &invented).unwrap(),
            "stream 0: digest 4 signed version 1; the log has none of its events"
        );
    }
}
