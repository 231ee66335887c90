//! `ledger bench as-of`: latency of "who was the RA at T" over a large history.

use std::time::Instant;

use chrono::Utc;
use ra_ledger::db;
use uuid::Uuid;

use super::{Latencies, scratch};

pub async fn run(database_url: &str, history_rows: usize, queries: usize) -> anyhow::Result<()> {
    if queries == 0 {
        anyhow::bail!("--queries must be at least 1");
    }
    eprintln!("seeding {history_rows} assignment history rows…");
    let figures = measure(database_url, history_rows, queries).await?;
    println!(
        "as-of query over {} history rows, {} queries: {} (target p99 <= 2 ms)",
        figures.history_rows, figures.latencies.count, figures.latencies
    );
    Ok(())
}

/// Latency figures of the as-of query.
#[derive(Debug, Clone, Copy)]
struct AsOfFigures {
    /// Assignment history rows in the table.
    history_rows: i64,
    /// Query latencies.
    latencies: Latencies,
}

/// As-of query latency over a projection of `history_rows` assignment rows: businesses with
/// five assignments each (four REPLACEs over four years) spread over every jurisdiction.
async fn measure(url: &str, history_rows: usize, queries: usize) -> anyhow::Result<AsOfFigures> {
    let scratch = scratch(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 1)?;
    let client = pool.get().await?;
    let businesses = (history_rows / 5).max(1) as i64;
    // One contact per jurisdiction, then the history in bulk, straight into the projection
    // (the query reads only the projection).
    client
        .batch_execute(include_str!("../../sql/bench/as_of_contacts.sql"))
        .await?;
    client
        .execute(
            include_str!("../../sql/bench/as_of_businesses.sql"),
            &[&businesses],
        )
        .await?;
    client
        .batch_execute(include_str!("../../sql/bench/as_of_history.sql"))
        .await?;
    let history_rows: i64 = client
        .query_one("SELECT count(*) FROM assignments", &[])
        .await?
        .get(0);
    let sample: Vec<(Uuid, String)> = client
        .query(
            "SELECT business_id, jurisdiction FROM bench_business ORDER BY random() LIMIT $1",
            &[&(queries as i64)],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut latencies = Vec::with_capacity(queries);
    let base = chrono::DateTime::parse_from_rfc3339("2021-01-01T00:00:00Z")?.with_timezone(&Utc);
    for (index, (business, jurisdiction)) in sample.iter().cycle().take(queries).enumerate() {
        let jurisdiction = ra_ledger::domain::Jurisdiction::parse("jurisdiction", jurisdiction)?;
        let at = base + chrono::Duration::days((index as i64 * 7919) % (5 * 365));
        let started = Instant::now();
        let answer = ra_ledger::queries::registered_agent_at(
            &client,
            *business,
            jurisdiction,
            at,
            Utc::now(),
        )
        .await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(
            answer.is_some(),
            "no RA for {business} at {at}: the seed is wrong"
        );
    }
    let latencies =
        Latencies::from_samples(latencies).ok_or_else(|| anyhow::anyhow!("no query was timed"))?;
    let figures = AsOfFigures {
        history_rows,
        latencies,
    };
    drop(client);
    pool.close();
    scratch.drop().await?;
    Ok(figures)
}
