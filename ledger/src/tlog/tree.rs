//! The log's Merkle tree, append-only, as RFC 6962 section 2.1 (and RFC 9162 section 2.1)
//! define it, with its inclusion and consistency proofs and their checks. Pure: no I/O.
//!
//! The hashes (leaf `SHA-256(0x00 || leaf)`, node `SHA-256(0x01 || left || right)`, the
//! empty tree `SHA-256()`) are defined here once; a digest's tree of stream heads
//! ([`crate::digest::merkle`]) uses the same, so both are the same kind of tree.
//!
//! [`Tree`] keeps every complete subtree's hash, level by level (about two hashes per
//! leaf), so an append, a root, an inclusion path and a consistency proof each cost
//! O(log² n) hashes at most, never a pass over the leaves: one checkpoint per digest
//! stays cheap at millions of leaves.
//!
//! The rules the checks apply, in order (RFC 9162 sections 2.1.3.2 and 2.1.4.2):
//! 1. an inclusion proof of leaf `i` in a tree of `n` leaves needs `i < n`, and exactly
//!    the siblings from the leaf to the root;
//! 2. a consistency proof from `m` to `n` needs `m <= n`; from `0` or to the same size it
//!    is empty (for the same size, the two roots must be equal);
//! 3. otherwise the proof rebuilds both roots from the same hashes: the old root from the
//!    hashes left of `m`, the new one from all of them, and both must match.

use sha2::{Digest as _, Sha256};

/// A SHA-256 hash.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 || leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(leaf);
    hasher.finalize().into()
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0x01]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The hash of the empty tree, `SHA-256()`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two smaller than `n` (n > 1).
fn split(n: u64) -> u64 {
    debug_assert!(n > 1);
    1 << (63 - (n - 1).leading_zeros())
}

