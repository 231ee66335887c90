//! The decisions the model takes from the production code, and the ones it mirrors.
//!
//! Real (called, so the model checks the code that runs): what the relay does with its slot
//! at start, [`ra_ledger_cdc::relay::slot::decide`], and the `Gap` check against the
//! position Kafka holds, [`ra_ledger_cdc::history::continues`] (at least once) and
//! [`ra_ledger_cdc::history::resume`] (exactly once), with exactly once's rule 7 after it
//! ([`ra_ledger_cdc::history::must_hold`], [`ra_ledger_cdc::history::still_held`]). The model hands them the catalog row,
//! the registration and the positions it has, as the relay's `setup::open` does.
//!
//! Mirrored (the production decision is SQL, or not written yet): retention's delete rule
//! ([`deletable`]), which production applies through marks in `ledger/src/retention.rs`.

use ra_ledger_cdc::history::{self, Identity, NewestEvent, Server, Stored};
use ra_ledger_cdc::lsn::format_lsn;
use ra_ledger_cdc::relay::slot::{self, Registration, SlotState, Start};

use crate::state::{Delivery, Refusal, Rows, Rule, State};

/// The slot's name in every call (the decisions only quote it in errors).
const SLOT: &str = "ra_ledger";

/// What the relay does when it starts on a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Create the slot from a snapshot and publish the outbox rows it holds.
    Snapshot,
    /// Stream from the slot's confirmed position.
    Stream,
    /// Stop for an operator.
    Refused(Refusal),
}

/// What the relay does when it starts on `state`: `slot::decide` on the slot's catalog row
/// and registration, then, to stream, the history check of the slot against the position
/// Kafka holds (rule 5, `Gap`). The only other outcomes of those functions (another
/// cluster, timeline or database; a restored server) cannot arise in the model.
pub fn start(delivery: Delivery, state: &State) -> Started {
    let catalog = state.slot.map(|confirmed| SlotState {
        slot_type: "logical".into(),
        plugin: Some("pgoutput".into()),
        database: Some("ledger".into()),
        confirmed_flush_lsn: Some(format_lsn(u64::from(confirmed))),
        wal_status: Some("reserved".into()),
        ..SlotState::default()
    });
    let registration = state.registration.map(|registration| Registration {
        ready: registration.ready,
        ..Registration::default()
    });
    match slot::decide(SLOT, catalog.as_ref(), registration.as_ref()) {
        Ok(Start::FromSnapshot { .. }) => Started::Snapshot,
        Err(slot::SlotError::Lost { .. }) => Started::Refused(Refusal::Lost),
        Err(other) => unreachable!("the model's slot is always the relay's kind: {other}"),
        Ok(Start::Stream) => match gap(delivery, state, catalog.as_ref()) {
            Ok(()) => Started::Stream,
            Err(history::HistoryError::Gap { .. }) => Started::Refused(Refusal::Gap),
            Err(history::HistoryError::Rewound { .. }) => Started::Refused(Refusal::Rewound),
            Err(other) => unreachable!("the model has one server and one history: {other}"),
        },
    }
}

/// The history check the delivery applies before it streams, when Kafka holds a position:
/// rule 5 (`Gap`) in both modes, and exactly once's rule 7 (the newest event Kafka holds,
/// committed after the slot's confirmed position, must still be in the outbox).
fn gap(
    delivery: Delivery,
    state: &State,
    catalog: Option<&SlotState>,
) -> Result<(), history::HistoryError> {
    let Some(position) = state.position else {
        return Ok(());
    };
    let identity = Identity {
        system_id: "7321".into(),
        timeline: 1,
        database: "ledger".into(),
    };
    let stored = Stored {
        identity: identity.clone(),
        end_lsn: u64::from(position),
        heartbeats: None,
        last_event: (state.position_event != 0).then(|| NewestEvent {
            id: format!("row {}", state.position_event.trailing_zeros()),
            commit_lsn: u64::from(position),
        }),
    };
    let server = Server {
        identity,
        wal_flush: u64::from(state.committed),
        history: Vec::new(),
        slot_confirmed: catalog.map_or(0, SlotState::confirmed),
        heartbeats: 0,
    };
    match delivery {
        Delivery::AtLeastOnce => history::continues(&stored, &server, true),
        Delivery::ExactlyOnce => {
            history::resume(&stored, &server)?;
            match history::must_hold(&stored, &server) {
                Some(event) => history::still_held(event, state.outbox & state.position_event != 0),
                None => Ok(()),
            }
        }
    }
}

