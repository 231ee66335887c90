//! Signed digests of the ledger: a Merkle tree over the heads of all streams, its root
//! signed with Ed25519, so that anyone holding a digest and the public key can check an
//! event without trusting the database (issue 13).
//!
//! `tests/verify_digest.py` implements the same checks in Python's standard library, from
//! the byte layouts below alone.
//!
//! # Byte layouts
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
//! **Signed message** (what Ed25519 signs, RFC 8032 pure Ed25519), version 2, what every
//! digest sealed since issue 35 signs (document `format` `ra-ledger digest v2`):
//!
//! | bytes | field |
//! |---|---|
//! | 24 | the ASCII text `ra-ledger digest v2` followed by five zero bytes |
//! | 8 | the digest's number (`seq`, 1 for the first), signed (two's complement) |
//! | 32 | the tree's root |
//! | 8 | the digest's time, microseconds since 1970-01-01T00:00:00Z, signed (two's complement) |
//! | 8 | number of streams (leaves) |
//! | 8 | number of events in those streams (the sum of the head versions) |
//! | 32 | hash of the previous digest, or 32 zero bytes for the first |
//!
//! **Version 1** (format `ra-ledger digest v1`, every digest sealed before): the same
//! without the number, 112 bytes, prefixed `ra-ledger digest v1` and five zero bytes. Its
//! `seq` is not signed, so a verifier places a version-1 digest by its chain (the digest
//! whose hash is its `previous` is the one before it), never by the number its document
//! carries. Verifiers accept both versions; the prefixes differ, so no signature verifies
//! as the other version's.
//!
//! **Hash of a digest** (what the next one chains to): `SHA-256(signed message || signature)`.
//!
//! # Parts
//!
//! The parts: [`signed`] (the statement, the key, the signature), [`merkle`] (the tree),
//! [`document`] (the JSON documents), [`build`] (sealing the next digest from the database),
//! [`prove`] (inclusion proofs from the database), [`verify`] (checking a proof offline) and
//! [`published`] with [`topic`] and [`chain`] (`ledger verify --digests`, the tables against
//! the digests on Kafka, each placed in the chain by what it signs), [`sealed`] (the newest
//! digest read back), [`log`] (the transparency log and the tree in memory), and [`cosign`]
//! (the gateway that sends each digest's checkpoint of the transparency log, [`crate::tlog`],
//! to the witnesses) with [`checkpoint`] (the checkpoints as kept: stored when sealed, read
//! and written by the rounds, read back with their cosignatures, published). [`index`] is
//! the index of every stream's head whose leaf ends each digest's part of the log (issue 56,
//! item 2), [`indexed`] its checks in a proof, [`monitor`] its recomputation from the log,
//! and [`answer`] with [`refused`] what a proven answer must hold. The statements are in
//! `sql/digest/` and `sql/checkpoints/`.

pub mod answer;
pub mod build;
pub mod chain;
pub mod checkpoint;
pub mod cosign;
pub mod document;
pub mod hexed;
pub mod index;
pub mod indexed;
pub mod log;
pub mod merkle;
pub mod monitor;
pub mod prove;
pub mod published;
pub mod refused;
pub mod sealed;
pub mod signed;
pub mod topic;
pub mod verify;

pub use document::{DigestDocument, ProofDocument};

/// The outbox's aggregate type of digests and cosigned checkpoints: the relay publishes
/// them to `<topic prefix>digest`.
pub const AGGREGATE_TYPE: &str = "digest";
pub use signed::{
    DigestKey, Head, KeyError, MESSAGE_PREFIX, MESSAGE_PREFIX_V1, PublicKey, SignedDigest,
    Statement, public_key_from_pem,
};
