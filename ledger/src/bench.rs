//! `ledger bench`: throughput and latency figures, printed, never asserted.
//!
//! Each benchmark works in a scratch database it creates next to the configured one (the
//! role needs CREATEDB) and drops afterwards, so the ledger's own data is never touched.

use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::Pool;
use futures::future::try_join_all;
use uuid::Uuid;

use crate::commands::{Assign, CreateContact, Ledger};
use crate::db;
use crate::domain::PostalAddress;
use crate::store::Metadata;

/// A database that exists for one benchmark.
#[derive(Debug)]
pub struct ScratchDatabase {
    admin_url: String,
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates and migrates a scratch database on the server of `url`.
    pub async fn create(url: &str) -> anyhow::Result<Self> {
        let name = format!("ledger_bench_{}", Uuid::new_v4().simple());
        let admin = db::connect(url, "ledger-bench").await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "cannot create scratch database {name}: {error}; the role needs CREATEDB"
                )
            })?;
        let scratch_url = replace_database(url, &name);
        let mut client = db::connect(&scratch_url, "ledger-bench").await?;
        crate::migrate::run(&mut client).await?;
        Ok(Self {
            admin_url: url.to_owned(),
            name,
            url: scratch_url,
        })
    }

    /// Drops the database.
    pub async fn drop(self) -> anyhow::Result<()> {
        let admin = db::connect(&self.admin_url, "ledger-bench").await?;
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await?;
        Ok(())
    }
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| i + authority);
    let mut out = format!("{}/{name}", &base[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

fn texas_address() -> PostalAddress {
    PostalAddress {
        line1: "211 E 7th St".into(),
        line2: "Suite 620".into(),
        city: "Austin".into(),
        region: "TX".into(),
        postal_code: "78701".into(),
    }
}

/// Figures of one write benchmark round.
#[derive(Debug, Clone, Copy)]
pub struct WriteRound {
    /// Assignments per second through `Ledger::assign`.
    pub ledger_per_second: f64,
    /// The same rows as raw INSERTs, per second.
    pub raw_per_second: f64,
}

/// Assignments created per second through the ledger's write path, against raw INSERTs of
/// the same rows in the same transaction shape (one transaction per assignment: its event,
/// its outbox row, its projection row), at the same concurrency, alternating rounds.
pub async fn write(
    url: &str,
    rows: usize,
    concurrency: usize,
    rounds: usize,
) -> anyhow::Result<Vec<WriteRound>> {
    let scratch = ScratchDatabase::create(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", concurrency)?;
    let ledger = Ledger::new(pool.clone());
    let metadata = Metadata {
        actor: "bench".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
    };
    let contact = ledger
        .create_contact(
            CreateContact {
                jurisdiction: "TX".into(),
                name: "Bench Agents".into(),
                address: texas_address(),
                effective_at: None,
            },
            &metadata,
        )
        .await?;
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
    let insert_event = tx
        .prepare_cached(
            "INSERT INTO events (event_id, stream, stream_version, event_type, schema_version, payload, \
             recorded_at, effective_at, actor, correlation_id, causation_id, prev_hash, hash) \
             VALUES ($1, $2, 1, 'AssignmentStarted', 1, $3, $4, $4, 'bench', $1, NULL, NULL, $5)",
        )
        .await?;
    tx.execute(&insert_event, &[&event_id, &stream, &payload, &now, &hash])
        .await?;
    let insert_outbox = tx
        .prepare_cached(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ($1, 'assignment', $2, 'AssignmentStarted', $3)",
        )
        .await?;
    tx.execute(&insert_outbox, &[&event_id, &stream, &payload])
        .await?;
    let insert_assignment = tx
        .prepare_cached(
            "INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at, recorded_at) \
             VALUES ($1, $2, 'TX', $3, $4, $4)",
        )
        .await?;
    tx.execute(
        &insert_assignment,
        &[&assignment, &business, &contact_id, &now],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Latency figures of the as-of query.
#[derive(Debug, Clone, Copy)]
pub struct AsOfFigures {
    /// Assignment history rows in the table.
    pub history_rows: i64,
    /// Queries timed.
    pub queries: usize,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Slowest query.
    pub max: Duration,
}

/// As-of query latency over a projection of `history_rows` assignment rows: businesses with
/// five assignments each (four REPLACEs over four years) spread over every jurisdiction.
pub async fn as_of(url: &str, history_rows: usize, queries: usize) -> anyhow::Result<AsOfFigures> {
    let scratch = ScratchDatabase::create(url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 1)?;
    let client = pool.get().await?;
    let businesses = (history_rows / 5).max(1) as i64;
    // One contact per jurisdiction, then the history in bulk, straight into the projection
    // (the query reads only the projection).
    client
        .batch_execute(&format!(
            "INSERT INTO contacts (contact_id, jurisdiction, name, address_line1, city, region, postal_code, \
                                   status, created_at, recorded_at, stream_version) \
             SELECT gen_random_uuid(), code, 'Agent ' || code, '1 Main St', 'Capital', code, '00001', 'primary', \
                    '2020-01-01', '2020-01-01', 1 FROM jurisdictions;
             CREATE TEMP TABLE bench_business AS
               SELECT gen_random_uuid() AS business_id,
                      (SELECT array_agg(code ORDER BY code) FROM jurisdictions)[1 + (n % 56)] AS jurisdiction
               FROM generate_series(1, {businesses}) n;
             INSERT INTO assignments (assignment_id, business_id, jurisdiction, contact_id, started_at, ended_at,
                                      end_reason, recorded_at, ended_recorded_at)
             SELECT gen_random_uuid(), b.business_id, b.jurisdiction, c.contact_id,
                    '2021-01-01'::timestamptz + (k * interval '365 days'),
                    CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END,
                    CASE WHEN k < 4 THEN 'replaced' END,
                    '2021-01-01'::timestamptz + (k * interval '365 days'),
                    CASE WHEN k < 4 THEN '2021-01-01'::timestamptz + ((k + 1) * interval '365 days') END
             FROM bench_business b JOIN contacts c ON c.jurisdiction = b.jurisdiction
             CROSS JOIN generate_series(0, 4) k;
             ANALYZE assignments; ANALYZE contacts;"
        ))
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
        let jurisdiction = crate::domain::Jurisdiction::parse("jurisdiction", jurisdiction)?;
        let at = base + chrono::Duration::days((index as i64 * 7919) % (5 * 365));
        let started = Instant::now();
        let answer =
            crate::queries::registered_agent_at(&client, *business, jurisdiction, at, Utc::now())
                .await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(
            answer.is_some(),
            "no RA for {business} at {at}: the seed is wrong"
        );
    }
    latencies.sort();
    let percentile =
        |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    let figures = AsOfFigures {
        history_rows,
        queries: latencies.len(),
        p50: percentile(0.50),
        p99: percentile(0.99),
        max: *latencies.last().unwrap_or(&Duration::ZERO),
    };
    drop(client);
    pool.close();
    scratch.drop().await?;
    Ok(figures)
}
