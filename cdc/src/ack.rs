//! Which LSN the slot may confirm: the end of the newest transaction whose messages, and
//! every earlier transaction's messages, Kafka has acknowledged. Never past an
//! unacknowledged one.
//!
//! Pure bookkeeping, no I/O: the relay opens each transaction at its Begin, counts each
//! message as it sends it (before the transaction's Commit has arrived), closes it at its
//! Commit with the end LSN, reports each delivery, and asks what it may confirm. An open
//! transaction is never confirmable, however many of its messages are acknowledged.

use std::collections::VecDeque;

/// Identifies one published message: its transaction's sequence number in this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransactionSeq(pub u64);

#[derive(Debug)]
struct Pending {
    seq: TransactionSeq,
    commit_lsn: u64,
    end_lsn: u64,
    commit_time_micros: i64,
    messages: usize,
    remaining: usize,
    closed: bool,
    /// The id of its first event, for the relay's position.
    event: Option<String>,
    /// The heartbeat count it carried, if it is a heartbeat.
    heartbeats: Option<u64>,
}

/// The newest transaction acknowledged along with everything before it: where the slot
/// may be confirmed, and what the relay's position record says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acknowledged {
    /// Its commit LSN.
    pub commit_lsn: u64,
    /// Its end LSN: where the slot may be confirmed.
    pub end_lsn: u64,
    /// Its commit time.
    pub commit_time_micros: i64,
    /// The newest event acknowledged (its id and its transaction's commit LSN).
    pub last_event: Option<(String, u64)>,
    /// The highest heartbeat count acknowledged.
    pub heartbeats: Option<u64>,
}

/// A transaction whose messages, and every earlier one's, are all acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// End LSN of the transaction.
    pub end_lsn: u64,
    /// Its commit time.
    pub commit_time_micros: i64,
    /// How many messages it carried.
    pub messages: usize,
}

/// Transactions read from the slot whose messages are not all acknowledged yet, in commit
/// order.
#[derive(Debug, Default)]
pub struct AckTracker {
    pending: VecDeque<Pending>,
    next_seq: u64,
    in_flight_messages: usize,
    confirmable: Option<Acknowledged>,
    settled: Vec<Settled>,
}

