//! `ledger-bench digest`: the cost of sealing a digest over many streams when few changed,
//! of the first (full) digest, and of a proof at that size.

use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::log::TreeCache;

use crate::scratch;

/// The default interval the figures are compared with (`digest_interval_ms`).
const INTERVAL: Duration = Duration::from_secs(60);

/// Seeds `streams` streams, then times the first digest, `rounds` digests with `changed`
/// streams changed before each, one with nothing changed, and a proof of one event.
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
    let scratch = scratch::database(database_url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 2)?;
    let client = pool.get().await?;
    seed(&client, streams).await?;
    let key = DigestKey::from_seed(&rand::random());
    // As `ledger serve` does: the tree stays in memory between digests.
    let cache = TreeCache::default();
    let builder = Builder {
        pool: &pool,
        key: &key,
        cache: &cache,
    };
    first_digest(&builder, &client).await?;
    let mut incremental = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        incremental.push(incremental_digest(&builder, &client, round, streams, changed).await?);
    }
    nothing_changed(&builder).await?;
    print_proofs(&pool, &client, &cache, streams).await?;
    incremental.sort();
    outln!(
        "incremental digest ({changed} of {streams} changed): median {:.0} ms over {rounds} round(s)",
        incremental[incremental.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}

/// One event in each of `streams` streams, vacuumed, so that every digest reads a ledger in
/// its steady state.
async fn seed(client: &tokio_postgres::Client, streams: u64) -> anyhow::Result<()> {
    eprintln!("seeding {streams} streams, one event each…");
    let started = Instant::now();
    client
        .execute(include_str!("sql/digest_streams.sql"), &[&(streams as i64)])
        .await?;
    client.batch_execute("VACUUM ANALYZE events").await?;
    eprintln!("seeded in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// What every digest of the run is built with: one key and one tree kept between digests.
struct Builder<'a> {
    pool: &'a deadpool_postgres::Pool,
    key: &'a DigestKey,
    cache: &'a TreeCache,
}

impl Builder<'_> {
    /// A digest as of now, and how long it took.
    async fn build(&self) -> anyhow::Result<(Built, Duration)> {
        let started = Instant::now();
        let built = build_cached(self.pool, self.key, self.cache).await?;
        Ok((built, started.elapsed()))
    }
}

/// The first digest reads every stream: the cost a fresh `ledger serve` pays once.
async fn first_digest(
    builder: &Builder<'_>,
    client: &tokio_postgres::Client,
) -> anyhow::Result<()> {
    let (first, full) = builder.build().await?;
    let Built::Sealed { changed: read, .. } = first else {
        anyhow::bail!("the first digest was not sealed: {first:?}");
    };
    client.batch_execute("VACUUM ANALYZE digest_leaves").await?;
    outln!(
        "first digest, every stream read: {read} streams in {:.2} s ({:.1}% of the {} s interval)",
        full.as_secs_f64(),
        100.0 * full.as_secs_f64() / INTERVAL.as_secs_f64(),
        INTERVAL.as_secs()
    );
    Ok(())
}

/// Round `round`: `changed` streams changed, then a digest that must read exactly those, so
/// that the time printed is the incremental cost and not a full rebuild in disguise.
async fn incremental_digest(
    builder: &Builder<'_>,
    client: &tokio_postgres::Client,
    round: usize,
    streams: u64,
    changed: u64,
) -> anyhow::Result<Duration> {
    client
        .execute(include_str!("sql/digest_changes.sql"), &[&(changed as i64)])
        .await?;
    let (built, took) = builder.build().await?;
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
    outln!(
        "digest {}: {changed} of {streams} streams changed, sealed in {:.0} ms ({:.2}% of the {} s interval)",
        round + 1,
        took.as_secs_f64() * 1e3,
        100.0 * took.as_secs_f64() / INTERVAL.as_secs_f64(),
        INTERVAL.as_secs()
    );
    Ok(took)
}

/// A digest with nothing changed since the last: what most intervals cost.
async fn nothing_changed(builder: &Builder<'_>) -> anyhow::Result<()> {
    let (unchanged, took) = builder.build().await?;
    outln!(
        "nothing changed: {:?} in {:.1} ms",
        unchanged,
        took.as_secs_f64() * 1e3
    );
    Ok(())
}

/// A proof of one random event at this size, without the tree and from the builder's: what
/// a proof costs a process that has not built a digest yet, and one that has.
async fn print_proofs(
    pool: &deadpool_postgres::Pool,
    client: &tokio_postgres::Client,
    cache: &TreeCache,
    streams: u64,
) -> anyhow::Result<()> {
    let event: uuid::Uuid = client
        .query_one("SELECT event_id FROM events ORDER BY random() LIMIT 1", &[])
        .await?
        .get(0);
    for (how, tree) in [
        ("reading every leaf", TreeCache::default()),
        ("from the builder's tree", cache.clone()),
    ] {
        let started = Instant::now();
        let proof = ra_ledger::digest::prove::for_event(pool, event, &tree).await?;
        // (Not verified: the seeded events carry random hashes, not real chains.)
        outln!(
            "proof of one event at {streams} streams, {how}: {:.0} ms ({} path nodes)",
            started.elapsed().as_secs_f64() * 1e3,
            proof.streams[0].path.len(),
        );
    }
    Ok(())
}
