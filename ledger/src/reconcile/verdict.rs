//! What a run concludes from what it saw, and the [`Report`] it writes: a pure function of
//! the two sides, with no I/O.
//!
//! The rules, in the order [`verdict`] applies them to each event of the ledger's range not
//! read from Kafka (a *missing* one, [`missing`]), then to each id read that the range did
//! not expect. Rules 1 to 3 are [`classify_missing`], which the end-to-end watcher
//! (`crate::watcher`) applies too, with its own sense of *due*:
//! 1. A missing event in `outbox_parked` is *parked*: Kafka refused it for good, an
//!    operator decides. Whether it is due does not matter.
//! 2. Otherwise, when it is *due*, it is *lost*. Here due means the relay confirmed past
//!    the ledger's snapshot: the relay confirms only what Kafka acknowledged, so it should
//!    be there. For the watcher it means older than the lag bound, with every partition
//!    read to its end: whatever the relay says.
//! 3. Otherwise it is *unseen*: the relay may still be sending it.
//! 4. An id read that the range did not expect is a *phantom* unless the ledger has it in
//!    `events` when asked at the end (committed during the run). A record without an event
//!    id is always one.
//!
//! The counts are whole; at most [`SAMPLE`] lost and phantom ids are listed, the smallest
//! first. Duplicates and order inversions are counted as the records are read
//! ([`Kafka`]) and carried over as they are.

use std::collections::{HashMap, HashSet};

/// Lost and phantom ids shown in a report (the counts are whole).
pub(super) const SAMPLE: usize = 20;

/// One run's findings.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Report {
    /// Events of the range in the ledger.
    pub events: u64,
    /// Records read from Kafka.
    pub records: u64,
    /// Events confirmed by the relay and missing from Kafka.
    pub lost: u64,
    /// Some of them.
    pub lost_sample: Vec<String>,
    /// Records whose event id is not in the ledger.
    pub phantom: u64,
    /// Some of them.
    pub phantom_sample: Vec<String>,
    /// Copies beyond the first of an event id.
    pub duplicates: u64,
    /// The most copies of one event id.
    pub max_copies: u32,
    /// First copies not after the previous one of their key by `(commit_lsn, ordinal)`.
    pub lsn_inversions: u64,
    /// First copies not after the previous one of their key by stream version.
    pub version_inversions: u64,
    /// Events not on Kafka yet, the relay not having confirmed past them.
    pub unseen: u64,
    /// Events Kafka refused for good (in `outbox_parked`).
    pub parked: u64,
    /// Whether the relay confirmed past the ledger's snapshot within `settle`.
    pub caught_up: bool,
    /// How long the run took.
    pub seconds: f64,
}

impl Report {
    /// No loss and no phantom: what `ledger reconcile` exits 0 on.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.phantom == 0
    }

    /// Order inversions of either kind.
    pub fn inversions(&self) -> u64 {
        self.lsn_inversions + self.version_inversions
    }
}

/// What the topics hold, counted against the ledger's events as they are read.
#[derive(Debug, Default)]
pub(super) struct Kafka {
    /// Records of the range read.
    pub(super) records: u64,
    /// Copies beyond the first of an event id.
    pub(super) duplicates: u64,
    /// The most copies of one event id.
    pub(super) max_copies: u32,
    /// First copies not after the previous one of their key by `(commit_lsn, ordinal)`.
    pub(super) lsn_inversions: u64,
    /// First copies not after the previous one of their key by stream version.
    pub(super) version_inversions: u64,
    /// Ids read that are not in the range: phantoms, unless the ledger has them (0 for a
    /// record without an event id).
    pub(super) unexpected: Vec<u128>,
}

/// What a committed event no record was read of is (rules 1 to 3 above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// In `outbox_parked`: Kafka refused it, an operator decides.
    Parked,
    /// Due and not on Kafka: lost.
    Lost,
    /// Not due yet: it may still be on its way.
    Unseen,
}

/// Rules 1 to 3: a missing event that is `parked` is parked; else one that is `due` is
/// lost; else unseen. Pure; shared by `ledger reconcile` and the watcher.
pub fn classify_missing(parked: bool, due: bool) -> Missing {
    if parked {
        Missing::Parked
    } else if due {
        Missing::Lost
    } else {
        Missing::Unseen
    }
}

/// The events of the range that no record was read of (`expected` maps each event id to
/// its copies read), smallest first.
pub(super) fn missing(expected: &HashMap<u128, u32>) -> Vec<u128> {
    let mut missing: Vec<u128> = expected
        .iter()
        .filter(|(_, copies)| **copies == 0)
        .map(|(id, _)| *id)
        .collect();
    missing.sort_unstable();
    missing
}