/// An append-only Merkle tree that keeps the hash of every complete subtree.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// `levels[l][i]`: the hash of leaves `[i·2^l, (i+1)·2^l)`; `levels[0]` the leaf hashes.
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tree of these leaf hashes, in order.
    pub fn from_leaf_hashes(hashes: impl IntoIterator<Item = Hash>) -> Self {
        let mut tree = Self::new();
        for hash in hashes {
            tree.push_hash(hash);
        }
        tree
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |leaves| leaves.len() as u64)
    }

    /// Appends a leaf given by its bytes.
    pub fn push(&mut self, leaf: &[u8]) {
        self.push_hash(leaf_hash(leaf));
    }

    /// Appends a leaf given by its leaf hash (`SHA-256(0x00 || leaf)`).
    pub fn push_hash(&mut self, hash: Hash) {
        let mut hash = hash;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            self.levels[level].push(hash);
            let count = self.levels[level].len();
            if count % 2 == 1 {
                return;
            }
            hash = node_hash(
                &self.levels[level][count - 2],
                &self.levels[level][count - 1],
            );
            level += 1;
        }
    }

    /// The index of the first leaf with this leaf hash: a pass over the leaves (a few
    /// milliseconds at a million).
    pub fn position(&self, hash: &Hash) -> Option<u64> {
        self.levels
            .first()?
            .iter()
            .position(|leaf| leaf == hash)
            .map(|index| index as u64)
    }

    /// Replaces the hash of leaf `index` (below the size) and of the complete subtrees above
    /// it: one hash per level, not a pass over the leaves.
    pub fn set(&mut self, index: u64, hash: Hash) {
        self.set_many([(index, hash)]);
    }

    /// [`Self::set`] for many leaves at once: each stored subtree above them is hashed
    /// once, however many of the leaves it holds.
    pub fn set_many(&mut self, leaves: impl IntoIterator<Item = (u64, Hash)>) {
        let mut dirty: Vec<usize> = Vec::new();
        for (index, hash) in leaves {
            self.levels[0][index as usize] = hash;
            dirty.push(index as usize);
        }
        let mut level = 0;
        while !dirty.is_empty() && level + 1 < self.levels.len() {
            let mut parents: Vec<usize> = dirty
                .iter()
                .map(|at| at / 2)
                .filter(|parent| *parent < self.levels[level + 1].len())
                .collect();
            parents.sort_unstable();
            parents.dedup();
            for &parent in &parents {
                let (left, right) = (
                    self.levels[level][2 * parent],
                    self.levels[level][2 * parent + 1],
                );
                self.levels[level + 1][parent] = node_hash(&left, &right);
            }
            dirty = parents;
            level += 1;
        }
    }

    /// Keeps its first `size` leaves (and the complete subtrees within them).
    pub fn truncate(&mut self, size: u64) {
        for (level, hashes) in self.levels.iter_mut().enumerate() {
            hashes.truncate((size >> level) as usize);
        }
    }

    /// The index of the first leaf with each of these leaf hashes, in one pass over the
    /// leaves however many are asked.
    pub fn positions(&self, hashes: &[Hash]) -> Vec<Option<u64>> {
        let mut found: std::collections::HashMap<&Hash, Option<u64>> =
            hashes.iter().map(|hash| (hash, None)).collect();
        let mut missing = found.len();
        for (index, leaf) in self.levels.first().into_iter().flatten().enumerate() {
            if missing == 0 {
                break;
            }
            if let Some(slot @ None) = found.get_mut(leaf) {
                *slot = Some(index as u64);
                missing -= 1;
            }
        }
        hashes.iter().map(|hash| found[hash]).collect()
    }

    /// The leaf hash at `index`.
    pub fn leaf(&self, index: u64) -> Option<Hash> {
        self.levels.first()?.get(index as usize).copied()
    }

    /// The root of the tree of its first `size` leaves (`MTH(D[0:size])`), `None` when it
    /// has fewer.
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        (size <= self.size()).then(|| self.hash(0, size))
    }

    /// The root of every leaf.
    pub fn root(&self) -> Hash {
        self.hash(0, self.size())
    }

    /// `MTH(D[lo:hi])`. Ranges that proofs ask for start at a multiple of their left
    /// subtree's size, so their complete subtrees are stored.
    fn hash(&self, lo: u64, hi: u64) -> Hash {
        let n = hi - lo;
        if n == 0 {
            return empty_root();
        }
        if n.is_power_of_two() && lo.is_multiple_of(n) {
            let level = n.trailing_zeros() as usize;
            return self.levels[level][(lo / n) as usize];
        }
        let k = split(n);
        node_hash(&self.hash(lo, lo + k), &self.hash(lo + k, hi))
    }

    /// The inclusion path of leaf `index` in the tree of the first `size` leaves (RFC 6962
    /// `PATH(m, D[n])`): siblings from the leaf up. `None` unless `index < size <= len`.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Option<Vec<Hash>> {
        if index >= size || size > self.size() {
            return None;
        }
        let mut path = Vec::new();
        self.path(index, 0, size, &mut path);
        Some(path)
    }

    fn path(&self, index: u64, lo: u64, hi: u64, path: &mut Vec<Hash>) {
        let n = hi - lo;
        if n <= 1 {
            return;
        }
        let k = split(n);
        if index < lo + k {
            self.path(index, lo, lo + k, path);
            path.push(self.hash(lo + k, hi));
        } else {
            self.path(index, lo + k, hi, path);
            path.push(self.hash(lo, lo + k));
        }
    }

    /// The consistency proof from the tree of the first `old` leaves to the tree of the
    /// first `new` ones (RFC 6962 `PROOF(m, D[n])`). Empty when `old` is 0 or `old ==
    /// new`; `None` unless `old <= new <= len`.
    pub fn consistency_proof(&self, old: u64, new: u64) -> Option<Vec<Hash>> {
        if old > new || new > self.size() {
            return None;
        }
        let mut proof = Vec::new();
        if old > 0 && old < new {
            self.subproof(old, 0, new, true, &mut proof);
        }
        Some(proof)
    }

    /// RFC 6962 `SUBPROOF(m, D[lo:hi], b)`.
    fn subproof(&self, m: u64, lo: u64, hi: u64, whole: bool, proof: &mut Vec<Hash>) {
        let n = hi - lo;
        if m == n {
            if !whole {
                proof.push(self.hash(lo, hi));
            }
            return;
        }
        let k = split(n);
        if m <= k {
            self.subproof(m, lo, lo + k, whole, proof);
            proof.push(self.hash(lo + k, hi));
        } else {
            self.subproof(m - k, lo + k, hi, false, proof);
            proof.push(self.hash(lo, lo + k));
        }
    }
}

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The leaf is not in a tree of that size.
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexBeyondSize {
        /// The leaf's index.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// A consistency proof to a smaller tree.
    #[error("the old size {old} is greater than the new size {new}: a log only grows")]
    Shrinks {
        /// The older tree's size.
        old: u64,
        /// The newer tree's size.
        new: u64,
    },
    /// Two trees of one size with different roots.
    #[error(
        "two different roots for size {size}: {} and {} (a split view)",
        crate::hex::hex(first),
        crate::hex::hex(second)
    )]
    SameSizeOtherRoot {
        /// The size.
        size: u64,
        /// One root.
        first: Hash,
        /// The other.
        second: Hash,
    },
    /// Hashes left over or missing.
    #[error("the proof has {0} hashes, not as many as the sizes need")]
    Length(usize),
    /// The hashes do not rebuild the roots.
    #[error("the proof does not lead to the root {}", crate::hex::hex(.0))]
    Root(Hash),
}

