//! `ledger-bench reassign`: a supersede of a contact with many active assignments, chained
//! pages through the relay, the broker and the workers, against every REPLACE in one
//! transaction.

use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use ra_ledger::commands::{CreateContact, Ledger, SupersedeContact, Superseded};
use ra_ledger::config::WorkerConfig;
use ra_ledger::db;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::metrics::WorkerMetrics;
use ra_ledger::reassign::{self, RunState, RunStatus};
use ra_ledger::store::Metadata;
use ra_ledger::worker::WorkerError;
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::infra::kafka::BOOTSTRAP_SERVERS;
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_testing::{PageTiming, ScratchDatabase};
use uuid::Uuid;

use crate::scratch;
use crate::seed::{replace_all_at_once, texas_address};

pub async fn run(
    database_url: &str,
    brokers: &str,
    rows: usize,
    page_size: u32,
    workers: Workers,
) -> anyhow::Result<()> {
    ra_ledger::reassign::page_size(Some(page_size))?;
    if rows == 0 || workers.count == 0 {
        anyhow::bail!("--rows and --workers must be at least 1");
    }
    let f = measure(database_url, brokers, rows, page_size, workers).await?;
    let chained = f.chained_total.as_secs_f64();
    let single = f.single_total.as_secs_f64();
    let longest = f.chained_longest_page.as_secs_f64();
    // Per row: two events, two outbox rows, one projection update, one insert.
    const WRITES_PER_ROW: f64 = 6.0;
    outln!("supersede of a contact with {} active assignments", f.rows);
    outln!(
        "chained pages of {}: total {chained:.3} s, {} pages, longest page transaction {:.1} ms, most pages in flight {}, {:.0} rows/s ({:.0} row writes/s)",
        f.page_size,
        f.pages,
        longest * 1000.0,
        f.max_pages_in_flight,
        f.rows as f64 / chained,
        f.rows as f64 * WRITES_PER_ROW / chained
    );
    outln!(
        "  of which {:.3} s inside page transactions; between pages (relay, broker, worker) mean {:.1} ms, max {:.1} ms",
        f.timing.in_pages,
        f.timing.mean_gap * 1000.0,
        f.timing.max_gap * 1000.0
    );
    outln!(
        "one transaction: {single:.3} s, {:.0} rows/s ({:.0} row writes/s)",
        f.rows as f64 / single,
        f.rows as f64 * WRITES_PER_ROW / single
    );
    outln!(
        "chained total / single = {:.2} (target <= 1.5); longest page / single = 1/{:.0} (target <= 1/20); pages in flight {} (must be 1)",
        chained / single,
        single / longest.max(1e-9),
        f.max_pages_in_flight
    );
    Ok(())
}

/// The chained run's workers.
#[derive(Debug, Clone, Copy)]
pub struct Workers {
    /// How many, in one consumer group.
    pub count: usize,
    /// Whether a worker runs each next page at once (the default) or waits for its
    /// request through Kafka.
    pub continue_chain: bool,
}

/// Figures of `ledger-bench reassign`.
#[derive(Debug, Clone)]
struct ReassignFigures {
    /// Active assignments moved by each approach.
    rows: usize,
    /// Rows per page of the chained run.
    page_size: u32,
    /// Chained run: supersede commit to the last page's commit.
    chained_total: Duration,
    /// Longest page transaction.
    chained_longest_page: Duration,
    /// Pages processed.
    pages: u32,
    /// Most page transactions of the run open at the same time.
    max_pages_in_flight: i64,
    /// Time in page transactions and between them.
    timing: PageTiming,
    /// All REPLACEs in one transaction: its duration.
    single_total: Duration,
}

/// Supersedes a contact with `rows` active assignments and lets `workers` workers run the
/// chain through the relay and the broker; compares with all REPLACEs in one transaction.
async fn measure(
    url: &str,
    brokers: &str,
    rows: usize,
    page_size: u32,
    workers: Workers,
) -> anyhow::Result<ReassignFigures> {
    let scratch = scratch::database(url).await?;
    let figures = reassign_in(&scratch, brokers, rows, page_size, workers).await;
    scratch.drop().await?;
    figures
}

