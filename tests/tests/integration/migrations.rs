//! Migrations: idempotent, serialized between concurrent starters, and they create the
//! outbox with its insert-only publication.

use futures::future::try_join_all;
use ra_ledger::migrate;
use ra_ledger_tests::TestDatabase;

async fn history(database: &TestDatabase) -> anyhow::Result<Vec<(i32, String)>> {
    let client = database.connect().await?;
    Ok(client
        .query(
            "SELECT version, name FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .await?
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_migrations_twice_changes_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let before = history(&database).await?;
    assert_eq!(before.len(), migrate::embedded().len());

    let mut client = database.connect().await?;
    let report = migrate::run(&mut client).await?;
    assert!(
        report.applied.is_empty(),
        "second run applied {:?}",
        report.applied
    );
    assert_eq!(history(&database).await?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starters_apply_each_migration_once() -> anyhow::Result<()> {
    let database = TestDatabase::unmigrated().await?;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(database.connect().await?);
    }
    // All four race; the advisory lock makes them take turns.
    let reports = try_join_all(clients.iter_mut().map(migrate::run)).await?;

    let mut applied: Vec<String> = reports.into_iter().flat_map(|r| r.applied).collect();
    applied.sort();
    let mut expected = migrate::embedded();
    expected.sort();
    assert_eq!(
        applied, expected,
        "each migration applied by exactly one starter"
    );
    assert_eq!(history(&database).await?.len(), expected.len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_has_an_insert_only_publication() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    let row = client
        .query_one(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, \
                    array(SELECT tablename::text FROM pg_publication_tables t \
                          WHERE t.pubname = p.pubname) \
             FROM pg_publication p WHERE pubname = 'ra_ledger_outbox'",
            &[],
        )
        .await?;
    let (insert, update, delete, truncate): (bool, bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (insert, update, delete, truncate),
        (true, false, false, false)
    );
    assert_eq!(row.get::<_, Vec<String>>(4), vec!["outbox".to_owned()]);

    let wal_level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
    assert_eq!(wal_level, "logical");
    Ok(())
}
