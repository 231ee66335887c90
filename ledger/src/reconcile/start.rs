//! Where a run over a time range starts reading each partition, proven by the records
//! themselves rather than by any clock but the database's.
//!
//! The range is a time of the database's clock: events `recorded_at` or after it. Kafka's
//! `offsets_for_times` finds records by their Kafka timestamp, which the relay's producer
//! sets from the relay's host clock. With that clock minutes behind the database's, the
//! records of the range's first minutes carry timestamps before its start, the read began
//! after them, and their events were reported lost (issue 50, item 8). So that offset is
//! only a first guess. The proof is in the `commit_timestamp` header the relay puts on each
//! record: the commit time of its transaction, by the database's clock, never before the
//! `recorded_at` of its events. The relay publishes in commit order, so once a run of
//! records committed before the range starts, every record before that run is of events
//! recorded before it too.
//!
//! The rules, in the order [`start_of`] applies them:
//! 1. A read from the partition's first offset needs no proof.
//! 2. Before the guess, offsets [`RUN`], twice, four times as many, ... back are probed:
//!    the first [`RUN`] records from there (fewer where the partition ends). The steps
//!    double, so the read starts at most about twice as far back from the guess as the
//!    range's first record lies.
//! 3. A probe proves the start when each of its records has a `commit_timestamp` more than
//!    [`ORDER_SLACK`] before the range's start ([`before_range`]). A record without one
//!    (published by `ledger relay recover`, or by anyone else) proves nothing, and neither
//!    does a probe that ran into the range: the search goes further back.
//! 4. Why a run of records, not one: a message republished from `outbox_parked` keeps its
//!    original headers, so one old `commit_timestamp` among the range's records would prove
//!    a start inside the range.
//!
//! [`proven`] does it for every partition, its probes read by [`probe`].
//!
//! Records read before the range cost time, not truth: a record of an event the range does
//! not expect counts only when it is of the range ([`of_range`]), as the read began there
//! before; the records of the range's events count wherever they are.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ra_ledger_cdc::infra::partition_end::PartitionEndContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers as _;
use rdkafka::{Message as _, Offset, TopicPartitionList};

use super::ReconcileError;

/// How many consecutive records a probe reads.
pub(super) const RUN: usize = 16;

/// How far before the range's start a record's commit must be to count as before it.
/// PostgreSQL takes a transaction's commit time just before writing its commit record, so
/// commit times can be out of commit order by as long as that takes under contention
/// (microseconds; a second is far beyond it).
pub(super) const ORDER_SLACK: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// What a probe learns of one record: its `commit_timestamp` header, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Probed {
    pub(super) commit: Option<DateTime<Utc>>,
}

impl Probed {
    /// The `commit_timestamp` header's value: RFC 3339, as the relay writes it.
    pub(super) fn from_header(value: Option<&[u8]>) -> Self {
        let commit = value
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
            .map(|time| time.to_utc());
        Self { commit }
    }
}

/// Whether `records`, read in a row, show that the partition's records before them are all
/// of events recorded before `since` (rule 3). Pure.
pub(super) fn before_range(records: &[Probed], since: DateTime<Utc>) -> bool {
    !records.is_empty()
        && records.iter().all(|record| {
            record
                .commit
                .is_some_and(|commit| commit < since - ORDER_SLACK)
        })
}

/// Whether a record of an event the range does not expect is of the range starting at
/// `since`: committed at or after it (`commit_timestamp`, the database's clock; a record of
/// an event recorded since then always is), or, for a record without a commit time (such as
/// `ledger relay recover` publishes), stamped at or after it by Kafka's timestamp. Every
/// record is of a range that has no start. Pure.
pub(super) fn of_range(
    since: Option<DateTime<Utc>>,
    commit_timestamp: Option<&str>,
    stamped_millis: Option<i64>,
) -> bool {
    let Some(since) = since else {
        return true;
    };
    match Probed::from_header(commit_timestamp.map(str::as_bytes)).commit {
        Some(commit) => commit >= since,
        None => stamped_millis.is_none_or(|millis| millis >= since.timestamp_millis()),
    }
}

