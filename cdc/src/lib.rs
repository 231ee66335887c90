//! The CDC side of RA Ledger: decoding the outbox from PostgreSQL's logical replication
//! stream, and publishing it to Kafka.

pub mod outbox;
pub mod pgoutput;
