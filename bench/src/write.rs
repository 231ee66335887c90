//! `ledger-bench write`: assignments per second through the ledger's write path, against
//! raw INSERTs of the same rows in the same transaction shape.

use std::time::Instant;

use chrono::Utc;
use deadpool_postgres::Pool;
use futures::future::try_join_all;
use ra_ledger::commands::{Assign, Ledger};
use ra_ledger::db;
use uuid::Uuid;

use crate::scratch;

pub async fn run(
    database_url: &str,
    rows: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    if rows == 0 || concurrency == 0 || rounds == 0 {
        anyhow::bail!("--rows, --concurrency and --rounds must be at least 1");
    }
    outln!(
        "write path: {rows} assignments per round, {concurrency} concurrent writers, one transaction each"
    );
    let results = measure(database_url, rows, concurrency, rounds).await?;
    for (round, result) in results.iter().enumerate() {
        outln!(
            "round {}: ledger {:.0}/s, raw INSERTs {:.0}/s, ratio {:.2}",
            round + 1,
            result.ledger_per_second,
            result.raw_per_second,
            result.ledger_per_second / result.raw_per_second
        );
    }
    let ledger: f64 =
        results.iter().map(|r| r.ledger_per_second).sum::<f64>() / results.len() as f64;
    let raw: f64 = results.iter().map(|r| r.raw_per_second).sum::<f64>() / results.len() as f64;
    outln!(
        "mean: ledger {ledger:.0}/s, raw {raw:.0}/s, ratio {:.2} (target >= 0.70)",
        ledger / raw
    );
    Ok(())
}

/// Figures of one write benchmark round.
#[derive(Debug, Clone, Copy)]
struct WriteRound {
    /// Assignments per second through `Ledger::assign`.
    ledger_per_second: f64,
    /// The same rows as raw INSERTs, per second.
    raw_per_second: f64,
}

/// Assignments created per second through the ledger's write path, against raw INSERTs of
/// the same rows in the same transaction shape (one transaction per assignment: its event,
/// its outbox row, its projection row), at the same concurrency, alternating rounds.
async fn measure(
    url: &str,
    rows: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<Vec<WriteRound>> {
    let scratch = scratch::database(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", concurrency)?;
    let ledger = Ledger::new(pool.clone());
    let (metadata, contact) = crate::seed::bench_contact(&ledger).await?;
    let mut results = Vec::new();
    for _ in 0..rounds {
        let (ledger_, metadata_) = (ledger.clone(), metadata.clone());
        let ledger_rate = timed(rows, concurrency, move |_| {
            let ledger = ledger_.clone();
            let metadata = metadata_.clone();
            async move {
                let command = Assign {
                    business_id: Uuid::now_v7(),
                    jurisdiction: "TX".into(),
                    effective_at: None,
                };
                ledger.assign(command, &metadata).await?;
                anyhow::Ok(())
            }
        })
        .await?;
        let (raw_pool, contact_id) = (pool.clone(), contact.contact_id);
        let raw_rate = timed(rows, concurrency, move |_| {
            raw_assign(raw_pool.clone(), contact_id)
        })
        .await?;
        results.push(WriteRound {
            ledger_per_second: ledger_rate,
            raw_per_second: raw_rate,
        });
    }
    pool.close();
    scratch.drop().await?;
    Ok(results)
}

/// Runs `rows` operations on `concurrency` workers; returns operations per second.
async fn timed<F, Fut>(rows: usize, concurrency: usize, operation: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let workers = (0..concurrency).map(|worker| {
        let operation = operation.clone();
        tokio::spawn(async move {
            let mut index = worker;
            while index < rows {
                operation(index).await?;
                index += concurrency;
            }
            anyhow::Ok(())
        })
    });
    for result in try_join_all(workers).await? {
        result?;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// The rows one assignment writes, inserted directly: the baseline the ledger is held to.
async fn raw_assign(pool: Pool, contact_id: Uuid) -> anyhow::Result<()> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let business = Uuid::now_v7();
    let assignment = Uuid::now_v7();
    let event_id = Uuid::now_v7();
    let stream = format!("assignment-{business}-TX");
    let payload = vec![0u8; 160];
    let hash = vec![0u8; 32];
    let now = Utc::now();
    let insert_event = tx.prepare_cached(include_str!("sql/raw_event.sql")).await?;
    tx.execute(&insert_event, &[&event_id, &stream, &payload, &now, &hash])
        .await?;
    let insert_outbox = tx
        .prepare_cached(include_str!("sql/raw_outbox.sql"))
        .await?;
    tx.execute(&insert_outbox, &[&event_id, &stream, &payload])
        .await?;
    let insert_assignment = tx
        .prepare_cached(include_str!("sql/raw_assignment.sql"))
        .await?;
    tx.execute(
        &insert_assignment,
        &[&assignment, &business, &contact_id, &now],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
