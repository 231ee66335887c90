//! The group of whole PostgreSQL transactions one Kafka transaction carries, and when to
//! commit it. Pure: no I/O, no clock of its own.
//!
//! A group is committed between PostgreSQL transactions only, never inside one:
//! - as soon as the relay has read everything the server sent so far ([`Group::due`] with
//!   `caught_up`): under a light load each Kafka transaction then holds what arrived while
//!   the previous one committed, and nothing waits for a timer;
//! - otherwise at the first boundary where it reached a bound (messages, payload bytes, or
//!   time since its first message). The bounds are checked between transactions, so a
//!   group ends at most one PostgreSQL transaction past them, and a PostgreSQL
//!   transaction larger than the bounds is committed whole, ending its Kafka transaction.

use std::time::{Duration, Instant};

/// The bounds of a group, from the relay's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Messages.
    pub messages: usize,
    /// Payload bytes.
    pub bytes: usize,
    /// Time since the group's first message.
    pub age: Duration,
}

/// Whole PostgreSQL transactions read since the last Kafka commit.
#[derive(Debug, Default)]
pub struct Group {
    /// Outbox messages sent in this Kafka transaction.
    pub messages: usize,
    /// Their payload bytes.
    pub bytes: usize,
    /// When the first message was sent (the Kafka transaction began).
    pub opened_at: Option<Instant>,
    /// Commit LSN of the last whole PostgreSQL transaction in the group.
    pub last_commit_lsn: u64,
    /// Its end LSN: where the slot is confirmed after the Kafka commit.
    pub last_end_lsn: u64,
    /// Its commit time, microseconds since the Unix epoch.
    pub last_commit_micros: i64,
    /// Commit times of the group's PostgreSQL transactions that carried messages.
    pub commit_times_micros: Vec<i64>,
    /// Commit LSN of the last PostgreSQL transaction of the group that carried messages.
    pub last_carried_lsn: u64,
}

impl Group {
    /// One more message of the open PostgreSQL transaction is in the Kafka transaction.
    pub fn sent(&mut self, payload_bytes: usize, now: Instant) {
        self.opened_at.get_or_insert(now);
        self.messages += 1;
        self.bytes += payload_bytes;
    }

    /// A PostgreSQL transaction ended whole; `carried` says whether it had messages.
    pub fn closed(&mut self, commit_lsn: u64, end_lsn: u64, commit_micros: i64, carried: bool) {
        self.last_commit_lsn = commit_lsn;
        self.last_end_lsn = end_lsn;
        self.last_commit_micros = commit_micros;
        if carried {
            self.last_carried_lsn = commit_lsn;
            self.commit_times_micros.push(commit_micros);
        }
    }

    /// Whether whole transactions were read since the last commit or confirmation.
    pub fn has_closed_transactions(&self) -> bool {
        self.last_end_lsn != 0
    }

    /// Whether to commit now, at a PostgreSQL transaction boundary (the caller checks that
    /// none is open): when caught up with the server, or past a bound.
    pub fn due(&self, bounds: &Bounds, caught_up: bool, now: Instant) -> bool {
        if !self.has_closed_transactions() {
            return false;
        }
        caught_up
            || self.messages >= bounds.messages
            || self.bytes >= bounds.bytes
            || self
                .opened_at
                .is_some_and(|opened| now.duration_since(opened) >= bounds.age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        messages: 3,
        bytes: 1_000,
        age: Duration::from_millis(100),
    };

    #[test]
    fn a_group_is_due_when_caught_up_or_past_a_bound_and_never_empty() {
        let start = Instant::now();
        let mut group = Group::default();
        assert!(!group.due(&BOUNDS, true, start), "nothing to commit");
        group.sent(10, start);
        group.sent(10, start);
        assert!(
            !group.due(&BOUNDS, true, start),
            "inside a PostgreSQL transaction: not before its Commit"
        );
        group.closed(100, 110, 1, true);
        assert!(!group.due(&BOUNDS, false, start));
        assert!(group.due(&BOUNDS, true, start), "caught up");
        assert!(
            group.due(&BOUNDS, false, start + Duration::from_millis(100)),
            "old"
        );
        group.sent(10, start);
        group.closed(120, 130, 2, true);
        assert!(group.due(&BOUNDS, false, start), "three messages");
        assert_eq!(group.commit_times_micros, vec![1, 2]);
    }

    #[test]
    fn a_transaction_larger_than_the_bounds_is_due_only_at_its_end() {
        let start = Instant::now();
        let mut group = Group::default();
        for _ in 0..10 {
            group.sent(500, start);
        }
        assert!(!group.due(&BOUNDS, false, start + Duration::from_secs(1)));
        group.closed(100, 110, 1, true);
        assert!(group.due(&BOUNDS, false, start));
        let mut bytes = Group::default();
        bytes.sent(1_000, start);
        bytes.closed(100, 110, 1, true);
        assert!(bytes.due(&BOUNDS, false, start), "bytes");
    }
}
