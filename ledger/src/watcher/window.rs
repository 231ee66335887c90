//! The watcher's memory, and what a round decides from it: pure, no I/O.
//!
//! - *pending*: the committed events above the watermark, at most `capacity` of them, the
//!   lowest positions first, each with whether it is overdue (older than the lag bound by
//!   the database's clock) and where a record of it was read, if one was.
//! - *ahead*: ids read from Kafka that are not pending (their event is beyond the window,
//!   committed after the last load, or a copy of an event at or below the watermark, which
//!   the caller prunes by asking the database), at most `capacity`. An id that would
//!   overflow it is *dropped*: the lowest offset dropped per partition is kept, and the
//!   round that settles rewinds the partition there, so nothing dropped goes unread.
//!
//! [`Window::settle`] walks pending in position order up to `closed` (every position at or
//! below it is committed or rolled back for good) and applies the shared verdict
//! ([`crate::reconcile::classify_missing`]) to each event no record was read of. The
//! watermark moves over the prefix that is settled.
//!
//! [`Window::checkpoint`] is where a restart resumes each partition: the lowest offset of a
//! record read of an unsettled event, or dropped, else where the read stands. The records
//! before it are of settled events, so a restart that forgets `ahead` and the seen marks
//! loses nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::reconcile::{Missing, classify_missing};

/// Where a record was read: the partition's index in the watcher's list, and its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The partition's index.
    pub partition: usize,
    /// The record's offset.
    pub offset: i64,
}

/// One committed event above the watermark, as loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// Its position in `events`.
    pub position: i64,
    /// Its id.
    pub id: u128,
    /// Whether it was recorded longer than the lag bound ago.
    pub overdue: bool,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u128,
    overdue: bool,
    seen: Option<Seen>,
    /// When a load first brought it: a transaction that committed long after its
    /// `recorded_at` is overdue at once, and gets the grace from here.
    first_loaded: Instant,
}

/// What [`Window::settle`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// The new watermark.
    pub watermark: i64,
    /// Events found missing: `(position, id)`.
    pub missing: Vec<(i64, u128)>,
    /// Events a record was read of (some may have been listed missing before a rescan).
    pub found: Vec<u128>,
    /// Overdue events left unsettled because the read did not reach the partitions' ends.
    pub undecided: usize,
}

/// The pending window and the ids read ahead of it.
#[derive(Debug)]
pub struct Window {
    watermark: i64,
    capacity: usize,
    pending: BTreeMap<i64, Pending>,
    by_id: HashMap<u128, i64>,
    ahead: HashMap<u128, Seen>,
    /// Ids put in `ahead` since the caller last asked ([`Window::unchecked`]).
    unchecked: Vec<u128>,
    /// Per partition, the lowest offset of a record dropped because `ahead` was full.
    dropped: HashMap<usize, i64>,
    /// Whether the last load brought every event above the watermark (fewer than
    /// `capacity`).
    complete: bool,
    /// The highest position the last load brought.
    loaded_to: i64,
    /// Every event at or below this (above the watermark) is pending: a load that ran once
    /// it was closed brought them all. Loads start above it, so that an event is read from
    /// the database about once, not once a round until it settles.
    final_to: i64,
    /// When the last load ran.
    loaded_at: Instant,
    /// How long an event stays not due after a load first brought it.
    grace: Duration,
}

impl Window {
    /// An empty window at `watermark`, holding at most `capacity` events and as many ids
    /// read ahead.
    pub fn new(watermark: i64, capacity: usize) -> Self {
        Self {
            watermark,
            capacity: capacity.max(1),
            pending: BTreeMap::new(),
            by_id: HashMap::new(),
            ahead: HashMap::new(),
            unchecked: Vec::new(),
            dropped: HashMap::new(),
            complete: false,
            loaded_to: watermark,
            final_to: watermark,
            loaded_at: Instant::now(),
            grace: Duration::ZERO,
        }
    }

    /// The same window, where an event is due only `grace` after a load first brought it
    /// (see [`Window::settle`]).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The watermark.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// How many events to load: the window's capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Events pending, and ids held ahead.
    pub fn sizes(&self) -> (usize, usize) {
        (self.pending.len(), self.ahead.len())
    }

