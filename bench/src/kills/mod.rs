//! `ledger-bench kills`: what a kill -9 of the relay costs in duplicates under a steady
//! load, and why: how far the slot's confirmed position trails what Kafka holds.
//!
//! `ledger relay` (this very binary) runs as a process of its own on a scratch database,
//! slot and topics, while a writer commits a steady load into the outbox. Every so often
//! the process gets SIGKILL and is started again at once with the same command, as a kill
//! test from outside would do. One consumer reads the topic from the start throughout, and
//! a sampler reads the slot's `confirmed_flush_lsn` every [`SAMPLE_EVERY`]; [`figures`]
//! turns what they saw into the figures printed.

mod figures;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use ra_ledger::db;
use ra_ledger_cdc::config::position_topic;
use ra_ledger_cdc::lsn::parse_lsn;
use rand::Rng as _;
use rdkafka::Message as _;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::Headers as _;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::peers::process::{Peer, relay_launch};
use crate::{latency, scratch};
use figures::{Figures, Kill, Receipt, Sample};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Events per second written throughout.
    pub rate: u64,
    /// Kills, each followed by a restart.
    pub kills: usize,
    /// The mean time from a start to the next kill; each wait is drawn between half and one
    /// and a half times it.
    pub every: Duration,
    /// The relay's `status_interval_ms`, when not its default.
    pub status_interval_ms: Option<u64>,
}

/// How often the sampler reads the slot.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// How long the end waits for the last events to reach the consumer.
const DRAIN: Duration = Duration::from_secs(120);

/// The load's rows: aggregate type `$1`, sequence numbers `$2..=$3`.
const INSERT: &str = include_str!("../sql/peer_rows.sql");

