//! `ledger-bench watcher`: what the end-to-end watcher ([`ra_ledger::watcher`]) costs the
//! write path and the relay. In one scratch database, with one relay streaming, phases
//! alternate without and with the watcher (off, on, off, on, ...: the same run, so the
//! machine's load falls on both alike). Each phase writes `events` assignments through the
//! ledger's write path as fast as one writer goes, then waits until the relay published
//! them all (after one such phase unmeasured, to warm up); a phase with the watcher also waits until it proved them all (nothing
//! missing). Per phase: the writes per second, and the relay's events per second from the
//! phase's first write to its last publish. The summary compares the medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ra_ledger::commands::Ledger;
use ra_ledger::watcher::metrics::WatcherMetrics;
use ra_ledger::{db, watcher};
use ra_ledger_cdc::metrics::RelayMetrics;
use tokio_util::sync::CancellationToken;

use crate::{scratch, seed};

/// The benchmark's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Assignments written per phase.
    pub events: usize,
    /// Rows per transaction.
    pub per_transaction: usize,
    /// Pairs of phases (without, then with the watcher).
    pub rounds: usize,
}

/// One phase's figures: writes per second, relay events per second.
type Phase = (f64, f64);

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    if options.events == 0 || options.per_transaction == 0 || options.rounds == 0 {
        anyhow::bail!("--events, --per-transaction and --rounds must be at least 1");
    }
    let scratch = scratch::database(database_url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "relay").await?;
    let prefix = scratch::topic_prefix(brokers, "watch");
    let topics: Vec<String> = ra_ledger::reconcile::EVENT_AGGREGATES
        .iter()
        .map(|aggregate| format!("{prefix}{aggregate}"))
        .collect();
    ra_ledger_testing::create_topics(brokers, &topics, 3).await?;
    ra_ledger_testing::create_topics(
        brokers,
        &[ra_ledger_cdc::config::position_topic(&prefix)],
        1,
    )
    .await?;
    let relay_config = scratch.relay_config(slot, prefix, brokers);
    let relay_metrics = Arc::new(RelayMetrics::default());
    let shutdown = CancellationToken::new();
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config.clone(),
        Arc::clone(&relay_metrics),
        shutdown.clone(),
    ));
    let pool = db::pool(&scratch.url, "ledger-bench-writes", 2)?;
    let (_, contact) = seed::bench_contact(&Ledger::new(pool.clone())).await?;
    let bench = Bench {
        url: scratch.url.to_string(),
        pool,
        client,
        relay: relay_config,
        relay_metrics,
        texas: ra_ledger::domain::Jurisdiction::parse("jurisdiction", "TX")?,
        contact: contact.contact_id,
        options,
    };
    let measured = bench.measure(|| relay.is_finished()).await;
    shutdown.cancel();
    relay.await??;
    let (off, on) = measured?;
    summary(&off, &on);
    drop(bench);
    scratch.drop().await?;
    Ok(())
}

/// What the phases share.
struct Bench {
    url: String,
    pool: deadpool_postgres::Pool,
    client: tokio_postgres::Client,
    relay: ra_ledger_cdc::config::RelayConfig,
    relay_metrics: Arc<RelayMetrics>,
    texas: ra_ledger::domain::Jurisdiction,
    contact: uuid::Uuid,
    options: Options,
}

impl Bench {
    /// The warm-up, then the phases without and with the watcher, printed as they end.
    async fn measure(
        &self,
        relay_stopped: impl Fn() -> bool,
    ) -> anyhow::Result<(Vec<Phase>, Vec<Phase>)> {
        outln!(
            "{} assignments per phase, {} per transaction; phases without and with the watcher, alternating",
            self.options.events,
            self.options.per_transaction
        );
        outln!(
            "{:>5} {:>8} {:>10} {:>14}",
            "round",
            "watcher",
            "writes/s",
            "relay events/s"
        );
        // A first phase unmeasured: the relay's producer connects, PostgreSQL warms up.
        self.phase(false).await?;
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 1..=self.options.rounds {
            for watching in [false, true] {
                anyhow::ensure!(!relay_stopped(), "the relay stopped early");
                let phase = self.phase(watching).await?;
                outln!(
                    "{round:>5} {:>8} {:>10.0} {:>14.0}",
                    if watching { "on" } else { "off" },
                    phase.0,
                    phase.1
                );
                if watching { &mut on } else { &mut off }.push(phase);
            }
        }
        Ok((off, on))
    }

