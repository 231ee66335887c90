//! The CDC side of RA Ledger: the relay, what every process of the project shares, and the
//! library of the consuming teams. A map, from the bottom layer up: a module uses only those
//! listed before it (`tests/import_circles.py` checks that no two modules use each other,
//! which keeps such an order possible).
//!
//! **Shared by every process**, the ledger's too:
//! - [`infra`]: settings (declared once, loaded one way), PostgreSQL and TLS, Kafka
//!   settings, the process runtime, the Prometheus format, the HTTP write timeout.
//! - [`metrics`]: the relay's Prometheus metrics, declared once.
//!
//! **Decoding**, pure, no I/O:
//! - [`lsn`]: LSN text both ways, and why LSN text is never compared.
//! - [`pgoutput`]: pgoutput bytes to typed messages (fuzzed).
//! - [`outbox`]: an outbox row from its pgoutput tuple.
//! - [`confluent_wire`]: Confluent's wire format for protobuf values (magic byte, schema
//!   id, message indexes), both ways.
//! - [`value_format`]: protobuf, the proto3 JSON or the framed protobuf of the envelope,
//!   per topic.
//!
//! **The relay**: the outbox from PostgreSQL's logical replication stream to Kafka, in commit
//! order, the slot confirmed only behind Kafka's acknowledgements:
//! - [`config`]: the relay's settings.
//! - [`registry`]: the schema registry of framed topics, written to once at start.
//! - [`publish`]: Kafka records of outbox rows, and what to do with a delivery error.
//! - [`ack`]: which commits Kafka has fully acknowledged, so the slot may move.
//! - [`history`]: the server history a slot's position must belong to, as pure rules.
//! - [`position`]: the relay's position on its compacted topic, which both modes write.
//! - [`parking`]: messages Kafka refused for good, kept for an operator.
//! - [`replay`]: replay topics' names and markers.
//! - [`relay`]: the session loop, its two delivery modes, setup, recovery.
//!
//! **The consumers' library**:
//! - [`consumer`]: the envelope, the inbox that deduplicates, and the example consumer.

pub mod ack;
pub mod config;
pub mod confluent_wire;
pub mod consumer;
pub mod history;
pub mod infra;
pub mod lsn;
pub mod metrics;
pub mod outbox;
pub mod parking;
pub mod pgoutput;
pub mod position;
pub mod publish;
pub mod registry;
pub mod relay;
pub mod replay;
pub mod value_format;
