//! `ledger digest monitor` (issue 56, item 2): the heads recomputed from the transparency log
//! against what a digest signed. The code-read finding, reproduced: `digest_leaves`
//! is mutable, so a superuser without the key made the honest builder (after a restart, with
//! no tree in memory) sign a map that leaves out a stream, and nothing said so.

use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::monitor::monitor;
use ra_ledger_tests::TestDatabase;

async fn seal(database: &TestDatabase, key: &DigestKey) -> anyhow::Result<i64> {
    let pool = ra_ledger::db::pool(&database.url, "monitor-test", 1)?;
    // A fresh tree cache each time: a builder just restarted, reading `digest_leaves`.
    match build(&pool, key).await? {
        Built::Sealed { seq, .. } => Ok(seq),
        other => anyhow::bail!("expected a new digest, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_names_a_stream_a_digest_left_out_of_the_log_it_sealed() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    api.contact("TX", "Office").await;
    api.assign(uuid::Uuid::now_v7()).await;
    api.assign(uuid::Uuid::now_v7()).await;
    let key = DigestKey::from_seed(&[5; 32]);
    assert_eq!(seal(&database, &key).await?, 1);
    let pool = ra_ledger::db::pool(&database.url, "monitor", 1)?;
    let client = pool.get().await?;
    let verdict = monitor(&client, None).await?;
    assert_eq!(verdict.difference, None, "{verdict:?}");
    assert_eq!((verdict.seq, verdict.streams), (1, 3), "{verdict:?}");

    // A superuser removes one stream's leaf; the next digest, sealed by a builder with no
    // tree in memory, signs a map without it, though the log holds its event.
    let left_out: String = client
        .query_one(
            "SELECT stream FROM digest_leaves WHERE stream LIKE 'assignment-%' \
             ORDER BY stream LIMIT 1",
            &[],
        )
        .await?
        .get(0);
    client
        .execute("DELETE FROM digest_leaves WHERE stream = $1", &[&left_out])
        .await?;
    api.assign(uuid::Uuid::now_v7()).await;
    assert_eq!(seal(&database, &key).await?, 2);
    let verdict = monitor(&client, None).await?;
    let difference = verdict.difference.expect("the left-out stream named");
    assert!(
        difference.starts_with(&format!(
            "stream {left_out}: in the log (version 1 at position"
        )) && difference.ends_with("not in digest 2"),
        "{difference}"
    );
    // Digest 1 was honest, and still is.
    let first = monitor(&client, Some(1)).await?;
    assert_eq!(first.difference, None, "{first:?}");
    // A digest that does not exist is an error naming it.
    let error = monitor(&client, Some(9)).await.expect_err("no digest 9");
    assert!(error.to_string().contains("no digest 9"), "{error}");
    Ok(())
}
