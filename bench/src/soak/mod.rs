//! `ledger-bench soak`: an hour (or `--minutes`) under a steady load, to show that nothing
//! grows with time that should not: each process's resident memory, the outbox, the WAL
//! the relay's slot holds back, the relay's lag. Faults and peaks have benchmarks of their
//! own; a leak or a backlog that builds by a little a minute shows only over a long run.
//!
//! The stack runs as in production ([`stack`]): `ledger serve` (outbox retention and
//! digests on), `ledger relay` and `ledger worker`, each a process, on a scratch database
//! and topics of the run. The load is the write path a client uses: batches of new
//! assignments through `POST /v1/assignments/batch`, `--rate` events a second. Every
//! `--every` a sample is read and printed; at the end `ledger reconcile`'s check compares
//! the topics with the ledger (0 lost required), each series gets a verdict
//! ([`series`]), and the samples are written as CSV and as a picture ([`svg`]) to `--out`.

mod series;
mod stack;
mod svg;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ra_ledger::{db, reconcile, retention};
use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::scratch;
use series::{SERIES, Sample};
use stack::{Place, Stack, WRITER_TOKEN};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events per second.
    pub rate: u64,
    /// How long the load runs.
    pub duration: Duration,
    /// Time between samples.
    pub every: Duration,
    /// Whether `ledger serve` seals digests.
    pub digests: bool,
    /// Where the CSV, the picture and the parts' logs go.
    pub out: PathBuf,
}

/// The jurisdictions the load assigns businesses in, in turn.
const JURISDICTIONS: [&str; 4] = ["TX", "CA", "NY", "DE"];

/// Most load requests in flight: beyond it a tick is skipped, and the rate printed at the
/// end says the load fell behind.
const MAX_IN_FLIGHT: usize = 8;

/// How long reconcile waits for the relay to confirm past the ledger's snapshot.
const SETTLE: Duration = Duration::from_secs(120);

/// The relay's gauge of its lag.
const LAG_METRIC: &str = "ra_relay_oldest_unconfirmed_commit_age_seconds";

/// `10s`, `1m`, or a number of seconds: `--every`.
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = match text.strip_suffix('m') {
        Some(minutes) => (minutes, 60.0),
        None => (text.strip_suffix('s').unwrap_or(text), 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value * scale >= 1.0 => {
            Ok(Duration::from_secs_f64(value * scale))
        }
        _ => Err(format!(
            "{text:?}: expected a time of at least 1 s, such as 10s, 60s or 1m"
        )),
    }
}

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    anyhow::ensure!(options.rate > 0, "--rate must be at least 1 event/s");
    anyhow::ensure!(
        options.duration >= options.every * 2,
        "--minutes ({:.1} min) must hold at least two samples of --every ({:?})",
        options.duration.as_secs_f64() / 60.0,
        options.every
    );
    std::fs::create_dir_all(&options.out).map_err(|error| {
        anyhow::anyhow!("cannot create --out {}: {error}", options.out.display())
    })?;
    let scratch = scratch::database(database_url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "soak").await?;
    let prefix = scratch::topic_prefix(brokers, "soak");
    ra_ledger::topics::create_missing(
        brokers,
        &Default::default(),
        &ra_ledger::topics::plan(&prefix, 3),
    )
    .await?;
    let place = Place {
        scratch: &scratch,
        slot: &slot,
        prefix: &prefix,
        brokers,
        dir: &options.out,
        digests: options.digests,
    };
    let mut stack = Stack::start(place).await?;
    outln!(
        "soak: {} events/s for {:.1} min through POST /v1/assignments/batch, sampled every {:?}; ledger serve (retention, digests {}), relay and worker as processes; load average {} at the start",
        options.rate,
        options.duration.as_secs_f64() / 60.0,
        options.every,
        if options.digests { "on" } else { "off" },
        load_average()
    );
    let http = stack::client()?;
    let pool = db::pool(&scratch.url, "ledger-bench-soak", 2)?;
    let samples = run_load(&mut stack, &http, &pool, &slot, &options).await?;
    let relay_config = scratch.relay_config(slot.clone(), prefix.clone(), brokers);
    let report = reconcile::run(
        &pool,
        &relay_config,
        &reconcile::Options {
            settle: SETTLE,
            ..Default::default()
        },
    )
    .await?;
    stack.stop().await?;
    drop(client);
    drop(pool);
    scratch.drop().await?;
    finish(&samples, &options, &report)
}

