//! Placing the digests read from the topic in their chain: one per number, each number
//! decided by what is signed, never by a label anyone may change (issue 35, item 5).
//!
//! A version-2 digest signs its number. A version-1 digest (sealed before that) does not:
//! its document's `seq` is a label, and a copy of a valid digest under another label is as
//! valid as the original. Its number comes from its chain instead. The first digest chains
//! to 32 zero bytes and each later one to the hash of the one before it, so numbers follow
//! the links forward from the first digest, and forward or back from any version-2 digest.
//! Only a version-1 digest that no link reaches keeps its label: the digests that would
//! place it are missing from the topic, which the chain check reports anyway.
//!
//! Copies are told apart by what they sign, never by where they were read or how they are
//! labelled: a message delivered again, or relabelled, is the same digest. Two different
//! statements placed at one number are a fork: the key signed both.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::SignedDigest;
use super::merkle::Hash;

/// A digest as read from the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The number its document carries: signed in version 2, a label in version 1.
    pub seq: i64,
    /// The signed statement.
    pub digest: SignedDigest,
    /// Where it was read, e.g. `outbox.event.digest/0@12`.
    pub location: String,
}

/// The signed digests read, placed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placed {
    /// One per number, in order, each with the number it was placed at; of a fork, the
    /// one read first.
    pub digests: Vec<Published>,
    /// Extra copies of a digest that were read (each digest counts once).
    pub copies: usize,
    /// Copies labelled with another number than the one their chain gives (version 1).
    pub relabelled: usize,
    /// Forks, and digests whose number nothing signed decides, in words.
    pub problems: Vec<String>,
}

/// One signed statement, however often it was read.
struct Statement {
    /// Its first copy read.
    first: Published,
    /// The labels of all its copies, in the order read.
    labels: Vec<i64>,
}

/// Places `signed` (digests whose signatures verify, in the order read; copies allowed).
pub fn place(signed: Vec<Published>) -> Placed {
    let mut statements: Vec<Statement> = Vec::new();
    let mut by_hash: HashMap<Hash, usize> = HashMap::new();
    for digest in signed {
        let hash = digest.digest.hash();
        match by_hash.get(&hash) {
            Some(&known) => statements[known].labels.push(digest.seq),
            None => {
                by_hash.insert(hash, statements.len());
                statements.push(Statement {
                    labels: vec![digest.seq],
                    first: digest,
                });
            }
        }
    }
    let mut placed = Placed {
        copies: statements.iter().map(|s| s.labels.len() - 1).sum(),
        ..Placed::default()
    };
    let numbers = numbers(&statements, &by_hash);
    let mut at: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (index, (statement, number)) in statements.iter().zip(numbers).enumerate() {
        let number = match number {
            Some(number) => number,
            None => unplaced(statement, &mut placed.problems),
        };
        placed.relabelled += statement.labels.iter().filter(|&&l| l != number).count();
        at.entry(number).or_default().push(index);
    }
    for (number, indexes) in at {
        let first = &statements[indexes[0]].first;
        if indexes.len() > 1 {
            let others: Vec<&str> = indexes[1..]
                .iter()
                .map(|&i| statements[i].first.location.as_str())
                .collect();
            placed.problems.push(format!(
                "two different digests numbered {number} ({} and {}): one signed number, two statements",
                first.location,
                others.join(", ")
            ));
        }
        placed.digests.push(Published {
            seq: number,
            ..first.clone()
        });
    }
    placed
}

