//! What the model remembers: the ledger's transactions and outbox, the slot, the relay's
//! registration, what Kafka holds, the one process that publishes, and the faults spent.
//!
//! Positions are counts of transactions: position `p` is the point after the `p`-th
//! transaction's commit, so "committed before `p`" is "transaction `1..=p`". Only the
//! order of LSNs matters to every rule the model checks (a slot streams what committed
//! after its confirmed position, retention deletes what committed below a position, the
//! `Gap` check compares two positions), and counting transactions keeps that order.
//!
//! Sets of outbox rows are bit sets ([`Rows`]): the model has a handful of rows, and a
//! state must be small and hash fast for the checker.

/// A set of outbox rows, bit `r` for row `r`. Every outbox row carries one ledger event,
/// so it is also the set of those events.
pub type Rows = u8;

/// How the relay delivers (`delivery` in the relay's configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// An idempotent producer: an acknowledged message stays; one not acknowledged when
    /// the relay dies may or may not have landed.
    AtLeastOnce,
    /// A Kafka transaction per PostgreSQL transaction, with the relay's position: all of
    /// it or nothing; a crash aborts it.
    ExactlyOnce,
}

/// Which fact retention trusts before it deletes an outbox row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Issue 55 item 1's rule: the registration is ready and the row committed below
    /// `relay_slots.published_lsn`, which only the relay writes, after Kafka acknowledged.
    PublishedLsn,
    /// The old rule, which loses rows: the row committed below the slot's
    /// `confirmed_flush_lsn`, which a snapshot and a DBA move too.
    SlotConfirmed,
}

/// `relay_slots`' row of the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Registration {
    /// False while a snapshot's rows are being published.
    pub ready: bool,
    /// Bumped each time the slot is created from a snapshot.
    pub generation: u8,
    /// `published_lsn`: Kafka holds every outbox row committed before it.
    pub published: Option<u8>,
}

/// Why a relay stopped for an operator (it exits; nothing restarts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The slot is missing but the registration is ready: `SlotError::Lost`.
    Lost,
    /// The slot is ahead of the position Kafka holds: `HistoryError::Gap`.
    Gap,
    /// Exactly once: the newest event Kafka holds, committed after the slot's confirmed
    /// position, is not in the outbox: `HistoryError::Rewound` (the model has no restore, so
    /// any such refusal is a false one).
    Rewound,
}

/// Where a snapshot's publication stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotStep {
    /// Its rows are sent, Kafka has not acknowledged them all.
    Publishing,
    /// Kafka acknowledged them all.
    Acked,
    /// The relay's position at the consistent point is in Kafka too.
    PositionWritten,
}

/// Where the transaction the relay streams stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Its rows are sent.
    Sent,
    /// Kafka acknowledged them and the relay's position (exactly once: committed).
    Acked,
    /// The slot is confirmed past them; `published_lsn` is recorded next, the lesser of
    /// them and the slot's position.
    Confirmed,
}

/// The process that holds the slot and publishes: the relay, or `ledger relay recover`
/// (both hold the slot while they publish, so at most one runs at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Process {
    /// No process holds the slot; the relay starts again by itself (systemd).
    Down,
    /// The relay refused to start and waits for an operator.
    Refused(Refusal),
    /// Publishing a snapshot's rows (the relay's first start or retry, or recover).
    Snapshot {
        /// The slot's consistent point.
        point: u8,
        /// The outbox rows the snapshot holds.
        rows: Rows,
        /// How far it went.
        step: SnapshotStep,
    },
    /// Streaming from the slot, under the registration's generation read at start.
    Streaming {
        /// That generation.
        generation: u8,
        /// The transaction being delivered, if any.
        sending: Option<(u8, Step)>,
    },
}

impl Process {
    /// Whether a session holds the slot (then no DBA can move or drop it, and recover is
    /// refused).
    pub fn holds_slot(&self) -> bool {
        matches!(self, Self::Snapshot { .. } | Self::Streaming { .. })
    }
}

/// One state of the whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Transactions committed (in commit order; the `events` table holds their events
    /// forever).
    pub committed: u8,
    /// Outbox rows still kept.
    pub outbox: Rows,
    /// What a `read_committed` consumer of Kafka reads now.
    pub kafka: Rows,
    /// What an admin removed from Kafka since the slot was last created from a snapshot,
    /// and that has not landed again: a loss the watcher pages on and `recover` repairs.
    pub removed: Rows,
    /// Rows retention deleted while Kafka lacked them, but for an admin's removal since the
    /// snapshot: invariant 1's witness.
    pub deleted_unheld: Rows,
    /// The relay's position in Kafka (its position record or transaction).
    pub position: Option<u8>,
    /// The newest event that position names (the last row of its transaction; a
    /// streaming position names one, a snapshot's none): exactly once's rule 7 asks the
    /// outbox for it.
    pub position_event: Rows,
    /// The slot's confirmed position, `None` when there is no slot.
    pub slot: Option<u8>,
    /// The slot's registration.
    pub registration: Option<Registration>,
    /// Who publishes.
    pub process: Process,
    /// Faults spent, each bounded by [`Faults`].
    pub spent: Faults,
}

/// Bounds on what the environment may do in one run: each fault costs one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Faults {
    /// Crashes of the process that publishes (or a Kafka error ending its session).
    pub crashes: u8,
    /// A DBA moving the slot (`pg_replication_slot_advance`, a consuming peek) or
    /// dropping it.
    pub dba: u8,
    /// An admin removing records from Kafka (delete-records, a topic re-created).
    pub kafka_losses: u8,
    /// `ledger relay recover` run by an operator.
    pub recovers: u8,
}
