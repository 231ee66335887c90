//! C2SP signed notes (`c2sp.org/signed-note`), the checkpoints they carry
//! (`c2sp.org/tlog-checkpoint`) and witnesses' cosignatures (`c2sp.org/tlog-cosignature`).
//! Pure: text in, text or a named failure out.
//!
//! # Byte layouts
//!
//! **Checkpoint body** (the note's text), UTF-8, each line ending in `\n`:
//!
//! ```text
//! <origin>\n                    the log's name, e.g. ra-ledger.example/log
//! <size>\n                      leaves in the tree, decimal, no leading zeros
//! <base64(root)>\n              the tree's RFC 6962 root, standard base64 with padding
//! ```
//!
//! **Signed note**: the body, a blank line (`\n`), then one line per signature:
//! `— <name> <base64(key id || signature)>\n` (`—` is U+2014, then a space).
//!
//! **The log's signature** (Ed25519, signed-note algorithm `0x01`): name = the origin;
//! key id = the first 4 bytes of `SHA-256(name || "\n" || 0x01 || public key)`; the
//! signature is Ed25519 (RFC 8032) over the body.
//!
//! **A witness's cosignature** (`cosignature/v1`, algorithm `0x04`): name = the witness's
//! name; key id = the first 4 bytes of `SHA-256(name || "\n" || 0x04 || public key)`; after
//! the key id, 8 bytes of big-endian Unix seconds T and 64 bytes of Ed25519 over
//! `cosignature/v1\ntime <T>\n<body>`.
//!
//! **Verifier key** (vkey): `<name>+<key id, 8 hex digits>+<base64(algorithm || public
//! key)>`, what `witnessctl add-key` takes and litewitness prints.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Verifier as _, VerifyingKey};
use sha2::{Digest as _, Sha256};

use super::tree::Hash;

/// Signed-note algorithm byte of an Ed25519 signature.
pub const ALG_ED25519: u8 = 0x01;
/// Signed-note algorithm byte of a `cosignature/v1` (timestamped Ed25519).
pub const ALG_COSIGNATURE_V1: u8 = 0x04;
/// What starts a signature line: an em dash and a space.
const SIGNATURE_DASH: &str = "\u{2014} ";

/// Why a note, a checkpoint or a key does not read or does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// Not a signed note: no blank line before signatures, or a malformed line.
    #[error("not a signed note: {0}")]
    Malformed(String),
    /// Not a checkpoint body.
    #[error("not a checkpoint: {0}")]
    Checkpoint(String),
    /// A verifier key that does not read.
    #[error("not a verifier key {0:?}: name+keyid+base64(algorithm||key)")]
    Vkey(String),
    /// No signature by this key.
    #[error("no signature by {name} (key id {key_id:08x})")]
    Unsigned {
        /// The key's name.
        name: String,
        /// Its key id.
        key_id: u32,
    },
    /// A signature line of this key whose signature fails.
    #[error("the signature of {0} does not verify")]
    BadSignature(String),
}

/// What a checkpoint says: the log, its size and its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin line.
    pub origin: String,
    /// Leaves in the tree.
    pub size: u64,
    /// The tree's root.
    pub root: Hash,
}

