use super::*;
use crate::digest::document::Hex;

fn entry(stream: &str, version: u64) -> IndexEntry {
    let positions: Vec<u64> = (0..version).map(|v| v * 3).collect();
    IndexEntry {
        stream: stream.to_owned(),
        version,
        head_hash: Hex(merkle::leaf_hash(stream.as_bytes())),
        head_position: *positions.last().unwrap_or(&0),
        positions: Hex(positions_chain(&positions)),
    }
}

fn index(names: &[&str]) -> Index {
    Index::new(names.iter().map(|name| entry(name, 2)).collect()).unwrap()
}

#[test]
fn every_entry_is_proven_present_and_every_gap_absent() {
    let names = ["b", "d", "f", "h", "j"];
    for n in 0..=names.len() {
        let index = index(&names[..n]);
        let root = index.root();
        for name in &names[..n] {
            let proof = index.prove(name);
            assert_eq!(verify(&root, &proof, name).unwrap().unwrap().stream, *name);
        }
        for gap in ["a", "c", "e", "g", "i", "k", "bb", ""] {
            if names[..n].contains(&gap) {
                continue;
            }
            let proof = index.prove(gap);
            assert_eq!(verify(&root, &proof, gap), Ok(None), "{gap} in {n}");
        }
    }
}

#[test]
fn an_absence_is_refused_when_it_hides_an_entry_or_the_root_is_another() {
    let index = index(&["b", "d", "f", "h"]);
    let root = index.root();
    // "d" exists: its neighbours' proofs ("b" and "f") are not consecutive.
    let mut forged = index.prove("c");
    forged.stream = "d".into();
    forged.after = index.prove("e").after;
    let error = verify(&root, &forged, "d").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the entry after is at 2, not at 1: entries between them are not shown"),
        "{error}"
    );
    // The presence proof of "d" with its entry removed.
    let mut dropped = index.prove("d");
    dropped.entry = None;
    assert!(matches!(
        verify(&root, &dropped, "d"),
        Err(IndexError::NotAbsent { .. })
    ));
    // Only the entry before, though it is not the last.
    let mut short = index.prove("c");
    short.after = None;
    assert!(
        verify(&root, &short, "c")
            .unwrap_err()
            .to_string()
            .contains("not the last")
    );
    // Another root, a smaller size (so "h" would look like the last).
    let other = self::index(&["b", "d"]).root();
    assert!(matches!(
        verify(&other, &index.prove("c"), "c"),
        Err(IndexError::Path { .. })
    ));
    let mut smaller = index.prove("i");
    smaller.size = 3;
    smaller.before.as_mut().unwrap().index = 2;
    assert!(verify(&root, &smaller, "i").is_err());
    // A proof of another name.
    assert!(matches!(
        verify(&root, &index.prove("b"), "d"),
        Err(IndexError::OtherStream { .. })
    ));
}

#[test]
fn an_older_head_is_refused_against_the_root_of_the_newer() {
    let newer = Index::new(vec![entry("a", 1), entry("c", 3)]).unwrap();
    let older = Index::new(vec![entry("a", 1), entry("c", 2)]).unwrap();
    let error = verify(&newer.root(), &older.prove("c"), "c").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("does not lead to the index root"),
        "{error}"
    );
}

#[test]
fn a_name_twice_is_refused() {
    assert_eq!(
        Index::new(vec![entry("a", 1), entry("a", 2)]).unwrap_err(),
        IndexError::Duplicate("a".into())
    );
}

#[test]
fn the_index_leaf_reads_back_and_is_never_an_event_leaf() {
    let leaf = IndexLeaf {
        seq: 7,
        time_micros: -3,
        entries: 12,
        root: [9; 32],
    };
    assert_eq!(IndexLeaf::parse(&leaf.bytes()), Some(leaf));
    assert_eq!(IndexLeaf::parse(&[0; 32]), None);
    let mut other = leaf.bytes();
    other[0] = b'R';
    assert_eq!(IndexLeaf::parse(&other), None);
    assert_eq!(&leaf.bytes()[..18], b"ra-ledger index v1");
}