impl AckTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens a transaction at its Begin; its messages follow with [`Self::sent`] and its end
    /// with [`Self::close`].
    pub fn open(&mut self, commit_lsn: u64, commit_time_micros: i64) -> TransactionSeq {
        let seq = TransactionSeq(self.next_seq);
        self.next_seq += 1;
        self.pending.push_back(Pending {
            seq,
            commit_lsn,
            end_lsn: 0,
            commit_time_micros,
            messages: 0,
            remaining: 0,
            closed: false,
            event: None,
            heartbeats: None,
        });
        seq
    }

    /// Counts one more message of the open transaction `seq`, about to be sent (the event
    /// `event_id`).
    ///
    /// # Panics
    /// If `seq` is not open: a bookkeeping bug that must not pass silently.
    pub fn sent(&mut self, seq: TransactionSeq, event_id: &str) {
        let entry = self.entry(seq);
        assert!(!entry.closed, "a message after the Commit of {seq:?}");
        entry.messages += 1;
        entry.remaining += 1;
        if entry.event.is_none() {
            entry.event = Some(event_id.to_owned());
        }
        self.in_flight_messages += 1;
    }

    /// Closes `seq` at its Commit: it becomes confirmable up to `end_lsn` once its messages,
    /// and every earlier transaction's, are acknowledged. `heartbeats`: the count a
    /// heartbeat transaction carried.
    pub fn close(&mut self, seq: TransactionSeq, end_lsn: u64, heartbeats: Option<u64>) {
        let entry = self.entry(seq);
        entry.end_lsn = end_lsn;
        entry.heartbeats = heartbeats;
        entry.closed = true;
        self.settle();
    }

    fn entry(&mut self, seq: TransactionSeq) -> &mut Pending {
        self.pending
            .iter_mut()
            .find(|entry| entry.seq == seq)
            .expect("a message for a transaction that is not pending")
    }

    /// Records that one message of `seq` is durably in Kafka (or durably parked).
    ///
    /// # Panics
    /// If `seq` has no outstanding message: a bookkeeping bug that must not pass silently.
    pub fn delivered(&mut self, seq: TransactionSeq) {
        let entry = self.entry(seq);
        assert!(
            entry.remaining > 0,
            "more deliveries than messages for {seq:?}"
        );
        entry.remaining -= 1;
        self.in_flight_messages -= 1;
        self.settle();
    }

    /// Pops every fully acknowledged transaction at the head of the queue.
    fn settle(&mut self) {
        while let Some(head) = self.pending.front() {
            if head.remaining > 0 || !head.closed {
                break;
            }
            let Some(head) = self.pending.pop_front() else {
                break;
            };
            self.settled.push(Settled {
                end_lsn: head.end_lsn,
                commit_time_micros: head.commit_time_micros,
                messages: head.messages,
            });
            let before = self.confirmable.take().unwrap_or_default();
            self.confirmable = Some(Acknowledged {
                commit_lsn: head.commit_lsn,
                end_lsn: head.end_lsn,
                commit_time_micros: head.commit_time_micros,
                last_event: head
                    .event
                    .map(|id| (id, head.commit_lsn))
                    .or(before.last_event),
                heartbeats: head.heartbeats.max(before.heartbeats),
            });
        }
    }

    /// Where the slot may confirm now: the newest transaction that is acknowledged along
    /// with everything before it.
    pub fn confirmable(&self) -> Option<&Acknowledged> {
        self.confirmable.as_ref()
    }

    /// Transactions settled since the last call, oldest first.
    pub fn take_settled(&mut self) -> Vec<Settled> {
        std::mem::take(&mut self.settled)
    }

    /// Messages sent and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.in_flight_messages
    }

    /// Transactions not yet confirmable.
    pub fn pending_transactions(&self) -> usize {
        self.pending.len()
    }

    /// The commit time of the oldest transaction not yet confirmable, open ones included;
    /// `None` when everything read is settled.
    pub fn oldest_pending_commit_micros(&self) -> Option<i64> {
        self.pending.front().map(|entry| entry.commit_time_micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl AckTracker {
        /// A whole committed transaction of `messages` messages: open, sent, close.
        fn begin(
            &mut self,
            end_lsn: u64,
            commit_time_micros: i64,
            messages: usize,
        ) -> TransactionSeq {
            let seq = self.open(end_lsn - 1, commit_time_micros);
            for _ in 0..messages {
                self.sent(seq, &format!("e{end_lsn}"));
            }
            self.close(seq, end_lsn, None);
            seq
        }

        /// The end LSN and commit time it may confirm.
        fn at(&self) -> Option<(u64, i64)> {
            self.confirmable()
                .map(|acknowledged| (acknowledged.end_lsn, acknowledged.commit_time_micros))
        }
    }

    #[test]
    fn confirms_only_up_to_the_first_unacknowledged_transaction() {
        let mut tracker = AckTracker::new();
        let first = tracker.begin(100, 1, 2);
        let second = tracker.begin(200, 2, 1);
        let third = tracker.begin(300, 3, 1);
        assert_eq!(tracker.at(), None);
        assert_eq!(tracker.in_flight(), 4);

        // Later transactions acknowledged first do not move the position.
        tracker.delivered(third);
        tracker.delivered(second);
        assert_eq!(tracker.at(), None);
        tracker.delivered(first);
        assert_eq!(tracker.at(), None, "one message of the first is still out");
        tracker.delivered(first);
        assert_eq!(tracker.at(), Some((300, 3)));
        let settled: Vec<(u64, usize)> = tracker
            .take_settled()
            .iter()
            .map(|s| (s.end_lsn, s.messages))
            .collect();
        assert_eq!(settled, vec![(100, 2), (200, 1), (300, 1)]);
        assert!(tracker.take_settled().is_empty());
        assert_eq!(tracker.in_flight(), 0);
        assert_eq!(tracker.pending_transactions(), 0);
    }

    #[test]
    fn the_oldest_pending_commit_is_the_first_not_yet_settled() {
        let mut tracker = AckTracker::new();
        assert_eq!(tracker.oldest_pending_commit_micros(), None);
        let first = tracker.begin(100, 10, 1);
        let open = tracker.open(19, 20);
        assert_eq!(tracker.oldest_pending_commit_micros(), Some(10));
        tracker.delivered(first);
        assert_eq!(tracker.oldest_pending_commit_micros(), Some(20));
        tracker.close(open, 200, None);
        assert_eq!(tracker.oldest_pending_commit_micros(), None);
    }

    #[test]
    fn empty_transactions_are_confirmable_behind_earlier_ones() {
        let mut tracker = AckTracker::new();
        let first = tracker.begin(100, 1, 1);
        tracker.begin(150, 2, 0); // a heartbeat
        assert_eq!(tracker.at(), None);
        tracker.delivered(first);
        assert_eq!(tracker.at(), Some((150, 2)));
        tracker.begin(180, 3, 0);
        assert_eq!(tracker.at(), Some((180, 3)));
    }

    #[test]
    fn an_open_transaction_is_not_confirmable_until_its_commit() {
        let mut tracker = AckTracker::new();
        let first = tracker.begin(100, 1, 0);
        assert_eq!(tracker.at(), Some((100, 1)));
        let open = tracker.open(249, 2);
        tracker.sent(open, "e");
        tracker.delivered(open);
        assert_eq!(tracker.in_flight(), 0);
        assert_eq!(
            tracker.at(),
            Some((100, 1)),
            "all sent messages acknowledged, but more may follow before the Commit"
        );
        tracker.sent(open, "e");
        tracker.close(open, 250, None);
        assert_eq!(tracker.at(), Some((100, 1)));
        tracker.delivered(open);
        assert_eq!(tracker.at(), Some((250, 2)));
        assert_eq!(tracker.take_settled().len(), 2);
        let _ = first;
    }

    #[test]
    fn the_position_carries_the_newest_event_and_heartbeat_acknowledged() {
        let mut tracker = AckTracker::new();
        let first = tracker.begin(100, 1, 2);
        let beat = tracker.open(149, 2);
        tracker.close(beat, 150, Some(7));
        assert_eq!(tracker.confirmable(), None);
        tracker.delivered(first);
        tracker.delivered(first);
        assert_eq!(
            tracker.confirmable(),
            Some(&Acknowledged {
                commit_lsn: 149,
                end_lsn: 150,
                commit_time_micros: 2,
                last_event: Some(("e100".into(), 99)),
                heartbeats: Some(7),
            }),
            "the heartbeat carries no event: the newest one is the first transaction's"
        );
        tracker.begin(180, 3, 0);
        let after = tracker.confirmable().unwrap();
        assert_eq!((after.end_lsn, after.heartbeats), (180, Some(7)));
    }

    #[test]
    #[should_panic(expected = "after the Commit")]
    fn a_message_after_the_commit_is_a_bug() {
        let mut tracker = AckTracker::new();
        let seq = tracker.open(99, 1);
        tracker.sent(seq, "e");
        tracker.close(seq, 100, None);
        tracker.sent(seq, "e");
    }

    #[test]
    #[should_panic(expected = "not pending")]
    fn a_delivery_for_a_settled_transaction_is_a_bug() {
        let mut tracker = AckTracker::new();
        let first = tracker.begin(100, 1, 1);
        tracker.delivered(first);
        tracker.delivered(first);
    }
}
