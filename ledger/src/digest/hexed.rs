//! Hashes, signatures and payloads as the JSON documents write them, in hex: a type of
//! their own, so that the documents ([`super::document`], which re-exports them) and the
//! index's proofs ([`super::index`]) share them without importing each other.

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::hex::{hex, unhex};

/// Exactly `N` bytes, written as lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex<const N: usize>(pub [u8; N]);

/// A SHA-256 hash in hex.
pub type HexHash = Hex<32>;
/// An Ed25519 signature in hex.
pub type HexSignature = Hex<64>;

impl<const N: usize> Serialize for Hex<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex(&self.0))
    }
}

impl<'de, const N: usize> Deserialize<'de> for Hex<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = unhex(&text).ok_or_else(|| de::Error::custom(format!("not hex: {text:?}")))?;
        let count = bytes.len();
        bytes
            .try_into()
            .map(Self)
            .map_err(|_| de::Error::custom(format!("not {N} bytes: {text:?} is {count} bytes")))
    }
}

/// Bytes of any length, written as lowercase hex (an event's payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HexBytes(pub Vec<u8>);

impl Serialize for HexBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for HexBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        unhex(&text)
            .map(Self)
            .ok_or_else(|| de::Error::custom(format!("not hex: {text:?}")))
    }
}
