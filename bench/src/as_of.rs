//! `ledger-bench as-of`: latency of "who was the RA at T" over a large history.

use std::time::Instant;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::{db, queries};
use uuid::Uuid;

use crate::figures::Latencies;
use crate::scratch;

pub async fn run(database_url: &str, history_rows: usize, queries: usize) -> anyhow::Result<()> {
    if queries == 0 || history_rows == 0 {
        anyhow::bail!("--rows and --queries must be at least 1");
    }
    eprintln!("seeding {history_rows} assignment history rows…");
    let figures = measure(database_url, history_rows, queries).await?;
    outln!(
        "{} history rows ({} businesses with 5 each, over every jurisdiction), seeded in {:.0} s, {} queries of each kind",
        figures.history_rows,
        figures.history_rows / 5,
        figures.seed_seconds,
        queries
    );
    for (name, latencies, plan) in &figures.kinds {
        outln!("{name}: {latencies}");
        outln!("  plan (EXPLAIN (ANALYZE, BUFFERS), one sample):");
        for line in plan {
            outln!("    {line}");
        }
    }
    outln!(
        "as-of p99 {:.3} ms (target <= 2 ms)",
        figures.kinds[0].1.p99.as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Latency figures of the audit queries.
#[derive(Debug, Clone)]
struct AsOfFigures {
    /// Assignment history rows in the table.
    history_rows: i64,
    /// Seconds the seed took.
    seed_seconds: f64,
    /// Per query kind: its name, latencies and a sample's plan.
    kinds: Vec<(&'static str, Latencies, Vec<String>)>,
}

/// As-of query latency over a projection of `history_rows` assignment rows: businesses with
/// five assignments each (four REPLACEs over four years) spread over every jurisdiction.
async fn measure(url: &str, history_rows: usize, queries: usize) -> anyhow::Result<AsOfFigures> {
    let scratch = scratch::database(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 1)?;
    let client = pool.get().await?;
    let seeding = Instant::now();
    seed(&client, history_rows).await?;
    let seed_seconds = seeding.elapsed().as_secs_f64();
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
    let base = chrono::DateTime::parse_from_rfc3339("2021-01-01T00:00:00Z")?.with_timezone(&Utc);
    let day = |index: usize| base + chrono::Duration::days((index as i64 * 7919) % (5 * 365));
    let mut kinds = Vec::new();
    for kind in [Kind::AsOf, Kind::Period, Kind::History] {
        let mut latencies = Vec::with_capacity(queries);
        for (index, (business, code)) in sample.iter().cycle().take(queries).enumerate() {
            let jurisdiction = Jurisdiction::parse("jurisdiction", code)?;
            let at = day(index);
            let started = Instant::now();
            let found = ask(&client, kind, *business, jurisdiction, at).await?;
            latencies.push(started.elapsed());
            anyhow::ensure!(
                found > 0,
                "{}: nothing for {business} at {at}: the seed is wrong",
                kind.name()
            );
        }
        let latencies = Latencies::from_samples(latencies)
            .ok_or_else(|| anyhow::anyhow!("no query was timed"))?;
        let (business, code) = &sample[0];
        let plan = explain(&client, kind, *business, code, day(1)).await?;
        kinds.push((kind.name(), latencies, plan));
    }
    let figures = AsOfFigures {
        history_rows,
        seed_seconds,
        kinds,
    };
    drop(client);
    pool.close();
    scratch.drop().await?;
    Ok(figures)
}

/// Seeds about `history_rows` assignments, five a business: one contact per jurisdiction,
/// then the history in bulk, straight into the projection (the query reads only the
/// projection).
async fn seed(client: &impl GenericClient, history_rows: usize) -> anyhow::Result<()> {
    let businesses = (history_rows / 5).max(1) as i64;
    client
        .batch_execute(include_str!("sql/as_of_contacts.sql"))
        .await?;
    client
        .execute(include_str!("sql/as_of_businesses.sql"), &[&businesses])
        .await?;
    client
        .batch_execute(include_str!("sql/as_of_history.sql"))
        .await?;
    Ok(())
}

/// Asks the question of `kind` about `business` in `jurisdiction` at `at`; returns how
/// many rows answered.
async fn ask(
    client: &impl GenericClient,
    kind: Kind,
    business: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
) -> anyhow::Result<usize> {
    Ok(match kind {
        Kind::AsOf => queries::registered_agent_at(client, business, jurisdiction, at, Utc::now())
            .await?
            .into_iter()
            .count(),
        Kind::Period => queries::registered_agents_during(
            client,
            business,
            jurisdiction,
            at,
            at + chrono::Duration::days(400),
        )
        .await?
        .len(),
        Kind::History => queries::assignment_history(client, business, None, 100)
            .await?
            .len(),
    })
}

/// The audit queries the bench times: the API's as-of, period and history questions.
#[derive(Debug, Clone, Copy)]
enum Kind {
    AsOf,
    Period,
    History,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AsOf => "as-of (GET /v1/businesses/{b}/jurisdictions/{j}/registered-agent?at=)",
            Kind::Period => {
                "period of 400 days (GET /v1/businesses/{b}/jurisdictions/{j}/registered-agents?from=&to=)"
            }
            Kind::History => "history, first page of 100 (GET /v1/businesses/{b}/assignments)",
        }
    }
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of one query of `kind`, with the statement the service
/// sends and its parameters bound.
async fn explain(
    client: &impl GenericClient,
    kind: Kind,
    business: Uuid,
    code: &str,
    at: DateTime<Utc>,
) -> anyhow::Result<Vec<String>> {
    let prefix = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ";
    let rows = match kind {
        Kind::AsOf => {
            let sql = queries::REGISTERED_AGENT_AT_SQL;
            client
                .query(
                    &format!("{prefix}{sql}"),
                    &[&business, &code, &at, &Utc::now()],
                )
                .await?
        }
        Kind::Period => {
            let sql = queries::REGISTERED_AGENTS_DURING_SQL;
            let to = at + chrono::Duration::days(400);
            client
                .query(&format!("{prefix}{sql}"), &[&business, &code, &at, &to])
                .await?
        }
        Kind::History => {
            let sql = queries::ASSIGNMENT_HISTORY_SQL;
            let none: Option<DateTime<Utc>> = None;
            let no_id: Option<Uuid> = None;
            client
                .query(
                    &format!("{prefix}{sql}"),
                    &[&business, &none, &no_id, &100i64],
                )
                .await?
        }
    };
    Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect())
}