    /// Where the next load starts: the events at or below it are pending already.
    pub fn load_from(&self) -> i64 {
        self.watermark.max(self.final_to)
    }

    /// How many events the next load may bring above [`Window::load_from`].
    pub fn room(&self) -> usize {
        let kept = self.pending.range(..=self.load_from()).count();
        self.capacity.saturating_sub(kept)
    }

    /// The pending events at or below [`Window::load_from`] that are neither read nor
    /// overdue: the next load asks their age again, since the database's clock says when
    /// each becomes overdue.
    pub fn rechecks(&self) -> Vec<i64> {
        self.pending
            .range(..=self.load_from())
            .filter(|(_, pending)| !pending.overdue && pending.seen.is_none())
            .map(|(&position, _)| position)
            .collect()
    }

    /// Replaces pending with `events` (above the watermark, lowest first, at most
    /// `capacity`), keeping what was read of each, from pending or from ahead.
    pub fn load(&mut self, events: &[Loaded]) {
        self.load_at(events, Instant::now());
    }

    /// [`Window::load`] at `now`.
    pub fn load_at(&mut self, events: &[Loaded], now: Instant) {
        self.load_closed_at(events, self.watermark, now);
    }

    /// A load that ran with every position at or below `closed` committed or rolled back
    /// for good: `events` are those above [`Window::load_from`] (lowest first, at most
    /// [`Window::room`]) and those of [`Window::rechecks`], with their age now. The events
    /// at or below where it started stay pending as they were, their age updated; those
    /// above are replaced by `events`, keeping what was read of each, from pending or from
    /// ahead. A complete load (fewer than the room) makes every event up to `closed` final.
    pub fn load_closed(&mut self, events: &[Loaded], closed: i64) {
        self.load_closed_at(events, closed, Instant::now());
    }

    /// [`Window::load_closed`] at `now`.
    pub fn load_closed_at(&mut self, events: &[Loaded], closed: i64, now: Instant) {
        let from = self.load_from();
        let room = self.room();
        let (rechecked, events): (Vec<Loaded>, Vec<Loaded>) =
            events.iter().partition(|event| event.position <= from);
        // What was loaded above `from` before; `self.pending` keeps what is at or below it.
        let pending = self.pending.split_off(&(from + 1));
        for event in rechecked {
            if let Some(kept) = self.pending.get_mut(&event.position) {
                kept.overdue = event.overdue;
            }
        }
        let mut above = BTreeMap::new();
        for event in events.iter().filter(|e| e.position > self.watermark) {
            let old = self
                .by_id
                .get(&event.id)
                .and_then(|position| pending.get(position));
            let seen = old
                .and_then(|old| old.seen)
                .or_else(|| self.ahead.remove(&event.id));
            above.insert(
                event.position,
                Pending {
                    id: event.id,
                    overdue: event.overdue,
                    seen,
                    first_loaded: old.map_or(now, |old| old.first_loaded),
                },
            );
        }
        // An event pending before that this load left out (events committed late below it
        // filled a capped load) keeps what was read of it, ahead.
        for (position, old) in &pending {
            self.by_id.remove(&old.id);
            if let Some(seen) = old.seen
                && !above.contains_key(position)
            {
                self.ahead.insert(old.id, seen);
            }
        }
        for (&position, event) in &above {
            self.by_id.insert(event.id, position);
        }
        self.complete = events.len() < room;
        self.loaded_to = events.last().map_or(from, |event| event.position);
        let final_to = if self.complete {
            closed
        } else {
            closed.min(self.loaded_to)
        };
        self.final_to = self.final_to.max(final_to);
        self.pending.append(&mut above);
        self.loaded_at = now;
    }

    /// A record of event `id` read at `seen`.
    pub fn read(&mut self, id: u128, seen: Seen) {
        if let Some(position) = self.by_id.get(&id) {
            if let Some(pending) = self.pending.get_mut(position) {
                pending.seen.get_or_insert(seen);
            }
            return;
        }
        if self.ahead.contains_key(&id) {
            return;
        }
        if self.ahead.len() < self.capacity {
            self.ahead.insert(id, seen);
            self.unchecked.push(id);
            return;
        }
        let lowest = self.dropped.entry(seen.partition).or_insert(seen.offset);
        *lowest = (*lowest).min(seen.offset);
    }

