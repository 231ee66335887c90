//! A digest's time bounds what it sealed (issue 35, item 3): every event recorded at or
//! before the time a digest signs is in that digest, even one whose writer read its
//! `recorded_at` before the digest's time and committed after the builder began.

use std::time::Duration;

use axum::http::StatusCode;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::verify::{ClaimedProof, verify};
use ra_ledger::domain::{ASSIGNMENT_AGGREGATE, Jurisdiction, registration_id};
use ra_ledger::store::{self, Metadata, NewEvent, StreamAppend};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use uuid::Uuid;

/// How long the writer stays between its heads and its commit while the digest ticks.
const HELD: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_held_across_a_digest_tick_is_sealed_by_the_digest_whose_time_covers_it()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let contact: Uuid = api.contact("TX", "Office").await.parse()?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    let business = Uuid::now_v7();
    let pool = api.ledger.pool().clone();

    // The writer reads its heads, and with them its `recorded_at`, and then holds its
    // transaction open while a digest is built.
    let mut writer = pool.get().await?;
    let tx = writer.transaction().await?;
    let stream = format!(
        "{ASSIGNMENT_AGGREGATE}-{}",
        registration_id(business, texas)
    );
    let heads = store::read_heads(&tx, std::slice::from_ref(&stream)).await?;
    let key = DigestKey::from_seed(&[35; 32]);
    let builder = {
        let pool = pool.clone();
        let key = DigestKey::from_seed(&[35; 32]);
        tokio::spawn(async move { build(&pool, &key).await })
    };
    tokio::time::sleep(HELD).await;
    let waited = !builder.is_finished();
    let started =
        ra_ledger::events::assignment_started(Uuid::now_v7(), business, texas, contact, None);
    let appends = [StreamAppend {
        aggregate_type: ASSIGNMENT_AGGREGATE,
        aggregate_id: registration_id(business, texas),
        expected_version: Some(0),
        events: vec![NewEvent::new(started, heads.now)],
    }];
    let metadata = Metadata {
        actor: "held-writer".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    ra_ledger::write::record(&tx, &appends, &heads, &metadata).await?;
    tx.commit().await?;
    let Built::Sealed { digest, .. } = builder.await?? else {
        anyhow::bail!("the first build seals a digest");
    };
    let digest_time = digest.statement.time_micros;
    assert!(
        heads.now.timestamp_micros() <= digest_time,
        "the writer's recorded_at {} is after the digest's time {digest_time}",
        heads.now.timestamp_micros()
    );
    // The digest sealed the held writer's stream at the version it committed.
    let client = database.connect().await?;
    let sealed: Option<i64> = client
        .query_opt(
            "SELECT version FROM digest_leaves WHERE stream = $1",
            &[&stream],
        )
        .await?
        .map(|row| row.get(0));
    assert_eq!(
        sealed,
        Some(1),
        "the digest left out an event recorded before its time"
    );
    assert!(
        waited,
        "the builder sealed while a writer whose time is before the digest's was in progress"
    );

    // So the ledger's answer as known at the digest's time (the proofs' default) and the
    // answer its proof proves offline are the same: the held writer's assignment.
    let base = format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent");
    let known_at = chrono::DateTime::from_timestamp_micros(digest_time)
        .expect("a digest time")
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('+', "%2B");
    let plain = api.get(&format!("{base}?known_at={known_at}")).await;
    plain.expect(StatusCode::OK);
    assert_eq!(plain.body["contact"]["contact_id"], contact.to_string());
    let proven = api.get(&format!("{base}?proof=true")).await;
    proven.expect(StatusCode::OK);
    let proof = &proven.body["proof"];
    assert_eq!(proof["question"]["known_at_micros"], digest_time);
    let verified = verify(&ClaimedProof::from_json(proof)?, &key.public())?;
    assert!(verified.answer.is_some());
    assert_eq!(proof["answer"]["contact"], plain.body["contact"]);
    Ok(())
}
