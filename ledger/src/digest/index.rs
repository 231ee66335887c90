//! The per-digest index of streams (issue 56, item 2): what binds a stream's head to what
//! the witnesses cosign, and what makes "no RA" a proven answer.
//!
//! # Why
//!
//! A digest's map of stream to head is signed by the ledger key alone; the witnesses cosign
//! only the log's size and root. So whoever holds the key can sign a fresh digest over
//! older heads, pair it with the real cosigned checkpoint and real inclusion paths, and both
//! verifiers accepted it (the omission forgery of the issue). And no proof can say a stream
//! does not exist. The index fixes both: a Merkle tree over every stream's entry, sorted by
//! name, whose root goes into the transparency log as the digest's last leaf, so the
//! witnesses cosign it with everything before it. A checkpoint counts only when its last
//! leaf is such an [`IndexLeaf`]; an entry's path to that root shows the head, and two
//! neighbouring entries show that a name has no entry at all.
//!
//! The builder ([`super::build`]) keeps the index beside the digest's tree and appends its
//! leaf after each digest's events; proofs ([`super::prove`]) carry the index leaf, its path
//! to the checkpoint's root and each stream's entry or absence; [`super::indexed`] checks
//! them; [`super::monitor`] recomputes the index from the log with [`Index::from_log`].
//!
//! transparency-dev's verifiable index (a map from keys to the positions of their log
//! entries, committed to the log and recomputed by monitors) is the model; a sorted tree
//! with neighbour proofs gives the same answers (presence, absence) with the RFC 9162 tree
//! the ledger already uses, and [`Index::from_log`] is the monitor's recomputation.
//!
//! # Byte layouts
//!
//! **Entry** (one per stream), hashed as an RFC 9162 leaf (`SHA-256(0x00 || entry)`):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | length L of the stream name in bytes |
//! | L | stream name, UTF-8 |
//! | 8 | the head version (the number of the stream's events) |
//! | 32 | the head event's hash |
//! | 8 | the head event's position in the log (0 for the first leaf) |
//! | 32 | the positions chain of the stream's events: `P_0` is 32 zero bytes, `P_v = SHA-256(P_(v-1) || position of version v)` (8 bytes) |
//!
//! **Order**: by stream name, comparing the UTF-8 bytes; no name twice.
//!
//! **Index leaf** (the digest's last log leaf, `SHA-256(0x00 || bytes)`; 80 bytes, so never
//! the 32 bytes of an event's leaf):
//!
//! | bytes | field |
//! |---|---|
//! | 24 | `ra-ledger index v1` and six zero bytes |
//! | 8 | the digest's number |
//! | 8 | the digest's time, microseconds since 1970 |
//! | 8 | the number of entries |
//! | 32 | the index's root |
//!
//! **Absence** of a name N: the size, and the entries just before and just after N with
//! their paths; their indices must be consecutive (or the one entry is the first or the
//! last, or the index is empty). RFC 9162 paths bind the index, so no entry can hide
//! between them.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::hexed::{Hex, HexHash};
use super::merkle::{self, Hash};
use crate::tlog::tree::Tree;

/// The first 24 bytes of an index leaf.
pub const INDEX_LEAF_PREFIX: &[u8; 24] = b"ra-ledger index v1\0\0\0\0\0\0";

/// One stream's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The stream's name.
    pub stream: String,
    /// Its head version (its number of events).
    pub version: u64,
    /// The head event's hash.
    pub head_hash: HexHash,
    /// The head event's position in the log.
    pub head_position: u64,
    /// The chain over its events' log positions ([`extend_positions`]).
    pub positions: HexHash,
}

impl IndexEntry {
    /// The entry's bytes (the module's layout).
    pub fn bytes(&self) -> Vec<u8> {
        let name = self.stream.as_bytes();
        let mut bytes = Vec::with_capacity(4 + name.len() + 80);
        bytes.extend_from_slice(&(name.len() as u32).to_be_bytes());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&self.version.to_be_bytes());
        bytes.extend_from_slice(&self.head_hash.0);
        bytes.extend_from_slice(&self.head_position.to_be_bytes());
        bytes.extend_from_slice(&self.positions.0);
        bytes
    }

    /// Its RFC 9162 leaf hash.
    pub fn leaf_hash(&self) -> Hash {
        merkle::leaf_hash(&self.bytes())
    }
}

/// `P_v` from `P_(v-1)` and the position of version v.
pub fn extend_positions(chain: &Hash, position: u64) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update(chain);
    hasher.update(position.to_be_bytes());
    hasher.finalize().into()
}

/// The chain over `positions`, versions 1 to n in order.
pub fn positions_chain(positions: &[u64]) -> Hash {
    positions.iter().fold([0; 32], |chain, position| {
        extend_positions(&chain, *position)
    })
}