/// The offset to read a partition from so that no record of an event recorded at or after
/// `since` lies before it: `low` (its first offset), or an offset at or before `guess` that
/// a probe proved (see the module's doc). `probe(offset)` reads the records in a row from
/// `offset` on. Pure but for `probe`.
pub(super) fn start_of<E>(
    low: i64,
    guess: i64,
    since: DateTime<Utc>,
    mut probe: impl FnMut(i64) -> Result<Vec<Probed>, E>,
) -> Result<i64, E> {
    let mut back = RUN as i64;
    loop {
        let at = guess.saturating_sub(back).max(low);
        if at <= low {
            return Ok(low);
        }
        if before_range(&probe(at)?, since) {
            return Ok(at);
        }
        back = back.saturating_mul(2);
    }
}

/// Each partition's start: where `guesses` (`offsets_for_times` of `since`) put it, moved
/// back by [`start_of`] until its records prove it (the probes read by `prober`); a
/// partition without an end (nothing to read, `ends`) keeps its guess. Blocking.
pub(super) fn proven(
    prober: &BaseConsumer<PartitionEndContext>,
    guesses: &TopicPartitionList,
    lows: &HashMap<(String, i32), i64>,
    ends: &HashMap<(String, i32), i64>,
    since: DateTime<Utc>,
) -> Result<TopicPartitionList, ReconcileError> {
    let mut starts = TopicPartitionList::new();
    for element in guesses.elements() {
        let key = (element.topic().to_owned(), element.partition());
        let low = lows.get(&key).copied().unwrap_or(0);
        let offset = match ends.get(&key) {
            None => element.offset(),
            Some(&end) => {
                // No record stamped at or after `since`: the guess is the end.
                let guess = match element.offset() {
                    Offset::Offset(offset) => offset.clamp(low, end),
                    Offset::End => end,
                    _ => low,
                };
                Offset::Offset(start_of(low, guess, since, |at| {
                    probe(prober, &key.0, key.1, at, end)
                })?)
            }
        };
        starts.add_partition_offset(&key.0, key.1, offset)?;
    }
    Ok(starts)
}

