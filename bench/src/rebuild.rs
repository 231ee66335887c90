//! `ledger-bench rebuild`: write latency before and during an online projection rebuild
//! over many events, and the longest stall a writer saw.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use prost::Message as _;
use ra_ledger::commands::{Assign, Ledger};
use ra_ledger::db;
use ra_ledger::domain::{Jurisdiction, assignment_stream};
use ra_ledger::rebuild::online::{OnlineOptions, OnlineReport, rebuild_online};
use ra_ledger::store::Metadata;
use ra_ledger_proto::v1;
use uuid::Uuid;

use crate::figures::Latencies;
use crate::scratch;
use crate::seed::bench_contact;

/// Events inserted per statement while seeding.
const SEED_CHUNK: usize = 10_000;

/// Seeds `events` events, rebuilds them online under a writer at `rate` assignments/s, and
/// prints the rebuild's figures, the writes' latencies and a verification of the result.
pub async fn run(
    database_url: &str,
    events: usize,
    rate: u64,
    before: Duration,
    pause_ratio: f64,
) -> anyhow::Result<()> {
    anyhow::ensure!(events >= 1, "--events must be at least 1");
    anyhow::ensure!(
        (1..=5_000).contains(&rate),
        "--rate must be between 1 and 5000"
    );
    outln!("{}", write_back_settings());
    let scratch = scratch::database(database_url).await?;
    let pool = db::pool(&scratch.url, "ledger-bench", 4)?;
    let ledger = Ledger::new(pool.clone());
    let (metadata, contact) = bench_contact(&ledger).await?;
    seed_and_build(&pool, contact.contact_id, events).await?;
    let writer = Writer {
        ledger,
        metadata,
        rate,
    };
    let run = rebuild_under_writer(&pool, writer, before, pause_ratio).await?;
    print_slowest_writes(&run);
    print_rebuild_figures(&run, pause_ratio, rate);
    print_verification(&pool).await?;
    pool.close();
    scratch.drop().await?;
    Ok(())
}

