//! RA Ledger: the append-only system of record for registered-agent contacts and their
//! assignments, with a transactional outbox read by the CDC relay.

pub mod api;
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
#[cfg(feature = "testing")]
pub mod testing;
pub mod topics;
pub mod trace;
pub mod verify;
pub mod worker;
pub mod write;
