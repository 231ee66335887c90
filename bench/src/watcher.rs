//! `ledger-bench watcher`: what the end-to-end watcher ([`ra_ledger::watcher`]) costs the
//! write path and the relay. In one scratch database, with one relay streaming, phases
//! alternate without and with the watcher (off, on, off, on, ...: the same run, so the
//! machine's load falls on both alike). Each phase writes `events` assignments through the
//! ledger's write path as fast as one writer goes, then waits until the relay published
//! them all (after one such phase unmeasured, to warm up); a phase with the watcher also waits until it proved them all (nothing
//! missing). Per phase: the writes per second, the relay's events per second from the
//! phase's first write to its last publish, and the CPU each event cost the machine's
//! processes that did the work (this one: writer, relay and watcher; the PostgreSQL server
//! with its backends; the Kafka broker), from the first write to the last publish, or to
//! the watcher's proof when it runs ([`crate::cpu`]), less what they spend idle (measured
//! once, after the warm-up). The summary compares the medians. On
//! a shared machine the CPU figure is the one to read: the throughputs move with whatever
//! else runs, the CPU seconds of these processes do not.

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

/// One phase's figures: writes per second, relay events per second, CPU microseconds per
/// event.
type Phase = (f64, f64, f64);

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
    let meter = meter(&client, brokers).await?;
    let bench = Bench {
        meter,
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
    meter: crate::cpu::Meter,
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
            "{:>5} {:>8} {:>10} {:>14} {:>13}",
            "round",
            "watcher",
            "writes/s",
            "relay events/s",
            "CPU µs/event"
        );
        // A first phase unmeasured: the relay's producer connects, PostgreSQL warms up.
        self.phase(false, 0.0).await?;
        let idle = self.idle().await?;
        outln!(
            "idle: {idle:.3} cores for these processes, taken out of each phase's CPU for its length"
        );
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 1..=self.options.rounds {
            for watching in [false, true] {
                anyhow::ensure!(!relay_stopped(), "the relay stopped early");
                let phase = self.phase(watching, idle).await?;
                outln!(
                    "{round:>5} {:>8} {:>10.0} {:>14.0} {:>13.1}",
                    if watching { "on" } else { "off" },
                    phase.0,
                    phase.1,
                    phase.2
                );
                if watching { &mut on } else { &mut off }.push(phase);
            }
        }
        Ok((off, on))
    }

    /// The CPU the metered processes spend with nothing to do, in cores: what a phase
    /// spends beyond it is its events' (a phase with the watcher lasts longer, until the
    /// watcher proved every event, and that wait is not the watcher's work).
    async fn idle(&self) -> anyhow::Result<f64> {
        let (cpu, started) = (self.meter.seconds()?, Instant::now());
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok((self.meter.seconds()? - cpu) / started.elapsed().as_secs_f64())
    }

    /// One phase, with the watcher running when `watching`; `idle` cores are taken out of
    /// its CPU.
    async fn phase(&self, watching: bool, idle: f64) -> anyhow::Result<Phase> {
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
        let (cpu, started) = (self.meter.seconds()?, Instant::now());
        let (writes, relayed) =
            phase(write, &self.relay_metrics, self.options.events as u64).await?;
        if let Some((metrics, stop, task)) = watcher {
            proved(&self.client, &metrics).await?;
            stop.cancel();
            task.await?;
        }
        let spent = self.meter.seconds()? - cpu - idle * started.elapsed().as_secs_f64();
        let cpu = spent / self.options.events as f64 * 1e6;
        Ok((writes, relayed, cpu))
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
) -> anyhow::Result<(f64, f64)> {
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
        let mut cpu: Vec<f64> = phases.iter().map(|p| p.2).collect();
        (median(&mut writes), median(&mut relay), median(&mut cpu))
    };
    let (off_writes, off_relay, off_cpu) = medians(off);
    let (on_writes, on_relay, on_cpu) = medians(on);
    let cost = |without: f64, with: f64| (without - with) / without * 100.0;
    outln!(
        "median writes/s: {off_writes:.0} without, {on_writes:.0} with the watcher ({:+.1}% cost)",
        cost(off_writes, on_writes)
    );
    outln!(
        "median relay events/s: {off_relay:.0} without, {on_relay:.0} with the watcher ({:+.1}% cost)",
        cost(off_relay, on_relay)
    );
    outln!(
        "median CPU per event: {off_cpu:.1} µs without, {on_cpu:.1} µs with the watcher ({:+.1}% cost)",
        (on_cpu - off_cpu) / off_cpu * 100.0
    );
}

/// What the phases' CPU is read from: this process, and the PostgreSQL server and Kafka
/// broker when they run on this machine (each named on stdout, or why it is left out).
async fn meter(
    client: &tokio_postgres::Client,
    brokers: &str,
) -> anyhow::Result<crate::cpu::Meter> {
    let mut meter = crate::cpu::Meter::default().process(std::process::id());
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    match u32::try_from(backend)
        .map_err(anyhow::Error::from)
        .and_then(crate::cpu::parent)
    {
        Ok(postmaster) => {
            outln!(
                "CPU counted: this process, PostgreSQL (postmaster {postmaster} and its backends)"
            );
            meter = meter.tree(postmaster);
        }
        Err(_) => outln!("CPU counted: not PostgreSQL's (not on this machine)"),
    }
    let port = brokers
        .split(',')
        .next()
        .and_then(|broker| broker.rsplit_once(':'))
        .and_then(|(_, port)| port.parse::<u16>().ok());
    match port.and_then(crate::cpu::listening_on) {
        Some(pid) => {
            outln!("CPU counted: the Kafka broker (process {pid})");
            meter = meter.process(pid);
        }
        None => outln!("CPU counted: not the Kafka broker's (not found on this machine)"),
    }
    Ok(meter)
}
