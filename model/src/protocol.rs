//! The protocol: the actions each party may take in a state, and what each does
//! ([`crate::check`] hands them to stateright). The parties: the ledger (commits), the process that holds the slot (the
//! relay, or `ledger relay recover`), Kafka (acknowledges, or the process dies first),
//! retention, an operator (recover), a DBA (moves or drops the slot) and a Kafka admin
//! (removes records). Crashes, DBA moves, record removals and recovers are bounded by
//! [`Faults`]; everything else may happen at every step.

use crate::decide::{self, Started};
use crate::state::{
    Delivery, Faults, Process, Registration, Rows, Rule, SnapshotStep, State, Step,
};

/// The model: which transactions the ledger commits, how the relay delivers, which
/// retention rule runs, and how many faults a run may have.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Outbox rows of each transaction, in commit order (at most 8 rows in all).
    pub transactions: Vec<u8>,
    /// The delivery mode.
    pub delivery: Delivery,
    /// Retention's rule.
    pub rule: Rule,
    /// The most faults of each kind in one run.
    pub faults: Faults,
}

/// One step of one party.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The ledger commits its next transaction: events and outbox rows.
    Commit,
    /// The relay starts (first start, or restart after a crash): `slot::decide`, then the
    /// `Gap` check.
    Start,
    /// Kafka acknowledges every row of the snapshot.
    SnapshotAcked,
    /// The relay's position at the consistent point is written to Kafka.
    SnapshotPosition,
    /// In one statement: registration ready, `published_lsn` = the consistent point.
    SnapshotReady,
    /// The relay reads the next transaction after the slot's confirmed position and
    /// sends its rows.
    Send,
    /// Kafka acknowledges them with the relay's position (exactly once: the Kafka
    /// transaction commits).
    Ack,
    /// The relay confirms the slot.
    Confirm,
    /// The relay records `published_lsn`, for its generation and while ready: the lesser
    /// of what Kafka acknowledged and the slot's position.
    Record,
    /// The process holding the slot dies (or its Kafka session fails): of the rows sent
    /// and not acknowledged, `landed` reached Kafka anyway (none in exactly once).
    Crash {
        /// What landed.
        landed: Rows,
    },
    /// Retention deletes what its rule allows.
    Prune,
    /// An operator runs `ledger relay recover` (refused while a session holds the slot).
    Recover,
    /// A DBA advances the slot (`pg_replication_slot_advance`, or a consuming
    /// `pg_logical_slot_get_changes`), to any committed position past its own.
    DbaAdvance {
        /// The position.
        to: u8,
    },
    /// A DBA drops the slot.
    DbaDrop,
    /// A Kafka admin removes records (delete-records; a topic deleted and re-created).
    DeleteRecords {
        /// The events removed.
        rows: Rows,
    },
}

impl Protocol {
    /// A model of `transactions` (rows per transaction) with the new retention rule, at
    /// least once, and no faults; the builders below add them.
    pub fn new(transactions: &[u8]) -> Self {
        assert!(
            transactions
                .iter()
                .map(|&rows| u32::from(rows))
                .sum::<u32>()
                <= Rows::BITS
        );
        Self {
            transactions: transactions.to_vec(),
            delivery: Delivery::AtLeastOnce,
            rule: Rule::PublishedLsn,
            faults: Faults::default(),
        }
    }

    /// With this delivery mode.
    pub fn delivery(self, delivery: Delivery) -> Self {
        Self { delivery, ..self }
    }

    /// With this retention rule.
    pub fn rule(self, rule: Rule) -> Self {
        Self { rule, ..self }
    }

    /// With these fault bounds.
    pub fn faults(self, faults: Faults) -> Self {
        Self { faults, ..self }
    }

    /// The outbox rows of transaction `tx` (1-based).
    pub fn rows_of(&self, tx: u8) -> Rows {
        let before: u8 = self.transactions[..usize::from(tx - 1)].iter().sum();
        let count = self.transactions[usize::from(tx - 1)];
        (((1_u16 << count) - 1) << before) as Rows
    }

    /// The rows of the transactions committed after position `after`, up to `upto`.
    pub fn rows_between(&self, after: u8, upto: u8) -> Rows {
        (after + 1..=upto).fold(0, |rows, tx| rows | self.rows_of(tx))
    }