    /// The ids put ahead since the last call: the caller asks the database which of them
    /// are at or below the watermark, or no event at all, and [`Window::forget`]s those.
    pub fn unchecked(&mut self) -> Vec<u128> {
        std::mem::take(&mut self.unchecked)
    }

    /// Forgets ids read ahead that need no more watching.
    pub fn forget(&mut self, ids: &[u128]) {
        for id in ids {
            self.ahead.remove(id);
        }
    }

    /// The overdue events up to `closed` no record was read of: the caller asks
    /// `outbox_parked` about them before [`Window::settle`].
    pub fn overdue_unread(&self, closed: i64) -> Vec<u128> {
        self.pending
            .range(..=closed)
            .filter(|(_, pending)| pending.overdue && pending.seen.is_none())
            .map(|(_, pending)| pending.id)
            .collect()
    }

    /// Settles pending events up to `closed`: `read_to_end` says whether every partition
    /// was read to the end it had when the round started, `parked` which unread events
    /// `outbox_parked` holds. An unread event is due when it is overdue, the read reached
    /// the ends, and the grace since a load first brought it passed.
    pub fn settle(&mut self, closed: i64, read_to_end: bool, parked: &HashSet<u128>) -> Settled {
        let mut settled = Settled::default();
        let mut through = None;
        let mut stopped = None;
        for (&position, pending) in self.pending.range(..=closed) {
            if pending.seen.is_some() {
                settled.found.push(pending.id);
            } else {
                let waited = self
                    .loaded_at
                    .saturating_duration_since(pending.first_loaded);
                let due = pending.overdue && read_to_end && waited >= self.grace;
                match classify_missing(parked.contains(&pending.id), due) {
                    Missing::Parked => {}
                    Missing::Lost => settled.missing.push((position, pending.id)),
                    Missing::Unseen => {
                        if pending.overdue {
                            settled.undecided += 1;
                        }
                        stopped = Some(position);
                        break;
                    }
                }
            }
            through = Some(position);
        }
        let next = through.unwrap_or(self.watermark);
        // Up to the first unsettled event, or to `closed` when none is left: the positions
        // between the events loaded are holes (a load brings every event above the
        // watermark, lowest first), but not beyond what a capped load brought.
        let watermark = if let Some(unsettled) = stopped {
            next.max(unsettled - 1)
        } else if self.complete {
            next.max(closed)
        } else {
            next.max(closed.min(self.loaded_to))
        };
        self.advance(watermark);
        settled.watermark = self.watermark;
        settled
    }

    fn advance(&mut self, watermark: i64) {
        if watermark <= self.watermark {
            return;
        }
        self.watermark = watermark;
        let kept = self.pending.split_off(&(watermark + 1));
        for pending in self.pending.values() {
            self.by_id.remove(&pending.id);
        }
        self.pending = kept;
    }

    /// Takes the dropped offsets: the partitions to rewind, and where to. Call once the
    /// round settled, so that the window moved and there is room again.
    pub fn take_rewinds(&mut self) -> HashMap<usize, i64> {
        if self.dropped.is_empty() {
            return HashMap::new();
        }
        // What is ahead is forgotten with what was dropped: each partition is read again
        // from the lowest of both.
        let mut rewinds = std::mem::take(&mut self.dropped);
        for seen in self.ahead.values() {
            let lowest = rewinds.entry(seen.partition).or_insert(seen.offset);
            *lowest = (*lowest).min(seen.offset);
        }
        self.ahead.clear();
        self.unchecked.clear();
        rewinds
    }