/// Each statement's number, where something signed decides it: its own signed number, the
/// first digest's place, or a link to a statement placed.
fn numbers(statements: &[Statement], by_hash: &HashMap<Hash, usize>) -> Vec<Option<i64>> {
    let mut numbers: Vec<Option<i64>> = statements
        .iter()
        .map(|s| {
            let statement = &s.first.digest.statement;
            statement
                .seq
                .or((statement.previous == [0; 32]).then_some(1))
        })
        .collect();
    let mut next: HashMap<Hash, Vec<usize>> = HashMap::new();
    for (index, s) in statements.iter().enumerate() {
        next.entry(s.first.digest.statement.previous)
            .or_default()
            .push(index);
    }
    let mut placed: VecDeque<usize> = (0..statements.len())
        .filter(|&i| numbers[i].is_some())
        .collect();
    while let Some(index) = placed.pop_front() {
        let Some(number) = numbers[index] else {
            continue;
        };
        let digest = &statements[index].first.digest;
        let after = next.get(&digest.hash()).into_iter().flatten();
        let before = by_hash
            .get(&digest.statement.previous)
            .filter(|_| number > 1);
        let linked = after
            .map(|&i| (i, number + 1))
            .chain(before.map(|&i| (i, number - 1)));
        for (other, its_number) in linked.collect::<Vec<_>>() {
            if numbers[other].is_none() {
                numbers[other] = Some(its_number);
                placed.push_back(other);
            }
        }
    }
    numbers
}