    /// Every row of the committed transactions: the events the ledger holds.
    pub fn committed_rows(&self, state: &State) -> Rows {
        self.rows_between(0, state.committed)
    }

    /// Every row of every transaction.
    pub fn all_rows(&self) -> Rows {
        self.rows_between(0, self.transactions.len() as u8)
    }

    /// Whether `spent` may grow by one of the kind `pick` reads.
    fn allows(&self, state: &State, pick: fn(&Faults) -> u8) -> bool {
        pick(&state.spent) < pick(&self.faults)
    }

    /// Rows sent and not acknowledged by the process holding the slot.
    pub fn in_flight(&self, state: &State) -> Rows {
        match state.process {
            Process::Snapshot {
                rows,
                step: SnapshotStep::Publishing,
                ..
            } => rows,
            Process::Streaming {
                sending: Some((tx, Step::Sent)),
                ..
            } => self.rows_of(tx),
            _ => 0,
        }
    }

    /// The steps of the process holding the slot when nothing fails: what the relay does by
    /// itself. Empty when it refused, or has nothing to send.
    pub fn progress(&self, state: &State) -> Option<Action> {
        match state.process {
            Process::Down => Some(Action::Start),
            Process::Refused(_) => None,
            Process::Snapshot { step, .. } => Some(match step {
                SnapshotStep::Publishing => Action::SnapshotAcked,
                SnapshotStep::Acked => Action::SnapshotPosition,
                SnapshotStep::PositionWritten => Action::SnapshotReady,
            }),
            Process::Streaming { sending, .. } => match sending {
                None => (state.slot.unwrap_or(0) < state.committed).then_some(Action::Send),
                Some((_, Step::Sent)) => Some(Action::Ack),
                Some((_, Step::Acked)) => Some(Action::Confirm),
                Some((_, Step::Confirmed)) => Some(Action::Record),
            },
        }
    }

    /// Every action some party may take in `state`: the relay's own step first, then the
    /// environment's.
    pub fn offered(&self, state: &State, actions: &mut Vec<Action>) {
        if let Some(action) = self.progress(state) {
            actions.push(action);
        }
        self.environment(state, actions);
    }

    /// The environment's actions: faults within their bounds, retention, commits.
    fn environment(&self, state: &State, actions: &mut Vec<Action>) {
        if usize::from(state.committed) < self.transactions.len() {
            actions.push(Action::Commit);
        }
        actions.push(Action::Prune);
        if state.process.holds_slot() && self.allows(state, |f| f.crashes) {
            let sent = self.in_flight(state);
            let landed = match self.delivery {
                Delivery::ExactlyOnce if !matches!(state.process, Process::Snapshot { .. }) => 0,
                // A snapshot's rows go through an idempotent producer in both modes.
                _ => sent,
            };
            for subset in subsets(landed) {
                actions.push(Action::Crash { landed: subset });
            }
        }
        if !state.process.holds_slot() {
            if self.allows(state, |f| f.recovers) {
                actions.push(Action::Recover);
            }
            if let Some(confirmed) = state.slot
                && self.allows(state, |f| f.dba)
            {
                for to in confirmed + 1..=state.committed {
                    actions.push(Action::DbaAdvance { to });
                }
                actions.push(Action::DbaDrop);
            }
        }
        if state.kafka != 0 && self.allows(state, |f| f.kafka_losses) {
            for row in (0..Rows::BITS)
                .map(|bit| 1 << bit)
                .filter(|r| state.kafka & r != 0)
            {
                actions.push(Action::DeleteRecords { rows: row });
            }
            if state.kafka.count_ones() > 1 {
                actions.push(Action::DeleteRecords { rows: state.kafka });
            }
        }
    }

    /// The slot created anew from a snapshot at the end of the WAL, its registration not
    /// ready, `published_lsn` cleared, the generation bumped, and the outbox rows the
    /// snapshot sees to publish.
    fn begin_snapshot(state: &mut State) {
        let generation = state.registration.map_or(0, |r| r.generation) + 1;
        state.registration = Some(Registration {
            ready: false,
            generation,
            published: None,
        });
        state.slot = Some(state.committed);
        // What the new snapshot does not republish is its loss, not the admin's.
        state.removed = 0;
        state.process = Process::Snapshot {
            point: state.committed,
            rows: state.outbox,
            step: SnapshotStep::Publishing,
        };
    }

