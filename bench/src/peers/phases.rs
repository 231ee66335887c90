//! The phases one system goes through on one process: the drain of the backlog, the steady
//! loads, and the kill -9 under load, each read by the same consumer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::load::{self, Delivery};
use super::process::{Launch, Peer};
use super::{IDLE, Options};
use crate::figures::Latencies;
use crate::latency;

/// One system's figures.
#[derive(Debug)]
pub struct Figures {
    pub drain: Drain,
    pub steady: Vec<(u64, Steady)>,
    pub kill: Kill,
}

/// The drain of the backlog written before the system started.
#[derive(Debug)]
pub struct Drain {
    pub rows: u64,
    /// Start of the process -> the consumer had every row.
    pub from_start: Duration,
    /// The consumer's first row -> its last.
    pub first_to_last: Duration,
    /// CPU seconds of the process between the first and the last row.
    pub cpu_drain: f64,
    /// CPU seconds of the process from its start to the last row.
    pub cpu_total: f64,
    pub delivery: Delivery,
}

/// One steady phase.
#[derive(Debug)]
pub struct Steady {
    pub sent: u64,
    pub latencies: Option<Latencies>,
    pub delivery: Delivery,
}

/// The phase with a kill -9 in it.
#[derive(Debug)]
pub struct Kill {
    pub written: u64,
    /// The longest wait between two new events at the consumer: the kill's outage as a
    /// reader sees it (messages produced just before the kill still arrive after it).
    pub stall: Option<Duration>,
    pub delivery: Delivery,
}

/// One system under test: the scratch database's client, the broker, the system's topic
/// prefix, and its process.
struct Arena<'a> {
    client: &'a tokio_postgres::Client,
    brokers: &'a str,
    prefix: &'a str,
    peer: Peer,
}

/// One phase's load: `rate` events/s for `duration` on the topic of `aggregate_type`, from
/// sequence number `first`.
struct Load<'a> {
    aggregate_type: &'a str,
    first: i64,
    rate: u64,
    duration: Duration,
}

/// Starts the consumer of the backlog, then the system; runs every phase on it; stops it.
pub async fn run_phases(
    client: &tokio_postgres::Client,
    brokers: &str,
    launch: Launch,
    prefix: &str,
    options: &Options,
) -> anyhow::Result<Figures> {
    let consumer = latency::assigned_consumer(brokers, &format!("{prefix}drain"))?;
    let progress = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(load::consume(
        consumer,
        options.rows,
        IDLE,
        Arc::clone(&progress),
    ));
    let started = Instant::now();
    let mut arena = Arena {
        client,
        brokers,
        prefix,
        peer: Peer::start(launch)?,
    };
    let outcome = async {
        let drain = drain(&mut arena.peer, options.rows, reader, &progress, started).await?;
        let (steady, kill) = loaded_phases(&mut arena, options).await?;
        Ok(Figures {
            drain,
            steady,
            kill,
        })
    }
    .await;
    arena.peer.stop(Duration::from_secs(30)).await?;
    outcome
}

/// The steady phases, then the kill.
async fn loaded_phases(
    arena: &mut Arena<'_>,
    options: &Options,
) -> anyhow::Result<(Vec<(u64, Steady)>, Kill)> {
    let mut first = options.rows as i64;
    let mut steady = Vec::new();
    for &rate in &options.rates {
        let aggregate_type = format!("steady_{rate}");
        let load = Load {
            aggregate_type: &aggregate_type,
            first,
            rate,
            duration: Duration::from_secs(options.seconds),
        };
        let (figures, _) = steady_phase(arena, load, None).await?;
        first += figures.sent as i64 + 1;
        steady.push((rate, figures));
    }
    let load = Load {
        aggregate_type: "kill",
        first,
        rate: options.kill_rate,
        duration: Duration::from_secs(options.kill_seconds),
    };
    let kill_after = load.duration / 3;
    let (figures, killed_at) = steady_phase(arena, load, Some(kill_after)).await?;
    let stall = killed_at.map(|_| longest_stall(&figures.delivery));
    Ok((
        steady,
        Kill {
            written: figures.sent,
            stall,
            delivery: figures.delivery,
        },
    ))
}

