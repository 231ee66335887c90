//! The model as stateright checks it: [`Protocol`]'s actions and steps as a
//! [`stateright::Model`], and the properties every state must have (`always`) or some
//! state must reach (`sometimes`, so that the invariants are not vacuous).

use stateright::{Model, Property};

use crate::protocol::{Action, Protocol};
use crate::state::{Process, Refusal, State};
use crate::watcher;

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.offered(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.step(state, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_UNHELD_DELETE, |_, state: &State| {
                state.deleted_unheld == 0
            }),
            Property::always(WATCHER_SEES_EVERY_GAP, |model: &Self, state: &State| {
                watcher::lost(model, state) & !watcher::flagged(model, state) == 0
            }),
            Property::always(WATCHER_PAGES_ONLY_ON_GAPS, |model: &Self, state: &State| {
                watcher::flagged(model, state) & !watcher::lost(model, state) == 0
            }),
            Property::always(REFUSES_ONLY_A_MOVED_SLOT, |_, state: &State| {
                !matches!(
                    state.process,
                    Process::Refused(Refusal::Gap | Refusal::Lost)
                ) || state.spent.dba > 0
            }),
            Property::always(NO_FALSE_REWOUND, |_, state: &State| {
                state.process != Process::Refused(Refusal::Rewound)
            }),
            Property::sometimes(ALL_PUBLISHED_AND_DELETED, |model: &Self, state: &State| {
                usize::from(state.committed) == model.transactions.len()
                    && state.outbox == 0
                    && state.kafka == model.all_rows()
            }),
            Property::sometimes(WATCHER_PAGES, |model: &Self, state: &State| {
                watcher::flagged(model, state) != 0
            }),
            Property::sometimes(SNAPSHOT_RETRIED, |_, state: &State| {
                state.registration.is_some_and(|r| r.generation >= 2)
            }),
        ]
    }
}

/// Invariant 1: no committed outbox row is deleted while Kafka lacks it, but for one an
/// admin removed from Kafka since the slot's snapshot (invariant 2 pages on that one, and
/// `recover`'s new snapshot republishes it while the outbox keeps it).
pub const NO_UNHELD_DELETE: &str = "no outbox row is deleted while Kafka lacks it";
/// Invariant 2: in every state, every event that will not reach Kafka by itself is flagged.
pub const WATCHER_SEES_EVERY_GAP: &str = "the watcher flags every event that is lost";
/// The watcher's converse: what it flags will not reach Kafka by itself.
pub const WATCHER_PAGES_ONLY_ON_GAPS: &str = "the watcher flags only events that are lost";
/// The relay stops for an operator (`Gap`, `Lost`) only when a DBA moved or dropped the
/// slot: its own crashes, retries and recovers never leave the slot ahead of Kafka's
/// position, nor registered and gone.
pub const REFUSES_ONLY_A_MOVED_SLOT: &str = "the relay refuses only a slot a DBA moved";
/// Exactly once's rule 7 refuses only a rewound database, and the model has none.
pub const NO_FALSE_REWOUND: &str = "the relay never refuses a database as rewound";
/// Not vacuous: every row reaches Kafka and leaves the outbox in some run.
pub const ALL_PUBLISHED_AND_DELETED: &str = "every row is published and deleted";
/// Not vacuous: the watcher pages in some run (one with faults that lose events).
pub const WATCHER_PAGES: &str = "the watcher pages";
/// Not vacuous: a snapshot is made again after a crash or by recover.
pub const SNAPSHOT_RETRIED: &str = "a slot is created from a snapshot again";
