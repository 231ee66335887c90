//! The relay's delivery protocol, model-checked (issue 55, item 9): every interleaving of
//! the ledger, the relay, Kafka, retention, recover, a DBA and a Kafka admin, on a few
//! transactions, explored breadth first by [`stateright`].
//!
//! # What is modelled
//!
//! - The ledger commits transactions in order, each with its outbox rows and the same
//!   events in `events`, which is never deleted ([`state::State::committed`]).
//! - The replication slot: its confirmed position, moved by the relay's confirm, by a DBA
//!   (advance, a consuming peek: to any committed position past it) or dropped by one;
//!   created from a snapshot at its consistent point (the end of the WAL then); a DBA
//!   cannot move a slot a session holds (PostgreSQL refuses). It streams what committed
//!   after its confirmed position, from the WAL, whatever retention deleted since.
//! - `relay_slots`: `ready`, `generation`, `published_lsn`
//!   ([`state::Registration`]).
//! - The relay's start ([`decide::start`]): a snapshot for a first start or a snapshot
//!   left unfinished, a refusal for a lost slot or a slot ahead of Kafka's position (`Gap`),
//!   and, exactly once, for a newest event Kafka holds that the outbox lacks (rule 7).
//! - A snapshot (the relay's, or `ledger relay recover`'s): refused while a session holds
//!   the slot; registration not ready, `published_lsn` cleared, generation bumped; the rows
//!   the snapshot holds published, acknowledged, the position written at the consistent
//!   point, then ready and `published_lsn` in one statement.
//! - Streaming: the next transaction sent, acknowledged with the relay's position,
//!   `published_lsn` recorded (its generation, while ready), the slot confirmed.
//! - Kafka: acknowledges, or the process dies first. At least once, any subset of what was
//!   sent and not acknowledged may have landed; exactly once, a crash aborts the Kafka
//!   transaction (a snapshot goes through an idempotent producer in both modes, as
//!   `recover` does). An admin may remove records (one, or a whole topic).
//! - Retention, under the new rule or the old one ([`state::Rule`]), at every step.
//! - A crash of the process holding the slot at every step, and its restart.
//! - The watcher, as a check over the state ([`watcher`]).
//!
//! Checked ([`check`]'s properties): (1) no outbox row is deleted while Kafka lacks it,
//! unless an admin removed it from Kafka since the slot's snapshot (that loss is the
//! watcher's to page on, and `recover`'s new snapshot republishes what the outbox kept:
//! so nothing may be deleted while a snapshot publishes, whatever an older generation's
//! `published_lsn` said); (2) every event that will not reach Kafka by itself is flagged by
//! the watcher (and, the converse, nothing else is); and, so that they are not vacuous,
//! runs exist where every row is published and deleted, where the watcher pages, and where
//! a snapshot is made again. Beside them: the relay stops for an operator (`Gap`, `Lost`)
//! only after a DBA moved or dropped the slot, never through its own crashes and retries.
//!
//! # What is abstracted away, and why that is sound
//!
//! - **LSNs are counts of transactions** ([`state`]): every rule compares positions only,
//!   and the count keeps their order.
//! - **One transaction in flight.** The relay records and confirms only a prefix Kafka
//!   acknowledged in order, so a wider window confirms the same positions later; what a
//!   wider window adds under a crash, messages of later transactions landing, the model has
//!   as the subset that lands from the one in flight, followed by a resend.
//! - **Marks.** Retention deletes as soon as its rule allows; production's marks only
//!   delay deletes, so every real schedule of deletes is one the model explores.
//! - **The position record and the messages are acknowledged in one step** (at least
//!   once). At least once reads the position only in the `Gap` check, and writes it before
//!   it confirms: a crash between the two acknowledgements leaves the same state as a crash
//!   before both, plus rows in Kafka, which a crash with a landed subset already gives.
//! - **One process holds the slot.** The relay and recover each hold it while they publish,
//!   and recover is refused while a session holds it, so their publishing never overlaps.
//!   A relay that lost its PostgreSQL session while its Kafka producer goes on is not
//!   modelled; the `generation` guard on `published_lsn` is there for it.
//! - **A snapshot's finish** returns the process to "down" and the relay starts again,
//!   where production goes on in the same process: the model's way only adds a window for
//!   faults between the two.
//! - **Retention keeps no state between statements**, and each delete is atomic: its crash
//!   at any step is a round that did not run, which the model has (retention is never
//!   forced to run).
//! - **Only the event topics lose records**: the position topic is not deleted.
//! - **One delivery mode per run**: a switch between modes across a restart is not
//!   modelled (both write the position before they confirm, which is what the checks read).
//! - **Small bounds**: 2 or 3 transactions of 1 or 2 rows; per run at most 2 or 3 crashes,
//!   2 DBA moves, one removal from Kafka and one recover. The rules treat every
//!   transaction alike, so a loss needs at most one transaction before a fault, one during
//!   and one after to show; a second fault of a kind (a crash during the retry, a DBA move
//!   after a recover) is covered.
//!
//! # Real decisions and mirrored ones
//!
//! The relay's start calls the production code ([`decide`]):
//! `ra_ledger_cdc::relay::slot::decide` and the history's `Gap` check
//! (`ra_ledger_cdc::history::continues` at least once, `history::resume` exactly once),
//! then exactly once's rule 7 (`history::must_hold`, `history::still_held`).
//! Retention's rule ([`decide::deletable`]) and the protocol's steps are mirrored from item
//! 1's design: retention is SQL through marks in production, and the steps are I/O.
//!
//! # What it found in item 1's design, and the fix
//!
//! Exactly once refused a healthy database as `Rewound` ([`check::NO_FALSE_REWOUND`]):
//! `published_lsn` was recorded before the slot was confirmed, so retention could delete a
//! transaction's rows the slot had not confirmed, and after a crash there rule 7 asked the
//! outbox for the newest event Kafka holds and found it gone. The record is now the lesser
//! of what Kafka acknowledged and the slot's position, taken after the confirm
//! (`cdc/src/sql/record_published.sql`), so rule 7's premise ("retention never removes a row
//! the slot has not confirmed") holds again, and the property holds in every check.
//! `tests/protocol.rs` keeps the run that found it.
//!
//! Run: `cargo test -p ra-ledger-model` (docs/protocol.md).

pub mod check;
pub mod decide;
pub mod protocol;
pub mod state;
pub mod watcher;

pub use protocol::{Action, Protocol};
pub use state::{Delivery, Faults, Rule, State};
