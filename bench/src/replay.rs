//! `ledger-bench replay`: how fast a replay republishes the past, and what a replay running
//! beside the live relay does to its commit -> consumer latency (`ledger-bench latency`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::metrics::ReplayMetrics;
use ra_ledger::replay::run::{self, Outcome};
use ra_ledger::replay::{self, ReplayRequest};
use ra_ledger_cdc::infra::kafka::KafkaSettings;
use tokio_util::sync::CancellationToken;

use crate::seed::bench_contact;
use crate::{latency, scratch};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Events in the ledger to replay.
    pub events: usize,
    /// The replay's rate while the latency is measured beside it.
    pub rate: u32,
    /// The live load of the latency measurement, events/s.
    pub latency_rate: u64,
    /// Seconds of each latency measurement.
    pub seconds: u64,
}

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    let scratch = scratch::database(database_url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 4)?;
    let ledger = ra_ledger::commands::Ledger::new(pool.clone());
    let (_, contact) = bench_contact(&ledger).await?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    eprintln!("seeding {} assignments…", options.events);
    ra_ledger_testing::seed_assignments(
        &pool,
        texas,
        contact.contact_id,
        options.events,
        1_000,
        |_| {},
    )
    .await?;
    let prefix = scratch::topic_prefix(brokers, "replay");
    ra_ledger_testing::create_topics(brokers, &[format!("{prefix}assignment")], 3).await?;
    let kafka = KafkaSettings::from_env(brokers)?;

    // 1. The replay alone, as fast as the broker takes it.
    let (published, elapsed, _) = replay_once(&pool, &kafka, &prefix, 1_000_000, None).await?;
    outln!(
        "replay alone, unthrottled: {published} events in {:.1} s = {:.0} events/s",
        elapsed.as_secs_f64(),
        published as f64 / elapsed.as_secs_f64()
    );

    // 2. The live path's latency alone, then beside a replay at --rate.
    let alone = latency::measure(
        database_url,
        brokers,
        options.latency_rate,
        options.seconds,
        latency::Variant::of(ra_ledger_cdc::config::DeliveryMode::AtLeastOnce),
    )
    .await?;
    outln!(
        "latency at {} events/s, alone: {}",
        options.latency_rate,
        alone.latencies
    );
    let stop = CancellationToken::new();
    let beside = {
        let (pool, kafka, prefix, stop) =
            (pool.clone(), kafka.clone(), prefix.clone(), stop.clone());
        tokio::spawn(
            async move { replay_once(&pool, &kafka, &prefix, options.rate, Some(stop)).await },
        )
    };
    let during = latency::measure(
        database_url,
        brokers,
        options.latency_rate,
        options.seconds,
        latency::Variant::of(ra_ledger_cdc::config::DeliveryMode::AtLeastOnce),
    )
    .await?;
    stop.cancel();
    let (published, elapsed, outcome) = beside.await??;
    outln!(
        "latency at {} events/s, beside a replay at --rate {}: {} (the replay published {published} events in {:.1} s = {:.0} events/s, {outcome:?})",
        options.latency_rate,
        options.rate,
        during.latencies,
        elapsed.as_secs_f64(),
        published as f64 / elapsed.as_secs_f64()
    );
    pool.close();
    scratch.drop().await?;
    Ok(())
}

/// Records and runs one replay of the assignments at `rate` until it completes or `stop`.
async fn replay_once(
    pool: &deadpool_postgres::Pool,
    kafka: &KafkaSettings,
    prefix: &str,
    rate: u32,
    stop: Option<CancellationToken>,
) -> anyhow::Result<(i64, Duration, Outcome)> {
    let mut selection = ReplayRequest {
        aggregate_types: Some(vec!["assignment".into()]),
        rate: Some(rate.min(replay::MAX_RATE)),
        topic_prefix: Some(prefix.to_owned()),
        ..Default::default()
    }
    .validate()?;
    // Past the cap requests are held to: the benchmark measures what the cap is chosen from
    // (the replay alone, unthrottled).
    selection.rate = rate;
    let id = replay::request(&mut pool.get().await?, &selection, "bench").await?;
    let started = Instant::now();
    let metrics = Arc::new(ReplayMetrics::default());
    let stop = stop.unwrap_or_default();
    let mut published = 0;
    let outcome = run::run(pool, kafka, None, id, &metrics, &stop, &mut |progress| {
        published = progress.published;
    })
    .await?;
    Ok((published, started.elapsed(), outcome))
}
