//! `ledger import`: a file checked whole before anything is written, batches all or none,
//! errors naming the line, and a re-run (after a refused batch, or a run cut off mid-way)
//! that skips what committed and starts the rest, each assignment once.

use std::collections::HashSet;

use ra_ledger::commands::Ledger;
use ra_ledger::import::{self, ImportError, ImportOptions, ImportProgress};
use ra_ledger::store::Metadata;
use ra_ledger_tests::TestDatabase;
use uuid::Uuid;

fn metadata() -> Metadata {
    Metadata {
        actor: "import-test".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    }
}

async fn primary(ledger: &Ledger, code: &str) -> anyhow::Result<Uuid> {
    Ok(ra_ledger_testing::primary_contact(ledger, code, &metadata()).await?)
}

/// A file of `businesses` in `codes`, in turn.
fn file(businesses: &[Uuid], codes: &[&str]) -> String {
    let mut text = String::from("business_id,jurisdiction,effective_at\n");
    for (index, business) in businesses.iter().enumerate() {
        text.push_str(&format!("{business},{},\n", codes[index % codes.len()]));
    }
    text
}

/// Rows written: AssignmentStarted events, their outbox rows, assignments, and the
/// businesses with more than one active assignment in a jurisdiction (must stay 0).
async fn written(database: &TestDatabase) -> anyhow::Result<[i64; 4]> {
    let client = database.connect().await?;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM events WHERE event_type = 'AssignmentStarted'), \
                    (SELECT count(*) FROM outbox WHERE event_type = 'AssignmentStarted'), \
                    (SELECT count(*) FROM assignments), \
                    (SELECT count(*) FROM (SELECT business_id, jurisdiction FROM assignments \
                      WHERE ended_at IS NULL GROUP BY 1, 2 HAVING count(*) > 1) AS twice)",
            &[],
        )
        .await?;
    Ok([row.get(0), row.get(1), row.get(2), row.get(3)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_stops_at_a_refused_batch_and_a_rerun_skips_what_committed() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let ledger = Ledger::new(ra_ledger::db::pool(&database.url, "import-test", 2)?);
    let texas = primary(&ledger, "TX").await?;
    let businesses: Vec<Uuid> = (0..2_500).map(|_| Uuid::now_v7()).collect();
    // Row 1,800 (line 1,802) is in Wyoming, which has no primary contact yet.
    let mut codes = vec!["TX"; 2_500];
    codes[1_800] = "WY";
    let mut text = String::from("business_id,jurisdiction\n");
    for (business, code) in businesses.iter().zip(&codes) {
        text.push_str(&format!("{business},{code}\n"));
    }
    let rows = import::parse(text.as_bytes())?;
    let options = ImportOptions {
        batch_size: 1_000,
        concurrency: 1,
        metadata: metadata(),
    };
    let mut seen = Vec::new();
    let refused = import::run(&ledger, &rows, &options, |p| seen.push(*p))
        .await
        .expect_err("Wyoming has no primary contact");
    let message = refused.to_string();
    assert!(
        matches!(
            refused,
            ImportError::Batch {
                first_line: 1_002,
                last_line: 2_001,
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("line 1802: WY has no primary contact"),
        "{message}"
    );
    // The first batch committed, the refused one wrote nothing, the third never ran.
    assert_eq!(written(&database).await?, [1_000, 1_000, 1_000, 0]);
    assert_eq!(
        seen.last().map(|p| (p.done, p.started)),
        Some((1_000, 1_000))
    );

    // Fixed (Wyoming gets its contact), the same file again: the first 1,000 are skipped.
    let wyoming = primary(&ledger, "WY").await?;
    let done = import::run(&ledger, &rows, &options, |_| {}).await?;
    assert_eq!(
        done,
        ImportProgress {
            rate: done.rate,
            total: 2_500,
            done: 2_500,
            started: 1_500,
            skipped: 1_000,
        }
    );
    assert_eq!(written(&database).await?, [2_500, 2_500, 2_500, 0]);
    let client = database.connect().await?;
    let on: i64 = client
        .query_one(
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND business_id = $2",
            &[&wyoming, &businesses[1_800]],
        )
        .await?
        .get(0);
    assert_eq!(on, 1);
    let on_texas: i64 = client
        .query_one(
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL",
            &[&texas],
        )
        .await?
        .get(0);
    assert_eq!(on_texas, 2_499);
    // Every event the import appended chains and verifies.
    let verified = ra_ledger::verify::verify(&client, |_| {}).await?;
    assert_eq!(verified.broken, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_cut_off_mid_way_resumes_with_each_assignment_once() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let ledger = Ledger::new(ra_ledger::db::pool(&database.url, "import-test", 4)?);
    primary(&ledger, "TX").await?;
    primary(&ledger, "CA").await?;
    let businesses: Vec<Uuid> = (0..6_000).map(|_| Uuid::now_v7()).collect();
    let rows = import::parse(file(&businesses, &["TX", "CA", "TX"]).as_bytes())?;
    let options = ImportOptions {
        batch_size: 250,
        concurrency: 3,
        metadata: metadata(),
    };
    // Cut off once 1,000 rows committed: the batches in flight are abandoned mid-transaction
    // and roll back, as a kill -9 leaves them.
    let (reached, mut when) = tokio::sync::watch::channel(0u64);
    let cut = {
        let (ledger, rows, options) = (ledger.clone(), rows.clone(), options.clone());
        tokio::spawn(async move {
            import::run(&ledger, &rows, &options, |p| {
                let _ = reached.send(p.done);
            })
            .await
        })
    };
    when.wait_for(|done| *done >= 1_000).await?;
    cut.abort();
    assert!(
        cut.await.is_err_and(|e| e.is_cancelled()),
        "the import was cut off"
    );
    let [before, ..] = written(&database).await?;
    assert!(
        (1_000..6_000).contains(&before),
        "{before} committed before the cut"
    );

    let resumed = import::run(&ledger, &rows, &options, |_| {}).await?;
    assert_eq!(resumed.done, 6_000);
    assert_eq!(resumed.skipped, before as u64, "what committed is skipped");
    assert_eq!(resumed.started + resumed.skipped, 6_000);
    assert_eq!(written(&database).await?, [6_000, 6_000, 6_000, 0]);
    let client = database.connect().await?;
    let assigned: HashSet<Uuid> = client
        .query("SELECT business_id FROM assignments", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(assigned, businesses.iter().copied().collect());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_file_imported_twice_at_once_starts_each_assignment_once() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let ledger = Ledger::new(ra_ledger::db::pool(&database.url, "import-test", 4)?);
    primary(&ledger, "TX").await?;
    let businesses: Vec<Uuid> = (0..4_000).map(|_| Uuid::now_v7()).collect();
    let rows = import::parse(file(&businesses, &["TX"]).as_bytes())?;
    let options = ImportOptions {
        batch_size: 500,
        concurrency: 2,
        metadata: metadata(),
    };
    let (first, second) = tokio::join!(
        import::run(&ledger, &rows, &options, |_| {}),
        import::run(&ledger, &rows, &options, |_| {}),
    );
    let (first, second) = (first?, second?);
    // The batches that lost a race read again and skipped what the other had started.
    assert_eq!(first.started + second.started, 4_000);
    assert_eq!(first.skipped + second.skipped, 4_000);
    assert_eq!(written(&database).await?, [4_000, 4_000, 4_000, 0]);
    Ok(())
}
