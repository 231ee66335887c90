//! The watcher (issue 55 item 7) as a check over a state, and the truth it is checked
//! against.
//!
//! The watcher compares the ledger's committed events with what Kafka holds
//! (`read_committed`) and pages on an event Kafka lacks once it is older than the lag
//! bound. A model has no clock, so the bound is abstracted as what makes an event young
//! for good reason: [`flagged`] pages on every committed event Kafka lacks except one the
//! relay is still delivering by itself ([`excused`]): in flight, ahead of the stream of a
//! relay that streams (or, being down, will stream when it restarts), or in the outbox
//! while a snapshot that will publish it is due. Any other missing event never arrives
//! without an operator, so in the real system it ages past the bound and is paged on.
//!
//! The truth is behaviour, not a rule: an event is [`lost`] when the relay, left to itself
//! (restarted when down, every send acknowledged, no retention, no DBA, no admin, no
//! operator: the kindest future), never gets it into Kafka ([`settle`]). Invariant 2 is
//! `lost ⊆ flagged`: the watcher's excuses are all honoured. The converse, `flagged ⊆ lost`,
//! says it does not page on an event that is on its way.

use crate::decide::{self, Started};
use crate::protocol::Protocol;
use crate::state::{Process, Rows, State};

/// The most steps [`settle`] takes: far more than any model's relay needs to run out of
/// work (a snapshot, a restart, four steps per transaction).
const SETTLE_STEPS: usize = 256;

/// The committed events Kafka lacks that the relay is not delivering by itself: what the
/// watcher pages on.
pub fn flagged(model: &Protocol, state: &State) -> Rows {
    model.committed_rows(state) & !state.kafka & !excused(model, state)
}

/// The committed events the relay is still delivering by itself (see the module doc).
pub fn excused(model: &Protocol, state: &State) -> Rows {
    let ahead = |after: u8| model.rows_between(after, state.committed);
    let in_flight = model.in_flight(state);
    match state.process {
        Process::Refused(_) => 0,
        Process::Snapshot { point, .. } => in_flight | ahead(point),
        Process::Streaming { sending, .. } => {
            let read = sending.map_or(state.slot.unwrap_or(0), |(tx, _)| tx);
            in_flight | ahead(read)
        }
        Process::Down => match decide::start(model.delivery, state) {
            // The new slot starts at the end of the WAL: its snapshot holds every row
            // still kept, and nothing else.
            Started::Snapshot => state.outbox,
            Started::Stream => ahead(state.slot.unwrap_or(0)),
            Started::Refused(_) => 0,
        },
    }
}

/// The committed events that never reach Kafka when the relay is left to itself.
pub fn lost(model: &Protocol, state: &State) -> Rows {
    model.committed_rows(state) & !settle(model, state).kafka
}

/// `state` after the relay's own steps ([`Protocol::progress`]) until it has nothing left
/// to do or refuses.
pub fn settle(model: &Protocol, state: &State) -> State {
    let mut state = state.clone();
    for _ in 0..SETTLE_STEPS {
        let Some(action) = model.progress(&state) else {
            return state;
        };
        state = model
            .step(&state, action)
            .unwrap_or_else(|| panic!("{action:?} was offered but does not apply"));
    }
    panic!("the relay did not settle in {SETTLE_STEPS} steps from {state:?}")
}
