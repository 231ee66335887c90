//! `ledger-bench digest`: the cost of sealing a digest over many streams when few changed,
//! of the first (full) digest, and of a proof at that size; the index's share of a digest
//! (issue 56: its entries moved and its root, in memory), and a complete proven answer at
//! that size (a business written through the ledger among the seeded streams): its bytes
//! and its offline check in Rust and in `tests/verify_digest.py`.

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
    python_verifier: &std::path::Path,
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
    let median = incremental[incremental.len() / 2];
    outln!(
        "incremental digest ({changed} of {streams} changed): median {:.0} ms over {rounds} round(s)",
        median.as_secs_f64() * 1e3
    );
    index_share(&cache, changed, median)?;
    complete_proof(&builder, &key, streams, python_verifier).await?;
    Ok(())
}

/// What the index adds to a digest with `changed` streams moved: its entries moved past one
/// event each and its root, in memory, timed apart, against the incremental digest's
/// `median` (which includes it).
fn index_share(cache: &TreeCache, changed: u64, median: Duration) -> anyhow::Result<()> {
    let tree = cache
        .newest()
        .ok_or_else(|| anyhow::anyhow!("no digest in memory"))?;
    let index = tree.index().clone();
    let entries = index.entries();
    let stride = (entries.len() / changed.max(1) as usize).max(1);
    let next = tree.log().size();
    let moved: Vec<(u64, String, u64, [u8; 32])> = entries
        .iter()
        .step_by(stride)
        .take(changed as usize)
        .enumerate()
        .map(|(i, entry)| {
            (
                next + i as u64,
                entry.stream.clone(),
                entry.version + 1,
                [7; 32],
            )
        })
        .collect();
    let started = Instant::now();
    let moved = index
        .extended(moved.iter().map(|(p, s, v, h)| (*p, s.as_str(), *v, *h)))
        .map_err(anyhow::Error::msg)?;
    let leaf = moved.leaf(0, 0);
    let took = started.elapsed();
    outln!(
        "the index per digest ({changed} of {} entries moved, root {}…): {:.0} ms, {:.1}% of the incremental digest's median {:.0} ms",
        leaf.entries,
        &ra_ledger::hex::hex(&leaf.root)[..8],
        took.as_secs_f64() * 1e3,
        100.0 * took.as_secs_f64() / median.as_secs_f64(),
        median.as_secs_f64() * 1e3
    );
    Ok(())
}

/// A business written through the ledger among the seeded streams, sealed, and the proof of
/// its RA: its size, and its offline check (Rust, in this process; Python, `verifier` in a
/// process of its own, when it is there).
async fn complete_proof(
    builder: &Builder<'_>,
    key: &DigestKey,
    streams: u64,
    verifier: &std::path::Path,
) -> anyhow::Result<()> {
    use ra_ledger::digest::verify::{ClaimedProof, verify, verify_log};
    let ledger = ra_ledger::commands::Ledger::new(builder.pool.clone());
    let (metadata, _) = crate::seed::bench_contact(&ledger).await?;
    let business = uuid::Uuid::now_v7();
    ledger
        .assign(
            ra_ledger::commands::Assign {
                business_id: business,
                jurisdiction: "TX".into(),
                effective_at: None,
            },
            &metadata,
        )
        .await?;
    builder.build().await?;
    let (_, proof) = ra_ledger::digest::prove::for_answer(
        builder.pool,
        builder.cache,
        business,
        ra_ledger::domain::Jurisdiction::parse("jurisdiction", "TX").map_err(anyhow::Error::msg)?,
        chrono::Utc::now(),
        None,
    )
    .await?;
    let json = serde_json::to_vec(&proof)?;
    let document: serde_json::Value = serde_json::from_slice(&json)?;
    let public = key.public();
    let check = || -> anyhow::Result<()> {
        let claimed = ClaimedProof::from_json(&document).map_err(|e| anyhow::anyhow!("{e}"))?;
        verify(&claimed, &public).map_err(|e| anyhow::anyhow!("{e}"))?;
        verify_log(&claimed, &public, None, &[]).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    };
    let runs = 200;
    let started = Instant::now();
    for _ in 0..runs {
        check()?;
    }
    let rust = started.elapsed() / runs;
    outln!(
        "a complete proven answer at {streams}+ streams ({} streams proven, log of {} leaves): {} bytes of JSON ({} pretty-printed); offline check in Rust {:.2} ms (mean of {runs})",
        proof.streams.len(),
        proof
            .log
            .as_ref()
            .and_then(|log| log.checkpoint.lines().nth(1))
            .unwrap_or("?"),
        json.len(),
        serde_json::to_vec_pretty(&proof)?.len(),
        rust.as_secs_f64() * 1e3
    );
    let part = |pointer: &str| {
        document
            .pointer(pointer)
            .map_or(0, |value| value.to_string().len())
    };
    let paths: usize = (0..proof.streams.len())
        .map(|i| part(&format!("/streams/{i}/path")))
        .sum();
    let events: usize = (0..proof.streams.len())
        .map(|i| part(&format!("/streams/{i}/events")))
        .sum();
    outln!(
        "  of which: events {events}, the digest tree's paths {paths}, the log's heads {}, the index part {}, the digest {}, the question and answer {}",
        part("/log/heads"),
        part("/log/index"),
        part("/digest"),
        part("/question") + part("/answer")
    );
    if !verifier.exists() {
        outln!(
            "the Python verifier: not timed ({} is not there: run from the checkout's root, or give --python-verifier)",
            verifier.display()
        );
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("ledger-bench-proof-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("proof.json"), &json)?;
    std::fs::write(dir.join("public.pem"), key.public_pem())?;
    let started = Instant::now();
    let output = std::process::Command::new("python3")
        .arg(verifier)
        .arg(dir.join("proof.json"))
        .arg("--public-key")
        .arg(dir.join("public.pem"))
        .output()?;
    let python = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(
        output.status.success(),
        "the Python verifier refused the proof: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    outln!(
        "offline check in Python ({}, one process, its start included): {:.0} ms",
        verifier.display(),
        python.as_secs_f64() * 1e3
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
            "proof of one event at {streams} streams, {how}: {:.0} ms ({} path nodes, {} bytes of JSON)",
            started.elapsed().as_secs_f64() * 1e3,
            proof.streams[0].path.len(),
            serde_json::to_vec(&proof)?.len(),
        );
    }
    Ok(())
}