/// The digest's last log leaf: the index's root under the digest's number and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLeaf {
    /// The digest's number.
    pub seq: i64,
    /// The digest's time, microseconds since 1970.
    pub time_micros: i64,
    /// The number of entries.
    pub entries: u64,
    /// The index's root.
    pub root: Hash,
}

/// The length of an index leaf's bytes.
pub const INDEX_LEAF_LEN: usize = 80;

impl IndexLeaf {
    /// Its 80 bytes.
    pub fn bytes(&self) -> [u8; INDEX_LEAF_LEN] {
        let mut bytes = [0; INDEX_LEAF_LEN];
        bytes[..24].copy_from_slice(INDEX_LEAF_PREFIX);
        bytes[24..32].copy_from_slice(&self.seq.to_be_bytes());
        bytes[32..40].copy_from_slice(&self.time_micros.to_be_bytes());
        bytes[40..48].copy_from_slice(&self.entries.to_be_bytes());
        bytes[48..].copy_from_slice(&self.root);
        bytes
    }

    /// Reads one from its bytes; `None` when they are not an index leaf.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != INDEX_LEAF_LEN || &bytes[..24] != INDEX_LEAF_PREFIX {
            return None;
        }
        let word = |at: usize| <[u8; 8]>::try_from(&bytes[at..at + 8]).expect("8 bytes");
        Some(Self {
            seq: i64::from_be_bytes(word(24)),
            time_micros: i64::from_be_bytes(word(32)),
            entries: u64::from_be_bytes(word(40)),
            root: bytes[48..].try_into().expect("32 bytes"),
        })
    }

    /// Its log leaf hash, `SHA-256(0x00 || bytes)`.
    pub fn leaf_hash(&self) -> Hash {
        merkle::leaf_hash(&self.bytes())
    }
}

/// Why an index could not be built, or a proof against one does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Two entries of one name.
    #[error("the index has stream {0} twice")]
    Duplicate(String),
    /// An entry's path does not lead to the root.
    #[error(
        "the index path of stream {stream} (entry {index} of {size}) does not lead to the \
         index root {root} the witnesses cosigned: its head is not the one the index holds"
    )]
    Path {
        /// The stream.
        stream: String,
        /// The entry's index.
        index: u64,
        /// The index's size.
        size: u64,
        /// The root, in hex.
        root: String,
    },
    /// A proof of presence of another stream.
    #[error("the index proof is of stream {found}, not of {asked}")]
    OtherStream {
        /// The stream asked about.
        asked: String,
        /// The stream the proof shows.
        found: String,
    },
    /// An absence proof whose neighbours do not bracket the name, or are not neighbours.
    #[error("the index proof does not show that stream {stream} is absent: {why}")]
    NotAbsent {
        /// The stream.
        stream: String,
        /// What does not hold.
        why: String,
    },
}

/// An entry with its path in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexPath {
    /// The entry.
    pub entry: IndexEntry,
    /// Its index in the sorted index.
    pub index: u64,
    /// Its RFC 9162 inclusion path.
    pub path: Vec<HexHash>,
}

/// The index's answer for one stream name: its entry, or the neighbours that show there is
/// none. `size` is the index's number of entries (the index leaf's `entries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexProof {
    /// The stream asked about.
    pub stream: String,
    /// The index's number of entries.
    pub size: u64,
    /// The stream's entry, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<IndexPath>,
    /// When absent: the entry just before the name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<IndexPath>,
    /// When absent: the entry just after the name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<IndexPath>,
}

/// A digest's index in memory: the entries sorted by name, and the tree of their leaf
/// hashes with every complete subtree kept, so that a digest that moves a few entries hashes
/// their paths only (and the entries after the first new one).
#[derive(Debug, Clone, Default)]
pub struct Index {
    entries: Vec<IndexEntry>,
    tree: Tree,
}

impl Index {
    /// The index of `entries`, in any order; a name twice is an error.
    pub fn new(mut entries: Vec<IndexEntry>) -> Result<Self, IndexError> {
        entries.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
        if let Some(twice) = entries
            .windows(2)
            .find(|pair| pair[0].stream == pair[1].stream)
        {
            return Err(IndexError::Duplicate(twice[0].stream.clone()));
        }
        let tree = Tree::from_leaf_hashes(entries.iter().map(IndexEntry::leaf_hash));
        Ok(Self { entries, tree })
    }

    /// The index the log gives, as a monitor recomputes it: `events` are the log's event
    /// leaves in log order, each `(position, stream, version, hash)`; index leaves are not
    /// among them (their positions are skipped). A version out of order is an error in
    /// the log, said by `Err` with the stream.
    pub fn from_log<'a>(
        events: impl IntoIterator<Item = (u64, &'a str, u64, Hash)>,
    ) -> Result<Self, String> {
        Self::default().extended(events)
    }