    /// Where a restart resumes each of `positions` (the offsets the read stands at, per
    /// partition index): before every record of an unsettled event, or dropped.
    pub fn checkpoint(&self, positions: &[i64]) -> Vec<i64> {
        let mut resume = positions.to_vec();
        let mut lower = |seen: Seen| {
            if let Some(offset) = resume.get_mut(seen.partition) {
                *offset = (*offset).min(seen.offset);
            }
        };
        self.pending
            .values()
            .filter_map(|pending| pending.seen)
            .for_each(&mut lower);
        self.ahead.values().copied().for_each(&mut lower);
        for (&partition, &offset) in &self.dropped {
            lower(Seen { partition, offset });
        }
        resume
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(position: i64, overdue: bool) -> Loaded {
        Loaded {
            position,
            id: position as u128 + 1000,
            overdue,
        }
    }

    fn at(partition: usize, offset: i64) -> Seen {
        Seen { partition, offset }
    }

    #[test]
    fn an_overdue_event_never_read_is_missing_once_the_read_reached_the_ends() {
        let mut window = Window::new(0, 10);
        window.load(&[event(1, true), event(2, true), event(4, false)]);
        window.read(1001, at(0, 0));
        // Not read to the end: event 2 stays undecided, the watermark stops before it.
        let early = window.settle(4, false, &HashSet::new());
        assert_eq!((early.watermark, early.undecided), (1, 1));
        assert!(early.missing.is_empty());
        let settled = window.settle(4, true, &HashSet::new());
        assert_eq!(settled.missing, [(2, 1002)]);
        // Event 4 is young and unread: the watermark waits before it (3 is a hole).
        assert_eq!(settled.watermark, 3);
    }

    #[test]
    fn an_event_overdue_when_first_loaded_is_due_only_after_the_grace() {
        let start = Instant::now();
        let grace = Duration::from_secs(5);
        let mut window = Window::new(0, 10).with_grace(grace);
        window.load_at(&[event(1, true)], start);
        let early = window.settle(1, true, &HashSet::new());
        assert_eq!((early.missing.len(), early.undecided), (0, 1));
        window.load_at(&[event(1, true)], start + grace);
        assert_eq!(window.settle(1, true, &HashSet::new()).missing, [(1, 1001)]);
    }

    #[test]
    fn a_parked_event_is_not_missing_and_the_watermark_passes_it() {
        let mut window = Window::new(0, 10);
        window.load(&[event(1, true)]);
        let settled = window.settle(5, true, &HashSet::from([1001]));
        assert!(settled.missing.is_empty());
        assert_eq!(settled.watermark, 5);
    }

    #[test]
    fn nothing_above_closed_settles_even_when_read() {
        let mut window = Window::new(0, 10);
        window.load(&[event(1, true), event(3, true)]);
        window.read(1001, at(0, 5));
        window.read(1003, at(0, 6));
        let settled = window.settle(2, true, &HashSet::new());
        assert_eq!(settled.watermark, 2);
        assert_eq!(settled.found, [1001]);
        // Event 3's record is not settled: a restart reads partition 0 again from it.
        assert_eq!(window.checkpoint(&[9]), [6]);
    }

    #[test]
    fn a_record_read_before_its_event_was_loaded_counts_when_it_is() {
        let mut window = Window::new(0, 10);
        window.load(&[]);
        window.read(1001, at(1, 7));
        assert_eq!(window.unchecked(), [1001]);
        assert_eq!(window.checkpoint(&[3, 9]), [3, 7]);
        window.load(&[event(1, true)]);
        let settled = window.settle(1, true, &HashSet::new());
        assert_eq!((settled.watermark, settled.found.len()), (1, 1));
        assert_eq!(window.checkpoint(&[3, 9]), [3, 9]);
    }

    #[test]
    fn a_full_window_moves_only_to_its_last_settled_event_and_dropped_ids_rewind() {
        let mut window = Window::new(0, 2);
        window.load(&[event(1, true), event(2, true)]);
        window.read(1001, at(0, 0));
        window.read(1002, at(0, 1));
        window.read(1005, at(0, 2));
        window.read(1006, at(0, 3));
        window.read(1007, at(0, 4));
        // Ahead holds two; the third is dropped at offset 4.
        assert_eq!(window.sizes(), (2, 2));
        assert_eq!(window.checkpoint(&[5]), [0]);
        let settled = window.settle(100, true, &HashSet::new());
        // The load was capped: events 3 and above were not seen, so no jump to 100.
        assert_eq!(settled.watermark, 2);
        // Ahead held offsets 2 and 3, below the drop: the partition is read again from 2.
        assert_eq!(window.take_rewinds(), HashMap::from([(0, 2)]));
        assert_eq!(window.sizes(), (0, 0));
    }

    #[test]
    fn an_event_a_capped_load_leaves_out_keeps_what_was_read_of_it() {
        let mut window = Window::new(0, 2);
        window.load(&[event(2, true), event(3, true)]);
        window.read(1003, at(1, 9));
        // Event 1 commits late, below them: the capped load now brings 1 and 2.
        window.load(&[event(1, true), event(2, true)]);
        assert_eq!(window.checkpoint(&[20, 20]), [20, 9]);
        window.read(1001, at(0, 0));
        window.read(1002, at(0, 1));
        assert_eq!(window.settle(3, true, &HashSet::new()).watermark, 2);
        window.load(&[event(3, true)]);
        let settled = window.settle(3, true, &HashSet::new());
        assert_eq!((settled.watermark, settled.missing.len()), (3, 0));
    }

    #[test]
    fn a_complete_load_with_nothing_pending_moves_to_closed() {
        let mut window = Window::new(7, 10);
        window.load(&[]);
        assert_eq!(window.settle(12, false, &HashSet::new()).watermark, 12);
        // A load that filled the window does not.
        let mut full = Window::new(7, 1);
        full.load(&[event(8, false)]);
        full.read(1008, at(0, 0));
        assert_eq!(full.settle(12, false, &HashSet::new()).watermark, 8);
    }

    #[test]
    fn a_closed_complete_load_is_final_and_the_next_starts_above_it() {
        let mut window = Window::new(0, 10);
        window.load_closed(&[event(1, false), event(2, false), event(4, false)], 3);
        // Up to 3, every event is pending: the next load starts above it, and asks the
        // age of the two young unread ones below it.
        assert_eq!(window.load_from(), 3);
        assert_eq!(window.rechecks(), [1, 2]);
        assert_eq!(window.room(), 8);
        window.read(1002, at(0, 0));
        assert_eq!(window.rechecks(), [1]);
        // The next load brings 4 and 5 above it, and event 1, overdue now, below it.
        window.load_closed(&[event(1, true), event(4, false), event(5, false)], 5);
        assert_eq!(window.sizes(), (4, 0));
        assert_eq!(window.load_from(), 5);
        let settled = window.settle(5, true, &HashSet::new());
        assert_eq!(settled.missing, [(1, 1001)]);
        assert_eq!(settled.found, [1002]);
        // 4 is young and unread: the watermark waits before it.
        assert_eq!(settled.watermark, 3);
        // A record read of a pending event below where a load starts stays with it.
        window.read(1005, at(1, 9));
        window.load_closed(&[event(4, false), event(5, false)], 5);
        assert_eq!(window.checkpoint(&[20, 20]), [20, 9]);
    }

    #[test]
    fn a_capped_load_is_final_only_up_to_what_it_brought() {
        let mut window = Window::new(0, 2);
        window.load_closed(&[event(1, false), event(2, false)], 9);
        assert_eq!((window.load_from(), window.room()), (2, 0));
        window.read(1001, at(0, 0));
        window.read(1002, at(0, 1));
        let settled = window.settle(9, true, &HashSet::new());
        assert_eq!(settled.watermark, 2);
        // Room again: the load starts at the watermark.
        assert_eq!((window.load_from(), window.room()), (2, 2));
    }

    #[test]
    fn an_event_committed_late_below_a_load_that_was_not_closed_is_loaded() {
        let mut window = Window::new(0, 10);
        // Nothing closed yet: the load is final nowhere, and 1 commits after it.
        window.load_closed(&[event(2, false)], 0);
        assert_eq!(window.load_from(), 0);
        window.load_closed(&[event(1, false), event(2, false)], 2);
        assert_eq!(window.sizes(), (2, 0));
        assert_eq!(window.load_from(), 2);
    }

    #[test]
    fn events_at_or_below_the_watermark_are_not_loaded() {
        let mut window = Window::new(5, 10);
        window.load(&[event(5, true), event(6, true)]);
        assert_eq!(window.sizes(), (1, 0));
    }
}
