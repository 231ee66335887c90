//! The CDC side of RA Ledger: decoding the outbox from PostgreSQL's logical replication
//! stream, publishing it to Kafka in commit order, and confirming the slot only behind
//! Kafka's acknowledgements.

pub mod ack;
pub mod config;
pub mod consumer;
pub mod event_router;
pub mod example;
pub mod kafka;
pub mod metrics;
pub mod outbox;
pub mod parking;
pub mod pg;
pub mod pgoutput;
pub mod position;
pub mod publish;
pub mod relay;
pub mod replay;
pub mod runtime;
pub mod value_format;