async fn reassign_in(
    scratch: &ScratchDatabase,
    brokers: &str,
    rows: usize,
    page_size: u32,
    workers: Workers,
) -> anyhow::Result<ReassignFigures> {
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "reassign").await?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Whatever way this ends, the relay and the workers stop.
    let _stop = shutdown.clone().drop_guard();
    let (relay, worker_tasks) = pipeline(scratch, &slot, brokers, workers, &shutdown).await?;
    let bench = Bench::new(scratch, rows, page_size)?;
    // The baseline's contacts: superseded before it has assignments, so its run ends at
    // once (and goes through the workers: the group is up). The rows are then seeded onto
    // the old contact directly, for the one big transaction to move.
    let single_old = bench.contact("OK").await?;
    let single = bench.supersede(single_old).await?;
    bench.wait_run(single.run.run_id).await?;
    bench.seed("OK", single_old).await?;
    let chained_old = bench.contact("TX").await?;
    bench.seed("TX", chained_old).await?;
    wait_for_relay(&client, &slot).await?;
    // Both approaches start from vacuumed, analyzed tables, so autovacuum does not land in
    // one of them by chance.
    let settle =
        "VACUUM ANALYZE assignments, events, outbox, reassignment_runs, reassignment_pages";
    client.batch_execute(settle).await?;

    eprintln!("single transaction: {rows} REPLACEs…");
    let started = Instant::now();
    let moved = replace_all_at_once(
        &bench.pool,
        single_old,
        single.new.contact_id,
        &bench.metadata,
    )
    .await?;
    let single_total = started.elapsed();
    anyhow::ensure!(
        moved == rows,
        "the single transaction moved {moved} of {rows}"
    );
    wait_for_relay(&client, &slot).await?;
    client.batch_execute(settle).await?;

    eprintln!(
        "chained pages of {page_size} through relay, broker and {} worker(s), continue_chain {}…",
        workers.count, workers.continue_chain
    );
    let chained = bench.supersede(chained_old).await?;
    let status = bench.wait_run(chained.run.run_id).await?;
    anyhow::ensure!(
        status.replaced == rows as i64,
        "the chained run replaced {} of {rows}",
        status.replaced
    );
    let in_flight = ra_ledger_testing::max_pages_in_flight(&client, chained.run.run_id).await?;
    let timing = ra_ledger_testing::page_timing(&client, chained.run.run_id).await?;
    shutdown.cancel();
    for task in worker_tasks {
        task.await??;
    }
    relay.await??;
    Ok(ReassignFigures {
        rows,
        page_size,
        chained_total: Duration::from_secs_f64(status.elapsed_seconds),
        chained_longest_page: Duration::from_secs_f64(status.longest_page_ms / 1000.0),
        pages: status.pages,
        max_pages_in_flight: in_flight,
        timing,
        single_total,
    })
}

