//! The transparency log (issue 47): every event, in the order digests seal them, is a leaf
//! of an append-only RFC 6962 Merkle log; every digest seals a checkpoint of it (a C2SP
//! `tlog-checkpoint`, signed with the digest key), which independent witnesses cosign
//! (C2SP `tlog-witness`) only if it is consistent with every checkpoint they saw before.
//!
//! The parts, pure first:
//! - [`tree`]: the log's tree, its inclusion and consistency proofs and their checks.
//! - [`note`]: C2SP signed notes: the checkpoint's text, the log's Ed25519 signature, the
//!   witnesses' `cosignature/v1` lines and their verifier keys.
//! - [`policy`]: which witnesses count and how many must cosign (C2SP `tlog-policy`).
//! - [`witness`]: the `add-checkpoint` request and what each answer means (cosigned, the
//!   witness holds another size, refused, unreachable), as a pure decision.
//!
//! The I/O is the digests': [`crate::digest::build`] seals a checkpoint with each digest
//! and [`crate::digest::cosign`] sends it to the witnesses.

/// The origin of the log's checkpoints when `ledger serve` is not told another
/// (`log_origin`): a name, not an address.
pub const DEFAULT_ORIGIN: &str = "ra-ledger.local/events";

pub mod note;
pub mod policy;
pub mod tree;
pub mod witness;