/// The load and the samples, until the run's time is up; then the load stops and its
/// requests in flight finish.
async fn run_load(
    stack: &mut Stack,
    http: &reqwest::Client,
    pool: &deadpool_postgres::Pool,
    slot: &str,
    options: &Options,
) -> anyhow::Result<Vec<Sample>> {
    for code in JURISDICTIONS {
        post(http, &stack.api, "/v1/contacts", contact(code)).await?;
    }
    let written = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let load = tokio::spawn(write(
        http.clone(),
        stack.api.clone(),
        options.rate,
        Arc::clone(&written),
        stop.clone(),
    ));
    let started = Instant::now();
    let mut samples = Vec::new();
    outln!("{}", series::table_header());
    let sampled = loop {
        if load.is_finished() {
            break Err(anyhow::anyhow!("the load stopped early"));
        }
        let sample = match read_sample(stack, http, pool, slot, started, &written).await {
            Ok(sample) => sample,
            Err(error) => break Err(error),
        };
        outln!("{}", series::table_row(&sample));
        samples.push(sample);
        let elapsed = started.elapsed();
        if elapsed >= options.duration {
            break Ok(());
        }
        let next = options.every * samples.len() as u32;
        tokio::time::sleep(next.min(options.duration).saturating_sub(elapsed)).await;
    };
    stop.cancel();
    let skipped = load.await??;
    sampled?;
    let seconds = started.elapsed().as_secs_f64();
    let total = written.load(Ordering::Relaxed);
    outln!(
        "load: {total} events in {seconds:.0} s, {:.0} events/s against {} asked; {skipped} ticks skipped with {MAX_IN_FLIGHT} requests in flight; load average {} at the end",
        total as f64 / seconds,
        options.rate,
        load_average()
    );
    Ok(samples)
}

/// One sample: the parts' memory, the outbox, the slot's WAL, the relay's lag.
async fn read_sample(
    stack: &mut Stack,
    http: &reqwest::Client,
    pool: &deadpool_postgres::Pool,
    slot: &str,
    started: Instant,
    written: &AtomicU64,
) -> anyhow::Result<Sample> {
    stack.ensure_running()?;
    let seconds = started.elapsed().as_secs_f64();
    let [serve, relay, worker] = stack.resident_mib()?;
    let outbox = retention::status(pool).await?;
    let wal: f64 = pool
        .get()
        .await?
        .query_one(include_str!("../sql/slot_retained_wal.sql"), &[&slot])
        .await?
        .get(0);
    let rendered = http
        .get(&stack.relay_metrics)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let lag = stack::metric(&rendered, LAG_METRIC).ok_or_else(|| {
        anyhow::anyhow!(
            "the relay's {} has no {LAG_METRIC}: is the ledger binary beside ledger-bench of this build?",
            stack.relay_metrics
        )
    })?;
    Ok(Sample {
        seconds,
        written: written.load(Ordering::Relaxed),
        values: [
            serve,
            relay,
            worker,
            outbox.rows as f64,
            outbox.bytes as f64 / 1_048_576.0,
            wal / 1_048_576.0,
            lag,
        ],
    })
}