/// The relay and `workers` workers on the scratch database, with topics of their own. The
/// workers join their group first, so no rebalance lands inside the figures.
async fn pipeline(
    scratch: &ScratchDatabase,
    slot: &str,
    brokers: &str,
    workers: Workers,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<(Task<RelayError>, Vec<Task<WorkerError>>)> {
    let prefix = scratch::topic_prefix(brokers, "");
    let topics: Vec<String> = ["contact", "assignment", "reassignment"]
        .iter()
        .map(|aggregate| format!("{prefix}{aggregate}"))
        .collect();
    ra_ledger_testing::create_topics(brokers, &topics, 3).await?;
    // Both delivery modes write the relay's position there.
    ra_ledger_testing::create_topics(
        brokers,
        &[ra_ledger_cdc::config::position_topic(&prefix)],
        1,
    )
    .await?;
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        RelayConfig {
            status_interval_ms: 100,
            ..scratch.relay_config(slot.to_owned(), prefix.clone(), brokers)
        },
        std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default()),
        shutdown.clone(),
    ));
    let worker_tasks = (0..workers.count.max(1))
        .map(|_| {
            let mut config = WorkerConfig {
                database_url: scratch.url.as_str().into(),
                kafka: [(BOOTSTRAP_SERVERS.to_owned(), brokers.to_owned())].into(),
                topic: format!("{prefix}reassignment"),
                group_id: format!("{prefix}workers"),
                metrics_listen: None,
                continue_chain: workers.continue_chain,
                ..WorkerConfig::default()
            };
            // Kafka security from the environment, as every tool.
            let mut kafka = config.kafka_settings();
            kafka.apply_env();
            (config.kafka, config.kafka_secret_files) = (kafka.properties, kafka.secret_files);
            let metrics = std::sync::Arc::new(WorkerMetrics::default());
            tokio::spawn(ra_ledger::worker::run(config, metrics, shutdown.clone()))
        })
        .collect();
    Ok((relay, worker_tasks))
}

/// A background task of the benchmark.
type Task<E> = tokio::task::JoinHandle<Result<(), E>>;

/// The ledger of the scratch database, and the steps both approaches share.
struct Bench {
    ledger: Ledger,
    pool: Pool,
    metadata: Metadata,
    rows: usize,
    page_size: u32,
}

impl Bench {
    fn new(scratch: &ScratchDatabase, rows: usize, page_size: u32) -> anyhow::Result<Self> {
        let pool = db::pool(&scratch.url, "ledger-bench", 4)?;
        Ok(Self {
            ledger: Ledger::new(pool.clone()),
            pool,
            metadata: Metadata {
                actor: "bench".into(),
                correlation_id: Uuid::now_v7(),
                causation_id: None,
                traceparent: None,
            },
            rows,
            page_size,
        })
    }

    /// The first primary contact of `code`.
    async fn contact(&self, code: &str) -> anyhow::Result<Uuid> {
        let contact = CreateContact {
            jurisdiction: code.into(),
            name: format!("{code} office"),
            address: texas_address(),
            effective_at: None,
        };
        Ok(self
            .ledger
            .create_contact(contact, &self.metadata)
            .await?
            .contact_id)
    }

    async fn supersede(&self, contact_id: Uuid) -> anyhow::Result<Superseded> {
        let command = SupersedeContact {
            name: "New office".into(),
            address: texas_address(),
            effective_at: None,
            expected_version: None,
            page_size: Some(self.page_size),
        };
        Ok(self
            .ledger
            .supersede_contact(contact_id, command, &self.metadata)
            .await?)
    }

    /// Seeds the benchmark's rows onto `contact_id` in `code`.
    async fn seed(&self, code: &str, contact_id: Uuid) -> anyhow::Result<()> {
        let started = Instant::now();
        let jurisdiction = Jurisdiction::parse("jurisdiction", code)?;
        ra_ledger_testing::seed_assignments(
            &self.pool,
            jurisdiction,
            contact_id,
            self.rows,
            5_000,
            |_| {},
        )
        .await?;
        eprintln!(
            "seeded {} active assignments in {code} in {:.1} s",
            self.rows,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Polls a run until it completes.
    async fn wait_run(&self, run_id: Uuid) -> anyhow::Result<RunStatus> {
        let client = self.pool.get().await?;
        let deadline = Instant::now() + Duration::from_secs(1800);
        loop {
            let status = reassign::status(&client, run_id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("run {run_id} vanished"))?;
            if status.status == RunState::Completed {
                return Ok(status);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "run {run_id} did not complete: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until the relay confirmed everything written so far.
async fn wait_for_relay(client: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let target: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    loop {
        let caught_up: bool = client
            .query_one(
                "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_replication_slots \
                 WHERE slot_name = $1",
                &[&slot, &target],
            )
            .await?
            .get(0);
        if caught_up {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the relay did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
