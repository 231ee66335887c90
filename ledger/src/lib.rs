//! RA Ledger: the append-only system of record for registered-agent contacts and their
//! assignments, with a transactional outbox read by the CDC relay.

pub mod db;
pub mod health;
pub mod migrate;
