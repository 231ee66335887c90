//! Opaque, tamper-evident pagination cursors: `base64url(position) . base64url(hmac)`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

use crate::projections::from_micros;
use crate::queries::HistoryCursor;

/// Signs and checks cursors.
#[derive(Clone)]
pub struct CursorKey(Vec<u8>);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(..)")
    }
}

impl CursorKey {
    /// A key from configured bytes.
    pub fn new(key: &[u8]) -> Self {
        Self(key.to_vec())
    }

    /// A random key: cursors stop working when the process restarts.
    pub fn random() -> Self {
        Self(
            Uuid::new_v4()
                .as_bytes()
                .iter()
                .chain(Uuid::new_v4().as_bytes())
                .copied()
                .collect(),
        )
    }

    fn mac(&self, data: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(data);
        mac
    }

    /// Encodes a cursor.
    pub fn encode(&self, cursor: &HistoryCursor) -> String {
        let mut data = cursor.started_at.timestamp_micros().to_be_bytes().to_vec();
        data.extend_from_slice(cursor.assignment_id.as_bytes());
        let tag = self.mac(&data).finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&data),
            URL_SAFE_NO_PAD.encode(&tag[..16])
        )
    }

    /// Decodes a cursor, refusing anything this server did not sign.
    pub fn decode(&self, text: &str) -> Result<HistoryCursor, &'static str> {
        let (data, tag) = text.split_once('.').ok_or("malformed cursor")?;
        let data = URL_SAFE_NO_PAD
            .decode(data)
            .map_err(|_| "malformed cursor")?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| "malformed cursor")?;
        self.mac(&data)
            .verify_truncated_left(&tag)
            .map_err(|_| "cursor was not issued by this server or was altered")?;
        if data.len() != 24 || tag.len() != 16 {
            return Err("malformed cursor");
        }
        let micros = i64::from_be_bytes(data[..8].try_into().map_err(|_| "malformed cursor")?);
        let assignment_id = Uuid::from_slice(&data[8..]).map_err(|_| "malformed cursor")?;
        Ok(HistoryCursor {
            started_at: from_micros(micros),
            assignment_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_tampering() {
        let key = CursorKey::new(b"test key");
        let cursor = HistoryCursor {
            started_at: from_micros(1_700_000_000_123_456),
            assignment_id: Uuid::now_v7(),
        };
        let text = key.encode(&cursor);
        assert_eq!(key.decode(&text), Ok(cursor));

        let mut tampered = text.clone().into_bytes();
        tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
        assert!(key.decode(std::str::from_utf8(&tampered).unwrap()).is_err());
        assert!(CursorKey::new(b"other key").decode(&text).is_err());
        assert_eq!(key.decode("garbage"), Err("malformed cursor"));
        assert!(key.decode("a.b").is_err());
    }
}
