//! `ledger bench digest`: the cost of sealing a digest over many streams when few changed,
//! of the first (full) digest, and of a proof at that size.

use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, TreeCache, build_cached};

use super::scratch;

/// The default interval the figures are compared with (`digest_interval_ms`).
const INTERVAL: Duration = Duration::from_secs(60);

pub async fn run(
    database_url: &str,
    streams: u64,
    changed: u64,
    rounds: usize,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=streams).contains(&changed),
        "--changed {changed} must be between 1 and --streams {streams}"
    );
    anyhow::ensure!(rounds >= 1, "--rounds must be at least 1");
    let scratch = scratch(database_url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 2)?;
    let client = pool.get().await?;
    eprintln!("seeding {streams} streams, one event each…");
    let started = Instant::now();
    client
        .execute(
            include_str!("../../sql/bench/digest_streams.sql"),
            &[&(streams as i64)],
        )
        .await?;
    client.batch_execute("VACUUM ANALYZE events").await?;
    eprintln!("seeded in {:.1} s", started.elapsed().as_secs_f64());
    let key = DigestKey::from_seed(&rand::random());
    let now = || chrono::Utc::now().timestamp_micros();

    // As `ledger serve` does: the tree stays in memory between digests.
    let cache = TreeCache::default();
    let started = Instant::now();
    let first = build_cached(&pool, &key, now(), &cache).await?;
    let full = started.elapsed();
    let Built::Sealed { changed: read, .. } = first else {
        anyhow::bail!("the first digest was not sealed: {first:?}");
    };
    client.batch_execute("VACUUM ANALYZE digest_leaves").await?;
    println!(
        "first digest, every stream read: {read} streams in {:.2} s ({:.1}% of the {} s interval)",
        full.as_secs_f64(),
        100.0 * full.as_secs_f64() / INTERVAL.as_secs_f64(),
        INTERVAL.as_secs()
    );
    let mut incremental = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        client
            .execute(
                include_str!("../../sql/bench/digest_changes.sql"),
                &[&(changed as i64)],
            )
            .await?;
        let started = Instant::now();
        let built = build_cached(&pool, &key, now(), &cache).await?;
        let took = started.elapsed();
        let Built::Sealed {
            changed: read,
            digest,
            ..
        } = built
        else {
            anyhow::bail!("round {round}: no digest sealed: {built:?}");
        };
        anyhow::ensure!(
            read as u64 == changed && digest.statement.stream_count == streams,
            "round {round}: read {read} streams of {} (expected {changed} of {streams})",
            digest.statement.stream_count
        );
        println!(
            "digest {}: {changed} of {streams} streams changed, sealed in {:.0} ms ({:.2}% of the {} s interval)",
            round + 1,
            took.as_secs_f64() * 1e3,
            100.0 * took.as_secs_f64() / INTERVAL.as_secs_f64(),
            INTERVAL.as_secs()
        );
        incremental.push(took);
    }
    let started = Instant::now();
    let unchanged = build_cached(&pool, &key, now(), &cache).await?;
    println!(
        "nothing changed: {:?} in {:.1} ms",
        unchanged,
        started.elapsed().as_secs_f64() * 1e3
    );
    let event: uuid::Uuid = client
        .query_one("SELECT event_id FROM events ORDER BY random() LIMIT 1", &[])
        .await?
        .get(0);
    for (how, tree) in [
        ("reading every leaf", TreeCache::default()),
        ("from the builder's tree", cache.clone()),
    ] {
        let started = Instant::now();
        let proof = ra_ledger::digest::prove::for_event(&pool, event, &tree).await?;
        // (Not verified: the seeded events carry random hashes, not real chains.)
        println!(
            "proof of one event at {streams} streams, {how}: {:.0} ms ({} path nodes)",
            started.elapsed().as_secs_f64() * 1e3,
            proof.streams[0].path.len(),
        );
    }
    incremental.sort();
    println!(
        "incremental digest ({changed} of {streams} changed): median {:.0} ms over {rounds} round(s)",
        incremental[incremental.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}