/// The report of a run: `expected` the range's events with their copies read, `kafka` what
/// the read counted, `parked` the missing events in `outbox_parked`, `known` the unexpected
/// ids that `events` has, `caught_up` whether the relay confirmed past the snapshot in
/// time. Its `seconds` are the caller's to set.
pub(super) fn verdict(
    expected: &HashMap<u128, u32>,
    kafka: &Kafka,
    parked: &HashSet<u128>,
    known: &HashSet<u128>,
    caught_up: bool,
) -> Report {
    let mut report = Report {
        events: expected.len() as u64,
        records: kafka.records,
        duplicates: kafka.duplicates,
        max_copies: kafka.max_copies,
        lsn_inversions: kafka.lsn_inversions,
        version_inversions: kafka.version_inversions,
        caught_up,
        ..Report::default()
    };
    for id in missing(expected) {
        match classify_missing(parked.contains(&id), caught_up) {
            Missing::Parked => report.parked += 1,
            Missing::Lost => {
                report.lost += 1;
                if report.lost_sample.len() < SAMPLE {
                    report.lost_sample.push(uuid_text(id));
                }
            }
            Missing::Unseen => report.unseen += 1,
        }
    }
    let mut phantoms: Vec<u128> = kafka
        .unexpected
        .iter()
        .copied()
        .filter(|id| !known.contains(id))
        .collect();
    phantoms.sort_unstable();
    report.phantom = phantoms.len() as u64;
    report.phantom_sample = phantoms.into_iter().take(SAMPLE).map(uuid_text).collect();
    report
}

fn uuid_text(id: u128) -> String {
    uuid::Uuid::from_u128(id).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events 1 to 4 of the range: 1 read once, 2 read twice, 3 and 4 never.
    fn expected() -> HashMap<u128, u32> {
        HashMap::from([(1, 1), (2, 2), (3, 0), (4, 0)])
    }

    #[test]
    fn a_missing_event_is_parked_then_lost_once_the_relay_caught_up_else_unseen() {
        let parked = HashSet::from([4]);
        let none = HashSet::new();
        let caught_up = verdict(&expected(), &Kafka::default(), &parked, &none, true);
        assert_eq!(
            (caught_up.parked, caught_up.lost, caught_up.unseen),
            (1, 1, 0)
        );
        assert_eq!(caught_up.lost_sample, [uuid_text(3)]);
        assert!(!caught_up.clean());
        let behind = verdict(&expected(), &Kafka::default(), &parked, &none, false);
        assert_eq!((behind.parked, behind.lost, behind.unseen), (1, 0, 1));
        assert!(behind.lost_sample.is_empty());
        // Unseen and parked events alone leave the run clean: neither is a loss yet.
        assert!(behind.clean());
        assert_eq!(behind.events, 4);
    }

    #[test]
    fn parked_wins_over_due_and_only_a_due_event_is_lost() {
        assert_eq!(classify_missing(true, true), Missing::Parked);
        assert_eq!(classify_missing(true, false), Missing::Parked);
        assert_eq!(classify_missing(false, true), Missing::Lost);
        assert_eq!(classify_missing(false, false), Missing::Unseen);
    }

    #[test]
    fn an_unexpected_id_is_a_phantom_unless_the_ledger_has_it_and_one_without_an_id_always_is() {
        let kafka = Kafka {
            records: 6,
            unexpected: vec![7, 0, 9],
            ..Kafka::default()
        };
        let known = HashSet::from([9]);
        let report = verdict(&expected(), &kafka, &HashSet::new(), &known, true);
        assert_eq!(report.phantom, 2);
        assert_eq!(report.phantom_sample, [uuid_text(0), uuid_text(7)]);
        assert_eq!(report.records, 6);
        assert!(!report.clean());
    }

    #[test]
    fn samples_hold_at_most_twenty_ids_the_smallest_and_the_counts_are_whole() {
        let expected: HashMap<u128, u32> = (1..=30).map(|id| (id, 0)).collect();
        let kafka = Kafka {
            unexpected: (100..125).rev().collect(),
            ..Kafka::default()
        };
        let report = verdict(&expected, &kafka, &HashSet::new(), &HashSet::new(), true);
        assert_eq!((report.lost, report.phantom), (30, 25));
        let lost: Vec<String> = (1..=20).map(uuid_text).collect();
        let phantom: Vec<String> = (100..120).map(uuid_text).collect();
        assert_eq!(report.lost_sample, lost);
        assert_eq!(report.phantom_sample, phantom);
    }

    #[test]
    fn duplicates_and_inversions_are_carried_over_as_counted() {
        let kafka = Kafka {
            records: 3,
            duplicates: 1,
            max_copies: 2,
            lsn_inversions: 3,
            version_inversions: 4,
            unexpected: Vec::new(),
        };
        let all_read = HashMap::from([(1, 1), (2, 2)]);
        let report = verdict(&all_read, &kafka, &HashSet::new(), &HashSet::new(), true);
        assert_eq!(
            (
                report.duplicates,
                report.max_copies,
                report.inversions(),
                report.lost,
                report.phantom
            ),
            (1, 2, 7, 0, 0)
        );
        // Out of order and duplicated, but nothing lost and nothing invented.
        assert!(report.clean());
    }
}