/// Writes `rate` events a second, a batch of new assignments per request, until `stop`;
/// returns the ticks skipped because [`MAX_IN_FLIGHT`] requests were waiting. A refused
/// request fails the load: new businesses are never refused by a working service.
async fn write(
    http: reqwest::Client,
    api: String,
    rate: u64,
    written: Arc<AtomicU64>,
    stop: CancellationToken,
) -> anyhow::Result<u64> {
    let per_request = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(per_request as f64 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut in_flight = JoinSet::new();
    let (mut skipped, mut turn) = (0, 0);
    while !stop.is_cancelled() {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        while let Some(done) = in_flight.try_join_next() {
            done??;
        }
        if in_flight.len() >= MAX_IN_FLIGHT {
            skipped += 1;
            continue;
        }
        let items: Vec<_> = (0..per_request)
            .map(|_| {
                turn += 1;
                json!({"business_id": Uuid::new_v4(),
                       "jurisdiction": JURISDICTIONS[turn % JURISDICTIONS.len()]})
            })
            .collect();
        let (http, api, written) = (http.clone(), api.clone(), Arc::clone(&written));
        in_flight.spawn(async move {
            post(
                &http,
                &api,
                "/v1/assignments/batch",
                json!({ "items": items }),
            )
            .await?;
            written.fetch_add(per_request, Ordering::Relaxed);
            anyhow::Ok(())
        });
    }
    while let Some(done) = in_flight.join_next().await {
        done??;
    }
    Ok(skipped)
}

/// POSTs `body` as the writer; fails on any answer but 2xx, with the answer.
async fn post(
    http: &reqwest::Client,
    api: &str,
    path: &str,
    body: serde_json::Value,
) -> anyhow::Result<()> {
    let response = http
        .post(format!("{api}{path}"))
        .bearer_auth(WRITER_TOKEN)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    anyhow::ensure!(
        status.is_success(),
        "POST {path} answered {status}: {}",
        response.text().await.unwrap_or_default()
    );
    Ok(())
}

/// A first primary contact for jurisdiction `code`.
fn contact(code: &str) -> serde_json::Value {
    json!({"jurisdiction": code, "name": format!("{code} Soak Agents"),
           "address": {"line1": "1 Main St", "city": "Capital City", "region": code,
                       "postal_code": "10001"}})
}

/// The verdicts, reconcile's check and the files; fails when an event was lost.
fn finish(samples: &[Sample], options: &Options, report: &reconcile::Report) -> anyhow::Result<()> {
    let run_seconds = options.duration.as_secs_f64();
    let trends = series::trends(samples, run_seconds);
    outln!(
        "verdicts after the first {:.0}% of the run ({:.0} s) as warm-up:",
        series::WARM_UP * 100.0,
        series::WARM_UP * run_seconds
    );
    for (series, trend) in SERIES.iter().zip(&trends) {
        outln!("  {}", series::verdict_line(series, trend));
    }
    outln!(
        "reconcile: events {} | records {} | lost {} | phantom {} | duplicates {} | order inversions {} | unseen {} | relay caught up: {}",
        report.events,
        report.records,
        report.lost,
        report.phantom,
        report.duplicates,
        report.inversions(),
        report.unseen,
        report.caught_up
    );
    let csv = options.out.join("samples.csv");
    std::fs::write(&csv, series::csv(samples))?;
    let picture = options.out.join("soak.svg");
    let warm_up = series::WARM_UP * run_seconds;
    std::fs::write(&picture, svg::picture(samples, &trends, warm_up))?;
    outln!(
        "wrote {} and {} (logs of the parts beside them)",
        csv.display(),
        picture.display()
    );
    anyhow::ensure!(
        report.lost == 0 && report.clean(),
        "{} lost and {} phantom events: the topics and the ledger disagree",
        report.lost,
        report.phantom
    );
    Ok(())
}

/// The machine's 1-, 5- and 15-minute load averages, as `/proc/loadavg` gives them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reads_seconds_and_minutes_and_refuses_less_than_a_second() {
        assert_eq!(parse_every("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_every("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_every("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_every("0s").is_err());
        assert!(parse_every("500ms").is_err());
        assert!(parse_every("soon").is_err());
    }
}
