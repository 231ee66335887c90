//! Signed digests of the ledger: a Merkle tree over the heads of all streams, its root
//! signed with Ed25519, so that anyone holding a digest and the public key can check an
//! event without trusting the database (issue 13).
//!
//! This module holds the parts that do not touch the database: the canonical bytes, the
//! tree ([`merkle`], RFC 9162), signing and checking. `tests/verify_digest.py` implements
//! the same checks in Python's standard library, from the byte layouts below alone.
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

pub mod build;
pub mod merkle;
pub mod proof;
pub mod published;

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest as _, Sha256};

use merkle::Hash;

/// An Ed25519 public key, what checks digests.
pub use ed25519_dalek::VerifyingKey as PublicKey;

/// The first 24 bytes of every signed message.
pub const MESSAGE_PREFIX: &[u8; 24] = b"ra-ledger digest v1\0\0\0\0\0";

/// One stream's head: a leaf of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The stream's name.
    pub stream: String,
    /// Its newest event's `stream_version`.
    pub version: u64,
    /// Its newest event's `hash`.
    pub hash: Hash,
}

impl Head {
    /// The leaf's canonical bytes.
    pub fn leaf_bytes(&self) -> Vec<u8> {
        let name = self.stream.as_bytes();
        let mut bytes = Vec::with_capacity(4 + name.len() + 8 + 32);
        bytes.extend_from_slice(&(name.len() as u32).to_be_bytes());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&self.version.to_be_bytes());
        bytes.extend_from_slice(&self.hash);
        bytes
    }

    /// The leaf's hash.
    pub fn leaf_hash(&self) -> Hash {
        merkle::leaf_hash(&self.leaf_bytes())
    }
}

/// What a digest asserts, before it is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The tree's root.
    pub root: Hash,
    /// Microseconds since the Unix epoch.
    pub time_micros: i64,
    /// Streams in the tree.
    pub stream_count: u64,
    /// Events in those streams.
    pub event_count: u64,
    /// Hash of the previous digest (zeros for the first).
    pub previous: Hash,
}

impl Statement {
    /// The statement over `heads` (sorted here by stream name bytes).
    pub fn over(mut heads: Vec<Head>, time_micros: i64, previous: Hash) -> Self {
        heads.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
        let leaves: Vec<Hash> = heads.iter().map(Head::leaf_hash).collect();
        Self {
            root: merkle::root(&leaves),
            time_micros,
            stream_count: heads.len() as u64,
            event_count: heads.iter().map(|head| head.version).sum(),
            previous,
        }
    }

    /// The canonical signed message.
    pub fn message(&self) -> [u8; 112] {
        let mut message = [0u8; 112];
        message[..24].copy_from_slice(MESSAGE_PREFIX);
        message[24..56].copy_from_slice(&self.root);
        message[56..64].copy_from_slice(&self.time_micros.to_be_bytes());
        message[64..72].copy_from_slice(&self.stream_count.to_be_bytes());
        message[72..80].copy_from_slice(&self.event_count.to_be_bytes());
        message[80..112].copy_from_slice(&self.previous);
        message
    }
}

/// A signed statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedDigest {
    /// What is signed.
    pub statement: Statement,
    /// Ed25519 signature of [`Statement::message`].
    pub signature: [u8; 64],
}

impl SignedDigest {
    /// The hash the next digest chains to: `SHA-256(message || signature)`.
    pub fn hash(&self) -> Hash {
        let mut hasher = Sha256::new();
        hasher.update(self.statement.message());
        hasher.update(self.signature);
        hasher.finalize().into()
    }

    /// Reads the signed fields of a digest document ([`document`]); errors name the field.
    pub fn from_document(digest: &serde_json::Value) -> Result<Self, String> {
        let bytes = |name: &str| {
            let text = digest[name]
                .as_str()
                .ok_or_else(|| format!("digest.{name} is missing"))?;
            unhex(text).ok_or_else(|| format!("digest.{name} is not hex"))
        };
        let hash = |name: &str| -> Result<Hash, String> {
            bytes(name)?
                .try_into()
                .map_err(|_| format!("digest.{name} is not 32 bytes"))
        };
        let number = |name: &str| {
            digest[name]
                .as_u64()
                .ok_or_else(|| format!("digest.{name} is missing"))
        };
        Ok(Self {
            statement: Statement {
                root: hash("root")?,
                time_micros: digest["time_micros"]
                    .as_i64()
                    .ok_or("digest.time_micros is missing")?,
                stream_count: number("stream_count")?,
                event_count: number("event_count")?,
                previous: hash("previous")?,
            },
            signature: bytes("signature")?
                .try_into()
                .map_err(|_| "digest.signature is not 64 bytes")?,
        })
    }

    /// Whether `key` signed it.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        key.verify(
            &self.statement.message(),
            &Signature::from_bytes(&self.signature),
        )
        .is_ok()
    }
}