    /// One phase, with the watcher running when `watching`.
    async fn phase(&self, watching: bool) -> anyhow::Result<Phase> {
        let watcher = match watching {
            true => Some(start_watcher(&self.url, &self.relay)?),
            false => None,
        };
        let write = async {
            ra_ledger_testing::seed_assignments(
                &self.pool,
                self.texas,
                self.contact,
                self.options.events,
                self.options.per_transaction,
                |_| {},
            )
            .await
            .map(drop)
            .map_err(anyhow::Error::from)
        };
        let phase = phase(write, &self.relay_metrics, self.options.events as u64).await?;
        if let Some((metrics, stop, task)) = watcher {
            proved(&self.client, &metrics).await?;
            stop.cancel();
            task.await?;
        }
        Ok(phase)
    }
}

/// A watcher as `ledger serve` runs it, at its defaults.
fn start_watcher(
    url: &str,
    relay: &ra_ledger_cdc::config::RelayConfig,
) -> anyhow::Result<(
    Arc<WatcherMetrics>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    let pool = db::pool(url, "ledger-bench-watcher", 3)?;
    let metrics = Arc::new(WatcherMetrics::default());
    let stop = CancellationToken::new();
    let settings = watcher::Settings {
        relay: relay.clone(),
        lag_bound: watcher::DEFAULT_LAG_BOUND,
        interval: watcher::DEFAULT_INTERVAL,
        window: watcher::DEFAULT_WINDOW,
    };
    let task = tokio::spawn(watcher::run(
        pool,
        settings,
        Arc::clone(&metrics),
        stop.clone(),
    ));
    Ok((metrics, stop, task))
}

/// Runs `write`, then waits until the relay published `events` more: the phase's figures.
async fn phase(
    write: impl Future<Output = anyhow::Result<()>>,
    relay: &RelayMetrics,
    events: u64,
) -> anyhow::Result<Phase> {
    let published = relay.events_published();
    let started = Instant::now();
    write.await?;
    let written = started.elapsed().as_secs_f64();
    while relay.events_published() < published + events {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the relay did not publish the phase's events within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let relayed = started.elapsed().as_secs_f64();
    Ok((events as f64 / written, events as f64 / relayed))
}

/// Waits until the watcher proved every event written, and says so; a missing one fails
/// the run.
async fn proved(client: &tokio_postgres::Client, metrics: &WatcherMetrics) -> anyhow::Result<()> {
    let last: i64 = client
        .query_one("SELECT coalesce(max(position), 0) FROM events", &[])
        .await?
        .get(0);
    let started = Instant::now();
    loop {
        if let Some(gauges) = metrics.last().filter(|g| g.watermark >= last) {
            anyhow::ensure!(
                gauges.missing == 0,
                "the watcher found events missing: {gauges:?}"
            );
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the watcher did not reach position {last} within 5 minutes: {:?}",
            metrics.last()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of `values` (the mean of the middle two when even); 0 when empty.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn summary(off: &[Phase], on: &[Phase]) {
    let medians = |phases: &[Phase]| {
        let mut writes: Vec<f64> = phases.iter().map(|p| p.0).collect();
        let mut relay: Vec<f64> = phases.iter().map(|p| p.1).collect();
        (median(&mut writes), median(&mut relay))
    };
    let (off_writes, off_relay) = medians(off);
    let (on_writes, on_relay) = medians(on);
    let cost = |without: f64, with: f64| (without - with) / without * 100.0;
    outln!(
        "median writes/s: {off_writes:.0} without, {on_writes:.0} with the watcher ({:+.1}% cost)",
        cost(off_writes, on_writes)
    );
    outln!(
        "median relay events/s: {off_relay:.0} without, {on_relay:.0} with the watcher ({:+.1}% cost)",
        cost(off_relay, on_relay)
    );
}
