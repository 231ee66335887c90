//! Replays: the ledger's past events republished to replay topics, for a team that joins
//! late or whose topic lost history. The events themselves go out (their ids, bytes, keys),
//! not a snapshot of current rows, and a completion marker on every partition of each replay
//! topic names the live topic's offsets to go on from (`ra_ledger_cdc::replay`).
//!
//! # The handoff
//!
//! The past is the set of selected events whose transaction a PostgreSQL snapshot `S` sees.
//! The handoff offsets `O` are the live topics' end offsets. The promise: every event outside
//! the past is on its live topic at or after `O`. Since the relay puts every committed event
//! on the live topic, that holds if every message below `O` is in the past, and the runner
//! makes sure of it by taking them in this order:
//!
//! 1. read `O` (each partition's end offset as the broker reports it);
//! 2. take a fresh transaction id `y` in a transaction of its own, and wait until no
//!    transaction with an id below `y` is still in progress;
//! 3. take `S` in a REPEATABLE READ transaction, and record `S`, `O` and the highest position
//!    `S` sees in the same transaction.
//!
//! A message below `O` was on the broker before step 1 ended, so the relay had sent it, and
//! decoded its transaction's commit record from the WAL, before `y` was assigned: its id is
//! below `y`. PostgreSQL writes the commit record before it tells other sessions that the
//! transaction ended, so such a transaction may still count as in progress for a moment;
//! step 2 waits for exactly those, and after it `S` sees them all. Events committed after
//! `S` (or invisible to it) are on the live topic after `O`, since their commit came after.
//!
//! Apache Kafka reports a partition's end exactly: the high watermark, one past the last
//! message its in-sync replicas hold (read under `read_committed`, as the runner does, the
//! last stable offset, which is the same while no transaction is open; the relay writes
//! none). Events of the past can still be on the live topic after `O`: one whose message the
//! relay had not sent yet when `O` was read (the relay runs behind the WAL), or a second copy
//! the relay sent again after a failure (it delivers at least once). Those are replayed and
//! read again live after the handoff, and the consumer's inbox absorbs the second copy.
//!
//! The relay's commit LSN would be another choice, but the ledger cannot map an LSN to the
//! set of transactions committed before it without reading the WAL; the snapshot is decided
//! by PostgreSQL itself, stored as `pg_snapshot`, and tested per event with
//! `pg_visible_in_snapshot(txid, S)` (each event records its transaction id), so a replay
//! resumed after kill -9 selects exactly the same past.
//!
//! # Order, resumption, pace
//!
//! Events go out in position order, in windows of positions read with bounded scans. A
//! stream's versions are appended by successive transactions (each locks the stream's head),
//! so position order is stream-version order per key. A batch is produced, every message of
//! it acknowledged, then the checkpoint (a position) recorded: after a crash the runner
//! resumes after the checkpoint, and the events of the batch in flight may be published
//! twice (the inbox absorbs them). The runner holds a session advisory lock per replay, so
//! one process runs it at a time, and a dead runner's lock goes with its connection.
//!
//! # Cancel
//!
//! An operator may cancel a replay that is requested or running ([`cancel`](mod@cancel)): it ends for
//! good, frees its place among the replays open at once, and its runner stops publishing
//! within half a second and the step it is in.

pub mod cancel;
mod framing;
mod handoff;
mod kafka;
mod request;
pub mod run;
pub mod serve;
mod status;
mod stored;

pub use cancel::{Cancel, cancel};
pub use request::{
    AGGREGATES, DEFAULT_AGGREGATES, DEFAULT_RATE, DEFAULT_TOPIC_PREFIX, EVENT_TYPES,
    MAX_OPEN_REPLAYS, MAX_RATE, ReplayRequest, RequestError, Selection, request,
};
pub use status::{ReplayState, ReplayStatus, ReplaySummary, Target, recent, status};