    /// This index with the log's next `events` (as [`Self::from_log`] takes them) applied:
    /// what the builder does with the events a digest appends. Only the streams they move
    /// are hashed again.
    pub fn extended<'a>(
        self,
        events: impl IntoIterator<Item = (u64, &'a str, u64, Hash)>,
    ) -> Result<Self, String> {
        let mut moved: std::collections::HashMap<&'a str, IndexEntry> = Default::default();
        for (position, stream, version, hash) in events {
            let entry = match moved.entry(stream) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(vacant) => {
                    vacant.insert(self.entry(stream).cloned().unwrap_or_else(|| IndexEntry {
                        stream: stream.to_owned(),
                        version: 0,
                        head_hash: Hex([0; 32]),
                        head_position: 0,
                        positions: Hex([0; 32]),
                    }))
                }
            };
            if version != entry.version + 1 {
                return Err(format!(
                    "stream {stream}: version {version} at log position {position} follows \
                     version {}",
                    entry.version
                ));
            }
            entry.version = version;
            entry.head_hash = Hex(hash);
            entry.head_position = position;
            entry.positions = Hex(extend_positions(&entry.positions.0, position));
        }
        Ok(self.merged(moved.into_values().collect()))
    }

    /// This index with `changes` replacing or added to its entries, in one pass over the
    /// entries; the tree hashes the replaced entries' paths, and again every entry from the
    /// first added one on (their places moved).
    fn merged(self, mut changes: Vec<IndexEntry>) -> Self {
        if changes.is_empty() {
            return self;
        }
        // Only heads that moved (no new stream): replaced in place, one path each.
        let places: Option<Vec<usize>> = changes
            .iter()
            .map(|change| self.place(&change.stream).ok())
            .collect();
        if let Some(places) = places {
            let mut index = self;
            let hashes: Vec<(u64, Hash)> = places
                .iter()
                .zip(&changes)
                .map(|(&at, change)| (at as u64, change.leaf_hash()))
                .collect();
            index.tree.set_many(hashes);
            for (at, change) in places.into_iter().zip(changes) {
                index.entries[at] = change;
            }
            return index;
        }
        changes.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
        let Self {
            entries: old,
            mut tree,
        } = self;
        let mut entries = Vec::with_capacity(old.len() + changes.len());
        let mut replaced = Vec::new();
        let mut first_added = None;
        let mut changes = changes.into_iter().peekable();
        for entry in old {
            while let Some(change) =
                changes.next_if(|change| change.stream.as_bytes() < entry.stream.as_bytes())
            {
                first_added.get_or_insert(entries.len());
                entries.push(change);
            }
            match changes.next_if(|change| change.stream == entry.stream) {
                Some(change) => {
                    replaced.push(entries.len());
                    entries.push(change);
                }
                None => entries.push(entry),
            }
        }
        for change in changes {
            first_added.get_or_insert(entries.len());
            entries.push(change);
        }
        let kept = first_added.unwrap_or(entries.len());
        tree.set_many(
            replaced
                .iter()
                .filter(|&&at| at < kept)
                .map(|&at| (at as u64, entries[at].leaf_hash())),
        );
        tree.truncate(kept as u64);
        for entry in &entries[kept..] {
            tree.push_hash(entry.leaf_hash());
        }
        Self { entries, tree }
    }

    /// The entry of `stream`, if it has one.
    pub fn entry(&self, stream: &str) -> Option<&IndexEntry> {
        self.place(stream).ok().map(|index| &self.entries[index])
    }

    /// Where `stream`'s entry is, or where it would go.
    fn place(&self, stream: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|entry| entry.stream.as_bytes().cmp(stream.as_bytes()))
    }

    /// The index leaf digest `seq` of `time_micros` appends for this index.
    pub fn leaf(&self, seq: i64, time_micros: i64) -> IndexLeaf {
        IndexLeaf {
            seq,
            time_micros,
            entries: self.entries.len() as u64,
            root: self.root(),
        }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, sorted by name.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// The root.
    pub fn root(&self) -> Hash {
        self.tree.root()
    }

    /// The first entry (in order) where `self` and `other` differ, by name: what a monitor
    /// names. `None` when they are the same.
    pub fn first_difference(&self, other: &Self) -> Option<String> {
        let mut ours = self.entries.iter().peekable();
        let mut theirs = other.entries.iter().peekable();
        loop {
            match (ours.peek(), theirs.peek()) {
                (None, None) => return None,
                (Some(a), None) => return Some(format!("stream {} only in the first", a.stream)),
                (None, Some(b)) => return Some(format!("stream {} only in the second", b.stream)),
                (Some(a), Some(b)) if a.stream != b.stream => {
                    let (first, which) = if a.stream.as_bytes() < b.stream.as_bytes() {
                        (a, "first")
                    } else {
                        (b, "second")
                    };
                    return Some(format!("stream {} only in the {which}", first.stream));
                }
                (Some(a), Some(b)) if a != b => {
                    return Some(format!(
                        "stream {}: version {} at log position {} against version {} at {}",
                        a.stream, a.version, a.head_position, b.version, b.head_position
                    ));
                }
                _ => {
                    ours.next();
                    theirs.next();
                }
            }
        }
    }

    fn path(&self, index: usize) -> IndexPath {
        IndexPath {
            entry: self.entries[index].clone(),
            index: index as u64,
            path: self
                .tree
                .inclusion_proof(index as u64, self.tree.size())
                .expect("an index in range")
                .into_iter()
                .map(Hex)
                .collect(),
        }
    }

    /// The proof of `stream`'s entry, or of its absence.
    pub fn prove(&self, stream: &str) -> IndexProof {
        let found = self
            .entries
            .binary_search_by(|entry| entry.stream.as_bytes().cmp(stream.as_bytes()));
        let mut proof = IndexProof {
            stream: stream.to_owned(),
            size: self.entries.len() as u64,
            entry: None,
            before: None,
            after: None,
        };
        match found {
            Ok(index) => proof.entry = Some(self.path(index)),
            Err(insert) => {
                proof.before = insert.checked_sub(1).map(|index| self.path(index));
                proof.after = (insert < self.entries.len()).then(|| self.path(insert));
            }
        }
        proof
    }
}