/// The outbox rows retention may delete now under `rule`, given which rows each
/// transaction wrote (`rows_of(t)` for transaction `t`, 1-based). Mirrored:
/// - [`Rule::PublishedLsn`]: the registration is ready, and the row's transaction
///   committed before `published_lsn`; nothing while a snapshot is being published;
/// - [`Rule::SlotConfirmed`] (the old rule): the row's transaction committed before the
///   slot's confirmed position.
///
/// Production goes through marks (a mark names the oldest transaction running when it was
/// taken; rows older than a passed mark go), which only ever delete later and less: the
/// model deletes as soon as the rule allows, which over-approximates every schedule of
/// marks and prune rounds.
pub fn deletable(rule: Rule, state: &State, rows_of: impl Fn(u8) -> Rows) -> Rows {
    let below = match rule {
        Rule::PublishedLsn => state
            .registration
            .filter(|registration| registration.ready)
            .and_then(|registration| registration.published),
        Rule::SlotConfirmed => state.slot,
    };
    let Some(below) = below else {
        return 0;
    };
    (1..=below.min(state.committed)).fold(0, |rows, tx| rows | rows_of(tx)) & state.outbox
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Faults, Process, Registration as Registered};

    fn state(slot: Option<u8>, registration: Option<Registered>, position: Option<u8>) -> State {
        State {
            committed: 3,
            outbox: 0b111,
            kafka: 0,
            removed: 0,
            deleted_unheld: 0,
            position,
            position_event: 0,
            slot,
            registration,
            process: Process::Down,
            spent: Faults::default(),
        }
    }

    fn registered(ready: bool, published: Option<u8>) -> Option<Registered> {
        Some(Registered {
            ready,
            generation: 1,
            published,
        })
    }

    /// Transaction `t` wrote row `t - 1`.
    fn one_row(tx: u8) -> Rows {
        1 << (tx - 1)
    }

    #[test]
    fn the_start_follows_the_relays_own_decisions() {
        for delivery in [Delivery::AtLeastOnce, Delivery::ExactlyOnce] {
            let on = |s: &State| start(delivery, s);
            assert_eq!(on(&state(None, None, None)), Started::Snapshot);
            assert_eq!(
                on(&state(Some(2), registered(false, None), Some(1))),
                Started::Snapshot,
                "a snapshot not all published is made again, even with the slot ahead"
            );
            assert_eq!(
                on(&state(None, registered(true, Some(1)), Some(1))),
                Started::Refused(Refusal::Lost)
            );
            assert_eq!(
                on(&state(Some(2), registered(true, Some(1)), Some(1))),
                Started::Refused(Refusal::Gap),
                "a slot moved past what Kafka holds"
            );
            assert_eq!(
                on(&state(Some(1), registered(true, Some(1)), Some(2))),
                Started::Stream
            );
        }
    }

    #[test]
    fn exactly_once_asks_the_outbox_for_the_newest_event_past_the_slot_and_at_least_once_not() {
        // Kafka holds transaction 2, whose newest event is row 1; the slot confirmed 1.
        let past_the_slot = |outbox| State {
            outbox,
            position_event: 0b010,
            ..state(Some(1), registered(true, Some(2)), Some(2))
        };
        let gone = past_the_slot(0b100);
        assert_eq!(
            start(Delivery::ExactlyOnce, &gone),
            Started::Refused(Refusal::Rewound)
        );
        assert_eq!(start(Delivery::AtLeastOnce, &gone), Started::Stream);
        let kept = past_the_slot(0b110);
        assert_eq!(start(Delivery::ExactlyOnce, &kept), Started::Stream);
        let confirmed = State {
            slot: Some(2),
            ..gone
        };
        assert_eq!(
            start(Delivery::ExactlyOnce, &confirmed),
            Started::Stream,
            "at or below the slot, retention may have removed it"
        );
    }

    #[test]
    fn the_new_rule_trusts_published_lsn_of_a_ready_registration_only() {
        let rule = Rule::PublishedLsn;
        let ready = state(Some(3), registered(true, Some(2)), Some(3));
        assert_eq!(deletable(rule, &ready, one_row), 0b011);
        let snapshot = state(Some(3), registered(false, Some(2)), Some(3));
        assert_eq!(deletable(rule, &snapshot, one_row), 0, "a snapshot runs");
        let none = state(Some(3), registered(true, None), Some(3));
        assert_eq!(deletable(rule, &none, one_row), 0);
        let old = Rule::SlotConfirmed;
        assert_eq!(
            deletable(old, &snapshot, one_row),
            0b111,
            "the old rule deletes what the slot confirmed, published or not"
        );
        let gone = State {
            outbox: 0b100,
            ..snapshot
        };
        assert_eq!(
            deletable(old, &gone, one_row),
            0b100,
            "only rows still kept"
        );
    }
}
