//! `ledger verify` checks the projections against the events (issue 47, item 5): a
//! superuser who changes one row of `assignments` changes the plain audit answer, and the
//! chains and the digests still hold; the projections' replay does not.

use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::cli::ledger;
use uuid::Uuid;

#[tokio::test]
async fn an_edited_assignment_row_fails_ledger_verify_naming_the_table() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    api.contact("TX", "Office").await;
    let other = api.contact("NY", "Elsewhere").await;
    let business = Uuid::now_v7();
    api.assign(business).await;
    let env = [("LEDGER_DATABASE_URL", database.url.as_str())];
    let (code, log) = ledger(&["verify"], &env).await?;
    assert_eq!(code, Some(0), "{log}");

    let answer = format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent");
    let contact = async || api.get(&answer).await.body["contact"]["contact_id"].clone();
    let before = contact().await;
    let client = database.connect().await?;
    client
        .execute(
            "UPDATE assignments SET contact_id = $1 WHERE business_id = $2",
            &[&other.parse::<Uuid>()?, &business],
        )
        .await?;
    // The plain answer changed: it reads the projection.
    assert_eq!(contact().await, serde_json::json!(other));
    assert_ne!(before, serde_json::json!(other));
    let chains = ra_ledger::verify::verify(&client, |_| {}).await?;
    assert!(chains.broken.is_none(), "the events are untouched");
    let (code, log) = ledger(&["verify"], &env).await?;
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("PROJECTIONS DIFFER"), "{log}");
    // The edited row, as the live table has it and as the events give it.
    assert!(log.contains("assignments: 2 differing rows"), "{log}");
    let edited: Uuid = client
        .query_one(
            "SELECT assignment_id FROM assignments WHERE business_id = $1",
            &[&business],
        )
        .await?
        .get(0);
    assert!(log.contains(&format!("assignments {edited}")), "{log}");
    Ok(())
}
