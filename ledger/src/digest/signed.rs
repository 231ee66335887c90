//! The signed statement of a digest: the leaves' and the message's canonical bytes (laid
//! out in [the module's documentation](super)), the Ed25519 key that signs them, and the
//! check of a signature.

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest as _, Sha256};

use super::merkle::{self, Hash};
use crate::hex::hex;

/// An Ed25519 public key, what checks digests.
pub use ed25519_dalek::VerifyingKey as PublicKey;

/// The first 24 bytes of the signed message of a digest sealed now (version 2: its number
/// is signed).
pub const MESSAGE_PREFIX: &[u8; 24] = b"ra-ledger digest v2\0\0\0\0\0";
/// The first 24 bytes of the signed message of a version-1 digest (sealed before issue 35,
/// item 5), which does not sign its number. Verifiers still accept them; the prefixes keep
/// a signature of one version from ever verifying as the other.
pub const MESSAGE_PREFIX_V1: &[u8; 24] = b"ra-ledger digest v1\0\0\0\0\0";

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
    /// The digest's number, 1 for the first, signed in a version-2 message. `None` for a
    /// version-1 digest, whose message does not hold it: its number is only a label of the
    /// document, which anyone may change (`published` places such a digest by its chain).
    pub seq: Option<i64>,
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
    /// The statement of digest `seq` over `heads` (sorted here by stream name bytes), in a
    /// version-2 message.
    pub fn over(mut heads: Vec<Head>, seq: i64, time_micros: i64, previous: Hash) -> Self {
        heads.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
        let leaves: Vec<Hash> = heads.iter().map(Head::leaf_hash).collect();
        Self {
            seq: Some(seq),
            root: merkle::root(&leaves),
            time_micros,
            stream_count: heads.len() as u64,
            event_count: heads.iter().map(|head| head.version).sum(),
            previous,
        }
    }

    /// The same statement as a version-1 digest states it: without its number.
    pub fn unnumbered(self) -> Self {
        Self { seq: None, ..self }
    }

    /// The version of its signed message: 2 when it signs its number, else 1.
    pub fn version(&self) -> i16 {
        if self.seq.is_some() { 2 } else { 1 }
    }

    /// The canonical signed message: 120 bytes in version 2, 112 in version 1 (the layouts
    /// are in [the module's documentation](super)).
    pub fn message(&self) -> Vec<u8> {
        let mut message = Vec::with_capacity(120);
        match self.seq {
            Some(seq) => {
                message.extend_from_slice(MESSAGE_PREFIX);
                message.extend_from_slice(&seq.to_be_bytes());
            }
            None => message.extend_from_slice(MESSAGE_PREFIX_V1),
        }
        message.extend_from_slice(&self.root);
        message.extend_from_slice(&self.time_micros.to_be_bytes());
        message.extend_from_slice(&self.stream_count.to_be_bytes());
        message.extend_from_slice(&self.event_count.to_be_bytes());
        message.extend_from_slice(&self.previous);
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

    /// Ed25519 over any message: the log's checkpoints ([`crate::tlog::note`]) are signed
    /// with the digest key too.
    pub fn sign_bytes(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
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
        let statement = Statement::over(vec![head("b", 2), head("a", 5)], 3, -1, [7; 32]);
        assert_eq!((statement.stream_count, statement.event_count), (2, 7));
        // Sorted by name: a before b, whatever order they came in.
        let sorted = Statement::over(vec![head("a", 5), head("b", 2)], 3, -1, [7; 32]);
        assert_eq!(statement, sorted);
        let message = statement.message();
        assert_eq!(message.len(), 120);
        assert_eq!(&message[..24], b"ra-ledger digest v2\0\0\0\0\0");
        assert_eq!(&message[24..32], &3i64.to_be_bytes());
        assert_eq!(&message[32..64], &statement.root);
        assert_eq!(&message[64..72], &[0xff; 8]);
        assert_eq!(&message[72..80], &2u64.to_be_bytes());
        assert_eq!(&message[80..88], &7u64.to_be_bytes());
        assert_eq!(&message[88..], &[7; 32]);
        // Version 1, as digests sealed before the number was signed: no number.
        let first = statement.clone().unnumbered().message();
        assert_eq!(first.len(), 112);
        assert_eq!(&first[..24], b"ra-ledger digest v1\0\0\0\0\0");
        assert_eq!(&first[24..56], &statement.root);
        assert_eq!(&first[56..64], &[0xff; 8]);
        assert_eq!(&first[80..], &[7; 32]);
    }

    #[test]
    fn the_number_is_signed_and_no_signature_verifies_in_the_other_version() {
        let key = DigestKey::from_seed(&[4; 32]);
        let signed = key.sign(Statement::over(vec![head("a", 1)], 8, 10, [0; 32]));
        assert!(signed.verify(&key.public()));
        let mut relabelled = signed.clone();
        relabelled.statement.seq = Some(9);
        assert!(!relabelled.verify(&key.public()), "another number");
        let mut as_first_version = signed.clone();
        as_first_version.statement.seq = None;
        assert!(!as_first_version.verify(&key.public()), "read as version 1");
        let old = key.sign(signed.statement.clone().unnumbered());
        assert!(
            old.verify(&key.public()),
            "a version-1 digest still verifies"
        );
        let mut numbered = old.clone();
        numbered.statement.seq = Some(8);
        assert!(!numbered.verify(&key.public()), "read as version 2");
        assert_ne!(old.hash(), signed.hash());
    }

    #[test]
    fn a_signed_digest_verifies_with_its_key_only_and_chains() {
        let key = DigestKey::from_seed(&[1; 32]);
        let first = key.sign(Statement::over(vec![head("a", 1)], 1, 10, [0; 32]));
        assert!(first.verify(&key.public()));
        assert!(!first.verify(&DigestKey::from_seed(&[2; 32]).public()));
        let mut forged = first.clone();
        forged.statement.event_count += 1;
        assert!(!forged.verify(&key.public()));
        let second = key.sign(Statement::over(vec![head("a", 2)], 2, 20, first.hash()));
        assert_eq!(second.statement.previous, first.hash());
        let pem = key.public_pem();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----"), "{pem}");
        assert_eq!(public_key_from_pem(&pem), Some(key.public()));
        assert!(!format!("{key:?}").contains(&hex(&[1; 32])));
    }
}