    /// `rows` reach Kafka.
    fn land(state: &mut State, rows: Rows) {
        state.kafka |= rows;
        state.removed &= !rows;
    }

    /// The relay's steps on a state, as [`Action`] says; `None` when `action` does not
    /// apply to the process's state.
    fn relay_step(&self, state: &mut State, action: Action) -> Option<()> {
        match state.process {
            Process::Down if action == Action::Start => {
                match decide::start(self.delivery, state) {
                    Started::Snapshot => Self::begin_snapshot(state),
                    Started::Refused(refusal) => state.process = Process::Refused(refusal),
                    Started::Stream => {
                        let generation = state.registration.map_or(0, |r| r.generation);
                        state.process = streaming(generation, None);
                    }
                }
                Some(())
            }
            Process::Snapshot { point, rows, step } => {
                Self::snapshot_step(state, action, point, rows, step)
            }
            Process::Streaming {
                generation,
                sending,
            } => self.stream_step(state, action, generation, sending),
            _ => None,
        }
    }

    /// A snapshot's steps: acknowledged, the position written, then ready with
    /// `published_lsn` at the consistent point, and the process done.
    fn snapshot_step(
        state: &mut State,
        action: Action,
        point: u8,
        rows: Rows,
        step: SnapshotStep,
    ) -> Option<()> {
        let next = match (action, step) {
            (Action::SnapshotAcked, SnapshotStep::Publishing) => {
                Self::land(state, rows);
                SnapshotStep::Acked
            }
            (Action::SnapshotPosition, SnapshotStep::Acked) => {
                state.position = Some(point);
                state.position_event = 0;
                SnapshotStep::PositionWritten
            }
            (Action::SnapshotReady, SnapshotStep::PositionWritten) => {
                let registration = state.registration.as_mut()?;
                registration.ready = true;
                registration.published = Some(point);
                state.process = Process::Down;
                return Some(());
            }
            _ => return None,
        };
        state.process = snapshot(point, rows, next);
        Some(())
    }

    /// Streaming's steps for the transaction after the slot's confirmed position: sent,
    /// acknowledged with the position, the slot confirmed, `published_lsn` recorded.
    fn stream_step(
        &self,
        state: &mut State,
        action: Action,
        generation: u8,
        sending: Option<(u8, Step)>,
    ) -> Option<()> {
        let next = match (action, sending) {
            (Action::Send, None) => {
                let tx = state.slot? + 1;
                if tx > state.committed {
                    return None;
                }
                Some((tx, Step::Sent))
            }
            (Action::Ack, Some((tx, Step::Sent))) => {
                Self::land(state, self.rows_of(tx));
                state.position = Some(tx);
                // The newest event of the transaction, the last of its rows: only exactly
                // once reads it (rule 7), so at least once's states need not tell it.
                let rows = self.rows_of(tx);
                state.position_event = match self.delivery {
                    Delivery::ExactlyOnce => 1 << (Rows::BITS - 1 - rows.leading_zeros()),
                    Delivery::AtLeastOnce => 0,
                };
                Some((tx, Step::Acked))
            }
            (Action::Confirm, Some((tx, Step::Acked))) => {
                state.slot = state.slot.max(Some(tx));
                Some((tx, Step::Confirmed))
            }
            (Action::Record, Some((tx, Step::Confirmed))) => {
                // The lesser of what Kafka acknowledged and the slot's position as
                // PostgreSQL has it (sql/record_published.sql): never ahead of the slot.
                if let Some(registration) = state.registration.as_mut()
                    && registration.ready
                    && registration.generation == generation
                {
                    registration.published = registration.published.max(state.slot.min(Some(tx)));
                }
                None
            }
            _ => return None,
        };
        state.process = streaming(generation, next);
        Some(())
    }