impl Checkpoint {
    /// The note text (the three lines, each ending in `\n`).
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root)
        )
    }

    /// Reads a checkpoint body: three lines, then optional extension lines (ignored, as
    /// the spec allows).
    pub fn parse(body: &str) -> Result<Self, NoteError> {
        let bad = |what: &str| NoteError::Checkpoint(what.to_owned());
        if !body.ends_with('\n') {
            return Err(bad("the text does not end in a newline"));
        }
        let mut lines = body.split('\n');
        let origin = lines
            .next()
            .filter(|line| !line.is_empty())
            .ok_or_else(|| bad("no origin line"))?;
        let size_line = lines.next().ok_or_else(|| bad("no size line"))?;
        let size = size_line
            .parse::<u64>()
            .ok()
            .filter(|size| size.to_string() == size_line)
            .ok_or_else(|| bad(&format!("size {size_line:?} is not a decimal number")))?;
        let root_line = lines.next().ok_or_else(|| bad("no root line"))?;
        let root = BASE64
            .decode(root_line)
            .ok()
            .and_then(|bytes| <Hash>::try_from(bytes).ok())
            .ok_or_else(|| bad(&format!("root {root_line:?} is not 32 bytes in base64")))?;
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLine {
    /// The signer's name.
    pub name: String,
    /// The key id (first 4 bytes of the decoded signature).
    pub key_id: u32,
    /// The rest of the decoded signature.
    pub signature: Vec<u8>,
}

impl SignatureLine {
    /// The line as a note carries it, with its newline.
    pub fn text(&self) -> String {
        let mut bytes = self.key_id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.signature);
        format!("{SIGNATURE_DASH}{} {}\n", self.name, BASE64.encode(bytes))
    }

    /// Reads one line (without or with its newline).
    pub fn parse(line: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Malformed(format!("signature line {line:?}"));
        let rest = line
            .trim_end_matches('\n')
            .strip_prefix(SIGNATURE_DASH)
            .ok_or_else(bad)?;
        let (name, encoded) = rest.split_once(' ').ok_or_else(bad)?;
        let bytes = BASE64.decode(encoded).map_err(|_| bad())?;
        if name.is_empty() || bytes.len() < 5 {
            return Err(bad());
        }
        Ok(Self {
            name: name.to_owned(),
            key_id: u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")),
            signature: bytes[4..].to_vec(),
        })
    }
}

/// A signed note: its text and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedNote {
    /// The text, ending in `\n`.
    pub body: String,
    /// The signatures, in order.
    pub signatures: Vec<SignatureLine>,
}

impl SignedNote {
    /// Reads a note: the text up to the last blank line, then signature lines.
    pub fn parse(note: &str) -> Result<Self, NoteError> {
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| NoteError::Malformed("no blank line before the signatures".into()))?;
        let (body, signatures) = (&note[..=split], &note[split + 2..]);
        if !signatures.ends_with('\n') {
            return Err(NoteError::Malformed(
                "the signatures do not end in a newline".into(),
            ));
        }
        let signatures = signatures
            .lines()
            .map(SignatureLine::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if signatures.is_empty() {
            return Err(NoteError::Malformed("no signature".into()));
        }
        Ok(Self {
            body: body.to_owned(),
            signatures,
        })
    }

    /// The note's text.
    pub fn text(&self) -> String {
        let mut text = self.body.clone();
        text.push('\n');
        for signature in &self.signatures {
            text.push_str(&signature.text());
        }
        text
    }

    /// Adds signature lines not already there (a witness's cosignature).
    pub fn add(&mut self, lines: impl IntoIterator<Item = SignatureLine>) {
        for line in lines {
            if !self.signatures.contains(&line) {
                self.signatures.push(line);
            }
        }
    }
}

/// An Ed25519 key with its name, as a signed note names it: the log's key (algorithm
/// `0x01`) or a witness's (`0x04`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteKey {
    /// The log's origin, or the witness's name.
    pub name: String,
    /// [`ALG_ED25519`] or [`ALG_COSIGNATURE_V1`].
    pub algorithm: u8,
    /// The Ed25519 public key.
    pub public: VerifyingKey,
}

impl NoteKey {
    /// The log's key named by its origin.
    pub fn log(origin: &str, public: VerifyingKey) -> Self {
        Self {
            name: origin.to_owned(),
            algorithm: ALG_ED25519,
            public,
        }
    }

