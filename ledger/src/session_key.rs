//! The console's session key (`session_key_file`), apart from every other secret.
//!
//! History cursors are signed with the cursor key and handed to every reader, so they are
//! an offline oracle for guessing that key; sessions must not hang on it. The session key
//! is its own random secret of at least [`MIN_BYTES`], and each of its uses gets a key of
//! its own, derived with its own label (HMAC-SHA256 of the label, as HKDF's expand step
//! does): the cookie's signature, the CSRF tokens, and the identifier of the token entry a
//! session belongs to. Knowing one derived key says nothing about the others.
//!
//! Rotation: the key that signed a session may be the previous one, which is accepted
//! until a stated instant (`session_key_previous_until`). A session it signed is signed
//! again with the current key on its next request, so nobody active is signed out, but it
//! ends at that instant at the latest: whoever holds the old key (the reason to rotate)
//! can forge such sessions until then, and none of them outlives the old key.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest session key accepted.
pub const MIN_BYTES: usize = 32;

/// A session key refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "a session key must be at least {MIN_BYTES} bytes, this one is {0}; make one with \
     `openssl rand -base64 48`"
)]
pub struct TooShort(usize);

/// The keys of one session key, one per purpose.
#[derive(Clone)]
pub struct Purposes {
    /// Signs the session cookie (the `cookie` crate takes 64 bytes; it signs with the first
    /// 32).
    pub cookie: cookie::Key,
    /// Makes a session's CSRF token from its nonce.
    pub csrf: [u8; 32],
    /// Names the token entry a session belongs to, without revealing the token's hash.
    pub entry: [u8; 32],
}

impl std::fmt::Debug for Purposes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Purposes(..)")
    }
}

impl Purposes {
    fn derive(secret: &[u8]) -> Self {
        let mut cookie = [0u8; 64];
        cookie[..32].copy_from_slice(&label(secret, "console-cookie-signing"));
        cookie[32..].copy_from_slice(&label(secret, "console-cookie-spare"));
        Self {
            cookie: cookie::Key::from(&cookie),
            csrf: label(secret, "console-csrf"),
            entry: label(secret, "console-token-entry"),
        }
    }
}

/// A key for `purpose`, derived from `secret`.
fn label(secret: &[u8], purpose: &str) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(format!("ra-ledger session key v1: {purpose}").as_bytes());
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA256 of `data` under a derived `key`.
pub fn mac(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// The current session key, and the previous one while it is still accepted.
#[derive(Clone)]
pub struct SessionKeys {
    current: Purposes,
    previous: Option<(Purposes, DateTime<Utc>)>,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys")
            .field(
                "previous_until",
                &self.previous.as_ref().map(|(_, until)| until),
            )
            .finish_non_exhaustive()
    }
}

impl SessionKeys {
    /// The keys of a configured secret, refused when shorter than [`MIN_BYTES`].
    pub fn new(secret: &[u8]) -> Result<Self, TooShort> {
        if secret.len() < MIN_BYTES {
            return Err(TooShort(secret.len()));
        }
        Ok(Self {
            current: Purposes::derive(secret),
            previous: None,
        })
    }

    /// A random key: sessions end when the process restarts.
    pub fn random() -> Self {
        let secret: [u8; 64] = rand::random();
        Self {
            current: Purposes::derive(&secret),
            previous: None,
        }
    }

    /// Also accepts sessions that `previous` signed, until `until`.
    pub fn with_previous(
        mut self,
        previous: &[u8],
        until: DateTime<Utc>,
    ) -> Result<Self, TooShort> {
        if previous.len() < MIN_BYTES {
            return Err(TooShort(previous.len()));
        }
        self.previous = Some((Purposes::derive(previous), until));
        Ok(self)
    }

    /// The keys new sessions are signed with.
    pub fn current(&self) -> &Purposes {
        &self.current
    }

    /// When the previous key stops being accepted, if there is one.
    pub fn previous_until(&self) -> Option<DateTime<Utc>> {
        self.previous.as_ref().map(|(_, until)| *until)
    }

    /// The keys a session presented at `now` may be signed with: the current one first,
    /// then the previous one while it is accepted.
    pub fn accepted(&self, now: DateTime<Utc>) -> impl Iterator<Item = &Purposes> {
        std::iter::once(&self.current).chain(
            self.previous
                .iter()
                .filter(move |(_, until)| now < *until)
                .map(|(keys, _)| keys),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_is_refused_and_each_purpose_has_its_own_key() {
        let error = SessionKeys::new(&[7u8; 31]).unwrap_err().to_string();
        assert!(
            error.contains("at least 32 bytes, this one is 31"),
            "{error}"
        );
        let keys = SessionKeys::new(&[7u8; 32]).unwrap();
        let purposes = keys.current();
        assert_ne!(purposes.csrf, purposes.entry);
        assert_ne!(&purposes.csrf[..], purposes.cookie.signing());
        assert_ne!(&purposes.entry[..], purposes.cookie.signing());
        let other = SessionKeys::new(&[8u8; 32]).unwrap();
        assert_ne!(other.current().csrf, purposes.csrf);
        assert!(format!("{keys:?}").starts_with("SessionKeys"));
    }

    #[test]
    fn the_previous_key_is_accepted_until_its_instant_only() {
        let until = Utc::now();
        let keys = SessionKeys::new(&[1u8; 32])
            .unwrap()
            .with_previous(&[2u8; 32], until)
            .unwrap();
        let before = until - chrono::Duration::seconds(1);
        assert_eq!(keys.accepted(before).count(), 2);
        assert_eq!(keys.accepted(until).count(), 1);
        assert!(
            SessionKeys::new(&[1u8; 32])
                .unwrap()
                .with_previous(b"short", until)
                .is_err()
        );
    }
}
