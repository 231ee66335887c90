//! The CDC side of RA Ledger, in three parts:
//!
//! - the relay: decoding the outbox from PostgreSQL's logical replication stream
//!   ([`pgoutput`], [`outbox`]), publishing it to Kafka in commit order ([`publish`],
//!   [`relay`], [`position`] and the history it must belong to ([`history`]),
//!   [`parking`], [`replay`]), and confirming the slot only behind
//!   Kafka's acknowledgements ([`ack`]); its configuration ([`config`]) and metrics
//!   ([`metrics`]);
//! - [`infra`]: what every process of the project shares (settings, PostgreSQL and TLS,
//!   Kafka settings, the process runtime, the Prometheus format);
//! - [`consumer`]: the library for consuming teams (envelope, inbox) and the example
//!   consumer.

pub mod ack;
pub mod config;
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
pub mod relay;
pub mod replay;
pub mod value_format;