    /// The environment's steps on a state.
    fn environment_step(&self, state: &mut State, action: Action) {
        match action {
            Action::Commit => {
                state.committed += 1;
                state.outbox |= self.rows_of(state.committed);
            }
            Action::Crash { landed } => {
                Self::land(state, landed);
                state.process = Process::Down;
                state.spent.crashes += 1;
            }
            Action::Prune => {
                let deleted = decide::deletable(self.rule, state, |tx| self.rows_of(tx));
                state.deleted_unheld |= deleted & !state.kafka & !state.removed;
                state.outbox &= !deleted;
            }
            Action::Recover => {
                state.spent.recovers += 1;
                Self::begin_snapshot(state);
            }
            Action::DbaAdvance { to } => {
                state.spent.dba += 1;
                state.slot = Some(to);
            }
            Action::DbaDrop => {
                state.spent.dba += 1;
                state.slot = None;
            }
            Action::DeleteRecords { rows } => {
                state.spent.kafka_losses += 1;
                state.removed |= rows & state.kafka;
                state.kafka &= !rows;
            }
            _ => unreachable!("{action:?} is the relay's"),
        }
    }

    /// `action` applied to `state`, or `None` when it does not apply there.
    pub fn step(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Start
            | Action::SnapshotAcked
            | Action::SnapshotPosition
            | Action::SnapshotReady
            | Action::Send
            | Action::Ack
            | Action::Record
            | Action::Confirm => self.relay_step(&mut next, action)?,
            _ => self.environment_step(&mut next, action),
        }
        Some(next)
    }

    /// The state before anything happened: no transaction, no slot, no registration.
    pub fn initial(&self) -> State {
        State {
            committed: 0,
            outbox: 0,
            kafka: 0,
            removed: 0,
            deleted_unheld: 0,
            position: None,
            position_event: 0,
            slot: None,
            registration: None,
            process: Process::Down,
            spent: Faults::default(),
        }
    }
}

fn snapshot(point: u8, rows: Rows, step: SnapshotStep) -> Process {
    Process::Snapshot { point, rows, step }
}

fn streaming(generation: u8, sending: Option<(u8, Step)>) -> Process {
    Process::Streaming {
        generation,
        sending,
    }
}

/// Every subset of `rows`, the empty one first.
fn subsets(rows: Rows) -> impl Iterator<Item = Rows> {
    // Counting down through the submasks of `rows`.
    let mut next = Some(rows);
    std::iter::from_fn(move || {
        let current = next?;
        next = (current != 0).then(|| (current - 1) & rows);
        Some(current)
    })
    .collect::<Vec<_>>()
    .into_iter()
    .rev()
}

#[cfg(test)]
mod tests {
    use stateright::Model;

    use super::*;

    #[test]
    fn rows_are_numbered_in_commit_order_and_every_part_of_a_send_may_land() {
        let model = Protocol::new(&[1, 2, 1]);
        let rows: Vec<Rows> = (1..=3).map(|tx| model.rows_of(tx)).collect();
        assert_eq!(rows, [0b0001, 0b0110, 0b1000]);
        assert_eq!(model.rows_between(1, 3), 0b1110);
        assert_eq!(model.all_rows(), 0b1111);
        assert_eq!(subsets(0b101).collect::<Vec<_>>(), [0, 0b001, 0b100, 0b101]);
        assert_eq!(subsets(0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_held_slot_is_moved_by_nobody_but_its_holder() {
        let model = Protocol::new(&[1]).faults(Faults {
            crashes: 1,
            dba: 1,
            kafka_losses: 1,
            recovers: 1,
        });
        let mut state = model.initial();
        for action in [Action::Commit, Action::Start] {
            state = model.step(&state, action).expect("applies");
        }
        assert!(state.process.holds_slot(), "{state:?}");
        let mut offered = Vec::new();
        model.actions(&state, &mut offered);
        for refused in [
            Action::Recover,
            Action::DbaAdvance { to: 1 },
            Action::DbaDrop,
        ] {
            assert!(!offered.contains(&refused), "{refused:?} in {offered:?}");
        }
        // What a snapshot sent may land in any part when its process dies.
        assert!(offered.contains(&Action::Crash { landed: 0b1 }));
        let crashed = model.step(&state, Action::Crash { landed: 0 }).unwrap();
        let mut offered = Vec::new();
        model.actions(&crashed, &mut offered);
        // (The slot is at the end of the WAL: there is nothing to advance it past.)
        for allowed in [Action::Recover, Action::DbaDrop] {
            assert!(offered.contains(&allowed), "{allowed:?} not in {offered:?}");
        }
    }
}