/// The number of a version-1 statement no link places: its label, when its copies agree;
/// otherwise the lowest one, and a problem that says so.
fn unplaced(statement: &Statement, problems: &mut Vec<String>) -> i64 {
    let lowest = statement.labels.iter().copied().min().unwrap_or(0);
    if statement.labels.iter().any(|&label| label != lowest) {
        let mut labels = statement.labels.clone();
        labels.sort_unstable();
        labels.dedup();
        problems.push(format!(
            "the digest at {} was published under the numbers {labels:?}, and nothing signed \
             decides which it is (a version-1 digest does not sign its number, and the digests \
             its chain links it to are missing from the topic); taken as {lowest}",
            statement.first.location
        ));
    }
    lowest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::{DigestKey, Statement as Signed};

    fn at(seq: i64, digest: &SignedDigest, offset: u32) -> Published {
        Published {
            seq,
            digest: digest.clone(),
            location: format!("outbox.event.digest/1@{offset}"),
        }
    }

    /// Version-1 digests 1 to `count`, chained, as the ledger sealed them before its
    /// numbers were signed.
    fn first_version_chain(key: &DigestKey, count: i64) -> Vec<SignedDigest> {
        let mut chain: Vec<SignedDigest> = Vec::new();
        for seq in 1..=count {
            let previous = chain.last().map_or([0; 32], SignedDigest::hash);
            let statement = Signed::over(Vec::new(), seq, seq * 10, previous).unnumbered();
            chain.push(key.sign(statement));
        }
        chain
    }

    #[test]
    fn a_digest_delivered_twice_is_one_digest_and_two_statements_with_one_number_a_fork() {
        let key = DigestKey::from_seed(&[3; 32]);
        let seventh = key.sign(Signed::over(Vec::new(), 7, 7, [7; 32]));
        let eighth = key.sign(Signed::over(Vec::new(), 8, 8, seventh.hash()));
        let forged = key.sign(Signed::over(Vec::new(), 8, 9, seventh.hash()));
        // Digest 8 read at offsets 7 and 8, as a redelivery after a relay crash puts it.
        let placed = place(vec![
            at(8, &eighth, 7),
            at(7, &seventh, 6),
            at(8, &eighth, 8),
        ]);
        assert_eq!(placed.digests, vec![at(7, &seventh, 6), at(8, &eighth, 7)]);
        assert_eq!((placed.copies, placed.relabelled), (1, 0));
        assert!(placed.problems.is_empty(), "{placed:?}");
        // Another statement signed as number 8 is a fork, named once however often each
        // came.
        let placed = place(vec![
            at(8, &eighth, 7),
            at(8, &forged, 8),
            at(8, &eighth, 9),
            at(8, &forged, 10),
        ]);
        assert_eq!(placed.digests, vec![at(8, &eighth, 7)]);
        assert_eq!(placed.copies, 2);
        assert_eq!(
            placed.problems,
            [
                "two different digests numbered 8 (outbox.event.digest/1@7 and \
              outbox.event.digest/1@8): one signed number, two statements"
            ]
        );
    }

    /// Issue 35, item 5: a version-1 digest does not sign its number, so anyone may publish
    /// a copy of one under the number of another. That is a copy, not a fork.
    #[test]
    fn a_first_version_digest_relabelled_with_another_number_is_a_copy_not_a_fork() {
        let key = DigestKey::from_seed(&[5; 32]);
        let chain = first_version_chain(&key, 3);
        let placed = place(vec![
            at(1, &chain[0], 0),
            at(2, &chain[1], 1),
            at(3, &chain[2], 2),
            // Digest 1 again, labelled 2; digest 3 again, labelled 7.
            at(2, &chain[0], 3),
            at(7, &chain[2], 4),
        ]);
        assert!(placed.problems.is_empty(), "{placed:?}");
        assert_eq!(
            placed.digests,
            vec![
                at(1, &chain[0], 0),
                at(2, &chain[1], 1),
                at(3, &chain[2], 2)
            ]
        );
        assert_eq!((placed.copies, placed.relabelled), (2, 2));
        // Labels do not matter at all: every one wrong, the chain still places them.
        let placed = place(vec![
            at(9, &chain[2], 0),
            at(9, &chain[1], 1),
            at(9, &chain[0], 2),
        ]);
        assert!(placed.problems.is_empty(), "{placed:?}");
        let numbers: Vec<i64> = placed.digests.iter().map(|d| d.seq).collect();
        assert_eq!(numbers, [1, 2, 3]);
        assert_eq!(placed.relabelled, 3);
    }

    #[test]
    fn a_first_version_chain_is_placed_back_from_the_first_signed_number() {
        let key = DigestKey::from_seed(&[6; 32]);
        let chain = first_version_chain(&key, 4);
        // Digest 5, the first of version 2, after digest 4 of version 1.
        let fifth = key.sign(Signed::over(Vec::new(), 5, 50, chain[3].hash()));
        // Digest 1 is gone from the topic: 2 to 4 are placed back from 5.
        let placed = place(vec![
            at(4, &chain[2], 0),
            at(3, &chain[1], 1),
            at(5, &fifth, 2),
            at(2, &chain[3], 3),
        ]);
        assert!(placed.problems.is_empty(), "{placed:?}");
        let numbers: Vec<(i64, SignedDigest)> = placed
            .digests
            .iter()
            .map(|d| (d.seq, d.digest.clone()))
            .collect();
        assert_eq!(
            numbers,
            [
                (2, chain[1].clone()),
                (3, chain[2].clone()),
                (4, chain[3].clone()),
                (5, fifth)
            ]
        );
        assert_eq!(placed.relabelled, 3);
    }

    #[test]
    fn a_first_version_digest_no_link_places_keeps_its_label_unless_its_copies_disagree() {
        let key = DigestKey::from_seed(&[7; 32]);
        let chain = first_version_chain(&key, 4);
        // Digests 1 and 2 are gone: 3 and 4 link to each other but to nothing signed.
        let placed = place(vec![at(3, &chain[2], 0), at(4, &chain[3], 1)]);
        assert!(placed.problems.is_empty(), "{placed:?}");
        assert_eq!(
            placed.digests,
            vec![at(3, &chain[2], 0), at(4, &chain[3], 1)]
        );
        let placed = place(vec![at(3, &chain[2], 0), at(6, &chain[2], 1)]);
        assert_eq!(placed.digests, vec![at(3, &chain[2], 0)]);
        assert_eq!(placed.problems.len(), 1, "{placed:?}");
        assert!(
            placed.problems[0].contains("under the numbers [3, 6]"),
            "{placed:?}"
        );
    }
}
