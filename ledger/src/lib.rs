//! RA Ledger: the append-only system of record for registered-agent contacts and their
//! assignments, with a transactional outbox read by the CDC relay.
//!
//! A map of the crate, from the bottom layer up: a module uses only those listed before it
//! (`tests/import_circles.py` checks that no two modules use each other, which keeps such
//! an order possible). The `ledger` binary (`main.rs`, `cli/`) parses, calls and
//! prints; what it calls is here. The CDC relay and what every process shares (settings,
//! PostgreSQL and TLS, Kafka, the runtime) are in `ra_ledger_cdc`.
//!
//! **The domain**, no I/O:
//! - [`domain`]: jurisdictions, contacts, assignments and their validated inputs.
//! - [`hex`]: lowercase hex both ways.
//!
//! **The database**:
//! - [`db`]: pools for services, single clients for tools.
//! - [`migrate`]: the numbered migrations, and the relay's slot created beside them.
//! - [`store`]: the event store: streams, optimistic concurrency, the hash chain, the outbox.
//! - [`projections`]: the current view and the full history, folded from events.
//! - [`error`]: why a command was refused or failed; what a database error means for it.
//!
//! **The read side**:
//! - [`queries`]: contacts, assignments and the audit questions, from the projections.
//! - [`lag`]: how far the relay is behind, read from the database.
//!
//! **The write path**:
//! - [`events`]: the events the commands and the reassignment pages append.
//! - [`write`](mod@write): events, outbox rows and projections in the caller's transaction.
//! - [`trace`]: W3C trace context, from a request into the events it appends.
//! - [`older_transactions`]: waiting for the transactions older than now to end.
//! - [`reassign`]: reassignment runs, a supersede's chained pages.
//! - [`commands`]: one transaction per command: its locks, its reads, its events.
//!
//! **Proofs and maintenance**:
//! - [`tlog`]: the transparency log's pure parts: its tree, checkpoints as signed notes,
//!   witnesses' cosignatures, the policy that says how many are enough, the witness
//!   protocol's answers.
//! - [`digest`]: signed Merkle digests of every stream's head, inclusion proofs, and each
//!   digest's checkpoint of the transparency log sent to the witnesses.
//! - [`topics`]: the relay's topics, created with explicit configs.
//! - [`retention`]: outbox rows removed once the relay's slot confirmed them.
//! - [`rebuild`]: `ledger projections rebuild`, offline and online.
//! - [`import`]: `ledger import`, bulk onboarding from CSV.
//! - [`verify`]: `ledger verify`, every stream's hash chain recomputed.
//! - [`reconcile`]: `ledger reconcile`, the live topics against the ledger's events.
//!
//! **The processes**: `ledger serve`, `ledger worker` and what they serve:
//! - [`metrics`]: every Prometheus metric of the ledger's processes, declared once.
//! - [`replay`]: past events republished to replay topics, with the handoff to live ones.
//! - [`session_key`]: the console's session key.
//! - [`verdict`]: one verdict on the pipeline (healthy, degraded, failing) with the reason
//!   that decides it, from pure rules; `GET /status`.
//! - [`api`]: the HTTP API, its auth and its JSON errors.
//! - [`console`]: the web console on the same roles and tokens.
//! - [`health`]: liveness and readiness.
//! - [`gauges`]: `ledger serve`'s gauges of the slot, the outbox and the digests.
//! - [`service`]: `ledger serve` assembled: state, routers, tasks and the serve loop.
//! - [`config`]: the settings of `ledger serve` and `ledger worker`, file then environment.
//! - [`worker`]: `ledger worker`, the Kafka consumer that runs the pages and hosts replays.
//!
//! **The command lines**: [`command_line`], what `ledger` and `ledger-bench` share: stdout
//! that ends quietly on a broken pipe (`outln!`, `out!`), a run's progress bar, the flags
//! both parse.
//!
//! No test tooling: scratch databases, topics and seeding are `ra_ledger_testing`'s
//! (`testing/`), the benchmarks and the demo `ledger-bench`'s (`bench/`).

pub mod api;
pub mod command_line;
pub mod commands;
pub mod config;
pub mod console;
pub mod db;
pub mod digest;
pub mod domain;
pub mod error;
pub mod events;
pub mod gauges;
pub mod health;
pub mod hex;
pub mod import;
pub mod lag;
pub mod metrics;
pub mod migrate;
pub mod older_transactions;
pub mod projections;
pub mod queries;
pub mod reassign;
pub mod rebuild;
pub mod reconcile;
pub mod replay;
pub mod retention;
pub mod service;
pub mod session_key;
pub mod store;
pub mod tlog;
pub mod topics;
pub mod trace;
pub mod verdict;
pub mod verify;
pub mod watcher;
pub mod worker;
pub mod write;
