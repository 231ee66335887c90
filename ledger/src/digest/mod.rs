//! Signed digests of the ledger: a Merkle tree over the heads of all streams, its root
//! signed with Ed25519, so that anyone holding a digest and the public key can check an
//! event without trusting the database (issue 13).
//!
//! `tests/verify_digest.py` implements the same checks in Python's standard library, from
//! the byte layouts below alone.
//!
//! # Byte layouts (version 1)
//!
//! All integers are unsigned big-endian unless said otherwise; hashes are SHA-256.
//!
//! **Leaf** (one per stream), hashed as an RFC 9162 leaf (`SHA-256(0x00 || leaf)`):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | length L of the stream name in bytes |
//! | L | stream name, UTF-8 (`contact-<uuid>`, `assignment-<uuid>-<jurisdiction>`) |
//! | 8 | the stream's head version (`stream_version` of its newest event) |
//! | 32 | the head event's `hash` (the stream's hash chain) |
//!
//! **Order of the leaves**: by stream name, comparing the UTF-8 bytes.
//!
//! **Nodes**: `SHA-256(0x01 || left || right)`; the tree splits as RFC 9162 section 2.1.1.
//! The root of no stream is `SHA-256()` (empty input).
//!
//! **Signed message** (what Ed25519 signs, RFC 8032 pure Ed25519):
//!
//! | bytes | field |
//! |---|---|
//! | 24 | the ASCII text `ra-ledger digest v1` followed by five zero bytes |
//! | 32 | the tree's root |
//! | 8 | the digest's time, microseconds since 1970-01-01T00:00:00Z, signed (two's complement) |
//! | 8 | number of streams (leaves) |
//! | 8 | number of events in those streams (the sum of the head versions) |
//! | 32 | hash of the previous digest, or 32 zero bytes for the first |
//!
//! **Hash of a digest** (what the next one chains to): `SHA-256(signed message || signature)`.
//!
//! # Parts
//!
//! The parts: [`signed`] (the statement, the key, the signature), [`merkle`] (the tree),
//! [`document`] (the JSON documents), [`build`] (sealing the next digest from the database),
//! [`prove`] (inclusion proofs from the database), [`verify`] (checking a proof offline) and
//! [`published`] with [`topic`] (`ledger verify --digests`, the tables against the digests
//! on Kafka).

pub mod build;
pub mod document;
pub mod merkle;
pub mod prove;
pub mod published;
pub mod signed;
pub mod topic;
pub mod verify;

pub use document::{DigestDocument, ProofDocument, hex};
pub use signed::{
    DigestKey, Head, KeyError, MESSAGE_PREFIX, PublicKey, SignedDigest, Statement,
    public_key_from_pem,
};