/// The longest time between two consecutive first receipts.
fn longest_stall(delivery: &Delivery) -> Duration {
    let mut receipts: Vec<Instant> = delivery.first_receipt.values().copied().collect();
    receipts.sort();
    receipts
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]))
        .max()
        .unwrap_or_default()
}

/// Waits for the consumer to have every row of the backlog, reading the process's CPU at
/// the first and the last.
async fn drain(
    peer: &mut Peer,
    rows: u64,
    reader: tokio::task::JoinHandle<Delivery>,
    progress: &AtomicU64,
    started: Instant,
) -> anyhow::Result<Drain> {
    let mut cpu_first = None;
    while progress.load(Ordering::Relaxed) < rows && !reader.is_finished() {
        peer.ensure_running()?;
        if cpu_first.is_none() && progress.load(Ordering::Relaxed) > 0 {
            cpu_first = Some(peer.cpu_seconds()?);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu_total = peer.cpu_seconds()?;
    let delivery = reader.await?;
    let (Some(first), Some(last)) = (delivery.first, delivery.last_new) else {
        anyhow::bail!("drain: the consumer received nothing within {IDLE:?}");
    };
    Ok(Drain {
        rows,
        from_start: last.duration_since(started),
        first_to_last: last.duration_since(first),
        cpu_drain: cpu_total - cpu_first.unwrap_or(0.0),
        cpu_total,
        delivery,
    })
}

/// The load, after one warm-up row; with `kill_after`, a kill -9 and restart of the process
/// that far into it. Returns the figures and the moment of the kill.
async fn steady_phase(
    arena: &mut Arena<'_>,
    load: Load<'_>,
    kill_after: Option<Duration>,
) -> anyhow::Result<(Steady, Option<Instant>)> {
    let Load {
        aggregate_type,
        first,
        rate,
        duration,
    } = load;
    let Arena {
        client,
        brokers,
        prefix,
        peer,
    } = arena;
    let per_tick = (rate / 100).max(1);
    let sent = per_tick * (duration.as_millis() / 10) as u64;
    let consumer = latency::assigned_consumer(brokers, &format!("{prefix}{aggregate_type}"))?;
    let progress = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(load::consume(
        consumer,
        sent + 1,
        IDLE,
        Arc::clone(&progress),
    ));
    // Warm-up: one row through the system, the broker and the consumer's first fetch.
    load::backlog(client, aggregate_type, first, 1, 1).await?;
    let deadline = Instant::now() + IDLE;
    while progress.load(Ordering::Relaxed) == 0 {
        peer.ensure_running()?;
        anyhow::ensure!(
            Instant::now() < deadline,
            "{aggregate_type}: the warm-up row did not arrive within {IDLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "{aggregate_type}: {rate} events/s for {} s{}…",
        duration.as_secs(),
        if kill_after.is_some() {
            ", kill -9 a third into it"
        } else {
            ""
        }
    );
    let mut killed_at = None;
    let kill = kill_after.map(|after| {
        let killed_at = &mut killed_at;
        let peer = &mut *peer;
        (after, move || async move {
            *killed_at = Some(Instant::now());
            peer.kill_and_restart().await
        })
    });
    let committed = load::steady(client, aggregate_type, first + 1, rate, duration, kill).await?;
    let delivery = reader.await?;
    peer.ensure_running()?;
    let latencies = Latencies::from_samples(
        committed
            .at
            .iter()
            .filter_map(|(id, committed)| {
                delivery
                    .first_receipt
                    .get(id)
                    .map(|received| received.saturating_duration_since(*committed))
            })
            .collect(),
    );
    Ok((
        Steady {
            sent: committed.at.len() as u64,
            latencies,
            delivery,
        },
        killed_at,
    ))
}
