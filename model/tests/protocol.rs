//! The protocol model checked whole (both delivery modes, the new retention rule, every
//! fault), and the counterexamples kept as replays: the old rule's losses, and exactly
//! once's false `Rewound` under the new one.

use ra_ledger_model::check::{
    NO_FALSE_REWOUND, NO_UNHELD_DELETE, WATCHER_PAGES_ONLY_ON_GAPS, WATCHER_SEES_EVERY_GAP,
};
use ra_ledger_model::state::{Process, Refusal};
use ra_ledger_model::watcher::{flagged, lost};
use ra_ledger_model::{Action, Delivery, Faults, Protocol, Rule, State};
use stateright::{Checker, Model};

/// Every fault: two crashes, two DBA moves or drops, one removal from Kafka, one recover.
const EVERY_FAULT: Faults = Faults {
    crashes: 2,
    dba: 2,
    kafka_losses: 1,
    recovers: 1,
};

/// Checks `model` breadth first to the end, and says how big it was.
fn check(model: Protocol) -> impl Checker<Protocol> {
    let started = std::time::Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{} unique states ({} generated, depth {}) in {:?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// Applies `actions` from the initial state, each of which the model must offer then.
fn replay(model: &Protocol, actions: &[Action]) -> State {
    let mut state = model.initial();
    for (index, &action) in actions.iter().enumerate() {
        let mut offered = Vec::new();
        model.actions(&state, &mut offered);
        assert!(
            offered.contains(&action),
            "step {index}: {action:?} is not offered in {state:?} (offered: {offered:?})"
        );
        state = model
            .next_state(&state, action)
            .unwrap_or_else(|| panic!("step {index}: {action:?} does not apply to {state:?}"));
    }
    state
}

#[test]
fn with_the_new_rule_nothing_is_deleted_unheld_and_every_gap_is_paged_at_least_once() {
    let model = Protocol::new(&[1, 2, 1]).faults(EVERY_FAULT);
    check(model).assert_properties();
}

#[test]
fn with_the_new_rule_nothing_is_deleted_unheld_and_every_gap_is_paged_exactly_once() {
    let model = Protocol::new(&[1, 2, 1])
        .delivery(Delivery::ExactlyOnce)
        .faults(EVERY_FAULT);
    check(model).assert_properties();
}

/// What the model found in item 1's first design, for exactly once: `published_lsn` was
/// recorded before the slot was confirmed, so retention could delete the rows of a
/// transaction the slot had not confirmed; after a crash there, rule 7
/// (`history::must_hold`, which holds "retention never removes a row the slot has not
/// confirmed") asked the outbox for the newest event Kafka holds, found it gone, and
/// refused a database that was never rewound. The record is now the lesser of what Kafka
/// acknowledged and the slot's position (cdc/src/sql/record_published.sql), taken after
/// the confirm: the same run, with the record in its new place, streams on, and no run of
/// any length refuses a healthy database.
const ONCE_FALSE_REWOUND: [Action; 12] = [
    Action::Start,
    Action::SnapshotAcked,
    Action::SnapshotPosition,
    Action::SnapshotReady,
    Action::Start,
    Action::Commit,
    Action::Send,
    Action::Ack,
    Action::Confirm,
    Action::Prune,
    Action::Crash { landed: 0 },
    Action::Start,
];

#[test]
fn exactly_once_is_never_refused_as_rewound_since_the_record_trails_the_slot() {
    let faults = Faults {
        crashes: 1,
        ..Faults::default()
    };
    let model = Protocol::new(&[1, 1])
        .delivery(Delivery::ExactlyOnce)
        .faults(faults);
    let state = replay(&model, &ONCE_FALSE_REWOUND);
    assert!(
        matches!(state.process, Process::Streaming { .. }),
        "crashed after the confirm, before the record: {state:?}"
    );
    assert_eq!(
        state.outbox, 0b1,
        "the row the slot did not record stays: {state:?}"
    );
    check(model.faults(EVERY_FAULT)).assert_no_discovery(NO_FALSE_REWOUND);
}

#[test]
fn two_rows_a_transaction_landing_in_any_part_keep_the_invariants() {
    let faults = Faults {
        crashes: 3,
        dba: 1,
        kafka_losses: 1,
        recovers: 1,
    };
    check(Protocol::new(&[2, 2]).faults(faults)).assert_properties();
}

/// The first violation of `property` within `steps` actions, breadth first (stateright
/// keeps the last violation it visits, so the depth bound is what makes it the shortest).
fn first_within(model: &Protocol, property: &'static str, steps: usize) -> Option<Vec<Action>> {
    // A state `steps` actions deep is at depth `steps + 1`, and the bound is exclusive.
    let checker = model
        .clone()
        .checker()
        .target_max_depth(steps + 2)
        .spawn_bfs()
        .join();
    checker.discovery(property).map(|path| path.into_actions())
}

#[test]
fn the_old_rule_deletes_a_snapshots_rows_before_kafka_has_them_and_the_watcher_pages() {
    let model = Protocol::new(&[1, 2])
        .rule(Rule::SlotConfirmed)
        .faults(Faults {
            crashes: 1,
            ..Faults::default()
        });
    assert_eq!(first_within(&model, NO_UNHELD_DELETE, 2), None);
    assert_eq!(
        first_within(&model, NO_UNHELD_DELETE, 3),
        Some(vec![Action::Commit, Action::Start, Action::Prune]),
        "the shortest loss: the first start's slot counts as confirmed at its snapshot"
    );
    let every_fault = Faults {
        dba: 1,
        ..EVERY_FAULT
    };
    let checker = check(model.faults(every_fault));
    checker.assert_any_discovery(NO_UNHELD_DELETE);
    // Whatever the old rule deletes, the watcher sees, and it pages on nothing else.
    checker.assert_no_discovery(WATCHER_SEES_EVERY_GAP);
    checker.assert_no_discovery(WATCHER_PAGES_ONLY_ON_GAPS);
}

/// Issue 55 item 1's reproduction: the first start creates the slot from a snapshot,
/// retention deletes on the slot's confirmed position before Kafka acknowledged the
/// snapshot's rows, the relay is killed, and its retry's snapshot no longer holds them.
const SNAPSHOT_LOSS: [Action; 10] = [
    Action::Commit,
    Action::Start,
    Action::Prune,
    Action::Crash { landed: 0 },
    Action::Start,
    Action::SnapshotAcked,
    Action::SnapshotPosition,
    Action::SnapshotReady,
    Action::Start,
    Action::Prune,
];

#[test]
fn item_1s_snapshot_loss_under_the_old_rule_and_none_under_the_new() {
    let faults = Faults {
        crashes: 1,
        ..Faults::default()
    };
    let old = Protocol::new(&[1]).rule(Rule::SlotConfirmed).faults(faults);
    let state = replay(&old, &SNAPSHOT_LOSS);
    assert_eq!(state.deleted_unheld, 0b1, "{state:?}");
    assert_eq!(
        (state.outbox, state.kafka),
        (0, 0),
        "the row is gone: {state:?}"
    );
    assert_eq!(lost(&old, &state), 0b1);
    assert_eq!(flagged(&old, &state), 0b1, "the watcher pages on it");

    let new = Protocol::new(&[1]).faults(faults);
    let state = replay(&new, &SNAPSHOT_LOSS);
    assert_eq!(state.deleted_unheld, 0, "{state:?}");
    assert_eq!(
        (state.kafka, state.outbox),
        (0b1, 0),
        "the retry published the row, then retention deleted it: {state:?}"
    );
    assert_eq!(lost(&new, &state) | flagged(&new, &state), 0);
}

/// A DBA advances the stopped relay's slot past a transaction Kafka lacks; the relay then
/// refuses with `Gap`, and the operator's recover publishes the rows the outbox still holds.
const DBA_LOSS: [Action; 16] = [
    Action::Commit,
    Action::Start,
    Action::SnapshotAcked,
    Action::SnapshotPosition,
    Action::SnapshotReady,
    Action::Start,
    Action::Commit,
    Action::Crash { landed: 0 },
    Action::DbaAdvance { to: 2 },
    Action::Prune,
    Action::Start,
    Action::Recover,
    Action::SnapshotAcked,
    Action::SnapshotPosition,
    Action::SnapshotReady,
    Action::Start,
];

#[test]
fn a_dba_advancing_the_slot_loses_rows_under_the_old_rule_and_none_under_the_new() {
    let faults = Faults {
        crashes: 1,
        dba: 1,
        recovers: 1,
        ..Faults::default()
    };
    let old = Protocol::new(&[1, 2])
        .rule(Rule::SlotConfirmed)
        .faults(faults);
    let refused = replay(&old, &DBA_LOSS[..11]);
    assert_eq!(refused.process, Process::Refused(Refusal::Gap));
    let state = replay(&old, &DBA_LOSS);
    assert_eq!(state.deleted_unheld, 0b110, "{state:?}");
    assert_eq!(state.kafka, 0b001, "recover had nothing left to publish");
    assert_eq!(lost(&old, &state), 0b110);
    assert_eq!(flagged(&old, &state), 0b110);

    let new = Protocol::new(&[1, 2]).faults(faults);
    let refused = replay(&new, &DBA_LOSS[..11]);
    assert_eq!(refused.process, Process::Refused(Refusal::Gap));
    assert_eq!(
        flagged(&new, &refused),
        0b110,
        "a refused relay's gap is paged on until the operator recovers"
    );
    let state = replay(&new, &DBA_LOSS);
    assert_eq!(state.deleted_unheld, 0, "{state:?}");
    assert_eq!(
        state.kafka, 0b111,
        "recover published the rows retention kept"
    );
    assert_eq!(lost(&new, &state) | flagged(&new, &state), 0);
}

#[test]
fn records_an_admin_removes_from_kafka_are_paged_on() {
    let model = Protocol::new(&[1, 2]).faults(Faults {
        kafka_losses: 1,
        ..Faults::default()
    });
    let published = [
        Action::Commit,
        Action::Commit,
        Action::Start,
        Action::SnapshotAcked,
        Action::SnapshotPosition,
        Action::SnapshotReady,
        Action::Start,
        Action::Prune,
    ];
    let state = replay(&model, &published);
    assert_eq!((state.kafka, state.outbox), (0b111, 0), "{state:?}");
    for removed in [0b010, 0b111] {
        let mut actions = published.to_vec();
        actions.push(Action::DeleteRecords { rows: removed });
        let state = replay(&model, &actions);
        assert_eq!(lost(&model, &state), removed);
        assert_eq!(flagged(&model, &state), removed, "{state:?}");
    }
}