/// Checks that `path` proves `leaf` (a leaf hash) at `index` in the tree of `size` leaves
/// with root `root` (RFC 9162 section 2.1.3.2).
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    path: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexBeyondSize { index, size });
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut hash = *leaf;
    for sibling in path {
        if snode == 0 {
            return Err(ProofError::Length(path.len()));
        }
        if fnode & 1 == 1 || fnode == snode {
            hash = node_hash(sibling, &hash);
            while fnode & 1 == 0 && fnode != 0 {
                fnode >>= 1;
                snode >>= 1;
            }
        } else {
            hash = node_hash(&hash, sibling);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 {
        return Err(ProofError::Length(path.len()));
    }
    if hash != *root {
        return Err(ProofError::Root(*root));
    }
    Ok(())
}

/// Checks that `proof` shows the tree of `old` leaves with root `old_root` is a prefix of
/// the tree of `new` leaves with root `new_root` (RFC 9162 section 2.1.4.2).
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::Shrinks { old, new });
    }
    if old == new {
        if !proof.is_empty() {
            return Err(ProofError::Length(proof.len()));
        }
        if old_root != new_root {
            return Err(ProofError::SameSizeOtherRoot {
                size: old,
                first: *old_root,
                second: *new_root,
            });
        }
        return Ok(());
    }
    if old == 0 {
        // Every tree extends the empty one.
        return if proof.is_empty() {
            Ok(())
        } else {
            Err(ProofError::Length(proof.len()))
        };
    }
    if proof.is_empty() {
        return Err(ProofError::Length(0));
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut fnode, mut snode) = (old - 1, new - 1);
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if snode == 0 {
            return Err(ProofError::Length(proof.len()));
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fnode & 1 == 0 && fnode != 0 {
                fnode >>= 1;
                snode >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 {
        return Err(ProofError::Length(proof.len()));
    }
    if fr != *old_root {
        return Err(ProofError::Root(*old_root));
    }
    if sr != *new_root {
        return Err(ProofError::Root(*new_root));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn set_and_truncate_leave_the_tree_built_from_the_leaves_it_holds() {
        let hash = |i: u64| leaf_hash(&i.to_be_bytes());
        for size in [1u64, 2, 3, 5, 8, 13, 64, 100] {
            let mut leaves: Vec<Hash> = (0..size).map(hash).collect();
            let mut tree = Tree::from_leaf_hashes(leaves.iter().copied());
            let mut many = tree.clone();
            for index in (0..size).step_by(3) {
                leaves[index as usize] = hash(1_000 + index);
                tree.set(index, leaves[index as usize]);
            }
            assert_eq!(tree.root(), mth(&leaves), "set, size {size}");
            many.set_many(
                (0..size)
                    .step_by(3)
                    .map(|index| (index, leaves[index as usize])),
            );
            assert_eq!(many.root(), mth(&leaves), "set_many, size {size}");
            for keep in [0, size / 2, size] {
                let mut cut = tree.clone();
                cut.truncate(keep);
                for extra in 0..3 {
                    cut.push_hash(hash(5_000 + extra));
                }
                let mut expected = leaves[..keep as usize].to_vec();
                expected.extend((0..3).map(|extra| hash(5_000 + extra)));
                assert_eq!(cut.root(), mth(&expected), "truncate to {keep} of {size}");
                assert!(cut.inclusion_proof(0, cut.size()).is_some());
            }
        }
    }

    #[test]
    fn positions_finds_each_leaf_in_one_pass_and_none_for_a_missing_one() {
        let leaves: Vec<Hash> = (0u64..50).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let tree = Tree::from_leaf_hashes(leaves.iter().copied());
        let missing = leaf_hash(b"missing");
        let asked = [leaves[7], missing, leaves[0], leaves[49], leaves[7]];
        assert_eq!(
            tree.positions(&asked),
            [Some(7), None, Some(0), Some(49), Some(7)]
        );
        assert_eq!(tree.positions(&[]), Vec::<Option<u64>>::new());
    }

    /// RFC 6962's `MTH`, written from its recursive definition.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn tree(n: u64) -> Tree {
        let mut tree = Tree::new();
        for i in 0..n {
            tree.push(&i.to_be_bytes());
        }
        tree
    }

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    #[test]
    fn roots_are_the_digest_trees_roots_the_rfc_defines() {
        // Every size: the stored levels give the root the recursive definition gives.
        let full = tree(70);
        for n in 0..=70 {
            assert_eq!(full.root_at(n), Some(mth(&leaves(n)[..])), "{n}");
        }
        assert_eq!(full.root_at(71), None);
        assert_eq!(
            crate::hex::hex(&Tree::new().root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    /// RFC 6962's reference test vectors (certificate-transparency-go, `merkle_test`): the
    /// roots of the trees of its eight leaves, and a consistency proof between them.
    #[test]
    fn the_rfc_6962_reference_vectors() {
        let inputs: [&[u8]; 8] = [
            b"",
            b"\x00",
            b"\x10",
            b"\x20\x21",
            b"\x30\x31",
            b"\x40\x41\x42\x43",
            b"\x50\x51\x52\x53\x54\x55\x56\x57",
            b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
        ];
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        let mut tree = Tree::new();
        for (input, root) in inputs.iter().zip(roots) {
            tree.push(input);
            assert_eq!(crate::hex::hex(&tree.root()), root, "size {}", tree.size());
        }
        // PROOF(1, D[8]), RFC 6962's vector.
        let proof: Vec<String> = tree
            .consistency_proof(1, 8)
            .unwrap()
            .iter()
            .map(|h| crate::hex::hex(h))
            .collect();
        assert_eq!(
            proof,
            [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]
        );
    }

    #[test]
    fn a_rewritten_leaf_has_no_consistency_proof() {
        let honest = tree(20);
        let mut rewritten = Tree::new();
        for i in 0..25u64 {
            rewritten.push(&(if i == 12 { 999 } else { i }).to_be_bytes());
        }
        let proof = rewritten.consistency_proof(20, 25).unwrap();
        assert!(matches!(
            verify_consistency(20, 25, &honest.root(), &rewritten.root(), &proof),
            Err(ProofError::Root(_))
        ));
        // Same size, another root: a split view.
        let other = rewritten.root_at(20).unwrap();
        assert!(matches!(
            verify_consistency(20, 20, &honest.root(), &other, &[]),
            Err(ProofError::SameSizeOtherRoot { size: 20, .. })
        ));
        assert_eq!(
            verify_consistency(25, 20, &other, &other, &[]),
            Err(ProofError::Shrinks { old: 25, new: 20 })
        );
    }

    proptest! {
        #[test]
        fn every_inclusion_and_consistency_proof_verifies_and_a_changed_one_does_not(
            n in 1u64..300, i in 0u64..300, m in 0u64..300, flip in 0usize..64,
        ) {
            let t = tree(n);
            let i = i % n;
            let m = m % (n + 1);
            let root = t.root();
            let path = t.inclusion_proof(i, n).unwrap();
            prop_assert_eq!(t.root(), mth(&leaves(n)));
            prop_assert!(verify_inclusion(&t.leaf(i).unwrap(), i, n, &path, &root).is_ok());
            let old_root = t.root_at(m).unwrap();
            let proof = t.consistency_proof(m, n).unwrap();
            prop_assert!(verify_consistency(m, n, &old_root, &root, &proof).is_ok());
            // One hash changed, one dropped, one added, another old size: refused.
            if !proof.is_empty() {
                let mut bad = proof.clone();
                let at = flip % bad.len();
                bad[at][0] ^= 1;
                prop_assert!(verify_consistency(m, n, &old_root, &root, &bad).is_err());
                prop_assert!(verify_consistency(m, n, &old_root, &root, &proof[1..]).is_err());
            }
            let mut longer = proof.clone();
            longer.push([0; 32]);
            prop_assert!(verify_consistency(m, n, &old_root, &root, &longer).is_err());
            if m > 0 && m < n {
                prop_assert!(verify_consistency(m - 1, n, &old_root, &root, &proof).is_err()
                    || t.root_at(m - 1) == Some(old_root));
            }
            if !path.is_empty() {
                let mut bad = path.clone();
                let at = flip % bad.len();
                bad[at][31] ^= 1;
                prop_assert!(verify_inclusion(&t.leaf(i).unwrap(), i, n, &bad, &root).is_err());
            }
        }
    }
}
