//! Event contracts of RA Ledger.
//!
//! The `.proto` files under `proto/` are the source of truth; a team in another language
//! generates its own types from them. This crate is the Rust rendering, built with prost.

/// Version 1 of the contracts (`package ra.ledger.v1`).
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/ra.ledger.v1.rs"));
}
