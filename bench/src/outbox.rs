//! `ledger-bench outbox`: the outbox's rows and size on disk while a long stream of events
//! flows through the relay and retention removes what the slot confirmed. It should stay
//! flat: bounded by the relay's lag, not by the number of events ever written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ra_ledger::{db, retention};
use ra_ledger_cdc::metrics::RelayMetrics;
use tokio_util::sync::CancellationToken;

use crate::scratch;

/// The benchmark's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events written in all.
    pub events: u64,
    /// Rows per transaction.
    pub per_transaction: u64,
    /// Most events written but not yet published: the writer waits above it, so the run
    /// measures retention, not a broker slower than PostgreSQL.
    pub max_unpublished: u64,
    /// Time between retention rounds.
    pub retention_interval: Duration,
    /// Events written per second at most; 0: as fast as `max_unpublished` lets the writer go.
    pub rate: u64,
}

/// How long the drain may take before the run says the outbox did not empty.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    if options.events == 0 || options.per_transaction == 0 || options.max_unpublished == 0 {
        anyhow::bail!("--events, --per-transaction and --max-unpublished must be at least 1");
    }
    let scratch = scratch::database(database_url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "relay").await?;
    let prefix = scratch::topic_prefix(brokers, "");
    ra_ledger_testing::create_topics(brokers, &[format!("{prefix}assignment")], 3).await?;
    ra_ledger_testing::create_topics(
        brokers,
        &[ra_ledger_cdc::config::position_topic(&prefix)],
        1,
    )
    .await?;
    let mut relay_config = scratch.relay_config(slot.clone(), prefix, brokers);
    relay_config.heartbeat_interval_ms = 1_000;

    let metrics = Arc::new(RelayMetrics::default());
    let shutdown = CancellationToken::new();
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        Arc::clone(&metrics),
        shutdown.clone(),
    ));
    let pool = db::pool(&scratch.url, "ledger-bench-retention", 1)?;
    let retention = tokio::spawn(retention::run(
        pool.clone(),
        slot,
        options.retention_interval,
        retention::DEFAULT_BATCH,
        shutdown.clone(),
    ));

    print_header(&options);
    let reporter = Reporter {
        pool,
        metrics,
        started: Instant::now(),
    };
    reporter.report(0).await?;
    let (written, largest) = write_events(&client, &options, &reporter, &relay).await?;
    while reporter.metrics.events_published() < written {
        anyhow::ensure!(!relay.is_finished(), "the relay stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The drain: retention removes the last rows once the relay recorded that Kafka holds
    // them (at most a second later) and a round passed.
    let published_at = Instant::now();
    let mut end = retention::status(&reporter.pool).await?;
    while end.rows > 0 && published_at.elapsed() < DRAIN_DEADLINE {
        anyhow::ensure!(!relay.is_finished(), "the relay stopped early");
        tokio::time::sleep(Duration::from_millis(100)).await;
        end = retention::status(&reporter.pool).await?;
    }
    let drained_in = published_at.elapsed();
    reporter.report(written).await?;
    outln!(
        "largest outbox at a report: {} rows (without retention: {written}), {:.1} MB on disk",
        largest.rows,
        largest.bytes.max(end.bytes) as f64 / 1_048_576.0
    );
    outln!(
        "after the drain: {} rows, {:.1} MB, {:.1} s after the last event was published{}",
        end.rows,
        end.bytes as f64 / 1_048_576.0,
        drained_in.as_secs_f64(),
        if end.rows > 0 {
            " (not empty: the run's deadline)"
        } else {
            ""
        }
    );
    shutdown.cancel();
    relay.await??;
    retention.await?;
    drop(client);
    scratch.drop().await?;
    Ok(())
}

/// The run's settings, and the head of its table.
fn print_header(options: &Options) {
    outln!(
        "{} events, {} per transaction, at most {} unpublished; retention every {:?}",
        options.events,
        options.per_transaction,
        options.max_unpublished,
        options.retention_interval
    );
    outln!(
        "{:>9} {:>9} {:>6} {:>11} {:>10} {:>6}",
        "written",
        "published",
        "s",
        "outbox rows",
        "outbox MB",
        "marks"
    );
}

/// Prints a row of the table: what was written and published, and the outbox's size.
struct Reporter {
    pool: deadpool_postgres::Pool,
    metrics: Arc<RelayMetrics>,
    started: Instant,
}

impl Reporter {
    async fn report(&self, written: u64) -> anyhow::Result<retention::Status> {
        let published = self.metrics.events_published();
        let status = retention::status(&self.pool).await?;
        outln!(
            "{written:>9} {published:>9} {:>6.0} {:>11} {:>10.1} {:>6}",
            self.started.elapsed().as_secs_f64(),
            status.rows,
            status.bytes as f64 / 1_048_576.0,
            status.marks
        );
        Ok(status)
    }
}

/// The largest outbox seen at a report: rows and bytes, each its own maximum.
#[derive(Debug, Default, Clone, Copy)]
struct Largest {
    rows: i64,
    bytes: i64,
}

/// Writes the run's events, never more than `max_unpublished` ahead of the relay nor
/// faster than `rate`, with a row of the table every tenth; returns how many were written
/// and the largest outbox seen meanwhile.
async fn write_events(
    client: &tokio_postgres::Client,
    options: &Options,
    reporter: &Reporter,
    relay: &tokio::task::JoinHandle<Result<(), ra_ledger_cdc::relay::RelayError>>,
) -> anyhow::Result<(u64, Largest)> {
    let mut written = 0;
    let mut next_report = options.events / 10;
    let mut largest = Largest::default();
    let started = Instant::now();
    while written < options.events {
        if options.rate > 0 {
            let due = Duration::from_secs_f64(written as f64 / options.rate as f64);
            tokio::time::sleep_until((started + due).into()).await;
        }
        anyhow::ensure!(!relay.is_finished(), "the relay stopped early");
        let published = reporter.metrics.events_published();
        if written - published.min(written) >= options.max_unpublished {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let rows = options.per_transaction.min(options.events - written);
        client
            .execute(
                include_str!("sql/outbox_rows.sql"),
                &[&(rows as i32), &"AssignmentStarted"],
            )
            .await?;
        written += rows;
        if written >= next_report {
            let status = reporter.report(written).await?;
            largest.rows = largest.rows.max(status.rows);
            largest.bytes = largest.bytes.max(status.bytes);
            next_report += options.events / 10;
        }
    }
    Ok((written, largest))
}
