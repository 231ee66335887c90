//! A digest's number is signed (issue 35, item 5): `ledger verify --digests` decides copies
//! and forks by what is signed, so a relabelled copy of a valid digest raises no fork, and
//! the digests signed before the number was (version 1) still verify, in proofs and on the
//! topic, chained to the ones signed since.

use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::published::{self, Published};
use ra_ledger::digest::{DigestDocument, DigestKey, SignedDigest};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use serde_json::Value;

fn sealed(built: Built) -> (i64, SignedDigest) {
    match built {
        Built::Sealed { seq, digest, .. } => (seq, digest),
        other => panic!("expected a new digest, got {other:?}"),
    }
}

/// The document of `digest` as the relay published it, read back at `offset`, with its
/// `seq` replaced by `label` when given: what anyone may write to the topic.
fn read_at(
    seq: i64,
    digest: &SignedDigest,
    key: &DigestKey,
    offset: u32,
    label: Option<i64>,
) -> anyhow::Result<Published> {
    let mut document = serde_json::to_value(DigestDocument::new(seq, digest, key.public_pem()))?;
    if let Some(label) = label {
        document["seq"] = Value::from(label);
    }
    Ok(published::parse(
        &serde_json::to_vec(&document)?,
        &format!("outbox.event.digest/0@{offset}"),
    )?)
}

async fn assign(api: &TestApi, count: usize) {
    for _ in 0..count {
        api.assign(uuid::Uuid::now_v7()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relabelled_digest_is_no_fork_and_digests_signed_before_the_number_still_verify()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    api.contact("TX", "Office").await;
    assign(&api, 3).await;
    let key = DigestKey::from_seed(&[35; 32]);
    let client = database.connect().await?;

    // Digest 1 as a release before this one sealed it: the same statement, signed without
    // its number (version 1), as the table holds it after the upgrade.
    let (_, numbered) = sealed(build(api.ledger.pool(), &key).await?);
    let first = key.sign(numbered.statement.clone().unnumbered());
    client
        .batch_execute(&format!(
            "BEGIN; ALTER TABLE digests DISABLE TRIGGER USER; \
             UPDATE digests SET signature = '\\x{}', hash = '\\x{}', message_version = 1 \
             WHERE seq = 1; \
             ALTER TABLE digests ENABLE TRIGGER USER; COMMIT",
            ra_ledger::hex::hex(&first.signature),
            ra_ledger::hex::hex(&first.hash())
        ))
        .await?;
    // A proof against it is a version-1 proof, and verifies.
    let event: uuid::Uuid = client
        .query_one("SELECT event_id FROM events ORDER BY position LIMIT 1", &[])
        .await?
        .get(0);
    let proof = api.get(&format!("/v1/events/{event}/proof")).await;
    assert_eq!(proof.status, axum::http::StatusCode::OK, "{:?}", proof.body);
    assert_eq!(proof.body["digest"]["format"], "ra-ledger digest v1");
    let claimed = ra_ledger::digest::verify::ClaimedProof::from_json(&proof.body)?;
    ra_ledger::digest::verify::verify(&claimed, &key.public())?;

    // The next digests sign their numbers and chain to it.
    assign(&api, 2).await;
    let (seq, second) = sealed(build(api.ledger.pool(), &key).await?);
    assert_eq!((seq, second.statement.seq), (2, Some(2)));
    assert_eq!(second.statement.previous, first.hash());
    assign(&api, 2).await;
    let (_, third) = sealed(build(api.ledger.pool(), &key).await?);
    let proof = api.get(&format!("/v1/events/{event}/proof")).await;
    assert_eq!(proof.body["digest"]["format"], "ra-ledger digest v2");
    assert_eq!(proof.body["digest"]["seq"], 3);
    let claimed = ra_ledger::digest::verify::ClaimedProof::from_json(&proof.body)?;
    ra_ledger::digest::verify::verify(&claimed, &key.public())?;

    let honest = || -> anyhow::Result<Vec<Published>> {
        Ok(vec![
            read_at(1, &first, &key, 0, None)?,
            read_at(2, &second, &key, 1, None)?,
            read_at(3, &third, &key, 2, None)?,
        ])
    };
    let report = published::check(&client, honest()?, &key.public()).await?;
    assert!(report.holds(), "{report:?}");
    assert_eq!((report.checked, report.copies), (3, 0), "{report:?}");

    // Digest 1 (version 1) copied under number 2, and under 3: no key needed, no fork; a
    // copy, placed by its chain.
    let mut relabelled = honest()?;
    relabelled.push(read_at(1, &first, &key, 3, Some(2))?);
    relabelled.push(read_at(1, &first, &key, 4, Some(3))?);
    let report = published::check(&client, relabelled, &key.public()).await?;
    assert!(report.holds(), "a relabelled copy is no fork: {report:?}");
    assert_eq!(
        (report.checked, report.copies, report.relabelled),
        (3, 2, 2),
        "{report:?}"
    );

    // Digest 2 (version 2) copied under number 3: its number is signed, so the copy is no
    // statement of the ledger's. It is named as such, and raises no fork either.
    let mut relabelled = honest()?;
    relabelled.push(read_at(2, &second, &key, 5, Some(3))?);
    let report = published::check(&client, relabelled, &key.public()).await?;
    assert_eq!(
        report.problems,
        ["digest 3 (outbox.event.digest/0@5): the signature does not verify with the public key"],
        "{report:?}"
    );
    assert!(report.disagreement.is_none(), "{report:?}");
    assert_eq!(report.checked, 3);
    Ok(())
}
