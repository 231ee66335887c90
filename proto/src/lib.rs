//! Event contracts of RA Ledger.
//!
//! The `.proto` files under `proto/` are the source of truth; a team in another language
//! generates its own types from them. This crate is the Rust rendering, built with prost,
//! with the proto3 canonical JSON mapping of every message as its serde impls (pbjson):
//! `serde_json::to_vec(&envelope)` is the JSON a topic with `value_formats = "json"` carries,
//! and `serde_json::from_slice::<v1::Envelope>` reads it back.

/// Version 1 of the contracts (`package ra.ledger.v1`).
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/ra.ledger.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/ra.ledger.v1.serde.rs"));
}