/// The ledger's signing key.
pub struct DigestKey(SigningKey);

impl std::fmt::Debug for DigestKey {
    // The public half only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DigestKey(public {})",
            hex(self.0.verifying_key().as_bytes())
        )
    }
}

/// A key file that does not read as an Ed25519 private key.
#[derive(Debug, thiserror::Error)]
#[error("digest key {path}: {reason}")]
pub struct KeyError {
    path: String,
    reason: String,
}

impl DigestKey {
    /// Reads a PKCS#8 PEM private key (`openssl genpkey -algorithm ed25519`). Errors name
    /// the file, never its content.
    pub fn from_pem_file(path: &std::path::Path) -> Result<Self, KeyError> {
        let error = |reason: String| KeyError {
            path: path.display().to_string(),
            reason,
        };
        let pem = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        SigningKey::from_pkcs8_pem(&pem)
            .map(Self)
            .map_err(|_| error("not an Ed25519 private key in PKCS#8 PEM".into()))
    }

    /// A key from 32 secret bytes (tests, tools).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(seed))
    }

    /// Signs a statement.
    pub fn sign(&self, statement: Statement) -> SignedDigest {
        let signature = self.0.sign(&statement.message()).to_bytes();
        SignedDigest {
            statement,
            signature,
        }
    }

    /// The public key.
    pub fn public(&self) -> VerifyingKey {
        self.0.verifying_key()
    }

    /// The public key as SubjectPublicKeyInfo PEM, what `GET /v1/digests/public-key` serves.
    pub fn public_pem(&self) -> String {
        self.public()
            .to_public_key_pem(Default::default())
            .expect("an Ed25519 public key always encodes")
    }
}

/// Reads a public key from SubjectPublicKeyInfo PEM.
pub fn public_key_from_pem(pem: &str) -> Option<VerifyingKey> {
    VerifyingKey::from_public_key_pem(pem).ok()
}

/// The JSON document of a digest, as published on Kafka and served over HTTP: the fields
/// of the signed message in hex and numbers, the signature, the digest's hash and the
/// public key. `tests/verify_digest.py` reads it as its `digest` object.
pub fn document(seq: i64, digest: &SignedDigest, public_key_pem: &str) -> serde_json::Value {
    let statement = &digest.statement;
    serde_json::json!({
        "format": "ra-ledger digest v1",
        "seq": seq,
        "root": hex(&statement.root),
        "time_micros": statement.time_micros,
        "time": chrono::DateTime::from_timestamp_micros(statement.time_micros)
            .map(|time| time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        "stream_count": statement.stream_count,
        "event_count": statement.event_count,
        "previous": hex(&statement.previous),
        "signature": hex(&digest.signature),
        "hash": hex(&digest.hash()),
        "public_key_pem": public_key_pem,
    })
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes from hex; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(stream: &str, version: u64) -> Head {
        Head {
            stream: stream.into(),
            version,
            hash: Sha256::digest(stream.as_bytes()).into(),
        }
    }

    #[test]
    fn the_leaf_and_message_layouts_are_as_documented() {
        let leaf = head("contact-1", 3).leaf_bytes();
        assert_eq!(&leaf[..4], &[0, 0, 0, 9]);
        assert_eq!(&leaf[4..13], b"contact-1");
        assert_eq!(&leaf[13..21], &3u64.to_be_bytes());
        assert_eq!(leaf.len(), 4 + 9 + 8 + 32);
        let statement = Statement::over(vec![head("b", 2), head("a", 5)], -1, [7; 32]);
        assert_eq!((statement.stream_count, statement.event_count), (2, 7));
        // Sorted by name: a before b, whatever order they came in.
        let sorted = Statement::over(vec![head("a", 5), head("b", 2)], -1, [7; 32]);
        assert_eq!(statement, sorted);
        let message = statement.message();
        assert_eq!(&message[..19], b"ra-ledger digest v1");
        assert_eq!(&message[56..64], &[0xff; 8]);
        assert_eq!(&message[80..], &[7; 32]);
    }

    #[test]
    fn a_signed_digest_verifies_with_its_key_only_and_chains() {
        let key = DigestKey::from_seed(&[1; 32]);
        let first = key.sign(Statement::over(vec![head("a", 1)], 10, [0; 32]));
        assert!(first.verify(&key.public()));
        assert!(!first.verify(&DigestKey::from_seed(&[2; 32]).public()));
        let mut forged = first.clone();
        forged.statement.event_count += 1;
        assert!(!forged.verify(&key.public()));
        let second = key.sign(Statement::over(vec![head("a", 2)], 20, first.hash()));
        assert_eq!(second.statement.previous, first.hash());
        let pem = key.public_pem();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----"), "{pem}");
        assert_eq!(public_key_from_pem(&pem), Some(key.public()));
        assert!(!format!("{key:?}").contains(&hex(&[1; 32])));
    }
}