#[test]
fn the_log_gives_the_index_a_monitor_compares() {
    let hash = |n: u8| [n; 32];
    // Positions 2 and 5 are index leaves, skipped.
    let log = [
        (0, "b", 1, hash(1)),
        (1, "a", 1, hash(2)),
        (3, "b", 2, hash(3)),
        (4, "b", 3, hash(4)),
        (6, "a", 2, hash(5)),
    ];
    let index = Index::from_log(log).unwrap();
    assert_eq!(index.len(), 2);
    let b = &index.entries()[1];
    assert_eq!((b.stream.as_str(), b.version, b.head_position), ("b", 3, 4));
    assert_eq!(b.positions.0, positions_chain(&[0, 3, 4]));
    assert_eq!(b.head_hash.0, hash(4));
    assert_eq!(index.first_difference(&index.clone()), None);
    let older = Index::from_log(log[..4].iter().copied()).unwrap();
    assert_eq!(
        index.first_difference(&older).unwrap(),
        "stream a: version 2 at log position 6 against version 1 at 1"
    );
    let missing = Index::from_log(log.iter().copied().filter(|e| e.1 == "b")).unwrap();
    assert_eq!(
        index.first_difference(&missing).unwrap(),
        "stream a only in the first"
    );
    // A version skipped in the log.
    let error = Index::from_log([(0, "a", 1, hash(1)), (1, "a", 3, hash(2))]).unwrap_err();
    assert!(
        error.contains("version 3 at log position 1 follows version 1"),
        "{error}"
    );
}

/// What the builder does digest after digest (extend the last index with the events the
/// digest appended) gives the index a monitor recomputes from the whole log, root and all.
#[test]
fn an_index_extended_digest_by_digest_is_the_one_the_whole_log_gives() {
    // 40 log leaves over 7 streams, versions in order, with index leaves' positions skipped
    // (every 9th position is a digest's index leaf).
    let mut versions = std::collections::HashMap::new();
    let names: Vec<String> = (0..7).map(|i| format!("stream-{}", (i * 5) % 7)).collect();
    let events: Vec<(u64, String, u64, Hash)> = (0..40u64)
        .filter(|position| position % 9 != 8)
        .map(|position| {
            let name = names[(position as usize * 3) % 7].clone();
            let version = versions.entry(name.clone()).or_insert(0u64);
            *version += 1;
            (
                position,
                name,
                *version,
                merkle::leaf_hash(&position.to_be_bytes()),
            )
        })
        .collect();
    let borrowed = |from: usize, to: usize| {
        events[from..to]
            .iter()
            .map(|(p, s, v, h)| (*p, s.as_str(), *v, *h))
            .collect::<Vec<_>>()
    };
    let whole = Index::from_log(borrowed(0, events.len())).unwrap();
    let mut stepped = Index::default();
    for (from, to) in [(0, 3), (3, 4), (4, 20), (20, 20), (20, events.len())] {
        stepped = stepped.extended(borrowed(from, to)).unwrap();
    }
    assert_eq!(stepped.entries(), whole.entries());
    assert_eq!(stepped.root(), whole.root());
    assert_eq!(whole.len(), 7);
    // Heads moved and no stream new: the in-place path gives the same index.
    let (last, name, version, _) = events.last().unwrap().clone();
    let moved = (last + 1, name.as_str(), version + 1, [9; 32]);
    let mut all = borrowed(0, events.len());
    all.push(moved);
    let in_place = whole.clone().extended([moved]).unwrap();
    assert_eq!(in_place.len(), 7);
    assert_eq!(in_place.root(), Index::from_log(all).unwrap().root());
    // A version out of order is named.
    let mut skipped = borrowed(0, 5);
    skipped[4].2 += 1;
    let refused = Index::default().extended(skipped).unwrap_err();
    assert!(refused.contains("follows version"), "{refused}");
}