/// Checks `proof` against the index `root` of `size` entries: `Ok(Some(entry))` when it
/// proves the stream's entry, `Ok(None)` when it proves the stream has none.
pub fn verify<'a>(
    root: &Hash,
    proof: &'a IndexProof,
    stream: &str,
) -> Result<Option<&'a IndexEntry>, IndexError> {
    let size = proof.size;
    let holds = |at: &IndexPath| -> Result<(), IndexError> {
        let path: Vec<Hash> = at.path.iter().map(|hash| hash.0).collect();
        if merkle::verify_inclusion(&at.entry.leaf_hash(), at.index, size, &path, root) {
            Ok(())
        } else {
            Err(IndexError::Path {
                stream: at.entry.stream.clone(),
                index: at.index,
                size,
                root: crate::hex::hex(root),
            })
        }
    };
    if proof.stream != stream {
        return Err(IndexError::OtherStream {
            asked: stream.to_owned(),
            found: proof.stream.clone(),
        });
    }
    if let Some(found) = &proof.entry {
        if found.entry.stream != stream {
            return Err(IndexError::OtherStream {
                asked: stream.to_owned(),
                found: found.entry.stream.clone(),
            });
        }
        holds(found)?;
        return Ok(Some(&found.entry));
    }
    let not_absent = |why: String| IndexError::NotAbsent {
        stream: stream.to_owned(),
        why,
    };
    let name = stream.as_bytes();
    match (&proof.before, &proof.after) {
        (None, None) if size == 0 => {
            if *root != merkle::empty_root() {
                return Err(not_absent("an empty index has another root".into()));
            }
        }
        (None, None) => return Err(not_absent(format!("no neighbour of {size} entries"))),
        (Some(before), after) => {
            holds(before)?;
            if before.entry.stream.as_bytes() >= name {
                return Err(not_absent(format!(
                    "the entry before, {}, does not sort before it",
                    before.entry.stream
                )));
            }
            match after {
                Some(after) => {
                    neighbour_after(after, before.index + 1, name, &holds).map_err(not_absent)?
                }
                None if before.index + 1 == size => {}
                None => {
                    return Err(not_absent(format!(
                        "the entry before is {} of {size}, not the last, and no entry after",
                        before.index
                    )));
                }
            }
        }
        (None, Some(after)) => neighbour_after(after, 0, name, &holds).map_err(not_absent)?,
    }
    Ok(None)
}

/// The entry after a name: at `index`, on a path that holds, and sorting after the name.
fn neighbour_after(
    after: &IndexPath,
    index: u64,
    name: &[u8],
    holds: &impl Fn(&IndexPath) -> Result<(), IndexError>,
) -> Result<(), String> {
    holds(after).map_err(|error| error.to_string())?;
    if after.index != index {
        return Err(format!(
            "the entry after is at {}, not at {index}: entries between them are not shown",
            after.index
        ));
    }
    if after.entry.stream.as_bytes() <= name {
        return Err(format!(
            "the entry after, {}, does not sort after it",
            after.entry.stream
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