/// Seeds `events` events and builds their projections once at full speed, then vacuums: the
/// measured rebuild must start from a ledger in its steady state, not from a pile of fresh
/// rows and dead tuples the writer's first transactions would pay for.
async fn seed_and_build(
    pool: &deadpool_postgres::Pool,
    contact: Uuid,
    events: usize,
) -> anyhow::Result<()> {
    eprintln!("seeding {events} events…");
    let started = Instant::now();
    seed(pool, contact, events).await?;
    eprintln!(
        "seeded in {:.1} s; building the projections of them…",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let full_speed = OnlineOptions {
        verify_only: false,
        pause_ratio: 0.0,
        ..Default::default()
    };
    rebuild_online(pool, full_speed, |_, _, _| {}).await?;
    outln!(
        "online rebuild over {events} events with no writer: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The ledger's tables only: a database-wide VACUUM warns about every shared catalog.
    pool.get()
        .await?
        .batch_execute("VACUUM ANALYZE events, outbox, contacts, assignments")
        .await?;
    Ok(())
}

/// The writer of the measured run: a ledger, the metadata its writes carry, and its rate of
/// assignments per second.
struct Writer {
    ledger: Ledger,
    metadata: Metadata,
    rate: u64,
}

/// What the measured run saw: every write's start and latency, the rebuild's report, and
/// when and how long the rebuild ran.
struct UnderWriter {
    writes: Vec<(Instant, Duration)>,
    report: OnlineReport,
    rebuild_started: Instant,
    /// Wall-clock time too, to find a slow write's moment in the server's log.
    rebuild_started_utc: chrono::DateTime<Utc>,
    rebuild_took: Duration,
}

/// The measured run: the writer alone for `before`, then the online rebuild with the writer
/// still going, then two more seconds so that writes just after the swap are counted too.
async fn rebuild_under_writer(
    pool: &deadpool_postgres::Pool,
    writer: Writer,
    before: Duration,
    pause_ratio: f64,
) -> anyhow::Result<UnderWriter> {
    // A writer at `rate` assignments/s throughout; each write's start and latency.
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(write_at(
        writer.ledger,
        writer.metadata,
        writer.rate,
        Arc::clone(&stop),
    ));
    tokio::time::sleep(before).await;
    let rebuild_started = Instant::now();
    let rebuild_started_utc = Utc::now();
    let options = OnlineOptions {
        verify_only: false,
        pause_ratio,
        ..Default::default()
    };
    let report = rebuild_online(pool, options, |_, _, _| {}).await?;
    let rebuild_took = rebuild_started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let writes = writing.await??;
    Ok(UnderWriter {
        writes,
        report,
        rebuild_started,
        rebuild_started_utc,
        rebuild_took,
    })
}

/// The slowest writes during the rebuild next to the rebuild's own milestones, so that a
/// stall can be matched to the phase (bulk copy, a window's end, the swap) that caused it.
fn print_slowest_writes(run: &UnderWriter) {
    let UnderWriter {
        writes,
        report,
        rebuild_started,
        rebuild_started_utc,
        ..
    } = run;
    let mut slowest: Vec<(Duration, f64)> = writes
        .iter()
        .filter(|(at, _)| at >= rebuild_started)
        .map(|(at, latency)| (*latency, (*at - *rebuild_started).as_secs_f64()))
        .collect();
    slowest.sort_by_key(|(latency, _)| std::cmp::Reverse(*latency));
    outln!(
        "rebuild started at {} UTC; slowest writes during it (latency ms @ seconds after its start): {}; bulk done @ {:.1} s, window ends read @ {}, last window @ {:.1} s",
        rebuild_started_utc.format("%H:%M:%S%.3f"),
        slowest
            .iter()
            .take(8)
            .map(|(latency, at)| format!("{:.0} @ {at:.1}", latency.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(", "),
        report.bulk_done.as_secs_f64(),
        report
            .window_ends
            .iter()
            .map(|(at, took)| format!(
                "{:.1} s ({:.1} ms)",
                at.as_secs_f64(),
                took.as_secs_f64() * 1e3
            ))
            .collect::<Vec<_>>()
            .join(", "),
        report.last_window_started.as_secs_f64()
    );
}

/// The rebuild's figures, then the write latencies before it and during it: the issue's
/// target is the longest stall during.
fn print_rebuild_figures(run: &UnderWriter, pause_ratio: f64, rate: u64) {
    let (mut during, mut outside) = (Vec::new(), Vec::new());
    for &(at, latency) in &run.writes {
        // A write overlapping the rebuild at all counts as during.
        if at + latency >= run.rebuild_started && at <= run.rebuild_started + run.rebuild_took {
            during.push(latency);
        } else if at < run.rebuild_started {
            outside.push(latency);
        }
    }
    let before_figures = Latencies::from_samples(outside);
    let during_figures = Latencies::from_samples(during);
    let report = &run.report;
    outln!(
        "online rebuild (pause ratio {pause_ratio}) with a writer at {rate}/s: {:.1} s, {} events, {} catch-up window(s), {} events in the swapping transaction, locks held {:.1} ms, {} lock attempt(s) retried",
        run.rebuild_took.as_secs_f64(),
        report.events,
        report.catch_up_windows,
        report.last_window,
        report.swap_held.as_secs_f64() * 1e3,
        report.lock_retries
    );
    if let Some(figures) = before_figures {
        outln!("write latency before: {figures} ({} writes)", figures.count);
    }
    if let Some(figures) = during_figures {
        outln!(
            "write latency during: {figures} ({} writes); longest stall {:.1} ms (target < 100 ms)",
            figures.count,
            figures.max.as_secs_f64() * 1e3
        );
    }
}

/// The rebuilt tables against a fresh rebuild of the same events: a rebuild under load that
/// lost or doubled a write shows here as differing rows.
async fn print_verification(pool: &deadpool_postgres::Pool) -> anyhow::Result<()> {
    let verify = OnlineOptions {
        verify_only: true,
        pause_ratio: 0.0,
        ..Default::default()
    };
    let verified = rebuild_online(pool, verify, |_, _, _| {}).await?;
    let different: u64 = verified.differences.iter().map(|(_, n)| n).sum();
    outln!(
        "rebuilt tables vs a fresh rebuild: {different} differing rows ({:?})",
        verified.differences
    );
    Ok(())
}

/// The kernel's write-back thresholds on this host, which decide the longest stall when the
/// database's WAL and tables share a disk (docs/operators.md, "Write stalls and the kernel's
/// write-back"; the figures per threshold in docs/benchmarks.md, "Online rebuild").
/// They matter on the database's host: this reads the bench's own, the same one on the stack.
fn write_back_settings() -> String {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .map(|value| value.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into())
    };
    let bytes = read("dirty_background_bytes");
    let threshold = if bytes == "0" {
        format!("{}% of memory", read("dirty_background_ratio"))
    } else {
        format!("{bytes} bytes")
    };
    format!(
        "this host's background write-back starts at {threshold} of dirty pages \
         (vm.dirty_background_bytes/_ratio; docs/benchmarks.md's figures: 8388608 bytes keeps the \
         longest stall under 100 ms, 10% of 24 GiB does not)"
    )
}

/// `events - 1` assignments of new businesses to `contact` (after its creation), inserted
/// straight into `events`: the rebuild reads events only.
async fn seed(pool: &deadpool_postgres::Pool, contact: Uuid, events: usize) -> anyhow::Result<()> {
    let client = pool.get().await?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    let now = Utc::now();
    let mut remaining = events.saturating_sub(1);
    while remaining > 0 {
        let count = remaining.min(SEED_CHUNK);
        remaining -= count;
        let mut ids = Vec::with_capacity(count);
        let mut streams = Vec::with_capacity(count);
        let mut payloads = Vec::with_capacity(count);
        for _ in 0..count {
            let (event_id, business) = (Uuid::now_v7(), Uuid::now_v7());
            let stream = assignment_stream(business, texas);
            let envelope = v1::Envelope {
                event_id: event_id.to_string(),
                stream: stream.clone(),
                stream_version: 1,
                event_type: "AssignmentStarted".into(),
                schema_version: 1,
                recorded_at_micros: now.timestamp_micros(),
                effective_at_micros: now.timestamp_micros(),
                actor: "bench".into(),
                correlation_id: event_id.to_string(),
                causation_id: String::new(),
                event: Some(ra_ledger::events::assignment_started(
                    Uuid::now_v7(),
                    business,
                    texas,
                    contact,
                    None,
                )),
            };
            ids.push(event_id);
            streams.push(stream);
            payloads.push(envelope.encode_to_vec());
        }
        client
            .execute(
                include_str!("sql/rebuild_events.sql"),
                &[&ids, &streams, &payloads, &now],
            )
            .await?;
    }
    Ok(())
}

/// Assigns new businesses at `rate` per second until `stop`; each write's start and latency.
async fn write_at(
    ledger: Ledger,
    metadata: Metadata,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<(Instant, Duration)>> {
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let mut next = Instant::now();
    let mut writes = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(next.into()).await;
        next += gap;
        let started = Instant::now();
        ledger
            .assign(
                Assign {
                    business_id: Uuid::now_v7(),
                    jurisdiction: "TX".into(),
                    effective_at: None,
                },
                &metadata,
            )
            .await?;
        writes.push((started, started.elapsed()));
    }
    Ok(writes)
}
