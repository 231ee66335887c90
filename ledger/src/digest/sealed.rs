//! The digests as the database keeps them, read back (issue 58, item 3: this was in
//! `build.rs`, which the proofs, the API and the console reached into for it): the newest
//! one's document, with the checkpoint it sealed, for `GET /v1/digests/latest`, the
//! proofs and the operations page. [`super::build`] seals them.

use super::log::{LogError, hash32};
use super::{DigestDocument, SignedDigest, Statement};

/// The newest digest's document with the checkpoint it sealed, if any
/// (`sql/digest/latest.sql`).
pub async fn latest(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Option<DigestDocument>, LogError> {
    let Some(row) = client
        .query_opt(include_str!("../sql/digest/latest.sql"), &[])
        .await?
    else {
        return Ok(None);
    };
    let seq: i64 = row.get(0);
    let digest = SignedDigest {
        statement: Statement {
            // Digests sealed before the number was signed are version 1.
            seq: (row.get::<_, i16>(8) >= 2).then_some(seq),
            root: hash32("root", row.get(1))?,
            time_micros: row.get(2),
            stream_count: row.get::<_, i64>(3) as u64,
            event_count: row.get::<_, i64>(4) as u64,
            previous: hash32("previous", row.get(5))?,
        },
        signature: row
            .get::<_, Vec<u8>>(6)
            .try_into()
            .map_err(|_| LogError::BadHash(format!("signature of digest {seq}")))?,
    };
    let public: [u8; 32] = hash32("public key", row.get(7))?;
    let pem = ed25519_dalek::VerifyingKey::from_bytes(&public)
        .ok()
        .and_then(|key| {
            use ed25519_dalek::pkcs8::EncodePublicKey;
            key.to_public_key_pem(Default::default()).ok()
        })
        .ok_or_else(|| LogError::BadHash(format!("public key of digest {seq}")))?;
    let mut document = DigestDocument::new(seq, &digest, pem);
    document.checkpoint = row.get(9);
    Ok(Some(document))
}