/// The committed records in a row (at most [`RUN`]) from `offset` of `partition`,
/// which ends at `end`: what a probe of the range's start learns of each. Blocking.
fn probe(
    prober: &BaseConsumer<PartitionEndContext>,
    topic: &str,
    partition: i32,
    offset: i64,
    end: i64,
) -> Result<Vec<Probed>, ReconcileError> {
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    prober.assign(&assignment)?;
    let mut records = Vec::new();
    let mut last = offset - 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    while records.len() < RUN {
        if Instant::now() > deadline {
            return Err(KafkaError::Canceled.into());
        }
        match prober.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                if message.topic() == topic
                    && message.partition() == partition
                    && message.offset() > last
                {
                    last = message.offset();
                    let commit = message.headers().and_then(|headers| {
                        headers
                            .iter()
                            .find(|header| {
                                header.key == ra_ledger_cdc::publish::header::COMMIT_TIMESTAMP
                            })
                            .and_then(|header| header.value)
                    });
                    records.push(Probed::from_header(commit));
                    if last + 1 >= end {
                        break;
                    }
                }
            }
            Some(Err(error)) if !matches!(error, KafkaError::PartitionEOF(_)) => {
                return Err(error.into());
            }
            // Nothing yet, or the end told: read to the end? The end is told once per offset,
            // and a transaction's commit marker takes an offset no record shows: the
            // position says.
            _ => {
                let position = prober.position()?;
                let reached = position.find_partition(topic, partition).is_some_and(
                    |element| matches!(element.offset(), Offset::Offset(at) if at >= end),
                );
                if reached {
                    break;
                }
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    /// A partition of 1,000 records, one committed every 6 s from minute 0 on, probed as
    /// Kafka would answer: the records in a row from an offset.
    fn probe_of(commits: &[Option<DateTime<Utc>>]) -> impl FnMut(i64) -> Result<Vec<Probed>, ()> {
        move |offset| {
            let from = usize::try_from(offset).unwrap();
            Ok(commits[from..]
                .iter()
                .take(RUN)
                .map(|&commit| Probed { commit })
                .collect())
        }
    }

    fn every_six_seconds() -> Vec<Option<DateTime<Utc>>> {
        (0..1_000)
            .map(|n| Some(at(0) + chrono::TimeDelta::seconds(6 * n)))
            .collect()
    }

    /// The first offset whose record is of the range (commit at or after `since`).
    fn first_in_range(commits: &[Option<DateTime<Utc>>], since: DateTime<Utc>) -> i64 {
        commits
            .iter()
            .position(|commit| commit.is_some_and(|commit| commit >= since))
            .unwrap() as i64
    }

    #[test]
    fn a_guess_past_the_range_start_is_moved_back_before_it() {
        let commits = every_six_seconds();
        let since = at(50);
        let first = first_in_range(&commits, since);
        // A relay clock 10 minutes behind: offsets_for_times found nothing from `since` on
        // (the end), or a point 10 minutes into the range.
        for guess in [1_000, first + 100] {
            let start = start_of(0, guess, since, probe_of(&commits)).unwrap();
            assert!(start <= first, "guess {guess}: start {start} after {first}");
            // Not far before either: the steps double, so at most twice the way from the
            // guess to the range's start, a run and the slack (one record here).
            let farthest = (guess - 2 * (guess - first + RUN as i64 + 1)).max(0);
            assert!(start >= farthest, "guess {guess}: start {start}");
        }
    }

    #[test]
    fn a_right_guess_moves_back_only_a_little() {
        let commits = every_six_seconds();
        let since = at(50);
        let first = first_in_range(&commits, since);
        let start = start_of(0, first, since, probe_of(&commits)).unwrap();
        assert!(start < first && start >= first - 2 * RUN as i64, "{start}");
    }

    #[test]
    fn records_without_a_commit_time_or_a_republished_one_prove_nothing() {
        let mut commits = every_six_seconds();
        let since = at(50);
        let first = first_in_range(&commits, since) as usize;
        // Recovered records (no header) just before the range, and a republished record
        // with an old commit time just inside it.
        for commit in &mut commits[first - 40..first] {
            *commit = None;
        }
        commits[first + 20] = Some(at(1));
        let start = start_of(0, first as i64 + 30, since, probe_of(&commits)).unwrap();
        assert!(start <= first as i64 - 40, "{start}");
        // A partition with no commit time at all is read from its start.
        let none = vec![None; 100];
        assert_eq!(start_of(3, 100, since, probe_of(&none)).unwrap(), 3);
    }

    #[test]
    fn a_record_is_of_the_range_by_its_commit_time_or_else_its_stamp() {
        let since = at(50);
        let stamp = |minute: i64| Some(at(minute).timestamp_millis());
        // A relay clock 10 minutes behind: the stamp says before, the commit time says of it.
        assert!(of_range(
            Some(since),
            Some("2027-01-15T08:50:00Z"),
            stamp(40)
        ));
        // A republished record: stamped now, committed long ago.
        assert!(!of_range(
            Some(since),
            Some("2027-01-15T08:00:00Z"),
            stamp(60)
        ));
        // Published by `ledger relay recover`: no commit time, so the stamp decides.
        assert!(of_range(Some(since), None, stamp(50)));
        assert!(!of_range(Some(since), None, stamp(49)));
        assert!(of_range(None, Some("2027-01-15T08:00:00Z"), stamp(0)));
    }

    #[test]
    fn commit_times_reach_the_range_only_a_second_before_it() {
        let since = at(50);
        let old = Probed {
            commit: Some(since - chrono::TimeDelta::seconds(2)),
        };
        let close = Probed {
            commit: Some(since - chrono::TimeDelta::milliseconds(500)),
        };
        assert!(before_range(&[old, old], since));
        assert!(!before_range(&[old, close], since));
        assert!(!before_range(&[old, Probed { commit: None }], since));
        assert!(!before_range(&[], since));
        assert_eq!(
            Probed::from_header(Some(b"2026-01-01T00:00:00.000001Z")).commit,
            DateTime::from_timestamp(1_767_225_600, 1_000)
        );
        assert_eq!(Probed::from_header(Some(b"yesterday")).commit, None);
    }
}