    /// The key id: the first 4 bytes of `SHA-256(name || "\n" || algorithm || key)`.
    pub fn key_id(&self) -> u32 {
        let mut hasher = Sha256::new();
        hasher.update(self.name.as_bytes());
        hasher.update(b"\n");
        hasher.update([self.algorithm]);
        hasher.update(self.public.as_bytes());
        let hash: Hash = hasher.finalize().into();
        u32::from_be_bytes(hash[..4].try_into().expect("4 bytes"))
    }

    /// The verifier key text.
    pub fn vkey(&self) -> String {
        let mut key = vec![self.algorithm];
        key.extend_from_slice(self.public.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.key_id(), BASE64.encode(key))
    }

    /// Reads a verifier key of algorithm `0x01` or `0x04`; its key id must match.
    pub fn from_vkey(vkey: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Vkey(vkey.to_owned());
        let mut parts = vkey.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let key = BASE64.decode(key).map_err(|_| bad())?;
        let (&algorithm, public) = key.split_first().ok_or_else(bad)?;
        if name.is_empty() || ![ALG_ED25519, ALG_COSIGNATURE_V1].contains(&algorithm) {
            return Err(bad());
        }
        let public = <[u8; 32]>::try_from(public)
            .ok()
            .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
            .ok_or_else(bad)?;
        let parsed = Self {
            name: name.to_owned(),
            algorithm,
            public,
        };
        if id.len() != 8 || u32::from_str_radix(id, 16).ok() != Some(parsed.key_id()) {
            return Err(bad());
        }
        Ok(parsed)
    }

    /// This key's line in `note`, if any.
    fn line<'a>(&self, note: &'a SignedNote) -> Option<&'a SignatureLine> {
        let id = self.key_id();
        note.signatures
            .iter()
            .find(|line| line.name == self.name && line.key_id == id)
    }

    fn unsigned(&self) -> NoteError {
        NoteError::Unsigned {
            name: self.name.clone(),
            key_id: self.key_id(),
        }
    }

    /// Checks the log's signature (algorithm `0x01`) on `note`.
    pub fn verify_signature(&self, note: &SignedNote) -> Result<(), NoteError> {
        let line = self.line(note).ok_or_else(|| self.unsigned())?;
        let signature = Signature::from_slice(&line.signature)
            .map_err(|_| NoteError::BadSignature(self.name.clone()))?;
        self.public
            .verify(note.body.as_bytes(), &signature)
            .map_err(|_| NoteError::BadSignature(self.name.clone()))
    }

    /// Checks a witness's `cosignature/v1` on `note`; returns its time (Unix seconds).
    pub fn verify_cosignature(&self, note: &SignedNote) -> Result<u64, NoteError> {
        let line = self.line(note).ok_or_else(|| self.unsigned())?;
        let bad = || NoteError::BadSignature(self.name.clone());
        if line.signature.len() != 8 + 64 {
            return Err(bad());
        }
        let time = u64::from_be_bytes(line.signature[..8].try_into().expect("8 bytes"));
        let signature = Signature::from_slice(&line.signature[8..]).map_err(|_| bad())?;
        self.public
            .verify(&cosigned_message(time, &note.body), &signature)
            .map_err(|_| bad())?;
        Ok(time)
    }
}

/// What a witness signs: `cosignature/v1\ntime <T>\n` and the checkpoint's body.
pub fn cosigned_message(time: u64, body: &str) -> Vec<u8> {
    format!("cosignature/v1\ntime {time}\n{body}").into_bytes()
}

