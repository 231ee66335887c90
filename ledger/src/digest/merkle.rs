//! Merkle trees as RFC 9162 (Certificate Transparency v2) defines them, section 2.1:
//!
//! - the hash of the empty tree is `SHA-256()`;
//! - a leaf's hash is `SHA-256(0x00 || leaf bytes)`;
//! - a node's hash is `SHA-256(0x01 || left || right)`;
//! - a tree of n > 1 leaves splits at k, the largest power of two smaller than n: the first
//!   k leaves on the left, the rest on the right.
//!
//! Inclusion paths (`PATH(m, D[n])`, section 2.1.3.1) and their verification (section
//! 2.1.3.2) follow the same text, so any RFC 9162 implementation checks our proofs.

/// The hashes, shared with the transparency log's tree, which defines them once.
pub use crate::tlog::tree::{Hash, empty_root, leaf_hash, node_hash};

/// The largest power of two smaller than `n` (n > 1).
fn split(n: usize) -> usize {
    debug_assert!(n > 1);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The tree hash (MTH) of leaves given by their leaf hashes.
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The inclusion path of leaf `index` in the tree of `leaves`: sibling hashes from the leaf
/// up to the root (RFC 9162 `PATH(m, D[n])`). `None` when `index` is out of range.
pub fn inclusion_path(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    collect_path(leaves, index, &mut path);
    Some(path)
}

fn collect_path(leaves: &[Hash], index: usize, path: &mut Vec<Hash>) {
    let n = leaves.len();
    if n <= 1 {
        return;
    }
    let k = split(n);
    if index < k {
        collect_path(&leaves[..k], index, path);
        path.push(root(&leaves[k..]));
    } else {
        collect_path(&leaves[k..], index - k, path);
        path.push(root(&leaves[..k]));
    }
}

/// Whether `path` proves leaf hash `leaf` at `index` in a tree of `size` leaves with root
/// `root` (RFC 9162 section 2.1.3.2): the transparency log's check, which says why not.
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, path: &[Hash], root: &Hash) -> bool {
    crate::tlog::tree::verify_inclusion(leaf, index, size, path, root).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(&(i as u64).to_be_bytes()))
            .collect()
    }

    #[test]
    fn small_trees_hash_as_the_rfc_defines_them() {
        assert_eq!(
            hex(&empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let l = leaves(3);
        assert_eq!(root(&l[..1]), l[0]);
        assert_eq!(root(&l[..2]), node_hash(&l[0], &l[1]));
        // Three leaves: ((0, 1), 2).
        assert_eq!(root(&l), node_hash(&node_hash(&l[0], &l[1]), &l[2]));
        // RFC 6962's test vector: the leaf hash of the empty string.
        assert_eq!(
            hex(&leaf_hash(b"")),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
    }

    #[test]
    fn every_inclusion_path_verifies_and_a_wrong_one_does_not() {
        for n in 1..=33 {
            let l = leaves(n);
            let r = root(&l);
            for (i, leaf) in l.iter().enumerate() {
                let path = inclusion_path(&l, i).unwrap();
                assert!(
                    verify_inclusion(leaf, i as u64, n as u64, &path, &r),
                    "{n} {i}"
                );
                // Another leaf, another index, another size, a shortened path: refused.
                let other = leaf_hash(b"other");
                assert!(!verify_inclusion(&other, i as u64, n as u64, &path, &r));
                if n > 1 {
                    let j = (i + 1) % n;
                    assert!(!verify_inclusion(leaf, j as u64, n as u64, &path, &r));
                    assert!(!verify_inclusion(leaf, i as u64, n as u64, &path[1..], &r));
                }
            }
            assert!(inclusion_path(&l, n).is_none());
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