/// Their aggregate type, and so their topic's suffix.
const AGGREGATE: &str = "kill";

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    if options.rate == 0 || options.kills == 0 || options.every < Duration::from_millis(200) {
        anyhow::bail!("--rate and --kills must be at least 1, --every at least 0.2 s");
    }
    let scratch = scratch::database(database_url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "kills").await?;
    let prefix = scratch::topic_prefix(brokers, "kills");
    let topic = format!("{prefix}{AGGREGATE}");
    ra_ledger_testing::create_topics(brokers, std::slice::from_ref(&topic), 3).await?;
    ra_ledger_testing::create_topics(brokers, &[position_topic(&prefix)], 1).await?;
    let dir = std::env::temp_dir().join(format!("ledger-bench-kills-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let mut launch = relay_launch(&scratch, &slot, &prefix, brokers, &dir)?;
    let status_interval_ms = options
        .status_interval_ms
        .unwrap_or(ra_ledger_cdc::config::RelayConfig::default().status_interval_ms);
    if let Some(ms) = options.status_interval_ms {
        let file = dir.join("relay.toml");
        std::fs::write(&file, format!("status_interval_ms = {ms}\n"))?;
        launch.args = vec![
            "relay".into(),
            "--config".into(),
            file.display().to_string(),
        ];
    }
    outln!(
        "kills: {} kill -9 of `ledger relay` at {} events/s ({} rows every 10 ms), one every {:.1} s on average (drawn between half and 1.5 times); status_interval_ms {status_interval_ms}",
        options.kills,
        options.rate,
        (options.rate / 100).max(1),
        options.every.as_secs_f64(),
    );

    let stop = CancellationToken::new();
    let distinct = Arc::new(AtomicUsize::new(0));
    let consumer = tokio::spawn(consume(
        latency::assigned_consumer(brokers, &topic)?,
        Arc::clone(&distinct),
        stop.clone(),
    ));
    let sampler = tokio::spawn(sample(
        db::connect(&scratch.url, "ledger-bench").await?,
        slot.clone(),
        stop.clone(),
    ));
    let writing = CancellationToken::new();
    let writer = tokio::spawn(write(
        db::connect(&scratch.url, "ledger-bench").await?,
        options.rate,
        writing.clone(),
    ));
    let started = Instant::now();
    let mut peer = Peer::start(launch)?;
    let outcome = kill_repeatedly(&client, &slot, &mut peer, &distinct, &options).await;
    writing.cancel();
    let written: HashSet<String> = writer.await??.into_iter().collect();
    let kills = outcome?;
    eprintln!(
        "waiting for the consumer to read all {} events…",
        written.len()
    );
    let deadline = Instant::now() + DRAIN;
    while distinct.load(Ordering::Relaxed) < written.len() && Instant::now() < deadline {
        peer.ensure_running()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Copies sent before the last events may still be on their way on other partitions.
    tokio::time::sleep(Duration::from_secs(2)).await;
    peer.stop(Duration::from_secs(15)).await?;
    stop.cancel();
    let receipts = consumer.await?;
    let samples = sampler.await??;
    drop(client);
    scratch.drop().await?;
    let figures = figures::figures(started, &written, &receipts, &samples, &kills);
    print(&figures);
    outln!("the relay's log: {}", dir.join("relay.log").display());
    Ok(())
}

/// Kills and restarts the relay `options.kills` times, once the first event went through;
/// each kill with the slot's position as the killed relay left it.
async fn kill_repeatedly(
    client: &tokio_postgres::Client,
    slot: &str,
    peer: &mut Peer,
    distinct: &AtomicUsize,
    options: &Options,
) -> anyhow::Result<Vec<Kill>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while distinct.load(Ordering::Relaxed) == 0 {
        peer.ensure_running()?;
        anyhow::ensure!(
            Instant::now() < deadline,
            "no event went through the relay within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut kills = Vec::with_capacity(options.kills);
    for number in 1..=options.kills {
        let wait = options.every.mul_f64(rand::rng().random_range(0.5..1.5));
        tokio::time::sleep(wait).await;
        let walsender = slot_state(client, slot).await?.1;
        let at = Instant::now();
        peer.kill_and_restart().await?;
        let restarted = Instant::now();
        let confirmed = released(client, slot, walsender).await?;
        eprintln!(
            "kill {number} of {}: slot confirmed {} as the killed relay left it",
            options.kills,
            ra_ledger_cdc::lsn::format_lsn(confirmed)
        );
        kills.push(Kill {
            at,
            restarted,
            confirmed,
        });
    }
    tokio::time::sleep(options.every).await;
    Ok(kills)
}

/// The slot's confirmed position and the pid of the walsender holding it.
async fn slot_state(
    client: &tokio_postgres::Client,
    slot: &str,
) -> anyhow::Result<(u64, Option<i32>)> {
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    let confirmed: Option<String> = row.get(0);
    let confirmed = confirmed.as_deref().and_then(parse_lsn).unwrap_or(0);
    Ok((confirmed, row.get(1)))
}

/// The slot's confirmed position once `walsender`, the killed relay's, let it go: by then
/// PostgreSQL has every status update the relay sent.
async fn released(
    client: &tokio_postgres::Client,
    slot: &str,
    walsender: Option<i32>,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (confirmed, holder) = slot_state(client, slot).await?;
        if walsender.is_none() || holder != walsender {
            return Ok(confirmed);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the killed relay's walsender held the slot for 30 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Writes `rate` events/s (a transaction of rate/100 rows every 10 ms) until `stop`;
/// returns their ids.
async fn write(
    client: tokio_postgres::Client,
    rate: u64,
    stop: CancellationToken,
) -> anyhow::Result<Vec<String>> {
    let per_tick = (rate / 100).max(1) as i64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut ids = Vec::new();
    let mut from = 0i64;
    while !stop.is_cancelled() {
        tick.tick().await;
        let rows = client
            .query(INSERT, &[&AGGREGATE, &from, &(from + per_tick - 1)])
            .await?;
        ids.extend(rows.iter().map(|row| row.get::<_, String>(0)));
        from += per_tick;
    }
    Ok(ids)
}

/// Reads every message until `stop`, counting the distinct events in `distinct`.
async fn consume(
    consumer: StreamConsumer,
    distinct: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Vec<Receipt> {
    let mut receipts = Vec::new();
    let mut seen = HashSet::new();
    let mut stream = consumer.stream();
    loop {
        let message = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            message = stream.next() => message,
        };
        let Some(Ok(message)) = message else {
            continue;
        };
        let at = Instant::now();
        let header = |name: &str| {
            message
                .headers()
                .and_then(|headers| headers.iter().find(|h| h.key == name))
                .and_then(|h| std::str::from_utf8(h.value?).ok().map(str::to_owned))
        };
        let (Some(id), Some(commit_lsn), Some(committed)) = (
            header("id"),
            header("commit_lsn").as_deref().and_then(parse_lsn),
            header("commit_timestamp")
                .and_then(|text| chrono::DateTime::parse_from_rfc3339(&text).ok()),
        ) else {
            continue;
        };
        if seen.insert(id.clone()) {
            distinct.store(seen.len(), Ordering::Relaxed);
        }
        receipts.push(Receipt {
            id,
            commit_lsn,
            commit_micros: committed.timestamp_micros(),
            at,
        });
    }
    receipts
}

/// Reads the slot's confirmed position every [`SAMPLE_EVERY`] until `stop`.
async fn sample(
    client: tokio_postgres::Client,
    slot: String,
    stop: CancellationToken,
) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.is_cancelled() {
        tick.tick().await;
        let (confirmed, _) = slot_state(&client, &slot).await?;
        samples.push(Sample {
            at: Instant::now(),
            confirmed,
        });
    }
    Ok(samples)
}

fn print(figures: &Figures) {
    let seconds = |d: Option<std::time::Duration>| {
        d.map_or_else(|| "-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
    };
    for (number, kill) in figures.kills.iter().enumerate() {
        outln!(
            "kill {}: after {:.1} s of life; Kafka had {} events past the slot's confirmed position, {} of commits; {} duplicates read after the restart, the first {} after it; the slot moved {} after it",
            number + 1,
            kill.life.as_secs_f64(),
            kill.past_confirmed,
            seconds(kill.trailing),
            kill.duplicates,
            seconds(kill.resent),
            seconds(kill.first_move),
        );
    }
    let trailing: Vec<f64> = figures
        .kills
        .iter()
        .filter_map(|kill| kill.trailing.map(|d| d.as_secs_f64()))
        .collect();
    outln!(
        "{} written, {} received: {} lost, {} duplicates, {:.0} per kill; the slot trailed Kafka by {:.2} s of commits at a kill on average",
        figures.written,
        figures.received,
        figures.lost,
        figures.duplicates,
        figures.per_kill(),
        trailing.iter().sum::<f64>() / trailing.len().max(1) as f64,
    );
    match &figures.receipt_to_confirmed {
        Some(delays) => outln!(
            "consumer receipt -> slot confirmed past the event, {} events confirmed by the relay that sent them: {delays}; {} cut by a kill first",
            delays.count,
            figures.cut_by_kills
        ),
        None => outln!("no event was confirmed by the relay that sent it"),
    }
    if let Some(moves) = &figures.moves {
        outln!(
            "between two moves of the slot within one life ({} intervals, the slot read every {} ms): {moves}",
            moves.count,
            SAMPLE_EVERY.as_millis()
        );
    }
}