/// The checkpoint signed by the log's key (`public`, and `sign`, Ed25519 with its private
/// half: the digest key's), as a note.
pub fn sign_checkpoint(
    public: VerifyingKey,
    sign: impl FnOnce(&[u8]) -> [u8; 64],
    checkpoint: &Checkpoint,
) -> SignedNote {
    let body = checkpoint.body();
    let name = NoteKey::log(&checkpoint.origin, public);
    SignedNote {
        signatures: vec![SignatureLine {
            name: checkpoint.origin.clone(),
            key_id: name.key_id(),
            signature: sign(body.as_bytes()).to_vec(),
        }],
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey};

    fn sign(key: &SigningKey, checkpoint: &Checkpoint) -> SignedNote {
        sign_checkpoint(key.verifying_key(), |m| key.sign(m).to_bytes(), checkpoint)
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: "ra-ledger.example/log".into(),
            size: 25,
            root: [7; 32],
        }
    }

    #[test]
    fn a_checkpoint_is_three_lines_and_reads_back() {
        let body = checkpoint().body();
        assert_eq!(
            body,
            "ra-ledger.example/log\n25\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n"
        );
        assert_eq!(Checkpoint::parse(&body), Ok(checkpoint()));
        // Extension lines are allowed; a size with a leading zero or a short root is not.
        assert!(Checkpoint::parse(&format!("{body}ext\n")).is_ok());
        assert!(
            Checkpoint::parse("o\n025\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n").is_err()
        );
        assert!(Checkpoint::parse("o\n25\nBwcH\n").is_err());
        assert!(Checkpoint::parse("o\n25").is_err());
    }

    #[test]
    fn the_log_signature_verifies_and_reads_back_as_a_note() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let note = sign(&key, &checkpoint());
        let text = note.text();
        assert!(text.starts_with("ra-ledger.example/log\n25\n"));
        assert!(text.contains("\n\n\u{2014} ra-ledger.example/log "));
        let read = SignedNote::parse(&text).unwrap();
        assert_eq!(read, note);
        let log = NoteKey::log("ra-ledger.example/log", key.verifying_key());
        log.verify_signature(&read).unwrap();
        // The vkey reads back to the same key; another origin's key signs nothing here.
        assert_eq!(NoteKey::from_vkey(&log.vkey()).unwrap(), log);
        let other = NoteKey::log("other.example/log", key.verifying_key());
        assert!(matches!(
            other.verify_signature(&read),
            Err(NoteError::Unsigned { .. })
        ));
        // The body changed: the signature fails.
        let mut changed = read.clone();
        changed.body = changed.body.replace("25", "26");
        assert_eq!(
            log.verify_signature(&changed),
            Err(NoteError::BadSignature("ra-ledger.example/log".into()))
        );
    }

    /// Go's `golang.org/x/mod/sumdb/note` test key: the vkey its tests carry, name
    /// `PeterNeumann`, key id `c74f20a3`.
    #[test]
    fn a_vkey_from_go_reads() {
        let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        let key = NoteKey::from_vkey(vkey).unwrap();
        assert_eq!(
            (key.name.as_str(), key.key_id()),
            ("PeterNeumann", 0xc74f20a3)
        );
        assert_eq!(key.vkey(), vkey);
        assert!(
            NoteKey::from_vkey(
                "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
            )
            .is_err()
        );
    }

    #[test]
    fn a_cosignature_verifies_with_its_time_and_not_on_another_checkpoint() {
        let witness = SigningKey::from_bytes(&[9; 32]);
        let name = NoteKey {
            name: "witness.example/a".into(),
            algorithm: ALG_COSIGNATURE_V1,
            public: witness.verifying_key(),
        };
        let log = SigningKey::from_bytes(&[3; 32]);
        let mut note = sign(&log, &checkpoint());
        let time = 1_790_000_000u64;
        let mut signature = time.to_be_bytes().to_vec();
        signature.extend_from_slice(&witness.sign(&cosigned_message(time, &note.body)).to_bytes());
        note.add([SignatureLine {
            name: name.name.clone(),
            key_id: name.key_id(),
            signature,
        }]);
        let read = SignedNote::parse(&note.text()).unwrap();
        assert_eq!(name.verify_cosignature(&read), Ok(time));
        let mut other = read.clone();
        other.body = Checkpoint {
            size: 26,
            ..checkpoint()
        }
        .body();
        assert!(name.verify_cosignature(&other).is_err());
    }
}
